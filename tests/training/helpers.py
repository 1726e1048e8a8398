"""Helpers of the training tests: small, fast configs and subprocess runners."""

from __future__ import annotations

import contextlib
import copy
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
        # Drawing them is most of a validation of this model: only the tests
        # of the images (test_monitoring.py, test_train_run.py) turn them on.
        "attention_images": False,
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


#: The settings of the trained runs the test session shares (tests/conftest.py
#: `shared_translation_run`, ...): three checkpoints (ckpt-3, ckpt-6, ckpt-9),
#: no validation pass, no best weights.
SHARED_RUN_OVERRIDES = (
    "train.train_steps=9",
    "train.validation_every=1000",
    "train.keep_best=false",
    "train.test_samples=2",
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


# ------------------------------------------------------------ classification
_POSITIVE = [
    "great",
    "superb",
    "lovely",
    "moving",
    "wonderful",
    "brilliant",
    "charming",
]
_NEGATIVE = ["awful", "boring", "dull", "terrible", "clumsy", "tedious", "dreadful"]
_NEUTRAL = [
    "the",
    "film",
    "a",
    "plot",
    "actor",
    "scene",
    "story",
    "movie",
    "director",
    "and",
    "was",
    "with",
    "it",
    "this",
    "of",
    "script",
    "camera",
    "music",
    "ending",
    "cast",
]


def write_reviews(directory: Path, train: int = 320, test: int = 64) -> Path:
    """Writes synthetic ``train.tsv``/``test.tsv`` reviews in the IMDB layout.

    Each review mixes neutral words with words of its class, so a tiny
    classifier learns them in a few updates; the rows are sorted by label,
    as in the real files. Returns `directory` (for ``data.data_dir``).
    """
    import numpy as np

    rng = np.random.default_rng(7)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("test", test)):
        rows = ["label\ttext"]
        for label in (0, 1):
            words = _POSITIVE if label else _NEGATIVE
            for _ in range(count // 2):
                length = int(rng.integers(4, 30))
                tokens = rng.choice(_NEUTRAL, length).tolist()
                for position in rng.choice(length, 3):
                    tokens[position] = str(rng.choice(words))
                rows.append(f"{label}\t{' '.join(tokens)}")
        (directory / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return directory


#: The classification twin of `SMALL_CONFIG`: a one-block classifier on 320
#: synthetic reviews (`write_reviews`; set ``data.data_dir``), 3 updates per
#: epoch.
SMALL_CLASSIFICATION_CONFIG: dict[str, Any] = {
    "kind": "classification",
    "model": copy.deepcopy(SMALL_CONFIG["model"]),  # the same one-block model
    "data": {
        "vocabulary_size": 60,
        "max_sentence_length": 24,
        "max_tokens_per_batch": 256,
        "bucket_boundaries": [8, 16, 24],
    },
    "train": {
        "train_steps": 6,
        "steps_per_epoch": 3,
        "test_samples": 16,
        "log_every": 1,
        "keep_checkpoints": 5,
        "verbose": 0,
    },
    "classification": {"batch_size": 16, "validation_share": 0.1},
}


def small_classification_config(data_dir: Path, *overrides: str) -> TrainConfig:
    """`SMALL_CLASSIFICATION_CONFIG` on the reviews in `data_dir`, overridden."""
    from keras_transformer.training import apply_overrides

    return apply_overrides(
        SMALL_CLASSIFICATION_CONFIG, [f"data.data_dir={data_dir}", *overrides]
    )


#: The image twin of `SMALL_CONFIG`: a one-layer Image Transformer in the
#: paper's block order on 4 x 4 patches of the scikit-image photographs,
#: 3 updates per epoch.
SMALL_IMAGE_CONFIG: dict[str, Any] = {
    "kind": "image",
    "model": {
        "image_shape": [4, 4, 3],
        "output": "dmol",
        "num_mixtures": 2,
        "attention": "local_2d",
        "query_block": [2, 2],
        "memory_flange": [1, 1],
        "generation_order": "blocks",
        "num_layers": 1,
        "d_model": 16,
        "d_ff": 32,
        "num_heads": 2,
        "dropout": 0.0,
        "optimizer": {"warmup_steps": 10},
    },
    "image": {
        "patch_size": 4,
        "train_stride": 64,
        "batch_size": 8,
        "evaluation_batch_size": 64,
        "validation_images": 64,
    },
    "train": {
        "train_steps": 6,
        "steps_per_epoch": 3,
        "test_samples": 64,
        "log_every": 1,
        "keep_checkpoints": 5,
        "verbose": 0,
    },
}


def small_image_model(**changes: Any) -> Any:
    """The model of `SMALL_IMAGE_CONFIG` as an `ImageTransformerConfig`, with
    `changes` (the one tiny image model of the tests and scripts)."""
    from keras_transformer.models import ImageTransformerConfig

    return ImageTransformerConfig.from_dict({**SMALL_IMAGE_CONFIG["model"], **changes})


def small_image_config(*overrides: str) -> TrainConfig:
    """`SMALL_IMAGE_CONFIG`, overridden (``--set`` syntax)."""
    from keras_transformer.training import apply_overrides

    return apply_overrides(TrainConfig.from_dict(SMALL_IMAGE_CONFIG), list(overrides))


#: The ``train`` settings of an image run's config.json before kinds.
_OLD_TRAIN_KEYS = (
    "train_steps",
    "steps_per_epoch",
    "seed",
    "keep_checkpoints",
    "log_every",
    "jit_compile",
    "verbose",
)
#: The settings of that layout's ``train`` that are the ``image`` section's now.
_OLD_BATCH_KEYS = ("batch_size", "evaluation_batch_size", "flip")


def old_image_layout(config: TrainConfig) -> dict[str, Any]:
    """`config` in the layout an image run's config.json had before kinds:
    no ``kind``, no ``model.generation_order``, the images as ``data`` and
    the batches in ``train``."""
    import dataclasses

    model = config.model.to_dict()
    del model["generation_order"]
    image = dataclasses.asdict(config.options)
    train = {key: getattr(config.train, key) for key in _OLD_TRAIN_KEYS}
    train.update({key: image.pop(key) for key in _OLD_BATCH_KEYS})
    return {"model": model, "data": image, "train": train}
