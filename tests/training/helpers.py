"""Helpers of the training tests: small, fast configs and subprocess runners."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from keras_transformer.training import TrainConfig

REPO_ROOT = Path(__file__).resolve().parents[2]

#: A config that trains in seconds on a CPU: a one-layer model on 300
#: synthetic dates, 3 updates per epoch.
SMALL_CONFIG: dict[str, Any] = {
    "model": {
        "preset": "tiny",
        "num_encoder_layers": 1,
        "num_decoder_layers": 1,
        "d_model": 32,
        "d_ff": 64,
        "num_heads": 2,
        "max_length": 32,
        "optimizer": {"warmup_steps": 3},
    },
    "data": {
        "task": "dates",
        "num_train_examples": 300,
        "num_eval_examples": 16,
        "vocabulary_size": 120,
        "max_sentence_length": 24,
        "max_tokens_per_batch": 256,
        "bucket_boundaries": [8, 16, 24],
    },
    "train": {
        "train_steps": 6,
        "steps_per_epoch": 3,
        "bleu_samples": 8,
        "test_samples": 8,
        "log_every": 1,
        "keep_checkpoints": 5,
        "num_translations": 2,
        "verbose": 0,
    },
}


def small_config(*overrides: str) -> TrainConfig:
    """`SMALL_CONFIG` with ``key=value`` overrides applied."""
    from keras_transformer.training import apply_overrides

    return apply_overrides(SMALL_CONFIG, overrides)


def write_config(
    directory: Path, values: dict[str, Any], name: str = "config.json"
) -> Path:
    """Writes a raw config mapping as JSON and returns its path."""
    path = Path(directory) / name
    path.write_text(json.dumps(values))
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a child Python: quiet TF, this repository importable."""
    env = dict(os.environ)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        KERAS_BACKEND="tensorflow",
        PYTHONPATH=os.pathsep.join(
            filter(None, [str(REPO_ROOT), env.get("PYTHONPATH", "")])
        ),
        # Two cores are shared by several people: keep each child small.
        TF_NUM_INTEROP_THREADS="1",
        TF_NUM_INTRAOP_THREADS="2",
        OMP_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def run_cli(
    args: list[str], timeout: float = 240, **env: str
) -> subprocess.CompletedProcess:
    """Runs ``python -m keras_transformer <args>`` and returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *args],
        cwd=REPO_ROOT,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


#: Overrides that make `SMALL_CONFIG` write a checkpoint every update and
#: skip validation: for tests of checkpoint faults.
FAST_CHECKPOINTS = (
    "train.steps_per_epoch=1",
    "train.validation_every=1000",
    "train.keep_best=false",
    "train.test_samples=2",
    "train.keep_checkpoints=2",
)


def damage_file(path: Path, how: str) -> int:
    """Damages a file the way disks and copies do; returns its size before.

    `how`: ``"truncate"`` (cut to half its size), ``"empty"`` (0 bytes) or
    ``"delete"``.
    """
    path = Path(path)
    size = path.stat().st_size
    if how == "truncate":
        with open(path, "r+b") as file:
            file.truncate(size // 2)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "delete":
        path.unlink()
    else:
        raise ValueError(f"how must be truncate, empty or delete. Received: {how!r}")
    return size


_HOLD_LOCK = """
import sys
from keras_transformer.files import FolderLock
FolderLock(sys.argv[1], sys.argv[2], sys.argv[3] or None).acquire()
print("locked", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def holding_lock(
    folder: str | os.PathLike[str],
    command: str = "keras-transformer train",
    lock_file: str | os.PathLike[str] | None = None,
) -> Iterator[subprocess.Popen]:
    """Another process holds `folder`'s writer lock for the block (then SIGKILL)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD_LOCK, str(folder), command, str(lock_file or "")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env(),
    )
    try:
        assert child.stdout.readline().strip() == "locked"
        yield child
    finally:
        child.kill()
        child.wait()
