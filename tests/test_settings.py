"""One owner per setting: each default is declared once, and the deprecated
keywords of the configs are explicit `__init__`s, not patches.

The default test reads the package's source with `ast`: a *declaration* of a
setting's default is a literal written as the default of a parameter, as the
value of a dataclass field, or as a module constant, under one of the
setting's names. Each known default must be declared exactly once; every
other place names that declaration (``label_smoothing: float =
LABEL_SMOOTHING``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from keras_transformer.conventions import LABEL_SMOOTHING
from keras_transformer.models import presets
from keras_transformer.training.config import (
    TrainConfig,
    implied_label_smoothing,
)

PACKAGE = Path(__file__).resolve().parents[1] / "keras_transformer"

#: setting: (the names it is declared under, lower case; its default).
KNOWN_DEFAULTS = {
    "label smoothing (§5.4)": (("label_smoothing",), 0.1),
    "warm-up steps (Eq. 7)": (("warmup_steps",), 4000),
    "output allowance (§6.1)": (("extra_length",), 50),
    "tokens per batch": (("max_tokens_per_batch",), 4096),
}


def _declarations(tree: ast.AST) -> list[tuple[str, object, int]]:
    """``(name, literal, line)`` of every literal default in `tree`."""
    found = []

    def literal(node: ast.AST | None) -> object:
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
            return node.value
        return None

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            defaults = arguments.defaults
            with_default = positional[len(positional) - len(defaults) :]
            pairs = list(zip(with_default, defaults, strict=True))
            pairs += zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
            for argument, default in pairs:
                line = default.lineno if default is not None else node.lineno
                found.append((argument.arg, literal(default), line))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.append((node.target.id, literal(node.value), node.lineno))
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.append((target.id, literal(node.value), node.lineno))
    return [(name, value, line) for name, value, line in found if value is not None]


def declarations_of(names: tuple[str, ...], default: object) -> list[str]:
    """``"path:line"`` of each literal `default` declared under `names`."""
    places = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, value, line in _declarations(tree):
            lowered = name.lower()
            if value == default and any(lowered.endswith(n) for n in names):
                places.append(f"{path.relative_to(PACKAGE).as_posix()}:{line}")
    return places


@pytest.mark.parametrize("setting", sorted(KNOWN_DEFAULTS))
def test_each_default_is_declared_once(setting):
    names, default = KNOWN_DEFAULTS[setting]
    places = declarations_of(names, default)
    assert len(places) == 1, (
        f"The default {default!r} of {setting} is declared in {len(places)} "
        f"places ({', '.join(places)}): declare it once and name that constant."
    )


def test_the_declaration_finder_sees_parameters_fields_and_constants():
    """The finder itself: it would catch a repeated default."""
    source = """
X_LABEL_SMOOTHING = 0.1
def f(a, label_smoothing=0.1, *, b=2, warmup_steps=4000): ...
class C:
    label_smoothing: float = 0.1
    extra_length: int = EXTRA_LENGTH
"""
    found = {(name, value) for name, value, _ in _declarations(ast.parse(source))}
    assert found == {
        ("X_LABEL_SMOOTHING", 0.1),
        ("label_smoothing", 0.1),
        ("b", 2),
        ("warmup_steps", 4000),
    }
    # The one declaration of label smoothing: `conventions.LABEL_SMOOTHING`.
    [place] = declarations_of(("label_smoothing",), 0.1)
    assert place.startswith("conventions.py:")


# --------------------------------------------- label smoothing: one path
def test_label_smoothing_reaches_the_run_through_one_function():
    assert implied_label_smoothing("base") == LABEL_SMOOTHING
    assert implied_label_smoothing("table3_D_ls0.2") == 0.2
    assert implied_label_smoothing({"preset": "table3_D_ls0.0", "d_model": 64}) == 0
    assert implied_label_smoothing(presets["tiny"]) == LABEL_SMOOTHING
    # The setting wins over the preset's.
    config = TrainConfig(model="table3_D_ls0.2", train={"label_smoothing": 0.05})
    assert config.train.label_smoothing == 0.05


def test_the_data_pipeline_takes_the_settings_name():
    """``data.max_sentence_length`` keeps its name down to the pipeline."""
    import inspect

    from keras_transformer.data.batching import make_translation_dataset

    parameters = inspect.signature(make_translation_dataset).parameters
    assert "max_sentence_length" in parameters and "max_length" not in parameters


def test_the_source_cut_takes_the_decode_settings_name():
    """``max_input_length`` keeps its name down to `encode_sources`."""
    import inspect

    from keras_transformer.data.batching import encode_sources

    parameters = inspect.signature(encode_sources).parameters
    assert "max_input_length" in parameters and "max_length" not in parameters
    with pytest.raises(ValueError, match="max_input_length must be at least 2"):
        encode_sources(None, [], 1)
