"""Folders on disk: a training run (`RunFolder`) and an export (`is_export_dir`).

A training run's folder (``keras-transformer train --workdir``) holds:

```text
config.json           the resolved TrainConfig
tokenizer/            the shared SubwordTokenizer (tokenizer.model/.json)
checkpoints/          tf.train checkpoints ckpt-<step> (model + optimizer +
                      the run's fingerprint), and checkpoints.json (the run
                      id, tokenizer and config they belong to)
best.weights.h5       the weights with the best validation BLEU (+ best.json)
averaged.weights.h5   the average of the last checkpoints (§6.1, + averaged.json)
logs/                 TensorBoard logs
translations/         hypotheses written by ``keras-transformer evaluate``
result.json           the final scores
writer.lock           the one writer's lock (`keras_transformer.files.FolderLock`)
```

An export folder (``keras-transformer export``) holds a SavedModel plus
``model.keras``, ``tokenizer/`` and ``export.json``.

This module knows these layouts and nothing about training: it reads the
model section of ``config.json`` (a `TransformerConfig`) and leaves the full
`kt.training.TrainConfig` to `kt.training`, which sits above it. The
translator (`kt.translation.load_translator`), the exporter and
`kt.training.load_trained_model` all open runs through `RunFolder`.

Example:
>>> from keras_transformer.runs import RunFolder
>>> run = RunFolder("runs/dates")  # doctest: +SKIP
>>> model, tokenizer = run.load(weights="average")  # doctest: +SKIP

Reference: Vaswani et al. (2017), §6.1 (checkpoint averaging).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import errno
import glob
import json
import logging
import math
import os
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import (
    TEMPORARY_PREFIX,
    atomic_file,
    check_free_space,
    fsync_directory,
    write_atomically,
)
from keras_transformer.models import TransformerConfig, build_transformer, get_preset
from keras_transformer.models.classifier import build_classifier
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.models.image_transformer import build_image_transformer

__all__ = [
    "RENAMED_KEYS",
    "is_image_run_layout",
    "upgrade_stored_config",
    "logged_scalars",
    "logged_training_seconds",
    "AVERAGED_WEIGHTS",
    "BEST_INFO",
    "BEST_WEIGHTS",
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "EXPORT_INFO_FILE",
    "EXPORT_MODEL_FILE",
    "LOG_DIR",
    "RESULT_FILE",
    "TOKENIZER_DIR",
    "TRANSLATIONS_DIR",
    "WEIGHTS",
    "CheckpointDamagedError",
    "CheckpointManager",
    "CheckpointMismatchError",
    "CheckpointWriteError",
    "ForeignCheckpointError",
    "RunFingerprint",
    "WEIGHTS_FINGERPRINT_ATTRIBUTE",
    "accepting_weights_without_fingerprint",
    "checkpoint_prefix",
    "weights_file_fingerprint",
    "weights_file_problem",
    "RunFolder",
    "check_fingerprint",
    "check_tokenizer",
    "checkpoint_fingerprint",
    "checkpoint_files",
    "checkpoint_paths",
    "checkpoint_problem",
    "checkpoint_step",
    "forget_checkpoint",
    "is_export_dir",
    "is_run_dir",
    "load_export",
    "quarantine_checkpoint",
    "restore_checkpoint",
    "record_checkpoint",
    "record_checkpoints_on_disk",
    "recorded_checkpoints",
    "restore_newest_checkpoint",
    "run_fingerprint",
    "save_checkpoint",
    "save_weights",
    "weights_nbytes",
    "write_checkpoint_metadata",
    "write_checkpoint_state",
]

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_METADATA = "checkpoints.json"
BEST_WEIGHTS = "best.weights.h5"
BEST_INFO = "best.json"
AVERAGED_WEIGHTS = "averaged.weights.h5"
AVERAGED_INFO = "averaged.json"
LOG_DIR = "logs"
TRANSLATIONS_DIR = "translations"
RESULT_FILE = "result.json"
#: The Keras model and settings next to an exported SavedModel.
EXPORT_MODEL_FILE = "model.keras"
EXPORT_INFO_FILE = "export.json"
#: The named weights of a run (anything else is a path).
WEIGHTS = ("last", "best", "average")


# ------------------------------------------------------------- checkpoints
#: The suffix of a damaged checkpoint file moved aside (never deleted).
DAMAGED_SUFFIX = ".corrupt"
#: The name of the CheckpointManager's state file in a checkpoint folder.
CHECKPOINT_STATE = "checkpoint"


class CheckpointDamagedError(ValueError):
    """A checkpoint file is truncated, empty, missing or unreadable.

    Not a config mismatch: the files themselves are broken. The message
    names the file and what is wrong with it.
    """


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (full disk, I/O error); nothing was recorded.

    The previous checkpoint is intact and still the latest.
    """


def checkpoint_paths(checkpoint_dir: str | os.PathLike[str]) -> list[str]:
    """The checkpoints in a folder, oldest first (``.../ckpt-<step>``).

    The one list of a run's checkpoints that every reader and writer uses:
    each ``ckpt-<step>.index`` on disk, and each checkpoint recorded in
    ``checkpoints.json`` (`recorded_checkpoints`) of which a file is left.
    TensorFlow's ``checkpoint`` state file is never asked, so a state file
    that is deleted, garbled or stale changes nothing, and the files of a
    checkpoint whose write was interrupted before it was recorded are
    found. Whether a listed checkpoint is intact is for its reader to check
    (`checkpoint_problem`): readers fall back past damaged ones.
    """
    directory = Path(checkpoint_dir)
    if not directory.is_dir():
        return []
    prefixes = set(_checkpoint_prefixes_on_disk(directory))
    for name in recorded_checkpoints(directory):
        prefix = str(directory / name)
        if checkpoint_files(prefix):
            prefixes.add(prefix)
    return sorted(prefixes, key=checkpoint_step)


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at, from its name ``ckpt-<step>``."""
    return int(path.rsplit("-", 1)[-1])


#: The suffixes of a checkpoint's files, after its prefix.
_CHECKPOINT_FILE_SUFFIX = re.compile(r"\.(index|data-\d{5}-of-\d{5})$")


def checkpoint_prefix(path: str | os.PathLike[str]) -> str:
    """The prefix of the checkpoint that `path` names.

    ``ckpt-200``, ``ckpt-200.index`` and ``ckpt-200.data-00000-of-00001``
    are one checkpoint, ``ckpt-200``: whichever of its files a user passes,
    it is read (and its fingerprint checked) as that checkpoint.

    Example:
    >>> checkpoint_prefix("run/checkpoints/ckpt-200.index")
    'run/checkpoints/ckpt-200'
    """
    return _CHECKPOINT_FILE_SUFFIX.sub("", str(path))


def checkpoint_files(prefix: str | os.PathLike[str]) -> list[Path]:
    """The files of a checkpoint that exist: ``<prefix>.index`` and its data shards."""
    prefix = Path(prefix)
    index = Path(f"{prefix}.index")
    shards = sorted(
        Path(p) for p in glob.glob(glob.escape(str(prefix)) + ".data-?????-of-?????")
    )
    return ([index] if index.exists() else []) + shards


def _short(error: BaseException) -> str:
    """The first line of an error message (TensorFlow's are long)."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(text.strip().splitlines()[0].split())[:200]


def _file_problem(path: Path) -> str | None:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{path} is missing"
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or _short(e)})"
    if not os.access(path, os.R_OK):
        return f"{path} cannot be read (permission denied)"
    if size == 0:
        return f"{path} is empty (0 bytes)"
    return None


def checkpoint_problem(
    prefix: str | os.PathLike[str], read_tensors: bool = True
) -> str | None:
    """What is wrong with the files of a checkpoint, or None when it is intact.

    Checks that ``<prefix>.index`` and every data shard exist, are readable
    and not empty, that the index parses, and (with `read_tensors`) that
    every tensor reads back whole with its checksum: a truncated, empty or
    missing file is found here, a model of another configuration is not
    (that is a mismatch, not damage).

    Returns:
        ``"<file> is <what>"`` naming the damaged file, or None.
    """
    prefix = Path(prefix)
    index = Path(f"{prefix}.index")
    problem = _file_problem(index)
    if problem:
        return problem
    pattern = glob.escape(str(prefix)) + ".data-?????-of-?????"
    shards = sorted(Path(p) for p in glob.glob(pattern))
    if not shards:
        return f"{prefix}.data-00000-of-NNNNN (its data file) is missing"
    count = int(shards[0].name.rsplit("-of-", 1)[1])
    names = {shard.name for shard in shards}
    for i in range(count):
        name = f"{prefix.name}.data-{i:05d}-of-{count:05d}"
        if name not in names:
            return f"{prefix.parent / name} is missing"
    for shard in shards:
        problem = _file_problem(shard)
        if problem and not (problem.endswith("(0 bytes)") and count > 1):
            return problem
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        keys = list(reader.get_variable_to_dtype_map())
    except Exception as e:  # noqa: BLE001 - any failure to parse is damage
        return f"{index} is damaged ({_short(e)})"
    if not read_tensors:
        return None
    data = str(shards[0]) if count == 1 else f"a data shard {prefix}.data-*"
    for key in keys:
        try:
            reader.get_tensor(key)
        except Exception as e:  # noqa: BLE001 - a tensor that does not read back
            return f"{data} is damaged ({_short(e)})"
    return None


def _free_name(path: Path) -> Path:
    candidate, number = path, 0
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}.{number}")
    return candidate


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(os.path.abspath(a)) == os.path.normpath(os.path.abspath(b))


def forget_checkpoint(
    checkpoint_dir: str | os.PathLike[str], prefix: str | os.PathLike[str]
) -> None:
    """Removes `prefix` from the folder's ``checkpoint`` state file (atomically).

    The files are not touched. When no checkpoint is left, the state file
    is removed (it would list nothing).
    """
    from google.protobuf import text_format

    directory = Path(checkpoint_dir)
    state = _checkpoint_state(directory)
    if state is None:
        return
    paths = list(state.all_model_checkpoint_paths)
    stamps = list(state.all_model_checkpoint_timestamps)
    if len(stamps) != len(paths):
        stamps = []
    keep = [i for i, p in enumerate(paths) if not _same_path(p, str(prefix))]
    if len(keep) == len(paths) and not _same_path(
        state.model_checkpoint_path, str(prefix)
    ):
        return
    if not keep:
        (directory / CHECKPOINT_STATE).unlink(missing_ok=True)
        fsync_directory(directory)
        return

    def relative(path: str) -> str:
        inside = os.path.dirname(os.path.abspath(path)) == os.path.abspath(directory)
        return os.path.basename(path) if inside else path

    del state.all_model_checkpoint_paths[:]
    state.all_model_checkpoint_paths.extend(relative(paths[i]) for i in keep)
    del state.all_model_checkpoint_timestamps[:]
    if stamps:
        state.all_model_checkpoint_timestamps.extend(stamps[i] for i in keep)
    state.model_checkpoint_path = relative(paths[keep[-1]])
    write_atomically(directory / CHECKPOINT_STATE, text_format.MessageToString(state))


def _checkpoint_state(directory: Path) -> Any:
    """TensorFlow's ``checkpoint`` state of a folder; None when missing or garbled."""
    try:
        return tf.train.get_checkpoint_state(str(directory))
    except (ValueError, tf.errors.OpError):
        return None


#: The key of ``checkpoints.json`` that lists the checkpoints read back whole
#: when they were written (or found intact on disk by a resuming `train`).
RECORDED_CHECKPOINTS = "checkpoints"


def recorded_checkpoints(checkpoint_dir: str | os.PathLike[str]) -> list[str]:
    """The names of the recorded checkpoints of a folder (``ckpt-<step>``), by step.

    A checkpoint is recorded in ``checkpoints.json`` once its files were read
    back whole (`save_checkpoint`), and before anything may delete it. A run
    written before the record existed has its TensorFlow ``checkpoint`` state
    file's list instead (empty when that file is missing or garbled).
    """
    directory = Path(checkpoint_dir)
    names = _read_metadata(directory).get(RECORDED_CHECKPOINTS)
    if not isinstance(names, list):
        state = _checkpoint_state(directory)
        names = [] if state is None else list(state.all_model_checkpoint_paths)
    found = {Path(str(n)).name for n in names}
    return sorted(
        (n for n in found if re.fullmatch(r"ckpt-\d+", n)), key=checkpoint_step
    )


def _write_records(directory: Path, names: list[str]) -> None:
    """Writes the list of recorded checkpoints into ``checkpoints.json`` (atomically).

    The rest of the file is kept as it is.
    """
    metadata = _read_metadata(directory)
    metadata[RECORDED_CHECKPOINTS] = sorted(set(names), key=checkpoint_step)
    write_atomically(
        directory / CHECKPOINT_METADATA, json.dumps(metadata, indent=2) + "\n"
    )


def record_checkpoint(prefix: str | os.PathLike[str]) -> None:
    """Records the checkpoint `prefix` (read back whole) in ``checkpoints.json``."""
    prefix = Path(prefix)
    names = recorded_checkpoints(prefix.parent)
    if prefix.name not in names:
        _write_records(prefix.parent, [*names, prefix.name])


def _unrecord(directory: Path, names: list[str]) -> None:
    """Removes `names` from the recorded checkpoints (their files are not touched)."""
    recorded = recorded_checkpoints(directory)
    if set(names) & set(recorded):
        _write_records(directory, [n for n in recorded if n not in names])


def write_checkpoint_state(
    checkpoint_dir: str | os.PathLike[str], prefixes: list[str]
) -> None:
    """Writes TensorFlow's ``checkpoint`` state file to list `prefixes` (atomically).

    `prefixes` are checkpoints of the folder, oldest first; the newest is the
    latest. The state only tells a `CheckpointManager` which checkpoints it
    keeps (and removes beyond ``max_to_keep``); the package lists them with
    `checkpoint_paths`. The file is removed when `prefixes` is empty.
    """
    directory = Path(checkpoint_dir)
    state = directory / CHECKPOINT_STATE
    if not prefixes:
        if state.exists():
            state.unlink()
            fsync_directory(directory)
        return
    names = [Path(p).name for p in prefixes]
    stamps = []
    for prefix in prefixes:
        files = checkpoint_files(prefix)
        stamps.append(files[0].stat().st_mtime if files else 0.0)
    lines = [f"model_checkpoint_path: {json.dumps(names[-1])}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(n)}" for n in names]
    lines += [f"all_model_checkpoint_timestamps: {t!r}" for t in stamps]
    # Every listed checkpoint is newer than the last preserved one, so the
    # manager keeps track of (and eventually removes) each of them.
    lines.append(f"last_preserved_timestamp: {min(stamps) - 1.0!r}")
    write_atomically(state, "\n".join(lines) + "\n")


def quarantine_checkpoint(prefix: str | os.PathLike[str]) -> list[Path]:
    """Moves a damaged checkpoint's files aside and forgets it; deletes nothing.

    ``ckpt-6.index`` becomes ``ckpt-6.index.corrupt`` (``.corrupt.1``, ...
    when that exists), and so does every data shard; the checkpoint leaves
    the ``checkpoint`` state file and the record of ``checkpoints.json``, so
    the newest intact one is the latest. Only a writer that holds the run's
    lock (`train`) calls this; readers leave damaged files in place.

    Returns:
        The new paths of the moved files.
    """
    prefix = Path(prefix)
    moved = []
    for path in checkpoint_files(prefix):
        target = _free_name(path.with_name(path.name + DAMAGED_SUFFIX))
        try:
            os.replace(path, target)
        except OSError as e:
            raise CheckpointDamagedError(
                f"{path} is damaged and cannot be moved aside ({e.strerror or e}): "
                f"move or rename it by hand (e.g. to {target.name}), then retry."
            ) from e
        moved.append(target)
    forget_checkpoint(prefix.parent, prefix)
    _unrecord(prefix.parent, [prefix.name])
    return moved


def damaged_files(checkpoint_dir: str | os.PathLike[str]) -> list[Path]:
    """The files of damaged checkpoints moved aside earlier (``*.corrupt``)."""
    directory = Path(checkpoint_dir)
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if DAMAGED_SUFFIX in p.name and p.is_file()
    )


def restore_newest_checkpoint(
    checkpoint_dir: str | os.PathLike[str],
    restore: Callable[[str], Any],
    expected: RunFingerprint | None = None,
    move_damaged: bool = False,
) -> str | None:
    """Restores the newest intact checkpoint of a folder with ``restore(prefix)``.

    The one place where every reader of a run's checkpoints (training's
    resume, `RunFolder.restore`, hence translate, evaluate and export) goes.
    The checkpoints are those of `checkpoint_paths` (the files on disk and
    ``checkpoints.json``, never TensorFlow's state file). A checkpoint whose
    files are damaged (truncated, empty, missing shard, unreadable) is
    skipped with a warning naming the file and what is wrong, and the next
    older one is tried. With `move_damaged` (a writer holding the run's
    lock: `train`) its files are moved aside with `quarantine_checkpoint`,
    never deleted; a reader leaves them in place. Every tensor is read back
    first, so an error of `restore` on an intact checkpoint (a model of
    another configuration) is raised as it is and never taken for damage.
    An intact checkpoint whose fingerprint is not `expected` (another
    run's) is refused, never restored.

    Returns:
        The prefix restored, or None when the folder lists no checkpoint.

    Raises:
        CheckpointDamagedError: when checkpoints existed but all are damaged.
        ForeignCheckpointError: when the newest intact one is another run's.
    """
    directory = Path(checkpoint_dir)
    problems: list[str] = []
    for prefix in reversed(checkpoint_paths(directory)):
        # Every tensor is read back (with its checksum) before the restore:
        # a model restore reads only some of them, and an error it raises
        # must mean a model of another configuration, not a damaged file.
        problem = checkpoint_problem(prefix)
        if problem is None:
            check_fingerprint(prefix, checkpoint_fingerprint(prefix), expected)
            restore(prefix)
            if problems:
                logger.warning(
                    "Restored %s, the newest intact checkpoint of %s.",
                    Path(prefix).name,
                    directory,
                )
            return prefix
        problems.append(problem)
        if move_damaged:
            moved = quarantine_checkpoint(prefix)
            logger.warning(
                "Checkpoint %s is damaged: %s. Its files were moved aside (%s), "
                "not deleted; falling back to the previous checkpoint.",
                Path(prefix).name,
                problem,
                ", ".join(p.name for p in moved) or "no file left",
            )
        else:
            logger.warning(
                "Checkpoint %s is damaged: %s. Its files were left in place (the "
                "next `keras-transformer train` of the run moves them aside); "
                "falling back to the previous checkpoint.",
                Path(prefix).name,
                problem,
            )
    if problems and move_damaged:
        raise CheckpointDamagedError(
            f"Every checkpoint in {directory} is damaged ({'; '.join(problems)}); "
            f"their files were moved aside as *{DAMAGED_SUFFIX}, nothing was "
            "deleted. Restore the checkpoints from a backup, or move the "
            f"*{DAMAGED_SUFFIX} files out of {directory} (or pass --force) to "
            "start again from step 0."
        )
    if problems:
        raise CheckpointDamagedError(
            f"Every checkpoint in {directory} is damaged ({'; '.join(problems)}); "
            "nothing was moved or deleted. Restore the checkpoints from a "
            "backup, or pass --weights best/average/<file>."
        )
    return None


def record_checkpoints_on_disk(
    checkpoint_dir: str | os.PathLike[str],
    expected: RunFingerprint | None = None,
    verified: tuple[str, ...] = (),
) -> list[str]:
    """Makes ``checkpoints.json`` and the state file list the checkpoints on disk.

    For a writer that holds the run's lock (a resuming `train`), after it
    restored the newest intact checkpoint. Each listed checkpoint that is
    not recorded yet (its writer was killed while reading it back, or a
    release before the record wrote it) is read back whole: an intact one
    of this run is recorded, a damaged one moved aside with a warning (never
    deleted). Recorded checkpoints whose files are gone leave the record.
    Then TensorFlow's ``checkpoint`` state file is written anew from the
    list (`write_checkpoint_state`), so a deleted, garbled or stale one
    changes nothing and the manager removes the oldest beyond its
    ``max_to_keep`` as usual.

    Args:
        checkpoint_dir: the run's checkpoint folder.
        expected: the run's fingerprint; a checkpoint of another run is
            refused (`check_fingerprint`).
        verified: prefixes already read back whole (the one restored).

    Returns:
        The checkpoints, oldest first.

    Raises:
        ForeignCheckpointError: when an unrecorded checkpoint is another run's.
    """
    directory = Path(checkpoint_dir)
    recorded = recorded_checkpoints(directory)
    done = {Path(p).name for p in verified}
    kept = []
    for prefix in checkpoint_paths(directory):
        name = Path(prefix).name
        if name not in recorded and name not in done:
            problem = checkpoint_problem(prefix)
            if problem is not None:
                moved = quarantine_checkpoint(prefix)
                logger.warning(
                    "Checkpoint %s (never recorded: its write was interrupted) is "
                    "damaged: %s. Its files were moved aside (%s), not deleted.",
                    name,
                    problem,
                    ", ".join(p.name for p in moved) or "no file left",
                )
                continue
            check_fingerprint(prefix, checkpoint_fingerprint(prefix), expected)
        kept.append(prefix)
    names = [Path(p).name for p in kept]
    if names != recorded or RECORDED_CHECKPOINTS not in _read_metadata(directory):
        _write_records(directory, names)
    write_checkpoint_state(directory, kept)
    return kept


class CheckpointManager(tf.train.CheckpointManager):
    """`tf.train.CheckpointManager` whose state never names a deleted checkpoint.

    TensorFlow's manager deletes the files of the checkpoints beyond
    `max_to_keep` and then rewrites its ``checkpoint`` state file, so a
    process killed in between leaves a state that lists missing files.
    This one writes the state without them first, then deletes their files.
    Everything else (`max_to_keep`, `keep_checkpoint_every_n_hours`,
    `latest_checkpoint`, the layout) is TensorFlow's.

    Args:
        checkpoint: the `tf.train.Checkpoint` to save.
        directory: the checkpoint folder.
        max_to_keep: how many checkpoints to keep.
        on_new_folder: called when the folder has to be created again (it
            was deleted during the run), to write its metadata anew.
        **kwargs: the rest of `tf.train.CheckpointManager`'s arguments.
    """

    def __init__(
        self,
        checkpoint: tf.train.Checkpoint,
        directory: str,
        max_to_keep: int | None,
        on_new_folder: Callable[[], Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(checkpoint, directory, max_to_keep, **kwargs)
        self.on_new_folder = on_new_folder

    def forget_missing(self) -> list[str]:
        """Drops the checkpoints whose files are gone; returns their names."""
        kept = getattr(self, "_maybe_delete", None)
        if kept is None:
            return []
        gone = [p for p in kept if not Path(f"{p}.index").exists()]
        for prefix in gone:
            del kept[prefix]
        if self._latest_checkpoint in gone:
            self._latest_checkpoint = next(reversed(kept), None) if kept else None
        return [Path(p).name for p in gone]

    def _sweep(self) -> None:
        if not hasattr(self, "_maybe_delete") or not self._max_to_keep:
            return super()._sweep()
        doomed = []
        while len(self._maybe_delete) > self._max_to_keep:
            filename, timestamp = self._maybe_delete.popitem(last=False)
            hours = self._keep_checkpoint_every_n_hours
            if hours and timestamp - hours * 3600.0 >= self._last_preserved_timestamp:
                self._last_preserved_timestamp = timestamp
                continue
            doomed.append(filename)
        if doomed:
            self._record_state()
            directory = Path(self.directory)
            try:
                # A checkpoint leaves checkpoints.json before its files go.
                _unrecord(directory, [Path(f).name for f in doomed])
            except OSError as e:
                logger.warning(
                    "Kept the old checkpoints %s: %s could not be updated (%s).",
                    ", ".join(Path(f).name for f in doomed),
                    directory / CHECKPOINT_METADATA,
                    _short(e),
                )
                return None
            for filename in doomed:
                for path in checkpoint_files(filename):
                    path.unlink(missing_ok=True)
        return None


def _remove_unrecorded(prefix: str) -> None:
    """Removes the files of an interrupted or failed write of `prefix`.

    Only when `prefix` is not a recorded checkpoint (`recorded_checkpoints`):
    these files were never read back whole. (A resuming `train` has
    recorded every intact checkpoint it found on disk, so none of those is
    removed here.)
    """
    if Path(prefix).name in recorded_checkpoints(os.path.dirname(prefix)):
        return
    for path in checkpoint_files(prefix):
        path.unlink(missing_ok=True)
    shutil.rmtree(f"{prefix}_temp", ignore_errors=True)


def _sync(prefix: str) -> None:
    for path in checkpoint_files(prefix):
        with open(path, "rb") as file:
            os.fsync(file.fileno())
    fsync_directory(Path(prefix).parent)


def _check_folder(manager: tf.train.CheckpointManager) -> None:
    """Notices a checkpoint folder (or checkpoints) deleted during the run.

    The folder is made again with its metadata (so the tokenizer and
    fingerprint checks stay on), the vanished checkpoints leave the state,
    and a warning says what happened; the model in memory is intact, so the
    next checkpoint loses nothing of the current run.
    """
    directory = Path(manager.directory)
    lost_folder = not directory.is_dir()
    # A folder that never held a checkpoint of this run (its first save) is
    # made without a warning: nothing was lost.
    had_checkpoints = bool(manager.checkpoints)
    gone = manager.forget_missing() if isinstance(manager, CheckpointManager) else []
    if not lost_folder and not gone:
        return
    directory.mkdir(parents=True, exist_ok=True)
    rewrite = getattr(manager, "on_new_folder", None)
    if rewrite is not None and (
        lost_folder or not (directory / CHECKPOINT_METADATA).is_file()
    ):
        rewrite()
    if not (had_checkpoints or gone):
        return
    logger.warning(
        "%s: %s during the run; the next checkpoint is written from the "
        "weights in memory, so the run loses nothing%s.",
        directory,
        "the folder was deleted" if lost_folder else "checkpoints were deleted",
        f" (gone: {', '.join(gone)})" if gone else "",
    )


def save_checkpoint(manager: tf.train.CheckpointManager, number: int) -> str:
    """Writes checkpoint ``ckpt-<number>`` so that it is complete or not seen.

    The files are written, flushed to disk and read back (every tensor and
    its checksum), then the checkpoint is recorded in ``checkpoints.json``
    (`record_checkpoint`), then the manager records it in its state file
    (which TensorFlow replaces atomically); the manager's `max_to_keep` then
    removes the oldest, each taken out of ``checkpoints.json`` before its
    files are deleted. A process killed at any point leaves every complete
    checkpoint on disk, where `checkpoint_paths` finds it, recorded or not.
    A write that fails (a full disk, an I/O error,
    a file that does not read back) records nothing: its partial files are
    removed, and the previous checkpoint stays intact and the latest.

    Returns:
        The prefix of the new checkpoint.

    Raises:
        CheckpointWriteError: naming what failed and what to do.
    """
    _check_folder(manager)
    previous = manager.latest_checkpoint
    prefix = os.path.join(manager.directory, f"ckpt-{number}")
    _remove_unrecorded(prefix)

    def verify(path: str) -> None:
        _sync(path)
        problem = checkpoint_problem(path)
        if problem is not None:
            raise CheckpointWriteError(
                f"the new checkpoint does not read back: {problem}"
            )
        # Recorded before TensorFlow's state and its removal of old ones.
        record_checkpoint(path)

    options = tf.train.CheckpointOptions(experimental_write_callbacks=[verify])
    try:
        return manager.save(checkpoint_number=number, options=options)
    except (OSError, tf.errors.OpError) as e:
        # The error of the write is the one to report.
        with contextlib.suppress(OSError):
            _remove_unrecorded(prefix)
        full = getattr(e, "errno", None) == errno.ENOSPC or (
            "no space left" in str(e).lower()
        )
        what = (
            f"no space left on the device of {manager.directory}"
            if full
            else (e.strerror if isinstance(e, OSError) and e.strerror else _short(e))
        )
        advice = (
            "Free disk space (or lower train.keep_checkpoints)"
            if full
            else "Check the disk and the folder's permissions"
        )
        keep = (
            f"{Path(previous).name} is intact and still the latest"
            if previous
            else "no earlier checkpoint exists"
        )
        error = CheckpointWriteError(
            f"Could not write checkpoint {prefix}: {what}. {keep}; nothing of the "
            f"failed write was kept. {advice}, then run the same command again to "
            "resume."
        )
        error.errno = errno.ENOSPC if full else getattr(e, "errno", None)
        raise error from e


@contextlib.contextmanager
def _quiet_tensorflow_warnings() -> Any:
    """Silences TensorFlow's Python warnings (unrestored values) for a while."""
    tf_logger = tf.get_logger()
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        tf_logger.setLevel(level)


def restore_or_explain(restore: Callable[[], Any], path: str, config: str) -> None:
    """Runs `restore`; a shape or name mismatch becomes one clear error.

    TensorFlow reports a checkpoint that does not fit the model with its own
    message and, when the half-restored checkpoint is collected, a hundred
    warning lines; this names the checkpoint and the config instead.

    Raises:
        CheckpointMismatchError: naming `path` and `config`.
    """
    import gc

    failure = None
    with _quiet_tensorflow_warnings():
        try:
            restore()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            failure = _short(e)
        gc.collect()  # the warnings come when the failed restore is collected
    if failure is not None:
        raise CheckpointMismatchError(
            f"{path} does not match the model built from {config}: {failure} "
            f"Either {config} was changed after the checkpoint was written "
            "(restore the run's own settings), or the checkpoint comes from a "
            "run with other model sizes."
        )


def _restore_weights(
    model: keras.Model, path: str, config: str = "the run's config"
) -> None:
    restore_or_explain(
        lambda: tf.train.Checkpoint(model=model).restore(path).expect_partial(),
        path,
        config,
    )


def restore_checkpoint(
    model: keras.Model,
    path: str,
    expected: RunFingerprint | None = None,
    config: str = "the run's config",
) -> None:
    """Loads the model weights of a tf.train checkpoint (not the optimizer's).

    Args:
        model: the model to load into.
        path: the checkpoint: its prefix (``.../ckpt-<step>``) or one of its
            files (``.../ckpt-<step>.index``, ``.data-*``), see
            `checkpoint_prefix`.
        expected: the run's fingerprint; a checkpoint of another run, or
            one without a fingerprint, is refused (`check_fingerprint`;
            None: not checked).
        config: what the model was built from, for the mismatch message.

    Raises:
        CheckpointDamagedError: when the checkpoint's files are damaged.
        ForeignCheckpointError: when it belongs to another run.
        CheckpointMismatchError: when it does not fit the model.
    """
    path = checkpoint_prefix(path)
    if expected is not None:
        # Nothing is restored before its fingerprint was read and checked.
        problem = checkpoint_problem(path, read_tensors=False)
        if problem is not None:
            raise CheckpointDamagedError(
                f"Cannot restore {path}: {problem}. Pick another checkpoint "
                "(--weights), or restore the file from a backup."
            )
        check_fingerprint(path, checkpoint_fingerprint(path), expected)
    try:
        _restore_weights(model, path, config)
    except Exception as e:
        problem = checkpoint_problem(path)
        if problem is None:
            raise
        raise CheckpointDamagedError(
            f"Cannot restore {path}: {problem}. Pick another checkpoint "
            "(--weights), or restore the file from a backup."
        ) from e


# ------------------------------------------------------------- fingerprints
class ForeignCheckpointError(ValueError):
    """A checkpoint (or weights file) belongs to another run.

    Copied in from another work directory, or written before the run's
    tokenizer was replaced: its fingerprint (run id, tokenizer) differs
    from the run's own. The message says whose it is.
    """


class CheckpointMismatchError(ValueError):
    """An intact checkpoint does not fit the model built from ``config.json``."""


#: Where a checkpoint keeps its fingerprint (a string variable saved with it).
FINGERPRINT_KEY = "fingerprint/.ATTRIBUTES/VARIABLE_VALUE"


@dataclasses.dataclass(frozen=True)
class RunFingerprint:
    """What a checkpoint belongs to: its run, tokenizer and model config.

    Written into every checkpoint (`FINGERPRINT_KEY`) and into every
    weights file (`WEIGHTS_FINGERPRINT_ATTRIBUTE`; also beside it, in
    ``best.json`` and ``averaged.json``, for people), and checked by every
    reader (`check_fingerprint`): a checkpoint of another run with the same
    sizes would otherwise load without a word and translate nonsense.

    Attributes:
        run_id: random, made when the run's first checkpoint metadata is
            written; kept for the life of the run folder.
        tokenizer: the tokenizer's fingerprint (`SubwordTokenizer.fingerprint`).
        config: a hash of the model section of the config (informative: a
            run continued with ``--force`` keeps its run id).
        workdir: the folder the run was created in (for messages only).
    """

    run_id: str
    tokenizer: str
    config: str = ""
    workdir: str = ""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> RunFingerprint | None:
        """The fingerprint in `values`, or None when it has none (older files)."""
        if not isinstance(values, Mapping) or not values.get("run_id"):
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: str(v) for k, v in values.items() if k in fields})

    def same_run(self, other: RunFingerprint) -> bool:
        return self.run_id == other.run_id and self.tokenizer == other.tokenizer

    def describe(self) -> str:
        where = f" in {self.workdir}" if self.workdir else ""
        return f"run {self.run_id}{where} (tokenizer {self.tokenizer[:12]})"


def config_hash(model_config: Any) -> str:
    """A short hash of a model config (its JSON, or its repr)."""
    import hashlib

    text = (
        model_config.to_json()
        if hasattr(model_config, "to_json")
        else json.dumps(model_config, sort_keys=True, default=repr)
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


#: The ``checkpoints.json`` files already warned of as unreadable (once each).
_UNREADABLE_METADATA: set[str] = set()


def _read_metadata(checkpoint_dir: Path) -> dict[str, Any]:
    """The content of ``checkpoints.json``; ``{}`` when missing or unreadable.

    An unreadable (garbled, truncated) file is one warning naming it, once
    per process: every command goes on with the checkpoint files on disk
    (`checkpoint_paths`, and the fingerprint they carry), and the next
    `train` of the run writes the file again.
    """
    path = checkpoint_dir / CHECKPOINT_METADATA
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        problem = f"cannot be read ({getattr(e, 'strerror', None) or _short(e)})"
    else:
        try:
            metadata = json.loads(text)
        except ValueError as e:
            metadata, problem = None, f"is not valid JSON ({_short(e)})"
        else:
            problem = None if isinstance(metadata, dict) else "is not a JSON object"
        if problem is None:
            return metadata
    if str(path) not in _UNREADABLE_METADATA:
        _UNREADABLE_METADATA.add(str(path))
        logger.warning(
            "%s %s: going on with the checkpoint files in %s (and the fingerprint "
            "they carry); the next `keras-transformer train` of this run writes "
            "it again.",
            path,
            problem,
            checkpoint_dir,
        )
    return {}


def write_checkpoint_metadata(
    checkpoint_dir: str | os.PathLike[str],
    tokenizer: SubwordTokenizer | None,
    model_config: Any = None,
    run_id: str | None = None,
) -> RunFingerprint:
    """Records the run's fingerprint for its checkpoints (``checkpoints.json``).

    The run id is `run_id` when given, else kept from an earlier
    ``checkpoints.json`` with the same tokenizer (or, when that file was
    deleted or garbled, from the fingerprint the run's checkpoints carry,
    `run_fingerprint`), else made anew. Written atomically. A run without a
    tokenizer (an image run) records an empty tokenizer fingerprint and no
    vocabulary size.

    Returns:
        The run's `RunFingerprint`, which every new checkpoint carries.

    Raises:
        ForeignCheckpointError: when ``checkpoints.json`` is lost and the
            folder's checkpoints belong to more than one run.
    """
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stored = _read_metadata(directory)
    records = stored.get(RECORDED_CHECKPOINTS)  # kept: see `record_checkpoint`
    if not stored.get("run_id"):
        recovered = _fingerprint_of_checkpoints(directory)
        if recovered is not None:
            stored = {
                "run_id": recovered.run_id,
                "tokenizer_fingerprint": recovered.tokenizer,
                "config_hash": recovered.config,
            }
    tokens = "" if tokenizer is None else tokenizer.fingerprint
    same_tokenizer = stored.get("tokenizer_fingerprint") == tokens
    run_id = run_id or (stored.get("run_id") if same_tokenizer else None)
    fingerprint = RunFingerprint(
        run_id=str(run_id or uuid.uuid4().hex[:16]),
        tokenizer=tokens,
        config=(
            config_hash(model_config)
            if model_config is not None
            else str(stored.get("config_hash", ""))
        ),
        workdir=str(directory.parent.resolve()),
    )
    metadata = {
        "vocabulary_size": None if tokenizer is None else tokenizer.vocabulary_size,
        "tokenizer_fingerprint": tokens,
        "run_id": fingerprint.run_id,
        "config_hash": fingerprint.config,
        "workdir": fingerprint.workdir,
    }
    if isinstance(records, list):
        metadata[RECORDED_CHECKPOINTS] = records
    write_atomically(
        directory / CHECKPOINT_METADATA, json.dumps(metadata, indent=2) + "\n"
    )
    return fingerprint


def run_fingerprint(checkpoint_dir: str | os.PathLike[str]) -> RunFingerprint | None:
    """The run's fingerprint: the one in its ``checkpoints.json``.

    When that file is deleted or garbled, the fingerprint that the run's
    own checkpoints carry (every checkpoint holds it), so that losing the
    file never turns the checks off. None for a run written before
    fingerprints (nothing records one).

    Raises:
        ForeignCheckpointError: when ``checkpoints.json`` is lost and the
            folder's checkpoints belong to more than one run (which is the
            run's own cannot be told).
    """
    metadata = _read_metadata(Path(checkpoint_dir))
    recorded = RunFingerprint.from_mapping(
        {
            "run_id": metadata.get("run_id", ""),
            "tokenizer": metadata.get("tokenizer_fingerprint", ""),
            "config": metadata.get("config_hash", ""),
            "workdir": metadata.get("workdir", ""),
        }
    )
    if recorded is not None:
        return recorded
    return _fingerprint_of_checkpoints(Path(checkpoint_dir))


def _checkpoint_prefixes_on_disk(directory: Path) -> list[str]:
    """Every ``ckpt-<step>`` with an ``.index`` file in `directory`, by step."""
    found = []
    for index in directory.glob("ckpt-*.index"):
        step = index.name[len("ckpt-") : -len(".index")]
        if step.isdigit():
            found.append((int(step), str(index)[: -len(".index")]))
    return [prefix for _, prefix in sorted(found)]


def _fingerprint_of_checkpoints(directory: Path) -> RunFingerprint | None:
    """The one fingerprint the checkpoints in `directory` carry (None: none).

    Raises:
        ForeignCheckpointError: when they carry those of several runs.
    """
    runs: dict[tuple[str, str], list[str]] = {}
    fingerprints: dict[tuple[str, str], RunFingerprint] = {}
    for prefix in _checkpoint_prefixes_on_disk(directory):
        found = checkpoint_fingerprint(prefix)
        if found is not None:
            key = (found.run_id, found.tokenizer)
            fingerprints.setdefault(key, found)
            runs.setdefault(key, []).append(Path(prefix).name)
    if len(fingerprints) > 1:
        owners = "; ".join(
            f"{', '.join(names)} to {fingerprints[key].describe()}"
            for key, names in runs.items()
        )
        raise ForeignCheckpointError(
            f"{directory / CHECKPOINT_METADATA} is missing or unreadable, and the "
            f"checkpoints in {directory} belong to {len(fingerprints)} runs "
            f"({owners}), so which are this run's cannot be told. Move the other "
            f"runs' checkpoints out of {directory}, then run the command again."
        )
    return next(iter(fingerprints.values()), None)


def checkpoint_fingerprint(prefix: str | os.PathLike[str]) -> RunFingerprint | None:
    """The fingerprint saved in a checkpoint (None for one written before them)."""
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        if not reader.has_tensor(FINGERPRINT_KEY):
            return None
        value = reader.get_tensor(FINGERPRINT_KEY)
    except (tf.errors.OpError, ValueError):
        return None
    text = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    try:
        return RunFingerprint.from_mapping(json.loads(text))
    except ValueError:
        return None


#: Set by `accepting_weights_without_fingerprint` (the command line's
#: ``--weights-without-fingerprint``).
_ACCEPT_WITHOUT_FINGERPRINT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "accept_weights_without_fingerprint", default=False
)


@contextlib.contextmanager
def accepting_weights_without_fingerprint() -> Iterator[None]:
    """Within it, weights that carry no run fingerprint load into a run.

    The command line's ``--weights-without-fingerprint``. Every checkpoint
    and weights file this package writes carries its run's fingerprint, so
    weights without one come from elsewhere (another program, a release
    before fingerprints): nothing shows they belong to the run, and they are
    refused unless the user says so. Weights of another run (a different
    fingerprint) are refused even here.

    Example:
    >>> with accepting_weights_without_fingerprint():  # doctest: +SKIP
    ...     model, _ = RunFolder("runs/dates").load("elsewhere/x.weights.h5")
    """
    token = _ACCEPT_WITHOUT_FINGERPRINT.set(True)
    try:
        yield
    finally:
        _ACCEPT_WITHOUT_FINGERPRINT.reset(token)


def _predates_fingerprints(prefix: Path, expected: RunFingerprint) -> bool:
    """Whether `prefix` is a checkpoint of the run that `expected` is, written
    before the run had a fingerprint (a run of an earlier release, resumed).

    It must lie in the run's own checkpoint folder (its ``checkpoints.json``
    names the run) and be older than every checkpoint there that carries a
    fingerprint: one copied in later would be newer than them.
    """
    folder = prefix.parent
    if not prefix.name.startswith("ckpt-") or not prefix.name[5:].isdigit():
        return False
    recorded = _read_metadata(folder).get("run_id")
    if recorded != expected.run_id:
        return False
    step = checkpoint_step(str(prefix))
    return all(
        checkpoint_step(other) > step
        for other in _checkpoint_prefixes_on_disk(folder)
        if checkpoint_fingerprint(other) is not None
    )


def _inside(path: Path, folder: str) -> bool:
    return bool(folder) and os.path.abspath(path).startswith(
        os.path.join(os.path.abspath(folder), "")
    )


def check_fingerprint(
    what: str | os.PathLike[str],
    found: RunFingerprint | None,
    expected: RunFingerprint | None,
) -> None:
    """Refuses weights that are not the run's own.

    Weights of another run (another fingerprint) are refused. So are
    weights without a fingerprint, since every checkpoint and weights file
    of a run carries it, unless the user accepts them
    (`accepting_weights_without_fingerprint`, the command line's
    ``--weights-without-fingerprint``) or they are checkpoints the run wrote
    before it had a fingerprint (an earlier release's run, resumed). A run
    without a fingerprint (written before them) has nothing to compare.

    Raises:
        ForeignCheckpointError: saying whose the weights are, and what to do.
    """
    if expected is None or (found is not None and found.same_run(expected)):
        return
    what = Path(what)
    if found is None:
        if _ACCEPT_WITHOUT_FINGERPRINT.get() or _predates_fingerprints(what, expected):
            return
        raise ForeignCheckpointError(
            f"{what} carries no run fingerprint, so nothing shows that it belongs "
            f"to this run ({expected.describe()}): every checkpoint and weights "
            "file a run writes carries one. If you know these weights fit this "
            "run, pass --weights-without-fingerprint (in Python: with "
            "keras_transformer.runs.accepting_weights_without_fingerprint())."
        )
    if _inside(what, expected.workdir):
        advice = (
            f"It was copied in from another work directory; move it out of "
            f"{what.parent} (or pass it to the run it came from)."
        )
    else:
        origin = f" ({found.workdir})" if found.workdir else ""
        advice = f"Pass it with the --workdir of the run it came from{origin}."
    raise ForeignCheckpointError(
        f"{what} belongs to another run: it was written by {found.describe()}, "
        f"but this folder is {expected.describe()}. {advice}"
    )


def fingerprint_variable(fingerprint: RunFingerprint) -> tf.Variable:
    """The string variable that carries `fingerprint` inside each checkpoint."""
    return tf.Variable(
        fingerprint.to_json(), trainable=False, dtype=tf.string, name="fingerprint"
    )


def check_tokenizer(
    checkpoint_dir: str | os.PathLike[str], tokenizer: SubwordTokenizer
) -> None:
    """Refuses a tokenizer that is not the one the checkpoints were trained with.

    Raises:
        ValueError: naming the vocabulary size or fingerprint that differs.
    """
    path = Path(checkpoint_dir) / CHECKPOINT_METADATA
    if not path.is_file() or not checkpoint_paths(checkpoint_dir):
        return
    metadata = _read_metadata(Path(checkpoint_dir))
    if "vocabulary_size" not in metadata:
        return  # an unreadable file (warned of): nothing records the tokenizer
    try:
        tokenizer.check_compatible(
            expected_vocabulary_size=int(metadata["vocabulary_size"]),
            expected_fingerprint=metadata.get("tokenizer_fingerprint"),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"{e} (checkpoints in {path.parent}). Restore the tokenizer/ folder "
            "of this run, or start a new run in another work directory."
        ) from e


def weights_info_file(weights_file: str | os.PathLike[str]) -> Path:
    """``best.json`` beside ``best.weights.h5`` (the settings of a weights file)."""
    path = Path(weights_file)
    return path.with_name(path.name.replace(".weights.h5", ".json"))


#: The HDF5 attributes (of the root group) of a ``.weights.h5`` file that
#: `save_weights` writes: the run's fingerprint (`RunFingerprint.to_json`),
#: the SHA-256 of the file's datasets (`_file_digest`), that of the model's
#: weights (`_weights_digest`) and that of their dtypes and shapes alone
#: (`_layout_digest`, the model the file fits).
WEIGHTS_FINGERPRINT_ATTRIBUTE = "keras_transformer.fingerprint"
FILE_CHECKSUM_ATTRIBUTE = "keras_transformer.file_sha256"
WEIGHTS_CHECKSUM_ATTRIBUTE = "keras_transformer.weights_sha256"
WEIGHTS_LAYOUT_ATTRIBUTE = "keras_transformer.weights_layout_sha256"


def _digest_of(arrays: Any) -> str:
    """The SHA-256 of `(name, array)` pairs: names, dtypes, shapes and bytes."""
    import hashlib

    digest = hashlib.sha256()
    for name, array in arrays:
        value = np.ascontiguousarray(array)
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _weights_digest(model: keras.Model) -> str:
    """The SHA-256 of a model's weights, in order: what loading the file gives."""
    return _digest_of(
        (i, keras.ops.convert_to_numpy(w)) for i, w in enumerate(model.weights)
    )


def _layout_digest(model: keras.Model) -> str:
    """The SHA-256 of the dtypes and shapes of a model's weights, in order."""
    import hashlib

    text = ";".join(
        f"{keras.backend.standardize_dtype(w.dtype)}{tuple(w.shape)}"
        for w in model.weights
    )
    return hashlib.sha256(text.encode()).hexdigest()


def _file_digest(file: Any) -> str:
    """The SHA-256 of an open HDF5 file's contents: every dataset, by name, and
    the attributes of its root (but `FILE_CHECKSUM_ATTRIBUTE` itself)."""
    import h5py

    names: list[str] = []
    file.visititems(
        lambda name, item: (
            names.append(name) if isinstance(item, h5py.Dataset) else None
        )
    )
    attributes = sorted(k for k in file.attrs if k != FILE_CHECKSUM_ATTRIBUTE)
    return _digest_of(
        [(name, file[name][()]) for name in sorted(names)]
        + [(f"@{key}", np.asarray(file.attrs[key])) for key in attributes]
    )


def _weights_attribute(path: Path, name: str) -> str | None:
    import h5py

    with h5py.File(path, "r") as file:
        value = file.attrs.get(name)
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def weights_file_problem(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with a ``.weights.h5`` file, or None when it reads whole.

    Checks that it exists, is readable and not empty, that HDF5 opens it,
    that every dataset in it reads back and, for a file `save_weights`
    wrote, that the datasets (names, shapes and numbers) are the ones it
    wrote (`FILE_CHECKSUM_ATTRIBUTE`): a flipped bit, a truncated or empty
    file is found here.

    Returns:
        ``"<file> is <what>"`` naming the file, or None.
    """
    import h5py

    path = Path(path)
    problem = _file_problem(path)
    if problem:
        return problem
    try:
        with h5py.File(path, "r") as file:
            expected = file.attrs.get(FILE_CHECKSUM_ATTRIBUTE)
            found = _file_digest(file)
    except Exception as e:  # noqa: BLE001 - h5py raises OSError, RuntimeError, ...
        return f"{path} is damaged or not an HDF5 weights file ({_short(e)})"
    if isinstance(expected, bytes):
        expected = expected.decode("utf-8", "replace")
    if expected is not None and str(expected) != found:
        return (
            f"{path} is damaged (what it holds does not match the checksum written "
            "with it)"
        )
    return None


def weights_file_fingerprint(path: str | os.PathLike[str]) -> RunFingerprint | None:
    """The fingerprint a ``.weights.h5`` file carries (None: none).

    Only the file's own attribute counts, never the ``.json`` beside it.
    """
    try:
        text = _weights_attribute(Path(path), WEIGHTS_FINGERPRINT_ATTRIBUTE)
        return None if text is None else RunFingerprint.from_mapping(json.loads(text))
    except (OSError, ValueError, RuntimeError):
        return None


def weights_nbytes(model: keras.Model) -> int:
    """The bytes of a model's weights (what a weights file mostly holds)."""
    return sum(
        math.prod(w.shape) * np.dtype(keras.backend.standardize_dtype(w.dtype)).itemsize
        for w in model.weights
    )


def save_weights(
    model: keras.Model,
    path: str | os.PathLike[str],
    info: Mapping[str, Any],
    fingerprint: RunFingerprint | None = None,
) -> Path:
    """Writes ``<name>.weights.h5`` and its ``<name>.json`` so that both are whole.

    The free space is checked first (HDF5 can crash the process on a full
    disk), then the weights go to a temporary file renamed over `path`, then
    the info file (with the run's fingerprint) is written the same way. A
    failure leaves the previous pair intact and raises one line. The weights
    file itself carries the run's fingerprint and checksums of its contents
    and of the weights (HDF5 attributes of its root:
    `WEIGHTS_FINGERPRINT_ATTRIBUTE`, `FILE_CHECKSUM_ATTRIBUTE`,
    `WEIGHTS_CHECKSUM_ATTRIBUTE`), written before it is renamed into place;
    the readers (`RunFolder.restore`) check them, whatever lies beside it.

    Raises:
        FileWriteError: naming the file, on a full disk or a failed write.
    """
    import h5py

    path = Path(path)
    check_free_space(path, int(weights_nbytes(model) * 1.05) + (256 << 10))
    with atomic_file(path) as temporary:
        try:
            model.save_weights(temporary)
            with h5py.File(temporary, "r+") as file:
                file.attrs[WEIGHTS_CHECKSUM_ATTRIBUTE] = _weights_digest(model)
                file.attrs[WEIGHTS_LAYOUT_ATTRIBUTE] = _layout_digest(model)
                if fingerprint is not None:
                    file.attrs[WEIGHTS_FINGERPRINT_ATTRIBUTE] = fingerprint.to_json()
                # Last: it covers the other attributes too.
                file.attrs[FILE_CHECKSUM_ATTRIBUTE] = _file_digest(file)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - h5py wraps the OSError
            raise OSError(getattr(e, "errno", None), _short(e)) from e
    values = dict(info)
    if fingerprint is not None:
        values["fingerprint"] = dataclasses.asdict(fingerprint)
    write_atomically(weights_info_file(path), json.dumps(values, indent=2) + "\n")
    return path


# ------------------------------------------- config.json of earlier code
#: Config keys of earlier versions and their names now. A run folder's
#: stored ``config.json`` is read with them renamed (`upgrade_stored_config`);
#: a config file or ``--set`` override that uses one is refused
#: (`training.config.refuse_renamed_keys`).
RENAMED_KEYS = {
    "model.label_smoothing": "train.label_smoothing",
    "train.decode_extra_length": "train.extra_length",
    "data.max_length": "data.max_sentence_length",
}


#: The ``train`` settings of an image run's ``config.json`` of 0.2 (the
#: layout before kinds) that moved to the ``image`` section.
_IMAGE_TRAIN_KEYS = ("batch_size", "evaluation_batch_size", "flip")
#: The ``train`` defaults of that layout, for a stored one that leaves one out.
_OLD_IMAGE_TRAIN_DEFAULTS = {
    "train_steps": 2000,
    "steps_per_epoch": 200,
    "seed": 0,
    "keep_checkpoints": 3,
    "log_every": 50,
    "jit_compile": False,
    "verbose": 1,
}


def is_image_run_layout(values: Mapping[str, Any]) -> bool:
    """Whether a raw config is in the layout of the ``config.json`` of image
    runs before kinds existed (0.2): no ``kind``, a
    ``model`` with an ``image_shape``."""
    model = values.get("model")
    return (
        "kind" not in values and isinstance(model, Mapping) and "image_shape" in model
    )


def _upgrade_image_run_dict(values: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config in the image layout of 0.2 as a ``kind="image"`` one.

    ``data.*`` and ``train.batch_size``, ``train.evaluation_batch_size``,
    ``train.flip`` move to the ``image`` section; the other ``train``
    settings stay, with that layout's defaults where missing.
    """
    unknown = sorted(set(values) - {"model", "data", "train"})
    if unknown:
        raise ValueError(
            f"Unknown image run config sections: {unknown}. Known: "
            "['data', 'model', 'train']"
        )
    train = {**_OLD_IMAGE_TRAIN_DEFAULTS, **dict(values.get("train", {}))}
    image = dict(values.get("data", {}))
    image.update({key: train.pop(key) for key in _IMAGE_TRAIN_KEYS if key in train})
    # Written before `generation_order` existed: one raster order (0.1.0).
    model = {"generation_order": "image", **values["model"]}
    return {"kind": "image", "model": model, "image": image, "train": train}


def upgrade_stored_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config.json`` that an earlier version stored in a run folder, in
    today's layout; the one place that knows the old layouts.

    Only a stored run's config is read this way (`RunFolder.raw_config`,
    `training.checkpoints.load_stored_config`), silently: a config file a
    person writes must use today's keys (`training.config.
    refuse_renamed_keys`). What it maps:

    * ``model.label_smoothing`` -> ``train.label_smoothing``;
    * ``train.decode_extra_length`` -> ``train.extra_length``;
    * ``data.max_length`` -> ``data.max_sentence_length``;
    * an image run without ``kind`` (before kinds: ``model`` with ``image_shape``,
      ``data`` and ``train``) -> ``kind="image"``, ``data`` and the batch
      settings of ``train`` as the ``image`` section
      (`_upgrade_image_run_dict`);
    * an image model without ``generation_order`` -> ``"image"``, the one
      raster order the code of that time generated in (a config file
      without it gets the paper's block order, Parmar et al. 2018, §3.2).

    Where a stored config holds both an old key and its new name, the new
    name's value is kept.
    """
    if is_image_run_layout(values):
        values = _upgrade_image_run_dict(values)
    upgraded = {
        key: dict(value) if isinstance(value, Mapping) else value
        for key, value in values.items()
    }
    for old, new in RENAMED_KEYS.items():
        old_section, old_name = old.split(".")
        new_section, new_name = new.split(".")
        section = upgraded.get(old_section)
        if not isinstance(section, dict) or old_name not in section:
            continue
        value = section.pop(old_name)
        target = upgraded.setdefault(new_section, {})
        if isinstance(target, dict):
            target.setdefault(new_name, value)
    model = upgraded.get("model")
    if upgraded.get("kind") == "image" and isinstance(model, dict):
        upgraded["model"] = {"generation_order": "image", **model}
    return upgraded


# ---------------------------------------------------------------- the run
def is_run_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a training run (it holds ``config.json``)."""
    return (Path(path) / CONFIG_FILE).is_file()


def _model_config(model: Any) -> TransformerConfig:
    """The `TransformerConfig` of a config file's ``model`` section."""
    if isinstance(model, str):
        return get_preset(model)
    if not isinstance(model, Mapping):
        raise ValueError(
            f"The model section of {CONFIG_FILE} must be a preset name or a "
            f"mapping of TransformerConfig fields. Received: {model!r}"
        )
    values = dict(model)
    preset = values.pop("preset", None)
    if preset is None:
        return TransformerConfig.from_dict(values)
    base = get_preset(preset)
    if isinstance(values.get("optimizer"), Mapping):
        values["optimizer"] = dataclasses.replace(base.optimizer, **values["optimizer"])
    return base.replace(**values)


class RunFolder:
    """The work directory of one training run: its files, config and weights.

    Args:
        path: the folder (``keras-transformer train --workdir``). It need not
            exist yet: the trainer creates it; readers check with `check`.

    Example:
    >>> run = RunFolder("runs/dates")  # doctest: +SKIP
    >>> run.checkpoints()[-1]  # doctest: +SKIP
    'runs/dates/checkpoints/ckpt-600'
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(
                f"{self.path} is a file, not a run folder: pass the folder of a "
                "`keras-transformer train` run (--workdir), or a new folder to "
                "train in."
            )

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    # -- layout ---------------------------------------------------------------
    @property
    def config_file(self) -> Path:
        return self.path / CONFIG_FILE

    @property
    def tokenizer_dir(self) -> Path:
        return self.path / TOKENIZER_DIR

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / CHECKPOINT_DIR

    @property
    def log_dir(self) -> Path:
        return self.path / LOG_DIR

    @property
    def translations_dir(self) -> Path:
        return self.path / TRANSLATIONS_DIR

    @property
    def best_weights(self) -> Path:
        return self.path / BEST_WEIGHTS

    @property
    def averaged_weights(self) -> Path:
        return self.path / AVERAGED_WEIGHTS

    @property
    def result_file(self) -> Path:
        return self.path / RESULT_FILE

    # -- reading --------------------------------------------------------------
    def check(self) -> RunFolder:
        """Returns self if the folder is a run; raises FileNotFoundError if not."""
        if not self.path.exists():
            raise FileNotFoundError(
                f"{self.path} does not exist: pass the --workdir of a "
                "`keras-transformer train` run."
            )
        if not os.access(self.path, os.R_OK | os.X_OK):
            raise PermissionError(
                f"{self.path} cannot be read (permission denied): fix its "
                "permissions or pass another run folder."
            )
        if not self.config_file.is_file():
            raise FileNotFoundError(
                f"{self.path} is not a training work directory: {CONFIG_FILE} is "
                "missing. Pass the --workdir of a `keras-transformer train` run."
            )
        return self

    def raw_config(self) -> dict[str, Any]:
        """The content of ``config.json`` in today's layout (one written by
        earlier code is upgraded: `upgrade_stored_config`);
        `kt.training.checkpoints.load_stored_config` parses it."""
        self.check()
        try:
            values = json.loads(self.config_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.config_file} is not valid JSON: {e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"{self.config_file} must hold a JSON object.")
        return upgrade_stored_config(values)

    def kind(self) -> str:
        """The run's kind: ``config.json``'s ``kind`` (translation without
        one), or ``"image"`` for an image run written before kinds."""
        values = self.raw_config()
        model = values.get("model")
        if "kind" not in values and isinstance(model, Mapping):
            return "image" if "image_shape" in model else "translation"
        return str(values.get("kind", "translation"))

    def model_config(
        self, tokenizer: SubwordTokenizer | None = None
    ) -> TransformerConfig:
        """The run's `TransformerConfig`, with the tokenizer's vocabulary size."""
        config = _model_config(self.raw_config().get("model", "tiny"))
        tokenizer = tokenizer or self.tokenizer()
        return config.replace(vocabulary_size=tokenizer.vocabulary_size)

    def tokenizer(self) -> SubwordTokenizer:
        """The run's tokenizer, checked against its checkpoints."""
        tokenizer = SubwordTokenizer.load(self.check().tokenizer_dir)
        check_tokenizer(self.checkpoint_dir, tokenizer)
        return tokenizer

    def checkpoints(self) -> list[str]:
        """The kept checkpoints, oldest first."""
        return checkpoint_paths(self.checkpoint_dir)

    def build_model(self, tokenizer: SubwordTokenizer | None = None) -> keras.Model:
        """A freshly initialized model of the run's configuration (and kind)."""
        if self.kind() == "image":
            model = ImageTransformerConfig.from_dict(self.raw_config()["model"])
            return build_image_transformer(model)
        config = self.model_config(tokenizer)
        if self.raw_config().get("kind") == "classification":
            return build_classifier(config)
        return build_transformer(config)

    def restore(self, model: keras.Model, weights: str = "last") -> None:
        """Loads `weights` into `model`.

        Args:
            model: a model of the run's configuration (`build_model`).
            weights: ``"last"`` (the newest intact checkpoint: a damaged
                one is skipped with a warning and left in place, see
                `restore_newest_checkpoint`), ``"best"`` (best validation
                BLEU), ``"average"`` (``average-checkpoints``, §6.1), or the
                path of a checkpoint (its prefix, ``.index`` or ``.data-*``
                file: `checkpoint_prefix`) or a ``.weights.h5`` file.

        Raises:
            CheckpointDamagedError: when every checkpoint (or the one named)
                is damaged.
            ForeignCheckpointError: when the weights are another run's, or
                carry no fingerprint (see `check_fingerprint`).
        """
        expected = self.fingerprint()
        config = str(self.config_file)
        if weights == "last":
            # The newest intact checkpoint; damaged ones are skipped with a
            # warning and left in place (a reader holds no lock to move them).
            restored = restore_newest_checkpoint(
                self.checkpoint_dir,
                lambda path: _restore_weights(model, path, config),
                expected,
            )
            if restored is None and damaged_files(self.checkpoint_dir):
                names = ", ".join(p.name for p in damaged_files(self.checkpoint_dir))
                raise CheckpointDamagedError(
                    f"{self.checkpoint_dir} holds no intact checkpoint, only damaged "
                    f"files moved aside earlier ({names[:200]}): restore them from "
                    "a backup, or pass --weights best/average/<file>."
                )
            if restored is None:
                raise FileNotFoundError(
                    f"{self.checkpoint_dir} holds no checkpoint yet: train first, "
                    "or pass --weights best/average/<file>."
                )
        elif weights in ("best", "average"):
            path = self.best_weights if weights == "best" else self.averaged_weights
            if not path.is_file():
                how = (
                    "it is written when train.keep_best is true and a validation ran"
                    if weights == "best"
                    else "run `keras-transformer average-checkpoints` first"
                )
                raise FileNotFoundError(f"{path} does not exist: {how}.")
            self._load_weights_file(model, path, expected)
        elif str(weights).endswith(".weights.h5"):
            self._load_weights_file(model, Path(weights), expected)
        else:
            restore_checkpoint(model, checkpoint_prefix(weights), expected, config)

    def fingerprint(self) -> RunFingerprint | None:
        """The run's fingerprint (None for runs written before fingerprints)."""
        return run_fingerprint(self.checkpoint_dir)

    def _load_weights_file(
        self, model: keras.Model, path: Path, expected: RunFingerprint | None
    ) -> None:
        """Loads a ``.weights.h5`` file: whole, the run's own (the fingerprint
        the file itself carries, `check_fingerprint`), and with the weights
        its checksum names.

        Raises:
            CheckpointDamagedError: naming the damaged file.
            ForeignCheckpointError: when it is another run's, or carries no
                fingerprint (`accepting_weights_without_fingerprint`).
            CheckpointMismatchError: when it does not fit the model.
        """
        advice = "Pick other weights (--weights), or restore the file from a backup."
        problem = weights_file_problem(path)
        if problem is not None:
            raise CheckpointDamagedError(f"Cannot load {path}: {problem}. {advice}")
        check_fingerprint(path, weights_file_fingerprint(path), expected)
        config = self.config_file
        # The dtypes and shapes written with the file tell a model of other
        # settings (a mismatch) from a file that does not read back (damage).
        layout = _weights_attribute(path, WEIGHTS_LAYOUT_ATTRIBUTE)
        if layout is not None and layout != _layout_digest(model):
            raise CheckpointMismatchError(
                f"{path} does not match the model built from {config}: its weights "
                f"have other shapes. Either {config} was changed after the file was "
                "written (restore the run's own settings), or the file comes from "
                "a run with other model sizes."
            )
        try:
            restore_or_explain(lambda: model.load_weights(path), str(path), str(config))
        except CheckpointMismatchError as e:
            if layout is None:
                raise
            raise CheckpointDamagedError(
                f"Cannot load {path}: {path} is damaged (Keras cannot read it whole "
                f"although it fits the model). {advice}"
            ) from e
        # Keras may also skip part of a damaged file without an error (the
        # weights it did not find keep their values): the checksum tells.
        checksum = _weights_attribute(path, WEIGHTS_CHECKSUM_ATTRIBUTE)
        if checksum is not None and checksum != _weights_digest(model):
            raise CheckpointDamagedError(
                f"Cannot load {path}: {path} is damaged (the weights read from it "
                f"are not the ones written into it). {advice}"
            )

    def load(
        self, weights: str = "last"
    ) -> tuple[keras.Model, SubwordTokenizer | None]:
        """The trained model (with `weights`, see `restore`) and its tokenizer
        (None for an image run)."""
        tokenizer = None if self.kind() == "image" else self.tokenizer()
        model = self.build_model(tokenizer)
        self.restore(model, weights)
        return model, tokenizer

    def weights_step(self, weights: str = "last") -> int:
        """The training step of the named weights (0 when unknown)."""
        try:
            if weights == "last":
                # The checkpoint that `restore` loads: the newest intact one.
                for path in reversed(self.checkpoints()):
                    if checkpoint_problem(path) is None:
                        return checkpoint_step(path)
                return 0
            if weights == "best":
                info = json.loads((self.path / BEST_INFO).read_text())
                return int(info["step"])
            if weights == "average":
                info = json.loads((self.path / AVERAGED_INFO).read_text())
                return int(info["steps"][-1])
        except (OSError, ValueError, KeyError, IndexError):
            return 0
        return 0


# ----------------------------------------------------------------- exports
def is_export_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` holds ``model.keras`` and ``tokenizer/`` (an export).

    Never the hidden temporary folder of an unfinished (or killed) export,
    ``.tmp-<pid>-<name>``, even when it already holds both.
    """
    path = Path(path)
    if path.name.startswith(TEMPORARY_PREFIX):
        return False
    return (path / EXPORT_MODEL_FILE).is_file() and (path / TOKENIZER_DIR).is_dir()


def load_export(
    export_dir: str | os.PathLike[str],
) -> tuple[keras.Model, SubwordTokenizer, dict[str, Any]]:
    """Reads the Keras model and tokenizer saved next to an exported SavedModel.

    For serving, load the SavedModel itself with ``tf.saved_model.load``;
    this is for evaluating or training the exported model further.

    Returns:
        ``(model, tokenizer, settings)``; `settings` is the content of
        ``export.json`` (empty when the folder has none).
    """
    export_dir = Path(export_dir)
    if not is_export_dir(export_dir):
        raise FileNotFoundError(
            f"{export_dir} holds no {EXPORT_MODEL_FILE} and {TOKENIZER_DIR}/: it is "
            "not a folder written by export_translator (keras-transformer export)."
        )
    model = keras.saving.load_model(export_dir / EXPORT_MODEL_FILE, compile=False)
    tokenizer = SubwordTokenizer.load(export_dir / TOKENIZER_DIR)
    info_path = export_dir / EXPORT_INFO_FILE
    info = (
        json.loads(info_path.read_text(encoding="utf-8")) if info_path.is_file() else {}
    )
    if "max_output_extra" in info:
        # Exports written before the §6.1 allowance had one name.
        info.setdefault("extra_length", info.pop("max_output_extra"))
    if "length_penalty" in info:  # exports written before alpha had one name
        info.setdefault("alpha", info.pop("length_penalty"))
    return model, tokenizer, info


# ------------------------------------------------------ TensorBoard records
def logged_scalars(
    log_dir: str | os.PathLike[str], tag: str
) -> tuple[list[int], list[float]]:
    """`(steps, values)` of the scalar summary `tag` in a TensorBoard folder.

    Reads every event file of `log_dir` (e.g. ``<workdir>/logs/train``;
    a resumed run has one per process) and every point of the tag, steps in
    order; `([], [])` when the folder holds no such summary.
    """
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    # size_guidance 0 keeps every point: by default the accumulator keeps a
    # random sample of 10 per tag, which would thin out any longer curve.
    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    if tag not in events.Tags()["tensors"]:
        return [], []
    points = sorted(events.Tensors(tag), key=lambda point: point.step)
    return [p.step for p in points], [
        float(tf.make_ndarray(p.tensor_proto)) for p in points
    ]


def logged_training_seconds(log_dir: str | os.PathLike[str]) -> float:
    """Seconds of training recorded in a run's TensorBoard training folder.

    For each process that trained the run (a resumed run has several event
    files, named ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``), the
    span from its first event to its last training summary
    (``learning_rate``, written with every one), summed over the processes:
    the run's own time however many calls trained it.
    """
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader,
    )

    starts: dict[tuple[str, ...], float] = {}
    ends: dict[tuple[str, ...], float] = {}
    for path in Path(log_dir).glob("events.out.tfevents.*"):
        match = re.match(r".*tfevents\.\d+\.(.+)\.(\d+)\.\d+", path.name)
        if match is None:
            continue
        process = match.groups()
        for event in EventFileLoader(str(path)).Load():
            starts[process] = min(starts.get(process, event.wall_time), event.wall_time)
            if any(value.tag == "learning_rate" for value in event.summary.value):
                ends[process] = max(ends.get(process, 0.0), event.wall_time)
    return sum(ends[process] - starts[process] for process in ends)
