"""Keras callbacks of a training run: checkpoints, NaN guard, summaries, BLEU,
attention images.

All summaries are written against the optimizer step (the number of
updates, which survives a restart) rather than Keras' epoch or batch index.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs
from keras_transformer.training.config import TrainConfig

__all__ = [
    "AttentionImages",
    "CheckpointCallback",
    "NaNGuard",
    "StopAtStep",
    "TrainingSummaries",
    "TranslationEvaluator",
    "ValidationTranslations",
    "write_hparams",
]

logger = logging.getLogger(__name__)


def _step(model: keras.Model) -> int:
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def _learning_rate(model: keras.Model) -> float:
    return float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))


def _finite(logs: dict[str, Any] | None) -> bool:
    value = (logs or {}).get("loss")
    return value is None or math.isfinite(float(value))


class TranslationEvaluator:
    """Greedy translation and scoring of pairs with a run's decoding settings.

    Calls `kt.training.evaluation.evaluate_translations` with the run's
    source cap (`data.max_sentence_length`), output allowance
    (`train.extra_length`, §6.1: "input length + 50"), the model's
    positions (`model.max_length`) and the buckets. Used for the validation
    BLEU during training and for the final test evaluation.

    Args:
        config: the run's settings.
    """

    def __init__(self, config: TrainConfig) -> None:
        self.config = config

    def __call__(
        self,
        model: keras.Model,
        tokenizer: SubwordTokenizer,
        pairs: TextPairs,
        split: str = "validation",
    ) -> Any:
        from keras_transformer.training.evaluation import evaluate_translations

        return evaluate_translations(
            model,
            tokenizer,
            pairs,
            split=split,
            max_length=self.config.data.max_sentence_length,
            extra_length=self.config.train.extra_length,
            output_max_length=self.config.model.max_length,
            bucket_boundaries=self.config.data.bucket_boundaries,
        )


class NaNGuard(keras.callbacks.TerminateOnNaN):
    """Stops training at the first NaN or infinite loss, and remembers where.

    `train()` then raises a `TrainingDivergedError` naming the step, instead
    of saving a checkpoint of broken weights.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bad_step: int | None = None
        self.bad_loss: float | None = None

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if not _finite(logs):
            self.bad_step = _step(self.model)
            self.bad_loss = float(logs["loss"])
            self.model.stop_training = True

    def on_batch_end(self, batch: int, logs: dict | None = None) -> None:
        return None


class StopAtStep(keras.callbacks.Callback):
    """Ends training once the optimizer has made `steps` updates."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if _step(self.model) >= self.steps:
            self.model.stop_training = True


class CheckpointCallback(keras.callbacks.Callback):
    """Saves a `tf.train.CheckpointManager` checkpoint at the end of every epoch.

    The checkpoint is numbered by the optimizer step and holds the model and
    the optimizer (its step counter and moments), so a restart resumes with
    the same step and learning rate. Nothing is saved after a NaN loss.
    """

    def __init__(
        self, manager: tf.train.CheckpointManager, nan_guard: NaNGuard | None = None
    ) -> None:
        super().__init__()
        self.manager = manager
        self.nan_guard = nan_guard

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self.nan_guard is not None and self.nan_guard.bad_step is not None:
            return
        step = _step(self.model)
        latest = self.manager.latest_checkpoint
        if latest is not None and latest.endswith(f"-{step}"):
            return
        self.manager.save(checkpoint_number=step)


class TrainingSummaries(keras.callbacks.Callback):
    """Scalars every `log_every` updates: loss, accuracy, perplexity, learning rate.

    Written into ``<log_dir>/train`` with the optimizer step as the x axis;
    the validation values of each epoch go to ``<log_dir>/validation``.
    """

    def __init__(self, log_dir: Path, log_every: int) -> None:
        super().__init__()
        self.log_every = log_every
        self.train_writer = tf.summary.create_file_writer(str(log_dir / "train"))
        self.validation_writer = tf.summary.create_file_writer(
            str(log_dir / "validation")
        )

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = _step(self.model)
        if step % self.log_every or not logs:
            return
        with self.train_writer.as_default(step=step):
            for name in ("loss", "token_accuracy", "perplexity"):
                if name in logs:
                    tf.summary.scalar(name, float(logs[name]))
            tf.summary.scalar("learning_rate", _learning_rate(self.model))

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        step = _step(self.model)
        logs = logs or {}
        with self.train_writer.as_default(step=step):
            tf.summary.scalar("learning_rate", _learning_rate(self.model))
        with self.validation_writer.as_default(step=step):
            for name in ("loss", "token_accuracy", "perplexity"):
                if f"val_{name}" in logs:
                    tf.summary.scalar(name, float(logs[f"val_{name}"]))
        self.train_writer.flush()
        self.validation_writer.flush()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.train_writer.flush()
        self.validation_writer.flush()


class ValidationTranslations(keras.callbacks.Callback):
    """Greedy translations of validation pairs: BLEU, chrF, exact matches.

    Every `every` epochs, the `pairs` are translated greedily; their
    sacreBLEU, chrF and exact-match rate go into the epoch's logs (as
    ``val_bleu``, ``val_chrf``, ``val_exact_match``) and into TensorBoard,
    with the translation of one fixed sentence as text. With `best_weights`
    set, the weights with the best BLEU are saved there (and ``best.json``).

    Args:
        transformer: the model being trained.
        tokenizer: the shared tokenizer.
        pairs: the validation pairs to translate.
        evaluate: ``(model, tokenizer, pairs) -> EvaluationResult``.
        log_dir: TensorBoard log folder (``validation`` below it).
        every: epochs between two evaluations.
        attention_example: index into `pairs` of the sentence whose
            translation is logged as text.
        draw_attention: ``sentence -> image`` (uint8 ``(1, h, w, c)``); a
            run draws its attention maps with `AttentionImages` instead.
        best_weights: where to save the best weights, or ``None``.
    """

    def __init__(
        self,
        transformer: keras.Model,
        tokenizer: SubwordTokenizer,
        pairs: TextPairs,
        evaluate: Callable[..., Any],
        log_dir: Path,
        every: int = 1,
        attention_example: int = 0,
        draw_attention: Callable[[str], np.ndarray] | None = None,
        best_weights: Path | None = None,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.pairs = pairs
        self.evaluate = evaluate
        self.every = every
        self.attention_example = attention_example
        self.draw_attention = draw_attention
        self.best_weights = best_weights
        self.writer = tf.summary.create_file_writer(str(log_dir / "validation"))
        self.best_bleu: float | None = None
        self.best_step: int | None = None
        if best_weights is not None:
            info = best_weights.with_name("best.json")
            if info.is_file() and best_weights.is_file():
                saved = json.loads(info.read_text())
                self.best_bleu, self.best_step = saved["bleu"], saved["step"]

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if (epoch + 1) % self.every or not len(self.pairs):
            return
        if logs is not None and not _finite(logs):
            return
        step = _step(self.model)
        result = self.evaluate(self.transformer, self.tokenizer, self.pairs)
        if logs is not None:
            logs["val_bleu"] = result.bleu
            logs["val_chrf"] = result.chrf
            logs["val_exact_match"] = result.exact_match
        with self.writer.as_default(step=step):
            tf.summary.scalar("bleu", result.bleu)
            tf.summary.scalar("chrf", result.chrf)
            tf.summary.scalar("exact_match", result.exact_match)
            example = min(self.attention_example, len(self.pairs) - 1)
            translation = result.translations[example]
            tf.summary.text(
                "translation",
                f"**source:** {translation.source}  \n"
                f"**reference:** {translation.reference}  \n"
                f"**output:** {translation.hypothesis}",
            )
            if self.draw_attention is not None:
                try:
                    image = self.draw_attention(translation.source)
                    tf.summary.image("attention/encoder_decoder", image, step=step)
                except Exception as e:  # noqa: BLE001 - a picture must not stop training
                    logger.warning("Could not draw the attention maps: %s", e)
        self.writer.flush()
        if self.best_weights is not None and (
            self.best_bleu is None or result.bleu > self.best_bleu
        ):
            self.best_bleu, self.best_step = result.bleu, step
            self.transformer.save_weights(self.best_weights)
            self.best_weights.with_name("best.json").write_text(
                json.dumps({"bleu": result.bleu, "step": step}, indent=2) + "\n"
            )


class AttentionImages(keras.callbacks.Callback):
    """The encoder-decoder attention of one fixed sentence, as a TensorBoard image.

    Every `every` epochs the model translates `sentence` greedily and the
    attention of its last decoder layer, one panel per head, is written to
    ``<log_dir>/validation`` as ``attention/encoder_decoder`` (Figures 3-5
    of the paper show such maps). A failure to draw is logged, never raised:
    a picture must not stop training.

    Args:
        transformer: the model being trained.
        tokenizer: the shared tokenizer.
        sentence: the source sentence drawn.
        config: the run's settings (source cap, `train.extra_length`,
            `model.max_length`).
        log_dir: TensorBoard log folder.
        every: epochs between two images.
    """

    def __init__(
        self,
        transformer: keras.Model,
        tokenizer: SubwordTokenizer,
        sentence: str,
        config: TrainConfig,
        log_dir: Path,
        every: int = 1,
    ) -> None:
        super().__init__()
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.sentence = sentence
        self.config = config
        self.every = every
        self.writer = tf.summary.create_file_writer(str(log_dir / "validation"))

    def image(self) -> np.ndarray:
        """The attention maps of the model's translation of `sentence`."""
        from keras_transformer.training.attention_images import attention_image
        from keras_transformer.training.evaluation import greedy_output_ids

        longest = self.config.data.max_sentence_length
        source_ids = self.tokenizer.encode([self.sentence])[0][: longest - 1]
        source_ids = [*source_ids, self.tokenizer.END_ID]
        output = greedy_output_ids(
            self.transformer,
            source_ids,
            extra_length=self.config.train.extra_length,
            output_max_length=self.config.model.max_length,
        )
        return attention_image(self.transformer, self.tokenizer, source_ids, output)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if (epoch + 1) % self.every or (logs is not None and not _finite(logs)):
            return
        try:
            image = self.image()
        except Exception as e:  # noqa: BLE001 - a picture must not stop training
            logger.warning("Could not draw the attention maps: %s", e)
            return
        with self.writer.as_default(step=_step(self.model)):
            tf.summary.image("attention/encoder_decoder", image)
        self.writer.flush()


def write_hparams(
    log_dir: Path,
    hparams: dict[str, Any],
    trial_id: str,
    metrics: list[tuple[str, str]],
) -> None:
    """Records the run's settings with TensorBoard's HParams plugin.

    Args:
        log_dir: the run's log folder (the HParams "session").
        hparams: flat settings; lists become strings.
        trial_id: a name for the run.
        metrics: ``(tag, group)`` pairs shown next to the settings, e.g.
            ``("bleu", "validation")``.
    """
    from tensorboard.plugins.hparams import api as hp

    values: dict[str, Any] = {}
    for key, value in hparams.items():
        if value is None:
            value = "none"
        elif isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        values[key] = value
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default():
        hp.hparams_config(
            hparams=[hp.HParam(key) for key in values],
            metrics=[
                hp.Metric(tag, group=group, display_name=f"{group}/{tag}")
                for tag, group in metrics
            ],
        )
        hp.hparams(values, trial_id=trial_id)
    writer.flush()
    writer.close()
