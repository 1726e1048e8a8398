"""Writing a run's checkpoints whole, and restoring the newest intact one.

`save_checkpoint` writes ``ckpt-<step>`` so that it is complete or not seen
(with `CheckpointManager`, whose state never names a deleted checkpoint);
`restore_newest_checkpoint` falls back past damaged checkpoints and
refuses another run's; `restore_checkpoint` loads one checkpoint's model
weights, and `restore_or_explain` turns a mismatch into one clear error.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.files import fsync_directory, short_error
from keras_transformer.runs.checkpoints import (
    CheckpointDamagedError,
    CheckpointRemovedError,
    CheckpointWriteError,
    checkpoint_paths,
    checkpoint_problem,
    quarantine_checkpoint,
    record_checkpoint,
    recorded_checkpoints,
    unrecord_checkpoints,
    write_checkpoint_records,
    write_checkpoint_state,
)
from keras_transformer.runs.fingerprints import (
    CheckpointMismatchError,
    RunFingerprint,
    check_fingerprint,
    checkpoint_fingerprint,
    read_checkpoint_metadata,
)
from keras_transformer.runs.layout import (
    CHECKPOINT_METADATA,
    DAMAGED_SUFFIX,
    RECORDED_CHECKPOINTS,
    checkpoint_files,
    checkpoint_prefix,
)

__all__ = [
    "CheckpointManager",
    "assert_every_weight_restored",
    "record_checkpoints_on_disk",
    "restore_checkpoint",
    "restore_newest_checkpoint",
    "restore_or_explain",
    "save_checkpoint",
]

logger = logging.getLogger(__name__)


#: How often a reader chooses the newest checkpoints again when a running
#: `train` removed one of them while it was read.
READ_ATTEMPTS = 3


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
        CheckpointRemovedError: when a running `train` removed the newest
            ones while they were read, `READ_ATTEMPTS` times (a reader tries
            again each time; a writer never meets it).
        ForeignCheckpointError: when the newest intact one is another run's.
    """
    directory = Path(checkpoint_dir)
    for _ in range(READ_ATTEMPTS):
        try:
            return _restore_newest(directory, restore, expected, move_damaged)
        except CheckpointRemovedError:
            if move_damaged:  # the writer itself: nobody else removes them
                raise
    raise CheckpointRemovedError(
        f"The checkpoints of {directory} were removed {READ_ATTEMPTS} times while "
        "they were read: a `keras-transformer train` of the run writes new ones "
        "and removes the oldest (it keeps train.keep_checkpoints). Read again, "
        "or once it ends."
    )


def _restore_newest(
    directory: Path,
    restore: Callable[[str], Any],
    expected: RunFingerprint | None,
    move_damaged: bool,
) -> str | None:
    """One pass of `restore_newest_checkpoint` over the listed checkpoints.

    Raises:
        CheckpointRemovedError: for a reader, when a checkpoint it found
            damaged is gone from the list (removed by a running `train`).
    """
    listed = checkpoint_paths(directory)
    problems: list[str] = []
    for prefix in reversed(listed):
        # Every tensor is read back (with its checksum) before the restore:
        # a model restore reads only some of them, and an error it raises
        # must mean a model of another configuration, not a damaged file.
        problem = checkpoint_problem(prefix)
        if problem is None:
            try:
                check_fingerprint(prefix, checkpoint_fingerprint(prefix), expected)
                restore(prefix)
            except Exception as e:
                if move_damaged or _has_files(prefix):
                    raise
                message = f"{prefix} was removed while it was read"
                raise CheckpointRemovedError(message) from e
            if problems:
                logger.warning(
                    "Restored %s, the newest intact checkpoint of %s.",
                    Path(prefix).name,
                    directory,
                )
            return prefix
        if not move_damaged and checkpoint_paths(directory) != listed:
            raise CheckpointRemovedError(f"{prefix} was removed while it was read")
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
    changed = names != recorded
    if changed or RECORDED_CHECKPOINTS not in read_checkpoint_metadata(directory):
        write_checkpoint_records(directory, names)
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
                unrecord_checkpoints(directory, [Path(f).name for f in doomed])
            except OSError as e:
                logger.warning(
                    "Kept the old checkpoints %s: %s could not be updated (%s).",
                    ", ".join(Path(f).name for f in doomed),
                    directory / CHECKPOINT_METADATA,
                    short_error(e),
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
            else (
                e.strerror if isinstance(e, OSError) and e.strerror else short_error(e)
            )
        )
        advice = (
            "Free disk space (or lower train.keep_checkpoints)"
            if full
            else "Check the disk and the folder's permissions"
        )
        keep, again = (
            (f"{Path(previous).name} is intact and still the latest", "to resume")
            if previous
            else ("No earlier checkpoint exists", "(it starts over: none to resume)")
        )
        error = CheckpointWriteError(
            f"Could not write checkpoint {prefix}: {what}. {keep}; nothing of the "
            f"failed write was kept. {advice}, then run the same command again "
            f"{again}."
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


def restore_or_explain(
    restore: Callable[[], Any], path: str, config: str, forced: bool = False
) -> None:
    """Runs `restore`; a shape or name mismatch becomes one clear error.

    TensorFlow reports a checkpoint that does not fit the model with its own
    message and, when the half-restored checkpoint is collected, a hundred
    warning lines; this names the checkpoint and the config instead (`forced`:
    the config was changed on purpose, ``train --force``).

    Raises:
        CheckpointMismatchError: naming `path` and `config`.
        CheckpointRemovedError: when the checkpoint's files went meanwhile.
    """
    import gc

    failure = None
    with _quiet_tensorflow_warnings():
        try:
            restore()
        except (AssertionError, ValueError, tf.errors.OpError) as e:
            failure = short_error(e)
            _expect_partial_restore(e)
        gc.collect()  # the warnings come when the failed restore is collected
    if failure is not None and not _has_files(path):
        raise CheckpointRemovedError(
            f"{path} was removed while it was read: a `keras-transformer train` "
            "of the run removes its oldest checkpoints as it writes new ones "
            f"(train.keep_checkpoints). Read it again, or once it ends. ({failure})"
        )
    if failure is not None and forced:
        raise CheckpointMismatchError(
            f"{path} does not match the model of the new settings: {failure} "
            "--force continues a run with other settings, but not with weights "
            "of other shapes. Keep the run's model sizes, or train the new ones "
            "in another --workdir."
        )
    if failure is not None:
        raise CheckpointMismatchError(
            f"{path} does not match the model built from {config}: {failure} "
            f"Either {config} was changed after the checkpoint was written "
            "(restore the run's own settings), or the checkpoint comes from a "
            "run with other model sizes."
        )


def assert_every_weight_restored(status: Any) -> None:
    """Checks a checkpoint restore's `status`: every weight (and optimizer
    slot) of the restoring objects got a value. The checkpoint's values that
    they do not take (the fingerprint; the optimizer's, for a model alone)
    are expected: a model with a layer more than the checkpoint's would
    otherwise keep that layer's initial weights without a word.

    Raises:
        AssertionError: naming how many weights got no value, and one.
    """
    status.expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as e:
        found = re.search(r"Found (\d+) Python objects", str(e))
        # A checkpoint made by `Checkpoint.write` (other code) holds no save
        # counter, which the restoring `Checkpoint` makes: not a weight.
        if found and found.group(1) == "1" and "'save_counter:0'" in str(e):
            return
        first = re.search(r"path=([^\s,>]+)", str(e))
        count = found.group(1) if found else "some"
        example = f", e.g. {first.group(1)}" if first else ""
        raise AssertionError(
            f"{count} weights of the model have no value in the checkpoint"
            f"{example} (the model has layers or weights that it lacks)."
        ) from e


def _expect_partial_restore(error: BaseException) -> None:
    """Marks the restore that raised `error` as partial, as its status'
    ``expect_partial()`` would have had `restore` returned.

    Otherwise the half-restored checkpoint's coordinator, still referenced by
    the model, logs a warning per unrestored value when it is collected: a
    few hundred lines at exit, after the command's one-line error. It is a
    local of the frames the error passed through.
    """
    from tensorflow.python.checkpoint import checkpoint as tf_checkpoint

    coordinator = getattr(tf_checkpoint, "_CheckpointRestoreCoordinator", None)
    traceback = error.__traceback__
    while coordinator is not None and traceback is not None:
        for value in traceback.tb_frame.f_locals.values():
            if isinstance(value, coordinator):
                value.expect_partial = True
        traceback = traceback.tb_next


def _has_files(prefix: str) -> bool:
    """Whether the checkpoint `prefix` still has its index and a data shard
    (a ``.weights.h5`` file: whether it still exists)."""
    if str(prefix).endswith(".h5"):
        return Path(prefix).is_file()
    names = {file.name for file in checkpoint_files(prefix)}
    return f"{Path(prefix).name}.index" in names and len(names) > 1


def restore_model_weights(
    model: keras.Model, path: str, config: str = "the run's config"
) -> None:
    """Restores every weight of `model` (not the optimizer's) from the
    checkpoint `path`; `restore_or_explain` names `config` on a mismatch."""
    restore_or_explain(
        lambda: assert_every_weight_restored(
            tf.train.Checkpoint(model=model).restore(path)
        ),
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
        CheckpointRemovedError: when they went while they were read.
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
        restore_model_weights(model, path, config)
    except CheckpointRemovedError:
        raise
    except Exception as e:
        problem = checkpoint_problem(path)
        if problem is None:
            raise
        raise CheckpointDamagedError(
            f"Cannot restore {path}: {problem}. Pick another checkpoint "
            "(--weights), or restore the file from a backup."
        ) from e
