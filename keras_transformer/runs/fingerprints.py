"""What a run's checkpoints and weights belong to: its fingerprint.

`RunFingerprint` (run id, tokenizer, model config) is written into
``checkpoints.json`` (`write_checkpoint_metadata`) and into every
checkpoint (`fingerprint_variable`) and weights file, and checked by every
reader (`check_fingerprint`): weights of another run, or without a
fingerprint, are refused unless the user accepts them
(`accepting_weights_without_fingerprint`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import logging
import os
import uuid
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import tensorflow as tf

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.files import read_json_object, short_error, write_atomically
from keras_transformer.runs.layout import (
    CHECKPOINT_METADATA,
    RECORDED_CHECKPOINTS,
    checkpoint_prefixes_on_disk,
)

__all__ = [
    "FINGERPRINT_KEY",
    "CheckpointMismatchError",
    "ForeignCheckpointError",
    "RunFingerprint",
    "accepting_weights_without_fingerprint",
    "changed_model_settings",
    "check_fingerprint",
    "checkpoint_fingerprint",
    "config_hash",
    "fingerprint_variable",
    "model_settings",
    "run_fingerprint",
    "write_checkpoint_metadata",
]

logger = logging.getLogger(__name__)


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
        """``run <id> in <folder> (tokenizer <hash>)``; an image run has no
        tokenizer, and no folder is named where none was recorded."""
        where = f" in {self.workdir}" if self.workdir else ""
        tokenizer = f" (tokenizer {self.tokenizer[:12]})" if self.tokenizer else ""
        return f"run {self.run_id}{where}{tokenizer}"


def config_hash(model_config: Any) -> str:
    """A short hash of a model config (its JSON, or its repr)."""
    import hashlib

    text = (
        model_config.to_json()
        if hasattr(model_config, "to_json")
        else json.dumps(model_config, sort_keys=True, default=repr)
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


#: Model settings that only training reads (dropout rates, the optimizer):
#: a trained model computes the same whatever they say.
TRAINING_ONLY_SETTINGS = frozenset(
    {"dropout", "ffn_dropout", "optimizer", "attention_settings.dropout"}
)


def model_settings(model_config: Any) -> dict[str, Any]:
    """The settings a model computes with, flat (``attention_settings.window``)
    and as JSON writes them, from a model config (`to_dict`) or the mapping
    of ``config.json``'s ``model``; `TRAINING_ONLY_SETTINGS` left out."""
    values = (
        model_config.to_dict() if hasattr(model_config, "to_dict") else model_config
    )
    flat: dict[str, Any] = {}

    def walk(prefix: str, mapping: Mapping[str, Any]) -> None:
        for key, value in mapping.items():
            name = f"{prefix}{key}"
            if name in TRAINING_ONLY_SETTINGS:
                continue
            if isinstance(value, Mapping):
                walk(f"{name}.", value)
            else:
                flat[name] = value

    values = json.loads(json.dumps(values, default=repr))
    if isinstance(values, Mapping):  # a preset's name alone: nothing to compare
        walk("", values)
    return flat


def changed_model_settings(
    checkpoint_dir: str | os.PathLike[str],
    model_section: Any,
    ignore: Collection[str] = (),
) -> list[str]:
    """The settings of `model_section` (``config.json``'s ``model``) that
    differ from those the run's checkpoints were trained with (recorded in
    ``checkpoints.json`` by `write_checkpoint_metadata`), as
    ``num_heads: 4 -> 8``; those named in `ignore` (reported elsewhere)
    left out. Settings one side lacks (a run written by other code) are not
    compared; nothing when none were recorded."""
    recorded = read_checkpoint_metadata(Path(checkpoint_dir)).get("model_settings")
    if not isinstance(recorded, Mapping) or not isinstance(model_section, Mapping):
        return []
    current = model_settings(model_section)
    return [
        f"{name}: {json.dumps(recorded[name])} -> {json.dumps(current[name])}"
        for name in sorted(recorded.keys() & current.keys() - set(ignore))
        if recorded[name] != current[name]
    ]


#: The ``checkpoints.json`` files already warned of as unreadable (once each).
_UNREADABLE_METADATA: set[str] = set()


def read_checkpoint_metadata(checkpoint_dir: Path) -> dict[str, Any]:
    """The content of ``checkpoints.json``; ``{}`` when missing or unreadable.

    An unreadable (garbled, truncated) file is one warning naming it, once
    per process: every command goes on with the checkpoint files on disk
    (`checkpoint_paths`, and the fingerprint they carry), and the next
    `train` of the run writes the file again. So is another run's file
    (copied from its folder: it records a run id that none of the
    checkpoints beside it carries), whose tokenizer and model settings
    would otherwise be blamed on the run's own tokenizer and config.
    """
    path = checkpoint_dir / CHECKPOINT_METADATA
    remedy = (
        f"going on with the checkpoint files in {checkpoint_dir} (and the "
        "fingerprint they carry); the next `keras-transformer train` of this "
        "run writes it again."
    )
    try:
        metadata = read_json_object(path, remedy)
    except FileNotFoundError:
        return {}
    except ValueError as e:
        problem = str(e)
    except OSError as e:
        problem = f"{path} cannot be read ({e.strerror or short_error(e)}): {remedy}"
    else:
        owner = _another_runs_metadata(metadata, path.parent)
        if owner is None:
            return metadata
        problem = f"{path} is {owner}, copied from its folder: {remedy}"
    if str(path) not in _UNREADABLE_METADATA:
        _UNREADABLE_METADATA.add(str(path))
        logger.warning("%s", problem)
    return {}


#: The run id that a checkpoint carries ("" for none), by its prefix and
#: the time its index was written: each checkpoint is read once.
_CARRIED_RUN_IDS: dict[tuple[str, int], str] = {}


def _carried_run_ids(directory: Path) -> set[str]:
    """The run ids that the checkpoints in `directory` carry."""
    found = set()
    for prefix in checkpoint_prefixes_on_disk(directory):
        try:
            key = (str(prefix), os.stat(f"{prefix}.index").st_mtime_ns)
        except OSError:
            continue
        if key not in _CARRIED_RUN_IDS:
            fingerprint = checkpoint_fingerprint(prefix)
            _CARRIED_RUN_IDS[key] = "" if fingerprint is None else fingerprint.run_id
        found.add(_CARRIED_RUN_IDS[key])
    return found - {""}


def _another_runs_metadata(
    metadata: Mapping[str, Any], checkpoint_dir: Path
) -> str | None:
    """Whose ``checkpoints.json`` `metadata` is, when it records a run id
    that none of the checkpoints in `checkpoint_dir` carries (None: the
    checkpoints' own, or nothing to tell)."""
    recorded = metadata.get("run_id")
    if not recorded:
        return None
    carried = _carried_run_ids(checkpoint_dir)
    if not carried or recorded in carried:
        return None
    where = f" in {metadata['workdir']}" if metadata.get("workdir") else ""
    return (
        f"another run's (run {recorded}{where}; the checkpoints beside it carry "
        f"run {', '.join(sorted(carried))})"
    )


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
    stored = read_checkpoint_metadata(directory)
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
    settings = (
        model_settings(model_config)
        if model_config is not None
        else stored.get("model_settings")
    )
    if isinstance(settings, Mapping):
        metadata["model_settings"] = settings
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
    file never turns the checks off. None when nothing records one (no
    checkpoint yet, or only checkpoints without one, which every reader
    refuses: `check_fingerprint`).

    Raises:
        ForeignCheckpointError: when ``checkpoints.json`` is lost and the
            folder's checkpoints belong to more than one run (which is the
            run's own cannot be told).
    """
    metadata = read_checkpoint_metadata(Path(checkpoint_dir))
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


def _fingerprint_of_checkpoints(directory: Path) -> RunFingerprint | None:
    """The one fingerprint the checkpoints in `directory` carry (None: none).

    Raises:
        ForeignCheckpointError: when they carry those of several runs.
    """
    runs: dict[tuple[str, str], list[str]] = {}
    fingerprints: dict[tuple[str, str], RunFingerprint] = {}
    for prefix in checkpoint_prefixes_on_disk(directory):
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
    """The fingerprint saved in a checkpoint (None for one written before
    them, or one too damaged to read it from: an empty data file reads short,
    an `IndexError`)."""
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        if not reader.has_tensor(FINGERPRINT_KEY):
            return None
        value = reader.get_tensor(FINGERPRINT_KEY)
    except (tf.errors.OpError, ValueError, IndexError):
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
    weights without one come from elsewhere (another program, code before
    fingerprints): nothing shows they belong to the run, and they are
    refused unless the user says so; a run resumed within it adopts them.
    Weights of another run (a different fingerprint) are refused even here.

    Example:
    >>> with accepting_weights_without_fingerprint():  # doctest: +SKIP
    ...     model, _ = RunFolder("runs/dates").load("elsewhere/x.weights.h5")
    """
    token = _ACCEPT_WITHOUT_FINGERPRINT.set(True)
    try:
        yield
    finally:
        _ACCEPT_WITHOUT_FINGERPRINT.reset(token)


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
    weights without a fingerprint, with or without a run to compare them
    with (`expected` None), since every checkpoint and weights file this
    package writes carries one, unless the user accepts them
    (`accepting_weights_without_fingerprint`, the command line's
    ``--weights-without-fingerprint``; resuming a run with it adopts its
    checkpoints).

    Raises:
        ForeignCheckpointError: saying whose the weights are, and what to do.
    """
    if found is not None and (expected is None or found.same_run(expected)):
        return
    what = Path(what)
    if found is None:
        if _ACCEPT_WITHOUT_FINGERPRINT.get():
            return
        run = "this run" if expected is None else f"this run ({expected.describe()})"
        raise ForeignCheckpointError(
            f"{what} carries no run fingerprint, so nothing shows that it belongs "
            f"to {run}: every checkpoint and weights file a run writes carries "
            "one. If you know these weights fit this run, pass "
            "--weights-without-fingerprint (in Python: with "
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
