"""Where the exported translator's time goes: the time of every op, summed.

The `serving_default` graph of a run's export (tokenizer, beam search with
beam 4 and alpha 0.6 over key/value caches, Vaswani et al. 2017 §6.1) is
frozen (weights as constants) and run in a TensorFlow 1 session with a full
trace, which times each op, those inside the search's loop included (summed
over its steps). The table lists the time per op type and the slowest ops
by name, and the share of the matrix products (the model's arithmetic)
against the rest (the search's bookkeeping, copies, softmaxes).

Op times overlap when two ops run at once (2 cores), so their sum may
exceed the call's wall time; the shares are what the ops cost, not a
timeline.

`--record NAME` writes the call's figures (its time, the op times' sum, the
shares of the matrix products and of the output projection onto the
vocabulary, the loop's steps and ops per step) as a results record.

Usage:
    python benchmarks/serve_profile.py --workdir runs/m30k_fast --batch-size 64
    python benchmarks/serve_profile.py --workdir runs/m30k_fast --batch-size 1
"""

from __future__ import annotations

import argparse
import collections
import gzip
import os
import re
import sys
import time
from typing import Any

from conditions import SERVED_CODE

#: Op types of the model's matrix products (oneDNN's names included).
MATRIX_PRODUCTS = (
    "MatMul",
    "BatchMatMulV2",
    "_MklMatMul",
    "_MklNativeFusedMatMul",
    "_MklBatchMatMulV2",
    "_MklFusedMatMul",
    "_FusedMatMul",
)


def _session(workdir: str, weights: str) -> tuple[Any, Any, Any]:
    """`(session, input placeholder, outputs)` of the frozen search graph."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    from keras_transformer import export
    from keras_transformer.decoding import Decoder
    from keras_transformer.translation import load_translator

    model, tokenizer = load_translator(workdir, weights)
    settings = export.resolve_settings(model, tokenizer, None, {})
    decoder = Decoder(model)
    search = tf.function(
        lambda sentences: export.signatures._search_graph(
            decoder, tokenizer, settings, sentences
        ),
        input_signature=[tf.TensorSpec([None], tf.string)],
        autograph=False,
    )
    frozen = convert_variables_to_constants_v2(search.get_concrete_function())
    graph = tf.Graph()
    with graph.as_default():
        sentences = tf.compat.v1.placeholder(tf.string, [None])
        outputs = tf.import_graph_def(
            frozen.graph.as_graph_def(),
            input_map={frozen.inputs[0].name: sentences},
            return_elements=[o.name for o in frozen.outputs],
        )
    return tf.compat.v1.Session(graph=graph), sentences, outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a translation run")
    parser.add_argument("--weights", default="last")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--input", help="source sentences, one per line (.gz too)")
    parser.add_argument("--top", type=int, default=20, help="slowest ops to list")
    parser.add_argument(
        "--record", help="also write the figures as this results record (docs/results)"
    )
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    path = args.input or os.path.join(
        os.environ.get("KT_DATA_DIR", "../shared/data"),
        "multi30k",
        "test_2016_flickr.de.gz",
    )
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as lines:
        batch = [line.rstrip("\n") for line in lines][: args.batch_size]
    session, sentences, outputs = _session(args.workdir, args.weights)
    feed = {sentences: batch}
    session.run(outputs, feed)  # the first run builds the kernels
    plain = float("inf")
    for _ in range(3):  # the best of three untraced calls
        start = time.perf_counter()
        session.run(outputs, feed)
        plain = min(plain, time.perf_counter() - start)
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    metadata = tf.compat.v1.RunMetadata()
    session.run(outputs, feed, options=options, run_metadata=metadata)

    by_type: collections.Counter = collections.Counter()
    by_name: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            micros = node.op_end_rel_micros - node.op_start_rel_micros
            label = node.timeline_label.split("(")[0].split("=")[-1].strip()
            by_type[label or "?"] += micros
            by_name[node.node_name] += micros
            calls[node.node_name] += 1
    total = sum(by_type.values())
    products = sum(v for k, v in by_type.items() if k in MATRIX_PRODUCTS)
    # The output projection is the embedding's transposed matrix (§3.4).
    projection = sum(
        v for k, v in by_name.items() if re.search(r"_embedding[^/]*/MatMul", k)
    )
    in_loop = {k: v for k, v in calls.items() if "while/" in k}
    # The loop body's ops run once per step (its condition once more).
    steps = collections.Counter(in_loop.values()).most_common(1)[0][0]
    print(
        f"{len(batch)} sentences in one call: {plain * 1000:.0f} ms (untraced); "
        f"op times sum to {total / 1000:.0f} ms; matrix products "
        f"{100 * products / total:.0f}%, everything else "
        f"{100 * (total - products) / total:.0f}%; load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    print("\nby op type:")
    for label, micros in by_type.most_common(args.top):
        print(f"  {micros / 1000:8.1f} ms {100 * micros / total:5.1f}%  {label}")
    print("\nslowest ops (summed over the loop's steps):")
    for name, micros in by_name.most_common(args.top):
        short = name.replace("import/", "").replace("while/body/", "")
        print(f"  {micros / 1000:8.1f} ms  x{calls[name]:<4d} {short}")
    figures = {
        "batch_size": len(batch),
        "call_ms": round(plain * 1000, 1),
        "op_sum_ms": round(total / 1000, 1),
        "matrix_share_percent": round(100 * products / total),
        "output_projection_percent": round(100 * projection / total),
        "loop_steps": steps,
        "ops_per_step": round(sum(in_loop.values()) / max(steps, 1)),
    }
    print(f"\n{figures}")
    if args.record:
        _write_record(args, figures)


def _write_record(args: argparse.Namespace, figures: dict[str, float]) -> None:
    """`figures` as the results record `args.record`."""
    from pathlib import Path

    from keras_transformer.results_records import describe_machine, write_record

    path = write_record(
        Path(__file__).resolve().parents[1] / "docs" / "results",
        args.record,
        figures,
        command=" ".join(["python benchmarks/serve_profile.py", *sys.argv[1:]]),
        sample=f"the first {figures['batch_size']} test sources in one call, beam "
        "4, alpha 0.6; call time: the best of three untraced calls after a "
        "first one; op times: one traced call",
        timing="measured",
        machine=describe_machine(),
        what="where the exported search's time goes: the op times of one call "
        "of the frozen serving graph, summed by op",
        depends_on=["benchmarks/serve_profile.py", *SERVED_CODE],
    )
    print(f"results record: {path}")


if __name__ == "__main__":
    main()
