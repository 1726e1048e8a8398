"""The former decoding API, kept as thin wrappers until 0.4.

Each name warns once per call (`DeprecationWarning`) and runs the one
public tier: ``Decoder(model).decode(source_ids, DecodeSettings(...))``,
``Decoder.search`` inside a caller's `tf.function`, or `search.run_search`
with a strategy over a step function.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from keras_transformer import validation
from keras_transformer.decoding.decoder import get_decoder
from keras_transformer.decoding.former import (
    _ALPHA,
    _BEAM_SIZE,
    _beam,
    _greedy,
    _sample,
)
from keras_transformer.decoding.result import DecodeResult
from keras_transformer.decoding.search import Outputs, StepFunction, run_search
from keras_transformer.decoding.strategies import BeamSearch, GreedySearch
from keras_transformer.validation import warn_deprecated


def greedy_decode(
    model: keras.Model, source_ids: Any, *, jit_compile: bool = False, **options: Any
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(method="greedy"))``.

    Keywords: `max_length`, `start_id`, `end_id`, `extra_length`.
    """
    warn_deprecated("decoding.greedy_decode", 'Decoder.decode(method="greedy")')
    return _greedy(get_decoder(model, jit_compile), source_ids, **options)


def beam_search(
    model: keras.Model, source_ids: Any, *, jit_compile: bool = False, **options: Any
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(beam_size=...))``.

    Keywords: `beam_size`, `length_penalty`, `max_length`, `extra_length`,
    `start_id`, `end_id`.
    """
    warn_deprecated("decoding.beam_search", 'Decoder.decode(method="beam")')
    return _beam(get_decoder(model, jit_compile), source_ids, **options)


def sample_decode(
    model: keras.Model, source_ids: Any, *, jit_compile: bool = False, **options: Any
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(method="sample"))``.

    Keywords: `temperature`, `top_k`, `seed`, `max_length`, `extra_length`,
    `start_id`, `end_id`.
    """
    warn_deprecated("decoding.sample_decode", 'Decoder.decode(method="sample")')
    return _sample(get_decoder(model, jit_compile), source_ids, **options)


def uncached_greedy_decode(
    model: keras.Model, source_ids: Any, **options: Any
) -> DecodeResult:
    """Deprecated: ``Decoder(model, use_cache=False).decode(...)``; the
    keywords of `greedy_decode` but `jit_compile` (the prefix grows)."""
    warn_deprecated("decoding.uncached_greedy_decode", "Decoder(use_cache=False)")
    return _greedy(get_decoder(model, use_cache=False), source_ids, **options)


def run_greedy(
    step_fn: StepFunction, state: Any, limits: Any, **options: Any
) -> Outputs:
    """Deprecated: ``search.run_search(GreedySearch(select_fn), ...)``."""
    warn_deprecated("decoding.run_greedy", "search.run_search(GreedySearch())")
    strategy = GreedySearch(options.pop("select_fn", None))
    return run_search(strategy, step_fn, state, limits, **options)


def run_beam_search(
    step_fn: StepFunction,
    state: Any,
    limits: Any,
    *,
    beam_size: int = _BEAM_SIZE,
    length_penalty_alpha: float | tf.Tensor = _ALPHA,
    **options: Any,
) -> Outputs:
    """Deprecated: ``search.run_search(BeamSearch(beam_size, alpha), ...)``."""
    warn_deprecated("decoding.run_beam_search", "search.run_search(BeamSearch())")
    strategy = BeamSearch(beam_size, length_penalty_alpha)
    return run_search(strategy, step_fn, state, limits, **options)


def check_integer(name: str, value: Any, minimum: int) -> None:
    """Deprecated: `keras_transformer.layers.validation.check_int`."""
    warn_deprecated("decoding.check_integer", "validation.check_int")
    validation.check_int(name, value, minimum)


def check_length_penalty(length_penalty: Any) -> None:
    """Deprecated: `DecodeSettings` checks `alpha`."""
    warn_deprecated("decoding.check_length_penalty", "DecodeSettings(alpha=...)")
    validation.check_number("length_penalty", length_penalty, at_least=0.0)


__all__ = [
    "beam_search",
    "check_integer",
    "check_length_penalty",
    "greedy_decode",
    "run_beam_search",
    "run_greedy",
    "sample_decode",
    "uncached_greedy_decode",
]
