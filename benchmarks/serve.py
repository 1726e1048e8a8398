"""Serving speed: the exported SavedModel, loaded without this package.

A trained run (`--workdir`) is exported three times from the same weights:

* with `keras_transformer.export.export_translator` (the SentencePiece
  tokenizer, beam search with beam 4 and alpha 0.6 over key/value caches, and
  the detokenizer in one graph; Vaswani et al. 2017, §6.1), once with
  ``jit_compile=True`` (1 to 4 sentences per call searched under XLA; the first
  row, on which the goals are measured) and once without;
* as the TensorFlow tutorial "Neural machine translation with a Transformer
  and Keras" exports its translator: the same tokenizer, then greedy decoding
  that calls the whole model (encoder included) on the source and the prefix
  decoded so far at every step, without caches ("tutorial, uncached").

Existing export folders can be measured too (`--export`, repeatable, e.g.
one written by an earlier version of the package), and without `--workdir`
the first of them supplies the weights of the tutorial baseline.

A child process that imports only `tensorflow` and `tensorflow_text` (it
checks that it never imports `keras_transformer`) loads every SavedModel and
calls its `serving_default` signature (raw strings in, strings out) on the
source sentences of the test split (Multi30k `test_2016_flickr`, German, by
default):

* in file order, `--batch-size` sentences per call (64): seconds for all
  sentences and sentences per second;
* sorted by length (number of words), same batch size: the cost of mixed
  lengths is the ratio of the two;
* one sentence per call (the first `--latency-sentences` sentences): latency
  p50 and p90.

The SavedModels and CTranslate2 float32 (the goals' reference) share one
serving process; every other CTranslate2 model (int8, its own ranking)
runs in a process of its own afterwards. Two CTranslate2 translators used in
one process slow each other down by about 1.5x on 2 cores: each keeps an
OpenMP team (libgomp), and once the teams' threads outnumber the cores
libgomp stops spinning between parallel regions (256 test sentences at
batch 64: float32 alone 0.94 s; after an int8 or a second float32
translator of the same process was used, 1.51 s).

Every call of every model of a process is interleaved with the same call of
the others (batch by batch), so that a busy machine slows all of them
alike; each call
runs `--repeats` times and its best time counts ("best of N"). The first
calls of every model (loading, tracing, and XLA's compilations: a batch,
then the shortest and the longest sentence alone) are timed apart and printed after the
table. The script prints the load
average, the model size, the settings and the ratios, and checks that the
exports of beam search give the same translations.

The conditions come first (`conditions.py`): the CPU's model and the
instruction sets its kernels depend on (AVX2, AVX-512F, AVX512_VNNI /
AVX_VNNI, AMX, from ``/proc/cpuinfo``), TensorFlow's intra-/inter-op threads
in the serving process (`--tf-intra-op-threads`, `--tf-inter-op-threads`; 0
is its default) and CTranslate2's `intra_threads`, and the load average at
the start, before and after the serving process and around its
measurements. `--background-load N` runs N busy processes beside the serving
process, as other jobs on a shared machine would; they stop when it ends, on
any error or Ctrl-C, when this script is gone, and at `--background-limit`.
`--record NAME` writes the figures and these conditions as a results record.
`--early-stop heuristic` exports the SavedModels with beam search's heuristic
stopping rule (`DecodeSettings.early_stop`), nearer CTranslate2's own rule
(it stops a sentence once its best candidate of a step ends).

Usage:
    python benchmarks/serve.py --workdir runs/m30k_cpu [--weights last]
    python benchmarks/serve.py --workdir runs/m30k_cpu --export old_export/1
    python benchmarks/serve.py --export exported/de_en/1 --no-baseline
    python benchmarks/serve.py --workdir runs/m30k_cpu --background-load 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from conditions import SERVED_CODE, BackgroundLoad, load_average

TUTORIAL = "tutorial, uncached greedy"
CURRENT = "this version, beam {beam}"
#: The same export with `jit_compile=True`: 1 to 4 sentences per call under XLA.
CURRENT_JIT = "this version, beam {beam}, --jit-compile"
#: The same with `export --quantization int8` (feed-forward weights in int8).
CURRENT_JIT_INT8 = "this version, beam {beam}, --jit-compile, int8"
#: CTranslate2's own ranking (log P / |Y|^alpha), not re-ranked: not identical.
OWN_RANKING = "CTranslate2 float32, |Y|^alpha"
#: Environment variables that set thread pools, recorded as they were.
THREAD_VARIABLES = (
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_NUM_THREADS",
)


# -------------------------------------------------------------- child process
def _child(config_path: str) -> None:
    """Runs in a fresh process with only TensorFlow and TensorFlow Text."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    # Before anything runs: TensorFlow's thread pools (0: its default, the
    # number of cores).
    tf.config.threading.set_intra_op_parallelism_threads(config["tf_intra_op"])
    tf.config.threading.set_inter_op_parallelism_threads(config["tf_inter_op"])
    sentences: list[str] = config["sentences"]
    batch_size, repeats = config["batch_size"], config["repeats"]
    signatures = {
        label: tf.saved_model.load(path).signatures["serving_default"]
        for label, path in config["exports"]
    }
    # Checked before the CTranslate2 rows are loaded: the SavedModels load
    # and run without keras_transformer.
    imported_package = any(m.startswith("keras_transformer") for m in sys.modules)

    def saved_model(signature: Any) -> Any:
        def translate(batch: list[str]) -> list[str]:
            texts = signature(sentences=tf.constant(batch, tf.string))["translations"]
            return [t.decode("utf-8") for t in texts.numpy()]

        return translate

    models = {label: saved_model(sig) for label, sig in signatures.items()}
    ctranslate2_models, compute_types = _ctranslate2_models(config)
    models.update(ctranslate2_models)

    def call(label: str, batch: list[str]) -> tuple[float, list[str]]:
        start = time.perf_counter()
        texts = models[label](batch)
        return time.perf_counter() - start, texts

    # First calls (loading, tracing, XLA's compilations): a batch, then the
    # shortest and the longest sentence (by characters) alone; timed apart.
    by_width = sorted(sentences, key=len)
    first_calls = {}
    for label in models:
        first_calls[label] = sum(
            call(label, batch)[0]
            for batch in (sentences[:batch_size], by_width[:1], by_width[-1:])
        )

    def measure(batches: list[list[str]]) -> dict[str, Any]:
        """Best-of-`repeats` time of every batch, interleaved across models."""
        best = {label: [float("inf")] * len(batches) for label in models}
        texts: dict[str, list[str]] = {label: [] for label in models}
        for i, batch in enumerate(batches):
            for round_ in range(repeats):
                # Rotate the order so that no model always runs first.
                labels = list(models)
                shift = (i + round_) % len(labels)
                for label in labels[shift:] + labels[:shift]:
                    seconds, output = call(label, batch)
                    best[label][i] = min(best[label][i], seconds)
                    if round_ == 0:
                        texts[label].extend(output)
        return {"seconds": best, "translations": texts}

    def batches(order: list[int], size: int) -> list[list[str]]:
        return [
            [sentences[i] for i in order[start : start + size]]
            for start in range(0, len(order), size)
        ]

    file_order = list(range(len(sentences)))
    by_length = sorted(file_order, key=lambda i: len(sentences[i].split()))
    results = {
        "load_start": load_average(),
        "file_order": measure(batches(file_order, batch_size)),
        "sorted": measure(batches(by_length, batch_size)),
        "single": measure(batches(file_order[: config["latency_sentences"]], 1)),
        "load_end": load_average(),
        "threads": {
            "tf_intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "tf_inter_op": tf.config.threading.get_inter_op_parallelism_threads(),
            **{name: os.environ.get(name, "") for name in THREAD_VARIABLES},
        },
        "first_calls": first_calls,
        "compute_types": compute_types,
        "imported_package": imported_package,
        "ctranslate2_imports": sorted(
            m for m in sys.modules if m.startswith("keras_transformer")
        ),
        "tensorflow": tf.__version__,
    }
    print(json.dumps(results))


def _ctranslate2_models(
    config: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, str]]:
    """The CTranslate2 rows: `CTranslate2Translator` (ctranslate2 and
    sentencepiece; of this package only `keras_transformer.export.ctranslate2`
    and the light modules it reads), one call per batch as given; and the
    compute type each runs (int8 weights compute in int16 or float32 on a CPU
    whose int8 products saturate)."""
    if not config["ctranslate2"]:
        return {}, {}
    sys.path.insert(0, config["package_root"])
    from keras_transformer.export.ctranslate2 import CTranslate2Translator

    models, compute_types = {}, {}
    for label, path in config["ctranslate2"]:
        translator = CTranslate2Translator(
            path, intra_threads=config["ctranslate2_threads"]
        )
        compute_types[label] = translator.compute_type
        rerank = label != OWN_RANKING
        models[label] = lambda batch, t=translator, r=rerank: t.translate(
            batch, batch_size=len(batch), rerank=r
        )
    return models, compute_types


# ------------------------------------------------------------------ exports
def _tutorial_export(
    model: Any, tokenizer: Any, directory: Path, settings: Any
) -> None:
    """The tutorial's translator: greedy, the whole model on the prefix per step.

    Same tokenization and output limits as `export_translator` (the source's
    first `max_input_length - 1` subword tokens and END; at most the source
    length + `extra_length` output tokens); no key/value cache, and the
    encoder runs again at every step, as in the tutorial's `Translator`.
    """
    import keras
    import tensorflow as tf

    from keras_transformer.export import INPUT_NAME, source_ids_from_strings

    start_id, end_id = settings.start_id, settings.end_id
    max_output = settings.max_output_length

    def translate(sentences: tf.Tensor) -> dict[str, tf.Tensor]:
        source, is_empty = source_ids_from_strings(
            tokenizer, sentences, settings.max_input_length
        )
        real = tf.reduce_sum(tf.cast(source != 0, tf.int32), axis=1)
        limits = tf.minimum(real + settings.extra_length, max_output)
        limits = tf.where(is_empty, 0, limits)
        batch = tf.shape(source)[0]
        # START, then the outputs; 0 after the end.
        prefix = tf.concat(
            [tf.fill([batch, 1], start_id), tf.zeros([batch, max_output], tf.int32)], 1
        )

        def cond(index, prefix, done):
            return tf.logical_not(tf.reduce_all(done))

        def body(index, prefix, done):
            logits = model([source, prefix[:, : index + 1]], training=False)
            chosen = tf.argmax(logits[:, -1, 1:], axis=-1, output_type=tf.int32) + 1
            chosen = tf.where(done, 0, chosen)
            at_index = tf.equal(tf.range(max_output + 1), index + 1)
            prefix = tf.where(at_index, chosen[:, None], prefix)
            done = done | tf.equal(chosen, end_id) | (index + 1 >= limits)
            return index + 1, prefix, done

        _, prefix, _ = tf.while_loop(
            cond,
            body,
            (tf.constant(0), prefix, limits <= 0),
            maximum_iterations=max_output,
        )
        return {"translations": tokenizer.detokenize(prefix[:, 1:])}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.track(tokenizer)
    archive.add_endpoint(
        "serving_default",
        translate,
        [tf.TensorSpec([None], tf.string, name=INPUT_NAME)],
    )
    archive.write_out(str(directory), verbose=False)


def _test_sources(args: argparse.Namespace) -> tuple[list[str], list[str], str]:
    """The source and reference sentences of the test split (of the run's
    task); `SystemExit` with one line where they cannot be read."""
    from keras_transformer.data.tasks import get_task
    from keras_transformer.runs import is_run_dir
    from keras_transformer.training import DataConfig
    from keras_transformer.training.checkpoints import CONFIG_FILE
    from keras_transformer.training.config import TrainConfig

    data = DataConfig(task="multi30k", data_dir=args.data_dir)
    if args.workdir and is_run_dir(args.workdir):
        data = TrainConfig.load(Path(args.workdir) / CONFIG_FILE).data
        if args.data_dir:
            data = data.replace(data_dir=args.data_dir)
    task = get_task(data.task)
    split = args.split or task.test_split
    try:
        pairs = task.load_split(split, data)
    except OSError as error:  # no local copy and no download: one line
        raise SystemExit(f"serve.py: {error} Here: --data-dir FOLDER.") from None
    name = f"{data.task} {split} ({data.source_language})"
    return list(pairs.sources), list(pairs.targets), name


def _time_translator(
    model: Any, tokenizer: Any, sentences: list[str], beam_size: int, repeats: int
) -> tuple[float, list[str], int]:
    """Best-of-`repeats` seconds of `Translator.translate` on all sentences
    (after one untimed call that traces), its translations and batch size."""
    from keras_transformer.translation import Translator

    translator = Translator(model, tokenizer, beam_size=beam_size)
    texts = translator.translate(sentences)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        translator.translate(sentences)
        best = min(best, time.perf_counter() - start)
    return best, texts, translator.batch_size


def _ctranslate2_exports(
    model: Any, tokenizer: Any, work: Path, args: argparse.Namespace
) -> list[tuple[str, str]]:
    """The same weights as CTranslate2 float32 and int8 folders (beam
    `--beam-size`, alpha 0.6, +50, the GNMT penalty by re-ranking), and the
    float32 folder with CTranslate2's own length penalty (the cost of the
    re-ranking)."""
    from keras_transformer.export.ctranslate2 import export_ctranslate2

    folders = []
    for quantization in ("float32", "int8"):
        folder = export_ctranslate2(
            model,
            tokenizer,
            work / f"ctranslate2_{quantization}",
            beam_size=args.beam_size,
            quantization=quantization,
            overwrite=True,
        )
        folders.append((f"CTranslate2 {quantization}", str(folder)))
    return [*folders, (OWN_RANKING, folders[0][1])]


def _print_table(
    rows: list[tuple[str, str]],
    results: dict[str, Any],
    sentences: list[str],
    references: list[str],
    tokenizer: Any,
    first: str,
) -> dict[str, tuple[float, float, float, float]]:
    """One line per model: batch-`N` seconds and target tokens per second in
    file order, sorted, batch-1 p50/p90, BLEU against the references and
    identical translations with the first model; returns (file order s,
    sorted s, p50 ms, BLEU) per label."""
    import sacrebleu

    width = max(len(label) for label, _ in rows) + 2
    header = (
        f"{'model':<{width}}{'file order s':>13}{'sent/s':>8}{'tok/s':>8}"
        f"{'sorted s':>10}{'p50 ms':>8}{'p90 ms':>8}{'BLEU':>7}{'same':>7}"
    )
    print(header)
    print("-" * len(header))
    translations = results["file_order"]["translations"]
    summary = {}
    for label, _ in rows:
        file_s = sum(results["file_order"]["seconds"][label])
        sorted_s = sum(results["sorted"]["seconds"][label])
        single = [1000 * s for s in results["single"]["seconds"][label]]
        texts = translations[label]
        # Target subword tokens, END included (what the decoder produced).
        tokens = sum(len(ids) + 1 for ids in tokenizer.encode(texts))
        bleu = sacrebleu.corpus_bleu(texts, [references]).score
        same = sum(a == b for a, b in zip(texts, translations[first], strict=True))
        p50, p90 = _percentile(single, 0.5), _percentile(single, 0.9)
        summary[label] = (file_s, sorted_s, p50, bleu)
        print(
            f"{label:<{width}}{file_s:>13.2f}{len(sentences) / file_s:>8.1f}"
            f"{tokens / file_s:>8.0f}{sorted_s:>10.2f}{p50:>8.1f}{p90:>8.1f}"
            f"{bleu:>7.2f}{same:>7}"
        )
    return summary


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def main() -> None:
    # Here, not at the top: the serving child (this file too) imports only
    # tensorflow and tensorflow_text.
    from keras_transformer.conventions import EARLY_STOPS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="a training run to export and measure")
    parser.add_argument("--weights", default="last", help="weights of the run")
    parser.add_argument(
        "--export",
        action="append",
        default=[],
        help="an existing export folder to measure as well (repeatable)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the tutorial")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--latency-sentences", type=int, default=100)
    parser.add_argument("--sentences", type=int, default=None, help="first N only")
    parser.add_argument("--repeats", type=int, default=2, help="best of N per call")
    parser.add_argument("--split", help="default: the task's test split")
    parser.add_argument("--data-dir", help="default: the run's")
    parser.add_argument(
        "--translator",
        action="store_true",
        help="also time the package's Translator (what `evaluate` runs) in "
        "this process, before the serving process starts",
    )
    parser.add_argument(
        "--no-ctranslate2",
        action="store_true",
        help="skip the CTranslate2 float32 and int8 rows (exports of --workdir)",
    )
    parser.add_argument(
        "--ctranslate2-threads",
        type=int,
        default=0,
        help="CTranslate2's intra_threads (0: its default, up to 4). On a shared, "
        "oversubscribed machine 1 avoids OpenMP threads spinning for cores.",
    )
    parser.add_argument(
        "--tf-intra-op-threads",
        type=int,
        default=0,
        help="TensorFlow's intra-op threads in the serving process (0: its "
        "default, one per core)",
    )
    parser.add_argument(
        "--tf-inter-op-threads",
        type=int,
        default=0,
        help="TensorFlow's inter-op threads in the serving process (0: default)",
    )
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        metavar="N",
        help="run N busy processes (one core each) beside the measurement; they "
        "stop when it ends, on any error or Ctrl-C, and after --background-limit",
    )
    parser.add_argument(
        "--background-limit",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="hard time limit of each busy process (default 3600)",
    )
    parser.add_argument(
        "--record",
        metavar="NAME",
        help="also write the figures and conditions as the results record "
        "docs/results/NAME.json",
    )
    parser.add_argument(
        "--no-int8-savedmodel",
        action="store_true",
        help="leave out the --jit-compile export with --quantization int8",
    )
    parser.add_argument(
        "--early-stop",
        choices=EARLY_STOPS,
        default="exact",
        help="the SavedModel exports' stopping rule (DecodeSettings.early_stop; "
        "default exact, §6.1); heuristic stops a sentence once no live "
        "hypothesis would win if it ended now, closer to CTranslate2's rule",
    )
    parser.add_argument("--keep", help="write the exports here (default: a temp dir)")
    args = parser.parse_args()
    if args.background_load < 0 or args.background_limit <= 0:
        parser.error("--background-load must be >= 0 and --background-limit > 0")
    if not args.workdir and not args.export:
        parser.error("pass --workdir (a training run) and/or --export (a folder)")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf

    from keras_transformer.export import export_translator
    from keras_transformer.runs import load_export
    from keras_transformer.translation import load_translator

    load_start = load_average()
    sentences, references, test_name = _test_sources(args)
    if args.sentences:
        sentences = sentences[: args.sentences]
        references = references[: args.sentences]
    work = Path(args.keep or tempfile.mkdtemp(prefix="serve_benchmark_"))
    work.mkdir(parents=True, exist_ok=True)

    exports: list[tuple[str, str]] = []
    if args.workdir:
        model, tokenizer = load_translator(args.workdir, args.weights)
        # The --jit-compile export first: the goals are measured on it (a
        # batch of several runs the same graph in both).
        variants = [
            (CURRENT_JIT, "current_jit", True, "float32"),
            (CURRENT, "current", False, "float32"),
        ]
        if not args.no_int8_savedmodel:
            variants.append((CURRENT_JIT_INT8, "current_jit_int8", True, "int8"))
        stop = "" if args.early_stop == "exact" else f", {args.early_stop} stop"
        for label, name, jit_compile, quantization in variants:
            export_translator(
                model,
                tokenizer,
                work / name,
                beam_size=args.beam_size,
                jit_compile=jit_compile,
                quantization=quantization,
                early_stop=args.early_stop,
                overwrite=True,
            )
            exports.append((label.format(beam=args.beam_size) + stop, str(work / name)))
    else:
        model, tokenizer, _ = load_export(args.export[0])
    exports += [(f"export {path}", str(path)) for path in args.export]
    _, _, settings = load_export(exports[0][1])
    if not args.no_baseline:
        from keras_transformer.export import ExportSettings

        fields = ExportSettings.__dataclass_fields__
        tutorial = work / "tutorial"
        _tutorial_export(
            model,
            tokenizer,
            tutorial,
            ExportSettings(**{k: v for k, v in settings.items() if k in fields}),
        )
        exports.append((TUTORIAL, str(tutorial)))

    ctranslate2_exports = []
    if args.workdir and not args.no_ctranslate2:
        ctranslate2_exports = _ctranslate2_exports(model, tokenizer, work, args)

    translator_result = None
    if args.translator:
        translator_result = _time_translator(
            model, tokenizer, sentences, args.beam_size, args.repeats
        )

    child_config = {
        "sentences": sentences,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "latency_sentences": min(args.latency_sentences, len(sentences)),
        "ctranslate2_threads": args.ctranslate2_threads,
        "tf_intra_op": args.tf_intra_op_threads,
        "tf_inter_op": args.tf_inter_op_threads,
        "package_root": str(Path(__file__).resolve().parents[1]),
    }
    # One CTranslate2 model per serving process: the SavedModels are
    # interleaved with the first (float32, the goals' reference); every other
    # CTranslate2 row runs alone in a process of its own (see the module's
    # docstring: two translators in one process slow each other down).
    groups = [(exports, ctranslate2_exports[:1])]
    groups += [([], [row]) for row in ctranslate2_exports[1:]]
    started = time.perf_counter()
    loads = {"script start": load_start, "before the serving process": load_average()}
    # The busy processes stop when the serving processes have ended, on any
    # exception or Ctrl-C, or at their time limit, whichever comes first.
    with BackgroundLoad(args.background_load, args.background_limit):
        parts = [
            _serve(work / f"child_{i}.json", child_config, saved, engines)
            for i, (saved, engines) in enumerate(groups)
        ]
        loads["after the serving process"] = load_average()
    results = _merge(parts)

    print(
        f"model: {model.count_params() / 1e6:.1f}M parameters, vocabulary "
        f"{settings.get('vocabulary_size')}; exports: beam {settings.get('beam_size')}"
        f", alpha {settings.get('alpha')}, outputs up to the source + "
        f"{settings.get('extra_length')} tokens (at most "
        f"{settings.get('max_output_length')})"
    )
    print(
        f"data: {len(sentences)} sentences of {test_name}; batch {args.batch_size} "
        f"(file order and sorted by words), batch 1 on the first "
        f"{min(args.latency_sentences, len(sentences))}; best of {args.repeats} "
        "interleaved calls each"
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPU cores, TensorFlow "
        f"{results['tensorflow']} (serving process: tensorflow + tensorflow_text "
        f"only); {time.perf_counter() - started:.0f} s"
    )
    loads["measurements start"] = results["load_start"]
    loads["measurements end"] = results["load_end"]
    conditions = _conditions(args, results["threads"], loads)
    for line in conditions:
        print(line)
    print()
    rows = exports + ctranslate2_exports
    first = exports[0][0]
    summary = _print_table(rows, results, sentences, references, tokenizer, first)
    width = max(len(label) for label, _ in rows) + 2
    if translator_result is not None:
        seconds, texts, batch_size = translator_result
        served = results["file_order"]["translations"][first]
        same = sum(a == b for a, b in zip(texts, served, strict=True))
        print(
            f"{'Translator (evaluate), in-process':<{width}}{seconds:>13.1f}"
            f"{len(sentences) / seconds:>8.1f}  (sorts by length itself, batch "
            f"{batch_size}; same translations as {first}: {same} of "
            f"{len(sentences)})"
        )
    print()
    print("ratios (time of the other / time of " + first + "):")
    for label, _ in rows[1:]:
        ours, theirs = summary[first], summary[label]
        print(
            f"  {label}: file order {theirs[0] / ours[0]:.2f}x, sorted "
            f"{theirs[1] / ours[1]:.2f}x, batch-1 p50 {theirs[2] / ours[2]:.2f}x"
        )
    if ctranslate2_exports:
        ours, engine = summary[first], summary[ctranslate2_exports[0][0]]
        print(
            f"goals: {first} / CTranslate2 float32 at batch "
            f"{args.batch_size} in file order {ours[0] / engine[0]:.2f}x (goal <= "
            f"1.3x); batch-1 p50 {ours[2] / engine[2]:.2f}x (goal <= 1.1x)"
        )
        print(
            "  CTranslate2 process imports of this package: "
            f"{', '.join(results['ctranslate2_imports'])} (after the SavedModels "
            "were loaded and checked to need none)"
        )
        print(
            "  CTranslate2 compute types ('default': as the weights are stored): "
            + ", ".join(f"{k} {v}" for k, v in results["compute_types"].items())
        )
    print(
        "first calls (loading, tracing, compiling; not in the table): "
        + ", ".join(f"{k} {v:.1f} s" for k, v in results["first_calls"].items())
    )
    print(f"load average {load_average():.1f} at the end")
    if args.record:
        _write_record(
            args, summary, rows, ctranslate2_exports, len(sentences), conditions
        )
    del tf


def _serve(
    config_path: Path,
    config: dict[str, Any],
    exports: list[tuple[str, str]],
    ctranslate2_exports: list[tuple[str, str]],
) -> dict[str, Any]:
    """Runs one serving process (`_child`) on these SavedModels and
    CTranslate2 models; returns its results."""
    config = {**config, "exports": exports, "ctranslate2": ctranslate2_exports}
    config_path.write_text(json.dumps(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    child = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(config_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=config_path.parent,
    )
    if child.returncode:
        raise SystemExit(f"the serving process failed:\n{child.stderr[-4000:]}")
    results = json.loads(child.stdout.strip().splitlines()[-1])
    if results["imported_package"]:
        raise SystemExit("the serving process imported keras_transformer")
    return results


def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The results of several serving processes as one: their rows side by
    side, the load at the start of the first and the end of the last."""
    merged = {**parts[0], "load_end": parts[-1]["load_end"]}
    for part in parts[1:]:
        for order in ("file_order", "sorted", "single"):
            for key in ("seconds", "translations"):
                merged[order][key].update(part[order][key])
        merged["first_calls"].update(part["first_calls"])
        merged["compute_types"].update(part["compute_types"])
        merged["ctranslate2_imports"] = sorted(
            {*merged["ctranslate2_imports"], *part["ctranslate2_imports"]}
        )
    return merged


#: Variables that hold the math libraries to fewer instruction sets than the
#: CPU has (how a CPU without VNNI is reproduced; docs/export.md).
ISA_CAPS = (
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "CT2_FORCE_CPU_ISA",
)


def _cpu_line() -> str:
    """The CPU and its instruction sets (imported here: the serving process
    must not import this package)."""
    from keras_transformer.cpu import cpu_info

    return cpu_info().describe()


def _conditions(
    args: argparse.Namespace, threads: dict[str, Any], loads: dict[str, float]
) -> list[str]:
    """The measurement's conditions in three lines: the CPU and its
    instruction sets, the thread settings and the background load, the load
    averages."""
    variables = ", ".join(f"{k}={v}" for k, v in threads.items() if k.isupper() and v)
    caps = ", ".join(
        f"{name}={os.environ[name]}" for name in ISA_CAPS if os.environ.get(name)
    )
    return [
        f"cpu: {_cpu_line()}"
        + (f"; the libraries held below it by {caps}" if caps else ""),
        f"threads: TensorFlow intra-op {threads['tf_intra_op']}, inter-op "
        f"{threads['tf_inter_op']} (0: its default); CTranslate2 intra_threads "
        f"{args.ctranslate2_threads} (0: its default, up to 4)"
        f"{'; ' + variables if variables else ''}; background load: "
        f"{args.background_load} busy processes",
        "load average (1 min): "
        + ", ".join(f"{value:.1f} {when}" for when, value in loads.items()),
    ]


def _write_record(
    args: argparse.Namespace,
    summary: dict[str, tuple[float, float, float, float]],
    rows: list[tuple[str, str]],
    ctranslate2_exports: list[tuple[str, str]],
    sentences: int,
    conditions: list[str],
) -> None:
    """The table's figures as the results record `args.record`, the
    conditions in its machine line."""
    from keras_transformer.results_records import describe_machine, write_record

    figures: dict[str, float] = {
        "sentences": sentences,
        "background_load": args.background_load,
    }
    for index, (label, _) in enumerate(rows):
        key = re.sub(r"\W+", "_", label.lower()).strip("_") if index else "first_row"
        file_s, sorted_s, p50, bleu = summary[label]
        figures[f"{key}_seconds"] = round(file_s, 2)
        figures[f"{key}_sorted_seconds"] = round(sorted_s, 2)
        figures[f"{key}_p50_ms"] = round(p50, 1)
        figures[f"{key}_bleu"] = round(bleu, 2)
    if ctranslate2_exports:
        ours, engine = summary[rows[0][0]], summary[ctranslate2_exports[0][0]]
        figures["batch_ratio_to_ctranslate2_float32"] = round(ours[0] / engine[0], 2)
        figures["batch_1_p50_ratio_to_ctranslate2_float32"] = round(
            ours[2] / engine[2], 2
        )
    path = write_record(
        Path(__file__).resolve().parents[1] / "docs" / "results",
        args.record,
        figures,
        command=" ".join(["python benchmarks/serve.py", *sys.argv[1:]]),
        sample=f"{sentences} test sources at batch {args.batch_size} (file order "
        f"and sorted), batch 1 on the first {args.latency_sentences}; best of "
        f"{args.repeats} interleaved calls; first row: {rows[0][0]}",
        timing="measured",
        # describe_machine names the CPU: the conditions after their cpu line.
        machine=f"{describe_machine()}; " + "; ".join(conditions[1:]),
        what="serving speed of the SavedModel exports against CTranslate2 on the "
        "same weights, with the CPU, thread settings and load it ran under",
        depends_on=["benchmarks/serve.py", *SERVED_CODE],
    )
    print(f"results record: {path}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child(sys.argv[2])
    else:
        main()
