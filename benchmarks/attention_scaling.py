"""Time and peak memory of full vs restricted self-attention (paper Table 1),
and of full, local 1D and local 2D attention on images (Image Transformer).

Runs the forward pass of `MultiHeadAttention` (full self-attention,
`O(n^2 d)`) and `RestrictedMultiHeadAttention` (window `r`, `O(r n d)`) for
growing sequence lengths `n`, each inside a `tf.function`, and reports

* the median wall time of a few runs after a warm-up run,
* the measured peak memory of the TensorFlow CPU allocator during one run
  (`tf.config.experimental.get_memory_info("CPU:0")`, reset before the run;
  it counts every tensor TensorFlow allocates, but not the scratch buffers
  oneDNN allocates on its own),
* the analytic size of the largest intermediate, the float32 score tensor:
  `batch * heads * n * n` floats for full attention against
  `batch * heads * n_blocks * b * W` floats (`W = 3b` for `b = r`) for the
  blocked restricted attention.

With `--images`, the causal self-attention of the Image Transformer
(Parmar et al., 2018, §3.2) on 16x16x3, 32x32x3 and 64x64x3 images with
channel-wise positions (`n = 3 h w`: 768, 3,072 and 12,288 positions):
`MultiHeadAttention` with the causal mask, `LocalBlockAttention` (1D: query
blocks of `l_q` positions, `l_m` before them) and `LocalAttention2D` (query
blocks of `h_q x w_q` positions, `h_m` rows above and `w_m` columns on each
side), sized so that both local layers give each query block the same
number of keys (`l_m + l_q = (h_m + h_q)(w_q + 2 w_m)`: 576 by default).
Every kind runs at every size in the same process, so the ratios compare
measurements of one run.

Usage:
    python benchmarks/attention_scaling.py            # full run, < 1 min on 2 cores
    python benchmarks/attention_scaling.py --quick    # smoke run, seconds
    python benchmarks/attention_scaling.py --images   # image sizes, a few minutes

The table goes to stdout (Markdown) and the log-log plot to
`docs/images/attention_scaling.png` (`--images`:
`docs/images/image_attention_scaling.png`; `--plot` to change, `--no-plot`
to skip).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from keras_transformer.layers.attention import MultiHeadAttention  # noqa: E402
from keras_transformer.layers.local_attention import (  # noqa: E402
    LocalBlockAttention,
    RestrictedMultiHeadAttention,
)
from keras_transformer.layers.local_attention_2d import LocalAttention2D  # noqa: E402

MIB = 1024.0**2


@dataclass
class Result:
    """One (attention kind, sequence length) measurement."""

    kind: str
    length: int
    median_ms: float
    peak_mib: float
    scores_mib: float


def _scores_bytes(kind: str, length: int, args: argparse.Namespace) -> int:
    """Analytic float32 size of the attention score tensor."""
    if kind == "full":
        return 4 * args.batch * args.heads * length * length
    block = args.window
    n_blocks = -(-length // block)
    width = block + args.window + (0 if args.causal else args.window)
    return 4 * args.batch * args.heads * n_blocks * block * width


def _layer(kind: str, args: argparse.Namespace) -> keras.layers.Layer:
    key_dim = args.d_model // args.heads
    if kind == "full":
        return MultiHeadAttention(num_heads=args.heads, key_dim=key_dim)
    return RestrictedMultiHeadAttention(
        num_heads=args.heads, key_dim=key_dim, window=args.window
    )


def _time_and_memory(
    forward: Any, x: tf.Tensor, args: argparse.Namespace
) -> tuple[float, float]:
    """(median ms, peak MiB) of `forward(x)` after a warm-up call."""
    forward(x).numpy()  # trace and warm up
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    forward(x).numpy()
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        forward(x).numpy()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times), peak / MIB


def measure(kind: str, length: int, args: argparse.Namespace) -> Result:
    """Median time and peak allocator memory of one forward pass."""
    layer = _layer(kind, args)
    rng = np.random.default_rng(length)
    x = tf.constant(
        rng.normal(size=(args.batch, length, args.d_model)).astype("float32")
    )
    layer(x[:, :8], x[:, :8])  # build the weights

    @tf.function
    def forward(inputs: tf.Tensor) -> tf.Tensor:
        return layer(inputs, inputs, use_causal_mask=args.causal)

    forward(x).numpy()  # trace and warm up
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    forward(x).numpy()
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        forward(x).numpy()
        times.append(time.perf_counter() - start)
    return Result(
        kind=kind,
        length=length,
        median_ms=1000.0 * statistics.median(times),
        peak_mib=peak / MIB,
        scores_mib=_scores_bytes(kind, length, args) / MIB,
    )


def markdown_table(results: list[Result]) -> str:
    """Full and restricted side by side, one row per length ("-": not run)."""
    by_key = {(r.kind, r.length): r for r in results}
    lengths = sorted({r.length for r in results})

    def cell(kind: str, length: int, field: str) -> str:
        result = by_key.get((kind, length))
        return "-" if result is None else f"{getattr(result, field):.1f}"

    lines = [
        "| n | full: time (ms) | restricted: time (ms) | speed-up "
        "| full: peak (MiB) | restricted: peak (MiB) "
        "| full: scores (MiB) | restricted: scores (MiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for length in lengths:
        full, local = by_key.get(("full", length)), by_key.get(("restricted", length))
        speed_up = "-"
        if full is not None and local is not None:
            speed_up = f"{full.median_ms / local.median_ms:.2f}x"
        row = [str(length)]
        row += [cell(kind, length, "median_ms") for kind in ("full", "restricted")]
        row.append(speed_up)
        for field in ("peak_mib", "scores_mib"):
            row += [cell(kind, length, field) for kind in ("full", "restricted")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot(results: list[Result], args: argparse.Namespace, path: Path) -> None:
    """Log-log time and memory against n, with n and n^2 guide lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    panels = (
        ("median_ms", "forward time (ms)", "time"),
        ("peak_mib", "peak allocator memory (MiB)", "memory"),
    )
    for axis, (field, label, title) in zip(axes, panels, strict=True):
        for kind, marker in (("full", "o"), ("restricted", "s")):
            points = sorted(
                (r.length, getattr(r, field)) for r in results if r.kind == kind
            )
            if not points:
                continue
            lengths, values = zip(*points, strict=True)
            name = (
                "full, O(n²·d)"
                if kind == "full"
                else f"restricted r={args.window}, O(r·n·d)"
            )
            axis.loglog(lengths, values, marker=marker, label=name)
        lengths = np.array(sorted({r.length for r in results}), dtype=float)
        anchor = min(getattr(r, field) for r in results if r.length == lengths[0])
        axis.loglog(lengths, anchor * lengths / lengths[0], "k:", lw=1, label="∝ n")
        axis.loglog(
            lengths, anchor * (lengths / lengths[0]) ** 2, "k--", lw=1, label="∝ n²"
        )
        axis.set_xticks(lengths, [str(int(n)) for n in lengths])
        axis.minorticks_off()
        axis.set_xlabel("sequence length n")
        axis.set_ylabel(label)
        axis.set_title(f"{title}, d_model={args.d_model}, h={args.heads}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    fig.suptitle(
        f"Full vs restricted self-attention, forward pass, batch={args.batch}, "
        f"{os.cpu_count()}-core CPU (log-log)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------------- images
IMAGE_KINDS = ("full", "local_1d", "local_2d")


@dataclass
class ImageResult:
    """One (attention kind, image side) measurement."""

    kind: str
    side: int
    positions: int
    median_ms: float
    peak_mib: float
    scores_mib: float


def _image_keys(args: argparse.Namespace) -> tuple[int, int]:
    """(keys per query block of local 1D, of local 2D)."""
    (h_q, w_q), (h_m, w_m) = args.query_block, args.memory_flange
    return args.memory_length + args.query_block_length, (h_m + h_q) * (w_q + 2 * w_m)


def _image_scores_bytes(kind: str, positions: int, args: argparse.Namespace) -> int:
    """Analytic float32 size of the score tensor of one forward pass."""
    keys_1d, keys_2d = _image_keys(args)
    keys = {"full": positions, "local_1d": keys_1d, "local_2d": keys_2d}[kind]
    return 4 * args.batch * args.heads * positions * keys


def measure_image(kind: str, side: int, args: argparse.Namespace) -> ImageResult:
    """Causal self-attention over a `side x side x 3` image, channel-wise."""
    rows, cols = side, side * 3
    positions = rows * cols
    key_dim = args.d_model // args.heads
    common = {"num_heads": args.heads, "key_dim": key_dim}
    rng = np.random.default_rng(side)
    grid = rng.normal(size=(args.batch, rows, cols, args.d_model)).astype("float32")
    if kind == "local_2d":
        layer = LocalAttention2D(
            query_block=args.query_block, memory_flange=args.memory_flange, **common
        )
        x = tf.constant(grid)

        def call(inputs: tf.Tensor) -> tf.Tensor:
            return layer(inputs, use_causal_mask=True)

    else:
        x = tf.constant(grid.reshape(args.batch, positions, args.d_model))
        if kind == "local_1d":
            layer = LocalBlockAttention(
                query_block_length=args.query_block_length,
                memory_length=args.memory_length,
                **common,
            )

            def call(inputs: tf.Tensor) -> tf.Tensor:
                return layer(inputs, use_causal_mask=True)

        else:
            layer = MultiHeadAttention(**common)

            def call(inputs: tf.Tensor) -> tf.Tensor:
                return layer(inputs, inputs, use_causal_mask=True)

    if kind == "full":
        layer.build(tuple(x.shape), tuple(x.shape))
    else:
        layer.build(tuple(x.shape))
    median_ms, peak_mib = _time_and_memory(tf.function(call), x, args)
    return ImageResult(
        kind=kind,
        side=side,
        positions=positions,
        median_ms=median_ms,
        peak_mib=peak_mib,
        scores_mib=_image_scores_bytes(kind, positions, args) / MIB,
    )


def image_markdown_table(results: list[ImageResult]) -> str:
    """One row per image size: time, peak and scores of each kind, and the
    ratios full / local of one run."""
    by_key = {(r.kind, r.side): r for r in results}
    sides = sorted({r.side for r in results})

    def cell(kind: str, side: int, field: str) -> str:
        result = by_key.get((kind, side))
        return "-" if result is None else f"{getattr(result, field):.1f}"

    def ratio(side: int, field: str, kind: str) -> str:
        full, local = by_key.get(("full", side)), by_key.get((kind, side))
        if full is None or local is None:
            return "-"
        return f"{getattr(full, field) / getattr(local, field):.1f}x"

    lines = [
        "| image | n | time (ms): full / 1D / 2D | full ÷ 1D, ÷ 2D (time) "
        "| peak (MiB): full / 1D / 2D | full ÷ 1D, ÷ 2D (peak) "
        "| scores (MiB): full / 1D / 2D |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        positions = side * side * 3
        row = [f"{side}x{side}x3", str(positions)]
        for field in ("median_ms", "peak_mib"):
            row.append(" / ".join(cell(k, side, field) for k in IMAGE_KINDS))
            row.append(
                ", ".join(ratio(side, field, k) for k in ("local_1d", "local_2d"))
            )
        row.append(" / ".join(cell(k, side, "scores_mib") for k in IMAGE_KINDS))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def plot_images(
    results: list[ImageResult], args: argparse.Namespace, path: Path
) -> None:
    """Log-log time and peak memory against the number of positions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys_1d, keys_2d = _image_keys(args)
    names = {
        "full": "full (causal), O(n²·d)",
        "local_1d": f"local 1D, l_q={args.query_block_length}, "
        f"l_m={args.memory_length} ({keys_1d} keys)",
        "local_2d": f"local 2D, {args.query_block[0]}x{args.query_block[1]} "
        f"+ {args.memory_flange} ({keys_2d} keys)",
    }
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    panels = (
        ("median_ms", "forward time (ms)"),
        ("peak_mib", "peak allocator memory (MiB)"),
    )
    for axis, (field, label) in zip(axes, panels, strict=True):
        for kind, marker in zip(IMAGE_KINDS, "os^", strict=True):
            points = sorted(
                (r.positions, getattr(r, field)) for r in results if r.kind == kind
            )
            if points:
                positions, values = zip(*points, strict=True)
                axis.loglog(positions, values, marker=marker, label=names[kind])
        ticks = sorted({r.positions for r in results})
        labels = [
            f"{r.side}x{r.side}x3\n{r.positions}"
            for r in sorted({r.side: r for r in results}.values(), key=lambda r: r.side)
        ]
        axis.set_xticks(ticks, labels)
        axis.minorticks_off()
        axis.set_xlabel("image (positions n)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    fig.suptitle(
        f"Image Transformer self-attention, forward pass, d_model={args.d_model}, "
        f"h={args.heads}, batch={args.batch}, {os.cpu_count()}-core CPU (log-log)"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_images(args: argparse.Namespace) -> None:
    keys_1d, keys_2d = _image_keys(args)
    print(
        f"# images {args.sides}, channel-wise positions, causal; d_model="
        f"{args.d_model} heads={args.heads} batch={args.batch} repeats="
        f"{args.repeats}; 1D l_q={args.query_block_length} l_m={args.memory_length}"
        f" ({keys_1d} keys), 2D query_block={tuple(args.query_block)} "
        f"memory_flange={tuple(args.memory_flange)} ({keys_2d} keys)"
    )
    results = []
    for side in args.sides:
        for kind in args.image_kinds:
            result = measure_image(kind, side, args)
            results.append(result)
            print(
                f"  {kind:<9} {side}x{side}x3 n={result.positions:<6} "
                f"{result.median_ms:9.1f} ms peak {result.peak_mib:8.1f} MiB",
                flush=True,
            )
    print()
    print(image_markdown_table(results))
    if not args.no_plot:
        plot_images(results, args, args.plot)
        print(f"\nplot: {args.plot}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096]
    )
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--window", type=int, default=64, help="radius r")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--causal", action="store_true", help="decoder window")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=("full", "restricted"),
        default=["full", "restricted"],
    )
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--no-plot", action="store_true")
    images = parser.add_argument_group("--images: the Image Transformer's attention")
    images.add_argument("--images", action="store_true", help="image sizes")
    images.add_argument("--sides", type=int, nargs="+", default=[16, 32, 64])
    images.add_argument(
        "--image-kinds", nargs="+", choices=IMAGE_KINDS, default=list(IMAGE_KINDS)
    )
    images.add_argument("--query-block-length", type=int, default=192)
    images.add_argument("--memory-length", type=int, default=384)
    images.add_argument("--query-block", type=int, nargs=2, default=[8, 24])
    images.add_argument("--memory-flange", type=int, nargs=2, default=[4, 12])
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.window, args.repeats = [64, 128], 16, 2
        args.sides, args.query_block_length, args.memory_length = [8, 16], 48, 48
        args.query_block, args.memory_flange = [4, 12], [2, 6]
        args.no_plot = True
    if args.plot is None:
        name = "image_attention_scaling.png" if args.images else "attention_scaling.png"
        args.plot = REPO_ROOT / "docs" / "images" / name
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    print(
        f"# {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU cores, TF {tf.__version__}, Keras {keras.__version__}"
    )
    if args.images:
        main_images(args)
        return
    print(
        f"# d_model={args.d_model} heads={args.heads} window r={args.window} "
        f"batch={args.batch} causal={args.causal} repeats={args.repeats}"
    )
    results = []
    for length in args.lengths:
        for kind in args.kinds:
            result = measure(kind, length, args)
            results.append(result)
            print(
                f"  {kind:<10} n={length:<5} {result.median_ms:9.1f} ms "
                f"peak {result.peak_mib:8.1f} MiB",
                flush=True,
            )
    print()
    print(markdown_table(results))
    if not args.no_plot:
        plot(results, args, args.plot)
        print(f"\nplot: {args.plot}")


if __name__ == "__main__":
    main()
