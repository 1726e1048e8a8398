"""The learning-rate schedule of Eq. 7 and the paper's Adam settings (§5.3)."""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_transformer.optimizers import Adam
from keras_transformer.validation import (
    check_number,
    check_positive_int,
    check_rate,
)

#: The warm-up of Eq. 7 (§5.3: "warmup_steps = 4000").
WARMUP_STEPS = 4000


@keras.saving.register_keras_serializable(package="keras_transformer")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), Eq. 7.

    The rate rises linearly for `warmup_steps` steps and then decays with the
    inverse square root of the step number. Keras counts optimizer steps
    from 0, and Eq. 7 is zero (and its first factor infinite) at step 0, so
    the schedule evaluates Eq. 7 at `step + 1`: the first update uses the
    rate of step 1, and the peak, `d_model^-0.5 * warmup_steps^-0.5`, is
    reached by the update with index `warmup_steps - 1`.

    Args:
        d_model: the model size that scales the rate.
        warmup_steps: the length of the linear warm-up (paper: 4000).
        scale: an extra factor on the whole rate (1.0 in the paper).

    Example:
    >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 6)
    0.000699

    Reference: Vaswani et al. (2017), §5.3, Eq. 7.
    """

    def __init__(
        self, d_model: int, warmup_steps: int = WARMUP_STEPS, scale: float = 1.0
    ):
        check_positive_int("d_model", d_model)
        check_positive_int("warmup_steps", warmup_steps)
        check_number("scale", scale, above=0.0)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = float(scale)

    def __call__(self, step: Any) -> Any:
        step = ops.cast(step, "float32") + 1.0
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * float(self.d_model) ** -0.5 * rate

    def get_config(self) -> dict[str, Any]:
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """Every optimizer constant of §5.3 in one place.

    Every field is checked when the config is made (a `ValueError` names
    it by its config key, ``model.optimizer.<name>``).

    Attributes:
        warmup_steps: warm-up of Eq. 7 (4000): a positive integer.
        beta_1, beta_2: Adam's moment decay rates (0.9, 0.98), in [0, 1).
        epsilon: Adam's epsilon (1e-9), a positive number.
        learning_rate_scale: factor on Eq. 7 (1.0), a positive number.
        clipnorm: optional gradient clipping by global norm, a positive
            number (``None``: none, as in the paper).
    """

    warmup_steps: int = WARMUP_STEPS
    beta_1: float = 0.9
    beta_2: float = 0.98
    epsilon: float = 1e-9
    learning_rate_scale: float = 1.0
    clipnorm: float | None = None

    def __post_init__(self) -> None:
        section = "model.optimizer"
        check_positive_int(f"{section}.warmup_steps", self.warmup_steps)
        for name in ("beta_1", "beta_2"):
            check_rate(f"{section}.{name}", getattr(self, name))
        for name in ("epsilon", "learning_rate_scale"):
            check_number(f"{section}.{name}", getattr(self, name), above=0.0)
        check_number(f"{section}.clipnorm", self.clipnorm, above=0.0, allow_none=True)


def paper_adam(
    d_model: int, config: OptimizerConfig | None = None, **kwargs: Any
) -> Adam:
    """Adam with beta_1=0.9, beta_2=0.98, epsilon=1e-9 and the Eq. 7 schedule.

    Args:
        d_model: the model size of Eq. 7.
        config: the constants; `OptimizerConfig()` (the paper's) by default.
        **kwargs: further `keras.optimizers.Adam` arguments.

    Returns:
        a `kt.optimizers.Adam` (Keras' Adam with a fused update on
        TensorFlow).

    Reference: Vaswani et al. (2017), §5.3.
    """
    config = config or OptimizerConfig()
    schedule = NoamSchedule(
        d_model, warmup_steps=config.warmup_steps, scale=config.learning_rate_scale
    )
    if config.clipnorm is not None:
        kwargs.setdefault("global_clipnorm", config.clipnorm)
    return Adam(
        learning_rate=schedule,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        epsilon=config.epsilon,
        **kwargs,
    )
