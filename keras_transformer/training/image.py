"""The Image Transformer's data stream and trainer, and its old entry point.

An image run is a ``kind="image"`` run of the one
`keras_transformer.training.train` (its recipe:
`keras_transformer.training.image_recipe`): the run folder, resume,
damaged-checkpoint fallback, preemption, strategy, precision and gradient
accumulation are the engine's. This module holds what is the image kind's
own: the batches (`image_batches`, a function of the seed and the step, so
a resumed run sees what an uninterrupted one would), the held-out images
(`load_image_data`) and `ImageTrainer`, the shared `SummedLossTrainer` with
the bits per dimension as its loss (Parmar et al., 2018, §4: trained with
the Transformer's setup, Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon =
1e-9 and the learning rate of Eq. 7).

`train_image_model` and its config classes (`ImageRunConfig`,
`ImageDataConfig`, `ImageTrainingConfig`) are deprecated (removed in 0.4):
they build the ``kind="image"`` `TrainConfig` and call `train`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.images import (
    ImageData,
    ImageSplit,
    load_cifar10,
    load_sample_patches,
)
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.models.image_transformer import ImageTransformerStack
from keras_transformer.training.config import TrainConfig, TrainingConfig
from keras_transformer.training.kinds import (
    _IMAGE_TRAIN_KEYS,
    _OLD_IMAGE_TRAIN_DEFAULTS,
    IMAGE_SOURCES,
    ImageConfig,
    ImageSourceConfig,
)
from keras_transformer.training.loop import train
from keras_transformer.training.trainer import SummedLossTrainer
from keras_transformer.validation import warn_deprecated

__all__ = [
    "IMAGE_RESUMABLE_CHANGES",
    "IMAGE_SOURCES",
    "ImageDataConfig",
    "ImageRunConfig",
    "ImageStatistics",
    "ImageTrainResult",
    "ImageTrainer",
    "ImageTrainingConfig",
    "fold_image_batches",
    "evaluation_batches",
    "image_batches",
    "load_image_data",
    "train_image_model",
]

#: The settings of an `ImageRunConfig` that a run may change and still
#: resume (as ``image.*`` and ``train.*`` they are in
#: `training.config.RESUMABLE_CHANGES`).
IMAGE_RESUMABLE_CHANGES = frozenset(
    {
        "data.directory",
        "data.validation_images",
        "train.train_steps",
        "train.keep_checkpoints",
        "train.log_every",
        "train.evaluation_batch_size",
        "train.jit_compile",
        "train.verbose",
    }
)
#: The ``train`` settings of an `ImageTrainingConfig` that are the
#: ``image`` section's in a `TrainConfig`.
#: The settings of `ImageTrainingConfig` that belong to the ``image`` section.
_IMAGE_BATCH_KEYS = _IMAGE_TRAIN_KEYS


# ------------------------------------------------------------------ configs
@dataclasses.dataclass(frozen=True)
class ImageDataConfig(ImageSourceConfig):
    """Deprecated (removed in 0.4): the ``image`` section of a
    ``kind="image"`` `TrainConfig` (`kinds.ImageConfig`). Which images a
    run trains on: the fields and checks of `kinds.ImageSourceConfig`.
    """

    def __post_init__(self) -> None:
        warn_deprecated(
            "ImageDataConfig", "TrainConfig's image section", stacklevel=None
        )
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class ImageTrainingConfig:
    """Deprecated (removed in 0.4): the ``train`` and ``image`` sections
    of a ``kind="image"`` `TrainConfig`. How long and how a run trains.

    Attributes:
        batch_size: images per update.
        train_steps: the updates of the whole run.
        steps_per_epoch: updates between two checkpoints and validations.
        seed: the seed of the initialisation and of the batches.
        keep_checkpoints: how many checkpoints are kept.
        log_every: updates between two TensorBoard points (and log lines).
        evaluation_batch_size: images per forward pass when evaluating.
        flip: flip half of the training images left to right.
        jit_compile: compile the train step with XLA.
        verbose: Keras' progress bar on a terminal (1) or not (0); off a
            terminal a plain line is printed every `log_every` updates.
    """

    # The defaults an old run folder's config.json is upgraded with.
    batch_size: int = 16
    train_steps: int = _OLD_IMAGE_TRAIN_DEFAULTS["train_steps"]
    steps_per_epoch: int = _OLD_IMAGE_TRAIN_DEFAULTS["steps_per_epoch"]
    seed: int = _OLD_IMAGE_TRAIN_DEFAULTS["seed"]
    keep_checkpoints: int = _OLD_IMAGE_TRAIN_DEFAULTS["keep_checkpoints"]
    log_every: int = _OLD_IMAGE_TRAIN_DEFAULTS["log_every"]
    evaluation_batch_size: int = 32
    flip: bool = False
    jit_compile: bool = _OLD_IMAGE_TRAIN_DEFAULTS["jit_compile"]
    verbose: int = _OLD_IMAGE_TRAIN_DEFAULTS["verbose"]

    def __post_init__(self) -> None:
        warn_deprecated(
            "ImageTrainingConfig", "TrainConfig's train section", stacklevel=None
        )
        self._sections()  # checked by the sections' own checks

    def _sections(self) -> tuple[dict[str, Any], TrainingConfig]:
        """The batch settings of the ``image`` section (`_IMAGE_BATCH_KEYS`)
        and the ``train`` section of the same run.

        Raises:
            ValueError: naming the setting (``image.batch_size``,
                ``train.train_steps``, ...) that is not valid.
        """
        train = dataclasses.asdict(self)
        batches = {key: train.pop(key) for key in _IMAGE_BATCH_KEYS}
        ImageConfig(**batches)  # checks the batch settings
        return batches, TrainingConfig(**train)


@dataclasses.dataclass(frozen=True)
class ImageRunConfig:
    """Deprecated (removed in 0.4): a ``kind="image"`` `TrainConfig`
    (`to_train_config`). Everything a run of `train_image_model` depends on.

    Attributes:
        model: the `ImageTransformerConfig`.
        data: the `ImageDataConfig`.
        train: the `ImageTrainingConfig`.
    """

    model: ImageTransformerConfig = dataclasses.field(
        default_factory=ImageTransformerConfig
    )
    data: ImageDataConfig = dataclasses.field(default_factory=ImageDataConfig)
    train: ImageTrainingConfig = dataclasses.field(default_factory=ImageTrainingConfig)

    def __post_init__(self) -> None:
        warn_deprecated("ImageRunConfig", "TrainConfig(kind='image')", stacklevel=None)
        for name, cls in (
            ("model", ImageTransformerConfig),
            ("data", ImageDataConfig),
            ("train", ImageTrainingConfig),
        ):
            value = getattr(self, name)
            if isinstance(value, dict):
                value = (
                    ImageTransformerConfig.from_dict(value)
                    if cls is ImageTransformerConfig
                    else cls(**value)
                )
                object.__setattr__(self, name, value)
            if not isinstance(value, cls):
                raise ValueError(
                    f"`{name}` must be a {cls.__name__} (or a dict of its "
                    f"fields). Received: {type(value).__name__}"
                )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "data": dataclasses.asdict(self.data),
            "train": dataclasses.asdict(self.train),
        }

    def to_train_config(self) -> TrainConfig:
        """The same run as a ``kind="image"`` `TrainConfig`."""
        batches, train = self.train._sections()
        return TrainConfig(
            kind="image",
            model=self.model,
            image=ImageConfig(**dataclasses.asdict(self.data), **batches),
            train=train,
        )

    @classmethod
    def from_train_config(cls, config: TrainConfig) -> ImageRunConfig:
        """The `ImageRunConfig` of a ``kind="image"`` `TrainConfig`."""
        image = dataclasses.asdict(config.image)
        batches = {key: image.pop(key) for key in _IMAGE_BATCH_KEYS}
        names = {field.name for field in dataclasses.fields(ImageTrainingConfig)}
        train = {
            key: value
            for key, value in dataclasses.asdict(config.train).items()
            if key in names
        }
        return cls(
            model=config.model,
            data=ImageDataConfig(**image),
            train=ImageTrainingConfig(**batches, **train),
        )

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ImageRunConfig:
        """Reads `to_dict` output, or a ``kind="image"`` `TrainConfig` dict
        (a run's ``config.json``)."""
        if "kind" in values:
            return cls.from_train_config(TrainConfig.from_dict(values))
        unknown = sorted(set(values) - {"model", "data", "train"})
        if unknown:
            raise ValueError(
                f"Unknown ImageRunConfig sections: {unknown}. Known: "
                "['data', 'model', 'train']"
            )
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def flat(self) -> dict[str, Any]:
        """``section.field`` settings, for TensorBoard's HParams."""
        flat: dict[str, Any] = {}
        for section, values in self.to_dict().items():
            for key, value in values.items():
                if isinstance(value, dict):
                    for inner, item in value.items():
                        flat[f"{section}.{key}.{inner}"] = item
                else:
                    flat[f"{section}.{key}"] = value
        return flat


# --------------------------------------------------------------------- data
def load_image_data(config: ImageConfig | ImageDataConfig) -> ImageData:
    """The train, validation and test images that `config` (the ``image``
    section) names."""
    if config.source == "cifar10":
        train = load_cifar10(config.directory, "train")
        if config.validation_size >= len(train):
            raise ValueError(
                f"`image.validation_size` must be smaller than the {len(train)} "
                f"training images. Received: {config.validation_size}"
            )
        cut = len(train) - config.validation_size
        validation = ImageSplit(
            train.images[cut:], train.labels[cut:], class_names=train.class_names
        )
        train = ImageSplit(
            train.images[:cut], train.labels[:cut], class_names=train.class_names
        )
        data = ImageData(train, validation, load_cifar10(config.directory, "test"))
    else:
        data = load_sample_patches(config.patch_size, config.train_stride)
    if config.validation_images is not None:
        data.validation = data.validation.take(config.validation_images)
    return data


def image_batches(
    split: ImageSplit,
    batch_size: int,
    seed: int,
    start_step: int = 0,
    flip: bool = False,
    with_labels: bool = False,
) -> tf.data.Dataset:
    """An endless `tf.data` stream of training batches, one per update.

    The batch of update `s` draws `batch_size` images at random (with
    replacement) with the stateless seed `(seed, s)`, so the stream is a
    function of the seed and the step: a run resumed at step `s` sees the
    batches an uninterrupted run would.

    Returns:
        a dataset of ``{"images": int32 (batch, h, w, c)}`` (and
        ``"labels"``, int32 `(batch,)`, with `with_labels`).
    """
    if not len(split):
        raise ValueError("The training split holds no images.")
    images = tf.constant(split.images)
    labels = None
    if with_labels:
        if split.labels is None:
            raise ValueError(
                "This model is class-conditional (num_classes is set) but the "
                "training images have no labels."
            )
        labels = tf.constant(split.labels.astype(np.int32))
    count = len(split)

    def batch(step: Any) -> dict[str, Any]:
        key = tf.stack([tf.constant(seed, tf.int64), step])
        index = tf.random.stateless_uniform(
            [batch_size], seed=key, maxval=count, dtype=tf.int64
        )
        pictures = tf.cast(tf.gather(images, index), tf.int32)
        if flip:
            # (batch,): which images are mirrored left to right.
            mirrored = tf.random.stateless_uniform([batch_size], seed=key + 1) < 0.5
            pictures = tf.where(
                mirrored[:, None, None, None], tf.reverse(pictures, [2]), pictures
            )
        element = {"images": pictures}
        if labels is not None:
            element["labels"] = tf.gather(labels, index)
        return element

    return (
        tf.data.Dataset.counter(start=start_step)
        .map(batch, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(2)
    )


def evaluation_batches(
    split: ImageSplit, batch_size: int, with_labels: bool
) -> tf.data.Dataset:
    element = {"images": split.images.astype(np.int32)}
    if with_labels:
        element["labels"] = split.labels.astype(np.int32)
    return tf.data.Dataset.from_tensor_slices(element).batch(batch_size)


# ------------------------------------------------------------------ trainer
@keras.saving.register_keras_serializable(package="keras_transformer")
class ImageStatistics(keras.metrics.Metric):
    """Sums over the images: bits per dimension times images, and images.

    `result()` gives ``{"loss", "bits_per_dim"}``, the mean bits per
    dimension of the images seen (every image has the same number of
    dimensions), added over the replicas when read outside a replica.
    """

    def __init__(self, name: str = "image_statistics", **kwargs: Any) -> None:
        super().__init__(name=name, dtype="float32", **kwargs)
        self.bits_sum = self.add_variable((), "zeros", name="bits_sum")
        self.images = self.add_variable((), "zeros", name="images")

    def update_sums(self, bits_sum: Any, images: Any) -> None:
        self.bits_sum.assign_add(bits_sum)
        self.images.assign_add(images)

    def sums(self) -> list[Any]:
        return [tf.convert_to_tensor(v.value) for v in (self.bits_sum, self.images)]

    @staticmethod
    def results_from_sums(sums: list[Any]) -> dict[str, Any]:
        bits = tf.math.divide_no_nan(sums[0], sums[1])
        return {"loss": bits, "bits_per_dim": bits}

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("ImageStatistics is updated by ImageTrainer.")

    def result(self) -> dict[str, Any]:
        return self.results_from_sums(self.sums())

    def reset_state(self) -> None:
        for variable in (self.bits_sum, self.images):
            variable.assign(0.0)


class ImageTrainer(SummedLossTrainer):
    """Trains a `build_image_transformer` model on its bits per dimension.

    The shared train step of `SummedLossTrainer`: the loss of an update is
    the bits per dimension of each batch times its images, summed over the
    replicas and the accumulated batches, divided by the images of the
    whole update (each image has the same number of dimensions, so this is
    the mean bits per dimension of the update's images). It is computed in
    float32; `fit` logs it as ``loss`` and ``bits_per_dim`` (validation:
    ``val_bits_per_dim``, the exact mean over the images).

    Elements are ``{"images": int32 (batch, h, w, c)}`` (and ``"labels"``,
    ``(batch,)``, for a class-conditional model), or the same with the `k`
    accumulated batches stacked on axis 1.

    Args:
        image_model: the model.
        clipnorm: clip the update's gradient (summed over the replicas) to
            this global norm (`None`: no clipping).
        **kwargs: `keras.Model` arguments.

    Reference: Parmar et al. (2018), §4-5 (bits per dimension).
    """

    #: One batch of images is (batch, height, width, channels).
    label_rank = 4

    def __init__(
        self, image_model: keras.Model, clipnorm: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(image_model, ImageStatistics(), clipnorm, **kwargs)
        self.stack = ImageTransformerStack.of(image_model)
        self.conditional = self.stack.embedding.num_classes is not None

    @property
    def image_model(self) -> keras.Model:
        """The trained `build_image_transformer` model."""
        return self.wrapped

    def _unpack(self, data: Any) -> tuple[Any, Any]:
        if not isinstance(data, dict) or "images" not in data:
            raise ValueError(
                "ImageTrainer trains on {'images': ...} (and 'labels' for a "
                "class-conditional model); received another structure."
            )
        images = data["images"]
        return (data if self.conditional else images), images

    def _count(self, images: Any) -> Any:
        # Every axis before (height, width, channels) counts images.
        return tf.cast(tf.reduce_prod(tf.shape(images)[:-3]), tf.float32)

    def _forward_sums(self, inputs: Any, images: Any, training: bool) -> tuple:
        outputs = self.wrapped(inputs, training=training)
        bits = tf.cast(self.stack.head.bits_per_dim(outputs, images), tf.float32)
        count = tf.cast(tf.shape(images)[0], tf.float32)
        return bits * count, count


def fold_image_batches(element: dict[str, Any], steps: int) -> dict[str, Any]:
    """``(steps * b, ...)`` images (and labels) into ``(b, steps, ...)``:
    row ``r`` of accumulated batch ``s`` is input row ``r * steps + s``."""

    def fold(x: Any) -> Any:
        shape = tf.shape(x)
        return tf.reshape(x, tf.concat([[shape[0] // steps, steps], shape[1:]], 0))

    return {name: fold(value) for name, value in element.items()}


# ------------------------------------------------------------------- result
@dataclasses.dataclass
class ImageTrainResult:
    """What a run of `train_image_model` produced.

    Attributes:
        workdir: the run's folder.
        log_dir: its TensorBoard logs.
        initial_step: the step the run started (or resumed) from.
        steps: the updates made in total.
        seconds: the wall time of this call's training (without the final
            test evaluation).
        history: Keras' per-epoch logs of this call.
        validation_bits_per_dim: the last validation value, if any.
        test_bits_per_dim: bits per dimension on the test images (`None`
            when preempted).
        model: the trained model.
        preempted: whether SIGTERM or SIGINT stopped the run (a checkpoint
            of step `steps` was saved; train again to resume).
    """

    workdir: Path
    log_dir: Path
    initial_step: int
    steps: int
    seconds: float
    history: dict[str, list[float]]
    validation_bits_per_dim: float | None
    test_bits_per_dim: float | None
    model: keras.Model = dataclasses.field(repr=False)
    preempted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "log_dir": str(self.log_dir),
            "initial_step": self.initial_step,
            "steps": self.steps,
            "seconds": self.seconds,
            "history": self.history,
            "validation_bits_per_dim": self.validation_bits_per_dim,
            "test_bits_per_dim": self.test_bits_per_dim,
            "preempted": self.preempted,
        }


# -------------------------------------------------------------------- train
def train_image_model(
    config: ImageRunConfig,
    workdir: str | os.PathLike[str],
    data: ImageData | None = None,
    *,
    force: bool = False,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    printer: Callable[[str], None] | None = print,
) -> ImageTrainResult:
    """Deprecated (removed in 0.4): ``train(config, workdir)`` with a
    ``kind="image"`` `TrainConfig` (``ImageRunConfig.to_train_config()``).

    Trains an Image Transformer through the one `train`; `data` (`None`:
    the images of ``config.data``) and the other arguments as there.

    Returns:
        an `ImageTrainResult`.

    Reference: Parmar et al. (2018), §4; Vaswani et al. (2017), §5.3-5.4.
    """
    warn_deprecated("train_image_model", "train(config, workdir) with kind='image'")
    if not isinstance(config, ImageRunConfig):
        raise TypeError(
            f"`config` must be an ImageRunConfig. Received: {type(config).__name__}"
        )
    start = time.perf_counter()
    result = train(
        config.to_train_config(),
        workdir,
        data=data,
        force=force,
        callbacks=callbacks,
        printer=printer,
    )
    validation = result.history.get("val_bits_per_dim", [None])[-1]
    return ImageTrainResult(
        workdir=result.workdir,
        log_dir=result.log_dir,
        initial_step=result.initial_step,
        steps=result.steps,
        seconds=time.perf_counter() - start,
        history=result.history,
        validation_bits_per_dim=validation,
        test_bits_per_dim=(
            None if result.evaluation is None else result.evaluation.bits_per_dim
        ),
        model=result.model,
        preempted=result.preempted,
    )
