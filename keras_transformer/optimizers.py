"""Adam whose update is one fused kernel per variable on TensorFlow (§5.3)."""

from __future__ import annotations

from typing import Any

import keras

from keras_transformer import backend


@keras.saving.register_keras_serializable(package="keras_transformer")
class Adam(keras.optimizers.Adam):
    """`keras.optimizers.Adam` with a fused update on the TensorFlow backend.

    The paper trains with Adam (Kingma & Ba, 2015) with beta_1 = 0.9,
    beta_2 = 0.98 and epsilon = 1e-9 (§5.3; `kt.schedules.paper_adam` sets
    them). This class takes the same arguments and keeps the same slot
    variables (`momentum`, `velocity`) as Keras' Adam, and performs the same
    update,

        m <- m + (1 - beta_1) (g - m)
        v <- v + (1 - beta_2) (g^2 - v)
        w <- w - lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + eps),

    but on TensorFlow it runs it as TensorFlow's fused `ResourceApplyAdam`
    kernel (`keras_transformer.backend.adam_update`): one pass over each
    variable and its two slots instead of about ten. It works under
    `tf.distribute` strategies and XLA. With `amsgrad=True`, on another
    backend, or with the fast paths switched off, Keras' own update runs
    (on the dense gradient).

    Sparse gradients (embedding lookups) are made dense first, on both
    paths, so a row looked up several times in a batch gets the square of
    its summed gradient in `v`, as in Adam's definition and as Keras' Adam
    given the dense gradient; Keras' Adam (3.x) given the sparse gradient
    squares each lookup's gradient before the repeated rows are summed, and
    therefore differs from this class for such rows.

    Example:
    >>> import keras_transformer as kt
    >>> optimizer = kt.optimizers.Adam(1e-3, beta_2=0.98, epsilon=1e-9)
    >>> optimizer.beta_2
    0.98
    """

    def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
        backend.adam_update(self, gradient, variable, learning_rate)
