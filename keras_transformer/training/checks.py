"""The checks of a run that need only its config, before anything is built.

`check_before_training` (also made by ``train --print-config``) refuses a
warm-up longer than the run, a model that cannot fit in this machine's
memory, estimated from the config's sizes alone (`estimated_parameters`),
and data file settings that name a folder or no file.
"""

from __future__ import annotations

import os
from typing import Any

from keras_transformer.training.kinds import recipe_for

__all__ = [
    "TRAINING_BYTES_PER_PARAMETER",
    "attention_parameters",
    "check_before_training",
    "check_warmup",
    "estimated_parameters",
    "physical_memory",
    "planned_updates",
    "text_model_parts",
]

#: Bytes that training holds per parameter, at least: the float32 weight, its
#: gradient and Adam's two moments (mixed precision keeps float32 weights).
TRAINING_BYTES_PER_PARAMETER = 16


def planned_updates(config: Any, updates_per_epoch: int | None = None) -> int | None:
    """The run's optimizer updates: `train.train_steps`, else `train.epochs`
    times the updates of an epoch (`updates_per_epoch`, or
    `train.steps_per_epoch`), else the kind's default length
    (`Recipe.default_updates`); None while the updates of an epoch are not
    known (learned from the data)."""
    train = config.train
    per_epoch = updates_per_epoch or train.steps_per_epoch
    if train.train_steps is not None or per_epoch is None:
        return train.train_steps
    if train.epochs is not None:
        return train.epochs * per_epoch
    return recipe_for(config).default_updates(config, per_epoch)


def check_warmup(config: Any, total_steps: int) -> None:
    """Raises `ValueError` when the warm-up of Eq. 7 is longer than a run of
    `total_steps` updates: the learning rate would only rise, and the run
    end at its peak (the check of the kinds trained with Eq. 7)."""
    warmup = config.model.optimizer.warmup_steps
    if warmup > total_steps:
        raise ValueError(
            f"The warm-up of Eq. 7 (model.optimizer.warmup_steps={warmup}) is "
            f"longer than the run ({total_steps} updates): the learning rate "
            "would only rise and never decay. Set model.optimizer.warmup_steps "
            f"to at most {total_steps}, or train longer (train.train_steps or "
            "train.epochs)."
        )


def attention_parameters(d_model: int, heads: int, key_dim: int, value_dim: int) -> int:
    """Weights of one multi-head attention: queries, keys, values, output."""
    return d_model * heads * (2 * key_dim + value_dim) + heads * value_dim * d_model


def text_model_parts(config: Any, *, decoder: bool) -> list[tuple[str, int, str]]:
    """(part, parameters, the settings that size it) of a text model: the
    embeddings, the encoder and, with `decoder`, the decoder; the weight
    matrices only (a lower bound: biases and norms left out)."""
    model = config.model
    d_model, d_ff = model.d_model, model.d_ff
    ffn = 2 * d_model * d_ff
    attention = attention_parameters(
        d_model, model.num_heads, model.head_key_dim, model.head_value_dim
    )
    sizes = f"model.d_model={d_model}, model.d_ff={d_ff}"
    vocabulary = model.vocabulary_size
    if not model.share_embeddings:
        vocabulary += model.target_vocabulary
    stacks = [("encoder", model.num_encoder_layers, attention + ffn)]
    if decoder:
        stacks.append(("decoder", model.num_decoder_layers, 2 * attention + ffn))
    parts = [
        (
            "embeddings",
            vocabulary * d_model,
            f"data.vocabulary_size={config.data.vocabulary_size}, "
            f"model.d_model={d_model}",
        )
    ]
    for name, layers, per_layer in stacks:
        parts.append(
            (
                f"{layers} {name} layer(s)",
                layers * per_layer,
                f"model.num_{name}_layers={layers}, {sizes}",
            )
        )
    return parts


def estimated_parameters(config: Any) -> int:
    """The parameters of the config's model, from its sizes alone (its weight
    matrices: a slight underestimate), without building it."""
    return sum(count for _, count, _ in recipe_for(config).model_parts(config))


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_before_training(config: Any) -> None:
    """The checks of a run that need only its `TrainConfig`, made before
    anything is written to the run folder (``train --print-config`` makes
    them too):

    * the kind's schedule (`Recipe.check_schedule`: a warm-up of Eq. 7
      longer than the run), where the config gives the number of updates
      (`planned_updates`; otherwise training checks it once the data tells
      the updates of an epoch);
    * a model that cannot fit in this machine's memory: its parameters
      (`estimated_parameters`) times `TRAINING_BYTES_PER_PARAMETER`;
    * a ``files`` task's data file settings that name a folder or no file
      (`kt.data.tasks.check_file_paths`).

    Raises:
        ValueError: one line naming the settings and what to change.
        FileNotFoundError: a data file setting names no file.
    """
    from keras_transformer.data.tasks import check_file_paths

    check_file_paths(config.data)
    recipe = recipe_for(config)
    total = planned_updates(config)
    if total is not None:
        recipe.check_schedule(config, total)
    memory = physical_memory()
    parts = recipe.model_parts(config)
    parameters = sum(count for _, count, _ in parts)
    needed = parameters * TRAINING_BYTES_PER_PARAMETER
    if memory is None or needed <= memory:
        return
    largest = max(parts, key=lambda part: part[1])
    listed = "; ".join(f"{name}: {count:.3g} ({sizes})" for name, count, sizes in parts)
    raise ValueError(
        f"The model of this config cannot fit in memory: about {parameters:.3g} "
        f"parameters ({listed}) need at least {needed / 2**30:,.0f} GiB to train "
        f"({TRAINING_BYTES_PER_PARAMETER} bytes each: the float32 weight, its "
        "gradient and Adam's two moments), and this machine has "
        f"{memory / 2**30:,.1f} GiB. Lower the sizes of the largest part, the "
        f"{largest[0]} ({largest[2]})."
    )
