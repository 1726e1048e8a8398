"""The `keras-transformer` command line (also `python -m keras_transformer`).

Argument parsing lives here and only here: one module per subcommand
(`train`, `average_checkpoints`, `evaluate`, `translate`, `export`), each
with ``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args)``.
`main` builds the parser from the table `COMMANDS`; a new subcommand plugs
in with `command`:

```python
@command("hello", "Say hello.", lambda p: p.add_argument("--name"))
def hello(args: argparse.Namespace) -> int:
    print(f"hello {args.name}")
    return 0
```

The modules of this package import only the standard library and
`keras_transformer.conventions` at import time; each ``run`` imports
TensorFlow and the library when it is called. So ``--help`` and argument
errors answer at once, without TensorFlow's start-up or log lines, and
process-wide settings (logical CPU devices, TF_CONFIG) are applied before
TensorFlow initialises. The library raises errors; `main` prints them.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence

from keras_transformer.cli import (
    average_checkpoints,
    evaluate,
    export,
    train,
    translate,
)
from keras_transformer.cli._common import CommandError
from keras_transformer.conventions import DISTRIBUTION

__all__ = ["COMMANDS", "Command", "CommandError", "build_parser", "command", "main"]


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


for _module in (train, average_checkpoints, evaluate, translate, export):
    command(_module.NAME, _module.HELP, _module.add_arguments)(_module.run)


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


#: Top-level modules of the `train` extra (setup.py), which the commands need
#: and a core-only install lacks.
TRAIN_EXTRA_MODULES = frozenset(
    {
        "babel",
        "matplotlib",
        "sacrebleu",
        "sentencepiece",
        "tensorboard",
        "tensorflow",
        "tensorflow_text",
    }
)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status.

    Errors that explain themselves (bad config, data, diverged training) are
    printed without a traceback; set ``KT_TRACEBACK=1`` to see it.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    args = build_parser().parse_args(argv)
    backend = os.environ["KERAS_BACKEND"]
    if backend != "tensorflow":
        print(
            f"keras-transformer {args.command}: error: the command line trains, "
            "decodes and exports with the TensorFlow backend, but "
            f"KERAS_BACKEND={backend!r}. Unset it or set KERAS_BACKEND=tensorflow.",
            file=sys.stderr,
        )
        return 2
    try:
        return int(args.handler(args) or 0)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] not in TRAIN_EXTRA_MODULES:
            raise
        print(
            f"keras-transformer {args.command}: error: {e.name!r} is not "
            "installed; the command line needs the `train` extra: "
            f"pip install '{DISTRIBUTION}[train]'",
            file=sys.stderr,
        )
        return 2
    except CommandError as e:
        print(f"keras-transformer {args.command}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError, RuntimeError) as e:
        # Configuration, data, file (a full disk, a damaged checkpoint, a path
        # of the wrong kind) and divergence problems carry their own
        # explanation; anything else keeps its traceback.
        if isinstance(e, RuntimeError):
            from keras_transformer.training.loop import TrainingDivergedError

            if not isinstance(e, TrainingDivergedError):
                raise
        if os.environ.get("KT_TRACEBACK"):
            raise
        print(f"keras-transformer {args.command}: error: {e}", file=sys.stderr)
        return 1
