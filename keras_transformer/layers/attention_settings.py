"""`AttentionSettings`: every option of an attention layer in one frozen value.

The model configs hold one (`TransformerConfig.attention_settings`,
`ImageTransformerConfig.attention_settings`), the blocks pass it unchanged to
their attention layers, and the layers read it: a new attention option is a
field here and the code in `attention.py` that uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from keras_transformer.validation import (
    check_bool,
    check_known_names,
    check_positive_int,
    check_rate,
)

__all__ = ["AttentionSettings"]


@dataclasses.dataclass(frozen=True)
class AttentionSettings:
    """The options of every attention layer of a model.

    Attributes:
        window: restricted self-attention (Vaswani et al., 2017, §4): each
            position attends only to positions within this distance, in
            `O(r n)` time and memory; `None` (the paper's models) attends
            everywhere. Used by the text blocks' self-attention.
        relative_positions: `k`, relative position representations in every
            self-attention layer (Shaw et al., 2018): a learned embedding per
            clipped distance `clip(j - i, -k, k)`, added to the keys; `None`
            (the paper's models) for none.
        relative_values: also add the relative embeddings to the values
            (Shaw et al., Eq. 3); needs `relative_positions`.
        dropout: dropout on the attention weights (0 in the paper).
        use_bias: whether the projections have biases.
        num_key_value_heads: grouped-query attention (Ainslie et al., 2023,
            "GQA: Training Generalized Multi-Query Transformer Models from
            Multi-Head Checkpoints"): the keys and values have this many
            heads, each shared by `num_heads / num_key_value_heads` query
            heads, which shrinks the decoding caches by that factor. `None`
            (the paper's multi-head attention) means `num_heads`; 1 is
            multi-query attention (Shazeer, 2019). Must divide `num_heads`.
    """

    window: int | None = None
    relative_positions: int | None = None
    relative_values: bool = False
    dropout: float = 0.0
    use_bias: bool = True
    num_key_value_heads: int | None = None

    def __post_init__(self) -> None:
        for name in ("window", "relative_positions", "num_key_value_heads"):
            check_positive_int(
                f"attention_settings.{name}", getattr(self, name), allow_none=True
            )
        check_bool("attention_settings.relative_values", self.relative_values)
        check_bool("attention_settings.use_bias", self.use_bias)
        check_rate("attention_settings.dropout", self.dropout)
        if self.relative_values and self.relative_positions is None:
            raise ValueError(
                "`attention_settings.relative_values=True` needs "
                "`attention_settings.relative_positions` (the clipping distance "
                "k, e.g. 16). Received: attention_settings.relative_positions=None"
            )

    @classmethod
    def of(
        cls, value: AttentionSettings | Mapping[str, Any] | None
    ) -> AttentionSettings:
        """`value` as settings: itself, from a mapping of fields, or the defaults."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = [field.name for field in dataclasses.fields(cls)]
            check_known_names(value, known, "attention settings", listing="Known")
            return cls(**value)
        raise ValueError(
            "The attention settings must be an AttentionSettings or a mapping of "
            f'its fields (a JSON object such as {{"window": 8}}). Received: {value!r}'
        )

    def key_value_heads(self, num_heads: int) -> int:
        """The number of key/value heads for `num_heads` query heads; raises
        the one-line `ValueError` when it does not divide them."""
        heads = self.num_key_value_heads or num_heads
        if num_heads % heads:
            raise ValueError(
                f"`attention_settings.num_key_value_heads={heads}` must divide "
                f"num_heads={num_heads} (each key/value head serves a group of "
                "query heads)."
            )
        return heads

    def check_sizes(self, num_heads: int) -> None:
        """Checks the fields that depend on the layer's sizes (one-line
        `ValueError`, as `key_value_heads`). The model configs and blocks
        call it where they are made, so that a bad value is refused before
        a model is built; an option's check of that kind goes here."""
        self.key_value_heads(num_heads)

    def for_cross_attention(self) -> AttentionSettings:
        """The settings of encoder-decoder attention: no window and no
        relative positions (those are self-attention options)."""
        return dataclasses.replace(
            self, window=None, relative_positions=None, relative_values=False
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
