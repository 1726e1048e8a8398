"""`TransformerConfig`: every hyperparameter of the model in one frozen dataclass."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import keras

from keras_transformer.layers.attention_settings import AttentionSettings
from keras_transformer.schedules import OptimizerConfig
from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_fields,
    check_known_names,
    check_number,
    check_positive_int,
    check_rate,
    check_string,
)

POSITION_ENCODINGS = ("sinusoidal", "learned", "none")
"""`"none"` adds no position information: the word-order ablation of a
classifier (`build_classifier`); a translation model refuses it."""


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of the encoder-decoder Transformer (paper Table 3).

    Only `build_transformer` reads this class; the layers take explicit
    arguments. Token id 0 is padding in both vocabularies.

    Attributes:
        vocabulary_size: size of the (shared) vocabulary; the source
            vocabulary when `target_vocabulary_size` is set.
        target_vocabulary_size: a separate target vocabulary, or `None` for
            one shared vocabulary (§5.1: "a shared source-target vocabulary").
        num_encoder_layers, num_decoder_layers: `N` (6).
        d_model: model size (512).
        d_ff: inner size of the feed-forward networks (2048).
        num_heads: `h` (8).
        key_dim: `d_k`; `None` means `d_model / h` (64).
        value_dim: `d_v`; `None` means `key_dim`.
        dropout: `P_drop`, the residual and embedding dropout (0.1).
        ffn_dropout: dropout inside the feed-forward networks (0).
        position_encoding: `"sinusoidal"` (Eqs. 5-6) or `"learned"` (row E).
        max_length: the number of positions the model supports: the longest
            source or output sequence, in tokens (the size of the learned
            position table, and the bound that decoding enforces). The data
            side's cap is `DataConfig.max_sentence_length`.
        norm_first: pre-LN blocks plus a final LayerNorm per stack, instead
            of the paper's post-LN.
        layer_norm_epsilon: epsilon of every LayerNorm.
        share_embeddings: one matrix for source embedding, target embedding
            and pre-softmax projection (§3.4); needs one shared vocabulary.
            The target embedding and the output projection are always tied.
        activation: activation of the feed-forward networks.
        optimizer: Adam and learning-rate constants of §5.3.
        attention_settings: the options of every attention layer
            (`AttentionSettings`, or a mapping of its fields): the dropout on
            the attention weights (0 in the paper), the restricted
            self-attention `window` (§4), relative positions (Shaw et al.,
            2018; the position encodings stay), biases and grouped-query
            attention (`num_key_value_heads`, Ainslie et al., 2023).
    """

    vocabulary_size: int = 37000
    target_vocabulary_size: int | None = None
    num_encoder_layers: int = 6
    num_decoder_layers: int = 6
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: int | None = None
    value_dim: int | None = None
    dropout: float = 0.1
    ffn_dropout: float = 0.0
    position_encoding: str = "sinusoidal"
    max_length: int = 256
    norm_first: bool = False
    layer_norm_epsilon: float = 1e-6
    share_embeddings: bool = True
    activation: str = "relu"
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    attention_settings: AttentionSettings = dataclasses.field(
        default_factory=AttentionSettings
    )

    def __post_init__(self) -> None:
        # Each field by its config key (`model.<name>`), so that a training
        # config's error names the setting to fix.
        object.__setattr__(self, "optimizer", as_optimizer_config(self.optimizer))
        sizes = (
            "vocabulary_size",
            "num_encoder_layers",
            "num_decoder_layers",
            "d_model",
            "d_ff",
            "num_heads",
            "max_length",
        )
        check_fields(check_positive_int, self, sizes, section="model")
        try:
            settings = AttentionSettings.of(self.attention_settings)
            settings.check_sizes(self.num_heads)
        except ValueError as error:  # named by its config key
            message = str(error).replace(
                "attention_settings.", "model.attention_settings."
            )
            raise ValueError(message) from None
        object.__setattr__(self, "attention_settings", settings)
        optional = (
            "target_vocabulary_size",
            "key_dim",
            "value_dim",
        )
        check_fields(
            check_positive_int, self, optional, section="model", allow_none=True
        )
        rates = ("dropout", "ffn_dropout")
        check_fields(check_rate, self, rates, section="model")
        check_choice(
            "model.position_encoding", self.position_encoding, POSITION_ENCODINGS
        )
        switches = ("norm_first", "share_embeddings")
        check_fields(check_bool, self, switches, section="model")
        check_number("model.layer_norm_epsilon", self.layer_norm_epsilon, above=0.0)
        _check_activation(self.activation)
        if self.key_dim is None and self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads="
                f"{self.num_heads}: set key_dim explicitly or change one of them."
            )
        if self.position_encoding == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                "Sinusoidal position encodings (Eqs. 5-6) need an even d_model. "
                f"Received: d_model={self.d_model}. Use an even d_model or "
                "position_encoding='learned'."
            )
        if (
            self.share_embeddings
            and self.target_vocabulary_size is not None
            and self.target_vocabulary_size != self.vocabulary_size
        ):
            raise ValueError(
                "share_embeddings=True needs one vocabulary for source and "
                f"target. Received: vocabulary_size={self.vocabulary_size}, "
                f"target_vocabulary_size={self.target_vocabulary_size}. Set "
                "share_embeddings=False or use a shared vocabulary."
            )

    @property
    def head_key_dim(self) -> int:
        """`d_k`, resolved."""
        return self.key_dim or self.d_model // self.num_heads

    @property
    def head_value_dim(self) -> int:
        """`d_v`, resolved."""
        return self.value_dim or self.head_key_dim

    @property
    def target_vocabulary(self) -> int:
        """The target vocabulary size, resolved."""
        return self.target_vocabulary_size or self.vocabulary_size

    def replace(self, **changes: Any) -> TransformerConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        known = {field.name for field in dataclasses.fields(cls)}
        check_known_names(values, known, "TransformerConfig fields")
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransformerConfig:
        return cls.from_dict(json.loads(text))


class Presets(dict):
    """Named configurations (`presets`, `image_presets`): a dict whose
    unknown name raises a `KeyError` that lists the names there are."""

    def __missing__(self, name: str) -> Any:
        raise KeyError(f"No preset {name!r}; the presets are: {', '.join(self)}.")


def as_optimizer_config(value: Any) -> OptimizerConfig:
    """`model.optimizer` as an `OptimizerConfig` (from a mapping of its fields)."""
    if isinstance(value, OptimizerConfig):
        return value
    if isinstance(value, Mapping):
        known = [field.name for field in dataclasses.fields(OptimizerConfig)]
        check_known_names(
            value, known, "`model.optimizer` settings", listing="Known settings"
        )
        return OptimizerConfig(**value)
    raise ValueError(
        "`model.optimizer` must be a mapping of optimizer settings (a JSON "
        f'object such as {{"warmup_steps": 4000}}). Received: {value!r}'
    )


def _check_activation(value: Any) -> None:
    check_string("model.activation", value)
    try:
        keras.activations.get(value)
    except ValueError:
        raise ValueError(
            "`model.activation` must name a Keras activation function (the "
            f"paper's is 'relu'; e.g. 'gelu'). Received: model.activation={value!r}"
        ) from None
