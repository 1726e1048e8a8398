"""The kinds of run one `train()` knows, and the settings of the non-text kinds.

A run config names its kind in a top-level ``"kind"`` key: ``"translation"``
(the default; a stored config without the key is a translation run),
``"classification"`` or ``"image"``. Each kind is a recipe found through
`keras_transformer.training.recipes`. This module holds only the names and
the sections of the kinds' own settings (`ClassificationConfig`,
`ImageConfig` with its `ImageSourceConfig`), without TensorFlow, so that
`training.config` can validate a config before anything is built.
"""

from __future__ import annotations

import dataclasses

from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_fields,
    check_int,
    check_number,
    check_positive_int,
    check_rate,
)

__all__ = [
    "CLASSIFICATION_TASKS",
    "DEFAULT_KIND",
    "IMAGE_SOURCES",
    "KINDS",
    "KIND_SECTIONS",
    "ClassificationConfig",
    "ImageConfig",
    "ImageSourceConfig",
]

#: The kinds of run `train()` knows.
KINDS = ("translation", "classification", "image")
DEFAULT_KIND = "translation"
#: The data sets a classification run reads (`keras_transformer.data.imdb`).
CLASSIFICATION_TASKS = ("imdb",)


@dataclasses.dataclass(frozen=True)
class ClassificationConfig:
    """The ``classification`` section: a sentiment classifier's data and recipe.

    The model is an encoder-only stack of the paper's layers (§3.1: token
    embedding scaled by sqrt(d_model), sinusoidal positions of Eqs. 5-6,
    ``model.num_encoder_layers`` encoder blocks) with mean pooling over the
    real tokens and one sigmoid unit (the attention_keras IMDB test); its
    sizes are the ``model`` section's, its vocabulary ``data.vocabulary_size``
    and its longest review ``data.max_sentence_length``.

    Attributes:
        task: the data set (``"imdb"``, Maas et al. 2011, read from
            ``data.data_dir`` / ``$KT_DATA_DIR/imdb``).
        batch_size: reviews per batch (global, split over the replicas); the
            batches hold reviews of similar lengths (``data.bucket_boundaries``).
        learning_rate: the peak learning rate of AdamW.
        weight_decay: AdamW's decoupled weight decay.
        warmup_share: the share of the updates over which the learning rate
            rises linearly from 0 to `learning_rate`; a cosine decay to 0
            follows.
        tail_tokens: a review longer than ``data.max_sentence_length`` keeps
            its first tokens and its last `tail_tokens` tokens (the verdict
            is often at the end).
        lowercase: lowercase the reviews before tokenizing.
        validation_share: the share of the (shuffled) training reviews held
            out for validation.
        train_examples: use only this many training reviews (``None``: all),
            e.g. for a quick run; taken after the seeded shuffle, so both
            classes are present.
    """

    task: str = "imdb"
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_share: float = 0.1
    tail_tokens: int = 128
    lowercase: bool = True
    validation_share: float = 0.04
    train_examples: int | None = None

    def __post_init__(self) -> None:
        check_choice("classification.task", self.task, CLASSIFICATION_TASKS)
        check_positive_int("classification.batch_size", self.batch_size)
        check_positive_int(
            "classification.train_examples", self.train_examples, allow_none=True
        )
        check_int("classification.tail_tokens", self.tail_tokens, 0)
        check_bool("classification.lowercase", self.lowercase)
        rates = ("weight_decay", "warmup_share", "validation_share")
        check_fields(check_rate, self, rates, section="classification")
        check_number(
            "classification.learning_rate", self.learning_rate, above=0.0, below=1.0
        )
        if not 0 < self.validation_share < 1:
            raise ValueError(
                "`classification.validation_share` must be in (0, 1): some "
                "training reviews are held out for validation. Received: "
                f"{self.validation_share!r}"
            )


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


#: The config section of each kind's own settings (none for translation).
KIND_SECTIONS: dict[str, tuple[str, type]] = {
    "classification": ("classification", ClassificationConfig),
    "image": ("image", ImageConfig),
}
