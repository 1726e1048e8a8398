"""``keras-transformer translate``: one translation per input line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from keras_transformer.cli._common import (
    CommandError,
    add_translator_arguments,
    check_path,
    check_run_kind,
    check_translator_arguments,
    refuse_export_without_model,
    report_cut_sources,
    search_settings,
    translating,
    warn,
)
from keras_transformer.cli._parts import (
    add_line_by_line_arguments,
    command_signature,
    output_in_parts,
)
from keras_transformer.cli._typed import answer_typed_lines
from keras_transformer.validation import count_of

NAME = "translate"
HELP = (
    "Translate a file or standard input, one output line per input line (with "
    "--n-best K: K lines 'index ||| translation ||| score' per input line)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``keras-transformer translate``."""
    add_translator_arguments(parser)
    add_line_by_line_arguments(
        parser,
        input_file="sentences, one per line",
        item="line",
        done="translated",
        output="the translations, one per line",
    )
    # Terminology constraints and ensembles (Post and Vilar 2018; averaged
    # log-probabilities).
    parser.add_argument(
        "--constraints-file",
        default=None,
        help="Target phrases each translation must contain: one line per input "
        "line, its phrases separated by tabs (an empty line: none). A phrase "
        "that cannot be met is named in a warning.",
    )
    parser.add_argument(
        "--ensemble",
        action="append",
        default=[],
        metavar="WORKDIR",
        help="Another run (or export) with the same SentencePiece model, decoded "
        "with --workdir in one search averaging their log-probabilities; "
        "repeat for more. --weights applies to each.",
    )
    parser.add_argument(
        "--prefix-file",
        help="File of target prefixes, one per input line: each translation "
        "starts with its line's prefix (an empty line: no prefix).",
    )
    parser.add_argument(
        "--prefix-column",
        action="store_true",
        help="Each input line is 'source<TAB>prefix': the translation starts "
        "with the prefix (instead of --prefix-file).",
    )


def _split_prefix_column(lines: list[str]) -> tuple[list[str], list[str]]:
    """``source<TAB>prefix`` lines as sources and prefixes (no tab: none)."""
    pairs = [line.split("\t", 1) if "\t" in line else [line, ""] for line in lines]
    return [pair[0] for pair in pairs], [pair[1] for pair in pairs]


def read_prefixes(
    args: argparse.Namespace, lines: list[str]
) -> tuple[list[str], list[str] | None]:
    """The sources and their target prefixes (None: no prefix) of
    ``--prefix-file`` or ``--prefix-column``."""
    from keras_transformer.translation import read_lines

    if args.prefix_column and args.prefix_file is not None:
        raise CommandError("Pass either --prefix-file or --prefix-column, not both.")
    if args.prefix_column:
        return _split_prefix_column(lines)
    if args.prefix_file is None:
        return lines, None
    prefixes = read_lines(args.prefix_file)
    if len(prefixes) != len(lines):
        raise CommandError(
            f"--prefix-file {args.prefix_file} has {count_of(len(prefixes), 'line')} "
            f"but the input has {len(lines)}; pass one prefix per input line "
            "(empty: none)."
        )
    return lines, prefixes


def n_best_lines(lists: list[list[tuple[str, float]]], start: int = 0) -> list[str]:
    """``index ||| translation ||| score`` lines (Moses and fairseq's n-best
    format): the index of the input line (from 0; `lists[0]` is line
    `start`), each hypothesis best first, its score ``log P / lp(Y)`` with 4
    decimals."""
    return [
        f"{index} ||| {text} ||| {score:.4f}"
        for index, hypotheses in enumerate(lists, start)
        for text, score in hypotheses
    ]


#: The options of ``translate`` beyond plain lines, by their name in a
#: format's `ExportFormat.serves`, as the user writes them.
_OPTIONS = {
    "n_best": "--n-best",
    "prefixes": "--prefix-file/--prefix-column",
    "constraints": "--constraints-file",
    "ensemble": "--ensemble",
    "progress": "",
}


def _reads_a_terminal(args: argparse.Namespace) -> bool:
    """Whether the sentences are typed at a terminal (standard input, not a
    file or pipe). Options that pair a file's lines with the input's need
    the input's lines first, so they are refused there."""
    if str(args.input) != "-" or not sys.stdin.isatty():
        return False
    for flag, value in (
        ("--prefix-file", args.prefix_file),
        ("--constraints-file", args.constraints_file),
    ):
        if value is not None:
            raise CommandError(
                f"{flag} pairs its lines with the input's, which a terminal gives "
                "one at a time: pass the sentences as --input FILE (or pipe them "
                "in)."
            )
    return True


def _translate_typed(
    args: argparse.Namespace, translator: Any, options: dict[str, Any]
) -> None:
    """Translates each line typed at the terminal as soon as it is entered
    (`answer_typed_lines`); reading them all first would show nothing until
    Ctrl-D."""

    def translate(number: int, line: str) -> list[str]:
        sources, prefixes = read_prefixes(args, [line])
        given = options if prefixes is None else {**options, "prefixes": prefixes}
        with translating(NAME, translator, "lines", first_number=number):
            outputs = translator.translate(sources, **given)
        if options.get("n_best") is not None:
            outputs = n_best_lines(outputs, start=number - 1)
        return outputs

    prompt = "type a sentence and press Enter to translate it"
    answer_typed_lines(NAME, prompt, args.output, translate)


def run(args: argparse.Namespace) -> int:
    """Reads the lines, translates them with the translator of the folder's
    format (`serving_format`: a run's or a SavedModel's `Translator`, a
    CTranslate2 or LiteRT export's own), writes them."""
    check_translator_arguments(
        args,
        serves_exports=True,
        input="file",
        output="new file",
        prefix_file="file",
        constraints_file="file",
    )
    # A run of another kind (an image run) is refused before anything loads.
    check_run_kind(args.workdir, "translation", "--workdir", NAME)
    for path in args.ensemble:
        check_path(path, "folder", "--ensemble")
        check_run_kind(path, "translation", "--ensemble", NAME)
        refuse_export_without_model(path, "--ensemble", f"{NAME} --ensemble")
    _check_ensemble_runs(args.workdir, args.ensemble)
    _check_n_best(args)
    from keras_transformer.export.formats import TranslatorLike, serving_format
    from keras_transformer.translation import read_lines

    typed = _reads_a_terminal(args)
    lines, prefixes = read_prefixes(args, [] if typed else read_lines(args.input))
    export_format = serving_format(args.workdir)
    options = {
        "n_best": args.n_best if args.n_best > 1 else None,
        "prefixes": prefixes,
        "constraints": _read_constraints(args.constraints_file, len(lines)),
        "ensemble": args.ensemble or None,
        "progress": (str(args.input) != "-" and not args.no_progress) or None,
    }
    unserved = [
        _OPTIONS[name]
        for name, value in options.items()
        if value is not None and name not in export_format.serves and _OPTIONS[name]
    ]
    if unserved:
        raise CommandError(
            f"{', '.join(unserved)}: not served from a {export_format.name} folder; "
            "translate with the run folder (--workdir RUN) instead."
        )
    options = {
        name: value
        for name, value in options.items()
        if value is not None and name in export_format.serves
    }
    settings = search_settings(args)
    translator: TranslatorLike
    if options.pop("ensemble", None):
        translator = _load_ensemble(args)
    else:
        translator = export_format.load_translator(
            args.workdir,
            args.weights,
            batch_size=args.batch_size,
            seed=args.seed,
            **settings,
        )
    if typed:
        _translate_typed(args, translator, options)
        return 0
    _translate_lines(args, translator, lines, options)
    return 0


def _translate_lines(
    args: argparse.Namespace,
    translator: Any,
    lines: list[str],
    options: dict[str, Any],
) -> None:
    """Translates `lines` CHUNK_LINES at a time, in order, each part written
    as soon as it is done (`output_in_parts`): a stopped command (Ctrl-C, a
    kill, a full disk) keeps the translations of the parts before, in
    ``OUTPUT.partial``, and the same command run again goes on after them."""
    from keras_transformer.progress import LineProgress

    per_line = [options.get(name) for name in _PER_LINE]
    signature = command_signature(
        args,
        lines,
        add_arguments,
        per_line,
        [args.workdir, *args.ensemble],
        args.output,
    )
    with output_in_parts(NAME, args.output, len(lines), signature) as parts:
        bar = options.pop("progress", None) and LineProgress(len(lines) - parts.start)
        cut: list[int] = []
        for first, last in parts.ranges(args.batch_size):
            part = {
                name: value[first:last] if name in _PER_LINE else value
                for name, value in options.items()
            }
            if bar:
                part["progress"] = bar.part(first - parts.start)
            with translating(NAME, translator, "lines", report=False):
                outputs = translator.translate(lines[first:last], **part)
            cut += [first + i for i in getattr(translator, "cut_lines", ())]
            if options.get("constraints") is not None:
                _warn_unmet_constraints(translator, args.workdir, first + 1)
            if options.get("n_best") is not None:
                outputs = n_best_lines(outputs, start=first)
            parts.write(outputs, last)
        report_cut_sources(NAME, translator, "lines", cut=cut)


#: The options of `translate` with one value per input line.
_PER_LINE = ("prefixes", "constraints")


def _warn_unmet_constraints(
    translator: Any, workdir: str, first_number: int = 1
) -> None:
    """One warning per line whose translation misses constraint phrases, and
    one per phrase that cannot be met because its text is not in the
    vocabulary (naming the parts that would be the unknown piece ⁇); the
    first of the translator's last lines is line `first_number`."""
    unknown_pieces = translator.unknown_constraint_pieces
    for index, unmet in enumerate(translator.unmet_constraints):
        number = first_number + index
        unknown = unknown_pieces[index] if unknown_pieces else {}
        for phrase, pieces in unknown.items():
            named = ", ".join(repr(piece) for piece in pieces)
            warn(
                NAME,
                f"line {number}: constraint {phrase!r} cannot be met: {named} "
                f"{'is' if len(pieces) == 1 else 'are'} not in the vocabulary of "
                f"{workdir} (the unknown piece ⁇); translated without it.",
            )
        missed = [phrase for phrase in unmet if phrase not in unknown]
        if missed:
            warn(
                NAME,
                f"line {number}: constraint(s) not met: "
                + ", ".join(repr(phrase) for phrase in missed),
            )


def _check_n_best(args: argparse.Namespace) -> None:
    """Refuses, before anything loads, an --n-best larger than the beam where
    the beam is known: given, a run's default, or no beam (another --method).
    An export's own beam (of any format), when no flag sets it, is read
    with the export, which then says so."""
    from keras_transformer.export.formats import export_format_of

    given = getattr(args, "given_settings", frozenset())
    beam = args.method == "beam"
    own_beam = "beam_size" not in given and beam
    if args.n_best <= 1 or (own_beam and export_format_of(args.workdir) is not None):
        return
    kept = args.beam_size if beam else 1
    if kept < args.n_best:
        search = f"--beam-size {args.beam_size}" if beam else f"--method {args.method}"
        raise CommandError(
            f"--n-best {args.n_best} prints that many hypotheses of one beam "
            f"search, but {search} keeps {kept}: pass --beam-size {args.n_best} "
            "or more (and no other --method), or a smaller --n-best."
        )


def _check_ensemble_runs(workdir: str, ensemble: list[str]) -> None:
    """Refuses an --ensemble folder that is --workdir or another --ensemble:
    a model averaged with itself translates as the model alone, slower."""
    seen = {os.path.realpath(workdir): f"the --workdir run {workdir}"}
    for path in ensemble:
        folder = os.path.realpath(path)
        if folder in seen:
            raise CommandError(
                f"--ensemble {path} is {seen[folder]} again; a model averaged "
                "with itself translates as the model alone: name other runs."
            )
        seen[folder] = f"--ensemble {path}"


def _load_ensemble(args: argparse.Namespace) -> Any:
    """The translator of --workdir and every --ensemble run, decoded as one."""
    from keras_transformer.translation import Translator

    return Translator.from_runs(
        [args.workdir, *args.ensemble],
        args.weights,
        **search_settings(args),
        batch_size=args.batch_size,
    )


def _read_constraints(path: str | None, count: int) -> list[list[str]] | None:
    """--constraints-file: one line per input line, phrases separated by tabs."""
    from keras_transformer.translation import read_lines

    if path is None:
        return None
    check_path(path, "file", "--constraints-file")  # "-" is no file here
    rows = read_lines(path)  # split and decoded as the input is
    if len(rows) != count:
        raise CommandError(
            f"--constraints-file {path} has {count_of(len(rows), 'line')} for "
            f"{count_of(count, 'input line')}; give one line per input line (empty "
            "for none)."
        )
    return [[phrase for phrase in row.split("\t") if phrase.strip()] for row in rows]
