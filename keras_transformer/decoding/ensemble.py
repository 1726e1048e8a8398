"""Ensembles: several models with one vocabulary decoded in one search.

At every step each model scores the next token of every hypothesis from its
own caches (`steps.cached_step`); the search ranks tokens by the average of
the models' log-probabilities,
``log p(y_t | y_<t, x) = (1/M) * sum_m log p_m(y_t | y_<t, x)``
(the log-linear ensemble of Hokamp and Liu 2017 and of Marian/OpenNMT).
Greedy decoding, beam search, sampling and constraints run over it as over
one model: the search loop (`search.run_search`) does not know the
difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.decoding.decoder import Decoder
from keras_transformer.decoding.search import gather_rows
from keras_transformer.decoding.steps import ModelStep
from keras_transformer.models.transformer import TransformerStack


def ensemble_step(steps: Sequence[ModelStep], beam_size: int) -> ModelStep:
    """One step function averaging the log-probabilities of `steps`.

    The state is the tuple of the models' states; each keeps its own caches
    and is gathered (reordered by parent, finished examples dropped) by its
    own gather function.

    Args:
        steps: the models' step functions, each of `beam_size` rows per
            example.
        beam_size: rows per example (for models without their own gather).

    Returns:
        A `ModelStep` over the tuple of states.
    """
    steps = tuple(steps)
    gathers = tuple(step.gather or gather_rows(beam_size) for step in steps)

    def step(token_ids: tf.Tensor, states: Any, index: tf.Tensor) -> Any:
        log_probs, new_states = [], []
        for member, state in zip(steps, states, strict=True):
            scores, state = member.step(token_ids, state, index)
            log_probs.append(scores)
            new_states.append(state)
        return tf.add_n(log_probs) / len(steps), tuple(new_states)

    def gather(states: Any, examples: Any, parents: Any) -> Any:
        return tuple(
            model_gather(state, examples, parents)
            for model_gather, state in zip(gathers, states, strict=True)
        )

    states = tuple(step.state for step in steps)
    invariants = None
    if any(step.invariants is not None for step in steps):
        invariants = tuple(
            step.invariants
            if step.invariants is not None
            else tf.nest.map_structure(
                lambda x: tf.TensorShape([None, *x.shape[1:]]), step.state
            )
            for step in steps
        )
    return ModelStep(step, states, gather, invariants)


class EnsembleDecoder(Decoder):
    """A `Decoder` over several models with the same vocabularies.

    Args:
        models: models from `build_transformer` with equal source and target
            vocabulary sizes (trained with the same tokenizer).
        jit_compile, use_cache: as for `Decoder`.

    Raises:
        ValueError: (one line) without models, or when their vocabularies
            differ.

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> from keras_transformer.decoding import DecodeSettings
    >>> models = [kt.models.build_transformer(kt.models.presets["tiny"])] * 2
    >>> result = EnsembleDecoder(models).decode(
    ...     np.array([[5, 6, 3]]), DecodeSettings(method="greedy"), max_length=4
    ... )
    >>> result.lengths
    array([4], dtype=int32)

    Reference: Vaswani et al. (2017), §6.1; Hokamp and Liu (2017), §2.
    """

    def __init__(
        self,
        models: Sequence[keras.Model],
        jit_compile: bool = False,
        use_cache: bool = True,
    ) -> None:
        models = list(models)
        if not models:
            raise ValueError("An ensemble needs at least one model; got none.")
        super().__init__(models[0], jit_compile=jit_compile, use_cache=use_cache)
        self.models = models
        self.stacks = [TransformerStack.of(model) for model in models]
        for i, stack in enumerate(self.stacks[1:], start=1):
            sizes = _vocabulary_sizes(stack)
            if sizes != _vocabulary_sizes(self.stacks[0]):
                raise ValueError(
                    f"Ensemble models 0 and {i} have different vocabularies "
                    f"(source, target sizes {_vocabulary_sizes(self.stacks[0])} "
                    f"and {sizes}); ensemble only models trained with one tokenizer."
                )
        supported = [s.max_target_length for s in self.stacks]
        known = [length for length in supported if length is not None]
        self.max_supported_length = min(known) if known else None

    def _combine(self, steps: list[ModelStep], beam: int) -> ModelStep:
        """One step of every model, averaged (`ensemble_step`)."""
        return ensemble_step(steps, beam)


def _vocabulary_sizes(stack: TransformerStack) -> tuple[int, int]:
    return (
        stack.source_embedding.vocabulary_size,
        stack.target_embedding.vocabulary_size,
    )


__all__ = ["EnsembleDecoder", "ensemble_step"]
