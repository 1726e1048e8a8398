"""kt.export: a translation SavedModel that needs only TensorFlow and TF Text."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, decoding, export, files
from keras_transformer.cli import export as export_command
from keras_transformer.data import (
    SubwordTokenizer,
    TextPairs,
    batch_for_eval,
    synthetic_dates,
)
from keras_transformer.data.batching import encode_sources
from keras_transformer.losses import MaskedSparseCrossEntropy
from keras_transformer.models import build_transformer, presets
from keras_transformer.translation import Translator, translate_lines
from tests.former_decoding import former_beam_search_graph
from tests.training.helpers import REPO_ROOT, holding_lock, subprocess_env

START, END = SubwordTokenizer.START_ID, SubwordTokenizer.END_ID
LONG = "Donnerstag, 5. Januar 2023 " * 60  # ~300 subword tokens
#: Dates the model has learned, then empty, long and non-ASCII inputs.
INPUTS = [
    *synthetic_dates(6, seed=11).sources,
    "",
    "   ",
    LONG,
    "Grüße aus München, 3. März 2001",
    "el año 2000, niño, señor",
    "2020年3月5日 中文",
]


def _pad(rows: list[list[int]]) -> np.ndarray:
    width = max(len(row) for row in rows)
    padded = np.zeros((len(rows), width), "int32")
    for i, row in enumerate(rows):
        padded[i, : len(row)] = row
    return padded


@functools.cache
def tiny_translator() -> tuple[keras.Model, SubwordTokenizer]:
    """A one-layer model fit for ~190 steps on 400 synthetic dates (~10 s).

    Its translations are imperfect but not degenerate: different sources give
    different, date-like outputs that end with END.
    """
    keras.utils.set_random_seed(0)
    pairs = synthetic_dates(400, seed=0)
    tokenizer = SubwordTokenizer.train(
        [*pairs.sources, *pairs.targets], vocabulary_size=120
    )
    config = presets["tiny"].replace(
        vocabulary_size=tokenizer.vocabulary_size,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        d_ff=64,
        num_heads=2,
        dropout=0.0,
    )
    model = build_transformer(config)
    sources = _pad([ids + [END] for ids in tokenizer.encode(pairs.sources)])
    targets = tokenizer.encode(pairs.targets)
    inputs = _pad([[START, *ids] for ids in targets])
    labels = _pad([[*ids, END] for ids in targets])
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=MaskedSparseCrossEntropy(label_smoothing=0.0),
    )
    model.fit((sources, inputs), labels, batch_size=32, epochs=15, verbose=0)
    return model, tokenizer


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tokenizer = tiny_translator()
    directory = tmp_path_factory.mktemp("export") / "1"
    path = export.export_translator(model, tokenizer, directory)
    assert path == directory
    return directory


def _child_env() -> dict[str, str]:
    """A quiet, small child process that cannot find this checkout by path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_NUM_INTEROP_THREADS="1",
        TF_NUM_INTRAOP_THREADS="2",
        OMP_NUM_THREADS="1",
    )
    return env


_CHILD = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops

loaded = tf.saved_model.load(sys.argv[1])
sentences = tf.constant(json.loads(sys.stdin.read()))
texts = loaded.signatures["serving_default"](sentences=sentences)
ids = loaded.signatures["translate_ids"](sentences=sentences)
called = loaded.translate(sentences)  # the endpoint as a function
print(json.dumps({
    "imported_package": any(m.startswith("keras_transformer") for m in sys.modules),
    "signatures": sorted(loaded.signatures),
    "translations": [t.decode("utf-8") for t in texts["translations"].numpy()],
    "called": [t.decode("utf-8") for t in called["translations"].numpy()],
    "scores": texts["scores"].numpy().tolist(),
    "token_ids": ids["token_ids"].numpy().tolist(),
    "lengths": ids["lengths"].numpy().tolist(),
    "ids_scores": ids["scores"].numpy().tolist(),
    "empty_batch": loaded.translate(tf.constant([], tf.string))[
        "translations"].shape.as_list(),
}))
"""


def test_a_fresh_process_with_only_tensorflow_translates_like_beam_search(
    exported: Path,
) -> None:
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, str(exported)],
        input=json.dumps(INPUTS),
        capture_output=True,
        text=True,
        timeout=180,
        env=_child_env(),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert not out["imported_package"]
    assert {"serving_default", "translate", "translate_ids"} <= set(out["signatures"])
    assert out["empty_batch"] == [0]

    model, tokenizer = tiny_translator()
    expected = translate_lines(model, tokenizer, INPUTS)  # beam 4, alpha 0.6
    assert out["translations"] == expected
    assert out["called"] == expected
    # Empty inputs: empty outputs, no tokens, score 0. Others: real outputs.
    for i, text in enumerate(INPUTS):
        if text.strip():
            assert out["translations"][i] and out["lengths"][i] > 0
        else:
            assert out["translations"][i] == ""
            assert out["lengths"][i] == 0 and out["scores"][i] == 0.0
            assert not any(out["token_ids"][i])
    assert len(set(out["translations"][:6])) > 1  # not degenerate
    # The ids signature: the same search, detokenized by the same tokenizer.
    assert tokenizer.decode(out["token_ids"]) == out["translations"]
    np.testing.assert_allclose(out["ids_scores"], out["scores"], rtol=1e-6)

    # The scores are those of in-process beam search on the same source ids
    # (long input: its first 127 tokens, then END).
    real = [i for i, text in enumerate(INPUTS) if text.strip()]
    sources = _pad(
        [ids[:127] + [END] for ids in tokenizer.encode([INPUTS[i] for i in real])]
    )
    result = decoding.Decoder(model).decode(sources, decoding.DecodeSettings())
    np.testing.assert_allclose(
        [out["scores"][i] for i in real], result.scores, rtol=1e-4, atol=1e-4
    )
    for row, i in enumerate(real):
        length = out["lengths"][i]
        assert out["token_ids"][i][:length] == result.to_list()[row]
        assert out["token_ids"][i][length - 1] == END


def test_a_jit_compiled_export_translates_one_sentence_like_the_graph(
    exported: Path, tmp_path: Path
) -> None:
    """`jit_compile=True`: one sentence per call runs the search compiled
    with XLA (a short and a long source width), a batch runs the graph; the
    translations, lengths and scores are the plain export's."""
    model, tokenizer = tiny_translator()
    path = export.export_translator(
        model, tokenizer, tmp_path / "jit", jit_compile=True
    )
    assert json.loads((path / export.INFO_FILE).read_text())["jit_compile"] is True
    plain = tf.saved_model.load(str(exported)).signatures["translate_ids"]
    jitted = tf.saved_model.load(str(path)).signatures["translate_ids"]
    widths = [len(ids) + 1 for ids in tokenizer.encode(INPUTS)]
    # Both compiled programs are used: sources up to 32 ids and longer ones.
    assert min(widths) <= export.SINGLE_SENTENCE_WIDTHS[0] < max(widths)
    for sentences in [[text] for text in INPUTS] + [INPUTS]:
        want = plain(sentences=tf.constant(sentences))
        got = jitted(sentences=tf.constant(sentences))
        np.testing.assert_array_equal(got["token_ids"], want["token_ids"])
        np.testing.assert_array_equal(got["lengths"], want["lengths"])
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)


def test_jit_compile_is_refused_for_litert_and_ctranslate2(tmp_path: Path) -> None:
    for fmt in ("litert", "ctranslate2"):
        args = cli.build_parser().parse_args(
            [
                "export",
                "--workdir",
                str(tmp_path),
                "--output",
                str(tmp_path / "x"),
                "--format",
                fmt,
                "--jit-compile",
            ]
        )
        with pytest.raises(ValueError, match=r"takes no jit_compile \(--jit-compile\)"):
            export_command.run(args)


def test_the_heuristic_stop_is_refused_where_the_engine_has_its_own_rule(
    tmp_path: Path,
) -> None:
    """CTranslate2 stops a sentence by its own rule, LiteRT decodes greedily:
    `--early-stop heuristic` is refused in one line for both."""
    for fmt in ("litert", "ctranslate2"):
        argv = ["export", "--workdir", str(tmp_path), "--output", str(tmp_path / "x")]
        args = cli.build_parser().parse_args(
            [*argv, "--format", fmt, "--early-stop", "heuristic"]
        )
        with pytest.raises(ValueError, match=r"takes no early_stop \(--early-stop\)"):
            export_command.run(args)


def test_saved_model_cli_lists_both_signatures(exported: Path) -> None:
    cli = Path(sys.executable).with_name("saved_model_cli")
    if not cli.exists():
        pytest.skip("saved_model_cli is not installed next to this Python")
    shown = subprocess.run(
        [str(cli), "show", "--dir", str(exported), "--all"],
        capture_output=True,
        text=True,
        timeout=180,
        env=_child_env(),
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    for name in ("serving_default", "translate", "translate_ids"):
        assert f"signature_def['{name}']" in shown.stdout
    for name in ("sentences", "translations", "scores", "token_ids", "lengths"):
        assert f"['{name}']" in shown.stdout
    assert "DT_STRING" in shown.stdout


def test_the_export_folder_keeps_the_keras_model_tokenizer_and_settings(
    exported: Path,
) -> None:
    model, tokenizer = tiny_translator()
    assert export.is_export_dir(exported)
    restored, restored_tokenizer, info = export.load_export(exported)
    for original, copy in zip(model.weights, restored.weights, strict=True):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(original), keras.ops.convert_to_numpy(copy)
        )
    assert restored_tokenizer.fingerprint == tokenizer.fingerprint
    assert info["beam_size"] == 4 and info["alpha"] == 0.6
    assert info["method"] == "beam" and info["early_stop"] == "exact"
    assert info["max_input_length"] == 128 and info["extra_length"] == 50
    assert info["max_output_length"] == 178
    assert info["tokenizer_fingerprint"] == tokenizer.fingerprint


def test_exports_translate_as_the_former_search_did(
    exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same weights exported with the previous release's beam search
    (per-hypothesis caches gathered by parent, every sentence in the batch
    until the last has finished) give the same signatures and outputs."""
    model, tokenizer = tiny_translator()
    current = decoding.Decoder.search

    def former(
        self,
        source_ids,
        limits,
        settings,
        prefix=None,
        n_best=None,
        constraints=None,
        **options,
    ):
        if prefix is not None or n_best is not None or constraints is not None:
            # Prefix, n-best and constrained searches had no former version.
            return current(
                self,
                source_ids,
                limits,
                settings,
                prefix=prefix,
                n_best=n_best,
                constraints=constraints,
                **options,
            )
        assert settings.strategy == "beam"
        return former_beam_search_graph(
            self.model,
            source_ids,
            limits,
            beam_size=settings.beam_size,
            length_penalty=settings.alpha,
            **options,
        )

    with monkeypatch.context() as patch:
        patch.setattr(decoding.Decoder, "search", former)
        former_dir = export.export_translator(model, tokenizer, tmp_path / "former")
    loaded = {
        "former": tf.saved_model.load(str(former_dir)),
        "current": tf.saved_model.load(str(exported)),
    }
    for name in ("serving_default", "translate", "translate_ids"):
        signatures = [loaded[key].signatures[name] for key in loaded]
        assert signatures[0].structured_input_signature == (
            signatures[1].structured_input_signature
        )
        assert signatures[0].structured_outputs == signatures[1].structured_outputs
    # A batch in no particular order: sentences finish at different steps.
    sentences = tf.constant([*INPUTS, *synthetic_dates(40, seed=5).sources])
    ids = {
        key: loaded[key].signatures["translate_ids"](sentences=sentences)
        for key in loaded
    }
    np.testing.assert_array_equal(ids["current"]["lengths"], ids["former"]["lengths"])
    assert len(set(ids["current"]["lengths"].numpy())) > 3
    np.testing.assert_array_equal(
        ids["current"]["token_ids"], ids["former"]["token_ids"]
    )
    np.testing.assert_allclose(
        ids["current"]["scores"], ids["former"]["scores"], atol=1e-5
    )
    texts = {
        key: loaded[key].signatures["serving_default"](sentences=sentences)
        for key in loaded
    }
    assert (
        texts["current"]["translations"].numpy().tolist()
        == texts["former"]["translations"].numpy().tolist()
    )


def test_sources_are_cut_like_batch_for_eval() -> None:
    _, tokenizer = tiny_translator()
    sentences = ["", "3 mars 2001", LONG, "  "]
    source, is_empty = export.source_ids_from_strings(
        tokenizer, tf.constant(sentences), max_input_length=8
    )
    source = source.numpy()
    assert is_empty.numpy().tolist() == [True, False, False, True]
    assert source.shape == (4, 8)
    assert source[2].tolist() == tokenizer.encode([LONG])[0][:7] + [END]
    assert source[0].tolist() == [END] + [0] * 7
    (expected, _), *_ = batch_for_eval(
        TextPairs(sentences, sentences), tokenizer, max_length=8
    ).as_numpy_iterator()
    np.testing.assert_array_equal(source, expected)
    # One rule: the function the translator and batch_for_eval call too.
    ragged = encode_sources(tokenizer, sentences, 8)
    np.testing.assert_array_equal(source, ragged.to_tensor().numpy())


def test_export_explains_bad_settings(tmp_path: Path) -> None:
    model, tokenizer = tiny_translator()
    with pytest.raises(ValueError, match="beam_size"):
        export.export_translator(model, tokenizer, tmp_path / "a", beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        export.export_translator(model, tokenizer, tmp_path / "a", alpha=-1)
    with pytest.raises(ValueError, match="max_input_length"):
        export.export_translator(model, tokenizer, tmp_path / "a", max_input_length=1)
    other = build_transformer(presets["tiny"].replace(vocabulary_size=50))
    with pytest.raises(ValueError, match="vocabulary"):
        export.export_translator(other, tokenizer, tmp_path / "a")
    learned = build_transformer(
        presets["tiny"].replace(
            vocabulary_size=tokenizer.vocabulary_size,
            position_encoding="learned",
            max_length=64,
        )
    )
    with pytest.raises(ValueError, match="learned source positions"):
        export.export_translator(
            learned, tokenizer, tmp_path / "a", max_input_length=65
        )
    with pytest.raises(TypeError, match="SubwordTokenizer"):
        export.export_translator(model, "tokenizer", tmp_path / "a")  # type: ignore[arg-type]
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="overwrite"):
        export.export_translator(model, tokenizer, busy)
    with pytest.raises(FileExistsError, match="refusing"):
        export.export_translator(model, tokenizer, busy, overwrite=True)
    assert (busy / "notes.txt").read_text() == "keep me"
    assert not (tmp_path / "a").exists()


def test_export_command_reexports_greedy_and_overwrites(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    output = tmp_path / "greedy"
    argv = ["--workdir", str(exported), "--output", str(output), "--beam-size", "1"]
    assert export_command.run(parser.parse_args(argv)) == 0
    assert "serving_default" in capsys.readouterr().out
    with pytest.raises(ValueError, match="overwrite"):
        export_command.run(parser.parse_args(argv))
    assert export_command.run(parser.parse_args([*argv, "--overwrite"])) == 0

    model, tokenizer = tiny_translator()
    loaded = tf.saved_model.load(str(output))
    got = loaded.signatures["serving_default"](sentences=tf.constant(INPUTS))
    texts = [t.decode("utf-8") for t in got["translations"].numpy()]
    assert texts == translate_lines(model, tokenizer, INPUTS, beam_size=1)
    assert json.loads((output / "export.json").read_text())["beam_size"] == 1

    # The export folder keeps its settings: its translator decodes with them
    # and an export of it without a decoding flag exports them again.
    assert Translator.load(output).settings.beam_size == 1
    assert Translator.load(output, alpha=1.0).settings.describe() == "greedy"
    assert Translator.load(output, beam_size=3).settings.beam_size == 3
    again = tmp_path / "again"
    argv = ["--workdir", str(output), "--output", str(again), "--alpha", "1"]
    assert export_command.run(parser.parse_args(argv)) == 0
    info = json.loads((again / "export.json").read_text())
    assert (info["beam_size"], info["alpha"]) == (1, 1.0)
    ct2 = tmp_path / "ct2"
    argv = ["--workdir", str(again), "--output", str(ct2), "--format", "ctranslate2"]
    assert export_command.run(parser.parse_args(argv)) == 0
    info = json.loads((ct2 / "keras_transformer.json").read_text())
    assert (info["beam_size"], info["alpha"]) == (1, 1.0)


def test_an_int8_export_keeps_float32_quality_and_reloads_as_served(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``export --quantization int8``: the feed-forward Dense layers in int8
    (Keras' Model.quantize), within 0.5 BLEU of the float32 export on unseen
    dates; ``Translator.load`` of the folder serves the same int8 model;
    the model it was made from is left float32."""
    import sacrebleu

    parser = argparse.ArgumentParser()
    export_command.add_arguments(parser)
    output = tmp_path / "int8"
    argv = ["--workdir", str(exported), "--output", str(output)]
    assert export_command.run(parser.parse_args([*argv, "--quantization", "int8"])) == 0
    assert "(feed-forward layers in int8)" in capsys.readouterr().out
    assert json.loads((output / "export.json").read_text())["quantization"] == "int8"

    pairs = synthetic_dates(96, seed=5)
    served = {
        name: _translations(tf.saved_model.load(str(path)), list(pairs.sources))
        for name, path in (("float32", exported), ("int8", output))
    }
    bleu = {
        name: sacrebleu.corpus_bleu(texts, [list(pairs.targets)]).score
        for name, texts in served.items()
    }
    assert bleu["float32"] > 20
    assert abs(bleu["int8"] - bleu["float32"]) <= 0.5

    translator = Translator.load(output)
    modes = {
        getattr(layer, "quantization_mode", None)
        for layer in translator.model._flatten_layers()
    }
    assert "int8" in modes
    assert translator.translate(list(pairs.sources[:8])) == served["int8"][:8]
    # Re-exported without the flag, the folder's float32 model.keras is served.
    again = tmp_path / "again"
    assert (
        export_command.run(
            parser.parse_args(["--workdir", str(output), "--output", str(again)])
        )
        == 0
    )
    assert json.loads((again / "export.json").read_text())["quantization"] == "float32"
    model, _ = tiny_translator()
    assert export.quantized(model, "int8") is not model
    assert {getattr(x, "quantization_mode", None) for x in model._flatten_layers()} == {
        None
    }


def test_int8_is_refused_where_the_savedmodel_has_no_such_weights(
    exported: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="not a SavedModel weight type") as error:
        export.quantized(tiny_translator()[0], "int4")
    assert "\n" not in str(error.value) and "float32, int8" in str(error.value)
    run = _run_like_folder(tmp_path / "run")
    (run / "config.json").write_text(json.dumps({"kind": "classification"}))
    with pytest.raises(ValueError, match="takes no quantization"):
        export.export_run(run, tmp_path / "out", quantization="int8")


def test_a_damaged_export_json_is_one_line_naming_the_file(
    exported: Path, tmp_path: Path
) -> None:
    """A hand-edited or truncated ``export.json`` is refused with its path
    and the fix, before the model is loaded."""
    copy = tmp_path / "copy"
    shutil.copytree(exported, copy)
    info_path = copy / "export.json"
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "beam_size": 0}))
    with pytest.raises(
        ValueError, match=r"export.json holds decoding settings .*beam_size"
    ):
        Translator.load(copy)
    info_path.write_text('{"beam_size": 4,')
    with pytest.raises(ValueError, match="is not a JSON object of export settings"):
        Translator.load(copy)
    info_path.write_text("[4]")
    with pytest.raises(ValueError, match="holds list, not a JSON object"):
        export.load_export(copy)


def test_an_export_json_with_the_old_allowance_name_still_loads(
    tmp_path: Path,
) -> None:
    model, tokenizer = tiny_translator()
    path = export.export_translator(
        model, tokenizer, tmp_path / "old", beam_size=1, extra_length=7
    )
    info_path = path / "export.json"
    info = json.loads(info_path.read_text(encoding="utf-8"))
    assert info["extra_length"] == 7 and "max_output_extra" not in info
    # An export.json written under the old name reads under the new one.
    info["max_output_extra"] = info.pop("extra_length")
    info_path.write_text(json.dumps(info), encoding="utf-8")
    assert export.load_export(path)[2]["extra_length"] == 7


_TWO_EXPORTS_CHILD = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops

first, second = (tf.saved_model.load(path) for path in sys.argv[1:3])
tf.random.set_seed(1)  # clears the kernel cache after loading
sentences = tf.constant(json.loads(sys.stdin.read()))
print(json.dumps([
    [t.decode("utf-8") for t in loaded.translate(sentences)["translations"].numpy()]
    for loaded in (first, second)
]))
"""


def test_an_export_holding_the_sentencepiece_resource_op_translates_the_same(
    exported: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exports written while unigram vocabularies were applied by
    `tf_text.SentencepieceTokenizer` (a resource in the graph) translate like
    today's (`FastSentencepieceTokenizer`, a constant), also after
    `tf.random.set_seed` in the serving process."""
    from keras_transformer.data import sentencepiece_backend
    from keras_transformer.data import tokenizer as tokenizer_module

    model, tokenizer = tiny_translator()
    monkeypatch.setattr(
        tokenizer_module,
        "in_graph_tokenizer",
        lambda proto, _, fingerprint: sentencepiece_backend._shared_resource_tokenizer(
            proto, fingerprint
        ),
    )
    resource_op = SubwordTokenizer.from_proto(tokenizer.model_proto)
    assert type(resource_op._tokenizer).__name__ == "SentencepieceTokenizer"
    old_style = export.export_translator(model, resource_op, tmp_path / "1")
    child = subprocess.run(
        [sys.executable, "-c", _TWO_EXPORTS_CHILD, str(old_style), str(exported)],
        input=json.dumps(INPUTS),
        capture_output=True,
        text=True,
        timeout=180,
        env=_child_env(),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    old, new = json.loads(child.stdout.strip().splitlines()[-1])
    assert old == new == translate_lines(model, tokenizer, INPUTS)


# ------------------------------------------------------- the input's shape
def _translations(loaded: Any, sentences: list[str]) -> list[str]:
    got = loaded.signatures["serving_default"](sentences=tf.constant(sentences))
    return [t.decode("utf-8") for t in got["translations"].numpy()]


def test_signatures_refuse_a_batch_that_is_not_1_d(exported: Path) -> None:
    """A ``[batch, n]`` matrix was flattened into ``batch * n`` sentences and
    a scalar came back as a batch of one; both are refused now, by every
    signature and every function of the loaded SavedModel."""
    loaded = tf.saved_model.load(str(exported))
    dates = synthetic_dates(4, seed=3).sources
    wrong = {
        "[2 2]": [dates[:2], dates[2:]],
        "[4 1]": [[date] for date in dates],  # as many values as rows
        "[1 4]": [dates],
        "[0 3]": np.zeros((0, 3), "U1"),
        "[]": dates[0],
    }
    for name in ("serving_default", "translate", "translate_ids"):
        signature = loaded.signatures[name]
        for shape, value in wrong.items():
            with pytest.raises(tf.errors.InvalidArgumentError) as error:
                signature(sentences=tf.constant(value, tf.string))
            message = " ".join(error.value.message.split())
            assert f"{export.BATCH_SHAPE_MESSAGE}] {shape}" in message, message
    # The endpoints as functions refuse them when binding the arguments.
    for function in (loaded.translate, loaded.translate_ids):
        for value in wrong.values():
            with pytest.raises(TypeError, match=r"TensorSpec\(shape=\(None,\)"):
                function(tf.constant(value, tf.string))
    # A 1-D batch (an empty one too) translates as it did.
    model, tokenizer = tiny_translator()
    assert _translations(loaded, dates) == translate_lines(model, tokenizer, dates)
    empty = loaded.signatures["translate_ids"](sentences=tf.constant([], tf.string))
    assert empty["token_ids"].shape[0] == 0 and empty["lengths"].shape == [0]
    # The check as a function, eagerly.
    assert export.check_sentence_batch(tf.constant(dates)).numpy().tolist() == [
        date.encode() for date in dates
    ]
    with pytest.raises(tf.errors.InvalidArgumentError, match="got shape"):
        export.check_sentence_batch(tf.constant([dates]))


# ----------------------------------------------------- atomic export folder
def _tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` (relative path) and its SHA-256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _leftovers(parent: Path) -> list[str]:
    """Temporary folders of exports beside the targets in `parent`."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".tmp-"))


@pytest.fixture
def earlier(exported: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the module's export (beam 4) to overwrite, and its files."""
    target = tmp_path / "models" / "1"
    shutil.copytree(exported, target)
    return target, _tree(target)


def _assert_whole_earlier(target: Path, tree: dict[str, str]) -> None:
    """`target` is the earlier export, byte for byte, and translates as it did."""
    assert _tree(target) == tree
    assert export.is_export_dir(target)
    model, tokenizer = tiny_translator()
    sentences = synthetic_dates(3, seed=4).sources
    assert _translations(tf.saved_model.load(str(target)), sentences) == (
        translate_lines(model, tokenizer, sentences)
    )
    assert json.loads((target / "export.json").read_text())["beam_size"] == 4


def _fail_after(original: Any, error: BaseException) -> Any:
    """`original`, then `error`: a failure once its files are written."""

    def failing(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise error

    return failing


def _crash_after(where: str, error: BaseException, patch: pytest.MonkeyPatch) -> None:
    """Makes the next export fail with `error` once `where` has been written."""
    if where == "saved_model":  # the reported moment: saved_model.pb is there
        archive = type(keras.export.ExportArchive())  # the backend's class
        patch.setattr(archive, "write_out", _fail_after(archive.write_out, error))
    else:
        save = export.save_model_and_tokenizer
        writer = export.saved_model  # the module whose writer calls it
        patch.setattr(writer, "save_model_and_tokenizer", _fail_after(save, error))


@pytest.mark.parametrize(
    "where, existing",
    [("saved_model", True), ("model_and_tokenizer", True), ("saved_model", False)],
)
def test_a_failed_export_leaves_the_earlier_one_whole_and_a_retry_succeeds(
    earlier: tuple[Path, dict[str, str]],
    where: str,
    existing: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reported: a crash once ``saved_model.pb`` existed left an export folder
    whose ``model.keras`` was a stub and which had no tokenizer; with
    --overwrite the earlier export was already deleted."""
    target, tree = earlier
    path = target if existing else target.with_name("2")
    model, tokenizer = tiny_translator()
    with monkeypatch.context() as patch:
        _crash_after(where, RuntimeError("killed"), patch)
        with pytest.raises(RuntimeError, match="killed"):
            export.export_translator(
                model, tokenizer, path, beam_size=1, overwrite=existing
            )
    # The earlier export is whole; a new folder was not created; nothing else.
    _assert_whole_earlier(target, tree)
    assert path.exists() == existing
    assert _leftovers(target.parent) == []
    # The retry writes the new export (in place of the earlier one).
    export.export_translator(model, tokenizer, path, beam_size=1, overwrite=existing)
    assert json.loads((path / "export.json").read_text())["beam_size"] == 1
    assert _translations(tf.saved_model.load(str(path)), INPUTS[:3]) == (
        translate_lines(model, tokenizer, INPUTS[:3], beam_size=1)
    )
    assert export.is_export_dir(path) and _leftovers(target.parent) == []


def test_full_disk_during_export_is_one_line_and_keeps_the_earlier_export(
    earlier: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command line, the disk full while model.keras is written: one line,
    exit status 1, the earlier export whole."""
    target, tree = earlier
    full = OSError(errno.ENOSPC, "No space left on device")
    _crash_after("model_and_tokenizer", full, monkeypatch)
    argv = ["export", "--workdir", str(target), "--output", str(target)]
    assert cli.main([*argv, "--overwrite", "--beam-size", "1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (
        f"keras-transformer export: error: Could not write {target}: no space "
        "left on the device; the previous 1 is intact. Free disk space, then run "
        "the same command again."
    )
    _assert_whole_earlier(target, tree)
    assert _leftovers(target.parent) == []


@pytest.mark.parametrize("kind", ["tensorflow", "free_space"])
def test_full_disk_in_the_library_is_a_file_write_error(
    earlier: tuple[Path, dict[str, str]], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorFlow's full-disk error while writing the SavedModel (a new
    folder), and a disk with less free space than the export needs (refused
    before anything is written; an earlier export)."""
    target, tree = earlier
    model, tokenizer = tiny_translator()
    if kind == "tensorflow":
        path, kept = target.with_name("2"), "2 was not created"
        full = tf.errors.ResourceExhaustedError(
            None, None, "variables/variables.data-00000-of-00001; No space left"
        )
        _crash_after("saved_model", full, monkeypatch)
    else:
        path, kept = target, "are free; the previous 1 is intact"
        usage = shutil.disk_usage(target.parent)
        monkeypatch.setattr(
            files.shutil, "disk_usage", lambda _: usage._replace(free=1000)
        )
    with pytest.raises(files.FileWriteError) as error:
        export.export_translator(model, tokenizer, path, beam_size=1, overwrite=True)
    message = str(error.value)
    assert error.value.errno == errno.ENOSPC and "\n" not in message
    assert message.startswith(f"Could not write {path}: no space left on the device")
    assert kept in message and "Free disk space" in message
    _assert_whole_earlier(target, tree)
    assert not target.with_name("2").exists() and _leftovers(target.parent) == []


def test_a_leftover_temporary_folder_is_no_export_and_blocks_nothing(
    earlier: tuple[Path, dict[str, str]],
) -> None:
    """A killed export leaves ``.tmp-<pid>-<name>`` beside the target: it is
    never read as an export, and the next export of that name removes it
    (not the temporary folder of another name that ends the same)."""
    target, _ = earlier
    parent = target.parent
    stale = parent / ".tmp-99999-1"  # whole enough to look like an export
    shutil.copytree(target, stale)
    other = parent / ".tmp-99999-v-1"  # another target's, "v-1"
    other.mkdir()
    assert not export.is_export_dir(stale)
    with pytest.raises(FileNotFoundError, match="not a folder written by"):
        export.load_export(stale)
    with pytest.raises(FileExistsError, match="temporary folder"):
        export.export_translator(*tiny_translator(), stale, overwrite=True)
    path = export.export_translator(
        *tiny_translator(), target, beam_size=1, overwrite=True
    )
    assert path == target and export.is_export_dir(target)
    assert _leftovers(parent) == [other.name]
    # The lock is beside the export, not in it: the folder holds the export only.
    assert (parent / ".1.lock").is_file()
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [
            "assets",
            "fingerprint.pb",
            "model.keras",
            "saved_model.pb",
            "tokenizer",
            "variables",
            "export.json",
        ]
    )


def test_an_overwrite_keeps_what_else_the_earlier_export_folder_held(
    earlier: tuple[Path, dict[str, str]],
) -> None:
    target, _ = earlier
    (target / "NOTES.md").write_text("trained on dates\n")
    (target / "extra").mkdir()
    (target / "extra" / "a.txt").write_text("a")
    export.export_translator(*tiny_translator(), target, beam_size=1, overwrite=True)
    assert (target / "NOTES.md").read_text() == "trained on dates\n"
    assert (target / "extra" / "a.txt").read_text() == "a"
    assert json.loads((target / "export.json").read_text())["beam_size"] == 1


def test_two_exports_into_one_folder_cannot_interleave(
    earlier: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, tree = earlier
    lock = export.lock_path(target)
    assert lock == target.parent / ".1.lock"
    with holding_lock(target, "another export", lock) as holder:
        with pytest.raises(files.FolderLockedError, match=f"PID {holder.pid}"):
            export.export_translator(
                *tiny_translator(), target, beam_size=1, overwrite=True
            )
        argv = ["export", "--workdir", str(target), "--output", str(target)]
        assert cli.main([*argv, "--overwrite"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "another export" in err and "one writer at a time" in err
    _assert_whole_earlier(target, tree)


def _run_like_folder(path: Path) -> Path:
    """A folder laid out as a training run: config, checkpoints, tokenizer, logs."""
    files_in_run = {
        "config.json": '{"kind": "translation"}\n',
        "checkpoints/checkpoint": 'model_checkpoint_path: "ckpt-2"\n',
        "checkpoints/ckpt-2.index": "index",
        "checkpoints/ckpt-2.data-00000-of-00001": "weights",
        "tokenizer/tokenizer.model": "sentencepiece",
        "tokenizer/tokenizer.json": "{}\n",
        "logs/train/events.out.tfevents.1.host": "events",
    }
    for name, text in files_in_run.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    return path


def _other_format_export(export_format: str, exported: Path, path: Path) -> Path:
    """An export of another format than `export_format`: a copy of the
    SavedModel, or (for the SavedModel) the files of a LiteRT export."""
    if export_format != "savedmodel":
        return Path(shutil.copytree(exported, path))
    path.mkdir()
    for name in ("litert.json", "model.tflite", "tokenizer.model"):
        (path / name).write_text(name)
    return path


@pytest.mark.parametrize("export_format", ["savedmodel", "litert", "ctranslate2"])
def test_overwrite_deletes_no_folder_without_an_export_of_its_format(
    exported: Path,
    tmp_path: Path,
    export_format: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Reported (issue 35): ``export --format litert --overwrite --output RUN``
    exited 0 and left RUN with only the LiteRT files: its checkpoints,
    config, tokenizer and logs deleted; a folder of someone's files went the
    same way. Every format now refuses, with one line, a folder that holds
    no export of its own format (a run folder, someone's files, another
    format's export), before the model is loaded, and deletes nothing."""
    if export_format == "ctranslate2" and not importlib.util.find_spec("ctranslate2"):
        pytest.skip("the CTranslate2 export needs the ctranslate2 extra")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    targets = [
        _run_like_folder(tmp_path / "run"),
        notes,
        _other_format_export(export_format, exported, tmp_path / "other"),
    ]
    for target in targets:
        tree = _tree(target)
        argv = ["export", "--workdir", str(exported), "--output", str(target)]
        status = cli.main([*argv, "--format", export_format, "--overwrite"])
        err = capsys.readouterr().err
        assert status == 1, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{target} is not empty and holds no" in err, err
        assert "refusing to delete it" in err, err
        assert _tree(target) == tree  # byte for byte
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------ killed while writing
def _start_export(workdir: Path, output: Path) -> subprocess.Popen:
    """``keras-transformer export --overwrite`` (greedy) in a child process."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_transformer",
            "export",
            "--workdir",
            str(workdir),
            "--output",
            str(output),
            "--beam-size",
            "1",
            "--overwrite",
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _moments(parent: Path, pid: int) -> dict[str, Any]:
    """When to kill the child: conditions on what it has written so far."""
    temporary = parent / f".tmp-{pid}-1"
    return {
        "holding the lock": lambda: f'"pid": {pid}' in _read(parent / ".1.lock"),
        "temporary folder created": temporary.is_dir,
        "saved_model.pb written": (temporary / "saved_model.pb").is_file,
        "model.keras written": (temporary / "model.keras").is_file,
        "export.json written": (temporary / "export.json").is_file,
    }


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_sigkill_during_export_overwrite_keeps_the_earlier_export(
    exported: Path, earlier: tuple[Path, dict[str, str]]
) -> None:
    """SIGKILL at five moments of ``export --overwrite``: the target is the
    earlier export, whole (or, killed as it swapped, the new one, whole),
    never a mix; a leftover temporary folder is no export; then the same
    command succeeds and leaves nothing beside the export."""
    target, tree = earlier
    outcomes = {}
    started = time.monotonic()
    for moment in _moments(target.parent, 0):
        child = _start_export(exported, target)
        reached = _moments(target.parent, child.pid)[moment]
        deadline = time.monotonic() + 300
        while not reached():
            assert child.poll() is None, (moment, child.communicate()[0][-3000:])
            assert time.monotonic() < deadline, f"never reached: {moment}"
            time.sleep(0.002)
        child.kill()
        child.communicate()
        leftovers = [target.parent / name for name in _leftovers(target.parent)]
        # At most the killed child's: each export removes the stale ones first.
        assert [p.name for p in leftovers] in ([], [f".tmp-{child.pid}-1"])
        assert all(not export.is_export_dir(path) for path in leftovers)
        if _tree(target) == tree:
            _assert_whole_earlier(target, tree)
            outcomes[moment] = "earlier export intact"
        else:  # the swap had happened: the new export, whole
            assert moment == "export.json written", moment
            assert json.loads((target / "export.json").read_text())["beam_size"] == 1
            assert export.is_export_dir(target)
            tf.saved_model.load(str(target))
            outcomes[moment] = "new export complete"
        print(
            f"killed when {moment}: {outcomes[moment]}, leftovers "
            f"{[p.name for p in leftovers]}; {time.monotonic() - started:.0f} s"
        )
    assert list(outcomes.values())[:4] == ["earlier export intact"] * 4
    child = _start_export(exported, target)
    output = child.communicate(timeout=300)[0]
    assert child.returncode == 0, output[-3000:]
    assert json.loads((target / "export.json").read_text())["beam_size"] == 1
    model, tokenizer = tiny_translator()
    assert _translations(tf.saved_model.load(str(target)), INPUTS) == (
        translate_lines(model, tokenizer, INPUTS, beam_size=1)
    )
    assert _leftovers(target.parent) == []


def test_an_empty_folder_is_filled_and_keeps_its_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "models" / "3"
    target.mkdir(parents=True)
    target.chmod(0o750)
    monkeypatch.chdir(target)
    with pytest.raises(FileExistsError, match="current folder"):
        export.export_translator(*tiny_translator(), ".", beam_size=1)
    monkeypatch.chdir(tmp_path)
    path = export.export_translator(*tiny_translator(), "models/3", beam_size=1)
    assert path == Path("models/3") and export.is_export_dir(target)
    assert target.stat().st_mode & 0o777 == 0o750
    assert _leftovers(target.parent) == [] and (target.parent / ".3.lock").is_file()


def test_the_format_registry_lists_the_three_formats() -> None:
    from keras_transformer.export import formats

    assert list(formats.FORMATS) == ["savedmodel", "litert", "ctranslate2"]
    found = {name: formats.get_format(name) for name in formats.FORMATS}
    assert {n: f.name for n, f in found.items()} == {
        "savedmodel": "SavedModel",
        "litert": "LiteRT",
        "ctranslate2": "CTranslate2",
    }
    for name, export_format in found.items():
        assert export_format.option == name and "translation" in export_format.kinds
        # A run export of its own, or one through its model export.
        assert callable(export_format.export_run) != callable(
            export_format.export_model
        )
        assert callable(export_format.load_translator)
    assert found["savedmodel"].kinds == ("translation", "classification", "image")
    assert found["litert"].quantizations == ("int8", "float32")
    assert found["ctranslate2"].quantizations[0] == "float32"
    with pytest.raises(ValueError, match="formats are savedmodel, litert, ctranslate2"):
        formats.get_format("onnx")
    bare = dataclasses.replace(found["litert"], export_model=None)
    with pytest.raises(TypeError, match="LiteRT format registers no run export"):
        bare.run_export("run", "folder")


def test_cli_refuses_an_unknown_format_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "--workdir", str(tmp_path), "--output", str(tmp_path / "x")]
    assert cli.main([*argv, "--format", "onnx"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-transformer export: error: --format: Unknown export format 'onnx'; "
        "the formats are savedmodel, litert, ctranslate2."
    ]


def test_cli_translate_dispatches_on_the_folder_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``translate --workdir`` of a LiteRT folder goes to the LiteRT
    translator, which serves neither n-best lists nor prefixes: refused in
    one line before anything loads."""
    from keras_transformer.export import litert

    folder = tmp_path / "litert"
    folder.mkdir()
    for name in (litert.INFO_FILE, litert.MODEL_FILE, litert.TOKENIZER_FILE):
        (folder / name).write_text("{}")
    source = tmp_path / "in.txt"
    source.write_text("ein Hund\n")
    argv = ["translate", "--workdir", str(folder), "--input", str(source)]
    assert cli.main([*argv, "--n-best", "2", "--prefix-column"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-transformer translate: error: --n-best, --prefix-file/--prefix-column: "
        "not served from a LiteRT folder; translate with the run folder "
        "(--workdir RUN) instead."
    ]
