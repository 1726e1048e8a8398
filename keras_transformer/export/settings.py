"""The decoding settings an export bakes in: one resolver for every format.

`resolve_settings` checks the model and the tokenizer, fills in the
defaults (§6.1: beam 4, alpha 0.6, outputs up to the input length + 50),
caps the lengths at the model's learned position tables and returns the
`ExportSettings` that the SavedModel, LiteRT and CTranslate2 exports each
write into their folder.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import keras

from keras_transformer import validation
from keras_transformer.conventions import END_ID, START_ID
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.decoding.settings import (
    DecodeSettings,
    default_setting,
    settings_with,
)
from keras_transformer.models.transformer import TransformerStack

__all__ = ["FORMAT_VERSION", "ExportSettings", "resolve_settings"]

#: The version of the settings file of every export format.
FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """The decoding settings baked into an exported translator.

    ``export.json`` holds them flat: the `DecodeSettings` fields (``method``,
    ``beam_size``, ``alpha``, ``max_input_length``, ``extra_length``, ...)
    and the others below.

    Attributes:
        decode: the decoding settings (§6.1: beam 4, alpha 0.6, +50); a
            beam of one exports greedy decoding.
        max_output_length: the static bound on every output (and the size of
            the decoder caches): ``max_input_length + extra_length``,
            capped by the model's learned target positions.
        vocabulary_size: the tokenizer's number of ids.
        tokenizer_fingerprint: `SubwordTokenizer.fingerprint`.
        start_id, end_id: the special ids of the tokenizer.
        jit_compile: whether a call of 1 to 4 sentences runs the search
            compiled with XLA (`COMPILED_BATCH_SIZES`).
        learned_source_positions: the model's learned source positions,
            which no `max_input_length` may exceed (None: sinusoidal ones);
            what a translator advises for a source it cut.
    """

    decode: DecodeSettings
    max_output_length: int
    vocabulary_size: int
    tokenizer_fingerprint: str
    start_id: int = START_ID
    end_id: int = END_ID
    jit_compile: bool = False
    learned_source_positions: int | None = None

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        return {"format_version": FORMAT_VERSION, **values.pop("decode"), **values}


def resolve_settings(
    model: keras.Model,
    tokenizer: SubwordTokenizer,
    settings: DecodeSettings | None,
    changes: Mapping[str, Any],
    *,
    jit_compile: bool = False,
    strategies: tuple[str, ...] | None = None,
    export: str = "The SavedModel export",
) -> ExportSettings:
    """Checks an export's model, tokenizer and settings; returns the settings.

    Args:
        model: a model from `build_transformer` (or `load_translator`).
        tokenizer: the `SubwordTokenizer` it was trained with.
        settings: the `DecodeSettings` to start from (None: the defaults).
        changes: `DecodeSettings` fields replacing those of `settings`; a
            None value is not given. Without a `max_input_length` (in
            `settings` or `changes`) the default is capped at the model's
            learned source positions.
        jit_compile: the SavedModel's XLA search of a few sentences.
        strategies: the search strategies the format serves (None: all).
        export: the format's export, for the messages.

    Raises:
        TypeError: for another model or tokenizer.
        ValueError: (one line) for a bad setting, a strategy the format does
            not serve, a source limit beyond the learned positions or a
            tokenizer whose vocabulary size differs from the model's.
    """
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"{export} needs the Keras model from build_transformer (or "
            f"load_trained_model). Received: {type(model).__name__}"
        )
    if not isinstance(tokenizer, SubwordTokenizer):
        raise TypeError(
            f"{export} needs the SubwordTokenizer the model was trained with. "
            f"Received: {type(tokenizer).__name__}. Load it with "
            "SubwordTokenizer.load('<workdir>/tokenizer')."
        )
    parts = TransformerStack.of(model)  # ValueError for other models
    tokenizer.check_compatible(
        expected_vocabulary_size=parts.target_embedding.vocabulary_size
    )
    source_positions = parts.max_source_length
    target_positions = parts.max_target_length
    changes = {name: value for name, value in changes.items() if value is not None}
    if "max_input_length" not in changes and settings is None:
        default = default_setting("max_input_length")
        changes["max_input_length"] = min(default, source_positions or math.inf)
    decode = settings_with(settings, changes)
    if strategies is not None and decode.strategy not in strategies:
        raise ValueError(
            f"{export} serves {' or '.join(strategies)} search; got "
            f"method={decode.method!r}. Pass method='beam' (--method beam)."
        )
    max_input_length = decode.max_input_length
    if source_positions is not None and max_input_length > source_positions:
        raise ValueError(
            f"max_input_length={max_input_length} is longer than the model's "
            f"learned source positions ({source_positions}). Pass "
            f"max_input_length <= {source_positions}."
        )
    validation.check_bool("jit_compile", jit_compile)
    max_output_length = max_input_length + decode.extra_length
    if target_positions is not None:
        max_output_length = min(max_output_length, target_positions)
    return ExportSettings(
        decode=decode,
        max_output_length=max_output_length,
        vocabulary_size=tokenizer.vocabulary_size,
        tokenizer_fingerprint=tokenizer.fingerprint,
        jit_compile=jit_compile,
        learned_source_positions=source_positions,
    )
