"""``keras-transformer train``: train a model of any kind, resuming a run in --workdir.

The config's ``kind`` picks the recipe (translation by default, image for
configs/image_*.json, classification for configs/imdb.json); see
`keras_transformer.training.recipes`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from keras_transformer.cli._common import (
    CommandError,
    add_weights_without_fingerprint_argument,
    check_numbers,
    check_paths,
)
from keras_transformer.conventions import STRATEGIES, TASK_NAMES

NAME = "train"
HELP = "Train a Transformer: translation, image or classification (resumes --workdir)."
#: The most logical CPU devices per core that ``--cpu-devices`` splits into
#: (at least 8 in all).
MAX_CPU_DEVICES_PER_CORE = 4


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer train``."""
    parser.add_argument(
        "config",
        nargs="?",
        help="A JSON training config (e.g. configs/dates_tiny.json, or "
        "configs/imdb.json for a classifier: its `kind`). Without it: the "
        "stored config of the run in --workdir (to resume or extend it with "
        "--set), else the defaults with --preset/--task.",
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
    parser.add_argument("--task", choices=TASK_NAMES, help="Data task.")
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
        choices=STRATEGIES,
        default="default",
        help="default: all GPUs mirrored when there are several, else one "
        "device (mirrored when --cpu-devices N splits the CPU); mirrored: "
        "MirroredStrategy over all GPUs (or all logical CPUs); multiworker: "
        "MultiWorkerMirroredStrategy from TF_CONFIG.",
    )
    parser.add_argument(
        "--cpu-devices",
        type=int,
        default=None,
        metavar="N",
        help="Split the CPU into N logical devices and mirror over them when "
        "there is no GPU (to try the mirrored code path without GPUs); N > 1 "
        "makes the default --strategy mirrored.",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="Continue a run in --workdir even though its stored config (or "
        "the content of its data files) differs; "
        "start it again from step 0 when all its checkpoints are damaged (their "
        "files stay moved aside as *.corrupt).",
    )
    add_weights_without_fingerprint_argument(parser)
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="Print the resolved config as JSON and exit.",
    )


def _load_raw_config(args: argparse.Namespace) -> dict:
    """The settings of the config file (and --preset, --task), before the
    overrides; without any of them, those stored in a run's --workdir."""
    from keras_transformer.training.config import read_config_file

    raw: dict = {}
    if not (args.config or args.preset or args.task):
        from keras_transformer.runs import RunFolder

        # `train --workdir RUN` resumes RUN with its own settings (the
        # defaults would differ from them and be refused).
        folder = RunFolder(args.workdir)
        if folder.config_file.is_file():
            return folder.check_trainable().raw_config()
    if args.config:
        try:
            raw = read_config_file(args.config)
        except FileNotFoundError:
            raise CommandError(f"Config file {args.config} does not exist.") from None
    if args.preset:
        raw["model"] = {"preset": args.preset}
    if args.task:
        data = raw.setdefault("data", {})
        if not isinstance(data, dict):
            raise CommandError(
                f"--task {args.task}: the `data` section of {args.config} must be "
                f"a JSON object of settings. Received: {repr(data)[:80]}"
            )
        data["task"] = args.task
    return raw


def run(args: argparse.Namespace) -> int:
    """Resolves the config, then trains (or prints it with --print-config)."""
    config_file = args.config
    if config_file and "=" in config_file and not os.path.exists(config_file):
        # `--set a=1 b=2`: the word after one --set's value became the config.
        raise CommandError(
            f"config file {config_file} does not exist; if it is a setting, "
            f"write --set before it (--set {config_file}): --set takes one "
            "KEY=VALUE."
        )
    check_paths(args, config="file", workdir="new run or export folder")
    # Logical CPU devices must be set before TensorFlow initialises.
    if args.cpu_devices is not None:
        # Hundreds of replicas on a few cores (a core count mistaken for
        # "how many cores to use" times ten) took all the memory and never
        # finished an update.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        most = max(MAX_CPU_DEVICES_PER_CORE * cores, 8)
        check_numbers(
            args,
            {
                "--cpu-devices": (
                    lambda v: 1 <= v <= most,
                    f"from 1 to {most} logical CPU devices (this machine has "
                    f"{cores} CPU cores; the devices try the mirrored code "
                    "path and add no speed)",
                )
            },
        )
        from keras_transformer.training.distribute import configure_cpu_devices

        configure_cpu_devices(args.cpu_devices)
    from keras_transformer.training.checks import check_before_training
    from keras_transformer.training.overrides import apply_overrides

    # Every setting is checked here, before anything is written to --workdir
    # (and --print-config runs the same checks): each one alone, then what
    # the config tells of the run (its warm-up, its model's memory, its files).
    try:
        config = apply_overrides(_load_raw_config(args), args.overrides)
        check_before_training(config)
    except ValueError as e:
        raise CommandError(str(e)) from e
    if args.print_config:
        print(config.to_json())
        return 0
    from keras_transformer.training import train
    from keras_transformer.training.distribute import is_chief, make_strategy

    strategy = make_strategy(strategy_name(args))
    result = train(config, args.workdir, strategy, force=args.force)
    if result.preempted:
        print(f"To resume, run the same command again: {resume_command(args)}")
    elif is_chief(strategy):
        print(try_it_line(config.kind, args.workdir))
    return 0


def try_it_line(kind: str, workdir: str) -> str:
    """What to do next with a finished run of `kind`: its recipe's `try_it`,
    as a command to copy (the program as it was called, so that
    ``.venv/bin/keras-transformer`` stays usable outside the venv)."""
    from keras_transformer.training.kinds import recipe_for

    what, command, *arguments = recipe_for(kind).try_it
    called = sys.argv[0]
    program = called if os.path.basename(called) == "keras-transformer" else None
    words = [program or "keras-transformer", command, "--workdir", str(workdir)]
    words += arguments
    return f"To {what}: {shlex.join(words)}"


def strategy_name(args: argparse.Namespace) -> str:
    """``--strategy``; ``mirrored`` for the default when ``--cpu-devices N``
    split the CPU into several devices (else the split trains one replica)."""
    split = args.cpu_devices is not None and args.cpu_devices > 1
    return "mirrored" if args.strategy == "default" and split else args.strategy


def resume_command(args: argparse.Namespace) -> str:
    """The command line that resumes the run of `args` (the same command)."""
    words = ["keras-transformer", NAME]
    if args.config:
        words.append(args.config)
    words += ["--workdir", str(args.workdir)]
    if args.preset:
        words += ["--preset", args.preset]
    if args.task:
        words += ["--task", args.task]
    for override in args.overrides:
        words += ["--set", override]
    if args.strategy != "default":
        words += ["--strategy", args.strategy]
    if args.cpu_devices is not None:
        words += ["--cpu-devices", str(args.cpu_devices)]
    if args.force:
        words.append("--force")
    if args.weights_without_fingerprint:
        words.append("--weights-without-fingerprint")
    return shlex.join(words)
