"""Label-smoothed cross-entropy over real (non-padding) tokens (§5.4)."""

from __future__ import annotations

from typing import Any

import keras
from keras import ops

from keras_transformer import backend
from keras_transformer.conventions import LABEL_SMOOTHING


def label_smoothed_nll(
    labels: Any, logits: Any, label_smoothing: float = LABEL_SMOOTHING
) -> tuple[Any, Any]:
    """Per-token cross-entropy with label smoothing, in float32 (§5.4).

    The smoothed target puts `1 - label_smoothing` on the true token and
    spreads `label_smoothing` uniformly over the whole vocabulary, so the
    loss is `(1 - eps) * NLL + eps * mean_v(-log p_v)`.

    Runs `keras_transformer.backend.label_smoothed_nll`: on the TensorFlow
    backend the value and its gradient come from one fused softmax and a
    hand-written gradient, `p - (1 - eps) * onehot(y) - eps / V`, which reads
    the `(batch, length, vocabulary)` tensor a few times instead of a dozen;
    other backends (or the fast paths switched off) use the same formula
    through `keras.ops`, `logsumexp(z) - z_y` and `logsumexp(z) - mean_v(z)`.

    Args:
        labels: integer `(batch, length)`, each in `[0, vocabulary_size)`.
        logits: `(batch, length, vocabulary_size)`.
        label_smoothing: `epsilon_ls` (paper: 0.1).

    Returns:
        `(smoothed_loss, nll)`, both float32 `(batch, length)`.
    """
    return backend.label_smoothed_nll(labels, logits, label_smoothing)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MaskedSparseCrossEntropy(keras.losses.Loss):
    """Label-smoothed sparse cross-entropy averaged over real target tokens.

    "During training, we employed label smoothing of value epsilon_ls = 0.1."
    Positions whose label is `padding_id` contribute nothing, and the sum of
    the token losses is divided by the number of real tokens in the *global*
    batch: under `tf.distribute` every replica divides its own sum by the
    token count summed over all replicas, so the gradients that the replicas
    add up are those of the exact global mean, however the padding is spread.
    The value is computed in float32 whatever the logits' dtype.

    Args:
        label_smoothing: `epsilon_ls` (paper: 0.1).
        padding_id: the label id that is ignored.
        name: name of the loss.

    Example:
    >>> import numpy as np
    >>> loss = MaskedSparseCrossEntropy(label_smoothing=0.0)
    >>> labels = np.array([[1, 2, 0]]); logits = np.zeros((1, 3, 4), "float32")
    >>> round(float(loss(labels, logits)), 4)  # log(4) over the 2 real tokens
    1.3863

    Reference: Vaswani et al. (2017), §5.4 "Label Smoothing".
    """

    def __init__(
        self,
        label_smoothing: float = LABEL_SMOOTHING,
        padding_id: int = 0,
        name: str = "masked_sparse_cross_entropy",
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(
                "`label_smoothing` must be in [0, 1). "
                f"Received: label_smoothing={label_smoothing!r}"
            )
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", dtype="float32", **kwargs)
        self.label_smoothing = float(label_smoothing)
        self.padding_id = int(padding_id)

    def __call__(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        # The reduction over real tokens is done here, so Keras' own masking
        # and batch-size reduction are bypassed.
        with keras.name_scope(self.name):
            return self.call(y_true, y_pred, sample_weight)

    def call(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        if len(y_pred.shape) != len(y_true.shape) + 1:
            raise ValueError(
                "Expected integer labels (batch, length) and logits (batch, "
                "length, vocabulary_size). Received: "
                f"y_true.shape={tuple(y_true.shape)}, "
                f"y_pred.shape={tuple(y_pred.shape)}"
            )
        token_loss, _ = label_smoothed_nll(y_true, y_pred, self.label_smoothing)
        weights = ops.cast(ops.not_equal(y_true, self.padding_id), "float32")
        if sample_weight is not None:
            weights = weights * ops.cast(sample_weight, "float32")
        local_sum = ops.sum(token_loss * weights)
        # Keras sums the replicas' gradients: dividing each replica's sum by
        # the global count makes that sum the gradient of the global mean.
        global_count = backend.global_token_count(ops.sum(weights))
        return ops.divide_no_nan(local_sum, global_count)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label_smoothing": self.label_smoothing,
            "padding_id": self.padding_id,
        }
