"""The former keywords of decoding, and the former `Decoder` methods.

Shared by the deprecated module functions (`decoding.deprecated`) and the
deprecated `Decoder` methods (`DeprecatedDecoderMethods`, a base of
`Decoder`); every name here goes in 0.4.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from keras_transformer import validation
from keras_transformer.conventions import END_ID, START_ID
from keras_transformer.decoding.result import DecodeResult
from keras_transformer.decoding.search import Outputs
from keras_transformer.decoding.settings import (
    DecodeSettings,
    default_setting,
)
from keras_transformer.validation import warn_deprecated

# The former signatures show `DecodeSettings`' defaults.
_BEAM_SIZE = default_setting("beam_size")
_ALPHA = default_setting("alpha")
_TEMPERATURE = default_setting("temperature")
_EXTRA_LENGTH = default_setting("extra_length")


def _settings(alpha_name: str = "length_penalty", **values: Any) -> DecodeSettings:
    """`DecodeSettings` from the former keyword names."""
    if alpha_name in values:
        validation.check_number(alpha_name, values[alpha_name], at_least=0.0)
        values["alpha"] = values.pop(alpha_name)
    return DecodeSettings(**values)


def _greedy(
    decoder: Any,
    source_ids: Any,
    *,
    max_length: int | None = None,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
    extra_length: int = _EXTRA_LENGTH,
) -> DecodeResult:
    """The former greedy functions' keywords, on `Decoder.decode`."""
    settings = DecodeSettings(method="greedy", extra_length=extra_length)
    return decoder.decode(
        source_ids, settings, max_length=max_length, start_id=start_id, end_id=end_id
    )


def _beam(
    decoder: Any,
    source_ids: Any,
    *,
    beam_size: int = _BEAM_SIZE,
    length_penalty: float = _ALPHA,
    max_length: int | None = None,
    extra_length: int = _EXTRA_LENGTH,
    start_id: int = START_ID,
    end_id: int | None = END_ID,
) -> DecodeResult:
    """The former beam-search keywords: beam search even for ``beam_size=1``
    (as it always was), on `Decoder`."""
    settings = _settings(
        beam_size=beam_size, length_penalty=length_penalty, extra_length=extra_length
    )
    return decoder._decode(
        source_ids, settings, "beam", max_length, None, start_id, end_id
    )


def _sample(
    decoder: Any,
    source_ids: Any,
    *,
    temperature: float = _TEMPERATURE,
    top_k: int | None = None,
    extra_length: int = _EXTRA_LENGTH,
    **call: Any,
) -> DecodeResult:
    """The former sampling keywords (`seed`, `max_length`, `start_id`,
    `end_id` go to `Decoder.decode`)."""
    settings = DecodeSettings(
        method="sample", temperature=temperature, top_k=top_k, extra_length=extra_length
    )
    return decoder.decode(source_ids, settings, **call)


class DeprecatedDecoderMethods:
    """The former `Decoder` methods, each a wrapper of `decode` or `search`."""

    def greedy(self, source_ids: Any, **kw: Any) -> DecodeResult:
        warn_deprecated("Decoder.greedy", 'Decoder.decode(method="greedy")')
        return _greedy(self, source_ids, **kw)

    def beam_search(self, source_ids: Any, **kw: Any) -> DecodeResult:
        warn_deprecated("Decoder.beam_search", 'Decoder.decode(method="beam")')
        return _beam(self, source_ids, **kw)

    def sample(self, source_ids: Any, **kw: Any) -> DecodeResult:
        warn_deprecated("Decoder.sample", 'Decoder.decode(method="sample")')
        return _sample(self, source_ids, **kw)

    def uncached_greedy(self, source_ids: Any, **kw: Any) -> DecodeResult:
        warn_deprecated("Decoder.uncached_greedy", "Decoder(use_cache=False)")
        reference = type(self)(self.model, use_cache=False)
        return _greedy(reference, source_ids, **kw)

    def greedy_graph(self, source_ids: Any, limits: Any, **kw: Any) -> Outputs:
        warn_deprecated("Decoder.greedy_graph", 'Decoder.search(method="greedy")')
        return self.search(source_ids, limits, DecodeSettings(method="greedy"), **kw)

    def beam_search_graph(
        self,
        source_ids: Any,
        limits: Any,
        *,
        beam_size: int = _BEAM_SIZE,
        length_penalty: Any = _ALPHA,
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


__all__ = ["DeprecatedDecoderMethods"]
