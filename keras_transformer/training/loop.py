"""`train()`: a complete, resumable training run of the paper's recipe (§5).

The run lives in a work directory (see `kt.training.checkpoints` for its
layout). Starting `train()` again on the same directory with the same
config resumes from the newest checkpoint: same weights, optimizer moments,
step and learning rate, and the data stream continues where the checkpoint
left it (the stream is a function of the seed, and the updates already made
are skipped).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs
from keras_transformer.models import build_transformer
from keras_transformer.schedules import paper_adam
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.callbacks import (
    CheckpointCallback,
    NaNGuard,
    StopAtStep,
    TrainingSummaries,
    ValidationTranslations,
    write_hparams,
)
from keras_transformer.training.config import (
    RESUMABLE_CHANGES,
    TrainConfig,
    config_differences,
)
from keras_transformer.training.distribute import is_chief, make_strategy, worker_index
from keras_transformer.training.evaluation import (
    EvaluationResult,
    evaluate_translations,
    greedy_output_ids,
)
from keras_transformer.training.pipeline import (
    count_updates,
    learn_tokenizer,
    load_task,
    training_dataset,
    validation_dataset,
)
from keras_transformer.training.trainer import TranslationTrainer

__all__ = [
    "ConfigMismatchError",
    "TrainResult",
    "TrainingDivergedError",
    "train",
]

logger = logging.getLogger(__name__)


class ConfigMismatchError(ValueError):
    """A run was restarted in a work directory with a different config."""


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclasses.dataclass
class TrainResult:
    """What a run produced.

    Attributes:
        workdir: this process's work directory (a worker's own folder on
            non-chief workers of a multi-worker run).
        log_dir: TensorBoard logs (``tensorboard --logdir <log_dir>``).
        checkpoint_dir: the kept checkpoints.
        initial_step: the step the run started (or resumed) from.
        steps: optimizer updates done in total (`optimizer.iterations`).
        learning_rate: the learning rate of the next update (Eq. 7).
        history: Keras' per-epoch logs of this call (loss, token_accuracy,
            perplexity, val_* and val_bleu/val_chrf/val_exact_match).
        best_validation_bleu: best BLEU on the validation sample, if any.
        evaluation: the final greedy translation of the test pairs (chief
            only), with sacreBLEU, chrF and their signatures.
        weights_checksum: a checksum of the final weights.
        model: the trained `build_transformer` model.
        tokenizer: its tokenizer.
    """

    workdir: Path
    log_dir: Path
    checkpoint_dir: Path
    initial_step: int
    steps: int
    learning_rate: float
    history: dict[str, list[float]]
    best_validation_bleu: float | None
    evaluation: EvaluationResult | None
    weights_checksum: str
    model: keras.Model = dataclasses.field(repr=False)
    tokenizer: SubwordTokenizer = dataclasses.field(repr=False)

    def to_dict(self, num_translations: int = 5) -> dict[str, Any]:
        return {
            "workdir": str(self.workdir),
            "log_dir": str(self.log_dir),
            "checkpoint_dir": str(self.checkpoint_dir),
            "initial_step": self.initial_step,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "history": self.history,
            "best_validation_bleu": self.best_validation_bleu,
            "evaluation": (
                self.evaluation.to_dict(num_translations) if self.evaluation else None
            ),
            "weights_checksum": self.weights_checksum,
        }


# ------------------------------------------------------------ work directory
def _prepare_config(config: TrainConfig, directory: Path, force: bool) -> bool:
    """Writes config.json, or checks it against the stored one.

    A changed config is refused once checkpoints exist (unless `force`);
    before that nothing was trained, so the new config simply replaces the
    old one, and a tokenizer learned for other data settings is discarded.

    Returns:
        Whether checkpoints of this run exist (the run resumes).
    """
    path = directory / ckpt.CONFIG_FILE
    resumed = bool(ckpt.checkpoint_paths(directory / ckpt.CHECKPOINT_DIR))
    if path.is_file():
        try:
            stored = TrainConfig.load(path)
        except ValueError as e:
            if resumed and not force:
                raise ConfigMismatchError(
                    f"{e}. Pass --force (force=True) to overwrite it with the new "
                    "config."
                ) from e
            stored = None
        changes = config_differences(stored, config) if stored else {}
        blocking = {k: v for k, v in changes.items() if k not in RESUMABLE_CHANGES}
        if blocking and resumed and not force:
            lines = "\n".join(
                f"  {key}: {old!r} -> {new!r}" for key, (old, new) in blocking.items()
            )
            raise ConfigMismatchError(
                f"{directory} holds a run with a different config; resuming it "
                f"with this one would mix two experiments. Differences (stored -> "
                f"new):\n{lines}\nUse another --workdir for a new run, restart "
                "with the stored config (keras-transformer train "
                f"{path} --workdir {directory}), or pass --force (force=True) to "
                "continue this run with the new config."
            )
        if changes:
            logger.warning(
                "%s %s with changed settings: %s",
                "Resuming" if resumed else "Restarting",
                directory,
                ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changes.items()),
            )
        tokenizer_dir = directory / ckpt.TOKENIZER_DIR
        if (
            not resumed
            and tokenizer_dir.is_dir()
            and (
                stored is None
                or any(k.startswith("data.") or k == "train.seed" for k in changes)
            )
        ):
            shutil.rmtree(tokenizer_dir)
    config.save(path)
    return resumed


def _tokenizer(
    config: TrainConfig, directory: Path, train_pairs: TextPairs
) -> SubwordTokenizer:
    """Loads the run's tokenizer, or learns and saves it on a fresh run."""
    folder = directory / ckpt.TOKENIZER_DIR
    if (folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file():
        tokenizer = SubwordTokenizer.load(folder)
    else:
        tokenizer = learn_tokenizer(train_pairs, config.data, seed=config.train.seed)
        tokenizer.save(folder)
    ckpt.check_tokenizer(directory / ckpt.CHECKPOINT_DIR, tokenizer)
    if tokenizer.vocabulary_size != config.data.vocabulary_size:
        raise ValueError(
            f"The tokenizer in {folder} has {tokenizer.vocabulary_size} pieces but "
            f"the config asks for data.vocabulary_size={config.data.vocabulary_size}."
            " Set data.vocabulary_size to the tokenizer's size, or delete the "
            "tokenizer folder of a run that has no checkpoint yet."
        )
    return tokenizer


def _check_same_on_all_workers(strategy: tf.distribute.Strategy, text: str) -> None:
    """Refuses to train when workers run different configs or tokenizers."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    digest = float(int(hashlib.sha256(text.encode()).hexdigest()[:6], 16))

    @tf.function
    def sums() -> Any:
        values = strategy.run(lambda: tf.constant([digest, digest**2], tf.float64))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)

    total, squares = (float(v) for v in sums().numpy())
    workers = strategy.num_replicas_in_sync
    # All values are equal exactly when n * sum(v^2) == sum(v)^2.
    if workers * squares != total**2:
        raise ValueError(
            "The workers disagree on the config or the tokenizer. Start every "
            "worker with the same command, config and data (and, when resuming, "
            "the same work directory contents)."
        )


# ----------------------------------------------------------------- building
def _build(
    config: TrainConfig, strategy: tf.distribute.Strategy
) -> tuple[keras.Model, TranslationTrainer, Any]:
    precision = config.train.precision
    optimizer_config = config.model.optimizer
    with strategy.scope():
        transformer = build_transformer(
            config.model, dtype=None if precision == "float32" else precision
        )
        optimizer = paper_adam(
            config.model.d_model, dataclasses.replace(optimizer_config, clipnorm=None)
        )
        if precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        trainer = TranslationTrainer(
            transformer,
            label_smoothing=config.model.label_smoothing,
            clipnorm=optimizer_config.clipnorm,
        )
        trainer.compile(optimizer=optimizer, jit_compile=config.train.jit_compile)
        optimizer.build(transformer.trainable_variables)
    return transformer, trainer, optimizer


def _restore(
    checkpoint: tf.train.Checkpoint, manager: tf.train.CheckpointManager
) -> None:
    latest = manager.latest_checkpoint
    if latest is None:
        return
    try:
        checkpoint.restore(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise ValueError(
            f"Cannot restore {latest}: it does not match the model built from the "
            f"config ({e}). Resume with the config the checkpoint was trained "
            "with, or start a new run in another work directory."
        ) from e


def _steps(
    config: TrainConfig, data: Any, tokenizer: SubwordTokenizer
) -> tuple[int, int]:
    """(total updates, updates per epoch)."""
    train_config = config.train
    per_epoch = train_config.steps_per_epoch
    if per_epoch is None:
        per_epoch = count_updates(
            data.train, tokenizer, config.data, train_config.gradient_accumulation
        )
    total = train_config.train_steps or (train_config.epochs or 1) * per_epoch
    return total, min(per_epoch, total)


def _evaluation_sample(pairs: TextPairs, size: int | None) -> TextPairs:
    return pairs if size is None else pairs.take(min(size, len(pairs)))


# --------------------------------------------------------------------- train
def train(
    config: TrainConfig,
    workdir: str | os.PathLike[str],
    strategy: tf.distribute.Strategy | str | None = None,
    *,
    force: bool = False,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    printer: Callable[[str], None] | None = print,
) -> TrainResult:
    """Trains a Transformer on a translation task; resumes an interrupted run.

    The recipe is the paper's unless the config says otherwise: token-budget
    batches of similar lengths (§5.1), Adam with beta_1=0.9, beta_2=0.98,
    epsilon=1e-9 and the learning rate of Eq. 7 with 4000 warm-up steps
    (§5.3), dropout 0.1 and label smoothing 0.1 (§5.4). Every epoch ends with
    a checkpoint; every `train.validation_every` epochs with validation loss,
    greedy-decoding BLEU on a validation sample and attention maps, all in
    TensorBoard. At the end the test pairs are translated greedily and scored
    with sacreBLEU and chrF.

    Args:
        config: the run's settings.
        workdir: the work directory: config, tokenizer, checkpoints, logs.
            Reusing it with the same config resumes the run.
        strategy: a `tf.distribute.Strategy`, or ``"default"``,
            ``"mirrored"``, ``"multiworker"`` (see `make_strategy`);
            ``None`` means ``"default"``.
        force: continue a run whose stored config differs from `config`.
        callbacks: extra Keras callbacks.
        printer: where progress messages go (``None`` for silence).

    Returns:
        A `TrainResult`.

    Raises:
        ConfigMismatchError: when `workdir` holds a run with another config
            (unless `force`).
        ValueError: when the tokenizer does not match the checkpoints.
        TrainingDivergedError: when the loss becomes NaN or infinite.
    """
    say = printer or (lambda _: None)
    if not isinstance(config, TrainConfig):
        raise TypeError(
            f"`config` must be a TrainConfig. Received: {type(config).__name__}"
        )
    if strategy is None or isinstance(strategy, str):
        strategy = make_strategy(strategy or "default")
    chief = is_chief(strategy)
    root = Path(workdir)
    directory = root if chief else root / "workers" / f"worker_{worker_index(strategy)}"
    directory.mkdir(parents=True, exist_ok=True)
    log_dir = root / "logs"
    checkpoint_dir = directory / ckpt.CHECKPOINT_DIR
    _prepare_config(config, directory, force)
    train_config, data_config = config.train, config.data

    keras.utils.set_random_seed(train_config.seed)
    data = load_task(data_config, seed=train_config.seed)
    tokenizer = _tokenizer(config, directory, data.train)
    _check_same_on_all_workers(strategy, config.to_json() + tokenizer.fingerprint)
    total_steps, steps_per_epoch = _steps(config, data, tokenizer)

    transformer, trainer, optimizer = _build(config, strategy)
    checkpoint = tf.train.Checkpoint(model=transformer, optimizer=optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, str(checkpoint_dir), max_to_keep=train_config.keep_checkpoints
    )
    _restore(checkpoint, manager)
    ckpt.write_checkpoint_metadata(checkpoint_dir, tokenizer)
    initial_step = int(optimizer.iterations.numpy())
    if initial_step:
        say(
            f"Resuming {directory} from step {initial_step} "
            f"({manager.latest_checkpoint})."
        )
    say(
        f"Training {total_steps} updates ({steps_per_epoch} per epoch, "
        f"{data_config.max_tokens_per_batch} x {train_config.gradient_accumulation} "
        f"tokens per update, {strategy.num_replicas_in_sync} replica(s)) on "
        f"{len(data.train)} {data_config.task} pairs; vocabulary "
        f"{tokenizer.vocabulary_size}."
    )

    def evaluate(
        model: keras.Model,
        tok: SubwordTokenizer,
        pairs: TextPairs,
        split: str = "validation",
    ) -> EvaluationResult:
        return evaluate_translations(
            model,
            tok,
            pairs,
            split=split,
            max_length=data_config.max_length,
            extra_length=train_config.decode_extra_length,
            output_max_length=config.model.max_length,
            bucket_boundaries=data_config.bucket_boundaries,
        )

    def draw_attention(sentence: str) -> np.ndarray:
        from keras_transformer.training.attention_images import attention_image

        source_ids = tokenizer.encode([sentence])[0][: data_config.max_length - 1]
        source_ids = [*source_ids, tokenizer.END_ID]
        output = greedy_output_ids(
            transformer,
            source_ids,
            extra_length=train_config.decode_extra_length,
            output_max_length=config.model.max_length,
        )
        return attention_image(transformer, tokenizer, source_ids, output)

    nan_guard = NaNGuard()
    run_callbacks: list[keras.callbacks.Callback] = [
        nan_guard,
        StopAtStep(total_steps),
    ]
    validation = None
    if chief:
        validation = ValidationTranslations(
            transformer,
            tokenizer,
            _evaluation_sample(data.validation, train_config.bleu_samples),
            evaluate,
            log_dir,
            every=train_config.validation_every,
            attention_example=train_config.attention_example,
            draw_attention=draw_attention,
            best_weights=(root / ckpt.BEST_WEIGHTS) if train_config.keep_best else None,
        )
        run_callbacks += [
            validation,
            TrainingSummaries(log_dir, train_config.log_every),
            keras.callbacks.TensorBoard(
                log_dir=str(log_dir),
                update_freq="epoch",
                write_graph=False,
                profile_batch=0,
            ),
        ]
        if initial_step == 0:
            write_hparams(
                log_dir,
                config.flat(),
                trial_id=root.resolve().name,
                metrics=[
                    ("bleu", "validation"),
                    ("chrf", "validation"),
                    ("loss", "validation"),
                    ("loss", "train"),
                ],
            )
    run_callbacks += [CheckpointCallback(manager, nan_guard), *callbacks]

    history: dict[str, list[float]] = {}
    if initial_step < total_steps:
        fit = trainer.fit(
            training_dataset(
                data.train,
                tokenizer,
                data_config,
                accumulation=train_config.gradient_accumulation,
                seed=train_config.seed,
                skip_updates=initial_step,
            ),
            epochs=math.ceil(total_steps / steps_per_epoch),
            initial_epoch=initial_step // steps_per_epoch,
            steps_per_epoch=steps_per_epoch,
            validation_data=validation_dataset(data.validation, tokenizer, data_config),
            validation_freq=train_config.validation_every,
            shuffle=False,
            callbacks=run_callbacks,
            verbose=train_config.verbose,
        )
        history = {k: [float(v) for v in values] for k, values in fit.history.items()}
    if nan_guard.bad_step is not None:
        latest = manager.latest_checkpoint
        raise TrainingDivergedError(
            f"Training stopped: the loss became {nan_guard.bad_loss} at step "
            f"{nan_guard.bad_step}. The last good checkpoint is "
            f"{latest or 'none (no checkpoint was written)'}. Lower the learning "
            "rate (model.optimizer.learning_rate_scale), lengthen the warm-up "
            "(model.optimizer.warmup_steps), clip gradients "
            "(model.optimizer.clipnorm=1.0), or train in float32 or "
            "mixed_bfloat16 instead of mixed_float16; then restart with --force "
            "(or from a new work directory)."
        )
    steps = int(optimizer.iterations.numpy())
    learning_rate = float(keras.ops.convert_to_numpy(optimizer.learning_rate))

    evaluation = None
    if chief:
        evaluation = _final_evaluation(
            config, root, transformer, tokenizer, data, evaluate, log_dir, steps, say
        )
    result = TrainResult(
        workdir=directory,
        log_dir=log_dir,
        checkpoint_dir=checkpoint_dir,
        initial_step=initial_step,
        steps=steps,
        learning_rate=learning_rate,
        history=history,
        best_validation_bleu=validation.best_bleu if validation else None,
        evaluation=evaluation,
        weights_checksum=ckpt.weights_checksum(transformer),
        model=transformer,
        tokenizer=tokenizer,
    )
    (directory / "result.json").write_text(
        json.dumps(result.to_dict(train_config.num_translations), indent=2) + "\n"
    )
    if chief:
        say(f"TensorBoard logs: {log_dir}  (tensorboard --logdir {log_dir})")
    return result


def _final_evaluation(
    config: TrainConfig,
    root: Path,
    transformer: keras.Model,
    tokenizer: SubwordTokenizer,
    data: Any,
    evaluate: Callable[..., EvaluationResult],
    log_dir: Path,
    steps: int,
    say: Callable[[str], None],
) -> EvaluationResult:
    train_config = config.train
    model = transformer
    if train_config.evaluate_with == "best":
        best = root / ckpt.BEST_WEIGHTS
        if best.is_file():
            model = build_transformer(config.model)
            model.load_weights(best)
        else:
            say(f"No {best} (no validation ran yet): evaluating the last weights.")
    elif train_config.evaluate_with == "average":
        available = len(ckpt.checkpoint_paths(root / ckpt.CHECKPOINT_DIR))
        if available:
            averaged = ckpt.average_checkpoints(
                root, last=min(available, train_config.keep_checkpoints)
            )
            model = build_transformer(config.model)
            model.load_weights(averaged)
    pairs = _evaluation_sample(data.test, train_config.test_samples)
    evaluation = evaluate(model, tokenizer, pairs, split=data.test_name)
    writer = tf.summary.create_file_writer(str(log_dir / "test"))
    with writer.as_default(step=steps):
        tf.summary.scalar("bleu", evaluation.bleu)
        tf.summary.scalar("chrf", evaluation.chrf)
        tf.summary.scalar("exact_match", evaluation.exact_match)
    writer.close()
    say(
        f"Evaluation of the {train_config.evaluate_with} weights after {steps} "
        f"updates, greedy decoding: {evaluation.summary()}"
    )
    for translation in evaluation.translations[: train_config.num_translations]:
        say(f"  source:    {translation.source}")
        say(f"  reference: {translation.reference}")
        say(f"  output:    {translation.hypothesis}")
    return evaluation
