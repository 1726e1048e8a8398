"""``keras-transformer evaluate``: translate a test set, print BLEU and chrF (§6.1)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from keras_transformer.cli._common import (
    add_model_arguments,
    add_search_arguments,
    check_paths,
    check_weights,
)
from keras_transformer.conventions import TASK_NAMES

NAME = "evaluate"
HELP = "Translate a test set (beam search, §6.1); print and log sacreBLEU and chrF."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer evaluate``."""
    add_model_arguments(parser)
    data = parser.add_argument_group(
        "test set",
        "Either --source and --reference files, or a data set split (by default "
        "the test split of the run's task).",
    )
    data.add_argument("--source", help="File of source sentences, one per line.")
    data.add_argument(
        "--reference", help="File of reference translations, line by line."
    )
    data.add_argument(
        "--task", choices=TASK_NAMES, help="Data set (default: the run's data.task)."
    )
    data.add_argument(
        "--split",
        help="Split of the task: multi30k train/val/test_2016_flickr (default), "
        "tatoeba train/val/test, dates or files train/validation/test.",
    )
    data.add_argument(
        "--data-dir", help="Folder of the data set's files (default: the run's)."
    )
    data.add_argument("--source-language", help="Default: the run's.")
    data.add_argument("--target-language", help="Default: the run's.")
    data.add_argument(
        "--max-sentences",
        type=int,
        default=None,
        help="Evaluate only the first N sentences.",
    )
    add_search_arguments(parser)
    parser.add_argument(
        "--hypotheses",
        help="Where to write the translations (default for a training run: "
        "<workdir>/translations/<split>.beam<K>.<weights>.txt).",
    )
    parser.add_argument(
        "--log-dir",
        help="TensorBoard folder for the scores (default for a training run: "
        "<workdir>/logs/evaluate_<split>_beam<K>).",
    )
    parser.add_argument(
        "--step",
        type=int,
        default=None,
        help="TensorBoard step (default: the training step of the weights, if "
        "known, else 0).",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="Do not show a progress bar."
    )
    parser.add_argument("--json", action="store_true", help="Print the scores as JSON.")


def _task_pairs(args: argparse.Namespace, workdir: Path) -> tuple[Any, str]:
    """The test pairs named by --task/--split (or the run's), and their name."""
    from keras_transformer.data.tasks import get_task
    from keras_transformer.runs import is_run_dir
    from keras_transformer.training import DataConfig, TrainConfig
    from keras_transformer.training.checkpoints import CONFIG_FILE

    config = TrainConfig.load(workdir / CONFIG_FILE) if is_run_dir(workdir) else None
    data_config = config.data if config is not None else None
    name = args.task or (data_config.task if data_config is not None else None)
    if name is None:
        raise ValueError(
            f"{args.workdir} is not a training run, so the test set is unknown: "
            "pass --source FILE --reference FILE, or --task (and --split)."
        )
    task = get_task(name)
    if data_config is None or data_config.task != name:
        data_config = DataConfig(task=name)
    changes = {
        field: value
        for field, value in (
            ("data_dir", args.data_dir),
            ("source_language", args.source_language),
            ("target_language", args.target_language),
        )
        if value is not None
    }
    data_config = dataclasses.replace(data_config, **changes)
    split = args.split or task.test_split
    seed = config.train.seed if config is not None else 0
    pairs = task.load_split(split, data_config, seed=seed)
    if split == task.test_split:
        split = task.test_name(data_config)
    return pairs, split


def _test_set(args: argparse.Namespace, workdir: Path) -> tuple[list, list, str]:
    """(sources, references, name) from --source/--reference or a data set."""
    from keras_transformer.translation import read_lines

    if args.source or args.reference:
        if not (args.source and args.reference):
            raise ValueError(
                "Pass both --source and --reference (line-aligned files), or "
                "neither to use a data set split."
            )
        sources, references = read_lines(args.source), read_lines(args.reference)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source} has {len(sources)} lines but {args.reference} has "
                f"{len(references)}: the files must be line-aligned."
            )
        name = Path(args.source).name
    else:
        pairs, name = _task_pairs(args, workdir)
        sources, references = list(pairs.sources), list(pairs.targets)
    if args.max_sentences is not None:
        if args.max_sentences < 1:
            raise ValueError(
                f"--max-sentences must be positive. Received: {args.max_sentences}"
            )
        sources = sources[: args.max_sentences]
        references = references[: args.max_sentences]
    if not sources:
        raise ValueError("The test set is empty: there is nothing to evaluate.")
    return sources, references, name


def run(args: argparse.Namespace) -> int:
    """Translates the test set with `Translator`, prints (and logs) the scores."""
    check_paths(
        args,
        workdir="folder",
        source="file",
        reference="file",
        data_dir="folder",
        hypotheses="new file",
        log_dir="new folder",
    )
    check_weights(args)
    from keras_transformer.runs import WEIGHTS, RunFolder, is_export_dir
    from keras_transformer.translation import Translator

    workdir = Path(args.workdir)
    sources, references, split = _test_set(args, workdir)
    translator = Translator.load(
        workdir,
        args.weights,
        beam_size=args.beam_size,
        length_penalty=args.length_penalty,
        max_input_length=args.max_input_length,
        extra_length=args.extra_length,
        batch_size=args.batch_size,
    )
    run_folder = None if is_export_dir(workdir) else RunFolder(workdir)
    hypotheses_path, log_dir, step = args.hypotheses, args.log_dir, args.step
    if run_folder is not None:
        label = args.weights if args.weights in WEIGHTS else "custom"
        if hypotheses_path is None:
            hypotheses_path = (
                run_folder.translations_dir
                / f"{split}.beam{args.beam_size}.{label}.txt"
            )
        if log_dir is None:
            log_dir = run_folder.log_dir / f"evaluate_{split}_beam{args.beam_size}"
        if step is None:
            step = run_folder.weights_step(args.weights)
    with contextlib.redirect_stdout(sys.stderr):
        result = translator.evaluate(
            sources,
            references,
            split=split,
            hypotheses_path=hypotheses_path,
            log_dir=log_dir,
            step=step or 0,
            progress=not args.no_progress and not args.json,
        )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.summary())
        if hypotheses_path is not None:
            print(f"Hypotheses: {hypotheses_path}")
        if log_dir is not None:
            print(f"TensorBoard: tensorboard --logdir {log_dir}")
    return 0
