"""TensorFlow twin of Adam's update (§5.3): the fused `ResourceApplyAdam`."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf


def adam_update(
    optimizer: Any, gradient: Any, variable: Any, learning_rate: Any
) -> None:
    """Keras' Adam update of `variable` as TensorFlow's fused kernel.

    `optimizer` is a `keras.optimizers.Adam` (without `amsgrad`); its slots
    `momentum` and `velocity` are updated in place,

        m <- m + (1 - beta_1) (g - m)
        v <- v + (1 - beta_2) (g^2 - v)
        w <- w - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + eps),

    in one pass over each variable and its two slots instead of about ten.
    Works under `tf.distribute` strategies and XLA. Sparse gradients
    (embedding lookups) are made dense first, the values of repeated rows
    summed, as the portable reference does (`portable.dense_gradient`).
    """
    dtype = variable.dtype
    # An `IndexedSlices` becomes dense with its repeated rows summed
    # (`unsorted_segment_sum`), so `v` gets the square of the sum.
    gradient = tf.cast(tf.convert_to_tensor(gradient), dtype)
    step = tf.cast(optimizer.iterations + 1, dtype)
    beta_1 = tf.cast(optimizer.beta_1, dtype)
    beta_2 = tf.cast(optimizer.beta_2, dtype)
    index = optimizer._get_variable_index(variable)
    tf.raw_ops.ResourceApplyAdam(
        var=_handle(variable),
        m=_handle(optimizer._momentums[index]),
        v=_handle(optimizer._velocities[index]),
        beta1_power=tf.pow(beta_1, step),
        beta2_power=tf.pow(beta_2, step),
        lr=tf.cast(learning_rate, dtype),
        beta1=beta_1,
        beta2=beta_2,
        epsilon=tf.cast(optimizer.epsilon, dtype),
        grad=gradient,
    )


def _handle(variable: Any) -> Any:
    """The resource handle of a Keras or TensorFlow variable.

    Inside a `tf.distribute` update, a distributed variable's handle is that
    of the copy on the device being updated.
    """
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle
