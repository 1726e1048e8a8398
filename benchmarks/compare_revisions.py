"""Runs one benchmark on two source trees of the package, interleaved.

A refactor must not make the package slower, and machines of the same kind
differ by up to 4x, so "before" and "after" are measured in one run on one
machine: the benchmark script of each tree runs in its own process (with
that tree first on `PYTHONPATH`, so it imports that tree's package), the
two trees alternate for `--rounds` rounds, and every output is printed in
full, tagged with its tree and round. Compare the ratios each run prints
against its own in-process reference (keras-hub, the matmul peak), which
cancel a busy moment of the machine.

    git worktree add /tmp/before <base-commit>
    python benchmarks/compare_revisions.py --before /tmp/before \\
        --after . --rounds 2 train_step.py
    python benchmarks/compare_revisions.py --before /tmp/before \\
        --after . --rounds 2 decode.py
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def run_benchmark(tree: Path, script: str, extra_args: list[str]) -> str:
    """The output of `tree/benchmarks/script` run with `tree`'s package."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(tree), environment.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    check = subprocess.run(
        [sys.executable, "-c", "import keras_transformer as kt; print(kt.__file__)"],
        env=environment,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = Path(check.stdout.strip().splitlines()[-1]).resolve()
    if not imported.is_relative_to(tree):
        raise RuntimeError(
            f"{tree} does not shadow the installed package: it imports {imported}"
        )
    completed = subprocess.run(
        [sys.executable, str(tree / "benchmarks" / script), *extra_args],
        env=environment,
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if completed.returncode:
        raise RuntimeError(
            f"{script} failed in {tree}:\n{completed.stdout}\n{completed.stderr}"
        )
    return completed.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the old tree")
    parser.add_argument("--after", type=Path, required=True, help="the new tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("script", help="a file in benchmarks/, e.g. train_step.py")
    parser.add_argument("script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    for name, tree in trees.items():
        if not (tree / "benchmarks" / args.script).is_file():
            parser.error(f"--{name} {tree} has no benchmarks/{args.script}")
    print(
        f"{args.script} {' '.join(args.script_args)}; load average "
        f"{os.getloadavg()[0]:.1f} at the start"
    )
    for round_index in range(args.rounds):
        # Alternate which tree goes first, so that neither always runs on a
        # machine warmed (or loaded) by the other.
        order = list(trees.items())
        if round_index % 2:
            order.reverse()
        for name, tree in order:
            start = time.perf_counter()
            output = run_benchmark(tree, args.script, args.script_args)
            elapsed = time.perf_counter() - start
            print(
                f"\n===== {name} ({tree}), round {round_index + 1}, "
                f"{elapsed:.0f} s ====="
            )
            print(output.rstrip())
            sys.stdout.flush()
    print(f"\nload average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
