"""kt.export for every kind: classification and image-completion SavedModels.

`keras-transformer export --workdir <run>` dispatches on the run's kind
(`export.export_run`); the translation export is tested in test_export.py.
"""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, export
from keras_transformer.data.imdb import cut_review_ids
from keras_transformer.files import file_sha256
from keras_transformer.image_sampling import ImageSampler
from keras_transformer.runs import RunFolder
from keras_transformer.training.classification import Reviews, encode_reviews
from keras_transformer.training.config import TrainConfig
from tests.export_helpers import child_env, transposes_by_dtype

#: Reviews of the synthetic set's words, then an empty one, upper case,
#: non-ASCII, and one longer than ``data.max_sentence_length`` (24).
REVIEWS = [
    "great acting and a wonderful story",
    "boring plot , awful ending",
    "",
    "GREAT MUSIC, WONDERFUL CAST",
    "Ünïcode café: terrible script",
    "the film " * 30 + "was wonderful",
]


def _python_cut(rows: list[list[int]], max_length: int, tail: int) -> list[list[int]]:
    """The review-cut rule as the training code wrote it before
    `cut_review_ids`: head, then the last `tail` tokens; empty -> [UNK]."""
    tail = min(tail, max_length)
    cut = []
    for ids in rows:
        if len(ids) > max_length:
            ids = ids[: max_length - tail] + (ids[-tail:] if tail else [])
        cut.append(ids or [1])
    return cut


@pytest.mark.parametrize("max_length, tail", [(8, 3), (8, 0), (8, 8), (8, 20), (1, 1)])
def test_the_review_cut_rule_in_tensorflow_is_the_python_rule(
    max_length: int, tail: int
) -> None:
    rng = np.random.default_rng(max_length + tail)
    rows = [rng.integers(4, 50, rng.integers(0, 20)).tolist() for _ in range(30)]
    rows.append([])
    ids = tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=1)
    got = cut_review_ids(ids, max_length, tail)
    assert got.to_list() == _python_cut(rows, max_length, tail)
    # In a graph too (the SavedModel's), with unknown lengths.
    graph = tf.function(lambda ids: cut_review_ids(ids, max_length, tail))
    assert graph(ids).to_list() == got.to_list()
    # A batch of empty reviews only: [UNK] each.
    empty = tf.ragged.constant([[], []], dtype=tf.int32, ragged_rank=1)
    assert cut_review_ids(empty, max_length, tail).to_list() == [[1], [1]]


# ------------------------------------------------------------ the two runs
@pytest.fixture(scope="module")
def classification_run(shared_classification_run: Path) -> Path:
    """The session's tiny classification run (tests/conftest.py), read only."""
    return shared_classification_run


@pytest.fixture(scope="module")
def image_run(shared_image_run: Path) -> Path:
    """The session's tiny image run (tests/conftest.py), read only."""
    return shared_image_run


@pytest.fixture(scope="module")
def exports(
    classification_run: Path, image_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Both runs exported by the command, as a user would."""
    root = tmp_path_factory.mktemp("exports")
    paths = {"classification": root / "imdb" / "1", "image": root / "patches" / "1"}
    for kind, run in (("classification", classification_run), ("image", image_run)):
        argv = ["export", "--workdir", str(run), "--output", str(paths[kind])]
        assert cli.main(argv) == 0
    return paths


_CHILD = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops

request = json.loads(sys.stdin.read())
texts = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
images = tf.saved_model.load(sys.argv[2]).signatures["serving_default"]
classified = texts(texts=tf.constant(request["reviews"]))
top_rows = tf.constant(np.array(request["top_rows"], np.uint8))
completed = [
    images(top_rows=top_rows, seed=tf.constant(seed, tf.int64))["images"]
    for seed in (3, 3, 4)
]
print(json.dumps({
    "imported_package": any(m.startswith("keras_transformer") for m in sys.modules),
    "probabilities": classified["probabilities"].numpy().tolist(),
    "labels": classified["labels"].numpy().tolist(),
    "dtype": completed[0].dtype.name,
    "images": [c.numpy().tolist() for c in completed],
}))
"""


def _settings_of(folder: Path) -> dict:
    """``export.json`` but the checksum of its ``model.keras`` (a file saved
    anew differs in its zip's dates), after checking that checksum."""
    info = json.loads((folder / "export.json").read_text())
    assert info.pop("file_sha256") == {
        "model.keras": file_sha256(folder / "model.keras")
    }
    return info


def _top_rows() -> np.ndarray:
    rng = np.random.default_rng(5)
    return rng.integers(0, 256, (3, 2, 4, 3)).astype(np.uint8)


@pytest.fixture(scope="module")
def served(exports: dict[str, Path]) -> dict:
    """What a fresh process with only TensorFlow (and TF Text) gets."""
    request = {"reviews": REVIEWS, "top_rows": _top_rows().tolist()}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(exports["classification"])]
        + [str(exports["image"])],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------- classification
def test_a_classification_export_classifies_raw_reviews_like_the_model(
    classification_run: Path, exports: dict[str, Path], served: dict
) -> None:
    assert not served["imported_package"]
    folder = RunFolder(classification_run)
    model, tokenizer = folder.load()
    config = TrainConfig.load(folder.config_file)
    # The reviews as training reads them: lowercased, tokenized, cut.
    lowered = Reviews([text.lower() for text in REVIEWS], np.zeros(len(REVIEWS)))
    flat, lengths = encode_reviews(lowered, tokenizer, config)
    assert lengths.max() == config.data.max_sentence_length  # the long one is cut
    rows = np.split(flat, np.cumsum(lengths)[:-1])
    expected = np.array([model.predict(row[None], verbose=0)[0, 0] for row in rows])
    probabilities = np.array(served["probabilities"])
    assert probabilities.shape == (len(REVIEWS), 2)
    np.testing.assert_allclose(probabilities[:, 1], expected, atol=1e-5)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-6)
    assert served["labels"] == (expected > 0.5).astype(int).tolist()

    info = json.loads((exports["classification"] / "export.json").read_text())
    assert info["kind"] == "classification" and info["lowercase"] is True
    assert info["max_length"] == config.data.max_sentence_length
    assert info["tokenizer_fingerprint"] == tokenizer.fingerprint
    assert export.run_kind(exports["classification"]) == "classification"


def test_classify_answers_each_review_as_the_served_export_does(
    classification_run: Path,
    image_run: Path,
    exports: dict[str, Path],
    served: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``keras-transformer classify`` (there was no command that classified a
    review: `translate` refused the run and sent the user to `evaluate`)
    prints 'label<TAB>P(positive)' per line, the SavedModel's probabilities,
    for the run and for its export alike; an empty review gives an empty
    line, so that the files stay aligned."""
    positive = np.array(served["probabilities"])[:, 1]
    expected = [
        f"{'positive' if label else 'negative'}\t{p:.4f}" if review else ""
        for review, label, p in zip(REVIEWS, served["labels"], positive, strict=True)
    ]
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("".join(f"{review}\n" for review in REVIEWS))
    output = tmp_path / "labels.txt"
    argv = ["classify", "--input", str(reviews), "--no-progress"]
    assert (
        cli.main(
            [*argv, "--workdir", str(classification_run)]
            + ["--output", str(output), "--batch-size", "2"]
        )
        == 0
    )
    assert output.read_text().split("\n")[:-1] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.txt", "reviews.txt"]
    capsys.readouterr()
    assert cli.main([*argv, "--workdir", str(exports["classification"])]) == 0
    assert capsys.readouterr().out.split("\n")[:-1] == expected
    classifier = export.ReviewClassifier.load(classification_run, batch_size=4)
    np.testing.assert_allclose(classifier.classify(REVIEWS), positive, atol=1e-5)
    # One string was classified character by character (a probability per
    # character); a review that is not a str was TensorFlow's error.
    with pytest.raises(TypeError, match="list of strings; wrap one string in"):
        classifier.classify(REVIEWS[0])
    with pytest.raises(TypeError, match=r"`reviews\[1\]` is a NoneType, not a str"):
        classifier.classify([REVIEWS[0], None])

    # Typed at a terminal: each review answered as it is entered; a line
    # that is not UTF-8 is skipped with a warning and an empty line.
    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    typed = (REVIEWS[0] + "\n").encode() + b"\xff\n" + (REVIEWS[1] + "\n").encode()
    monkeypatch.setattr("sys.stdin", Terminal(io.BytesIO(typed)))
    assert cli.main(["classify", "--workdir", str(classification_run)]) == 0
    shown = capsys.readouterr()
    assert shown.out.split("\n")[:-1] == [expected[0], "", expected[1]]
    assert "line 2 is not valid UTF-8: skipped" in shown.err

    # A run or an export of another kind: one line each.
    for folder, words in (
        (exports["image"], "is an image export, not a classification one"),
        (image_run, "is an image run (kind 'image' in its config.json), but"),
    ):
        assert cli.main(["classify", "--workdir", str(folder)]) == 2
        error = capsys.readouterr().err
        assert words in error and error.count("\n") == 1, error


def test_a_stopped_classify_keeps_its_parts_and_the_same_command_goes_on(
    classification_run: Path,
    served: dict,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``classify --output OUT`` saves its lines in parts, as ``translate``
    does: stopped by SIGINT in its second part of 4 reviews, it keeps the
    first part in ``OUT.partial``; the same command goes on after it."""
    from keras_transformer.cli import CommandInterrupted
    from keras_transformer.cli import _parts as parts_module

    monkeypatch.setattr(parts_module, "CHUNK_LINES", 4)
    calls: list[int] = []
    original = export.ReviewClassifier.classify

    def counted(classifier, reviews):
        calls.append(len(reviews))
        if stop:
            raise CommandInterrupted(signal.SIGINT)
        return original(classifier, reviews)

    monkeypatch.setattr(export.ReviewClassifier, "classify", counted)
    reviews = tmp_path / "reviews.txt"
    reviews.write_text("".join(f"{review}\n" for review in REVIEWS))
    out = tmp_path / "labels.txt"
    argv = ["classify", "--workdir", str(classification_run), "--batch-size", "1"]
    argv += ["--input", str(reviews), "--no-progress"]
    stop = False
    assert cli.main(argv) == 0  # to standard output, whole
    expected = capsys.readouterr().out.split("\n")[:-1]
    assert len(expected) == len(REVIEWS) and calls == [3, 2]  # the empty one: ""
    calls.clear()
    original_write = parts_module.OutputParts.write

    def stop_after_first_part(parts, lines, done):
        nonlocal stop
        original_write(parts, lines, done)
        stop = True

    monkeypatch.setattr(parts_module.OutputParts, "write", stop_after_first_part)
    argv += ["--output", str(out)]
    assert cli.main(argv) == 130
    err = capsys.readouterr().err
    assert (
        f"Stopped by SIGINT after review 4 of the input, whose labels are in "
        f"{out}.partial. Run the same command again to go on from review 5." in err
    )
    assert not out.exists()
    assert Path(f"{out}.partial").read_text().split("\n")[:-1] == expected[:4]
    monkeypatch.setattr(parts_module.OutputParts, "write", original_write)
    stop, calls[:] = False, []
    assert cli.main(argv) == 0
    assert "going on after review 4 of 6" in capsys.readouterr().err
    assert calls == [2] and out.read_text().split("\n")[:-1] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.txt", "reviews.txt"]


def test_the_exports_transpose_no_integers(exports: dict[str, Path]) -> None:
    """`cut_review_ids` gave an empty review its [UNK] by a ragged concat,
    which transposes int64 row indices: training and serving a classifier
    printed TensorFlow's oneDNN error line (`transposes_by_dtype`)."""
    for kind in ("classification", "image"):
        transposes = transposes_by_dtype(exports[kind])
        assert set(transposes) <= {"float32"}, (kind, transposes)


def test_a_classification_export_refuses_a_batch_that_is_not_1_d(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    loaded = tf.saved_model.load(str(exports["classification"]))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        loaded.signatures["classify"](texts=tf.constant([REVIEWS[:2]]))
    assert f"{export.BATCH_SHAPE_MESSAGE}] [1 2]" in " ".join(
        error.value.message.split()
    )
    # Re-exported from the export folder: the same settings and outputs.
    again = export.export_run(exports["classification"], tmp_path / "again")
    assert _settings_of(again) == _settings_of(exports["classification"])
    texts = tf.constant(REVIEWS)
    first = loaded.signatures["classify"](texts=texts)["probabilities"]
    reloaded = tf.saved_model.load(str(again))  # held: its variables live on
    second = reloaded.classify(texts)["probabilities"]
    np.testing.assert_array_equal(first, second)


# ------------------------------------------------------------------- image
def test_an_image_export_completes_top_rows_like_the_sampler(
    image_run: Path, exports: dict[str, Path], served: dict
) -> None:
    assert not served["imported_package"]
    model, _ = RunFolder(image_run).load()
    top_rows = _top_rows()
    same, again, other = (np.array(images) for images in served["images"])
    assert served["dtype"] == "uint8" and same.shape == (3, 4, 4, 3)
    np.testing.assert_array_equal(same[:, :2], top_rows)  # given rows kept exactly
    np.testing.assert_array_equal(same, again)  # a seed is a completion
    assert (same != other).any()
    # The draws of the sampler called in Python with the same seed.
    images = np.concatenate([top_rows, np.zeros_like(top_rows)], axis=1)
    for seed, completed in ((3, same), (4, other)):
        expected = ImageSampler(model).complete(images, 2, 1.0, seed=seed)
        np.testing.assert_array_equal(completed, expected)
    info = json.loads((exports["image"] / "export.json").read_text())
    assert info["kind"] == "image" and info["given_rows"] == 2
    assert info["image_shape"] == [4, 4, 3] and info["temperature"] == 1.0


def test_an_image_export_refuses_other_shapes_and_dtypes(
    exports: dict[str, Path],
) -> None:
    loaded = tf.saved_model.load(str(exports["image"]))
    complete = loaded.signatures["complete"]
    seed = tf.constant(0, tf.int64)
    for shape in ([3, 3, 4, 3], [3, 2, 4, 1], [2, 4, 3]):
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            complete(top_rows=tf.zeros(shape, tf.uint8), seed=seed)
        message = " ".join(error.value.message.split())
        assert "expected the top rows, uint8 of shape [batch, 2, 4, 3]" in message
        assert f"got shape] [{' '.join(map(str, shape))}]" in message
    with pytest.raises(tf.errors.InvalidArgumentError, match="one integer seed"):
        complete(
            top_rows=tf.zeros([1, 2, 4, 3], tf.uint8),
            seed=tf.constant([1, 2], tf.int64),
        )
    # TensorFlow refuses another dtype at the signature, naming both.
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="uint8 tensor but is a int32"
    ):
        complete(top_rows=tf.zeros([1, 2, 4, 3], tf.int32), seed=seed)


def test_an_image_export_takes_other_rows_and_a_temperature(
    image_run: Path, tmp_path: Path
) -> None:
    model, _ = RunFolder(image_run).load()
    path = export.export_run(
        image_run, tmp_path / "greedy", given_rows=0, temperature=0.0
    )
    loaded = tf.saved_model.load(str(path))
    complete = loaded.complete
    blank = tf.zeros([2, 0, 4, 3], tf.uint8)
    completed = complete(blank, tf.constant(1, tf.int64))["images"].numpy()
    expected = ImageSampler(model).complete(
        np.zeros((2, 4, 4, 3), "uint8"), 0, 0.0, seed=1
    )
    np.testing.assert_array_equal(completed, expected)
    assert json.loads((path / "export.json").read_text())["temperature"] == 0.0


def test_an_image_export_exports_again_with_its_settings(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    """An image export holds no tokenizer/: it was taken for a translation
    folder, and exporting it again failed with "not a translation run"."""
    source = exports["image"]
    again = export.export_run(source, tmp_path / "again")
    cold = export.export_run(source, tmp_path / "cold", temperature=0.0)
    info = _settings_of(source)
    assert _settings_of(again) == info
    assert _settings_of(cold) == {**info, "temperature": 0.0}
    top_rows, seed = tf.constant(_top_rows()), tf.constant(3, tf.int64)
    loaded = [tf.saved_model.load(str(path)) for path in (source, again)]
    first, second = (m.complete(top_rows, seed)["images"].numpy() for m in loaded)
    np.testing.assert_array_equal(first, second)
    # An export holds its weights: another choice is refused (the
    # classification export ignored it), and CTranslate2 names the export.
    for kind in ("image", "classification"):
        with pytest.raises(ValueError, match="is an export, which holds the weights"):
            export.export_run(exports[kind], tmp_path / f"best_{kind}", "best")
    with pytest.raises(
        ValueError, match=f"{re.escape(str(source))} is an image export"
    ):
        export.export_run_as("ctranslate2", source, tmp_path / "ct2")


# ------------------------------------------------------------------ errors
def test_bad_settings_are_one_line_each(
    classification_run: Path,
    image_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = str(tmp_path / "x" / "1")
    cases = [
        # A setting the kind does not take.
        (classification_run, ["--beam-size", "2"], "classification export takes no"),
        (classification_run, ["--given-rows", "2"], "given_rows (--given-rows)"),
        (image_run, ["--method", "greedy"], "error: An image export takes no method"),
        # The registry passes no quantization unless given; these kinds take none.
        (classification_run, ["--quantization", "float32"], "takes no quantization"),
        (image_run, ["--quantization", "int8"], "takes no quantization"),
        # Rows that are not whole rows of the 2 x 2 query blocks.
        (image_run, ["--given-rows", "1"], "multiple of the query block's height 2"),
        (image_run, ["--given-rows", "6"], "from 0 to the image height 4"),
        # They named the Python argument: "Received: given_rows=6".
        (image_run, ["--given-rows", "6"], "error: --given-rows must be from 0"),
        (image_run, ["--given-rows", "6"], "Received: --given-rows 6."),
    ]
    # Out of any range: refused before the run is read (exit status 2).
    refused = [(image_run, ["--temperature", "-1"], "--temperature -1.0: pass a")]
    for (run, flags, expected), code in [
        *((case, 1) for case in cases),
        *((case, 2) for case in refused),
    ]:
        status = cli.main(["export", "--workdir", str(run), "--output", out, *flags])
        error = capsys.readouterr().err.strip()
        assert status == code and expected in error, error
        assert len(error.splitlines()) == 1, error
    assert not (tmp_path / "x").exists()
    # A bad --output: a file, and a folder holding something else.
    (tmp_path / "file").write_text("")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep")
    for output, expected, code in (
        (tmp_path / "file", "is a file", 2),
        (busy, "not empty", 1),
    ):
        argv = ["export", "--workdir", str(image_run), "--output", str(output)]
        assert cli.main(argv) == code
        error = capsys.readouterr().err.strip()
        assert expected in error and len(error.splitlines()) == 1, error
    assert (busy / "notes.txt").read_text() == "keep"


def test_a_translator_names_an_export_of_another_kind(
    exports: dict[str, Path], image_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`Translator.load` of an image export said "config.json is missing",
    as if it were a broken run (an image export holds no tokenizer/, so it
    was not taken for an export), and of a classification export "Model
    'classifier' was not built by build_transformer"."""
    from keras_transformer.translation import Translator

    for kind in ("image", "classification"):
        expected = f"an export of kind '{kind}' (its export.json), not a translation"
        with pytest.raises(ValueError, match=re.escape(expected)):
            Translator.load(exports[kind])
    with pytest.raises(ValueError, match=re.escape("a run of kind 'image'")):
        Translator.load(image_run)
    # evaluate asked for --source and --reference, then was refused by them.
    for kind in ("image", "classification"):
        assert cli.main(["evaluate", "--workdir", str(exports[kind])]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"is {'an' if kind == 'image' else 'a'} {kind} export: evaluate" in line
    # Image runs take no decoding flags (it said "a image run's").
    assert cli.main(["evaluate", "--workdir", str(image_run), "--beam-size", "2"]) == 2
    assert "--beam-size: an image run's evaluation" in capsys.readouterr().err
    # --format ctranslate2 of an image run: "an image run" (was "a image").
    with pytest.raises(
        ValueError, match=f"{re.escape(str(image_run))} is an image run"
    ):
        export.export_run_as("ctranslate2", image_run, image_run.parent / "ct2")


def test_a_kind_without_an_export_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, image_run: Path, tmp_path: Path
) -> None:
    monkeypatch.setattr(export.saved_model, "run_kind", lambda _: "speech")
    with pytest.raises(ValueError, match="kind 'speech' cannot be exported"):
        export.export_run(image_run, tmp_path / "1")
