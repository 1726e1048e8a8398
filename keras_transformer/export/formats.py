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
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from keras_transformer.export.target import ExportFormat

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "TranslatorLike",
    "export_format_of",
    "export_run_as",
    "get_format",
    "serving_format",
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
            quantization the format does not offer, or a bad setting.
    """
    from keras_transformer.runs import run_kind

    export_format = get_format(name)
    kind = run_kind(workdir)
    if kind not in export_format.kinds:
        other = (
            "" if name == DEFAULT_FORMAT else " Leave out --format for its SavedModel."
        )
        raise ValueError(
            f"--format {name} exports {' and '.join(export_format.kinds)} runs; "
            f"{workdir} is a {kind} run.{other}"
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
        formats = [n for n in FORMATS if get_format(n).quantizations]
        raise ValueError(
            f"--quantization {quantization} applies to --format "
            f"{' or '.join(formats)}"
            + (f" (--format {name} takes {', '.join(offered)})" if offered else "")
            + "; change it or leave --quantization out."
        )
    if quantization is not None:  # else the format's own default
        settings["quantization"] = quantization
    return export_format.run_export(
        workdir, output_dir, weights, overwrite=overwrite, **settings
    )
