"""``keras-transformer evaluate``: translate a test set, print BLEU and chrF (§6.1)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from keras_transformer.cli._common import (
    SEARCH_NUMBERS,
    CommandError,
    add_translator_arguments,
    check_translator_arguments,
    load_search_translator,
    parser_defaults,
    report_cut_sources,
    search_settings,
    translating,
    warn,
)
from keras_transformer.cli._record import (
    add_record_arguments,
    check_record_arguments,
    write_result_record,
)
from keras_transformer.conventions import TASK_NAMES
from keras_transformer.validation import count_of, with_article

if TYPE_CHECKING:  # imported where it is used: cli/ loads the standard library
    from keras_transformer.export.target import ExportFormat

NAME = "evaluate"
HELP = "Translate a test set (beam search, §6.1); print and log sacreBLEU and chrF."

#: The search's number rules, and evaluate's own.
_NUMBERS = {
    **SEARCH_NUMBERS,
    "--max-sentences": (lambda v: v >= 1, "a positive number of sentences"),
    "--step": (lambda v: v >= 0, "a TensorBoard step of 0 or more"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer evaluate``."""
    add_translator_arguments(parser)
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
        "--task",
        choices=TASK_NAMES,
        help="Data set (default: the run's data.task, also for an export of it).",
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
    parser.add_argument(
        "--hypotheses",
        help="Where to write the translations (default for a training run: "
        "<workdir>/translations/<split>.beam<K>.<weights>.txt, with .alpha<A> and "
        "the stopping rule after beam<K> when they are not the defaults; not "
        "saved, with a warning, when the run folder cannot be written). Saved to "
        "HYPOTHESES.partial as they are made: a stopped command run again goes "
        "on after the sentences it had translated.",
    )
    parser.add_argument(
        "--log-dir",
        help="TensorBoard folder for the scores (default for a training run: "
        "<workdir>/logs/evaluate_<split>_beam<K>; not saved, with a warning, when "
        "the run folder cannot be written).",
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
    add_record_arguments(parser)


def _task_pairs(args: argparse.Namespace, workdir: Path) -> tuple[Any, str]:
    """The test pairs named by --task/--split (or the run's, also when
    `workdir` is an export of it), and their name."""
    from keras_transformer.data.tasks import get_task
    from keras_transformer.export.formats import read_test_set
    from keras_transformer.runs import is_run_dir
    from keras_transformer.training import DataConfig
    from keras_transformer.training.checkpoints import CONFIG_FILE
    from keras_transformer.training.config import TrainConfig

    if is_run_dir(workdir):
        config = TrainConfig.load(workdir / CONFIG_FILE)
    else:  # an export of a run: its record of the run's data settings
        record = read_test_set(workdir)
        config = None
        if record is not None:
            values = {"data": record["data"], "train": {"seed": record["seed"]}}
            config = TrainConfig.from_dict(values)
    data_config = config.data if config is not None else None
    name = args.task or (data_config.task if data_config is not None else None)
    if name is None:
        raise ValueError(
            f"{args.workdir} is neither a training run nor an export that "
            "recorded its run's test set, so the test set is unknown: pass "
            "--source FILE --reference FILE, or --task (and --split)."
        )
    task = get_task(name)
    if data_config is None or data_config.task != name:
        if name == "files":  # its files are settings of a run's config
            raise ValueError(
                "--task files reads the files that a run's config names "
                f"(data.train_source, ...), and {args.workdir} holds no run of "
                "task 'files': pass --source FILE --reference FILE to score files."
            )
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
    from keras_transformer.translation.lines import refuse_empty_pairs

    if args.source or args.reference:
        if not (args.source and args.reference):
            raise ValueError(
                "Pass both --source and --reference (line-aligned files), or "
                "neither to use a data set split."
            )
        sources, references = read_lines(args.source), read_lines(args.reference)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source} has {count_of(len(sources), 'line')} but "
                f"{args.reference} has "
                f"{len(references)}: the files must be line-aligned."
            )
        # Before the model loads (as `translation.evaluate` refuses them).
        refuse_empty_pairs(
            sources,
            references,
            (
                f"line{{s}} {{lines}} of {args.source}",
                f"line{{s}} {{lines}} of {args.reference}",
            ),
        )
        name = Path(args.source).name
    else:
        pairs, name = _task_pairs(args, workdir)
        sources, references = list(pairs.sources), list(pairs.targets)
    if args.max_sentences is not None:  # positive (`_NUMBERS`)
        sources = sources[: args.max_sentences]
        references = references[: args.max_sentences]
    if not sources:
        raise ValueError("The test set is empty: there is nothing to evaluate.")
    if not args.source:
        # The pairs evaluated (as `translation.evaluate` refuses them).
        refuse_empty_pairs(sources, references)
    return sources, references, name


def _unwritable(path: Path) -> str | None:
    """Why `path` (a file or folder to create) cannot be written; None if it can."""
    parent = path
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent == path and not path.is_dir():
        # An existing file is replaced by a new one written beside it
        # (`write_atomically`): what counts is its folder, not the file.
        parent = path.parent
    if not parent.is_dir():  # a file where a folder goes (``translations``)
        return f"{parent} is a file, not a folder"
    if os.access(parent, os.W_OK | os.X_OK):
        return None
    try:
        read_only = bool(os.statvfs(parent).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        read_only = False
    where = "on a read-only file system" if read_only else "not writable"
    return f"{parent} is {where}"


@dataclasses.dataclass
class _Output:
    """A file or folder evaluate writes: the translations or the scores' log."""

    what: str  # "the translations", "the TensorBoard scores"
    path: Path | None
    option: str  # the option that puts it elsewhere
    explicit: bool  # given by the user (a failure is an error, not a warning)
    run_folder: Path | None = None  # locked while writing into it


def _search_label(args: argparse.Namespace) -> str:
    """The search in a default file name: ``beam4`` (§6.1's alpha and exact
    stop), ``beam4.alpha1``, ``beam4.heuristic``, ``greedy`` or ``sample``:
    alpha and the stopping rule only where they differ from the defaults,
    so that evaluations with other settings never replace each other's."""
    from keras_transformer.decoding.settings import default_setting

    if args.method != "beam":
        return args.method
    label = f"beam{args.beam_size}"
    if args.alpha != default_setting("alpha"):
        label += f".alpha{args.alpha:g}"
    if args.early_stop != default_setting("early_stop"):
        label += f".{args.early_stop}"
    return label


def _outputs(
    args: argparse.Namespace, workdir: Path, split: str
) -> tuple[_Output, _Output, int | None]:
    """Where the translations and the scores go, and the TensorBoard step.

    For a training run they go into the run folder by default; a run folder
    that cannot be written (read-only) only loses them, with a warning.
    """
    from keras_transformer.runs import WEIGHTS, RunFolder, is_run_dir

    hypotheses = _Output(
        "the translations",
        None if args.hypotheses is None else Path(args.hypotheses),
        "--hypotheses FILE",
        args.hypotheses is not None,
    )
    log = _Output(
        "the scores for TensorBoard",
        None if args.log_dir is None else Path(args.log_dir),
        "--log-dir FOLDER",
        args.log_dir is not None,
    )
    step = args.step
    if is_run_dir(workdir):
        run_folder = RunFolder(workdir)
        label = args.weights if args.weights in WEIGHTS else "custom"
        beam = _search_label(args)
        if hypotheses.path is None:
            name = f"{split}.{beam}.{label}.txt"
            hypotheses.path = run_folder.translations_dir / name
            hypotheses.run_folder = workdir
        if log.path is None:
            log.path = run_folder.log_dir / f"evaluate_{split}_{beam}"
            log.run_folder = workdir
        if step is None:
            step = run_folder.weights_step(args.weights)
    for output in (hypotheses, log):
        reason = None if output.path is None else _unwritable(output.path)
        if reason is not None and not output.explicit:
            warn(
                NAME,
                f"{output.what} will not be saved to {output.path}: {reason}. "
                f"Scoring goes on; pass {output.option} to save them elsewhere.",
            )
            output.path = None
    return hypotheses, log, step


def _writing(output: _Output) -> Any:
    """The lock to hold while writing `output`: its run folder's writer lock
    (one writer at a time), or none for a file outside a run folder."""
    from keras_transformer.files import FolderLock

    if output.run_folder is None:
        return contextlib.nullcontext()
    return FolderLock(output.run_folder, f"keras-transformer {NAME}")


def _save(output: _Output, write: Callable[[Path], None]) -> bool:
    """Writes `output` with `write` (under `_writing`); False (after one
    line) when it failed (`_not_saved`)."""
    from keras_transformer.files import FileWriteError, FolderLockedError

    if output.path is None:
        return True
    try:
        with _writing(output):
            write(output.path)
    except (FolderLockedError, FileWriteError) as e:
        return _not_saved(output, e)
    return True


def _not_saved(output: _Output, error: OSError) -> bool:
    """One line for an `output` that could not be saved; False when that is
    an error (an output the user named that could not be written).

    While another command (a `train`) writes the run folder, the scores
    stand and the output is not saved, with one warning naming that
    command."""
    from keras_transformer.files import FolderLockedError

    path, output.path = output.path, None
    if isinstance(error, FolderLockedError):
        warn(
            NAME,
            f"{output.what} were not saved to {path}: {error} The scores are "
            f"complete; pass {output.option} to save them elsewhere.",
        )
        return True
    if output.explicit:
        print(f"keras-transformer {NAME}: error: {error}", file=sys.stderr)
        return False
    reason = os.strerror(error.errno).lower() if error.errno else "write failed"
    warn(
        NAME,
        f"{output.what} could not be saved to {path} ({reason}); the scores are "
        f"complete. Pass {output.option} to save them elsewhere.",
    )
    return True


def _translate_test_set(
    args: argparse.Namespace,
    translator: Any,
    sources: list[str],
    output: _Output,
    takes_progress: bool = True,
) -> tuple[list[str], bool]:
    """The translations of `sources`, and False if saving them failed with
    an error (`_not_saved`). `takes_progress`: the translator draws the
    progress bar (`Translator`; a CTranslate2 or LiteRT export's does not).

    Translated CHUNK_LINES sentences at a time, each part saved as soon as
    it is done (`output_in_parts`, under the run folder's lock while it
    writes): a stopped evaluation keeps the translations of the parts
    before, in ``HYPOTHESES.partial``, and the same command run again goes
    on after them. Without a file to save them to (a read-only run folder,
    an export without --hypotheses), or once saving failed, the rest is
    translated in memory.
    """
    from keras_transformer.cli._parts import command_signature, output_in_parts
    from keras_transformer.files import FileWriteError, FolderLockedError
    from keras_transformer.progress import LineProgress

    translations: list[str] = []
    cut: list[int] = []
    # The progress bar over the sentences left when the first is translated
    # (not those an earlier run kept), and that first sentence.
    progress: tuple[LineProgress, int] | None = None

    def translate(first: int, last: int) -> list[str]:
        nonlocal progress
        if progress is None and takes_progress and not (args.no_progress or args.json):
            progress = (LineProgress(len(sources) - first, "sentences"), first)
        part = progress[0].part(first - progress[1]) if progress else False
        with translating(NAME, translator, "sentences", report=False):
            lines = translator.translate(
                sources[first:last], **({"progress": part} if takes_progress else {})
            )
        cut.extend(first + i for i in translator.cut_lines)
        translations.extend(lines)
        return lines

    saved = True
    if output.path is not None:
        signature = command_signature(
            args, sources, add_translator_arguments, [], [args.workdir], output.path
        )
        try:
            with output_in_parts(
                NAME,
                output.path,
                len(sources),
                signature,
                unit="sentence",
                source="the test set",
                writing=lambda: _writing(output),
            ) as parts:
                kept = parts.kept()
                if len(kept) == parts.start:  # one line per sentence
                    translations.extend(kept)
                if len(translations) < parts.start:  # made again, not saved
                    translate(0, parts.start)
                for first, last in parts.ranges(args.batch_size):
                    parts.write(translate(first, last), last)
        except (FolderLockedError, FileWriteError) as e:
            saved = _not_saved(output, e)
    if len(translations) < len(sources):
        translate(len(translations), len(sources))
    report_cut_sources(NAME, translator, "sentences", cut=cut)
    return translations, saved


#: What the evaluation of a classification or image run reads; every other
#: flag of evaluate given (its value not the default, or a search setting
#: given at all) translates a test set and is refused there.
_STORED_RUN_FLAGS = frozenset(
    {
        "workdir",
        "weights",
        "weights_without_fingerprint",
        "data_dir",
        "max_sentences",
        "no_progress",
        "json",
        "record",
        "records_dir",
    }
)


def _translation_flags_given(args: argparse.Namespace) -> list[str]:
    """The flags of `args` that only the translation of a test set reads."""
    changed = (
        name
        for name, default in parser_defaults(add_arguments).items()
        if name not in _STORED_RUN_FLAGS and getattr(args, name, default) != default
    )
    return list(dict.fromkeys([*search_settings(args), *changed]))


def _evaluate_stored_run(args: argparse.Namespace, kind: str) -> int:
    """The test score of a run its kind's recipe evaluates (the accuracy of
    a classification run, the bits/dim of an image run); the translation
    flags are refused (they were ignored)."""
    from keras_transformer.training.recipes import evaluate_run

    given = _translation_flags_given(args)
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise CommandError(
            f"{flags}: {with_article(kind)} run's evaluation translates nothing "
            "(it scores the run's own test split); leave "
            f"{'it' if len(given) == 1 else 'them'} out."
        )

    result = evaluate_run(
        args.workdir,
        args.weights,
        data_dir=args.data_dir,
        max_examples=args.max_sentences,
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else result.summary())
    write_result_record(
        args, result.to_dict(), f"the test scores of {with_article(kind)} run"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Translates the test set with the folder's translator (`Translator`
    for a run or a SavedModel export, a CTranslate2 or LiteRT export's own:
    `_load_translator`), prints (and logs) the scores.

    The translations and the TensorBoard scores are outputs, not needs: a
    run folder that cannot be written (read-only) is scored all the same,
    with one warning line for what could not be saved.
    """
    check_translator_arguments(
        args,
        serves_exports=True,
        numbers=_NUMBERS,
        source="file",
        reference="file",
        data_dir="folder",
        hypotheses="new file",
        log_dir="new output folder",
    )
    check_record_arguments(args)
    if args.n_best > 1:  # was ignored: the scores are those of the best
        raise CommandError(
            f"--n-best {args.n_best}: evaluate scores the best translation of "
            "each source. Leave --n-best out (translate --n-best prints the "
            "hypotheses)."
        )
    from keras_transformer.runs import EXPORT_INFO_FILE, RunFolder, is_run_dir, run_kind

    if is_run_dir(args.workdir):
        from keras_transformer.training.kinds import recipe_for

        kind = RunFolder(args.workdir).kind()
        if recipe_for(kind).evaluates_stored_runs:
            return _evaluate_stored_run(args, kind)
    elif (Path(args.workdir) / EXPORT_INFO_FILE).is_file():
        kind = run_kind(args.workdir)
        if kind != "translation":
            # It was asked for --source and --reference, then refused by them.
            raise CommandError(
                f"--workdir {args.workdir} is {with_article(kind)} export: "
                f"evaluate scores {with_article(kind)} run's test split from the "
                "run's folder (train --workdir), and the translations of "
                "translation runs and exports."
            )
    from keras_transformer.export.formats import serving_format
    from keras_transformer.translation import EvaluationResult, log_scores

    workdir = Path(args.workdir)
    sources, references, split = _test_set(args, workdir)
    export_format = serving_format(args.workdir)
    translator, settings, engine = _load_translator(args, export_format)
    hypotheses, log, step = _outputs(args, workdir, split)
    # A CTranslate2 or LiteRT export's translator draws no progress bar.
    takes_progress = "progress" in export_format.serves
    translations, saved = _translate_test_set(
        args, translator, sources, hypotheses, takes_progress
    )
    result = EvaluationResult.scored(
        sources, references, translations, settings, split=split
    )
    saved &= _save(log, lambda path: log_scores(result, path, step or 0))
    result = dataclasses.replace(
        result,
        hypotheses_path=None if hypotheses.path is None else str(hypotheses.path),
        log_dir=None if log.path is None else str(log.path),
    )
    values = result.to_dict()
    if engine is not None:  # the search is the export's own
        values.update(engine=engine, early_stop=None)
    if args.json:
        print(json.dumps(values, indent=2))
    else:
        print(result.summary() + ("" if engine is None else f" ({engine})"))
        if hypotheses.path is not None:
            print(f"Hypotheses: {hypotheses.path}")
        if log.path is not None:
            print(f"TensorBoard: tensorboard --logdir {log.path}")
    write_result_record(
        args, values, "the BLEU, chrF and exact match of a test set's translations"
    )
    return 0 if saved else 1


def _load_translator(
    args: argparse.Namespace, export_format: ExportFormat
) -> tuple[Any, Any, str | None]:
    """The translator of ``--workdir``, the search it runs and, for an
    export served by its own engine (CTranslate2, LiteRT), that engine's
    name: the translator ``keras-transformer translate`` would use (that of
    `export_format`, the folder's `serving_format`), with the search flags
    given."""
    from keras_transformer.decoding.settings import DecodeSettings, default_setting
    from keras_transformer.export.formats import DEFAULT_FORMAT

    if export_format.option == DEFAULT_FORMAT:
        translator = load_search_translator(args)
        return translator, translator.settings, None
    translator = export_format.load_translator(
        args.workdir,
        args.weights,
        batch_size=args.batch_size,
        seed=args.seed,
        **search_settings(args),
    )
    # Its search, as far as DecodeSettings describes it: a CTranslate2
    # translator's beam (its attributes; GNMT-reranked, stopped by
    # CTranslate2's own rule), a LiteRT translator's greedy search (the
    # lengths and weight type of its `settings`, as litert.json holds them).
    record = getattr(translator, "settings", translator)
    settings = DecodeSettings(
        method="beam" if hasattr(translator, "beam_size") else "greedy",
        beam_size=getattr(translator, "beam_size", 1),
        alpha=getattr(translator, "alpha", default_setting("alpha")),
        extra_length=record.extra_length,
        max_input_length=record.max_input_length,
    )
    info = getattr(translator, "info", {})  # a CTranslate2 export's record
    quantization = info.get("quantization", getattr(record, "quantization", None))
    weights = f", {quantization} weights" if quantization else ""
    return translator, settings, f"{export_format.name} export{weights}"
