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
"""

from __future__ import annotations

import dataclasses
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
from keras_transformer.models.image_transformer import ImageTransformerStack
from keras_transformer.training.trainer import SummedLossTrainer
from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_fields,
    check_positive_int,
)

__all__ = [
    "IMAGE_SOURCES",
    "ImageConfig",
    "ImageSourceConfig",
    "ImageStatistics",
    "ImageTrainer",
    "fold_image_batches",
    "evaluation_batches",
    "image_batches",
    "load_image_data",
]


# ----------------------------------------------------------------- settings
#: Where the images of an image run come from: the scikit-image photographs
#: cut into patches, or a local CIFAR-10 folder.
IMAGE_SOURCES = ("sample_patches", "cifar10")


@dataclasses.dataclass(frozen=True)
class ImageSourceConfig:
    """Which images an image run trains on: the first fields of the ``image``
    section (`ImageConfig`); their one home and their checks.

    Attributes:
        source: ``"sample_patches"`` (`data.images.load_sample_patches`: the
            scikit-image photographs, split by photograph, the held-out one
            for the test) or ``"cifar10"`` (`load_cifar10` from `directory`).
        directory: the ``cifar-10-batches-py`` folder (``"cifar10"``).
        patch_size, train_stride: the patches of ``"sample_patches"``.
        validation_size: ``"cifar10"``: the last training images held out
            for validation.
        validation_images: evaluate at most this many validation images per
            validation (``None``: all).
    """

    source: str = "sample_patches"
    directory: str | None = None
    patch_size: int = 32
    train_stride: int = 16
    validation_size: int = 5000
    validation_images: int | None = None

    def __post_init__(self) -> None:
        check_choice("image.source", self.source, IMAGE_SOURCES)
        if self.source == "cifar10" and not self.directory:
            raise ValueError(
                "image.source='cifar10' needs `directory` (image.directory), "
                "the local cifar-10-batches-py folder."
            )
        sizes = ("patch_size", "train_stride", "validation_size")
        check_fields(check_positive_int, self, sizes, section="image")
        check_positive_int(
            "image.validation_images", self.validation_images, allow_none=True
        )


@dataclasses.dataclass(frozen=True)
class ImageConfig(ImageSourceConfig):
    """The ``image`` section: an Image Transformer run's images and batches.

    The model is the ``model`` section, an `ImageTransformerConfig`
    (Parmar et al., 2018); the optimizer is the paper's (§4: the
    Transformer's Adam and Eq. 7, ``model.optimizer``); the loss is the
    negative log-likelihood in bits per dimension.

    Attributes:
        source, directory, patch_size, train_stride, validation_size,
            validation_images: the images (`ImageSourceConfig`).
        batch_size: images per batch (global, split over the replicas).
        evaluation_batch_size: images per forward pass when evaluating.
        flip: flip half of the training images left to right.
    """

    batch_size: int = 16
    evaluation_batch_size: int = 32
    flip: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        batches = ("batch_size", "evaluation_batch_size")
        check_fields(check_positive_int, self, batches, section="image")
        check_bool("image.flip", self.flip)


# --------------------------------------------------------------------- data
def load_image_data(config: ImageSourceConfig) -> ImageData:
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
