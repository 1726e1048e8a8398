"""The former decoding API, kept as thin wrappers until 0.4.

Each name warns once per call (`DeprecationWarning`) and runs the one
public tier: ``Decoder(model).decode(source_ids, DecodeSettings(...))``,
``Decoder.search`` inside a caller's `tf.function`, or `search.run_search`
with a strategy over a step function.
"""

from __future__ import annotations

import warnings
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.conventions import END_ID, EXTRA_LENGTH, START_ID
from keras_transformer.decoding.result import DecodeResult
from keras_transformer.decoding.search import Outputs, StepFunction, run_search
from keras_transformer.decoding.settings import DecodeSettings, warn_deprecated
from keras_transformer.decoding.strategies import BeamSearch, GreedySearch
from keras_transformer.layers.validation import check_int, check_number

_DECODERS_ATTRIBUTE = "_keras_transformer_decoders"


def get_decoder(
    model: keras.Model, jit_compile: bool = False, use_cache: bool = True
) -> Any:
    """The `Decoder` of `model`, created once and then reused.

    The decoders are kept in a private attribute of the model (set without
    Keras' tracking), so they live and die with it.
    """
    from keras_transformer.decoding.decoder import Decoder

    decoders = getattr(model, _DECODERS_ATTRIBUTE, None)
    if decoders is None:
        decoders = {}
        object.__setattr__(model, _DECODERS_ATTRIBUTE, decoders)
    key = (jit_compile, use_cache)
    if key not in decoders:
        decoders[key] = Decoder(model, jit_compile=jit_compile, use_cache=use_cache)
    return decoders[key]


def _settings(alpha_name: str = "length_penalty", **values: Any) -> DecodeSettings:
    """`DecodeSettings` from the former keyword names."""
    if alpha_name in values:
        check_number(alpha_name, values[alpha_name], at_least=0.0)
        values["alpha"] = values.pop(alpha_name)
    return DecodeSettings(**values)


def greedy_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    max_length: int | None = None,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    extra_length: int = EXTRA_LENGTH,
    jit_compile: bool = False,
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(method="greedy"))``."""
    warn_deprecated("decoding.greedy_decode", 'Decoder.decode(method="greedy")')
    settings = DecodeSettings(method="greedy", extra_length=extra_length)
    return get_decoder(model, jit_compile).decode(
        source_ids, settings, max_length=max_length, start_id=start_id, end_id=end_id
    )


def beam_search(
    model: keras.Model,
    source_ids: Any,
    *,
    beam_size: int = 4,
    length_penalty: float = 0.6,
    max_length: int | None = None,
    extra_length: int = EXTRA_LENGTH,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    jit_compile: bool = False,
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(beam_size=...))``.

    Runs beam search even for ``beam_size=1`` (as it always did).
    """
    warn_deprecated("decoding.beam_search", 'Decoder.decode(method="beam")')
    settings = _settings(
        beam_size=beam_size, length_penalty=length_penalty, extra_length=extra_length
    )
    return get_decoder(model, jit_compile)._decode(
        source_ids, settings, "beam", max_length, None, start_id, end_id
    )


def sample_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int | None = None,
    max_length: int | None = None,
    extra_length: int = EXTRA_LENGTH,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    jit_compile: bool = False,
) -> DecodeResult:
    """Deprecated: ``Decoder(model).decode(ids, DecodeSettings(method="sample"))``."""
    warn_deprecated("decoding.sample_decode", 'Decoder.decode(method="sample")')
    settings = DecodeSettings(
        method="sample", temperature=temperature, top_k=top_k, extra_length=extra_length
    )
    return get_decoder(model, jit_compile).decode(
        source_ids,
        settings,
        max_length=max_length,
        seed=seed,
        start_id=start_id,
        end_id=end_id,
    )


def uncached_greedy_decode(
    model: keras.Model,
    source_ids: Any,
    *,
    max_length: int | None = None,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    extra_length: int = EXTRA_LENGTH,
) -> DecodeResult:
    """Deprecated: ``Decoder(model, use_cache=False).decode(...)``."""
    warn_deprecated("decoding.uncached_greedy_decode", "Decoder(use_cache=False)")
    settings = DecodeSettings(method="greedy", extra_length=extra_length)
    return get_decoder(model, use_cache=False).decode(
        source_ids, settings, max_length=max_length, start_id=start_id, end_id=end_id
    )


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
    beam_size: int = 4,
    length_penalty_alpha: float | tf.Tensor = 0.6,
    **options: Any,
) -> Outputs:
    """Deprecated: ``search.run_search(BeamSearch(beam_size, alpha), ...)``."""
    warn_deprecated("decoding.run_beam_search", "search.run_search(BeamSearch())")
    strategy = BeamSearch(beam_size, length_penalty_alpha)
    return run_search(strategy, step_fn, state, limits, **options)


def check_integer(name: str, value: Any, minimum: int) -> None:
    """Deprecated: `keras_transformer.layers.validation.check_int`."""
    warn_deprecated("decoding.check_integer", "validation.check_int")
    check_int(name, value, minimum)


def check_length_penalty(length_penalty: Any) -> None:
    """Deprecated: `DecodeSettings` checks `alpha`."""
    warn_deprecated("decoding.check_length_penalty", "DecodeSettings(alpha=...)")
    check_number("length_penalty", length_penalty, at_least=0.0)


class DeprecatedDecoderMethods:
    """The former `Decoder` methods, each a wrapper of `decode` or `search`."""

    def greedy(self, source_ids: Any, *, extra_length: int = EXTRA_LENGTH, **kw: Any):
        warn_deprecated("Decoder.greedy", 'Decoder.decode(method="greedy")')
        settings = DecodeSettings(method="greedy", extra_length=extra_length)
        return self.decode(source_ids, settings, **kw)

    def beam_search(
        self,
        source_ids: Any,
        *,
        beam_size: int = 4,
        length_penalty: float = 0.6,
        extra_length: int = EXTRA_LENGTH,
        max_length: int | None = None,
        start_id: int = START_ID,
        end_id: int | None = END_ID,
    ) -> DecodeResult:
        warn_deprecated("Decoder.beam_search", 'Decoder.decode(method="beam")')
        settings = _settings(
            beam_size=beam_size,
            length_penalty=length_penalty,
            extra_length=extra_length,
        )
        return self._decode(
            source_ids, settings, "beam", max_length, None, start_id, end_id
        )

    def sample(self, source_ids: Any, *, extra_length: int = EXTRA_LENGTH, **kw: Any):
        warn_deprecated("Decoder.sample", 'Decoder.decode(method="sample")')
        values = {k: kw.pop(k) for k in ("temperature", "top_k") if k in kw}
        settings = DecodeSettings(method="sample", extra_length=extra_length, **values)
        return self.decode(source_ids, settings, **kw)

    def uncached_greedy(self, source_ids: Any, **kw: Any) -> DecodeResult:
        warn_deprecated("Decoder.uncached_greedy", "Decoder(use_cache=False)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return uncached_greedy_decode(self.model, source_ids, **kw)

    def greedy_graph(self, source_ids: Any, limits: Any, **kw: Any) -> Outputs:
        warn_deprecated("Decoder.greedy_graph", 'Decoder.search(method="greedy")')
        return self.search(source_ids, limits, DecodeSettings(method="greedy"), **kw)

    def beam_search_graph(
        self,
        source_ids: Any,
        limits: Any,
        *,
        beam_size: int = 4,
        length_penalty: Any = 0.6,
        **kw: Any,
    ) -> Outputs:
        warn_deprecated("Decoder.beam_search_graph", 'Decoder.search(method="beam")')
        return self._search(
            source_ids,
            limits,
            tf.cast(length_penalty, tf.float32),
            tf.constant(1.0),
            tf.constant(0),
            strategy="beam",
            beam_size=beam_size,
            top_k=None,
            **{"start_id": START_ID, "end_id": END_ID, "static_shapes": False, **kw},
        )


__all__ = [
    "DeprecatedDecoderMethods",
    "beam_search",
    "check_integer",
    "check_length_penalty",
    "get_decoder",
    "greedy_decode",
    "run_beam_search",
    "run_greedy",
    "sample_decode",
    "uncached_greedy_decode",
    "warn_deprecated",
]
