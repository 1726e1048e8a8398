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
from collections.abc import Callable, Mapping
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
    "restore_newest_checkpoint",
    "run_fingerprint",
    "save_checkpoint",
    "save_weights",
    "weights_nbytes",
    "write_checkpoint_metadata",
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
    """The checkpoints in a folder, oldest first (``.../ckpt-<step>``)."""
    state = tf.train.get_checkpoint_state(str(checkpoint_dir))
    if state is None:
        return []
    return list(state.all_model_checkpoint_paths)


def checkpoint_step(path: str) -> int:
    """The step a checkpoint was saved at, from its name ``ckpt-<step>``."""
    return int(path.rsplit("-", 1)[-1])


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
    state = tf.train.get_checkpoint_state(str(directory))
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


def quarantine_checkpoint(prefix: str | os.PathLike[str]) -> list[Path]:
    """Moves a damaged checkpoint's files aside and forgets it; deletes nothing.

    ``ckpt-6.index`` becomes ``ckpt-6.index.corrupt`` (``.corrupt.1``, ...
    when that exists), and so does every data shard; the checkpoint leaves
    the ``checkpoint`` state file, so the newest intact one is the latest.

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
) -> str | None:
    """Restores the newest intact checkpoint of a folder with ``restore(prefix)``.

    The one place where every reader of a run's checkpoints (training's
    resume, `RunFolder.restore`, hence translate, evaluate and export) goes.
    A checkpoint whose files are damaged (truncated, empty, missing shard,
    unreadable) is moved aside with `quarantine_checkpoint`, never deleted,
    a warning names the file and what is wrong, and the next older one is
    tried. Every tensor is read back first, so an error of `restore` on an
    intact checkpoint (a model of another configuration) is raised as it is
    and never taken for damage. An intact checkpoint whose fingerprint is
    not `expected` (another run's) is refused, never restored.

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
        moved = quarantine_checkpoint(prefix)
        problems.append(problem)
        logger.warning(
            "Checkpoint %s is damaged: %s. Its files were moved aside (%s), not "
            "deleted; falling back to the previous checkpoint.",
            Path(prefix).name,
            problem,
            ", ".join(p.name for p in moved) or "no file left",
        )
    if problems:
        raise CheckpointDamagedError(
            f"Every checkpoint in {directory} is damaged ({'; '.join(problems)}); "
            f"their files were moved aside as *{DAMAGED_SUFFIX}, nothing was "
            "deleted. Restore the checkpoints from a backup, or move the "
            f"*{DAMAGED_SUFFIX} files out of {directory} to start again from step 0."
        )
    return None


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
            for filename in doomed:
                for path in checkpoint_files(filename):
                    path.unlink(missing_ok=True)
        return None


def _remove_unrecorded(prefix: str) -> None:
    """Removes the files of an interrupted or failed write of `prefix`.

    Only when `prefix` is not a recorded checkpoint: these files were never
    a checkpoint (the state file is written after them).
    """
    directory = os.path.dirname(prefix)
    if any(_same_path(p, prefix) for p in checkpoint_paths(directory)):
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
    its checksum) before the manager records the checkpoint in its state
    file (which TensorFlow replaces atomically); the manager's `max_to_keep`
    then removes the oldest. A write that fails (a full disk, an I/O error,
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
        path: the checkpoint prefix (``.../ckpt-<step>``).
        expected: the run's fingerprint; a checkpoint of another run is
            refused (None: not checked).
        config: what the model was built from, for the mismatch message.

    Raises:
        CheckpointDamagedError: when the checkpoint's files are damaged.
        ForeignCheckpointError: when it belongs to another run.
        CheckpointMismatchError: when it does not fit the model.
    """
    if checkpoint_problem(path, read_tensors=False) is None:
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

    Written into every checkpoint (`FINGERPRINT_KEY`) and beside every
    weights file (``best.json``, ``averaged.json``), and checked by every
    reader: a checkpoint of another run with the same sizes would otherwise
    load without a word and translate nonsense.

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


def _read_metadata(checkpoint_dir: Path) -> dict[str, Any]:
    path = checkpoint_dir / CHECKPOINT_METADATA
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return metadata if isinstance(metadata, dict) else {}


def write_checkpoint_metadata(
    checkpoint_dir: str | os.PathLike[str],
    tokenizer: SubwordTokenizer | None,
    model_config: Any = None,
    run_id: str | None = None,
) -> RunFingerprint:
    """Records the run's fingerprint for its checkpoints (``checkpoints.json``).

    The run id is `run_id` when given, else kept from an earlier
    ``checkpoints.json`` with the same tokenizer, else made anew. Written
    atomically. A run without a tokenizer (an image run) records an empty
    tokenizer fingerprint and no vocabulary size.

    Returns:
        The run's `RunFingerprint`, which every new checkpoint carries.
    """
    directory = Path(checkpoint_dir)
    directory.mkdir(parents=True, exist_ok=True)
    stored = _read_metadata(directory)
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
    write_atomically(
        directory / CHECKPOINT_METADATA, json.dumps(metadata, indent=2) + "\n"
    )
    return fingerprint


def run_fingerprint(checkpoint_dir: str | os.PathLike[str]) -> RunFingerprint | None:
    """The fingerprint in a run's ``checkpoints.json`` (None for older runs)."""
    metadata = _read_metadata(Path(checkpoint_dir))
    return RunFingerprint.from_mapping(
        {
            "run_id": metadata.get("run_id", ""),
            "tokenizer": metadata.get("tokenizer_fingerprint", ""),
            "config": metadata.get("config_hash", ""),
            "workdir": metadata.get("workdir", ""),
        }
    )


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


def check_fingerprint(
    what: str | os.PathLike[str],
    found: RunFingerprint | None,
    expected: RunFingerprint | None,
) -> None:
    """Refuses weights whose fingerprint is not the run's.

    Weights without a fingerprint (written before fingerprints existed) and
    runs without one are accepted: there is nothing to compare.

    Raises:
        ForeignCheckpointError: saying whose the weights are.
    """
    if found is None or expected is None or found.same_run(expected):
        return
    what = Path(what)
    raise ForeignCheckpointError(
        f"{what} belongs to another run: it was written by {found.describe()}, "
        f"but this folder is {expected.describe()}. It was copied in from "
        f"another work directory; move it out of {what.parent} (or pass it to "
        "the run it came from)."
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
    failure leaves the previous pair intact and raises one line.

    Raises:
        FileWriteError: naming the file, on a full disk or a failed write.
    """
    path = Path(path)
    check_free_space(path, int(weights_nbytes(model) * 1.05) + (256 << 10))
    with atomic_file(path) as temporary:
        try:
            model.save_weights(temporary)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - h5py wraps the OSError
            raise OSError(getattr(e, "errno", None), _short(e)) from e
    values = dict(info)
    if fingerprint is not None:
        values["fingerprint"] = dataclasses.asdict(fingerprint)
    write_atomically(weights_info_file(path), json.dumps(values, indent=2) + "\n")
    return path


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
        """The content of ``config.json`` (`kt.training.TrainConfig.load` parses it)."""
        self.check()
        try:
            values = json.loads(self.config_file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{self.config_file} is not valid JSON: {e}") from e
        if not isinstance(values, dict):
            raise ValueError(f"{self.config_file} must hold a JSON object.")
        return values

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
                one is moved aside with a warning, see
                `restore_newest_checkpoint`), ``"best"`` (best validation
                BLEU), ``"average"`` (``average-checkpoints``, §6.1), or the
                path of a checkpoint prefix or a ``.weights.h5`` file.

        Raises:
            CheckpointDamagedError: when every checkpoint (or the one named)
                is damaged.
        """
        expected = self.fingerprint()
        config = str(self.config_file)
        if weights == "last":
            # The newest intact checkpoint; damaged ones are moved aside.
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
            restore_checkpoint(model, str(weights), expected, config)

    def fingerprint(self) -> RunFingerprint | None:
        """The run's fingerprint (None for runs written before fingerprints)."""
        return run_fingerprint(self.checkpoint_dir)

    def _load_weights_file(
        self, model: keras.Model, path: Path, expected: RunFingerprint | None
    ) -> None:
        try:
            info = json.loads(weights_info_file(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            info = {}
        found = RunFingerprint.from_mapping(
            info.get("fingerprint", {}) if isinstance(info, dict) else {}
        )
        check_fingerprint(path, found, expected)
        restore_or_explain(
            lambda: model.load_weights(path), str(path), str(self.config_file)
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
                paths = self.checkpoints()
                return checkpoint_step(paths[-1]) if paths else 0
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
