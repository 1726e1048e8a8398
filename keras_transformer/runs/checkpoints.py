"""The checkpoints of a run's folder: which there are, which are intact.

`checkpoint_paths` lists them (the files on disk and the record of
``checkpoints.json``, never TensorFlow's ``checkpoint`` state file, which
`write_checkpoint_state` and `forget_checkpoint` keep in step);
`checkpoint_problem` tells a damaged one, which `quarantine_checkpoint`
moves aside (never deletes). Writing and restoring them is
`keras_transformer.runs.checkpoint_io`.
"""

from __future__ import annotations

import glob
import json
import os
import re
from pathlib import Path
from typing import Any

import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import (
    file_problem,
    fsync_directory,
    short_error,
    write_atomically,
)
from keras_transformer.runs.fingerprints import read_checkpoint_metadata
from keras_transformer.runs.layout import (
    CHECKPOINT_METADATA,
    CHECKPOINT_STATE,
    DAMAGED_SUFFIX,
    RECORDED_CHECKPOINTS,
    checkpoint_files,
    checkpoint_prefixes_on_disk,
    checkpoint_step,
)

__all__ = [
    "CheckpointDamagedError",
    "CheckpointRemovedError",
    "CheckpointWriteError",
    "check_tokenizer",
    "checkpoint_paths",
    "checkpoint_problem",
    "damaged_files",
    "forget_checkpoint",
    "quarantine_checkpoint",
    "record_checkpoint",
    "recorded_checkpoints",
    "write_checkpoint_state",
]


class CheckpointDamagedError(ValueError):
    """A checkpoint file is truncated, empty, missing or unreadable.

    Not a config mismatch: the files themselves are broken. The message
    names the file and what is wrong with it.
    """


class CheckpointRemovedError(ValueError):
    """A checkpoint's files went while it was read: a `train` of the run
    writing new checkpoints removed its oldest ones (`train.keep_checkpoints`).
    Readers choose the newest again (`restore_newest_checkpoint`). Not damage:
    a resuming `train --force` never takes it for a reason to start again."""


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
    prefixes = set(checkpoint_prefixes_on_disk(directory))
    for name in recorded_checkpoints(directory):
        prefix = str(directory / name)
        if checkpoint_files(prefix):
            prefixes.add(prefix)
    return sorted(prefixes, key=checkpoint_step)


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
    problem = file_problem(index)
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
        problem = file_problem(shard)
        if problem and not (problem.endswith("(0 bytes)") and count > 1):
            return problem
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        keys = list(reader.get_variable_to_dtype_map())
    except Exception as e:  # noqa: BLE001 - any failure to parse is damage
        return f"{index} is damaged ({short_error(e)})"
    if not read_tensors:
        return None
    data = str(shards[0]) if count == 1 else f"a data shard {prefix}.data-*"
    for key in keys:
        try:
            reader.get_tensor(key)
        except Exception as e:  # noqa: BLE001 - a tensor that does not read back
            return f"{data} is damaged ({short_error(e)})"
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


def recorded_checkpoints(checkpoint_dir: str | os.PathLike[str]) -> list[str]:
    """The names of the recorded checkpoints of a folder (``ckpt-<step>``), by step.

    A checkpoint is recorded in ``checkpoints.json`` once its files were read
    back whole (`save_checkpoint`), and before anything may delete it. A run
    written before the record existed has its TensorFlow ``checkpoint`` state
    file's list instead (empty when that file is missing or garbled).
    """
    directory = Path(checkpoint_dir)
    names = read_checkpoint_metadata(directory).get(RECORDED_CHECKPOINTS)
    if not isinstance(names, list):
        state = _checkpoint_state(directory)
        names = [] if state is None else list(state.all_model_checkpoint_paths)
    found = {Path(str(n)).name for n in names}
    return sorted(
        (n for n in found if re.fullmatch(r"ckpt-\d+", n)), key=checkpoint_step
    )


def write_checkpoint_records(directory: Path, names: list[str]) -> None:
    """Writes the list of recorded checkpoints into ``checkpoints.json`` (atomically).

    The rest of the file is kept as it is.
    """
    metadata = read_checkpoint_metadata(directory)
    metadata[RECORDED_CHECKPOINTS] = sorted(set(names), key=checkpoint_step)
    write_atomically(
        directory / CHECKPOINT_METADATA, json.dumps(metadata, indent=2) + "\n"
    )


def record_checkpoint(prefix: str | os.PathLike[str]) -> None:
    """Records the checkpoint `prefix` (read back whole) in ``checkpoints.json``."""
    prefix = Path(prefix)
    names = recorded_checkpoints(prefix.parent)
    if prefix.name not in names:
        write_checkpoint_records(prefix.parent, [*names, prefix.name])


def unrecord_checkpoints(directory: Path, names: list[str]) -> None:
    """Removes `names` from the recorded checkpoints (their files are not touched)."""
    recorded = recorded_checkpoints(directory)
    if set(names) & set(recorded):
        write_checkpoint_records(directory, [n for n in recorded if n not in names])


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
    unrecord_checkpoints(prefix.parent, [prefix.name])
    return moved


def damaged_files(checkpoint_dir: str | os.PathLike[str]) -> list[Path]:
    """The files of damaged checkpoints moved aside earlier (``*.corrupt``)."""
    directory = Path(checkpoint_dir)
    if not directory.is_dir():
        return []
    return sorted(
        p for p in directory.iterdir() if DAMAGED_SUFFIX in p.name and p.is_file()
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
    metadata = read_checkpoint_metadata(Path(checkpoint_dir))
    if "vocabulary_size" not in metadata:
        return  # an unreadable file (warned of): nothing records the tokenizer
    try:
        problems = tokenizer.compatibility_problems(
            int(metadata["vocabulary_size"]), metadata.get("tokenizer_fingerprint")
        )
    except (TypeError, ValueError) as e:  # a damaged size
        problems = [f"{path.name} does not read ({e})"]
    if problems:
        raise ValueError(
            f"The run's tokenizer does not match the checkpoints in {path.parent}: "
            f"{'; '.join(problems)}. Token ids would mean different pieces: "
            "restore the tokenizer/ folder of this run, or start a new run in "
            "another work directory."
        )
