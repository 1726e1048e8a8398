"""Training throughput of `build_transformer` against a keras-hub model.

Both models have the same size (d_model 256, 8 heads, d_ff 1024, 3 + 3
layers, vocabulary 8000) and train on the same batches (64 sentence pairs of
32 tokens). Each is compiled both with and without XLA and timed its faster
way, in the same process, interleaved with a large float32 `tf.matmul` whose
FLOP/s is the machine's reference peak. Printed: target tokens per second,
the ratio of the two models, and each model's share of the matmul peak
(model FLOP/s, counted analytically, over matmul FLOP/s).

    python benchmarks/train_step.py            # the full measurement
    python benchmarks/train_step.py --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_transformer as kt  # noqa: E402

D_MODEL, HEADS, D_FF, LAYERS, VOCAB = 256, 8, 1024, 3, 8000


def training_flops_per_step(batch: int, length: int) -> float:
    """Multiply-add FLOPs of one training step (forward + backward = 3x forward).

    Counts the matrix products: per token, Q/K/V/O projections (4 d^2 per
    attention), the feed-forward network (2 d d_ff), the attention scores and
    weighted sums (2 n d per attention), and the output projection (d V).
    """
    d, n = D_MODEL, length
    attention_projection = 4 * d * d
    attention_scores = 2 * n * d
    ffn = 2 * d * D_FF
    encoder = LAYERS * (attention_projection + attention_scores + ffn)
    decoder = LAYERS * (2 * attention_projection + 2 * attention_scores + ffn)
    per_token_macs = encoder + decoder + d * VOCAB
    return 2.0 * 3.0 * per_token_macs * batch * length


def matmul_peak_flops(size: int, repeats: int) -> float:
    """FLOP/s of a large float32 matmul, the machine's practical peak."""
    a = tf.random.normal((size, size))
    b = tf.random.normal((size, size))

    @tf.function(jit_compile=False)
    def product(a: tf.Tensor, b: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(tf.matmul(a, b))

    product(a, b).numpy()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product(a, b).numpy()
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / min(times)


def build_ours() -> keras.Model:
    config = kt.models.TransformerConfig(
        vocabulary_size=VOCAB,
        num_encoder_layers=LAYERS,
        num_decoder_layers=LAYERS,
        d_model=D_MODEL,
        d_ff=D_FF,
        num_heads=HEADS,
        max_length=64,
    )
    return kt.models.build_transformer(config)


def build_keras_hub(length: int) -> keras.Model:
    """The same layer sizes from keras-hub's layers (post-LN, sinusoids).

    Its output layer is a `Dense` of its own, not tied to the embedding
    (§3.4), so it has 9,633,600 parameters against `build_transformer`'s
    7,577,600.
    """
    source = keras.Input((None,), dtype="int32", name="source_ids")
    target = keras.Input((None,), dtype="int32", name="target_ids")
    embedding = keras.layers.Embedding(VOCAB, D_MODEL, mask_zero=True)
    positions = keras_hub.layers.SinePositionEncoding()

    def embed(ids: keras.KerasTensor) -> keras.KerasTensor:
        hidden = embedding(ids)
        return keras.layers.Dropout(0.1)(hidden + positions(hidden))

    hidden = embed(source)
    for _ in range(LAYERS):
        hidden = keras_hub.layers.TransformerEncoder(D_FF, HEADS, dropout=0.1)(hidden)
    encoded = hidden
    hidden = embed(target)
    for _ in range(LAYERS):
        hidden = keras_hub.layers.TransformerDecoder(D_FF, HEADS, dropout=0.1)(
            hidden, encoded
        )
    logits = keras.layers.Dense(VOCAB)(hidden)
    return keras.Model([source, target], logits)


def batches(batch: int, length: int, count: int) -> list[tuple]:
    rng = np.random.default_rng(0)
    result = []
    for _ in range(count):
        source = rng.integers(4, VOCAB, (batch, length)).astype("int32")
        target = rng.integers(4, VOCAB, (batch, length)).astype("int32")
        labels = np.roll(target, -1, axis=1)
        result.append(((source, target), labels))
    return result


def compile_model(model: keras.Model, jit_compile: bool, ours: bool) -> keras.Model:
    if ours:
        model.compile(
            optimizer=kt.schedules.paper_adam(D_MODEL),
            loss=kt.losses.MaskedSparseCrossEntropy(label_smoothing=0.1),
            jit_compile=jit_compile,
        )
    else:
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4, beta_2=0.98, epsilon=1e-9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit_compile,
        )
    return model


def time_group(model: keras.Model, data: list[tuple], steps: int) -> float:
    """Seconds per training step over `steps` consecutive steps."""
    start = time.perf_counter()
    for i in range(steps):
        x, y = data[i % len(data)]
        model.train_on_batch(x, y)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument(
        "--record",
        metavar="NAME",
        help="also write the figures as the results record docs/results/NAME.json",
    )
    args = parser.parse_args()
    steps = 3 if args.quick else 8
    data = batches(args.batch, args.length, 8)
    flops = training_flops_per_step(args.batch, args.length)
    tokens = args.batch * args.length

    peak_size = 1024 if args.quick else 2048
    # Every variant is built and warmed up first; then timed groups of steps
    # alternate between the variants (and the matmul reference), so that a
    # busy moment on the machine hits all of them alike. Each keeps its best.
    variants = {}
    for name, ours in (("keras-transformer", True), ("keras-hub", False)):
        for jit_compile in (True, False):
            keras.utils.set_random_seed(0)
            model = build_ours() if ours else build_keras_hub(args.length)
            compile_model(model, jit_compile, ours)
            for x, y in data[:3]:  # tracing and warm-up
                model.train_on_batch(x, y)
            variants[(name, jit_compile)] = model
    times = {key: [] for key in variants}
    peaks = []
    for _ in range(2 if args.quick else 6):
        peaks.append(matmul_peak_flops(peak_size, 3))
        for key, model in variants.items():
            times[key].append(time_group(model, data, steps))
    peak = max(peaks)
    results = {}
    for (name, jit_compile), model in variants.items():
        seconds = min(times[(name, jit_compile)])
        print(
            f"  {name:18s} jit_compile={jit_compile!s:5s} {seconds * 1e3:8.1f} ms/step"
        )
        if name not in results or seconds < results[name][0]:
            results[name] = (seconds, jit_compile, model.count_params())

    print()
    print(
        f"batch {args.batch} x {args.length} target tokens; "
        f"{flops / 1e9:.1f} GFLOP per training step (analytic)"
    )
    print(f"float32 matmul peak: {peak / 1e9:.1f} GFLOP/s")
    print(
        f"{'model':18s} {'params':>10s} {'XLA':>5s} {'ms/step':>8s} "
        f"{'tokens/s':>9s} {'of peak':>8s}"
    )
    for name, (seconds, jit_compile, params) in results.items():
        print(
            f"{name:18s} {params:10,d} {'yes' if jit_compile else 'no':>5s} "
            f"{seconds * 1e3:8.1f} {tokens / seconds:9.0f} "
            f"{flops / seconds / peak:8.1%}"
        )
    ratio = results["keras-hub"][0] / results["keras-transformer"][0]
    print(f"speed-up of keras-transformer over keras-hub: {ratio:.2f}x")
    if args.record:
        write_results_record(args, results, ratio, flops / peak, 2 if args.quick else 6)


def write_results_record(
    args: argparse.Namespace,
    results: dict[str, tuple[float, bool, int]],
    ratio: float,
    peak_seconds_per_step: float,
    groups: int,
) -> None:
    """The run's figures as the results record `args.record` (docs/results.md)."""
    from keras_transformer.results_records import write_record

    ours, hub = results["keras-transformer"], results["keras-hub"]
    options = " --quick" if args.quick else ""
    path = write_record(
        Path(__file__).resolve().parents[1] / "docs" / "results",
        args.record,
        {
            "speedup_over_keras_hub": round(ratio, 2),
            "share_of_matmul_peak": round(100 * peak_seconds_per_step / ours[0], 1),
            "ms_per_step": round(ours[0] * 1e3, 1),
            "ms_per_step_keras_hub": round(hub[0] * 1e3, 1),
            "parameters": ours[2],
            "parameters_keras_hub": hub[2],
        },
        command=f"python benchmarks/train_step.py --batch {args.batch} "
        f"--length {args.length}{options}",
        sample=f"{args.batch} pairs of {args.length} tokens per step; the best of "
        f"{groups} timed groups per variant",
        timing="measured",
        what="one training step of build_transformer against the same layer sizes "
        "from keras-hub's layers (untied output layer), and its share of a "
        "float32 matmul's FLOP/s measured in the same run",
    )
    print(f"results record: {path}")


if __name__ == "__main__":
    main()
