"""What a run trains on: its data files, and the data as read.

A run reads its data anew at every start, and its tokenizer was learned
from the training text of the first start (§5.1). Data changed between two
starts would change what the resumed run trains on, and what its best
weights are chosen by, without a word. ``data.json`` in the run folder
records, at the run's first start:

- for ``task='files'``, each data file's size, modification time and
  SHA-256 (`check_data_files`, before anything is read: a resume hashes
  only a file whose size or time changed, and names the changed file);
- for every task and kind, the number of training examples as read and a
  SHA-256 of them (`check_data_content`): another copy of the data set
  under a moved ``data.data_dir``, a download of another version, or a
  reader that now cleans the text otherwise.

A resume on changed data is refused unless ``--force``, as a changed config
is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from keras_transformer.files import file_sha256, read_json_object, write_atomically
from keras_transformer.runs.layout import DATA_RECORD
from keras_transformer.training.sections import FILE_SETTINGS

__all__ = [
    "CONTENT_KEY",
    "DATA_FILE_SETTINGS",
    "check_data_content",
    "check_data_files",
    "data_content",
]

logger = logging.getLogger(__name__)

#: The data settings whose files a run trains and chooses its weights on
#: (the test files only score it: they may change).
DATA_FILE_SETTINGS = tuple(n for n in FILE_SETTINGS if not n.startswith("test_"))
#: The entry of ``data.json`` that holds the data as read (`data_content`).
CONTENT_KEY = "content"
#: The splits it covers: what the run trains on and learned its tokenizer
#: from. The validation split may change (``image.validation_images`` is a
#: resumable setting), the test split only scores the run.
CONTENT_SPLITS = ("train",)


def _file_fingerprint(path: Path, known: Mapping[str, Any]) -> dict[str, Any]:
    """`path`'s size, modification time and SHA-256; the SHA-256 of `known`
    (the record) is kept, unread, where the size and the time are its own."""
    status = path.stat()
    entry: dict[str, Any] = {
        "path": str(path),
        "size": status.st_size,
        "mtime_ns": status.st_mtime_ns,
    }
    same = all(known.get(key) == entry[key] for key in entry)
    if same and isinstance(known.get("sha256"), str):
        entry["sha256"] = known["sha256"]
        return entry
    entry["sha256"] = file_sha256(path)
    return entry


#: The damaged records warned of in this process, by path, size and time:
#: a resume reads the record twice (its files, then its content).
_WARNED_DAMAGED: set[tuple[str, int, int]] = set()


def _read_record(path: Path) -> dict[str, Any]:
    """The stored record, or an empty one where it is missing or unreadable
    (written anew: the data are then taken as they are, with one warning)."""
    if not path.is_file():
        return {}
    try:
        return read_json_object(path, "train records the data as read now.")
    except (OSError, ValueError) as e:
        status = path.stat()
        seen = (str(path), status.st_size, status.st_mtime_ns)
        if seen not in _WARNED_DAMAGED:
            _WARNED_DAMAGED.add(seen)
            logger.warning("%s", e)
        return {}


def check_data_files(data: Any, directory: Path, resumed: bool, force: bool) -> None:
    """Records the run's data files (`DATA_FILE_SETTINGS` of the `DataConfig`
    `data`) in ``<directory>/data.json``, or checks them on a resume.

    A file named by the same setting at the same path whose content changed
    since the record is refused unless `force` (then a warning, and the new
    content is recorded). A file that cannot be read is left to the data
    loader's own error.

    Raises:
        ValueError: naming each changed file, its sizes, and the ways on.
    """
    path = directory / DATA_RECORD
    record = _read_record(path) if resumed else {}
    current = {}
    for setting in DATA_FILE_SETTINGS:
        name = getattr(data, setting)
        known = record.get(setting)
        known = known if isinstance(known, Mapping) else {}
        if name is not None and Path(name).is_file():
            current[setting] = _file_fingerprint(Path(name), known)
        elif name is not None and known.get("path") == name:
            current[setting] = dict(known)  # missing: the loader says so
    if resumed and CONTENT_KEY in record:
        current[CONTENT_KEY] = record[CONTENT_KEY]  # `check_data_content`'s
    changed = [
        f"data.{setting} {entry['path']} ({record[setting].get('size')} -> "
        f"{entry['size']} bytes)"
        for setting, entry in current.items()
        if setting != CONTENT_KEY
        and isinstance(record.get(setting), Mapping)
        and record[setting].get("path") == entry["path"]
        and record[setting].get("sha256") != entry["sha256"]
    ]
    if changed:
        message = (
            f"{directory} was trained on other text: "
            f"{'; '.join(changed)} changed since the run's first start, so "
            "resuming would continue on other data than its tokenizer and its "
            "best weights were made from."
        )
        if not force:
            raise ValueError(
                f"{message} Restore the file, use another --workdir for a new "
                "run, or pass --force (force=True) to continue this run on the "
                "new text."
            )
        logger.warning("%s Continuing on the new text (--force).", message)
    if current:
        if current != record:
            directory.mkdir(parents=True, exist_ok=True)
            write_atomically(path, json.dumps(current, indent=2) + "\n")
    elif not resumed:
        path.unlink(missing_ok=True)  # another run's, in this folder before


def _feed(digest: Any, value: Any) -> bool:
    """Adds `value` (data as a reader returns it: dataclasses of strings,
    arrays, lists) to the SHA-256 `digest`; False for a value it cannot read."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        digest.update(type(value).__name__.encode())
        return all(
            _feed(digest, getattr(value, field.name))
            for field in dataclasses.fields(value)
            if field.compare  # where it was read from is not what it holds
        )
    if isinstance(value, np.ndarray):
        digest.update(f"array {value.dtype.str} {value.shape}:".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
        return True
    if isinstance(value, Mapping):
        return _feed(digest, sorted((str(k), v) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        if all(isinstance(item, str) for item in value):  # sentences: at once
            text = json.dumps(value, ensure_ascii=False)
            digest.update(text.encode("utf-8", "surrogatepass"))
            return True
        digest.update(f"list {len(value)}:".encode())
        return all(_feed(digest, item) for item in value)
    if value is None or isinstance(value, (str, bytes, int, float, bool)):
        digest.update(f"{type(value).__name__} {value!r};".encode())
        return True
    return False


def data_content(data: Any) -> dict[str, dict[str, Any]] | None:
    """``{split: {"examples": n, "sha256": hex}}`` of the `CONTENT_SPLITS`
    of a recipe's data (None: data of a form it cannot read, which is then
    not checked)."""
    found = {}
    for split in CONTENT_SPLITS:
        examples = getattr(data, split, None)
        digest = hashlib.sha256()
        if not hasattr(examples, "__len__") or not _feed(digest, examples):
            return None
        found[split] = {"examples": len(examples), "sha256": digest.hexdigest()}
    return found


def check_data_content(
    content: dict[str, dict[str, Any]] | None,
    directory: Path,
    force: bool,
    source: str,
) -> None:
    """Records the run's data as read (`data_content`) in
    ``<directory>/data.json`` at its first start, or checks it on a resume.

    A record without it (a new run: `check_data_files` wrote the record
    anew; or a run folder from before) gets it. A split whose content
    differs from the record is refused unless `force` (then a warning, and
    the new content is recorded).

    Args:
        content: `data_content` of the data read now (None: not checked).
        directory: the run's folder (this process's).
        force: continue on changed data.
        source: where the data come from, for the message (the task and
            its ``data.data_dir``).

    Raises:
        ValueError: naming each changed split, its sizes, and the ways on.
    """
    if content is None:
        return
    path = directory / DATA_RECORD
    record = _read_record(path)
    known = record.get(CONTENT_KEY)
    if isinstance(known, Mapping):
        changed = [
            f"the {split} split ({known[split].get('examples')} -> "
            f"{entry['examples']} examples)"
            for split, entry in content.items()
            if isinstance(known.get(split), Mapping)
            and known[split].get("sha256") != entry["sha256"]
        ]
        if not changed and all(split in known for split in content):
            return
        if changed:
            message = (
                f"{directory} was trained on other data: {source} as read now "
                "differ from those of the run's first start in "
                f"{' and '.join(changed)}, so resuming would continue on other "
                "data than its tokenizer and its best weights were made from."
            )
            if not force:
                raise ValueError(
                    f"{message} Point the run at the data it was trained on "
                    "(data.data_dir), use another --workdir for a new run, or "
                    "pass --force (force=True) to continue this run on the new "
                    "data."
                )
            logger.warning("%s Continuing on the new data (--force).", message)
    directory.mkdir(parents=True, exist_ok=True)
    record = {**record, CONTENT_KEY: content}
    write_atomically(path, json.dumps(record, indent=2) + "\n")
