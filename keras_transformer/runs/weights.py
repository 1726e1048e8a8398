"""A run's ``.weights.h5`` files (best, averaged) and their ``.json`` beside.

`save_weights` writes both whole, the weights file carrying the run's
fingerprint and checksums of its contents and of the weights (HDF5
attributes of its root); `weights_file_problem` and
`weights_file_fingerprint` read them back for `RunFolder.restore`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np

from keras_transformer.files import (
    atomic_file,
    check_free_space,
    file_problem,
    short_error,
    write_atomically,
)
from keras_transformer.runs.fingerprints import RunFingerprint

__all__ = [
    "FILE_CHECKSUM_ATTRIBUTE",
    "WEIGHTS_CHECKSUM_ATTRIBUTE",
    "WEIGHTS_FINGERPRINT_ATTRIBUTE",
    "WEIGHTS_INFO_ATTRIBUTE",
    "WEIGHTS_LAYOUT_ATTRIBUTE",
    "save_weights",
    "weights_file_fingerprint",
    "weights_file_info",
    "weights_info_of_file",
    "weights_file_problem",
    "weights_info_file",
    "weights_nbytes",
]


def weights_info_file(weights_file: str | os.PathLike[str]) -> Path:
    """``best.json`` beside ``best.weights.h5`` (the settings of a weights file)."""
    path = Path(weights_file)
    return path.with_name(path.name.replace(".weights.h5", ".json"))


#: The HDF5 attributes (of the root group) of a ``.weights.h5`` file that
#: `save_weights` writes: the run's fingerprint (`RunFingerprint.to_json`),
#: the SHA-256 of the file's datasets (`_file_digest`), that of the model's
#: weights (`weights_digest`), that of their dtypes and shapes alone
#: (`weights_layout_digest`, the model the file fits) and the info of its
#: ``.json`` (the best value and its step, the averaged steps), so that a kill
#: between the two writes never pairs the file with the info of the one before.
WEIGHTS_FINGERPRINT_ATTRIBUTE = "keras_transformer.fingerprint"
FILE_CHECKSUM_ATTRIBUTE = "keras_transformer.file_sha256"
WEIGHTS_CHECKSUM_ATTRIBUTE = "keras_transformer.weights_sha256"
WEIGHTS_LAYOUT_ATTRIBUTE = "keras_transformer.weights_layout_sha256"
WEIGHTS_INFO_ATTRIBUTE = "keras_transformer.info"


def _digest_of(arrays: Any) -> str:
    """The SHA-256 of `(name, array)` pairs: names, dtypes, shapes and bytes."""
    import hashlib

    digest = hashlib.sha256()
    for name, array in arrays:
        value = np.ascontiguousarray(array)
        digest.update(f"{name}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def weights_digest(model: keras.Model) -> str:
    """The SHA-256 of a model's weights, in order: what loading the file gives."""
    return _digest_of(
        (i, keras.ops.convert_to_numpy(w)) for i, w in enumerate(model.weights)
    )


def weights_layout_digest(model: keras.Model) -> str:
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


def weights_file_attribute(path: Path, name: str) -> str | None:
    """The text attribute `name` of the ``.weights.h5`` file `path` (the
    fingerprint, the layout digest); None when it has none."""
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
    problem = file_problem(path)
    if problem:
        return problem
    try:
        with h5py.File(path, "r") as file:
            expected = file.attrs.get(FILE_CHECKSUM_ATTRIBUTE)
            found = _file_digest(file)
    except Exception as e:  # noqa: BLE001 - h5py raises OSError, RuntimeError, ...
        return f"{path} is damaged or not an HDF5 weights file ({short_error(e)})"
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
        text = weights_file_attribute(Path(path), WEIGHTS_FINGERPRINT_ATTRIBUTE)
        return None if text is None else RunFingerprint.from_mapping(json.loads(text))
    except (OSError, ValueError, RuntimeError):
        return None


def weights_file_info(path: str | os.PathLike[str]) -> dict | None:
    """The info a ``.weights.h5`` file carries itself (`WEIGHTS_INFO_ATTRIBUTE`:
    what `save_weights` also wrote into the ``.json`` beside it).

    None for a file without it (written before the attribute existed) or
    one HDF5 cannot read; the readers then fall back to the ``.json``.
    """
    try:
        text = weights_file_attribute(Path(path), WEIGHTS_INFO_ATTRIBUTE)
        value = None if text is None else json.loads(text)
    except (OSError, ValueError, RuntimeError):
        return None
    return value if isinstance(value, dict) else None


def weights_info_of_file(path: str | os.PathLike[str]) -> dict | None:
    """The info `path` carries itself (`weights_file_info`), with the
    ``.json`` beside it written anew when that says otherwise (a kill between
    `save_weights`' two writes left the one of the file before); None for a
    file without the attribute. Only for a command that holds the run's
    writer lock (`train`)."""
    path = Path(path)
    info = weights_file_info(path)
    if info is None:
        return None
    text = _info_text(info, weights_file_fingerprint(path))
    beside = weights_info_file(path)
    try:
        stale = json.loads(beside.read_text(encoding="utf-8")) != json.loads(text)
    except (OSError, ValueError):
        stale = True
    if stale:
        write_atomically(beside, text)
    return info


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
    file itself carries `info`, the run's fingerprint and checksums of its
    contents and of the weights (HDF5 attributes of its root:
    `WEIGHTS_INFO_ATTRIBUTE`, `WEIGHTS_FINGERPRINT_ATTRIBUTE`,
    `FILE_CHECKSUM_ATTRIBUTE`, `WEIGHTS_CHECKSUM_ATTRIBUTE`), written before
    it is renamed into place; the readers (`RunFolder.restore`,
    `weights_file_info`) check them, whatever lies beside it: a kill after
    the rename and before the ``.json`` is written leaves that file's
    ``.json`` behind, and the attribute still says what the file holds.

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
                file.attrs[WEIGHTS_CHECKSUM_ATTRIBUTE] = weights_digest(model)
                file.attrs[WEIGHTS_LAYOUT_ATTRIBUTE] = weights_layout_digest(model)
                file.attrs[WEIGHTS_INFO_ATTRIBUTE] = json.dumps(dict(info))
                if fingerprint is not None:
                    file.attrs[WEIGHTS_FINGERPRINT_ATTRIBUTE] = fingerprint.to_json()
                # Last: it covers the other attributes too.
                file.attrs[FILE_CHECKSUM_ATTRIBUTE] = _file_digest(file)
        except OSError:
            raise
        except Exception as e:  # noqa: BLE001 - h5py wraps the OSError
            raise OSError(getattr(e, "errno", None), short_error(e)) from e
    write_atomically(weights_info_file(path), _info_text(info, fingerprint))
    return path


def _info_text(info: Mapping[str, Any], fingerprint: RunFingerprint | None) -> str:
    """The ``.json`` beside a weights file: its `info` and the run's
    `fingerprint` (for people; the file carries both itself)."""
    values = dict(info)
    if fingerprint is not None:
        values["fingerprint"] = dataclasses.asdict(fingerprint)
    return json.dumps(values, indent=2) + "\n"
