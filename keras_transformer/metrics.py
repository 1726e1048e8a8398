"""Token-level metrics that ignore padding: accuracy and perplexity."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer.losses import label_smoothed_nll


class _MaskedTokenMean(keras.metrics.Metric):
    """A mean of a per-token value over the tokens whose label is not padding."""

    def __init__(self, padding_id: int = 0, name: str | None = None, **kwargs: Any):
        super().__init__(name=name, dtype="float32", **kwargs)
        self.padding_id = int(padding_id)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def token_values(self, y_true: Any, y_pred: Any) -> Any:
        raise NotImplementedError

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> None:
        weights = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        values = ops.cast(self.token_values(y_true, y_pred), "float32")
        self.total.assign_add(ops.sum(values * weights))
        self.count.assign_add(ops.sum(weights))

    def reset_state(self) -> None:
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "padding_id": self.padding_id}


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedAccuracy(_MaskedTokenMean):
    """Share of real (non-padding) target tokens whose argmax is the label.

    Example:
    >>> import numpy as np
    >>> metric = MaskedAccuracy()
    >>> logits = np.eye(4, dtype="float32")[[[1, 3, 0]]]  # predicts 1, 3, 0
    >>> metric.update_state(np.array([[1, 2, 0]]), logits)
    >>> float(metric.result())
    0.5
    """

    def __init__(self, padding_id: int = 0, name: str = "token_accuracy", **kwargs):
        super().__init__(padding_id=padding_id, name=name, **kwargs)

    def token_values(self, y_true: Any, y_pred: Any) -> Any:
        predictions = ops.argmax(y_pred, axis=-1)
        return ops.equal(ops.cast(predictions, "int32"), ops.cast(y_true, "int32"))

    def result(self) -> Any:
        return ops.divide_no_nan(self.total, self.count)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Perplexity(_MaskedTokenMean):
    """exp(mean negative log-likelihood) over real tokens, without smoothing.

    "... hurts perplexity, as the model learns to be more unsure, but improves
    accuracy and BLEU score" (§5.4): the perplexity is that of the model's
    distribution, so it is computed from the unsmoothed NLL.
    """

    def __init__(self, padding_id: int = 0, name: str = "perplexity", **kwargs):
        super().__init__(padding_id=padding_id, name=name, **kwargs)

    def token_values(self, y_true: Any, y_pred: Any) -> Any:
        _, nll = label_smoothed_nll(y_true, y_pred, label_smoothing=0.0)
        return nll

    def result(self) -> Any:
        return ops.exp(ops.divide_no_nan(self.total, self.count))
