"""The translation recipe: the paper's run (§5), one kind of `train`.

Token-budget batches of similar lengths (§5.1), Adam with the learning rate
of Eq. 7 (§5.3), label smoothing (§5.4), greedy-decoding BLEU on a
validation sample with attention maps, and a final translation of the test
pairs scored with sacreBLEU and chrF.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer, TextPairs
from keras_transformer.data.tasks import TaskData
from keras_transformer.models import build_transformer
from keras_transformer.schedules import paper_adam
from keras_transformer.training import checkpoints as ckpt
from keras_transformer.training.callbacks import (
    AttentionImages,
    TranslationEvaluator,
    ValidationTranslations,
)
from keras_transformer.training.checks import check_warmup, text_model_parts
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.evaluation import EvaluationResult
from keras_transformer.training.pipeline import (
    count_updates,
    learn_tokenizer,
    load_task,
    training_dataset,
    validation_dataset,
)
from keras_transformer.training.recipes import Recipe, RunContext
from keras_transformer.training.trainer import TranslationTrainer

__all__ = ["TranslationRecipe"]


def _evaluation_sample(pairs: TextPairs, size: int | None) -> TextPairs:
    return pairs if size is None else pairs.take(min(size, len(pairs)))


class TranslationRecipe(Recipe):
    """Translation (``kind="translation"``, the default): see the module."""

    kind = "translation"
    hparams_metrics = ("bleu", "chrf", "exact_match", "loss")
    evaluates_stored_runs = False
    output_commands = "translate, score and evaluate it"
    try_it = ("translate your own sentences (type one, press Enter)", "translate")

    def load_data(self, config: TrainConfig) -> TaskData:
        return load_task(config.data, seed=config.train.seed)

    def learn_tokenizer(
        self, config: TrainConfig, train_data: TextPairs
    ) -> SubwordTokenizer:
        return learn_tokenizer(train_data, config.data, seed=config.train.seed)

    def updates_per_epoch(
        self, config: TrainConfig, data: TaskData, tokenizer: SubwordTokenizer
    ) -> int:
        return count_updates(
            data.train, tokenizer, config.data, config.train.gradient_accumulation
        )

    def check_schedule(self, config: TrainConfig, total_steps: int) -> None:
        """Raises `ValueError` when the warm-up of Eq. 7 is longer than the
        run (`check_warmup`): the learning rate would only rise, and the run
        end at its peak."""
        check_warmup(config, total_steps)

    def default_updates(self, config: TrainConfig, updates_per_epoch: int) -> int:
        """One epoch, or the warm-up of Eq. 7 twice over when that is longer,
        so that the learning rate decays for as long as it rose (§5.3; one
        epoch of the dates or Multi30k is shorter than the paper's 4,000
        warm-up steps, which `check_schedule` refuses)."""
        return max(updates_per_epoch, 2 * config.model.optimizer.warmup_steps)

    def model_parts(self, config: TrainConfig) -> list[tuple[str, int, str]]:
        return text_model_parts(config, decoder=True)

    def build_model(self, config: TrainConfig, dtype: str | None) -> keras.Model:
        return build_transformer(config.model, dtype=dtype)

    def optimizer(self, config: TrainConfig, total_steps: int) -> Any:
        # Clipping is the trainer's (over the replica-summed gradient).
        optimizer_config = dataclasses.replace(config.model.optimizer, clipnorm=None)
        return paper_adam(config.model.d_model, optimizer_config)

    def trainer(self, config: TrainConfig, model: keras.Model) -> TranslationTrainer:
        return TranslationTrainer(
            model,
            label_smoothing=config.train.label_smoothing,
            clipnorm=config.model.optimizer.clipnorm,
        )

    def training_dataset(
        self,
        config: TrainConfig,
        data: TaskData,
        tokenizer: SubwordTokenizer,
        skip_updates: int,
    ) -> tf.data.Dataset:
        return training_dataset(
            data.train,
            tokenizer,
            config.data,
            accumulation=config.train.gradient_accumulation,
            seed=config.train.seed,
            skip_updates=skip_updates,
        )

    def validation_dataset(
        self, config: TrainConfig, data: TaskData, tokenizer: SubwordTokenizer
    ) -> tf.data.Dataset:
        return validation_dataset(data.validation, tokenizer, config.data)

    def update_size(self, config: TrainConfig) -> str:
        return f"{config.data.max_tokens_per_batch} tokens"

    def training_set(self, config: TrainConfig, data: TaskData) -> str:
        return f"{len(data.train)} {config.data.task} pairs"

    def validation(self, run: RunContext) -> ValidationTranslations:
        """The validation BLEU of `train.bleu_samples` pairs (and the best weights)."""
        train_config = run.config.train
        return ValidationTranslations(
            run.model,
            run.tokenizer,
            _evaluation_sample(run.data.validation, train_config.bleu_samples),
            TranslationEvaluator(run.config),
            run.log_dir,
            every=train_config.validation_every,
            attention_example=train_config.attention_example,
            best_weights=(
                (run.root / ckpt.BEST_WEIGHTS) if train_config.keep_best else None
            ),
            fingerprint=run.fingerprint,
        )

    def best_validation_score(
        self, validation: ValidationTranslations | None
    ) -> float | None:
        # Only the chief validates: the other workers have no validation.
        return None if validation is None else validation.best_bleu

    def chief_callbacks(
        self, run: RunContext, validation: ValidationTranslations
    ) -> list[keras.callbacks.Callback]:
        """The attention maps of one validation pair, drawn into TensorBoard
        (none with ``train.attention_images=false``)."""
        if not len(validation.pairs) or not run.config.train.attention_images:
            return []
        example = min(run.config.train.attention_example, len(validation.pairs) - 1)
        return [
            AttentionImages(
                validation.transformer,
                validation.tokenizer,
                validation.pairs.sources[example],
                run.config,
                run.log_dir,
                every=run.config.train.validation_every,
            )
        ]

    def evaluate(self, run: RunContext, steps: int) -> EvaluationResult:
        """Translates the test pairs with the weights `train.evaluate_with` picks."""
        config, say = run.config, run.say
        train_config = config.train
        model = ckpt.weights_to_evaluate(config, run.root, run.model, say)
        pairs = _evaluation_sample(run.data.test, train_config.test_samples)
        evaluation = TranslationEvaluator(config)(
            model, run.tokenizer, pairs, split=run.data.test_name
        )
        writer = tf.summary.create_file_writer(str(run.log_dir / "test"))
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
