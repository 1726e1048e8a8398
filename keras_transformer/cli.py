"""The `keras-transformer` command line (also `python -m keras_transformer`).

Each subcommand is one function registered with `@command`, which names it,
gives its help and adds its arguments; `main` builds the parser from the
table. To add a subcommand (``evaluate``, ``translate``, ``export``)::

    def _evaluate_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--workdir", required=True)

    @command("evaluate", "Score a trained model.", _evaluate_arguments)
    def evaluate(args: argparse.Namespace) -> int:
        from keras_transformer.training import load_trained_model
        ...
        return 0

Handlers import TensorFlow lazily, so that process-wide settings (logical
CPU devices, TF_CONFIG) are applied before TensorFlow initialises.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["COMMANDS", "Command", "build_parser", "command", "main"]


@dataclasses.dataclass(frozen=True)
class Command:
    """A subcommand: its name, help, argument set-up and handler."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: dict[str, Command] = {}


def command(
    name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]
) -> Callable[
    [Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]
]:
    """Registers a subcommand handler ``(args) -> exit status``."""

    def register(
        run: Callable[[argparse.Namespace], int],
    ) -> Callable[[argparse.Namespace], int]:
        if name in COMMANDS:
            raise ValueError(f"Subcommand {name!r} is registered twice.")
        COMMANDS[name] = Command(name, help, add_arguments, run)
        return run

    return register


class CommandError(Exception):
    """A user error: printed without a traceback, exit status 2."""


# --------------------------------------------------------------------- train
def _train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        help="A JSON training config (e.g. configs/dates_tiny.json). Without "
        "it, the defaults with --preset/--task.",
    )
    parser.add_argument(
        "--workdir",
        required=True,
        help="Run folder: config, tokenizer, checkpoints, TensorBoard logs. "
        "Running the same command again resumes the run.",
    )
    parser.add_argument(
        "--preset", help="Model preset (tiny, small, base, big, table3_*)."
    )
    parser.add_argument(
        "--task", choices=("dates", "multi30k", "tatoeba", "files"), help="Data task."
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a setting by dotted key, e.g. --set model.d_model=128 "
        "--set model.optimizer.warmup_steps=400 --set train.train_steps=2000. "
        "Repeatable; applied after the config file, --preset and --task.",
    )
    parser.add_argument(
        "--strategy",
        choices=("default", "mirrored", "multiworker"),
        default="default",
        help="default: all GPUs mirrored when there are several, else one "
        "device; mirrored: MirroredStrategy over all GPUs (or all logical "
        "CPUs); multiworker: MultiWorkerMirroredStrategy from TF_CONFIG.",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        metavar="N",
        help="Split the CPU into N logical devices (to run --strategy mirrored "
        "without GPUs).",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="Continue a run in --workdir even though its stored config differs.",
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="Print the resolved config as JSON and exit.",
    )


def _load_raw_config(args: argparse.Namespace) -> dict:
    raw: dict = {}
    if args.config:
        path = Path(args.config)
        if not path.is_file():
            raise CommandError(f"Config file {path} does not exist.")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise CommandError(f"{path} is not valid JSON: {e}") from e
        if not isinstance(raw, dict):
            raise CommandError(f"{path} must hold a JSON object.")
    if args.preset:
        raw["model"] = {"preset": args.preset}
    if args.task:
        raw.setdefault("data", {})["task"] = args.task
    return raw


@command("train", "Train a Transformer (resumes a run in --workdir).", _train_arguments)
def train_command(args: argparse.Namespace) -> int:
    if args.cpu_devices is not None:
        from keras_transformer.training.distribute import configure_cpu_devices

        configure_cpu_devices(args.cpu_devices)
    from keras_transformer.training import apply_overrides, train
    from keras_transformer.training.distribute import make_strategy

    try:
        config = apply_overrides(_load_raw_config(args), args.overrides)
    except ValueError as e:
        raise CommandError(str(e)) from e
    if args.print_config:
        print(config.to_json())
        return 0
    strategy = make_strategy(args.strategy)
    train(config, args.workdir, strategy, force=args.force)
    return 0


# -------------------------------------------------------- average-checkpoints
def _average_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workdir", required=True, help="The run folder.")
    parser.add_argument(
        "--last",
        type=int,
        default=5,
        help="How many of the newest checkpoints to average (§6.1: 5 for the "
        "base model, 20 for the big one).",
    )
    parser.add_argument(
        "--output",
        help="The .weights.h5 file to write (default <workdir>/averaged.weights.h5).",
    )


@command(
    "average-checkpoints",
    "Average the weights of the last N checkpoints into one model (§6.1).",
    _average_arguments,
)
def average_command(args: argparse.Namespace) -> int:
    from keras_transformer.training import average_checkpoints

    try:
        path = average_checkpoints(args.workdir, last=args.last, output=args.output)
    except (ValueError, FileNotFoundError) as e:
        raise CommandError(str(e)) from e
    print(f"Averaged weights written to {path}")
    return 0


# ------------------------------------------------ evaluate, translate, export
def _lazy(module: str, function: str) -> Callable[[Any], Any]:
    """Calls `keras_transformer.<module>.<function>`, imported on first use."""

    def call(argument: Any) -> Any:
        import importlib

        target = importlib.import_module(f"keras_transformer.{module}")
        return getattr(target, function)(argument)

    return call


command(
    "evaluate",
    "Translate a test set (beam search, §6.1); print and log sacreBLEU and chrF.",
    _lazy("translation", "add_evaluate_arguments"),
)(_lazy("translation", "run_evaluate"))
command(
    "translate",
    "Translate a file or standard input, one output line per input line.",
    _lazy("translation", "add_translate_arguments"),
)(_lazy("translation", "run_translate"))
command(
    "export",
    "Write a SavedModel that translates raw strings (tokenizer, beam search inside).",
    _lazy("export", "add_export_arguments"),
)(_lazy("export", "run_export"))


# ---------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    """The parser of every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' for Keras 3.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for entry in COMMANDS.values():
        sub = subparsers.add_parser(entry.name, help=entry.help, description=entry.help)
        entry.add_arguments(sub)
        sub.set_defaults(handler=entry.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status.

    Errors that explain themselves (bad config, data, diverged training) are
    printed without a traceback; set ``KT_TRACEBACK=1`` to see it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except CommandError as e:
        print(f"keras-transformer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        # Configuration, data and divergence problems carry their own
        # explanation; anything else keeps its traceback.
        from keras_transformer.training.loop import TrainingDivergedError

        if os.environ.get("KT_TRACEBACK") or (
            isinstance(e, RuntimeError) and not isinstance(e, TrainingDivergedError)
        ):
            raise
        print(f"keras-transformer {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
