"""Time and peak memory of full vs restricted self-attention (paper Table 1).

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

Usage:
    python benchmarks/attention_scaling.py           # full run, < 1 min on 2 cores
    python benchmarks/attention_scaling.py --quick   # smoke run, seconds

The table goes to stdout (Markdown) and the log-log plot to
`docs/images/attention_scaling.png` (`--plot` to change, `--no-plot` to skip).
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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from keras_transformer.layers.attention import MultiHeadAttention  # noqa: E402
from keras_transformer.layers.local_attention import (  # noqa: E402
    RestrictedMultiHeadAttention,
)

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
    parser.add_argument(
        "--plot", type=Path, default=REPO_ROOT / "docs/images/attention_scaling.png"
    )
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.window, args.repeats = [64, 128], 16, 2
        args.no_plot = True
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    keras.utils.set_random_seed(0)
    print(
        f"# {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPU cores, TF {tf.__version__}, Keras {keras.__version__}"
    )
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
