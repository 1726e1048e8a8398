"""The GPU check: training, two devices, decoding and serving on one GPU.

Run it through ``benchmarks/gpu_check.sh`` (see its header). In under 8
minutes on one H100 or H200 it measures and prints, in one table:

* **training**: target tokens per second of one update of the `base` preset
  (`kt.training.TranslationTrainer`, the paper's Adam and loss) in float32,
  ``mixed_float16`` and ``mixed_bfloat16``, each without and with XLA
  (``jit_compile``), and its share of the GPU's dense peak FLOP/s for that
  dtype (analytic FLOPs per update, forward + backward = 3x forward). The
  peak comes from a table of datasheet figures found by the GPU's name
  (`PEAKS`); float32 counts against the TF32 tensor-core peak when
  TensorFlow runs float32 matrix products in TF32 (its default on these
  GPUs), else the FP32 peak. The line above the table says which it used.
* **two devices**: the GPU split into two logical GPUs
  (`tf.config.set_logical_device_configuration`, in a child process) and 20
  updates under `MirroredStrategy` (`kt.training.make_strategy("mirrored")`)
  against the same 20 updates on one device: same initial weights, same
  batches, TF32 off. It passes when every update's loss agrees within a
  relative 1e-4 and the final weights within a relative 1e-3 of the largest
  weight change (float32 sums in another order, nothing more). The
  attention's key biases are left out: the softmax cancels them, so their
  gradient is 0 up to rounding, which Adam scales up to full-size steps.
  It runs first, in a child process, before this process takes GPU memory
  (which then grows as needed, leaving room for CTranslate2).
* **decoding**: sentences per second of cached greedy and beam-4 decoding
  (`kt.decoding.Decoder`), graph and XLA, every output running to its full
  length.
* **serving**: the same weights exported as a SavedModel
  (`export_translator`, beam 4, alpha 0.6) and as CTranslate2 float32
  (`export_ctranslate2`, on ``device="cuda"``): seconds for N sentences in
  batches of 64, after a first call, and how many translations agree. The
  tokenizer is a SentencePiece model learned from pseudo-words; the model is
  untrained, so outputs run to their length limit (the worst case).

With ``--dry-run`` every part runs on the CPU at tiny sizes (the `tiny`
preset, a few steps, two logical CPU devices, CTranslate2 on the CPU) and
prints the same table; the peak is then a float32 matmul measured in the
same process. A part that fails prints its traceback and a FAILED row, the
others still run, and the exit status is 1. The figures are written as the
results record ``--record``
(default ``gpu_check``) into ``--record-dir`` (default ``docs/results``),
naming the GPU; a dry run writes a record only when ``--record-dir`` is
given.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

#: Dense peak TFLOP/s per GPU (NVIDIA datasheets, without sparsity), by
#: a part of the name `nvidia-smi` prints; the first match counts, so the
#: longer names come first.
PEAKS: dict[str, dict[str, float]] = {
    "H200 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H200": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
    "H100 NVL": {"fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5},
    "H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0},
    "H100": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4},
}
PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
PEAK_KEY = {"mixed_float16": "fp16", "mixed_bfloat16": "bf16"}
#: The table's first column: the part (e.g. "training mixed_bfloat16").
PART_WIDTH = 38
#: The two-device row's part (the test looks for it).
TWO_DEVICES = "two devices"
MIRRORED_UPDATES = 20
LOSS_TOLERANCE = 1e-4
WEIGHT_TOLERANCE = 1e-3


@dataclasses.dataclass(frozen=True)
class Sizes:
    """The sizes of one check: the GPU's, or the dry run's tiny ones."""

    preset: str
    batch: int
    length: int
    steps: int
    rounds: int
    mirrored_batch: int
    decode_batch: int
    decode_length: int
    serve_sentences: int
    vocabulary: int
    device: str
    #: Encoder and decoder layers each; None: the preset's. The dry run
    #: takes one: its XLA compilations take a third to a half less time.
    layers: int | None = None

    def model_config(self, **changes: Any) -> Any:
        """The preset's `TransformerConfig`, with `layers` and `changes`."""
        import keras_transformer as kt

        if self.layers is not None:
            changes.update(
                num_encoder_layers=self.layers, num_decoder_layers=self.layers
            )
        return kt.models.presets[self.preset].replace(**changes)

    def describe_model(self) -> str:
        layers = (
            "" if self.layers is None else f" with {self.layers} layer(s) each side"
        )
        return f"preset {self.preset}{layers}"


GPU_SIZES = Sizes("base", 256, 64, 30, 2, 32, 64, 64, 512, 8000, "cuda")
DRY_SIZES = Sizes("tiny", 8, 16, 3, 1, 8, 4, 8, 16, 200, "cpu", layers=1)


# ------------------------------------------------------------------ helpers
def gpu_name() -> str:
    """The first GPU's name from `nvidia-smi`, or "" without one."""
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = found.stdout.strip().splitlines()
    return lines[0].strip() if found.returncode == 0 and lines else ""


def datasheet_peaks(name: str) -> tuple[str, dict[str, float]] | None:
    """(the table's entry, its dense TFLOP/s by dtype) for a GPU name."""
    for entry, peaks in PEAKS.items():
        if entry.lower() in name.lower():
            return entry, peaks
    return None


def training_flops(config: Any, batch: int, length: int) -> float:
    """FLOPs of one update on `batch` pairs of `length` source and target
    tokens: 2 x multiply-adds x 3 (forward and backward), counting the
    matrix products (Q/K/V/O projections with heads x key size = d_model,
    attention scores and weighted sums, the feed-forward network, the
    output projection)."""
    d, n = config.d_model, length
    attention = 4 * d * d + 2 * n * d
    ffn = 2 * d * config.d_ff
    encoder = config.num_encoder_layers * (attention + ffn)
    decoder = config.num_decoder_layers * (2 * attention + ffn)
    vocabulary = config.target_vocabulary_size or config.vocabulary_size
    return 6.0 * (encoder + decoder + d * vocabulary) * batch * length


def measured_matmul_tflops(size: int = 512, repeats: int = 5) -> float:
    """TFLOP/s of a float32 matmul on this machine (the dry run's peak)."""
    import tensorflow as tf

    a = tf.random.normal((size, size))
    product = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x)))
    product(a).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        product(a).numpy()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best / 1e12


def random_batches(
    vocabulary: int, batch: int, length: int, count: int, seed: int = 0
) -> list[tuple[tuple[Any, Any], Any]]:
    """`count` batches ``((source, target_input), labels)`` of real tokens."""
    import numpy as np

    rng = np.random.default_rng(seed)
    result = []
    for _ in range(count):
        source = rng.integers(4, vocabulary, (batch, length), dtype="int32")
        target = rng.integers(4, vocabulary, (batch, length + 1), dtype="int32")
        result.append(((source, target[:, :-1]), target[:, 1:]))
    return result


def build_trainer(
    config: Any, precision: str, jit_compile: bool, short_warmup: bool = False
) -> Any:
    """A compiled `TranslationTrainer` as `kt.training.train` builds it.

    `short_warmup`: 20 warm-up steps and a tenth of Eq. 7's rate (a peak
    near 1e-3 for `base`), so that 20 updates move the weights measurably.
    """
    import keras

    import keras_transformer as kt

    model = kt.models.build_transformer(
        config, dtype=None if precision == "float32" else precision
    )
    schedule = kt.schedules.OptimizerConfig(warmup_steps=20, learning_rate_scale=0.1)
    optimizer = kt.schedules.paper_adam(
        config.d_model, schedule if short_warmup else None
    )
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    trainer = kt.training.TranslationTrainer(model)
    trainer.compile(optimizer=optimizer, jit_compile=jit_compile)
    return trainer


def timed(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


# -------------------------------------------------------------------- parts
def _fit_seconds(trainer: Any, dataset: Any, sizes: Sizes) -> tuple[float, float]:
    """(seconds of the first 2 updates, best seconds per update of
    `sizes.rounds` fits of `sizes.steps` updates)."""
    first = timed(
        lambda: trainer.fit(dataset, steps_per_epoch=2, shuffle=False, verbose=0)
    )
    best = min(
        timed(
            lambda: trainer.fit(
                dataset, steps_per_epoch=sizes.steps, shuffle=False, verbose=0
            )
        )
        for _ in range(sizes.rounds)
    )
    return first, best / sizes.steps


def check_training(sizes: Sizes, peaks: dict[str, float] | None) -> list[dict]:
    """Tokens/s and share of the peak for every precision, without/with XLA."""
    import keras

    config = sizes.model_config()
    batches = random_batches(config.vocabulary_size, sizes.batch, sizes.length, 4)
    dataset = _repeated_dataset(batches)
    flops = training_flops(config, sizes.batch, sizes.length)
    rows = []
    for precision in PRECISIONS:
        for jit_compile in (False, True):
            keras.utils.set_random_seed(0)
            first, best = _fit_seconds(
                build_trainer(config, precision, jit_compile), dataset, sizes
            )
            peak = peaks[_peak_key(precision)] if peaks else None
            rows.append(
                {
                    "part": f"training {precision}",
                    "setting": "XLA" if jit_compile else "no XLA",
                    "value": sizes.batch * sizes.length / best,
                    "unit": "tokens/s",
                    "share": flops / best / (peak * 1e12) if peak else None,
                    "note": f"{best * 1e3:.1f} ms/update, first 2 {first:.1f} s",
                    "key": f"{precision}_{'xla' if jit_compile else 'graph'}",
                }
            )
            keras.backend.clear_session()
            gc.collect()
    return rows


def _repeated_dataset(batches: list) -> Any:
    """The batches, repeated forever, as a `tf.data.Dataset`."""
    import tensorflow as tf

    def generate() -> Any:
        while True:
            yield from batches

    (source, target), labels = batches[0]
    spec = tf.TensorSpec(source.shape, tf.int32)
    return tf.data.Dataset.from_generator(
        generate,
        output_signature=(
            (spec, tf.TensorSpec(target.shape, tf.int32)),
            tf.TensorSpec(labels.shape, tf.int32),
        ),
    ).prefetch(2)


def _peak_key(precision: str) -> str:
    import tensorflow as tf

    if precision in PEAK_KEY:
        return PEAK_KEY[precision]
    return (
        "tf32" if tf.config.experimental.tensor_float_32_execution_enabled() else "fp32"
    )


def check_two_devices(sizes: Sizes, dry_run: bool) -> dict[str, Any]:
    """Runs in a child process: one device against two logical devices."""
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_transformer as kt

    gpus = tf.config.list_physical_devices("GPU")
    if dry_run or not gpus:
        kt.training.configure_cpu_devices(2)
        one_device = "/cpu:0"
    else:
        # 2 x 24 GiB of the GPU's memory: far more than 32 pairs need.
        tf.config.set_logical_device_configuration(
            gpus[0],
            [tf.config.LogicalDeviceConfiguration(memory_limit=24576)] * 2,
        )
        one_device = "/gpu:0"
    tf.config.experimental.enable_tensor_float_32_execution(False)
    config = sizes.model_config(dropout=0.0)
    batches = random_batches(
        config.vocabulary_size, sizes.mirrored_batch, sizes.length, MIRRORED_UPDATES, 1
    )

    def run(strategy: tf.distribute.Strategy, initial: list | None) -> tuple:
        keras.utils.set_random_seed(0)
        with strategy.scope():
            trainer = build_trainer(config, "float32", False, short_warmup=True)
        if initial is not None:
            trainer.transformer.set_weights(initial)
        start = [w.copy() for w in trainer.transformer.get_weights()]
        losses = [
            float(trainer.train_on_batch(x, y, return_dict=True)["loss"])
            for x, y in batches
        ]
        paths = [w.path for w in trainer.transformer.weights]
        return start, losses, trainer.transformer.get_weights(), paths

    initial, single_losses, single, paths = run(
        tf.distribute.OneDeviceStrategy(one_device), None
    )
    strategy = kt.training.make_strategy("mirrored")
    _, mirrored_losses, mirrored, _ = run(strategy, initial)
    loss_difference = max(
        abs(a - b) / abs(a) for a, b in zip(single_losses, mirrored_losses, strict=True)
    )
    # A key bias adds the same q.b to every score of a query, which the
    # softmax cancels: its gradient is 0 up to rounding, and Adam turns
    # rounding noise into steps of the learning rate's size. Left out.
    compared = [
        (w0, a, b)
        for v, w0, a, b in zip(paths, initial, single, mirrored, strict=True)
        if not v.endswith("key_bias")
    ]
    largest_change = max(float(np.max(np.abs(a - w0))) for w0, a, _ in compared)
    weight_difference = (
        max(float(np.max(np.abs(a - b))) for _, a, b in compared) / largest_change
    )
    return {
        "replicas": strategy.num_replicas_in_sync,
        "devices": list(strategy.extended.worker_devices),
        "loss_difference": loss_difference,
        "weight_difference": weight_difference,
        "compared_weights": len(compared),
        "passed": loss_difference <= LOSS_TOLERANCE
        and weight_difference <= WEIGHT_TOLERANCE
        and strategy.num_replicas_in_sync == 2,
        "losses": [single_losses[0], single_losses[-1]],
    }


def check_decoding(sizes: Sizes) -> list[dict]:
    """Sentences/s of cached greedy and beam-4 decoding, graph and XLA."""
    import keras
    import numpy as np

    import keras_transformer as kt
    from keras_transformer.decoding import Decoder, DecodeSettings

    keras.utils.set_random_seed(0)
    config = sizes.model_config(dropout=0.0)
    model = kt.models.build_transformer(config)
    sources = np.random.default_rng(0).integers(
        4, config.vocabulary_size, (sizes.decode_batch, sizes.length), dtype="int32"
    )
    searches = {  # label: (record key, settings); no END, so full length
        "greedy (cached)": (
            "greedy",
            DecodeSettings(method="greedy", extra_length=10_000),
        ),
        "beam 4 (cached)": (
            "beam4",
            DecodeSettings(method="beam", beam_size=4, extra_length=10_000),
        ),
    }
    rows = []
    for jit_compile in (False, True):
        decoder = Decoder(model, jit_compile=jit_compile)
        for name, (key, settings) in searches.items():

            def run(d: Any = decoder, s: Any = settings) -> Any:
                return d.decode(sources, s, max_length=sizes.decode_length, end_id=None)

            first = timed(run)
            best = min(timed(run) for _ in range(max(2, sizes.rounds)))
            mode = "XLA" if jit_compile else "no XLA"
            rows.append(
                {
                    "part": f"decoding {name}",
                    "setting": mode,
                    "value": sizes.decode_batch / best,
                    "unit": "sentences/s",
                    "share": None,
                    "note": f"batch {sizes.decode_batch}, {sizes.decode_length} "
                    f"tokens each; first call {first:.1f} s",
                    "key": f"{key}_{'xla' if jit_compile else 'graph'}",
                }
            )
    return rows


def pseudo_sentences(count: int, words: int, seed: int) -> list[str]:
    """Sentences of 6-20 pseudo-words (Zipf-distributed syllable strings)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    lexicon = ["".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(words)]
    ranks = np.minimum(rng.zipf(1.3, size=count * 20), words) - 1
    sentences, used = [], 0
    for length in rng.integers(6, 21, size=count):
        sentences.append(" ".join(lexicon[r] for r in ranks[used : used + length]))
        used += length
    return sentences


def check_serving(sizes: Sizes, work: Path) -> list[dict]:
    """The SavedModel against CTranslate2 float32 on the same weights."""
    import keras
    import tensorflow as tf

    import keras_transformer as kt
    from keras_transformer.data import SubwordTokenizer
    from keras_transformer.export import (
        CTranslate2Translator,
        export_ctranslate2,
        export_translator,
    )

    corpus = pseudo_sentences(max(400, sizes.vocabulary * 3), sizes.vocabulary, 0)
    tokenizer = SubwordTokenizer.train(corpus, vocabulary_size=sizes.vocabulary)
    keras.utils.set_random_seed(0)
    config = sizes.model_config(dropout=0.0, vocabulary_size=tokenizer.vocabulary_size)
    model = kt.models.build_transformer(config)
    saved = export_translator(model, tokenizer, work / "saved_model", beam_size=4)
    engine = export_ctranslate2(
        model, tokenizer, work / "ctranslate2", beam_size=4, quantization="float32"
    )
    sentences = pseudo_sentences(sizes.serve_sentences, sizes.vocabulary, 1)
    batches = [sentences[i : i + 64] for i in range(0, len(sentences), 64)]
    signature = tf.saved_model.load(str(saved)).signatures["serving_default"]
    # On a CPU (the dry run), no more threads than cores: OpenMP spins.
    threads = 0 if sizes.device == "cuda" else min(2, os.cpu_count() or 1)
    translator = CTranslate2Translator(
        engine, device=sizes.device, intra_threads=threads
    )
    systems = {
        "SavedModel": lambda batch: [
            t.decode("utf-8")
            for t in signature(sentences=tf.constant(batch))["translations"].numpy()
        ],
        f"CTranslate2 float32 ({sizes.device})": lambda batch: translator.translate(
            batch, batch_size=len(batch)
        ),
    }
    seconds, texts = {}, {}
    for name, translate in systems.items():
        first = timed(lambda t=translate: t(batches[0]))
        start = time.perf_counter()
        texts[name] = [text for batch in batches for text in translate(batch)]
        seconds[name] = (time.perf_counter() - start, first)
    reference = texts["SavedModel"]
    rows = []
    for name, (total, first) in seconds.items():
        same = sum(a == b for a, b in zip(texts[name], reference, strict=True))
        rows.append(
            {
                "part": f"serving {name}",
                "setting": f"{len(sentences)} sentences",
                "value": total,
                "unit": "s",
                "share": None,
                "note": f"beam 4, batch 64; {len(sentences) / total:.1f} sent/s; "
                f"same as SavedModel {same}/{len(sentences)}; first call {first:.1f} s",
                "key": "savedmodel" if name == "SavedModel" else "ctranslate2",
            }
        )
    return rows


# --------------------------------------------------------------------- main
def print_table(rows: list[dict]) -> None:
    """One line per measurement: part, setting, value, unit, share, note."""
    header = (
        f"{'part':<{PART_WIDTH}}{'setting':<16}{'value':>12}  {'unit':<12}"
        f"{'of peak':>8}  note"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        share = f"{row['share']:.1%}" if row["share"] is not None else "-"
        print(
            f"{row['part']:<{PART_WIDTH}}{row['setting']:<16}{row['value']:>12.4g}  "
            f"{row['unit']:<12}{share:>8}  {row['note']}"
        )


def run_child(sizes: Sizes, dry_run: bool) -> dict[str, Any]:
    """The two-device check in a fresh process (devices are split at start)."""
    command = [sys.executable, __file__, "--two-devices-child"]
    if dry_run:
        command.append("--dry-run")
    found = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    if found.returncode:
        return {"passed": False, "error": found.stderr.strip()[-2000:]}
    return json.loads(found.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="every part on the CPU, tiny sizes"
    )
    parser.add_argument("--record", default="gpu_check", help="the record's name")
    parser.add_argument(
        "--record-dir",
        help="where to write the record (default docs/results; a dry run "
        "writes one only when this is given)",
    )
    parser.add_argument(
        "--two-devices-child", action="store_true", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    sys.path.insert(0, str(REPO_ROOT))
    sizes = DRY_SIZES if args.dry_run else GPU_SIZES
    if args.two_devices_child:
        print(json.dumps(check_two_devices(sizes, args.dry_run)))
        return 0

    started = time.perf_counter()
    name = "" if args.dry_run else gpu_name()
    if not args.dry_run and not name:
        print("no GPU found (nvidia-smi); run with --dry-run on a CPU", file=sys.stderr)
        return 2
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    if args.dry_run:
        tf.config.set_visible_devices([], "GPU")
        peaks = {"fp32": measured_matmul_tflops()}
        peaks = {key: peaks["fp32"] for key in ("fp32", "tf32", "fp16", "bf16")}
        peak_line = (
            f"dry run on the CPU; peak: a measured float32 matmul, "
            f"{peaks['fp32'] * 1e3:.1f} GFLOP/s, for every dtype"
        )
    else:
        # Memory as needed: the two-device child and CTranslate2 need theirs.
        for gpu in tf.config.list_physical_devices("GPU"):
            tf.config.experimental.set_memory_growth(gpu, True)
        found = datasheet_peaks(name)
        peaks = found[1] if found else None
        tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
        peak_line = (
            f"GPU {name}; peak: {found[0]} datasheet, dense: float32 "
            f"{peaks['tf32' if tf32 else 'fp32']} TFLOP/s ("
            f"{'TF32 tensor cores, on' if tf32 else 'FP32, TF32 off'}), float16 "
            f"{peaks['fp16']}, bfloat16 {peaks['bf16']} TFLOP/s"
            if found
            else f"GPU {name}: not in PEAKS, no share of peak"
        )
    print(peak_line, flush=True)
    failures: list[str] = []

    def part(label: str, measure: Callable[[], list[dict]]) -> list[dict]:
        """The rows of one part; one FAILED row (and the traceback on
        stderr) when it raises, so that the other parts still run."""
        try:
            rows = measure()
        except Exception as error:  # noqa: BLE001 (reported, then exit 1)
            traceback.print_exc()
            failures.append(label)
            rows = [
                {
                    "part": label,
                    "setting": "FAILED",
                    "value": float("nan"),
                    "unit": "",
                    "share": None,
                    "note": f"{type(error).__name__}: {error}"[:300],
                    "key": "failed",
                }
            ]
        print(f"{label}: done at {time.perf_counter() - started:.0f} s", flush=True)
        return rows

    # First, while this process holds no GPU memory: the child splits the GPU.
    two = run_child(sizes, args.dry_run)
    print(f"two devices: done at {time.perf_counter() - started:.0f} s", flush=True)
    rows = part("training", lambda: check_training(sizes, peaks))
    rows.append(two_device_row(two))
    rows += part("decoding", lambda: check_decoding(sizes))
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as work:
        rows += part("serving", lambda: check_serving(sizes, Path(work)))
    print()
    print_table(rows)
    elapsed = time.perf_counter() - started
    print(f"\ntwo-device check: {'passed' if two['passed'] else 'FAILED'}")
    if failures:
        print(f"failed parts: {', '.join(failures)} (tracebacks above)")
    print(f"total {elapsed:.0f} s")
    if args.record_dir or not args.dry_run:
        write(args, rows, two, name or "no GPU (dry run)", peak_line, sizes)
    return 0 if two["passed"] and not failures else 1


def two_device_row(two: dict[str, Any]) -> dict[str, Any]:
    """The table's row of the two-device check (`check_two_devices`)."""
    nan = float("nan")
    return {
        "part": TWO_DEVICES,
        "setting": f"{MIRRORED_UPDATES} updates",
        "value": two.get("weight_difference", nan),
        "unit": "rel. weight",
        "share": None,
        "note": (
            f"{'passed' if two['passed'] else 'FAILED'}: 1 device vs "
            f"{two.get('replicas')} replicas {two.get('devices')}; loss rel. "
            f"diff {two.get('loss_difference', nan):.2g} (<= {LOSS_TOLERANCE}), "
            f"weights {two.get('weight_difference', nan):.2g} of the largest "
            f"change (<= {WEIGHT_TOLERANCE}; key biases left out)"
            + (f"; {two['error']}" if "error" in two else "")
        ),
        "key": "two_devices",
    }


def write(
    args: argparse.Namespace,
    rows: list[dict],
    two: dict[str, Any],
    device: str,
    peak_line: str,
    sizes: Sizes,
) -> None:
    """The figures as the results record `args.record`."""
    from keras_transformer.results_records import describe_machine, write_record

    figures: dict[str, float] = {}
    for row in rows:
        if row["key"] in ("two_devices", "failed"):
            continue
        unit = {"tokens/s": "tokens_per_s", "sentences/s": "sentences_per_s"}
        prefix = row["part"].split()[0]
        figures[f"{prefix}_{row['key']}_{unit.get(row['unit'], 'seconds')}"] = round(
            row["value"], 3
        )
        if row["share"] is not None:
            figures[f"{prefix}_{row['key']}_percent_of_peak"] = round(
                100 * row["share"], 2
            )
    figures["two_devices_passed"] = int(bool(two["passed"]))
    for key in ("loss_difference", "weight_difference"):
        if key in two:
            figures[f"two_devices_{key}"] = float(f"{two[key]:.3g}")
    directory = args.record_dir or REPO_ROOT / "docs" / "results"
    path = write_record(
        directory,
        args.record,
        figures,
        command="bash benchmarks/gpu_check.sh" + (" --dry-run" if args.dry_run else ""),
        sample=f"{sizes.describe_model()}: training batches of {sizes.batch} x "
        f"{sizes.length} random tokens, best of {sizes.rounds} x {sizes.steps} "
        f"updates; decoding {sizes.decode_batch} sources, {sizes.decode_length} "
        f"tokens; serving {sizes.serve_sentences} pseudo-word sentences",
        timing="measured",
        machine=f"{device}; {describe_machine()}",
        what="training throughput and share of peak per precision and XLA, one "
        "against two devices under MirroredStrategy, cached decoding, and the "
        f"SavedModel against CTranslate2 on the same weights. {peak_line}",
        depends_on=[
            "benchmarks/gpu_check.py",
            "keras_transformer/models",
            "keras_transformer/training/trainer.py",
            "keras_transformer/decoding",
            "keras_transformer/export",
        ],
    )
    print(f"results record: {path}")


if __name__ == "__main__":
    raise SystemExit(main())
