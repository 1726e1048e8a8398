"""The image recipe: the Image Transformer through the one `train`.

Parmar et al. (2018), §4: the model of ``config.model`` (an
`ImageTransformerConfig`) is trained "with the same setup as the
Transformer": Adam with beta_1 = 0.9, beta_2 = 0.98, epsilon = 1e-9 and the
learning rate of Eq. 7 (``model.optimizer``), on the negative
log-likelihood in bits per dimension. The run is a `train` run like
translation (run folder, resume, damaged-checkpoint fallback, strategy,
precision, accumulation, preemption); this module says what differs:

* data: the images of the ``image`` section (`training.image.load_image_data`);
  no tokenizer (the checkpoints' fingerprint is the run id and the model
  config's hash);
* batches: ``image.batch_size`` images drawn with the stateless seed
  ``(train.seed, step)`` (`image_batches`), ``k`` of them stacked for
  gradient accumulation;
* the loss and the metric: bits per dimension (`ImageTrainer`);
* validation: bits per dimension of the validation images; the weights of
  the lowest are kept (``best.weights.h5``, with ``train.keep_best``) like
  the best BLEU of a translation run, for ``train.evaluate_with="best"``
  and ``keras-transformer evaluate --weights best``;
* the final evaluation: bits per dimension of the test images (for
  ``image.source="sample_patches"`` the patches of the held-out photograph).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data.images import (
    ImageData,
    ImageSplit,
    check_image_batch,
    lossless_bits_per_dim,
)
from keras_transformer.models import (
    ImageTransformerConfig,
    TransformerConfig,
    get_preset,
)
from keras_transformer.models.image_transformer import (
    build_image_transformer,
    image_bits_per_dim,
)
from keras_transformer.schedules import paper_adam
from keras_transformer.training.callbacks import BestValidationWeights, BestWeights
from keras_transformer.training.checks import attention_parameters
from keras_transformer.training.config import (
    TrainConfig,
    resolve_train_section,
)
from keras_transformer.training.image import (
    ImageConfig,
    ImageTrainer,
    evaluation_batches,
    fold_image_batches,
    image_batches,
    load_image_data,
)
from keras_transformer.training.recipes import (
    Evaluation,
    Recipe,
    RunContext,
    SplitsWithoutSkips,
    stored_run,
)
from keras_transformer.training.sections import shorten
from keras_transformer.validation import check_positive_int

__all__ = [
    "ImageEvaluation",
    "ImageRecipe",
    "ImageRunData",
    "check_image_data",
    "complete_run_images",
    "completion_grid",
    "image_evaluation",
]


@dataclasses.dataclass
class ImageRunData(SplitsWithoutSkips):
    """The three splits of an image run (what `ImageRecipe.load_data`
    returns); the image readers refuse a bad image instead of skipping it."""

    train: ImageSplit
    validation: ImageSplit
    test: ImageSplit


@dataclasses.dataclass
class ImageEvaluation(Evaluation):
    """The bits per dimension of a model on a split's images."""

    bits_per_dim: float
    images: int
    split: str
    #: Lossless codecs on the same images, one file per image (PNG, WebP
    #: where Pillow has it): the reference figures of notebook 06.
    codecs: dict[str, float] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        codecs = "".join(f", {name} {bits:.4f}" for name, bits in self.codecs.items())
        return (
            f"{self.bits_per_dim:.4f} bits/dim on {self.images} {self.split} "
            f"images{codecs}"
        )


def check_image_data(config: TrainConfig, data: ImageData) -> ImageRunData:
    """`data` as an `ImageRunData`, its images of the model's shape (and with
    labels in range for a class-conditional model)."""
    shape, classes = config.model.image_shape, config.model.num_classes
    for name in ("train", "validation", "test"):
        split = getattr(data, name)
        check_image_batch(f"data.{name}.images", split.images, shape)
        if classes is None:
            continue
        if split.labels is None:
            raise ValueError(
                f"The model is class-conditional but data.{name} has no labels."
            )
        if len(split.labels) and (
            split.labels.min() < 0 or split.labels.max() >= classes
        ):
            raise ValueError(
                f"data.{name}.labels must be classes in [0, {classes}). Received "
                f"values from {split.labels.min()} to {split.labels.max()}."
            )
    return ImageRunData(data.train, data.validation, data.test)


def image_evaluation(
    model: keras.Model, split: ImageSplit, config: TrainConfig, name: str = "test"
) -> ImageEvaluation:
    """The bits per dimension of `model` on the images of `split`."""
    labels = split.labels if config.model.num_classes is not None else None
    bits = image_bits_per_dim(
        model,
        split.images.astype("int32"),
        labels,
        batch_size=config.options.evaluation_batch_size,
    )
    codecs = {}
    for codec in ("PNG", "WEBP"):
        try:
            codecs[codec] = lossless_bits_per_dim(split.images, codec)
        except ValueError:  # a Pillow without WebP
            continue
    return ImageEvaluation(bits, len(split), name, codecs)


class ImageRecipe(Recipe):
    """The Image Transformer (``kind="image"``): see the module."""

    kind = "image"
    settings = ImageConfig
    model_config = ImageTransformerConfig
    default_model: Any = {}
    reads_data_section = False
    resumable_changes = frozenset(
        {"image.directory", "image.validation_images", "image.evaluation_batch_size"}
    )
    output_commands = "complete and evaluate it"
    try_it = (
        "complete its test images from their top rows",
        "complete",
        "--output",
        "completions.png",
    )
    hparams_metrics = ("bits_per_dim",)
    summary_names = ("bits_per_dim",)
    has_tokenizer = False
    data_folder = ("image", "directory")

    def resolve_sections(self, config: TrainConfig) -> None:
        """`model` an `ImageTransformerConfig` (a mapping of its fields; the
        default model section stands for the default image model), `train` a
        `TrainingConfig`; the `data` section is not read."""
        model = config.model
        if isinstance(model, TransformerConfig) and model == get_preset("tiny"):
            model = ImageTransformerConfig()
        elif isinstance(model, Mapping):
            model = ImageTransformerConfig.from_dict(model)
        if not isinstance(model, ImageTransformerConfig):
            raise ValueError(
                "The `model` section of an image run must be an "
                "ImageTransformerConfig or a JSON object of its settings. "
                f"Received: {shorten(model)}"
            )
        object.__setattr__(config, "model", model)
        object.__setattr__(config, "train", resolve_train_section(config))

    def model_parts(self, config: TrainConfig) -> list[tuple[str, int, str]]:
        model = config.model
        key_dim = model.head_key_dim
        attention = attention_parameters(
            model.d_model, model.num_heads, key_dim, key_dim
        )
        per_layer = attention + 2 * model.d_model * model.d_ff
        return [
            (
                f"{model.num_layers} layer(s)",
                model.num_layers * per_layer,
                f"model.num_layers={model.num_layers}, model.d_model="
                f"{model.d_model}, model.d_ff={model.d_ff}",
            )
        ]

    def load_data(self, config: TrainConfig) -> ImageRunData:
        data = check_image_data(config, load_image_data(config.options))
        if config.train.test_samples is not None:
            data.test = data.test.take(config.train.test_samples)
        return data

    def given_data(self, config: TrainConfig, data: ImageData) -> ImageRunData:
        return check_image_data(config, data)

    def updates_per_epoch(self, config: TrainConfig, data: Any, tokenizer: Any) -> int:
        images = config.options.batch_size * config.train.gradient_accumulation
        return max(1, math.ceil(len(data.train) / images))

    def build_model(self, config: TrainConfig, dtype: str | None) -> keras.Model:
        return build_image_transformer(config.model, dtype=dtype)

    def optimizer(self, config: TrainConfig, total_steps: int) -> Any:
        # Clipping is the trainer's (after the sum over replicas).
        settings = dataclasses.replace(config.model.optimizer, clipnorm=None)
        return paper_adam(config.model.d_model, settings)

    def trainer(self, config: TrainConfig, model: keras.Model) -> ImageTrainer:
        return ImageTrainer(model, clipnorm=config.model.optimizer.clipnorm)

    def training_dataset(
        self, config: TrainConfig, data: Any, tokenizer: Any, skip_updates: int
    ) -> tf.data.Dataset:
        steps = config.train.gradient_accumulation
        dataset = image_batches(
            data.train,
            config.options.batch_size * steps,
            config.train.seed,
            start_step=skip_updates,
            flip=config.options.flip,
            with_labels=config.model.num_classes is not None,
        )
        if steps > 1:
            dataset = dataset.map(lambda element: fold_image_batches(element, steps))
        return dataset

    def validation_dataset(
        self, config: TrainConfig, data: Any, tokenizer: Any
    ) -> tf.data.Dataset | None:
        if not len(data.validation):
            return None
        return evaluation_batches(
            data.validation,
            config.options.evaluation_batch_size,
            config.model.num_classes is not None,
        )

    def validation(self, run: RunContext) -> BestValidationWeights:
        """The lowest validation bits/dim (and, with ``train.keep_best``, its
        weights)."""
        best = BestWeights.of_run(run, "bits_per_dim", lower_is_better=True)
        return BestValidationWeights("val_bits_per_dim", best)

    def best_validation_score(
        self, validation: BestValidationWeights | None
    ) -> float | None:
        return None if validation is None else validation.best_value

    def update_size(self, config: TrainConfig) -> str:
        return f"{config.options.batch_size} images"

    def training_set(self, config: TrainConfig, data: Any) -> str:
        model = config.model
        return (
            f"{len(data.train)} images {model.image_shape} ({model.attention} "
            f"attention, {model.generation_order} order, {model.output} output)"
        )

    def evaluate_saved(
        self, model: keras.Model, tokenizer: Any, config: TrainConfig
    ) -> ImageEvaluation:
        return image_evaluation(model, self.load_data(config).test, config)

    def evaluate(self, run: RunContext, steps: int) -> ImageEvaluation | None:
        """Bits per dimension of the test images (`train.evaluate_with`)."""
        config = run.config
        if not len(run.data.test):
            return None
        model = self.weights_to_evaluate(run)
        evaluation = image_evaluation(model, run.data.test, config)
        self.log_test_value(run, steps, "bits_per_dim", evaluation.bits_per_dim)
        run.say(f"Test bits/dim after {steps} updates: {evaluation.summary()}")
        return evaluation


def completion_grid(
    originals: np.ndarray, completions: list[np.ndarray], given_rows: int
) -> np.ndarray:
    """One uint8 picture: a row per image, its given rows (the rest grey),
    each completion, then the original; a 1-pixel white gap between them."""
    given = originals.copy()
    given[:, given_rows:] = 128
    height, width, channels = originals.shape[1:]
    gap = np.full((height, 1, channels), 255, np.uint8)
    rows = []
    for index in range(len(originals)):
        tiles = [given[index], *(c[index] for c in completions), originals[index]]
        cells = [piece for tile in tiles for piece in (tile.astype(np.uint8), gap)]
        rows.append(np.concatenate(cells[:-1], axis=1))
        rows.append(np.full((1, rows[-1].shape[1], channels), 255, np.uint8))
    return np.concatenate(rows[:-1], axis=0)


def complete_run_images(
    workdir: str | Path,
    output: str | Path,
    *,
    weights: str = "last",
    num_images: int = 4,
    samples: int = 3,
    given_rows: int | None = None,
    temperature: float = 1.0,
    seed: int = 0,
    scale: int = 4,
) -> Path:
    """Completes test images of an image run from their top rows into a PNG
    grid (``keras-transformer complete``).

    Each row of the grid is one test image: its `given_rows` top rows, then
    `samples` completions drawn from the model in its generation order
    (`image_sampling.ImageSampler`, §3.2), then the original.

    Args:
        workdir: the image run's folder.
        output: the PNG file to write.
        weights: ``"last"``, ``"best"``, ``"average"`` or a weights file.
        num_images: the first this many test images.
        samples: completions per image.
        given_rows: rows kept (default: half the image, whole query blocks
            in the block order).
        temperature: 1 samples the model, 0 takes the most likely values.
        seed: the seed of the first completion (the others: seed + i).
        scale: each pixel becomes `scale` x `scale` pixels.

    Returns:
        the path of the PNG written.
    """
    from PIL import Image

    from keras_transformer.image_sampling import ImageSampler

    check_positive_int("num_images", num_images)
    check_positive_int("samples", samples)
    path = Path(output)
    writers = Image.registered_extensions()
    if (
        path.suffix.lower() not in writers
        or writers[path.suffix.lower()] not in Image.SAVE
    ):
        raise ValueError(
            f"{output} does not end in an image file type that can be written: "
            "pass a .png file (lossless; .webp, .jpg and the other endings that "
            "Pillow writes work too)."
        )
    folder, config = stored_run(workdir, num_images)
    if config.kind != "image":
        raise ValueError(
            f"{workdir} is a run of kind {config.kind!r} (its config.json), not an "
            "image run: only an image run's images can be completed."
        )
    model, _ = folder.load(weights)
    test = ImageRecipe().load_data(config).test
    if len(test.images) < num_images:
        raise ValueError(
            f"The run's test split holds {len(test.images)} images, fewer than "
            f"num_images={num_images}: pass at most {len(test.images)}."
        )
    if given_rows is None:
        given_rows = config.model.image_shape[0] // 2
        block = config.model.generation_query_block
        given_rows -= given_rows % block[0] if block else 0
    sampler = ImageSampler(model)
    labels = test.labels if config.model.num_classes is not None else None
    completions = [
        sampler.complete(test.images, given_rows, temperature, seed + i, labels)
        for i in range(samples)
    ]
    grid = completion_grid(test.images, completions, given_rows)
    grid = np.repeat(np.repeat(grid, scale, axis=0), scale, axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid).save(path)
    return path
