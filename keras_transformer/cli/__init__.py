"""The `keras-transformer` command line (also `python -m keras_transformer`).

Argument parsing lives here and only here: one module per subcommand
(`train`, `average_checkpoints`, `evaluate`, `translate`, `score`,
`export`, `complete`, `classify`), each
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

SIGINT (Ctrl-C) and SIGTERM end every command with one line on standard
error and the conventional exit status (130, 143), never a traceback: from
its first line `main` handles both signals (`stop_on_signals`). During the
updates of ``train``, `PreemptionCheckpoint` takes them over: the first one
saves a checkpoint and stops (exit 0), a second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from keras_transformer.cli import (
    average_checkpoints,
    classify,
    complete,
    evaluate,
    export,
    score,
    train,
    translate,
)
from keras_transformer.cli._common import CommandError, weights_policy
from keras_transformer.cli._signals import (
    STOP_SIGNALS,
    CommandInterrupted,
    stop_on_signals,
)
from keras_transformer.cli._startup import drop_tensorflow_startup_lines
from keras_transformer.conventions import DISTRIBUTION

__all__ = [
    "COMMANDS",
    "Command",
    "CommandError",
    "CommandInterrupted",
    "build_parser",
    "command",
    "main",
    "stop_on_signals",
]


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


for _module in (
    train,
    average_checkpoints,
    evaluate,
    translate,
    score,
    export,
    complete,
    classify,
):
    command(_module.NAME, _module.HELP, _module.add_arguments)(_module.run)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="The Transformer of 'Attention Is All You Need' for Keras 3.",
    )
    from keras_transformer import __version__

    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for entry in COMMANDS.values():
        sub = subparsers.add_parser(entry.name, help=entry.help, description=entry.help)
        entry.add_arguments(sub)
        sub.set_defaults(handler=entry.run)
    return parser


#: The extra that installs each top-level module the commands may import
#: and a smaller install lacks (setup.py): `train` for every command, `image`
#: for image runs on the bundled photographs.
EXTRA_OF_MODULE = {
    **dict.fromkeys(
        (
            "babel",
            "matplotlib",
            "sacrebleu",
            "sentencepiece",
            "tensorboard",
            "tensorflow",
            "tensorflow_text",
        ),
        "train",
    ),
    "skimage": "image",
}


def _latest_checkpoint(workdir: str | os.PathLike[str]) -> tuple[str, int] | None:
    """The newest checkpoint prefix of a run folder and its update, if any.

    Read from the file names alone (``checkpoints/ckpt-<step>.index``), so
    that it works whatever the signal interrupted (even TensorFlow's import).
    """
    found = []
    for index in (Path(workdir) / "checkpoints").glob("ckpt-*.index"):
        step = index.name[len("ckpt-") : -len(".index")]
        if step.isdigit():
            found.append((int(step), str(index.with_suffix(""))))
    if not found:
        return None
    step, prefix = max(found)
    return prefix, step


def _interrupted_message(args: argparse.Namespace, error: KeyboardInterrupt) -> str:
    """The one line a command ends with after SIGINT or SIGTERM."""
    signum = getattr(error, "signum", signal.SIGINT)
    if not isinstance(error, CommandInterrupted) and str(error):
        return str(error)  # its own explanation (a second Ctrl-C in `train`)
    name = signal.Signals(signum).name
    if args.command == "train" and getattr(args, "workdir", None):
        latest = _latest_checkpoint(args.workdir)
        if latest is None:
            return (
                f"Stopped by {name} before the first update; nothing to save. Run "
                "the same command again to start."
            )
        prefix, step = latest
        return (
            f"Stopped by {name} outside the updates; nothing new to save: the last "
            f"checkpoint is {prefix} (update {step}). Run the same command again "
            "to go on from it."
        )
    kept = getattr(error, "kept", None)
    if kept:
        return f"Stopped by {name} {kept}"
    return f"Stopped by {name} before it finished. Run the same command again."


def _unrecognized_message(words: Sequence[str], takes_set: bool) -> str:
    """argparse's refusal of `words`; for a command that `takes_set`,
    ``--set a=1 b=2`` (one `--set` for several settings) is told to repeat
    ``--set``."""
    message = f"unrecognized arguments: {' '.join(words)}"
    settings = [word for word in words if "=" in word and not word.startswith("-")]
    if settings and takes_set:
        message += (
            f". --set takes one KEY=VALUE: write --set before each "
            f"(--set {' --set '.join(settings)})"
        )
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit status.

    Errors that explain themselves (bad config, data, diverged training) are
    printed without a traceback; set ``KT_TRACEBACK=1`` to see it. SIGINT
    and SIGTERM end a command with one line and exit status 130 or 143.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    drop_tensorflow_startup_lines()  # oneDNN, CUDA: see cli/_startup.py
    parser = build_parser()
    args, unrecognized = parser.parse_known_args(argv)
    if unrecognized:  # what `parse_args` does, with a hint for `--set`
        takes_set = hasattr(args, "overrides")  # train's --set KEY=VALUE
        parser.error(_unrecognized_message(unrecognized, takes_set))
    with stop_on_signals():
        try:
            return _run(args)
        except KeyboardInterrupt as e:
            # A further signal while the line is printed changes nothing.
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)
            if os.environ.get("KT_TRACEBACK"):
                raise
            print(
                f"keras-transformer {args.command}: {_interrupted_message(args, e)}",
                file=sys.stderr,
            )
            return 128 + int(getattr(e, "signum", signal.SIGINT))


def _run(args: argparse.Namespace) -> int:
    """Runs the parsed command; errors that explain themselves as one line."""
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
        with weights_policy(args):
            return int(args.handler(args) or 0)
    except ModuleNotFoundError as e:
        extra = EXTRA_OF_MODULE.get((e.name or "").split(".")[0])
        if extra is None:
            raise
        needs = "the command line needs" if extra == "train" else "this run needs"
        print(
            f"keras-transformer {args.command}: error: {e.name!r} is not "
            f"installed; {needs} the `{extra}` extra: "
            f"pip install '{DISTRIBUTION}[{extra}]'",
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
    except Exception as e:
        # TensorFlow's out-of-memory error, where the estimate of
        # `check_before_training` did not foresee it (another device's memory,
        # the batches): one line; anything else keeps its traceback.
        if not _out_of_memory(e) or os.environ.get("KT_TRACEBACK"):
            raise
        what = str(getattr(e, "message", e)).strip().splitlines()[0][:200]
        print(
            f"keras-transformer {args.command}: error: out of memory ({what}). "
            "Lower the model's sizes (model.d_model, model.d_ff, the layer "
            "counts) or the batches (data.max_tokens_per_batch, --batch-size), "
            "or use a device with more memory.",
            file=sys.stderr,
        )
        return 1


def _out_of_memory(error: BaseException) -> bool:
    """Whether `error` is TensorFlow's ``ResourceExhaustedError`` (looked up
    only where TensorFlow is loaded: this module does not import it)."""
    tensorflow = sys.modules.get("tensorflow")
    errors = getattr(tensorflow, "errors", None)
    exhausted = getattr(errors, "ResourceExhaustedError", None)
    return exhausted is not None and isinstance(error, exhausted)
