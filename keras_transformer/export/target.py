"""Where an export is written: one check, one lock, one swap, for every format.

An export folder appears whole or not at all: everything is written into a
hidden temporary folder beside it (``.tmp-<pid>-<name>``) and swapped in by
one rename when complete (`keras_transformer.files.atomic_directory`), so a
crash, a kill or a full disk leaves the previous export (or none) intact,
never half of one; TensorFlow Serving, which watches the numbered folders,
sees the old version or the new one. One export into a folder at a time:
the writer lock is the hidden file ``.<name>.lock`` beside the folder.
``overwrite`` replaces only an earlier export of the same format; any other
non-empty folder (a run folder, another format's export, someone's files)
is refused and never deleted.

`ExportFormat` is also the entry of a format in the registry
(`keras_transformer.export.formats`): its kinds, quantizations, run export
and translator loader. This module imports only the standard library and
`keras_transformer.files`, so that a format module stays light to import.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from keras_transformer.files import (
    TEMPORARY_PREFIX,
    FolderLock,
    atomic_directory,
    file_problem,
    read_json_object,
    short_error,
)

__all__ = [
    "TEST_SET_FILE",
    "ExportFormat",
    "check_export_target",
    "lock_path",
    "read_export_record",
    "reading_export_files",
    "with_records",
    "writing_export",
]

#: A translation export's record of the data settings and seed of the run it
#: was made from (`keras_transformer.export.formats.test_set_record`): the
#: test set that ``evaluate --workdir EXPORT`` scores. An export of any
#: format may hold it, so an overwrite never carries an earlier one over.
TEST_SET_FILE = "test_set.json"

#: Files (name: text) that every export written now also holds
#: (`with_records`): written into the new folder before it is swapped in.
_records: contextvars.ContextVar[tuple[tuple[str, str], ...]] = contextvars.ContextVar(
    "export_records", default=()
)


@contextlib.contextmanager
def with_records(records: Mapping[str, str]) -> Iterator[None]:
    """Every export written inside the block (by any format, through
    `writing_export`) also holds `records` (file name: text), written into
    its folder before the swap: the folder appears with them or not at all.
    """
    token = _records.set(tuple(records.items()))
    try:
        yield
    finally:
        _records.reset(token)


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format: what marks its folders, and what it offers.

    Every format writes its folder through `check_export_target` and
    `writing_export`: one check of the target, one lock, one swap.
    ``overwrite`` replaces only a folder that holds an export of the same
    format (all of `marks`).

    Attributes:
        name: the format's name in messages (``"SavedModel"``).
        marks: the files that every export of this format holds.
        entries: everything the export writes into its folder; what else
            an earlier export's folder holds is carried over into the new one.
        new_folder: what to choose instead of an occupied folder.
        option: its name for ``keras-transformer export --format``.
        kinds: the kinds of run it exports.
        quantizations: the weight types it writes, the default first (none:
            ``--quantization`` is refused).
        settings: the settings its run export takes (None: as the run's
            kind says).
        export_model: ``(model, tokenizer, output_dir, *, overwrite,
            [quantization,] **settings) -> Path``, the export of a
            translation model in memory; a run is exported through it by
            `run_export` unless `export_run` is given.
        export_run: ``(workdir, output_dir, weights, *, overwrite,
            [quantization,] **settings) -> Path``, the export of a run
            folder, for a format whose runs need more than `export_model`.
        load_translator: ``(folder, weights, **settings) ->`` a
            `keras_transformer.export.formats.TranslatorLike` serving an
            export folder (``keras-transformer translate``); `settings` are
            the `DecodeSettings` fields given and ``batch_size``, ``seed``.
        serves: the options of ``translate`` beyond plain lines that its
            translator takes (``n_best``, ``prefixes``, ``constraints``,
            ``ensemble``, ``progress``).
        summary: ``(path, kind, quantization) ->`` the closing line of
            ``keras-transformer export``.
    """

    name: str
    marks: tuple[str, ...]
    entries: tuple[str, ...]
    new_folder: str = "a new or empty folder"
    option: str = ""
    kinds: tuple[str, ...] = ("translation",)
    quantizations: tuple[str, ...] = ()
    settings: tuple[str, ...] | None = None
    export_model: Callable[..., Path] | None = None
    export_run: Callable[..., Path] | None = None
    load_translator: Callable[..., Any] | None = None
    serves: frozenset[str] = frozenset()
    summary: Callable[[Path, str, str | None], str] | None = None

    def holds_export(self, folder: str | os.PathLike[str]) -> bool:
        """Whether `folder` holds an export of this format (all its marks)."""
        return all((Path(folder) / mark).is_file() for mark in self.marks)

    def run_export(
        self,
        workdir: str | os.PathLike[str],
        output_dir: str | os.PathLike[str],
        weights: str = "last",
        *,
        overwrite: bool = False,
        **options: Any,
    ) -> Path:
        """Exports a run (or an export folder) in this format.

        `export_run` where the format has one; else the target is checked
        before the slow load, the translation model's `weights` and its
        tokenizer are loaded, and ``export_model(model, tokenizer,
        output_dir, overwrite=..., **options)`` writes the folder; from an
        export folder, with those of its decoding settings this format
        takes (`settings`), unless `options` replace them.
        """
        if self.export_run is not None:
            return self.export_run(
                workdir, output_dir, weights, overwrite=overwrite, **options
            )
        if self.export_model is None:
            raise TypeError(f"The {self.name} format registers no run export.")
        from keras_transformer.translation import load_translator
        from keras_transformer.translation.loading import with_export_settings

        check_export_target(output_dir, overwrite, self)  # before loading
        # An export folder keeps those of its settings that this format takes.
        options = with_export_settings(workdir, options, self.settings or ())
        model, tokenizer = load_translator(workdir, weights, as_served=False)
        return self.export_model(
            model, tokenizer, output_dir, overwrite=overwrite, **options
        )


def read_export_record(
    path: str | os.PathLike[str], required: Iterable[str], format_name: str
) -> dict[str, Any]:
    """The settings file of an export folder (a CTranslate2 export's
    ``keras_transformer.json``, ``litert.json``); one that is damaged or lacks
    a `required` setting is one line naming it and the command that writes
    it again."""
    remedy = (
        f"write the export again with keras-transformer export --format {format_name}."
    )
    record = read_json_object(path, remedy)
    missing = [name for name in required if name not in record]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: {remedy}")
    return record


@contextlib.contextmanager
def reading_export_files(
    paths: Iterable[Path], format_name: str, *, engine: bool = False
) -> Iterator[None]:
    """Checks that an export's `paths` are there and not empty, and turns an
    error while they are read (a file cut short, or of another export) into
    one line naming them and the command that writes them again (the
    engines' own errors name no file, or a tensor). With `engine`, the
    inference engine itself loads them, which also fails for reasons of its
    own (a device or compute type it lacks): the line then says it could not
    load them, with the engine's reason, rather than that they are damaged."""
    paths = list(paths)
    remedy = (
        "restore the export from a copy, or write it again with "
        f"keras-transformer export --format {format_name}."
    )
    for path in paths:
        problem = file_problem(path)
        if problem is not None:
            raise ValueError(f"{problem}: {remedy}")
    try:
        yield
    except Exception as e:  # noqa: BLE001 - RuntimeError, ValueError, OSError...
        reason = short_error(e)
        names = (
            f"{paths[0].parent}'s {', '.join(p.name for p in paths[:-1])} or "
            f"{paths[-1].name}"
            if len(paths) > 1
            else str(paths[0])
        )
        if engine:
            raise ValueError(
                f"{names} could not be loaded ({reason}); if a file was cut short "
                f"or replaced, {remedy}"
            ) from e
        raise ValueError(f"{names} is damaged ({reason}): {remedy}") from e


def lock_path(export_dir: str | os.PathLike[str]) -> Path:
    """The writer lock of an export folder: ``.<name>.lock`` beside it.

    Outside the folder, so that the folder swapped in holds only the export
    (TensorFlow Serving ignores the hidden, non-numeric name in the model's
    base folder); deleted when the export ends.
    """
    export_dir = Path(export_dir)
    return export_dir.parent / f".{export_dir.name}.lock"


def _check_target(
    export_dir: Path, overwrite: bool, export_format: ExportFormat
) -> None:
    """Refuses a file, or a non-empty folder that is not to be replaced.

    Deletes nothing: the earlier export is replaced by the swap at the end.
    """
    if export_dir.name.startswith(TEMPORARY_PREFIX):
        raise FileExistsError(
            f"{export_dir} is the name of an unfinished export's temporary folder; "
            "choose another folder name."
        )
    if export_dir.exists() and not export_dir.is_dir():
        raise FileExistsError(
            f"{export_dir} is a file; pass the path of a (new) folder to export to."
        )
    if not export_dir.is_dir():
        return
    if Path.cwd().resolve().is_relative_to(export_dir.resolve()):
        raise FileExistsError(
            f"{export_dir} is (or holds) the current folder, which the export "
            "would replace; run the command from another folder."
        )
    if not any(export_dir.iterdir()):
        return
    name = export_format.name
    # A folder of other files (a run, someone's notes) is never offered
    # --overwrite: only an earlier export of this format is replaced.
    if not export_format.holds_export(export_dir):
        from keras_transformer.runs import is_run_dir

        refusal = "refusing to delete it" if overwrite else "it stays as it is"
        found = (
            f"is a training run's folder, not a {name} export to replace"
            if is_run_dir(export_dir)
            else f"is not empty and holds no {name} export to replace "
            f"({' and '.join(export_format.marks)})"
        )
        raise FileExistsError(
            f"{export_dir} {found}: {refusal}. Choose {export_format.new_folder}."
        )
    if not overwrite:
        raise FileExistsError(
            f"{export_dir} holds an earlier {name} export. Pass overwrite=True "
            f"(--overwrite) to replace it, or choose {export_format.new_folder}."
        )


def check_export_target(
    export_dir: str | os.PathLike[str],
    overwrite: bool,
    export_format: ExportFormat,
) -> Path:
    """`export_dir` as a named `Path`, checked as a target of `export_format`.

    For the check before the (slow) conversion; `writing_export` checks
    again under the lock. Deletes nothing.

    Raises:
        FileExistsError: (one line) when `export_dir` is a file, the
            current folder, or not empty and either `overwrite` is false or
            it holds no export of `export_format`.
    """
    export_dir = Path(export_dir)
    if export_dir.name in ("", ".", ".."):  # the swap needs the folder's name
        export_dir = Path(os.path.abspath(export_dir))
    _check_target(export_dir, overwrite, export_format)
    return export_dir


def _carry_over(old: Path, new: Path, entries: tuple[str, ...]) -> None:
    """Copies what else an earlier export folder holds into the new one.

    Files someone put beside an earlier export (notes, a README) were kept
    when exports were overwritten in place; the swap keeps them too.
    """
    if not old.is_dir():
        return
    for entry in old.iterdir():
        if entry.name in entries or (new / entry.name).exists():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, new / entry.name, symlinks=True)
        else:
            shutil.copy2(entry, new / entry.name, follow_symlinks=False)


@contextlib.contextmanager
def writing_export(
    export_dir: Path, overwrite: bool, export_format: ExportFormat
) -> Iterator[Path]:
    """The one writer of every export format: yields the folder to write.

    Takes the writer lock (`lock_path`), checks `export_dir` again now that
    no one else writes, and yields a temporary folder beside it; when the
    block ends, what else an earlier export's folder held is carried over,
    its permissions copied, and the new folder swapped in whole
    (`keras_transformer.files.atomic_directory`). A failure leaves the
    earlier export (or nothing) as it was.

    Raises:
        FileExistsError: as `check_export_target`.
        keras_transformer.files.FolderLockedError: when another export into
            `export_dir` is running.
        keras_transformer.files.FileWriteError: when a write fails.
    """
    lock = lock_path(export_dir)
    with FolderLock(export_dir, "keras-transformer export", lock, True):
        _check_target(export_dir, overwrite, export_format)
        # Written beside export_dir and swapped in when complete: the earlier
        # export (or nothing) until then, whatever happens.
        with atomic_directory(export_dir) as temporary:
            yield temporary
            for name, text in _records.get():
                (temporary / name).write_text(text, encoding="utf-8")
            _carry_over(export_dir, temporary, (*export_format.entries, TEST_SET_FILE))
            if export_dir.is_dir():  # the earlier folder's permissions
                shutil.copymode(export_dir, temporary)
