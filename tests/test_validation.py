"""`keras_transformer.validation`: the one public module of argument checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from keras_transformer.validation import (
    check_grid,
    check_int,
    check_pair,
    check_positive_int,
)

PACKAGE = Path(__file__).resolve().parents[1] / "keras_transformer"


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "4", None])
def test_positive_int_names_the_argument_and_the_value(value):
    with pytest.raises(ValueError) as caught:
        check_positive_int("model.d_model", value)
    message = str(caught.value)
    assert message == (
        f"`model.d_model` must be a positive integer. Received: model.d_model={value!r}"
    )
    assert "\n" not in message


def test_positive_int_accepts_positive_integers_and_none_when_allowed():
    check_positive_int("n", 1)
    check_positive_int("n", None, allow_none=True)
    with pytest.raises(ValueError, match="positive integer or null"):
        check_positive_int("n", 0, allow_none=True)
    # One wording: `check_int(minimum=1)` says the same.
    with pytest.raises(ValueError, match="^`n` must be a positive integer\\."):
        check_int("n", 0, 1)


def test_the_positive_integer_message_is_written_once_in_the_package():
    """Every positive-integer check goes through `check_positive_int`."""
    writers = [
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "must be a positive integer" in path.read_text(encoding="utf-8")
        or '"a positive integer"' in path.read_text(encoding="utf-8")
    ]
    assert writers == ["validation.py"]


def test_check_pair():
    assert check_pair("query_block", (2, np.int64(3)), 1) == (2, 3)
    assert check_pair("memory_flange", [0, 0], 0) == (0, 0)
    assert all(type(x) is int for x in check_pair("q", (np.int32(1), 2), 1))
    for bad in [(0, 1), (1,), (1, 2, 3), (True, 2), (1.0, 2), "12", 3]:
        with pytest.raises(ValueError, match="pair of positive integers"):
            check_pair("query_block", bad, 1)
    with pytest.raises(ValueError, match="pair of non-negative integers"):
        check_pair("memory_flange", (-1, 0), 0)


def test_check_grid():
    check_grid(8, 12, (4, 6))
    check_grid(np.int64(4), 4, (2, 2))
    with pytest.raises(ValueError, match="static image size; `rows` must be a"):
        check_grid(None, 4, (2, 2))
    with pytest.raises(ValueError, match="The image `cols` must be positive"):
        check_grid(4, 0, (2, 2))
    with pytest.raises(ValueError, match=r"larger than .* query_block=\(2, 2\)"):
        check_grid(1, 4, (2, 2))
    with pytest.raises(ValueError, match=r"Pad the image to 6 rows x 4 columns"):
        check_grid(5, 4, (2, 2))


def test_check_known_names_names_the_unknown_and_lists_the_known():
    from keras_transformer.validation import check_known_names

    check_known_names({"a": 1}, ["a", "b"], "settings")
    with pytest.raises(ValueError) as caught:
        check_known_names(["zz", "a", "c"], ("b", "a"), "`data` settings")
    assert str(caught.value) == (
        "Unknown `data` settings: ['c', 'zz']. Known: ['a', 'b']."
    )
    with pytest.raises(ValueError, match=r"^Unknown x: \['q'\]\. Listed: \['p'\]\.$"):
        check_known_names(["q"], ["p"], "x", listing="Listed")
    # Misspellings get the closest known name (none for 'zz').
    with pytest.raises(ValueError) as caught:
        check_known_names(["train_step"], ["train_steps", "epochs"], "`train` settings")
    assert str(caught.value) == (
        "Unknown `train` settings: ['train_step']. Did you mean 'train_steps'? "
        "Known: ['epochs', 'train_steps']."
    )
    with pytest.raises(ValueError, match=r"Did you mean 'epochs' for 'epoch'\? Known"):
        check_known_names(["epoch", "zz"], ["train_steps", "epochs"], "settings")


def test_check_fields_names_each_field_by_its_config_key():
    import dataclasses

    from keras_transformer.validation import check_fields, check_rate

    @dataclasses.dataclass
    class Section:
        dropout: float = 0.1
        size: int | None = None

    check_fields(check_rate, Section(), ("dropout",), section="model")
    check_fields(check_positive_int, Section(), ("size",), allow_none=True)
    with pytest.raises(ValueError, match=r"^`model\.dropout` must be a rate"):
        check_fields(check_rate, Section(dropout=1.5), ("dropout",), section="model")
    with pytest.raises(ValueError, match=r"^`size` must be a positive integer\. "):
        check_fields(check_positive_int, Section(size=0), ("size",))
    with pytest.raises(
        ValueError, match=r"`model\.size` must be a positive integer or null"
    ):
        check_fields(
            check_positive_int,
            Section(size=0),
            ("size",),
            section="model",
            allow_none=True,
        )


def _entry_points():
    from keras_transformer.export import (
        CTranslate2Translator,
        LiteRTTranslator,
        ReviewClassifier,
        load_export,
    )
    from keras_transformer.runs import RunFolder
    from keras_transformer.training import average_checkpoints, load_trained_model
    from keras_transformer.translation import Translator

    return {
        "Translator.load": (lambda v: Translator.load(v), "`path`"),
        "Translator.from_runs": (lambda v: Translator.from_runs([v]), "Each of"),
        "CTranslate2Translator": (lambda v: CTranslate2Translator(v), "`folder`"),
        "LiteRTTranslator": (lambda v: LiteRTTranslator(v), "`path`"),
        "ReviewClassifier.load": (lambda v: ReviewClassifier.load(v), "`folder`"),
        "load_export": (lambda v: load_export(v), "`export_dir`"),
        "average_checkpoints": (lambda v: average_checkpoints(v), "`workdir`"),
        "load_trained_model": (lambda v: load_trained_model(v), "A run folder"),
        "RunFolder": (lambda v: RunFolder(v), "A run folder"),
    }


@pytest.mark.parametrize(
    "entry",
    [
        "Translator.load",
        "Translator.from_runs",
        "CTranslate2Translator",
        "LiteRTTranslator",
        "ReviewClassifier.load",
        "load_export",
        "average_checkpoints",
        "load_trained_model",
        "RunFolder",
    ],
)
@pytest.mark.parametrize("value", [None, 5])
def test_a_folder_argument_that_is_no_path_is_named(entry, value):
    """Each said only os.fspath's "expected str, bytes or os.PathLike
    object, not NoneType", naming no argument."""
    call, name = _entry_points()[entry]
    with pytest.raises(TypeError) as caught:
        call(value)
    message = str(caught.value)
    assert message.startswith(name) and message.endswith(f"Received: {value!r}")
    assert "a str or pathlib.Path" in message


def test_an_ensemble_of_one_string_is_refused_not_read_letter_by_letter():
    """``Translator.from_runs("run")`` looked for the runs "r", "u" and "n"."""
    from keras_transformer.translation import Translator

    with pytest.raises(TypeError, match="wrap one folder in a list"):
        Translator.from_runs("runs/dates")
