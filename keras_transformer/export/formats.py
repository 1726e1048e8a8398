"""The export formats: one registry entry per format, and the translator protocol.

Each format is one module of this package that defines ``FORMAT``, an
`ExportFormat` (`keras_transformer.export.target`): the files that mark its
folders, the kinds of run it exports, its quantizations, its run export and
its translator loader. `FORMATS` maps the format's ``--format`` name to that
module, so that a new format is its module plus one line there; the
command line (``keras-transformer export`` and ``translate``) dispatches
through `get_format` and `serving_format`, never on a format's name. A
format's module is imported on first use: naming the formats (``--help``)
imports none of them.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from keras_transformer.export.target import TEST_SET_FILE, ExportFormat, with_records
from keras_transformer.files import read_json_object
from keras_transformer.validation import with_article

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "TranslatorLike",
    "check_output_placement",
    "export_format_of",
    "export_run_as",
    "get_format",
    "read_test_set",
    "serving_format",
    "test_set_record",
]

#: ``--format`` name -> the module that defines its ``FORMAT``.
FORMATS = {
    "savedmodel": "keras_transformer.export.saved_model",
    "litert": "keras_transformer.export.litert",
    "ctranslate2": "keras_transformer.export.ctranslate2",
}
#: The format of ``keras-transformer export`` without ``--format``, whose
#: translator (`keras_transformer.translation.Translator`) also serves runs.
DEFAULT_FORMAT = "savedmodel"


class TranslatorLike(Protocol):
    """What ``keras-transformer translate`` translates with: a format's
    ``load_translator`` returns one (`keras_transformer.translation.Translator`
    for runs and SavedModel exports, `CTranslate2Translator`,
    `LiteRTTranslator`)."""

    def translate(self, lines: Sequence[str], /) -> list[Any]:
        """One translation per line, in order (``""`` for an empty line)."""
        ...


def get_format(name: str) -> ExportFormat:
    """The registered format called `name` (its ``--format`` name).

    Raises:
        ValueError: (one line) for another name, naming the formats.
    """
    if name not in FORMATS:
        raise ValueError(
            f"Unknown export format {name!r}; the formats are {', '.join(FORMATS)}."
        )
    return importlib.import_module(FORMATS[name]).FORMAT


def export_format_of(folder: str | os.PathLike[str]) -> ExportFormat | None:
    """The format of the export that `folder` holds (None: it holds none)."""
    for name in sorted(FORMATS, key=lambda name: name == DEFAULT_FORMAT):
        export_format = get_format(name)
        if export_format.holds_export(folder):
            return export_format
    return None


def check_output_placement(
    path: str | os.PathLike[str],
    argument: str,
    *,
    noun: str = "folder",
    log_folder: bool = False,
) -> None:
    """Refuses an output that would replace or join what a run or an export holds.

    An output may not be one of a run folder's own entries
    (`runs.layout.RUN_ENTRIES`) or lie in one of its folders (a run's
    ``translations/`` and other names are free), nor lie in an export
    folder, which an export writes whole: training into ``export/run``
    would be deleted by the next ``export --overwrite``. A run or an export
    folder may itself be the output (the command that writes it says
    whether it resumes, replaces or refuses it), except for a `log_folder`,
    which may lie in a run's ``logs/`` but be neither.

    Args:
        path: the output: a run folder (`train`'s `workdir`), an export
            folder, a file or a log folder.
        argument: how the caller named it (``workdir``, ``--output``).
        noun: ``"file"`` or ``"folder"``, for the message.
        log_folder: whether `path` is a log folder (TensorBoard, records).

    Raises:
        ValueError: (one line) naming the run or export and what to pass.
    """
    from keras_transformer.runs import enclosing_run
    from keras_transformer.runs.layout import LOG_DIR, RUN_ENTRIES

    target = Path(path).resolve()
    run = enclosing_run(target)
    free = {LOG_DIR} if log_folder else set()
    itself = (target,) if log_folder else ()
    for folder in (*itself, *target.parents):
        if folder == run:
            entry = target.relative_to(folder).parts[0]
            if entry not in RUN_ENTRIES or entry in free:
                return
            where = f"into {entry}/" if (folder / entry).is_dir() else f"over {entry}"
            room = "logs/" if free else "translations/"
            raise ValueError(
                f"{argument} {path} would write {where} of the run {folder}, "
                f"which the run needs: pass a {noun} outside it (or in its "
                f"{room} folder)."
            )
        export_format = export_format_of(folder)
        if export_format is not None:
            raise ValueError(
                f"{argument} {path} lies in the {export_format.name} export "
                f"{folder}, which keras-transformer export writes whole: pass "
                f"a {noun} outside it."
            )


def serving_format(folder: str | os.PathLike[str]) -> ExportFormat:
    """The format whose translator serves `folder`: the one whose export it
    holds, else the default (a training run or a SavedModel export)."""
    return export_format_of(folder) or get_format(DEFAULT_FORMAT)


def export_run_as(
    name: str,
    workdir: str | os.PathLike[str],
    output_dir: str | os.PathLike[str],
    weights: str = "last",
    *,
    quantization: str | None = None,
    overwrite: bool = False,
    **settings: Any,
) -> Path:
    """Exports a run (or an export folder) in the format called `name`.

    Args:
        name: the format's ``--format`` name (`FORMATS`).
        workdir: a run folder or an export folder of the format's kinds.
        output_dir: the folder to write.
        weights: ``"last"``, ``"best"``, ``"average"`` or a weights file.
        quantization: one of the format's quantizations (None: its default).
        overwrite: replace an earlier export of this format in `output_dir`.
        **settings: the settings the format takes for the run's kind.

    Raises:
        ValueError: (one line) for an unknown format, a kind or a
            quantization the format does not offer, a bad setting, or an
            `output_dir` in another export or in one of the run's own
            folders (`check_output_placement`).
    """
    from keras_transformer.runs import is_run_dir, run_kind

    export_format = get_format(name)
    kind = run_kind(workdir)
    if kind not in export_format.kinds:
        other = (
            "" if name == DEFAULT_FORMAT else " Leave out --format for its SavedModel."
        )
        raise ValueError(
            f"--format {name} exports {' and '.join(export_format.kinds)} runs; "
            f"{workdir} is {with_article(kind)} "
            f"{'run' if is_run_dir(workdir) else 'export'}.{other}"
        )
    takes = export_format.settings
    refused = [n for n in settings if takes is not None and n not in takes]
    if refused:
        flags = ", ".join(f"{n} (--{n.replace('_', '-')})" for n in refused)
        raise ValueError(
            f"--format {name} takes no {flags}; it takes {', '.join(takes)}. "
            f"Leave {'it' if len(refused) == 1 else 'them'} out."
        )
    offered = export_format.quantizations
    if quantization is not None and quantization not in offered:
        takers = [n for n in FORMATS if quantization in get_format(n).quantizations]
        where = f"applies to --format {' or '.join(takers)}" if takers else None
        raise ValueError(
            f"--quantization {quantization} {where or 'is written by no format'}"
            + (f" (--format {name} takes {', '.join(offered)})" if offered else "")
            + "; change it or leave --quantization out."
        )
    if quantization is not None:  # else the format's own default
        settings["quantization"] = quantization
    # Inside another export (which its next --overwrite deletes whole) or in
    # one of a run's own folders (its checkpoints/) an export is refused.
    check_output_placement(output_dir, "output_dir")
    # The test set's record goes into the folder before the swap: an export
    # appears with it or not at all (and a damaged config.json stops the
    # command before the slow conversion).
    test_set = test_set_record(workdir) if kind == "translation" else None
    with with_records({TEST_SET_FILE: test_set} if test_set else {}):
        return export_format.run_export(
            workdir, output_dir, weights, overwrite=overwrite, **settings
        )


def test_set_record(source: str | os.PathLike[str]) -> str | None:
    """The text of ``test_set.json`` (`TEST_SET_FILE`) for a translation
    export made from `source`: the run's ``data`` settings and
    ``train.seed`` (from its ``config.json``), or what the export `source`
    recorded; ``evaluate --workdir EXPORT`` then scores the run's test split
    without ``--task``. None for an export that recorded none.
    """
    from keras_transformer.runs import CONFIG_FILE, is_run_dir

    source = Path(source)
    remedy = "export the run again, or pass evaluate --task"
    if is_run_dir(source):
        config = read_json_object(source / CONFIG_FILE, "restore the run's config.json")
        train = config.get("train")
        seed = train.get("seed", 0) if isinstance(train, dict) else 0
        record = {"data": config.get("data") or {}, "seed": seed}
    elif (source / TEST_SET_FILE).is_file():
        record = read_json_object(source / TEST_SET_FILE, remedy)
    else:
        return None
    return json.dumps(record, indent=2) + "\n"


def read_test_set(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``{"data": the run's data settings, "seed": its train.seed}`` that
    the export `folder` recorded (`test_set_record`), or None.

    Raises:
        ValueError: (one line, naming the file) for a damaged record.
    """
    path = Path(folder) / TEST_SET_FILE
    if not path.is_file():
        return None
    remedy = "export the run again, or pass evaluate --task (or --source)"
    record = read_json_object(path, remedy)
    if not isinstance(record.get("data"), dict) or not isinstance(
        record.get("seed", 0), int
    ):
        raise ValueError(
            f'{path} holds no data settings (a "data" object and a "seed"): {remedy}.'
        )
    return record
