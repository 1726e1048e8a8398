"""Image runs of `train` (``kind="image"``): bits/dim, checkpoints that
resume, TensorBoard."""

from __future__ import annotations

import glob
import json
import os
import signal
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data.images import ImageData, ImageSplit
from keras_transformer.models import image_bits_per_dim
from keras_transformer.training import (
    ConfigMismatchError,
    TrainConfig,
    TrainingConfig,
    image_batches,
    load_image_data,
    train,
)
from keras_transformer.training.image import ImageConfig
from tests.training.helpers import small_image_model


def _data(seed: int = 0, classes: bool = False) -> ImageData:
    """Smooth 4 x 4 images (a gradient plus noise), so there is something to
    learn, with labels when `classes`."""
    rng = np.random.default_rng(seed)

    def split(count: int) -> ImageSplit:
        base = rng.integers(40, 200, (count, 1, 1, 3))
        ramp = (
            np.arange(4)[None, :, None, None] * 10 + np.arange(4)[None, None, :, None]
        )
        noise = rng.integers(-3, 4, (count, 4, 4, 3))
        images = np.clip(base + ramp + noise, 0, 255).astype(np.uint8)
        labels = rng.integers(0, 3, count).astype(np.int32) if classes else None
        return ImageSplit(images, labels)

    return ImageData(split(64), split(8), split(8))


def _config(steps: int = 6, per_epoch: int = 3, **model_changes) -> TrainConfig:
    return TrainConfig(
        kind="image",
        model=small_image_model(**model_changes),
        options=ImageConfig(batch_size=4, evaluation_batch_size=4),
        train=TrainingConfig(
            train_steps=steps, steps_per_epoch=per_epoch, log_every=1, verbose=0
        ),
    )


def _weights(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(keras.ops.convert_to_numpy(w)) for w in model.weights]


def _scalars(log_dir: Path, run: str) -> dict[str, list[tuple[int, float]]]:
    found: dict[str, list[tuple[int, float]]] = {}
    for path in glob.glob(str(log_dir / run / "events*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name != "scalars":
                    continue
                number = float(tf.make_ndarray(value.tensor))
                found.setdefault(value.tag, []).append((event.step, number))
    return found


def test_a_run_trains_logs_and_evaluates(tmp_path: Path) -> None:
    data = _data()
    config = _config(steps=30, per_epoch=10)
    result = train(config, tmp_path / "run", data=data, printer=None)
    assert result.steps == 30 and result.initial_step == 0 and not result.preempted
    history = result.history["bits_per_dim"]
    assert history[-1] < history[0]
    # The test value is the model's bits/dim on the test images.
    test_bits_per_dim = result.evaluation.bits_per_dim
    assert test_bits_per_dim == pytest.approx(
        image_bits_per_dim(result.model, data.test.images.astype("int32")), rel=1e-4
    )
    saved = json.loads((tmp_path / "run" / "result.json").read_text())
    assert saved["steps"] == 30
    logged = _scalars(result.log_dir, "train")
    assert [step for step, _ in logged["bits_per_dim"]] == list(range(1, 31))
    assert "learning_rate" in logged
    validation = _scalars(result.log_dir, "validation")
    assert [step for step, _ in validation["bits_per_dim"]] == [10, 20, 30]
    test = _scalars(result.log_dir, "test")
    assert test["bits_per_dim"][0][1] == pytest.approx(test_bits_per_dim)
    assert TrainConfig.load(tmp_path / "run" / "config.json") == config


@pytest.mark.slow
def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    data = _data(1)
    straight = train(_config(6, 3), tmp_path / "straight", data=data, printer=None)
    first = train(_config(3, 3), tmp_path / "resumed", data=data, printer=None)
    assert first.steps == 3
    # The same folder with more steps resumes: a run may be lengthened.
    second = train(_config(6, 3), tmp_path / "resumed", data=data, printer=None)
    assert second.initial_step == 3 and second.steps == 6
    for a, b in zip(_weights(straight.model), _weights(second.model), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


class _Terminate(keras.callbacks.Callback):
    """Sends SIGTERM to this process after update `at`, as a scheduler would."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if step == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_killed_run_saves_a_checkpoint_and_resumes(tmp_path: Path) -> None:
    data = _data(2)
    config = _config(8, 4)
    stopped = train(
        config, tmp_path / "run", data=data, callbacks=[_Terminate(5)], printer=None
    )
    assert stopped.preempted and stopped.steps == 5
    assert stopped.evaluation is None
    assert not (tmp_path / "run" / "result.json").exists()
    assert (tmp_path / "run" / "checkpoints" / "ckpt-5.index").is_file()
    resumed = train(config, tmp_path / "run", data=data, printer=None)
    assert resumed.initial_step == 5 and resumed.steps == 8
    uninterrupted = train(config, tmp_path / "other", data=data, printer=None)
    for a, b in zip(
        _weights(uninterrupted.model), _weights(resumed.model), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_another_config_in_the_same_folder_is_refused(tmp_path: Path) -> None:
    data = _data(3)
    train(_config(2, 2), tmp_path / "run", data=data, printer=None)
    wider = _config(2, 2, d_model=32)
    with pytest.raises(ConfigMismatchError, match="model.d_model"):
        train(wider, tmp_path / "run", data=data, printer=None)


def test_class_conditional_training(tmp_path: Path) -> None:
    data = _data(4, classes=True)
    result = train(
        _config(4, 2, num_classes=3), tmp_path / "run", data=data, printer=None
    )
    assert result.steps == 4 and np.isfinite(result.evaluation.bits_per_dim)
    with pytest.raises(ValueError, match="no labels"):
        train(
            _config(4, 2, num_classes=3),
            tmp_path / "other",
            data=_data(4),
            printer=None,
        )


def test_images_of_the_wrong_shape_or_type_are_refused(tmp_path: Path) -> None:
    data = _data(5)
    data.train = ImageSplit(np.zeros((4, 8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match=r"data.train.images.*\(4, 4, 3\)"):
        train(_config(2, 2), tmp_path / "a", data=data, printer=None)
    data = _data(5)
    data.test = ImageSplit(data.test.images.astype(np.float32) / 255.0)
    with pytest.raises(ValueError, match=r"data.test.images.dtype=float32"):
        train(_config(2, 2), tmp_path / "b", data=data, printer=None)


def test_batches_are_a_function_of_the_seed_and_the_step() -> None:
    split = _data(6).train
    stream = list(image_batches(split, 4, seed=3).take(5).as_numpy_iterator())
    resumed = list(
        image_batches(split, 4, seed=3, start_step=3).take(2).as_numpy_iterator()
    )
    for a, b in zip(stream[3:], resumed, strict=True):
        np.testing.assert_array_equal(a["images"], b["images"])
    other = next(image_batches(split, 4, seed=4).as_numpy_iterator())
    assert not np.array_equal(other["images"], stream[0]["images"])
    flipped = next(image_batches(split, 64, seed=3, flip=True).as_numpy_iterator())
    plain = next(image_batches(split, 64, seed=3).as_numpy_iterator())
    mirrored = (flipped["images"] == plain["images"][:, :, ::-1]).all(axis=(1, 2, 3))
    same = (flipped["images"] == plain["images"]).all(axis=(1, 2, 3))
    assert (mirrored | same).all() and mirrored.any() and same.any()


def test_image_section_validation_and_loading() -> None:
    with pytest.raises(ValueError, match="needs `directory`"):
        ImageConfig(source="cifar10")
    with pytest.raises(ValueError, match=r"source='mnist'"):
        ImageConfig(source="mnist")
    with pytest.raises(ValueError, match=r"^`image\.patch_size` must be a positive"):
        ImageConfig(patch_size=0)
    with pytest.raises(ValueError, match=r"^`image\.batch_size` must be a positive"):
        ImageConfig(batch_size=0)
    data = load_image_data(ImageConfig(validation_images=10))
    assert len(data.validation) == 10 and data.train.images.shape[1:] == (32, 32, 3)


def test_a_second_writer_of_an_image_run_is_refused(tmp_path):
    """Image runs take the run folder's writer lock like translation runs."""
    from keras_transformer.files import FolderLockedError
    from tests.training.helpers import holding_lock

    workdir = tmp_path / "run"
    with holding_lock(workdir) as holder:
        with pytest.raises(FolderLockedError, match=f"PID {holder.pid}"):
            train(_config(), workdir, data=_data(), printer=None)
        assert not (workdir / "config.json").exists()
    result = train(_config(), workdir, data=_data(), printer=None)
    assert result.steps == 6
