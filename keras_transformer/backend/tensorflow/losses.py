"""TensorFlow twins of the loss's operations: the label-smoothed
cross-entropy of §5.4 with a hand-written gradient, and the global token
count of a `tf.distribute` run."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer.backend.tensorflow.nn import custom_gradient


def global_token_count(local_count: Any) -> Any:
    """Sums a per-replica token count over all replicas of a `tf.distribute` run.

    Outside a replica context the local count is the global count.
    """
    replica_context = tf.distribute.get_replica_context()
    if replica_context is None or replica_context.num_replicas_in_sync == 1:
        return local_count
    return replica_context.all_reduce(tf.distribute.ReduceOp.SUM, local_count)


def label_smoothed_nll(
    labels: Any, logits: Any, label_smoothing: float
) -> tuple[Any, Any]:
    """`label_smoothed_nll` (§5.4) from a fused softmax, with its gradient by hand.

    `log Z = max z - log max p` comes from one softmax (exact, never
    underflowing), and the gradient `p - (1 - eps) onehot(y) - eps / V` is
    written by hand, the one-hot part scattered into it in place: three
    passes over the `(tokens, vocabulary)` logits instead of about twelve.
    Labels outside `[0, vocabulary_size)` raise `InvalidArgumentError`.
    """
    label_smoothing = float(label_smoothing)
    logits = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    token_shape = tf.shape(labels)
    vocabulary_size = logits.shape[-1] or tf.shape(logits)[-1]
    flat_logits = tf.reshape(logits, [-1, vocabulary_size])
    flat_labels = tf.reshape(labels, [-1])
    with tf.control_dependencies(
        [
            tf.debugging.assert_less(
                flat_labels,
                tf.cast(vocabulary_size, tf.int32),
                message=(
                    "A label id is not smaller than the vocabulary size (the "
                    "logits' last axis): the labels do not come from the "
                    "model's vocabulary. Tokenize with the model's tokenizer."
                ),
            ),
            tf.debugging.assert_non_negative(
                flat_labels, message="A label id is negative."
            ),
        ]
    ):
        flat_labels = tf.identity(flat_labels)
    label_indices = tf.stack(
        [tf.range(tf.size(flat_labels), dtype=tf.int32), flat_labels], axis=1
    )

    @custom_gradient
    def smoothed_and_nll(flat_logits: Any) -> tuple[Any, Any]:
        probabilities = tf.nn.softmax(flat_logits)
        # log Z = max(z) - log(max(p)): the most probable token's probability
        # is at least 1/V, so this never underflows, unlike log(p_y).
        log_normalizer = tf.reduce_max(flat_logits, axis=-1) - tf.math.log(
            tf.reduce_max(probabilities, axis=-1)
        )
        nll = log_normalizer - tf.gather_nd(flat_logits, label_indices)
        smoothed = nll
        if label_smoothing:
            uniform = log_normalizer - tf.reduce_mean(flat_logits, axis=-1)
            smoothed = (1.0 - label_smoothing) * nll + label_smoothing * uniform

        def gradient(smoothed_upstream: Any, nll_upstream: Any) -> Any:
            with tf.name_scope("cross_entropy_gradient"):
                return _gradient(smoothed_upstream, nll_upstream)

        def _gradient(smoothed_upstream: Any, nll_upstream: Any) -> Any:
            # d smoothed / dz = p - (1 - eps) onehot(y) - eps / V and
            # d nll / dz = p - onehot(y).
            if smoothed_upstream is None:
                smoothed_upstream = tf.zeros_like(nll)
            if nll_upstream is None:
                nll_upstream = tf.zeros_like(nll)
            uniform_part = smoothed_upstream * (
                label_smoothing / tf.cast(vocabulary_size, tf.float32)
            )
            grad = (
                probabilities * (smoothed_upstream + nll_upstream)[:, None]
                - uniform_part[:, None]
            )
            true_token_part = smoothed_upstream * (1.0 - label_smoothing) + nll_upstream
            return _scatter_subtract(grad, label_indices, true_token_part)

        return (smoothed, nll), gradient

    smoothed, nll = smoothed_and_nll(flat_logits)
    return tf.reshape(smoothed, token_shape), tf.reshape(nll, token_shape)


def _scatter_subtract(tensor: Any, indices: Any, updates: Any) -> Any:
    """`tensor` with `updates` subtracted at `indices`, in place if possible.

    `tf.tensor_scatter_nd_sub` copies its input on the CPU (a full pass over
    the `(tokens, vocabulary)` gradient); `ScatterNdNonAliasingAdd` reuses
    the buffer but has no XLA kernel, so it is used outside XLA only.
    """
    try:
        from tensorflow.python.ops import control_flow_util

        in_xla = control_flow_util.GraphOrParentsInXlaContext(
            tf.compat.v1.get_default_graph()
        )
    except (ImportError, AttributeError):
        in_xla = True
    if in_xla:
        return tf.tensor_scatter_nd_sub(tensor, indices, updates)
    return tf.raw_ops.ScatterNdNonAliasingAdd(
        input=tensor, indices=indices, updates=-updates
    )
