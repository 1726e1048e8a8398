"""Re-measures every figure of the results record ``multi30k_fast`` in one run.

Run from the repository root (about 40 minutes on 2 CPU cores)::

    KT_DATA_DIR=../shared/data python benchmarks/multi30k_fast.py

It trains ``configs/multi30k_de_en_fast.json`` from scratch in ``--workdir``
(refusing a folder that already holds a run, so that the minutes are those of
one uninterrupted command), reads the validation BLEU the run logged (greedy,
the first 200 validation sentences, every 250 updates) with the minutes since
the command started, evaluates the best weights on all 1,014 validation
sentences (greedy and beam 4, alpha 0.6) and the last weights on all 1,000
test_2016_flickr sentences (beam 4, alpha 1.0), and writes the record
``docs/results/multi30k_fast.json`` with the command, commit, machine and the
files whose change makes it stale (`results_records.stale_records`).

``--set KEY=VALUE`` passes settings to ``train`` (a smoke run:
``--set train.train_steps=20 --set train.steps_per_epoch=10 --record NAME``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CONFIG = "configs/multi30k_de_en_fast.json"
#: The files whose change makes the record stale.
DEPENDS_ON = [
    CONFIG,
    "keras_transformer/data/tokenizer.py",
    "keras_transformer/data/sentencepiece_backend.py",
    "keras_transformer/data/text.py",
    "keras_transformer/data/batching.py",
]
#: The validation BLEU the README and results page quote the time to.
BLEU_GOAL = 38.0


def _run(words: list[str]) -> str:
    """Runs a `keras-transformer` command, its progress on stderr; its stdout."""
    command = [sys.executable, "-m", "keras_transformer", *words]
    print("+ keras-transformer", " ".join(words), file=sys.stderr, flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"keras-transformer {words[0]} failed ({done.returncode})")
    return done.stdout


def _validation_curve(workdir: Path) -> list[tuple[int, float, float]]:
    """(update, BLEU, wall time) of every validation BLEU the run logged."""
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    events = EventAccumulator(
        str(workdir / "logs" / "validation"), size_guidance={"tensors": 0}
    )
    events.Reload()
    points = sorted(events.Tensors("bleu"), key=lambda point: point.step)
    return [
        (p.step, float(tf.make_ndarray(p.tensor_proto)), p.wall_time) for p in points
    ]


def _bleu(stdout: str) -> float:
    return round(float(json.loads(stdout)["bleu"]), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", default="runs/m30k_fast")
    parser.add_argument("--record", default="multi30k_fast")
    parser.add_argument("--records-dir", default="docs/results")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from keras_transformer.results_records import describe_machine, write_record

    workdir = Path(args.workdir)
    if workdir.exists() and any(workdir.iterdir()):
        raise SystemExit(
            f"{workdir} is not empty: the record's minutes are those of one "
            "command from scratch; pass another --workdir"
        )
    load_before = os.getloadavg()[0]
    start = time.time()
    overrides = [word for item in args.set for word in ("--set", item)]
    _run(["train", CONFIG, "--workdir", str(workdir), *overrides])
    curve = _validation_curve(workdir)
    if not curve:
        raise SystemExit(f"{workdir} logged no validation BLEU")
    best_step, best_bleu, _ = max(curve, key=lambda point: point[1])
    reached = [wall for _, bleu, wall in curve if bleu >= BLEU_GOAL]
    evaluate = ["evaluate", "--workdir", str(workdir), "--json", "--no-progress"]
    val_greedy = _bleu(
        _run([*evaluate, "--weights", "best", "--split", "val", "--method", "greedy"])
    )
    val_beam = _bleu(
        _run(
            [
                *evaluate,
                "--weights",
                "best",
                "--split",
                "val",
                "--beam-size",
                "4",
                "--alpha",
                "0.6",
            ]
        )
    )
    test_last = _bleu(
        _run(
            [
                *evaluate,
                "--weights",
                "last",
                "--split",
                "test_2016_flickr",
                "--beam-size",
                "4",
                "--alpha",
                "1.0",
            ]
        )
    )
    minutes = (time.time() - start) / 60
    figures = {
        f"val_bleu_200_greedy_update_{best_step}": round(best_bleu, 2),
        f"val_bleu_full_greedy_update_{best_step}": val_greedy,
        f"val_bleu_full_beam_update_{best_step}": val_beam,
        "test_bleu_last": test_last,
        "updates": curve[-1][0],
        "command_minutes": round(minutes, 1),
    }
    for step, bleu, wall in curve:
        figures[f"val_bleu_200_greedy_update_{step}"] = round(bleu, 2)
        figures[f"minutes_update_{step}"] = round((wall - start) / 60, 1)
    if reached:
        figures["minutes_to_val_bleu_38"] = round((reached[0] - start) / 60, 1)
    path = write_record(
        args.records_dir,
        args.record,
        figures,
        command="KT_DATA_DIR=../shared/data python benchmarks/multi30k_fast.py "
        + " ".join(overrides),
        what=f"{CONFIG}: the validation BLEU logged during training (greedy, the "
        "first 200 validation sentences) and the minutes since the command "
        "started at each (minutes_update_N); the best weights on all 1,014 "
        "validation sentences (greedy, and beam 4 with alpha 0.6); "
        "test_2016_flickr BLEU of the last weights (beam 4, alpha 1.0); the "
        "whole command's minutes",
        sample="val BLEU during training: the first 200 validation sentences, "
        "greedy; full validation: all 1,014 sentences; test: all 1,000 "
        "test_2016_flickr sentences",
        timing="measured",
        machine=f"{describe_machine()} after; load average {load_before:.1f} before",
        depends_on=DEPENDS_ON,
    )
    print(json.dumps(figures, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
