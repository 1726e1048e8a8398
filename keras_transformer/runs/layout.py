"""The names on disk of a run folder, of its checkpoints and of an export.

The file and folder names of a training run (``config.json``,
``checkpoints/``, ``best.weights.h5``, ...) and of an export folder; how a
checkpoint's files are named (``ckpt-<step>`` and its ``.index`` and
``.data-*`` files). The layout itself is drawn in the docstring of
`keras_transformer.runs`.
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

from keras_transformer.files import LOCK_FILE

__all__ = [
    "AVERAGED_INFO",
    "AVERAGED_WEIGHTS",
    "BEST_INFO",
    "BEST_WEIGHTS",
    "CHECKPOINT_DIR",
    "CHECKPOINT_METADATA",
    "CHECKPOINT_STATE",
    "CONFIG_FILE",
    "DATA_RECORD",
    "DAMAGED_SUFFIX",
    "EXPORT_INFO_FILE",
    "EXPORT_MODEL_FILE",
    "LOG_DIR",
    "RECORDED_CHECKPOINTS",
    "RESULT_FILE",
    "RUN_ENTRIES",
    "TOKENIZER_DIR",
    "TRANSLATIONS_DIR",
    "VALIDATION_RECORD",
    "WEIGHTS",
    "WORKERS_DIR",
    "checkpoint_files",
    "checkpoint_prefix",
    "checkpoint_step",
]


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
#: What a run trains on: its training examples as read, and the fingerprints
#: of its data files (`training.data_record`).
DATA_RECORD = "data.json"
#: The step of the last epoch-end checkpoint and whether its epoch's
#: validation was done (`training.epoch_end`).
VALIDATION_RECORD = "validation.json"
#: The folders of the other workers of a multi-worker run (``worker_<i>/``).
WORKERS_DIR = "workers"
#: The Keras model and settings next to an exported SavedModel.
EXPORT_MODEL_FILE = "model.keras"
EXPORT_INFO_FILE = "export.json"
#: What a run folder holds of the run itself: no command writes an output
#: file over one of these (``translations/`` and other names are free).
RUN_ENTRIES = (
    CONFIG_FILE,
    TOKENIZER_DIR,
    CHECKPOINT_DIR,
    BEST_WEIGHTS,
    BEST_INFO,
    AVERAGED_WEIGHTS,
    AVERAGED_INFO,
    LOG_DIR,
    RESULT_FILE,
    DATA_RECORD,
    VALIDATION_RECORD,
    LOCK_FILE,
    WORKERS_DIR,
)
#: The named weights of a run (anything else is a path).
WEIGHTS = ("last", "best", "average")
#: The suffix of a damaged checkpoint file moved aside (never deleted).
DAMAGED_SUFFIX = ".corrupt"
#: The name of the CheckpointManager's state file in a checkpoint folder.
CHECKPOINT_STATE = "checkpoint"
#: The key of ``checkpoints.json`` that lists the checkpoints read back whole
#: when they were written (or found intact on disk by a resuming `train`).
RECORDED_CHECKPOINTS = "checkpoints"


# ------------------------------------------------ a checkpoint's files
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


def checkpoint_prefixes_on_disk(directory: Path) -> list[str]:
    """Every ``ckpt-<step>`` with an ``.index`` file in `directory`, by step."""
    found = []
    for index in directory.glob("ckpt-*.index"):
        step = index.name[len("ckpt-") : -len(".index")]
        if step.isdigit():
            found.append((int(step), str(index)[: -len(".index")]))
    return [prefix for _, prefix in sorted(found)]
