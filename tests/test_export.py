"""kt.export: a translation SavedModel that needs only TensorFlow and TF Text."""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, decoding, export
from keras_transformer.cli import export as export_command
from keras_transformer.data import (
    SubwordTokenizer,
    TextPairs,
    batch_for_eval,
    synthetic_dates,
)
from keras_transformer.data.batching import encode_sources
from keras_transformer.models import build_transformer, presets
from keras_transformer.translation import Translator, translate_lines
from tests.export_helpers import (
    END,
    INPUTS,
    LONG,
    child_env,
    pad_rows,
    run_like_folder,
    served_translations,
    tiny_translator,
    transposes_by_dtype,
)
from tests.former_decoding import former_beam_search_graph

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
        env=child_env(),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    # Loading warned "Importing a function (...) with ops with unsaved
    # custom gradients" once per function holding one (9 lines).
    assert "custom gradients" not in child.stderr
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
    sources = pad_rows(
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


def _function_library(path: Path) -> list[Any]:
    """The `FunctionDef`s of an export's ``saved_model.pb``."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((path / "saved_model.pb").read_bytes())
    return list(saved.meta_graphs[0].graph_def.library.function)


def _compiled_source_shapes(path: Path) -> set[tuple[int, ...]]:
    """The static source-id shapes of the XLA programs of an export."""
    shapes = set()
    for function in _function_library(path):
        if function.attr["_XlaMustCompile"].b:
            first = function.arg_attr[0].attr["_output_shapes"].list.shape[0]
            shapes.add(tuple(dim.size for dim in first.dim))
    return shapes


@pytest.fixture(scope="module")
def jit_exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny translator exported with ``jit_compile=True``."""
    model, tokenizer = tiny_translator()
    directory = tmp_path_factory.mktemp("jit") / "1"
    return export.export_translator(model, tokenizer, directory, jit_compile=True)


def _assert_same_outputs(plain: Any, jitted: Any, batches: list[list[str]]) -> None:
    """The two `translate_ids` signatures give the same ids, lengths and
    scores for each batch."""
    for sentences in batches:
        want = plain(sentences=tf.constant(sentences))
        got = jitted(sentences=tf.constant(sentences))
        np.testing.assert_array_equal(got["token_ids"], want["token_ids"])
        np.testing.assert_array_equal(got["lengths"], want["lengths"])
        np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)


def test_a_jit_compiled_export_holds_one_xla_program_per_small_shape(
    exported: Path, jit_exported: Path
) -> None:
    """`jit_compile=True` writes an XLA program for each small batch (1, 2
    and 4 rows) and source width (up to 32 ids, up to 128); a larger batch
    runs the graph, with the plain export's outputs, and so does an empty
    one. (The compiled programs run in the slow test below.)"""
    path = jit_exported
    assert json.loads((path / export.INFO_FILE).read_text())["jit_compile"] is True
    _, tokenizer = tiny_translator()
    widths = [len(ids) + 1 for ids in tokenizer.encode(INPUTS)]
    # Both source widths are compiled: sources up to 32 ids and longer ones.
    assert min(widths) <= export.COMPILED_SOURCE_WIDTHS[0] < max(widths)
    assert export.COMPILED_BATCH_SIZES == (1, 2, 4)
    # One XLA program per batch size and source width, its shapes static.
    assert _compiled_source_shapes(path) == {
        (rows, width) for rows in (1, 2, 4) for width in (32, 128)
    }
    plain = tf.saved_model.load(str(exported)).signatures["translate_ids"]
    jitted = tf.saved_model.load(str(path)).signatures["translate_ids"]
    _assert_same_outputs(plain, jitted, [INPUTS[:5], INPUTS])
    empty = jitted(sentences=tf.constant([], tf.string))
    assert empty["token_ids"].shape[0] == 0 and empty["lengths"].shape == (0,)


def test_a_jit_compiled_export_runs_no_graph_search_for_a_few_sentences(
    jit_exported: Path,
) -> None:
    """The function that picks the compiled search (its `If` whose branches
    stay functions) holds the graph search in one branch of a `tf.cond`, the
    other branch empty: 1 to 4 sentences skip it, where it used to run on no
    rows (its encoder and its loop's set-up at every call). Larger batches
    give the plain export's outputs (the test above)."""
    functions = {f.signature.name: f for f in _function_library(jit_exported)}
    loops = ("While", "StatelessWhile")

    def conds(function: Any, lowered: bool) -> list[Any]:
        return [
            node
            for node in function.node_def
            if node.op in ("If", "StatelessIf")
            and node.attr["_lower_using_switch_merge"].b == lowered
        ]

    def holds_loop(name: str) -> bool:
        return any(node.op in loops for node in functions[name].node_def)

    choosers = [f for f in functions.values() if conds(f, lowered=False)]
    assert choosers, "no If of the compiled searches"
    for chooser in choosers:
        assert not [n.name for n in chooser.node_def if n.op in loops]
        # (then, else) of each lowered cond: whether each branch loops.
        branches = [
            [
                holds_loop(node.attr[key].func.name)
                for key in ("then_branch", "else_branch")
            ]
            for node in conds(chooser, lowered=True)
        ]
        assert [pair for pair in branches if any(pair)] == [[False, True]]


@pytest.mark.slow  # XLA compiles six searches (18 s here, with -n 2)
def test_a_jit_compiled_export_translates_small_batches_like_the_graph(
    exported: Path, jit_exported: Path
) -> None:
    """A call with 1 to 4 sentences runs the search compiled with XLA (1, 2
    and 4 rows; a short and a long source width; 3 sentences padded with an
    empty one): the translations, lengths and scores are the plain
    export's."""
    plain = tf.saved_model.load(str(exported)).signatures["translate_ids"]
    jitted = tf.saved_model.load(str(jit_exported)).signatures["translate_ids"]
    batches = [[text] for text in INPUTS]
    batches += [INPUTS[:2], INPUTS[6:9], INPUTS[:4]]
    _assert_same_outputs(plain, jitted, batches)


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
        env=child_env(),
    )
    assert shown.returncode == 0, shown.stderr[-3000:]
    for name in ("serving_default", "translate", "translate_ids"):
        assert f"signature_def['{name}']" in shown.stdout
    for name in ("sentences", "translations", "scores", "token_ids", "lengths"):
        assert f"['{name}']" in shown.stdout
    assert "DT_STRING" in shown.stdout


def test_the_saved_model_holds_no_gradient_functions(exported: Path) -> None:
    """An export serves and nothing differentiates it: `tf.saved_model.save`
    is told not to trace the layers' gradient functions, which were two
    thirds of the function library and a sixth of an export's time."""
    names = [function.signature.name for function in _function_library(exported)]
    assert any("translate" in name for name in names)
    assert not [name for name in names if "grad_fn" in name]
    # Nor any op that would carry one (`tf.custom_gradient`'s IdentityN):
    # the export traces the backend's twins under `backend.forward_only()`.
    carriers = [
        node.name
        for function in _function_library(exported)
        for node in function.node_def
        if "_gradient_op_type" in node.attr
    ]
    assert not carriers


def test_the_saved_model_transposes_no_integers(exported: Path) -> None:
    """`encode_sources` appended END by a ragged concat, which transposes
    int64 row indices: every `translate`, `evaluate` and `train` printed
    TensorFlow's oneDNN error line (`transposes_by_dtype`)."""
    transposes = transposes_by_dtype(exported)
    assert set(transposes) == {"float32"}, transposes  # the attention heads'


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
    until the last has finished) give the same signatures and outputs; the
    export traces each of its four searches once (Keras' ``write_out`` alone
    traced them twice)."""
    model, tokenizer = tiny_translator()
    current = decoding.Decoder.search
    traces: collections.Counter[tuple[bool, bool, bool]] = collections.Counter()

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
        traces[(prefix is not None, n_best is not None, constraints is not None)] += 1
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
    # The plain, prefix, n-best and constrained searches, each traced once.
    assert len(traces) == 4 and set(traces.values()) == {1}, traces
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
    with pytest.raises(FileExistsError, match="holds no SavedModel export"):
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
    # An earlier export (beam 4) in the output folder: refused, then replaced.
    output = tmp_path / "greedy"
    shutil.copytree(exported, output)
    argv = ["--workdir", str(exported), "--output", str(output), "--beam-size", "1"]
    with pytest.raises(ValueError, match="overwrite"):
        export_command.run(parser.parse_args(argv))
    assert json.loads((output / "export.json").read_text())["beam_size"] == 4
    assert export_command.run(parser.parse_args([*argv, "--overwrite"])) == 0
    assert "serving_default" in capsys.readouterr().out

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
    assert "(feed-forward weights in int8)" in capsys.readouterr().out
    assert json.loads((output / "export.json").read_text())["quantization"] == "int8"

    pairs = synthetic_dates(96, seed=5)
    served = {
        name: served_translations(tf.saved_model.load(str(path)), list(pairs.sources))
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


def test_int8_weights_multiply_float32_inputs() -> None:
    """Weight-only int8: each quantized Dense holds int8 weights with one scale
    per output unit and multiplies its float32 inputs, not quantized, by the
    dequantized weights (quantizing the inputs too made batches 2.5 times
    slower, docs/export.md)."""
    served = export.quantized(tiny_translator()[0], "int8")
    dense = [
        layer
        for layer in served._flatten_layers()
        if getattr(layer, "quantization_mode", None) == "int8"
    ]
    assert len(dense) == 4  # the two Dense layers of each feed-forward block
    rng = np.random.default_rng(0)
    for layer in dense:
        assert str(layer.kernel.dtype) == "int8"
        kernel, scale, bias = (
            keras.ops.convert_to_numpy(weight)
            for weight in (layer.kernel, layer.kernel_scale, layer.bias)
        )
        kernel = kernel.astype("float32") / scale
        x = rng.normal(size=(5, kernel.shape[0])).astype("float32")
        expected = layer.activation(x @ kernel + bias)
        np.testing.assert_allclose(layer(x), expected, rtol=1e-5, atol=1e-5)


def test_int8_is_refused_where_the_savedmodel_has_no_such_weights(
    exported: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="not a SavedModel weight type") as error:
        export.quantized(tiny_translator()[0], "int4")
    assert "\n" not in str(error.value) and "float32, int8" in str(error.value)
    run = run_like_folder(tmp_path / "run")
    (run / "config.json").write_text(json.dumps({"kind": "classification"}))
    with pytest.raises(ValueError, match="takes no quantization"):
        export.export_run(run, tmp_path / "out", quantization="int8")


def test_a_damaged_export_json_is_one_line_naming_the_file(
    exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
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
    with pytest.raises(ValueError, match="is not valid JSON.*export the run again"):
        Translator.load(copy)
    # The export command reads the folder's kind first: the same line.
    argv = ["export", "--workdir", str(copy), "--output", str(tmp_path / "out")]
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{info_path} is not valid JSON" in err and "export the run again" in err
    info_path.write_text("[4]")
    with pytest.raises(ValueError, match="holds a JSON array, not an object"):
        export.load_export(copy)
    assert cli.main(argv) != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{info_path} holds a JSON array, not an object" in err
    assert not (tmp_path / "out").exists()


def test_an_export_json_of_before_0_1_0_is_refused_in_one_line(
    exported: Path, tmp_path: Path
) -> None:
    """``max_output_extra`` and ``length_penalty`` (the names of
    ``extra_length`` and ``alpha`` before 0.1.0) are refused, not dropped
    for the defaults."""
    copy = Path(shutil.copytree(exported, tmp_path / "old"))
    info_path = copy / "export.json"
    info = json.loads(info_path.read_text(encoding="utf-8"))
    assert info["extra_length"] == 50 and "max_output_extra" not in info
    del info["extra_length"]
    info["max_output_extra"] = 7
    info_path.write_text(json.dumps(info), encoding="utf-8")
    for load in (export.load_export, Translator.load):
        with pytest.raises(ValueError, match=r"\['max_output_extra'\].*before 0.1.0"):
            load(copy)


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


@pytest.mark.slow  # ~32 s: an export in the older tokenizer's form, then a process
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
        env=child_env(),
    )
    assert child.returncode == 0, child.stderr[-3000:]
    old, new = json.loads(child.stdout.strip().splitlines()[-1])
    assert old == new == translate_lines(model, tokenizer, INPUTS)


# ------------------------------------------------------- the input's shape
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
    assert served_translations(loaded, dates) == translate_lines(
        model, tokenizer, dates
    )
    empty = loaded.signatures["translate_ids"](sentences=tf.constant([], tf.string))
    assert empty["token_ids"].shape[0] == 0 and empty["lengths"].shape == [0]
    # The check as a function, eagerly.
    assert export.check_sentence_batch(tf.constant(dates)).numpy().tolist() == [
        date.encode() for date in dates
    ]
    with pytest.raises(tf.errors.InvalidArgumentError, match="got shape"):
        export.check_sentence_batch(tf.constant([dates]))
