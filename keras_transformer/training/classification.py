"""The classification recipe: IMDB sentiment through the one `train`.

The attention_keras test the project reproduces (notebook 03): an
encoder-only stack of the paper's layers (`models.classifier`) reads a whole
review and predicts P(positive). The run is a `train` run like translation
(run folder, resume, damaged-checkpoint fallback, strategy, precision,
accumulation, preemption); this module says what differs:

* data: the labelled reviews of `keras_transformer.data.imdb`, shuffled with
  the seed; ``classification.validation_share`` of the training reviews are
  held out for validation; lowercased by default;
* the tokenizer: a SentencePiece vocabulary of ``data.vocabulary_size``
  pieces learned on the training reviews;
* batches of ``classification.batch_size`` reviews of similar lengths
  (``data.bucket_boundaries``), a review cut to its first and last tokens
  when longer than ``data.max_sentence_length``;
* the loss: binary cross-entropy summed over the reviews of the whole
  update (replicas and accumulated batches) divided by their number;
* AdamW with a linear warm-up and a cosine decay (Loshchilov & Hutter, 2019);
* validation: loss and accuracy; the best weights by validation accuracy;
* the final evaluation: accuracy on the test reviews.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.data import SubwordTokenizer
from keras_transformer.data.imdb import REVIEW_READING, cut_review_ids, load_imdb
from keras_transformer.models.classifier import build_classifier
from keras_transformer.training.callbacks import BestValidationWeights, BestWeights
from keras_transformer.training.config import TrainConfig
from keras_transformer.training.recipes import (
    Evaluation,
    Recipe,
    RunContext,
    SplitsWithoutSkips,
)
from keras_transformer.training.sections import DataConfig
from keras_transformer.training.trainer import SummedLossTrainer
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
    "BestAccuracy",
    "ClassificationConfig",
    "ClassificationEvaluation",
    "ClassificationRecipe",
    "ClassificationTrainer",
    "ExampleStatistics",
    "Reviews",
    "ReviewData",
]

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
    tail_tokens: int = REVIEW_READING["tail_tokens"]
    lowercase: bool = REVIEW_READING["lowercase"]
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


#: The label of the padding rows of an accumulation stack (not counted).
NO_LABEL = -1


# ---------------------------------------------------------------------- data
@dataclasses.dataclass
class Reviews:
    """Texts and their labels (0 negative, 1 positive)."""

    texts: list[str]
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, count: int) -> Reviews:
        return Reviews(self.texts[:count], self.labels[:count])


@dataclasses.dataclass
class ReviewData(SplitsWithoutSkips):
    """The three splits of a classification run (what `load_data` returns);
    the IMDB reader refuses a bad line instead of skipping it."""

    train: Reviews
    validation: Reviews
    test: Reviews


def load_reviews(config: TrainConfig) -> ReviewData:
    """The shuffled, split (and lowercased) reviews of the run's data set."""
    settings = config.options
    seed = config.train.seed
    texts, labels = load_imdb("train", data_dir=config.data.data_dir)
    test_texts, test_labels = load_imdb("test", data_dir=config.data.data_dir)
    if settings.lowercase:
        texts = [text.lower() for text in texts]
        test_texts = [text.lower() for text in test_texts]
    order = np.random.default_rng(seed).permutation(len(texts))
    if settings.train_examples is not None:
        order = order[: settings.train_examples]
    shuffled = Reviews([texts[i] for i in order], labels[order])
    held_out = max(1, int(len(shuffled) * settings.validation_share))
    test = Reviews(test_texts, test_labels)
    if config.train.test_samples is not None:
        # The test file is sorted by label: a seeded sample has both classes.
        rng = np.random.default_rng(seed + 1)
        keep = np.sort(rng.permutation(len(test))[: config.train.test_samples])
        test = Reviews([test_texts[i] for i in keep], test_labels[keep])
    return ReviewData(
        train=Reviews(shuffled.texts[held_out:], shuffled.labels[held_out:]),
        validation=shuffled.take(held_out),
        test=test,
    )


def encode_reviews(
    reviews: Reviews, tokenizer: SubwordTokenizer, config: TrainConfig
) -> tuple[np.ndarray, np.ndarray]:
    """(all token ids in one array, each review's length); a review longer
    than ``data.max_sentence_length`` keeps its head and its last
    ``classification.tail_tokens`` tokens."""
    encoded = tokenizer.encode(reviews.texts)
    lengths = np.array([len(ids) for ids in encoded], "int64")
    flat = np.fromiter(itertools.chain.from_iterable(encoded), "int32", lengths.sum())
    cut = cut_review_ids(
        tf.RaggedTensor.from_row_lengths(flat, lengths),
        config.data.max_sentence_length,
        config.options.tail_tokens,
    )
    return cut.flat_values.numpy(), cut.row_lengths().numpy()


def _batches_per_pass(lengths: np.ndarray, config: TrainConfig, rows: int) -> int:
    """How many batches one pass over reviews of `lengths` gives."""
    buckets = np.searchsorted(config.data.bucket_boundaries, lengths, side="right")
    return int(np.ceil(np.bincount(buckets) / rows).sum())


def review_dataset(
    reviews: Reviews,
    tokenizer: SubwordTokenizer,
    config: TrainConfig,
    *,
    seed: int | None = None,
    accumulation: int = 1,
    skip_updates: int = 0,
) -> tf.data.Dataset:
    """Batches ``(token_ids, labels)`` of reviews of similar lengths.

    With a `seed` the stream is endless: every pass reshuffles the reviews
    (a function of the seed), and the first `skip_updates` updates are
    skipped. With ``accumulation=k`` an element holds ``k`` batches stacked
    on axis 1 (labels `NO_LABEL` where a short last batch has no review).
    """
    flat, lengths = encode_reviews(reviews, tokenizer, config)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    tokens = tf.constant(flat)
    rows = config.options.batch_size * accumulation
    dataset = tf.data.Dataset.from_tensor_slices(
        (starts, lengths, reviews.labels.astype("int32"))
    )
    if seed is not None:
        dataset = dataset.shuffle(
            len(reviews), seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.map(
        lambda start, length, label: (tokens[start : start + length], label)
    )
    boundaries = list(config.data.bucket_boundaries)
    dataset = dataset.bucket_by_sequence_length(
        lambda ids, _: tf.shape(ids)[0], boundaries, [rows] * (len(boundaries) + 1)
    )
    if accumulation > 1:
        dataset = dataset.map(lambda ids, labels: _fold(ids, labels, accumulation))
    if seed is None:
        passes = _batches_per_pass(lengths, config, rows)
        return dataset.apply(tf.data.experimental.assert_cardinality(passes))
    return dataset.repeat().skip(skip_updates).prefetch(tf.data.AUTOTUNE)


def _fold(ids: tf.Tensor, labels: tf.Tensor, steps: int) -> tuple[tf.Tensor, tf.Tensor]:
    """``(rows, length)`` into ``(ceil(rows / steps), steps, length)``."""
    rows = tf.shape(ids)[0]
    per_step = (rows + steps - 1) // steps
    missing = per_step * steps - rows
    ids = tf.pad(ids, [[0, missing], [0, 0]])
    labels = tf.pad(labels, [[0, missing]], constant_values=NO_LABEL)
    # Row r of step s is input row r * steps + s.
    return (
        tf.reshape(ids, [per_step, steps, tf.shape(ids)[1]]),
        tf.reshape(labels, [per_step, steps]),
    )


# ------------------------------------------------------------------- trainer
@keras.saving.register_keras_serializable(package="keras_transformer")
class ExampleStatistics(keras.metrics.Metric):
    """Sums over the counted examples: loss, correct predictions, count.

    `result()` gives ``{"loss", "accuracy"}`` of the global batch (the sums
    are added over replicas when read outside a replica).
    """

    def __init__(self, name: str = "example_statistics", **kwargs: Any) -> None:
        super().__init__(name=name, dtype="float32", **kwargs)
        self.loss_sum = self.add_variable((), "zeros", name="loss_sum")
        self.correct = self.add_variable((), "zeros", name="correct")
        self.examples = self.add_variable((), "zeros", name="examples")

    def _sum_variables(self) -> tuple[Any, Any, Any]:
        return self.loss_sum, self.correct, self.examples

    def update_sums(self, loss_sum: Any, correct: Any, examples: Any) -> None:
        for variable, value in zip(
            self._sum_variables(), (loss_sum, correct, examples), strict=True
        ):
            variable.assign_add(value)

    def sums(self) -> list[Any]:
        return [tf.convert_to_tensor(v.value) for v in self._sum_variables()]

    @staticmethod
    def results_from_sums(sums: list[Any]) -> dict[str, Any]:
        loss_sum, correct, examples = sums
        return {
            "loss": tf.math.divide_no_nan(loss_sum, examples),
            "accuracy": tf.math.divide_no_nan(correct, examples),
        }

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("ExampleStatistics is updated by its trainer.")

    def result(self) -> dict[str, Any]:
        return self.results_from_sums(self.sums())

    def reset_state(self) -> None:
        for variable in self._sum_variables():
            variable.assign(0.0)


class ClassificationTrainer(SummedLossTrainer):
    """Trains a `build_classifier` model with binary cross-entropy.

    Elements are ``(token_ids, labels)`` with labels 0 or 1 of shape
    ``(batch,)``, or ``(batch, k)`` for `k` accumulated batches (label
    `NO_LABEL` on padding rows, which count for nothing).
    """

    label_rank = 1

    def __init__(
        self, classifier: keras.Model, clipnorm: float | None = None, **kwargs: Any
    ) -> None:
        super().__init__(classifier, ExampleStatistics(), clipnorm, **kwargs)

    def _unpack(self, data: Any) -> tuple[Any, Any]:
        ids, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if labels is None or sample_weight is not None:
            raise ValueError(
                "ClassificationTrainer trains on (token_ids, labels) without "
                "sample weights; received another structure."
            )
        return ids, labels

    def _count(self, labels: Any) -> Any:
        return tf.reduce_sum(tf.cast(labels >= 0, tf.float32))

    def _forward_sums(self, inputs: Any, labels: Any, training: bool) -> tuple:
        counted = labels >= 0
        # A padding row would be all padding, whose mean pooling is 0/0: give
        # it one token (its loss is multiplied by 0 below).
        first = tf.equal(tf.range(tf.shape(inputs)[1]), 0)[None, :]
        ids = tf.where(first & ~counted[:, None], tf.ones_like(inputs), inputs)
        positive = tf.cast(self.wrapped(ids, training=training)[:, 0], tf.float32)
        positive = tf.clip_by_value(positive, 1e-7, 1.0 - 1e-7)
        target = tf.cast(tf.maximum(labels, 0), tf.float32)
        loss = -(
            target * tf.math.log(positive) + (1 - target) * tf.math.log1p(-positive)
        )
        weights = tf.cast(counted, tf.float32)
        correct = tf.cast(
            tf.equal(tf.cast(positive > 0.5, tf.float32), target), tf.float32
        )
        return (
            tf.reduce_sum(loss * weights),
            tf.reduce_sum(correct * weights),
            tf.reduce_sum(weights),
        )


# ------------------------------------------------------------ best and final
class BestAccuracy(BestValidationWeights):
    """Keeps the weights of the best validation accuracy (``best.weights.h5``,
    with ``{"accuracy": ..., "step": ...}`` in ``best.json``)."""

    def __init__(self, run: RunContext) -> None:
        super().__init__("val_accuracy", BestWeights.of_run(run, "accuracy"))

    @property
    def best_accuracy(self) -> float | None:
        """The best validation accuracy so far (None before the first)."""
        return self.best_value


@dataclasses.dataclass
class ClassificationEvaluation(Evaluation):
    """The accuracy of a classifier on a split."""

    accuracy: float
    examples: int
    split: str

    def summary(self) -> str:
        return f"accuracy {self.accuracy:.4f} on {self.examples} {self.split} reviews"


def classification_accuracy(
    model: keras.Model,
    reviews: Reviews,
    tokenizer: SubwordTokenizer,
    config: TrainConfig,
    split: str = "test",
) -> ClassificationEvaluation:
    """The share of `reviews` that `model` classifies right (P >= 0.5 positive)."""
    predict = tf.function(lambda ids: model(ids, training=False), reduce_retracing=True)
    correct = 0
    for ids, labels in review_dataset(reviews, tokenizer, config):
        positive = predict(ids).numpy()[:, 0] > 0.5
        correct += int(np.sum(positive == labels.numpy().astype(bool)))
    return ClassificationEvaluation(correct / max(len(reviews), 1), len(reviews), split)


# -------------------------------------------------------------------- recipe
class ClassificationRecipe(Recipe):
    """Sentiment classification (``kind="classification"``): see the module."""

    kind = "classification"
    settings = ClassificationConfig
    hparams_metrics = ("accuracy", "loss")
    output_commands = "classify and evaluate it"
    try_it = ("classify your own reviews (type one, press Enter)", "classify")

    def resolve_sections(self, config: TrainConfig) -> None:
        """As a text run's, then refuses a translation task in ``data.task``
        (``--task``), which a classification run does not read."""
        super().resolve_sections(config)
        if config.data.task != DataConfig.task:  # the default, "dates"
            raise ValueError(
                "A classification run reads its reviews from "
                f"`classification.task` ({config.options.task!r}); `data.task` "
                f"({config.data.task!r}, a translation task) is not read. Remove "
                "it (and --task), or set kind to 'translation'."
            )

    def load_data(self, config: TrainConfig) -> ReviewData:
        return load_reviews(config)

    def learn_tokenizer(
        self, config: TrainConfig, train_data: Reviews
    ) -> SubwordTokenizer:
        return SubwordTokenizer.train(
            train_data.texts,
            vocabulary_size=config.data.vocabulary_size,
            model_type=config.data.tokenizer_model_type,  # type: ignore[arg-type]
            seed=config.train.seed,
            max_sentences=config.data.tokenizer_max_sentences,
            num_threads=1,
        )

    def updates_per_epoch(
        self, config: TrainConfig, data: ReviewData, tokenizer: SubwordTokenizer
    ) -> int:
        _, lengths = encode_reviews(data.train, tokenizer, config)
        rows = config.options.batch_size * config.train.gradient_accumulation
        return _batches_per_pass(lengths, config, rows)

    def build_model(self, config: TrainConfig, dtype: str | None) -> keras.Model:
        return build_classifier(config.model, dtype=dtype)

    def optimizer(self, config: TrainConfig, total_steps: int) -> Any:
        settings = config.options
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0,
            max(total_steps, 1),
            warmup_target=settings.learning_rate,
            warmup_steps=int(total_steps * settings.warmup_share),
        )
        return keras.optimizers.AdamW(schedule, weight_decay=settings.weight_decay)

    def trainer(self, config: TrainConfig, model: keras.Model) -> ClassificationTrainer:
        return ClassificationTrainer(model, clipnorm=config.model.optimizer.clipnorm)

    def training_dataset(
        self,
        config: TrainConfig,
        data: ReviewData,
        tokenizer: SubwordTokenizer,
        skip_updates: int,
    ) -> tf.data.Dataset:
        return review_dataset(
            data.train,
            tokenizer,
            config,
            seed=config.train.seed,
            accumulation=config.train.gradient_accumulation,
            skip_updates=skip_updates,
        )

    def validation_dataset(
        self, config: TrainConfig, data: ReviewData, tokenizer: SubwordTokenizer
    ) -> tf.data.Dataset:
        return review_dataset(data.validation, tokenizer, config)

    def update_size(self, config: TrainConfig) -> str:
        return f"{config.options.batch_size} reviews"

    def training_set(self, config: TrainConfig, data: ReviewData) -> str:
        return f"{len(data.train)} {config.options.task} reviews"

    def validation(self, run: RunContext) -> BestAccuracy:
        return BestAccuracy(run)

    def best_validation_score(self, validation: BestAccuracy | None) -> float | None:
        return None if validation is None else validation.best_accuracy

    def evaluate_saved(
        self, model: keras.Model, tokenizer: SubwordTokenizer, config: TrainConfig
    ) -> ClassificationEvaluation:
        return classification_accuracy(
            model, load_reviews(config).test, tokenizer, config
        )

    def evaluate(self, run: RunContext, steps: int) -> ClassificationEvaluation:
        """The accuracy on the test reviews of the `train.evaluate_with` weights."""
        config = run.config
        evaluation = classification_accuracy(
            self.weights_to_evaluate(run),
            run.data.test,
            run.tokenizer,
            config,
            run.data.test_name,
        )
        self.log_test_value(run, steps, "accuracy", evaluation.accuracy)
        run.say(
            f"Evaluation of the {config.train.evaluate_with} weights after {steps} "
            f"updates: {evaluation.summary()}"
        )
        return evaluation
