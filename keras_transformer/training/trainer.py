"""`TranslationTrainer`: the train step of §5, with gradient accumulation.

The trainer wraps a model from `build_transformer` and computes, in float32,
the label-smoothed cross-entropy of §5.4 summed over the real target tokens
and divided by the number of real tokens in the *whole update*: all replicas
(under `tf.distribute`) and all `k` accumulated batches. The gradients of the
`k` batches are summed before one optimizer update, so an update with
accumulation equals one step on the concatenated batch, whatever the padding.

A training element is either ``((source, target_input), labels)`` of shape
``(batch, length)`` (one batch per update) or the same with shape
``(batch, k, length)``: `k` batches of ``batch`` rows each, stacked on axis 1
so that `tf.distribute` splits the rows (axis 0) over the replicas.
`accumulation_dataset` builds the latter from a token-bucketed dataset.

Gradient clipping by global norm (``model.optimizer.clipnorm``) is applied to
the gradient summed over the replicas (Keras' own `global_clipnorm` clips each
replica's part separately). Under ``mixed_float16`` the optimizer is a
`keras.optimizers.LossScaleOptimizer`: the loss is scaled before
differentiation and updates with non-finite gradients are skipped.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from keras_transformer.conventions import LABEL_SMOOTHING, PAD_ID
from keras_transformer.losses import label_smoothed_nll

__all__ = [
    "SummedLossTrainer",
    "clip_replica_summed",
    "replica_context",
    "sum_over_replicas",
    "TokenStatistics",
    "TranslationTrainer",
    "accumulation_dataset",
]


def replica_context() -> tuple[Any, int]:
    """(the replica context or None, the number of replicas in sync)."""
    context = tf.distribute.get_replica_context()
    if context is None:
        return None, 1
    return context, context.num_replicas_in_sync


def _multi_worker() -> bool:
    """Whether this runs under a MultiWorkerMirroredStrategy of several workers."""
    strategy = tf.distribute.get_strategy()
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return False
    in_multi_worker_mode = getattr(strategy.extended, "_in_multi_worker_mode", None)
    return bool(in_multi_worker_mode()) if in_multi_worker_mode else True


def sum_over_replicas(values: Any) -> Any:
    """Sums tensors over the replicas (identity outside `tf.distribute`)."""
    context, replicas = replica_context()
    if replicas == 1:
        return values
    return context.all_reduce(tf.distribute.ReduceOp.SUM, values)


def clip_replica_summed(
    gradients: list[Any], clipnorm: float, optimizer: Any = None
) -> list[Any]:
    """Clips the update's gradient, summed over the replicas, to `clipnorm`.

    Each replica holds its part of the gradient and the optimizer sums the
    parts; clipping each part alone (Keras' `global_clipnorm`) would clip
    another vector than the update's. The parts are summed here, unscaled
    (a `LossScaleOptimizer`'s `dynamic_scale`), clipped by their global
    norm, and handed back as equal shares (the optimizer sums them again).
    Outside `tf.distribute` this is `tf.clip_by_global_norm`.
    """
    _, replicas = replica_context()
    total = sum_over_replicas(gradients)
    scale = getattr(optimizer, "dynamic_scale", None)
    scale = 1.0 if scale is None else tf.cast(scale, tf.float32)
    unscaled = [g / scale for g in total]
    clipped, _ = tf.clip_by_global_norm(unscaled, clipnorm)
    return [g * scale / replicas for g in clipped]


@keras.saving.register_keras_serializable(package="keras_transformer")
class TokenStatistics(keras.metrics.Metric):
    """Sums over real target tokens: smoothed loss, NLL, correct argmaxes, count.

    `result()` gives ``{"loss", "token_accuracy", "perplexity"}``: the mean
    label-smoothed loss per token (§5.4), the share of tokens whose argmax is
    the label, and ``exp`` of the mean unsmoothed NLL. The sums are
    aggregated over replicas when read outside a replica, so the values are
    those of the global batch.
    """

    def __init__(self, name: str = "token_statistics", **kwargs: Any) -> None:
        super().__init__(name=name, dtype="float32", **kwargs)
        self.loss_sum = self.add_variable((), "zeros", name="loss_sum")
        self.nll_sum = self.add_variable((), "zeros", name="nll_sum")
        self.correct = self.add_variable((), "zeros", name="correct")
        self.tokens = self.add_variable((), "zeros", name="tokens")

    def update_sums(
        self, loss_sum: Any, nll_sum: Any, correct: Any, tokens: Any
    ) -> None:
        self.loss_sum.assign_add(loss_sum)
        self.nll_sum.assign_add(nll_sum)
        self.correct.assign_add(correct)
        self.tokens.assign_add(tokens)

    def sums(self) -> list[Any]:
        return [
            tf.convert_to_tensor(v.value)
            for v in (self.loss_sum, self.nll_sum, self.correct, self.tokens)
        ]

    @staticmethod
    def results_from_sums(sums: list[Any]) -> dict[str, Any]:
        loss_sum, nll_sum, correct, tokens = sums
        return {
            "loss": tf.math.divide_no_nan(loss_sum, tokens),
            "token_accuracy": tf.math.divide_no_nan(correct, tokens),
            "perplexity": tf.exp(tf.math.divide_no_nan(nll_sum, tokens)),
        }

    def update_state(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("TokenStatistics is updated by TranslationTrainer.")

    def result(self) -> dict[str, Any]:
        return self.results_from_sums(self.sums())

    def reset_state(self) -> None:
        for variable in (self.loss_sum, self.nll_sum, self.correct, self.tokens):
            variable.assign(0.0)


class SummedLossTrainer(keras.Model):
    """The train step every kind of run shares: summed losses, accumulation.

    A subclass says what one batch contributes: `_forward_sums` returns
    float32 sums whose first entry is the loss summed over the batch's
    counted items (tokens, reviews) and whose last is their count, and
    `_count` the count alone. The update's loss is the sum over all replicas
    (under `tf.distribute`) and all `k` accumulated batches divided by the
    count of the whole update, so an update with accumulation or several
    replicas equals one step on the concatenated batch. Gradient clipping
    by global norm (`clipnorm`) acts on the gradient summed over the
    replicas; the optimizer may be a `keras.optimizers.LossScaleOptimizer`.

    Args:
        model: the wrapped model (`call` runs it).
        statistics: the metric holding the sums (``update_sums``, ``sums``
            and ``results_from_sums``, like `TokenStatistics`).
        clipnorm: the global norm to clip each update's gradient to, or None.
        **kwargs: `keras.Model` arguments.
    """

    #: The rank of one batch's labels; one more is a stack of `k` batches.
    label_rank = 2

    def __init__(
        self,
        model: keras.Model,
        statistics: keras.metrics.Metric,
        clipnorm: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if clipnorm is not None and not clipnorm > 0:
            raise ValueError(f"`clipnorm` must be positive. Received: {clipnorm!r}")
        self.wrapped = model
        self.clipnorm = clipnorm
        self.statistics = statistics
        # The wrapped model is built; the trainer's inputs may be accumulation
        # stacks that `call` never sees, so Keras must not build it from data.
        self.built = model.built

    @property
    def metrics(self) -> list[keras.metrics.Metric]:
        return [self.statistics]

    def _maybe_symbolic_build(
        self, iterator: Any = None, data_batch: Any = None
    ) -> Any:
        # Under a tf.distribute strategy Keras builds a model by averaging a
        # batch across replicas, which fails for integer token ids under
        # MultiWorkerMirroredStrategy. The model and the optimizer are built
        # before `fit`, so there is nothing to build.
        if self.built and self.optimizer is not None and self.optimizer.built:
            return None
        return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        return self.wrapped(inputs, training=training)

    # ------------------------------------------------------ what a kind says
    def _unpack(self, data: Any) -> tuple[Any, Any]:
        """(inputs, labels) of one element of the dataset."""
        raise NotImplementedError

    def _forward_sums(self, inputs: Any, labels: Any, training: bool) -> tuple:
        """(loss sum, ..., count) of one batch, float32."""
        raise NotImplementedError

    def _count(self, labels: Any) -> Any:
        """The number of counted items (the loss's divisor) of `labels`."""
        raise NotImplementedError

    # ------------------------------------------------------------- helpers
    def _logs(self) -> dict[str, Any]:
        """Exact global metric values: the sums are added over replicas first."""
        # One stacked tensor: a single all-reduce, and an op placed on the
        # replica's device (reads of sync-on-read variables carry none, which
        # MultiWorkerMirroredStrategy's all-reduce refuses).
        sums = sum_over_replicas(tf.stack(self.statistics.sums()))
        logs = self.statistics.results_from_sums(tf.unstack(sums))
        if _multi_worker():
            # Keras averages the logs of several workers with
            # `strategy.reduce("MEAN", value, axis=0)`, which needs rank >= 1.
            logs = {name: tf.reshape(value, [1]) for name, value in logs.items()}
        return logs

    def _gradients(self, inputs: Any, labels: Any, count: Any) -> list[Any]:
        """Gradients of (this batch's loss sum / `count`), loss-scaled."""
        variables = self.wrapped.trainable_variables
        with tf.GradientTape() as tape:
            sums = self._forward_sums(inputs, labels, training=True)
            loss = tf.math.divide_no_nan(sums[0], count)
            scaled = self.optimizer.scale_loss(loss) if self.optimizer else loss
        gradients = tape.gradient(scaled, variables)
        self.statistics.update_sums(*sums)
        return [
            tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
            for g, v in zip(gradients, variables, strict=True)
        ]

    def _clip(self, gradients: list[Any]) -> list[Any]:
        """Clips the replica-summed, unscaled gradient to `clipnorm`."""
        return clip_replica_summed(gradients, self.clipnorm, self.optimizer)

    def _accumulated_gradients(self, inputs: Any, labels: Any, count: Any) -> list[Any]:
        """The summed gradients of the `k` batches stacked on axis 1."""
        steps = labels.shape[1]
        if steps is None:
            raise ValueError(
                "Accumulated batches need a static number of steps on axis 1; "
                "build the dataset with accumulation_dataset()."
            )

        def body(index: Any, accumulated: list[Any]) -> tuple[Any, list[Any]]:
            gradients = self._gradients(
                tf.nest.map_structure(lambda x: x[:, index], inputs),
                labels[:, index],
                count,
            )
            return index + 1, [
                a + g for a, g in zip(accumulated, gradients, strict=True)
            ]

        zeros = [tf.zeros_like(v) for v in self.wrapped.trainable_variables]
        _, gradients = tf.while_loop(
            lambda index, _: index < steps,
            body,
            (tf.constant(0), zeros),
            parallel_iterations=1,
        )
        return gradients

    # ---------------------------------------------------------- train/test
    def train_step(self, data: Any) -> dict[str, Any]:
        inputs, labels = self._unpack(data)
        count = sum_over_replicas(self._count(labels))
        if labels.shape.rank == self.label_rank:
            gradients = self._gradients(inputs, labels, count)
        else:
            gradients = self._accumulated_gradients(inputs, labels, count)
        if self.clipnorm is not None:
            gradients = self._clip(gradients)
        self.optimizer.apply(gradients, self.wrapped.trainable_variables)
        return self._logs()

    def test_step(self, data: Any) -> dict[str, Any]:
        inputs, labels = self._unpack(data)
        self.statistics.update_sums(*self._forward_sums(inputs, labels, False))
        return self._logs()

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(
            f"{type(self).__name__} is not saved; save the model it trains instead."
        )


class TranslationTrainer(SummedLossTrainer):
    """Trains a `build_transformer` model: `fit` with the paper's loss (§5.4).

    Args:
        transformer: the model, ``(source_ids, target_ids) -> logits``.
        label_smoothing: `epsilon_ls` (paper: 0.1).
        clipnorm: clip the update's gradient (summed over replicas and
            accumulated batches) to this global norm; ``None`` for none.
        **kwargs: `keras.Model` arguments.

    Compile it with an optimizer only (``trainer.compile(optimizer=...)``):
    the loss and the metrics are built in. The logged values are ``loss``
    (label-smoothed, per real token), ``token_accuracy`` and ``perplexity``.
    Besides `fit` and `evaluate` on datasets of ``((source, target_input),
    labels)``, ``train_on_batch((source, target_input), labels)``,
    ``test_on_batch`` (the same arguments) and
    ``predict_on_batch((source, target_input))`` (the logits) work on single
    batches; `sample_weight` is refused (every real token counts once).

    Reference: Vaswani et al. (2017), §5.1 (batching), §5.3 (optimizer),
    §5.4 (label smoothing).
    """

    def __init__(
        self,
        transformer: keras.Model,
        label_smoothing: float = LABEL_SMOOTHING,
        clipnorm: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(transformer, TokenStatistics(), clipnorm, **kwargs)
        self.label_smoothing = float(label_smoothing)

    @property
    def transformer(self) -> keras.Model:
        """The trained `build_transformer` model."""
        return self.wrapped

    def _token_sums(self, labels: Any, logits: Any) -> tuple[Any, Any, Any, Any]:
        """(smoothed loss sum, NLL sum, correct count, token count), float32."""
        token_loss, nll = label_smoothed_nll(labels, logits, self.label_smoothing)
        weights = tf.cast(tf.not_equal(labels, PAD_ID), tf.float32)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct = tf.cast(tf.equal(predictions, tf.cast(labels, tf.int32)), tf.float32)
        return (
            tf.reduce_sum(token_loss * weights),
            tf.reduce_sum(nll * weights),
            tf.reduce_sum(correct * weights),
            tf.reduce_sum(weights),
        )

    def _forward_sums(self, inputs: Any, labels: Any, training: bool) -> tuple:
        source, target_input = inputs
        logits = self.transformer([source, target_input], training=training)
        return self._token_sums(labels, logits)

    def _count(self, labels: Any) -> Any:
        return tf.reduce_sum(tf.cast(tf.not_equal(labels, PAD_ID), tf.float32))

    def _unpack(self, data: Any) -> tuple[Any, Any]:
        """((source, target_input), labels) of ``((source, target_input), labels)``.

        Keras hands `fit`'s elements over as they are, but `train_on_batch`
        and `test_on_batch` as ``(x, y, sample_weight)``.
        """
        x, labels, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if sample_weight is not None:
            raise ValueError(
                "TranslationTrainer weighs every real target token equally "
                "(padding, id 0, is left out); `sample_weight` is not supported."
            )
        if labels is None or not isinstance(x, (tuple, list)) or len(x) != 2:
            raise ValueError(
                "TranslationTrainer trains on ((source_ids, target_input_ids), "
                "labels); received no labels or another input structure."
            )
        source, target_input = x
        return (source, target_input), labels

    def get_config(self) -> dict[str, Any]:
        raise NotImplementedError(
            "TranslationTrainer is not saved; save its `transformer` instead."
        )


def accumulation_dataset(dataset: tf.data.Dataset, steps: int) -> tf.data.Dataset:
    """Turns each batch of ``steps * b`` rows into `steps` batches of `b` rows.

    Each element ``((source, target_input), labels)`` of shape
    ``(rows, length)`` becomes shape ``(ceil(rows / steps), steps, length)``;
    missing rows are all padding, which the loss ignores. Build the input
    with a token budget `steps` times the per-batch budget.

    Args:
        dataset: a dataset from `kt.data.make_translation_dataset`.
        steps: `k`, the number of accumulated batches per update.
    """
    if steps == 1:
        return dataset

    def split(inputs: Any, labels: Any) -> Any:
        def fold(x: Any) -> Any:
            rows = tf.shape(x)[0]
            per_step = (rows + steps - 1) // steps
            x = tf.pad(x, [[0, per_step * steps - rows], [0, 0]])
            # Row r of step s is input row r * steps + s.
            return tf.reshape(x, [per_step, steps, tf.shape(x)[1]])

        source, target_input = inputs
        return (fold(source), fold(target_input)), fold(labels)

    return dataset.map(split, num_parallel_calls=tf.data.AUTOTUNE)
