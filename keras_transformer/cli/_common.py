"""Arguments shared by several commands, and the error the CLI prints.

Pure Python: the parser is built without importing TensorFlow or Keras.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PATH_KINDS",
    "CommandError",
    "DECODE_BATCH_SIZE",
    "in_flag_words",
    "add_model_arguments",
    "add_search_arguments",
    "add_translator_arguments",
    "check_translator_arguments",
    "check_numbers",
    "SEARCH_NUMBERS",
    "IMAGE_NUMBERS",
    "refuse_export",
    "refuse_export_without_model",
    "search_settings",
    "load_search_translator",
    "translating",
    "check_path",
    "check_paths",
    "check_run_kind",
    "check_weights",
    "add_weights_without_fingerprint_argument",
    "weights_policy",
    "report_cut_sources",
    "warn",
]


class CommandError(Exception):
    """A user error: printed without a traceback, exit status 2."""


def in_flag_words(message: str, *names: str, **flags: str) -> str:
    """`message` with the settings `names` named by their flags:
    ``given_rows=99`` as ``--given-rows 99``, `given_rows` as
    `--given-rows` (the Python API's words are not the command's), unless
    it names the flag already. `flags` name the settings whose flag is not
    their name (``num_images="--images"``)."""
    named = {name: "--" + name.replace("_", "-") for name in names} | flags
    for name, flag in named.items():
        if flag in message:
            continue
        message = re.sub(
            rf"(?<![\w.-]){re.escape(name)}\b(=?)",
            lambda match, flag=flag: flag + (" " if match.group(1) else ""),
            message,
        )
    return message


#: What a path argument must be: an existing folder or file to read, or a
#: folder or file that the command creates (or replaces) and so may not
#: exist yet. A "new output folder" (TensorBoard logs, results records) is a
#: new folder that, like a new file, stays out of what a run needs (but may
#: lie in its ``logs/``) and out of every export folder. A "new run or
#: export folder" (``train --workdir``, ``export --output``) lies in neither
#: either, but may itself be a run or an export: the command that writes it
#: says whether it resumes, replaces or refuses what is there.
PATH_KINDS = (
    "folder",
    "file",
    "new file",
    "new output folder",
    "new run or export folder",
)
#: The kinds of path checked by `_check_output_spares_runs_and_exports`.
_OUTPUT_KINDS = ("new file", "new output folder", "new run or export folder")


def _nearest_existing(path: Path) -> Path:
    for parent in (path, *path.parents):
        if parent.exists():
            return parent
    return Path(".")


def check_path(
    value: str | os.PathLike[str], kind: str, argument: str, *, placement: bool = True
) -> Path:
    """`value` as a `Path`, if it is the `kind` of thing the argument needs.

    One check for every path argument of every command, so that a file
    given for a folder (or the reverse), a missing path or one without
    permission is refused with one true line, before anything is loaded.

    Args:
        value: the path given.
        kind: one of `PATH_KINDS`.
        argument: how the user wrote it (``--workdir``, ``config file``).
        placement: whether an output (`_OUTPUT_KINDS`) is also checked to
            spare runs and exports; False where the command checks its
            output's place by rules of its own (``average-checkpoints``).

    Raises:
        CommandError: naming the argument, the path, what is wrong, and what
            to pass instead.
    """
    if kind not in PATH_KINDS:
        raise ValueError(f"kind must be one of {PATH_KINDS}. Received: {kind!r}")
    path = Path(value)
    noun = "folder" if kind.endswith("folder") else "file"
    if path.exists():
        if noun == "folder" and not path.is_dir():
            raise CommandError(
                f"{argument} {path} is a file, not a folder: pass a folder."
            )
        if noun == "file" and path.is_dir():
            raise CommandError(
                f"{argument} {path} is a folder, not a file: pass a file."
            )
        need = os.R_OK | (os.X_OK if noun == "folder" else 0)
        if kind.startswith("new"):
            need |= os.W_OK
        if not os.access(path, need):
            what = "written" if kind.startswith("new") else "read"
            raise CommandError(
                f"{argument} {path} cannot be {what} (permission denied): fix its "
                f"permissions or pass another {noun}."
            )
        if placement and kind in _OUTPUT_KINDS:
            _check_output_spares_runs_and_exports(path, argument, kind)
        return path
    if not kind.startswith("new"):
        raise CommandError(
            f"{argument} {path} does not exist: pass an existing {noun}."
        )
    parent = _nearest_existing(path.parent)
    if not parent.is_dir():
        raise CommandError(
            f"{argument} {path} cannot be created: {parent} is a file, not a "
            "folder. Pass a path inside a folder."
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CommandError(
            f"{argument} {path} cannot be created: {parent} is not writable "
            f"(permission denied). Pass a {noun} in a folder you can write to."
        )
    if placement and kind in _OUTPUT_KINDS:
        _check_output_spares_runs_and_exports(path, argument, kind)
    return path


def _check_output_spares_runs_and_exports(path: Path, argument: str, kind: str) -> None:
    """`export.formats.check_output_placement` for an output of `kind`."""
    from keras_transformer.export.formats import check_output_placement

    try:
        check_output_placement(
            path,
            argument,
            noun="file" if kind == "new file" else "folder",
            log_folder=kind == "new output folder",
        )
    except ValueError as e:
        raise CommandError(str(e)) from None


def check_paths(args: argparse.Namespace, **kinds: str) -> None:
    """`check_path` for several arguments: ``check_paths(args, workdir="folder")``.

    Arguments that are unset (None) or ``-`` (standard input or output)
    are skipped. The argument is named as the user writes it: ``--dest``,
    or ``config file`` for the positional ``config``.
    """
    read: dict[str, Path] = {}  # the files the command reads and writes,
    written: dict[str, Any] = {}  # by argument (as given)
    for dest, kind in kinds.items():
        value = getattr(args, dest, None)
        if value is None or (kind.endswith("file") and str(value) == "-"):
            continue
        name = "config file" if dest == "config" else "--" + dest.replace("_", "-")
        check_path(value, kind, name)
        if kind == "file":
            read[name] = Path(value)
        elif kind == "new file":
            written[name] = value
    # An output over a file the command reads replaced it (translate --input
    # a.txt --output a.txt left only the translations).
    for output, value in written.items():
        for name, source in read.items():
            same = Path(value).resolve() == source.resolve() or (
                Path(value).exists() and os.path.samefile(value, source)
            )
            if same:
                raise CommandError(
                    f"{output} {value} is also {name}: the output would replace "
                    f"the file the command reads. Pass another {output} file."
                )


#: What each kind of run is for, in the words of `check_run_kind`'s refusal.
def check_run_kind(
    value: str | os.PathLike[str], kind: str, argument: str, command: str
) -> None:
    """Refuses a run folder of another kind than the command decodes.

    `value` is a folder already checked by `check_path`; an export folder,
    or one without a ``config.json`` (no run at all), is left to the loader,
    which says what it is.

    Args:
        value: the run folder given.
        kind: the kind of run the command needs (``translation``, ``image``).
        argument: how the user wrote it (``--workdir``, ``--ensemble``).
        command: the command's name, for the message.

    Raises:
        CommandError: naming the folder, its kind, and the commands for it.
    """
    from keras_transformer.export.formats import export_format_of
    from keras_transformer.runs import RunFolder

    folder = RunFolder(value)
    # A CTranslate2 export holds a config.json of its own, not a run's.
    if not folder.config_file.is_file() or export_format_of(value) is not None:
        return
    found = folder.kind()
    if found == kind:
        return
    from keras_transformer.training.kinds import recipe_for
    from keras_transformer.validation import with_article as a

    use = recipe_for(found).output_commands
    raise CommandError(
        f"{argument} {value} is {a(found)} run (kind {found!r} in its "
        f"config.json), but {command} needs {a(kind)} run: pass {a(kind)} "
        f"run's folder ({a(found)} run: {use})."
    )


def check_weights(args: argparse.Namespace) -> None:
    """``--weights``: a named choice, a ``.weights.h5`` file or a checkpoint
    prefix, given only for a training run (an export holds its weights);
    ``last`` when not given."""
    weights = getattr(args, "weights", None)
    workdir = getattr(args, "workdir", None)
    if weights is not None and workdir is not None and _is_export(Path(workdir)):
        raise CommandError(
            f"--weights {weights} picks the weights of a training run, but "
            f"--workdir {workdir} is an export, which holds the weights it was "
            "exported with: leave out --weights, or export the run again with "
            f"--weights {weights}."
        )
    if weights is None:
        args.weights = "last"
    if args.weights in ("last", "best", "average"):
        return
    if str(weights).endswith(".weights.h5"):
        check_path(weights, "file", "--weights")
    elif Path(weights).is_dir():
        raise CommandError(
            f"--weights {weights} is a folder: pass last, best, average, a "
            ".weights.h5 file or a checkpoint prefix (e.g. <workdir>/checkpoints/"
            "ckpt-600)."
        )


def _is_export(folder: Path) -> bool:
    """Whether `folder` holds an export of any format (not a training run;
    a CTranslate2 export holds a ``config.json`` as a run does)."""
    from keras_transformer.export.formats import export_format_of
    from keras_transformer.runs import is_export_dir

    return export_format_of(folder) is not None or is_export_dir(folder)


#: A numeric flag's test of its value and what to pass instead: for
#: `check_numbers`. `SEARCH_NUMBERS` holds `DecodeSettings`' bounds (§6.1)
#: and ``--batch-size``'s, in the flags' words.
NumberRules = dict[str, tuple[Callable[[Any], bool], str]]
SEARCH_NUMBERS: NumberRules = {
    "--beam-size": (lambda v: v >= 1, "a beam size of 1 (greedy) or more"),
    "--alpha": (lambda v: v >= 0, "a length penalty alpha of 0 or more"),
    "--max-input-length": (lambda v: v >= 2, "2 or more subword ids, END included"),
    "--extra-length": (lambda v: v >= 0, "0 or more extra tokens"),
    "--temperature": (lambda v: v > 0, "a temperature above 0"),
    "--n-best": (lambda v: v >= 1, "1 or more hypotheses per source"),
    "--top-k": (lambda v: v >= 1, "1 or more tokens to sample among"),
    "--top-p": (lambda v: 0 < v <= 1, "a probability above 0 and at most 1, e.g. 0.9"),
    "--seed": (lambda v: v >= 0, "a seed of 0 or more"),
    "--batch-size": (lambda v: v >= 1, "a positive number of sentences per batch"),
}
#: The image sampling flags of ``complete`` and ``export``: a temperature of
#: 0 draws the most likely values; the upper bound of the given rows and
#: their block rule are the model's (`ImageSampler`).
IMAGE_NUMBERS: NumberRules = {
    "--given-rows": (lambda v: v >= 0, "0 or more given rows"),
    "--temperature": (lambda v: v >= 0, "a temperature of 0 or more"),
}


def check_numbers(args: argparse.Namespace, rules: NumberRules) -> None:
    """Refuses, in one line naming the flag, a numeric flag's value that its
    rule rejects (NaN included): ``--beam-size 0: pass a beam size of 1
    (greedy) or more.`` Flags the command does not have, or left unset
    (None), are skipped."""
    for flag, (accepts, what) in rules.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None and not accepts(value):
            raise CommandError(f"{flag} {value}: pass {what}.")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """``--workdir`` and ``--weights``: which trained model to load (the
    help's "model" group)."""
    group = parser.add_argument_group("model", "Which trained model to load.")
    group.add_argument(
        "--workdir",
        required=True,
        help="A training run folder (keras-transformer train --workdir), or a "
        "folder written by keras-transformer export.",
    )
    group.add_argument(
        "--weights",
        help="Which weights of a training run: last, best, average, or the path "
        "of a checkpoint (ckpt-N, or its .index or .data-* file) or .weights.h5 "
        "file (default: last). They must carry the run's fingerprint.",
    )
    add_weights_without_fingerprint_argument(group)


def add_weights_without_fingerprint_argument(parser: Any) -> None:
    """``--weights-without-fingerprint``: accept weights that carry no run
    fingerprint (`weights_policy` applies it while the command runs)."""
    parser.add_argument(
        "--weights-without-fingerprint",
        action="store_true",
        help="Load weights that carry no run fingerprint (written by other code), "
        "which are refused otherwise; train resumes from such checkpoints and "
        "adopts them. Weights of another run are refused even so.",
    )


@contextlib.contextmanager
def weights_policy(args: argparse.Namespace) -> Iterator[None]:
    """While a command runs: with ``--weights-without-fingerprint``, weights
    without a fingerprint load (`runs.accepting_weights_without_fingerprint`)."""
    if not getattr(args, "weights_without_fingerprint", False):
        yield
        return
    from keras_transformer.runs import accepting_weights_without_fingerprint

    with accepting_weights_without_fingerprint():
        yield


class GivenSetting(argparse.Action):
    """Stores a decoding flag's value and notes that it was given
    (``given_settings``): `search_settings` passes a given flag on even at
    its default value, so ``--beam-size 4`` replaces an export folder's own
    beam (`Translator.load`)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)
        given = getattr(namespace, "given_settings", frozenset())
        namespace.given_settings = given | {self.dest}


#: ``--batch-size``'s default: sentences decoded together.
DECODE_BATCH_SIZE = 32


def add_search_arguments(
    parser: argparse.ArgumentParser,
    *,
    max_input_length_help: str | None = None,
    batch_size: bool = True,
) -> None:
    """The decoding options of §6.1 shared by evaluate, translate, export.

    Each flag is a `DecodeSettings` field of the same name, with its default
    (read from `DecodeSettings`, where every default is declared once);
    `search_settings` collects them.
    """
    from keras_transformer.conventions import EARLY_STOPS
    from keras_transformer.decoding.settings import default_setting

    max_input_length = default_setting("max_input_length")
    group = parser.add_argument_group(
        "decoding", "The search and its settings (§6.1; DecodeSettings)."
    )
    setting = functools.partial(_add_setting, group)
    setting(
        "--method",
        "The search: a strategy of keras_transformer.decoding.STRATEGIES, "
        "e.g. beam (§6.1), greedy, sample (default %(default)s).",
    )
    setting("--beam-size", "Beam size (§6.1: %(default)s); 1: greedy.", type=int)
    setting("--alpha", "Length penalty alpha (§6.1: %(default)s).", type=float)
    setting(
        "--early-stop",
        "When beam search stops a sentence: exact, once no live hypothesis "
        "can still win (§6.1); heuristic, once none would win if it ended now "
        "(fewer steps; default %(default)s).",
        choices=EARLY_STOPS,
    )
    setting(
        "--max-input-length",
        "Longest source in subword ids, END included; longer ones are cut "
        + (max_input_length_help or "(default {default})").format(
            default=max_input_length
        )
        + ".",
        type=int,
        default=None if max_input_length_help else max_input_length,
    )
    setting(
        "--extra-length",
        "An output may be this many tokens longer than its source (§6.1: %(default)s).",
        type=int,
    )
    setting(
        "--temperature",
        "Sampling temperature (--method sample; default %(default)s).",
        type=float,
    )
    setting(
        "--n-best",
        "Hypotheses per source from beam search (at most --beam-size); "
        "translate prints each as 'index ||| translation ||| score' (default "
        "%(default)s: the best translation only, which evaluate scores).",
        type=int,
    )
    group.add_argument(
        "--sample",
        dest="method",
        action=GivenSetting,
        nargs=0,
        const="sample",
        help="Sample (same as --method sample), with --temperature, --top-k, "
        "--top-p and --seed.",
    )
    setting(
        "--top-k",
        "Sample among the K most likely tokens only (default: all).",
        type=int,
    )
    setting(
        "--top-p",
        "Sample from the nucleus: the fewest most likely tokens whose "
        "probability reaches P (Holtzman et al. 2020; default: all).",
        type=float,
    )
    group.add_argument(
        "--seed",
        type=int,
        default=None,
        help="Seed of sampling, for reproducible samples (default: random).",
    )
    if batch_size:
        group.add_argument(
            "--batch-size",
            type=int,
            default=DECODE_BATCH_SIZE,
            help="Sentences decoded together.",
        )


def _add_setting(group: Any, flag: str, description: str, **options: Any) -> None:
    """The flag of the `DecodeSettings` field named like it (``--beam-size``:
    ``beam_size``), with the field's default unless `options` give one."""
    from keras_transformer.decoding.settings import default_setting

    options.setdefault("default", default_setting(flag[2:].replace("-", "_")))
    group.add_argument(flag, action=GivenSetting, help=description, **options)


def add_translator_arguments(
    parser: argparse.ArgumentParser,
    *,
    max_input_length_help: str | None = None,
    batch_size: bool = True,
) -> None:
    """The model to load and how to decode with it: the "model" and
    "decoding" groups of evaluate, translate and export
    (`add_model_arguments`, `add_search_arguments` with these options)."""
    add_model_arguments(parser)
    add_search_arguments(
        parser, max_input_length_help=max_input_length_help, batch_size=batch_size
    )


def check_translator_arguments(
    args: argparse.Namespace,
    *,
    serves_exports: bool = False,
    numbers: NumberRules = SEARCH_NUMBERS,
    **kinds: str,
) -> None:
    """Checks ``--workdir`` (a folder; an export without the Keras model, such
    as a CTranslate2 or LiteRT folder, only where the command `serves_exports`),
    the numeric flags (`check_numbers` with `numbers`), ``--weights``
    (`check_weights`) and the command's own path arguments, `kinds` as for
    `check_paths`."""
    check_paths(args, workdir="folder", **kinds)
    check_numbers(args, numbers)
    if not serves_exports:
        command = getattr(args, "command", "the command")
        refuse_export_without_model(
            getattr(args, "workdir", None), "--workdir", command
        )
    check_weights(args)


def refuse_export(folder: str | os.PathLike[str], argument: str, holds_no: str) -> None:
    """An export folder of any format given where a command needs a training
    run: one line naming the format and what the export does not hold."""
    from keras_transformer.export.formats import export_format_of

    export_format = export_format_of(folder)
    if export_format is not None:
        raise CommandError(
            f"{argument} {folder} is a {export_format.name} export, which holds no "
            f"{holds_no}: pass the folder of the training run it was exported "
            "from (train --workdir)."
        )


def refuse_export_without_model(
    folder: str | os.PathLike[str] | None, argument: str, command: str
) -> None:
    """An export of another format than the SavedModel (no Keras model) as
    `folder` (``--workdir``, ``--ensemble``) of a command that needs the Keras
    model: one line saying what it needs instead."""
    from keras_transformer.export.formats import DEFAULT_FORMAT, serving_format

    if folder is None:
        return
    export_format = serving_format(folder)
    if export_format.option != DEFAULT_FORMAT:
        raise CommandError(
            f"{argument} {folder} is a {export_format.name} export, which only "
            "`keras-transformer translate` and `evaluate` serve; "
            f"{command} needs the Keras model: pass a training run folder "
            "(train --workdir) or a "
            "SavedModel export folder (keras-transformer export without --format)."
        )


def search_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The `DecodeSettings` fields given by `add_search_arguments`' flags:
    each flag the command line gave (`GivenSetting`) or whose value is not
    the field's default, so that what a folder was exported with
    (`Translator.load`) holds unless a flag changes it, and a run decodes
    with the defaults."""
    import dataclasses

    from keras_transformer.decoding.settings import DecodeSettings

    given = getattr(args, "given_settings", frozenset())
    settings = {}
    for field in dataclasses.fields(DecodeSettings):
        value = getattr(args, field.name, None)
        if value is not None and (field.name in given or value != field.default):
            settings[field.name] = value
    return settings


def parser_defaults(
    add_arguments: Callable[[argparse.ArgumentParser], None],
) -> dict[str, Any]:
    """A command's settings as its parser (`add_arguments`) leaves them."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return vars(parser.parse_args(["--workdir", "-"]))


def load_search_translator(args: argparse.Namespace) -> Any:
    """The `Translator` of ``--workdir`` and ``--weights``, with the decoding
    settings of the search flags (`search_settings`) and ``--batch-size``."""
    from keras_transformer.translation import Translator

    return Translator.load(
        args.workdir,
        args.weights,
        **search_settings(args),
        batch_size=args.batch_size,
        seed=args.seed,
    )


@contextlib.contextmanager
def translating(
    command: str,
    translator: Any,
    noun: str = "lines",
    first_number: int = 1,
    report: bool = True,
) -> Iterator[None]:
    """Around a command's `translator.translate` or `evaluate`: the progress
    bar goes to standard error (the translations may go to standard output),
    and the sources that were cut are reported in the command's own words
    (`report_cut_sources`; not `report`: the caller reports them) instead of
    the library's `SourceCutWarning`."""
    from keras_transformer.source_limits import SourceCutWarning

    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore", SourceCutWarning)
        yield
    if report:
        report_cut_sources(command, translator, noun, first_number)


def warn(command: str, message: str) -> None:
    """One warning line of `command` on standard error."""
    print(f"keras-transformer {command}: warning: {message}", file=sys.stderr)


def report_cut_sources(
    command: str,
    translator: Any,
    noun: str = "lines",
    first_number: int = 1,
    cut: Sequence[int] | None = None,
) -> None:
    """One warning line naming the sources that `translator` cut, if any.

    `translator` is the `Translator` that just translated them; its
    `cut_lines` are the indices (from 0) of the cut sources (or `cut`, those
    of several calls). `noun` names what they are to the user (``lines`` of
    a file, ``sentences``), and `first_number` the number the first of them
    has (a line typed at a terminal is translated alone).
    """
    from keras_transformer.source_limits import LEARNED_POSITIONS_LIMIT, describe_lines

    cut = list(getattr(translator, "cut_lines", ()) if cut is None else cut)
    if not cut:
        return
    limit = getattr(translator, "source_limit", translator.max_input_length)
    numbers = describe_lines([i + first_number for i in cut])
    several = len(cut) > 1
    one = noun[:-1] if noun.endswith("s") else noun
    were = "were" if several else "was"
    remedy = getattr(translator, "input_limit_remedy", None) or (
        "pass --max-input-length to change it"
        if limit == translator.max_input_length
        else LEARNED_POSITIONS_LIMIT
    )
    warn(
        command,
        f"{len(cut)} {noun if several else one} {were} longer than the input limit "
        f"of {limit} subword tokens (END included) and {were} cut to it "
        f"({noun if several else one} {numbers}); {remedy}.",
    )
