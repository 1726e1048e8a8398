"""The `--jit-compile` export against the plain one, a few sentences per call.

A translation run is exported twice (beam 4, alpha 0.6, Vaswani et al. 2017
§6.1): as the plain graph and with ``jit_compile=True``, whose calls of 1
to 4 sentences (`export.COMPILED_BATCH_SIZES`) run their search compiled
with XLA. Both exports are loaded in this process and translate the first
`--sentences` test sources in file order at each `--batch-sizes` size (a
size above 4 runs the graph in both: the control). Each figure is the best
of `--repeats` interleaved passes, after one pass that compiles; the ratio
plain / jit is measured in the same run, so it holds across machines where
the seconds do not. The translations of the two exports are compared.

Usage:
    python benchmarks/small_batches.py --workdir runs/m30k_fast
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _translate(signature: Any, sentences: list[str], batch_size: int) -> list[str]:
    """`sentences` translated by `signature`, `batch_size` per call."""
    import tensorflow as tf

    translations = []
    for start in range(0, len(sentences), batch_size):
        batch = tf.constant(sentences[start : start + batch_size])
        got = signature(sentences=batch)["translations"].numpy()
        translations += [text.decode("utf-8") for text in got]
    return translations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a translation run")
    parser.add_argument("--weights", default="last")
    parser.add_argument("--sentences", type=int, default=48)
    parser.add_argument("--batch-sizes", default="1,2,3,4,8")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import tensorflow as tf

    from keras_transformer import export
    from keras_transformer.cpu import cpu_info
    from keras_transformer.data.tasks import get_task
    from keras_transformer.training.checkpoints import CONFIG_FILE
    from keras_transformer.training.config import TrainConfig
    from keras_transformer.translation import load_translator

    data = TrainConfig.load(Path(args.workdir) / CONFIG_FILE).data
    task = get_task(data.task)
    sentences = list(task.load_split(task.test_split, data).sources)
    sentences = sentences[: args.sentences]
    model, tokenizer = load_translator(args.workdir, args.weights)
    signatures = {}
    # The loaded SavedModels hold their graphs and weights in memory; the
    # two export folders are removed once both are loaded.
    with tempfile.TemporaryDirectory(prefix="small_batches-") as folder:
        for name, jit_compile in (("plain", False), ("jit", True)):
            path = export.export_translator(
                model, tokenizer, Path(folder) / name, jit_compile=jit_compile
            )
            loaded = tf.saved_model.load(str(path))
            signatures[name] = loaded.signatures["serving_default"]
    print(f"{cpu_info().describe()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{len(sentences)} {data.task} test sources, beam 4, alpha 0.6")
    print("sentences per call | plain s | jit s | plain / jit | same")
    for batch_size in [int(size) for size in args.batch_sizes.split(",")]:
        best, outputs = {}, {}
        for repeat in range(args.repeats + 1):  # the first pass compiles
            for name, signature in signatures.items():
                started = time.perf_counter()
                outputs[name] = _translate(signature, sentences, batch_size)
                if repeat:
                    seconds = time.perf_counter() - started
                    best[name] = min(best.get(name, seconds), seconds)
        same = sum(
            a == b for a, b in zip(outputs["plain"], outputs["jit"], strict=True)
        )
        print(
            f"{batch_size} | {best['plain']:.2f} | {best['jit']:.2f} | "
            f"{best['plain'] / best['jit']:.2f}x | {same}/{len(sentences)}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
