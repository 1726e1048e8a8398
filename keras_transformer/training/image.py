"""Training the Image Transformer: `train_image_model(config, workdir)`.

The recipe of the translation model, applied to images (Parmar et al., 2018,
§4, train with the Transformer's setup): Adam with beta_1 = 0.9, beta_2 =
0.98, epsilon = 1e-9 and the learning rate of Eq. 7 (Vaswani et al., §5.3),
dropout (§5.4), and the negative log-likelihood in bits per dimension as
the loss. A run lives in a work directory::

    config.json   the resolved ImageRunConfig
    checkpoints/  tf.train checkpoints ckpt-<step> (model + optimizer)
    logs/         TensorBoard: train/ and validation/ bits_per_dim and the
                  learning rate; test/ the final bits_per_dim; HParams
    result.json   the final numbers

Running `train_image_model` again on the same directory resumes from the
newest checkpoint (with more `train.train_steps`, a finished run goes on):
the weights, the optimizer's moments and step (hence the learning rate),
and the batches, which are a function of the seed and the step
(`image_batches`), so a resumed run sees what an uninterrupted one would.
SIGTERM or SIGINT saves a checkpoint at the next step and returns
(`ImageTrainResult.preempted`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
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
    check_image_batch,
    load_cifar10,
    load_sample_patches,
)
from keras_transformer.files import FolderLock, write_atomically
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.models.image_transformer import (
    ImageTransformerStack,
    build_image_transformer,
)
from keras_transformer.runs import CHECKPOINT_DIR, CONFIG_FILE, LOG_DIR, RESULT_FILE
from keras_transformer.schedules import paper_adam
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.callbacks import (
    CheckpointCallback,
    NaNGuard,
    PlainProgressLogger,
    PreemptionCheckpoint,
    StopAtStep,
    TrainingPreempted,
    TrainingSummaries,
    is_terminal,
    write_hparams,
)
from keras_transformer.training.checkpoints import ConfigMismatchError
from keras_transformer.training.loop import TrainingDivergedError
from keras_transformer.training.trainer import (
    clip_replica_summed,
    replica_context,
    sum_over_replicas,
)
from keras_transformer.validation import check_positive_int

__all__ = [
    "IMAGE_RESUMABLE_CHANGES",
    "IMAGE_SOURCES",
    "ImageDataConfig",
    "ImageRunConfig",
    "ImageTrainResult",
    "ImageTrainer",
    "ImageTrainingConfig",
    "image_batches",
    "load_image_data",
    "train_image_model",
]

#: Where the images come from: the scikit-image photographs cut into patches,
#: or a local CIFAR-10 folder.
IMAGE_SOURCES = ("sample_patches", "cifar10")
#: Settings a run may change and still resume: its length, logging and
#: evaluation (`train.train_steps` lengthens a finished run).
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


# ------------------------------------------------------------------ configs
@dataclasses.dataclass(frozen=True)
class ImageDataConfig:
    """Which images a run trains on.

    Attributes:
        source: ``"sample_patches"`` (`kt.data.images.load_sample_patches`:
            the scikit-image photographs, split by photograph) or
            ``"cifar10"`` (`load_cifar10` from `directory`).
        directory: the ``cifar-10-batches-py`` folder (``"cifar10"``).
        patch_size, train_stride: the patches of ``"sample_patches"``.
        validation_size: ``"cifar10"``: the last training images held out
            for validation.
        validation_images: evaluate at most this many validation images per
            epoch (`None`: all).
    """

    source: str = "sample_patches"
    directory: str | None = None
    patch_size: int = 32
    train_stride: int = 16
    validation_size: int = 5000
    validation_images: int | None = None

    def __post_init__(self) -> None:
        if self.source not in IMAGE_SOURCES:
            raise ValueError(
                f"`source` must be one of {IMAGE_SOURCES}. Received: "
                f"source={self.source!r}"
            )
        if self.source == "cifar10" and not self.directory:
            raise ValueError(
                "source='cifar10' needs `directory`, the local "
                "cifar-10-batches-py folder."
            )
        for name in ("patch_size", "train_stride", "validation_size"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("validation_images", self.validation_images, allow_none=True)


@dataclasses.dataclass(frozen=True)
class ImageTrainingConfig:
    """How long and how a run trains.

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

    batch_size: int = 16
    train_steps: int = 2000
    steps_per_epoch: int = 200
    seed: int = 0
    keep_checkpoints: int = 3
    log_every: int = 50
    evaluation_batch_size: int = 32
    flip: bool = False
    jit_compile: bool = False
    verbose: int = 1

    def __post_init__(self) -> None:
        for name in (
            "batch_size",
            "train_steps",
            "steps_per_epoch",
            "keep_checkpoints",
            "log_every",
            "evaluation_batch_size",
        ):
            check_positive_int(name, getattr(self, name))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"`seed` must be an integer. Received: seed={self.seed!r}")


@dataclasses.dataclass(frozen=True)
class ImageRunConfig:
    """Everything a run of `train_image_model` depends on.

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

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ImageRunConfig:
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
def load_image_data(config: ImageDataConfig) -> ImageData:
    """The train, validation and test images that `config` names."""
    if config.source == "cifar10":
        train = load_cifar10(config.directory, "train")
        if config.validation_size >= len(train):
            raise ValueError(
                f"`validation_size` must be smaller than the {len(train)} "
                f"training images. Received: validation_size={config.validation_size}"
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


def _evaluation_dataset(
    split: ImageSplit, batch_size: int, with_labels: bool
) -> tf.data.Dataset:
    element = {"images": split.images.astype(np.int32)}
    if with_labels:
        element["labels"] = split.labels.astype(np.int32)
    return tf.data.Dataset.from_tensor_slices(element).batch(batch_size)


# ------------------------------------------------------------------ trainer
class ImageTrainer(keras.Model):
    """Trains a `build_image_transformer` model on its bits per dimension.

    The loss is the mean negative log-likelihood of the batch's intensities
    in bits per dimension (the categorical or DMOL head's `bits_per_dim`),
    computed in float32; `fit` logs it as ``loss`` and ``bits_per_dim``
    (validation: ``val_bits_per_dim``, the exact mean over the images).

    Args:
        image_model: the model.
        clipnorm: clip the gradient to this global norm (`None`: no clipping).
        **kwargs: `keras.Model` arguments.
    """

    def __init__(
        self, image_model: keras.Model, clipnorm: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.image_model = image_model
        self.stack = ImageTransformerStack.of(image_model)
        self.conditional = self.stack.embedding.num_classes is not None
        self.clipnorm = clipnorm
        self.bits_tracker = keras.metrics.Mean(name="bits_per_dim")

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        return [self.bits_tracker]

    def _bits_per_dim(self, data: dict[str, Any], training: bool) -> Any:
        images = data["images"]
        inputs = data if self.conditional else images
        outputs = self.image_model(inputs, training=training)
        return self.stack.head.bits_per_dim(outputs, images)

    def _logs(self) -> dict[str, Any]:
        value = self.bits_tracker.result()
        return {"loss": value, "bits_per_dim": value}

    def train_step(self, data: dict[str, Any]) -> dict[str, Any]:
        variables = self.image_model.trainable_variables
        _, replicas = replica_context()
        with tf.GradientTape() as tape:
            bits = self._bits_per_dim(data, training=True)
            loss = bits
            if replicas > 1:
                # The optimizer sums the replicas' gradients: weigh each
                # replica's mean by its share of the global batch.
                batch = tf.cast(tf.shape(data["images"])[0], tf.float32)
                loss = bits * batch / sum_over_replicas(batch)
        gradients = tape.gradient(loss, variables)
        if self.clipnorm is not None:
            # The update's gradient (summed over replicas), as the text trainer.
            gradients = clip_replica_summed(gradients, self.clipnorm, self.optimizer)
        self.optimizer.apply(gradients, variables)
        self.bits_tracker.update_state(bits)
        return self._logs()

    def test_step(self, data: dict[str, Any]) -> dict[str, Any]:
        bits = self._bits_per_dim(data, training=False)
        # Weighted by the batch size: the exact mean over all images.
        batch = tf.cast(tf.shape(data["images"])[0], "float32")
        self.bits_tracker.update_state(bits, sample_weight=batch)
        return self._logs()

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        return self.image_model(inputs, training=training)


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
def _prepare_config(config: ImageRunConfig, workdir: Path, force: bool) -> None:
    """Writes config.json, or checks it against the stored one.

    Once checkpoints exist, a changed setting is refused (unless `force`),
    except for the `IMAGE_RESUMABLE_CHANGES`; before that the new config
    replaces the old one.
    """
    path = workdir / CONFIG_FILE
    text = config.to_json() + "\n"
    resumed = any((workdir / CHECKPOINT_DIR).glob("ckpt-*.index"))
    if path.is_file() and resumed and not force:
        stored, new = json.loads(path.read_text()), config.to_dict()
        # Read as a stored config: one of 0.1.0 keeps its generation order.
        stored["model"] = ImageTransformerConfig.from_dict(stored["model"]).to_dict()
        changed = sorted(
            f"{section}.{key}"
            for section in set(stored) | set(new)
            for key in set(stored.get(section, {})) | set(new.get(section, {}))
            if stored.get(section, {}).get(key) != new.get(section, {}).get(key)
        )
        blocking = [name for name in changed if name not in IMAGE_RESUMABLE_CHANGES]
        if blocking:
            raise ConfigMismatchError(
                f"{workdir} holds a run with another config (differences: "
                f"{', '.join(blocking)}). Use another work directory, or "
                "force=True to continue it with the new config."
            )
    workdir.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)


def _check_data(config: ImageRunConfig, data: ImageData) -> None:
    shape = config.model.image_shape
    for name in ("train", "validation", "test"):
        split = getattr(data, name)
        check_image_batch(f"data.{name}.images", split.images, shape)
        if config.model.num_classes is not None:
            if split.labels is None:
                raise ValueError(
                    f"The model is class-conditional but data.{name} has no labels."
                )
            if len(split.labels) and (
                split.labels.min() < 0 or split.labels.max() >= config.model.num_classes
            ):
                raise ValueError(
                    f"data.{name}.labels must be classes in [0, "
                    f"{config.model.num_classes}). Received values from "
                    f"{split.labels.min()} to {split.labels.max()}."
                )


def train_image_model(
    config: ImageRunConfig,
    workdir: str | os.PathLike[str],
    data: ImageData | None = None,
    *,
    force: bool = False,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    printer: Callable[[str], None] | None = print,
) -> ImageTrainResult:
    """Trains an Image Transformer; resumes an interrupted run.

    Every epoch (`train.steps_per_epoch` updates) ends with a checkpoint and
    the validation bits per dimension; TensorBoard gets ``bits_per_dim`` and
    the learning rate every `train.log_every` updates, the validation value
    every epoch and the settings (HParams). At the end, the bits per
    dimension of the test images.

    Args:
        config: the run's settings.
        workdir: the run's folder; the same folder and config resume.
        data: the images (`None`: `load_image_data(config.data)`); their
            shape must be `config.model.image_shape`.
        force: continue a run whose stored config differs.
        callbacks: extra Keras callbacks.
        printer: where progress messages go (`None`: silence).

    Returns:
        an `ImageTrainResult`.

    Raises:
        ConfigMismatchError: `workdir` holds a run of another config.
        TrainingDivergedError: the loss became NaN or infinite.
        ValueError: images of the wrong shape, dtype or range.

        FolderLockedError: another process writes `workdir`.

    Reference: Parmar et al. (2018), §4; Vaswani et al. (2017), §5.3-5.4.
    """
    if not isinstance(config, ImageRunConfig):
        raise TypeError(
            f"`config` must be an ImageRunConfig. Received: {type(config).__name__}"
        )
    root = Path(workdir)
    if root.exists() and not root.is_dir():
        raise NotADirectoryError(f"The work directory is a file: {root}")
    root.mkdir(parents=True, exist_ok=True)
    # One writer per run folder, as for translation runs.
    with FolderLock(root, "train_image_model"):
        return _train_image_model(config, root, data, force, callbacks, printer)


def _train_image_model(
    config: ImageRunConfig,
    root: Path,
    data: ImageData | None,
    force: bool,
    callbacks: Sequence[keras.callbacks.Callback],
    printer: Callable[[str], None] | None,
) -> ImageTrainResult:
    """`train_image_model` in its locked run folder."""

    say = printer or (lambda _: None)
    _prepare_config(config, root, force)
    train_config, model_config = config.train, config.model
    keras.utils.set_random_seed(train_config.seed)
    data = data if data is not None else load_image_data(config.data)
    _check_data(config, data)
    conditional = model_config.num_classes is not None

    # The model and optimizer, resumed from the newest checkpoint.
    model = build_image_transformer(model_config)
    optimizer = paper_adam(
        model_config.d_model,
        dataclasses.replace(model_config.optimizer, clipnorm=None),
    )
    trainer = ImageTrainer(model, clipnorm=model_config.optimizer.clipnorm)
    trainer.compile(optimizer=optimizer, jit_compile=train_config.jit_compile)
    optimizer.build(model.trainable_variables)
    checkpoint_dir, log_dir = root / CHECKPOINT_DIR, root / LOG_DIR
    manager = ckpt.resume_checkpoints(
        checkpoint_dir, model, optimizer, train_config.keep_checkpoints
    )
    initial_step = int(optimizer.iterations.numpy())
    total, per_epoch = train_config.train_steps, train_config.steps_per_epoch
    per_epoch = min(per_epoch, total)
    if initial_step:
        say(f"Resuming {root} from step {initial_step} ({manager.latest_checkpoint}).")
    say(
        f"Training {total} updates of {train_config.batch_size} images "
        f"{model_config.image_shape} ({len(data.train)} training images, "
        f"{model.count_params():,} parameters, {model_config.attention} attention, "
        f"{model_config.output} output)."
    )

    nan_guard = NaNGuard()
    run_callbacks: list[keras.callbacks.Callback] = [
        nan_guard,
        StopAtStep(total),
        TrainingSummaries(log_dir, train_config.log_every, names=("bits_per_dim",)),
        CheckpointCallback(manager, nan_guard),
        *callbacks,
    ]
    verbose = train_config.verbose
    if verbose and not is_terminal(sys.stdout):
        verbose = 0
        if printer is not None:
            run_callbacks.append(
                PlainProgressLogger(train_config.log_every, total, printer)
            )
    preemption = PreemptionCheckpoint(manager, nan_guard)
    run_callbacks.append(preemption)
    if initial_step == 0:
        write_hparams(
            log_dir,
            config.flat(),
            trial_id=root.resolve().name,
            metrics=[("bits_per_dim", "validation")],
            session="validation",
        )

    history: dict[str, list[float]] = {}
    start = time.perf_counter()
    try:
        if initial_step < total:
            fit = trainer.fit(
                image_batches(
                    data.train,
                    train_config.batch_size,
                    train_config.seed,
                    start_step=initial_step,
                    flip=train_config.flip,
                    with_labels=conditional,
                ),
                epochs=math.ceil(total / per_epoch),
                initial_epoch=initial_step // per_epoch,
                steps_per_epoch=per_epoch,
                validation_data=_evaluation_dataset(
                    data.validation, train_config.evaluation_batch_size, conditional
                )
                if len(data.validation)
                else None,
                shuffle=False,
                callbacks=run_callbacks,
                verbose=verbose,
            )
            history = {k: [float(v) for v in vs] for k, vs in fit.history.items()}
    except TrainingPreempted:
        for callback in run_callbacks:
            callback.on_train_end()
        past = getattr(getattr(trainer, "history", None), "history", None) or {}
        history = {k: [float(v) for v in vs] for k, vs in past.items()}
    finally:
        preemption.uninstall()
    seconds = time.perf_counter() - start
    if nan_guard.bad_step is not None:
        raise TrainingDivergedError(
            f"Training stopped: the loss became {nan_guard.bad_loss} at step "
            f"{nan_guard.bad_step}. The last good checkpoint is "
            f"{manager.latest_checkpoint or 'none'}. Lower the learning rate "
            "(model.optimizer.learning_rate_scale), lengthen the warm-up or "
            "clip gradients (model.optimizer.clipnorm), then restart with "
            "force=True or in a new work directory."
        )
    preempted = preemption.requested is not None
    if preempted and preemption.checkpoint is None:
        preemption.save()
    steps = int(optimizer.iterations.numpy())
    validation = history.get("val_bits_per_dim", [None])[-1]

    test_bits = None
    if preempted:
        say(
            f"Training stopped by {preemption.signal_name} after update {steps}; "
            f"saved {preemption.checkpoint}. Train again with the same config "
            "and work directory to resume."
        )
    elif len(data.test):
        logs = trainer.evaluate(
            _evaluation_dataset(
                data.test, train_config.evaluation_batch_size, conditional
            ),
            verbose=0,
            return_dict=True,
        )
        test_bits = float(logs["bits_per_dim"])
        writer = tf.summary.create_file_writer(str(log_dir / "test"))
        with writer.as_default(step=steps):
            tf.summary.scalar("bits_per_dim", test_bits)
        writer.close()
        say(f"Test bits/dim after {steps} updates: {test_bits:.4f}")
    result = ImageTrainResult(
        workdir=root,
        log_dir=log_dir,
        initial_step=initial_step,
        steps=steps,
        seconds=seconds,
        history=history,
        validation_bits_per_dim=validation,
        test_bits_per_dim=test_bits,
        model=model,
        preempted=preempted,
    )
    if not preempted:
        write_atomically(
            root / RESULT_FILE, json.dumps(result.to_dict(), indent=2) + "\n"
        )
    return result
