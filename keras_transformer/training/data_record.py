"""What text a run trains on: the fingerprints of its own data files.

A run of ``task='files'`` reads ``data.train_source`` ... and
``data.validation_target`` anew at every start, and its tokenizer was
learned from the training text of the first start (§5.1). A file edited or
replaced between two starts would change what the resumed run trains on,
and what its best weights are chosen by, without a word. ``data.json`` in
the run folder records each file's size, modification time and SHA-256 at
the run's first start; a resume compares them (hashing only a file whose
size or time changed) and refuses a changed file unless ``--force``, as it
refuses a changed config.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keras_transformer.files import read_json_object, write_atomically
from keras_transformer.runs.layout import DATA_RECORD
from keras_transformer.training.sections import FILE_SETTINGS

__all__ = ["DATA_FILE_SETTINGS", "check_data_files"]

logger = logging.getLogger(__name__)

#: The data settings whose files a run trains and chooses its weights on
#: (the test files only score it: they may change).
DATA_FILE_SETTINGS = tuple(n for n in FILE_SETTINGS if not n.startswith("test_"))


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
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(1 << 20):
            digest.update(block)
    entry["sha256"] = digest.hexdigest()
    return entry


def _read_record(path: Path) -> dict[str, Any]:
    """The stored record, or an empty one where it is missing or unreadable
    (written anew: the files are then taken as they are)."""
    if not path.is_file():
        return {}
    try:
        return read_json_object(path, "train records the files as they are now.")
    except (OSError, ValueError) as e:
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
    changed = [
        f"data.{setting} {entry['path']} ({record[setting].get('size')} -> "
        f"{entry['size']} bytes)"
        for setting, entry in current.items()
        if isinstance(record.get(setting), Mapping)
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
