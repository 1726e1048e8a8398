"""What encoder and decoder blocks share: arguments, sub-layer wiring, config."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.backend import residual_add
from keras_transformer.layers import masking
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.local_attention import RestrictedMultiHeadAttention
from keras_transformer.layers.normalization import LayerNormalization
from keras_transformer.validation import check_positive_int, check_rate


class TransformerBlockBase(keras.layers.Layer):
    """Base of `EncoderBlock` and `DecoderBlock` (not a public layer).

    Each sub-layer is wrapped as in §3.1 and §5.4: post-LN
    `LayerNorm(x + Dropout(Sublayer(x)))` by default, or pre-LN
    `x + Dropout(Sublayer(LayerNorm(x)))` with `norm_first=True`.
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        ffn_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        attention_window: int | None = None,
        use_bias: bool = True,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        check_positive_int("d_ff", d_ff)
        if key_dim is not None:
            check_positive_int("key_dim", key_dim)
        if value_dim is not None:
            check_positive_int("value_dim", value_dim)
        check_rate("dropout", dropout)
        check_rate("attention_dropout", attention_dropout)
        check_rate("ffn_dropout", ffn_dropout)
        if attention_window is not None:
            check_positive_int("attention_window", attention_window)
        if not layer_norm_epsilon > 0:
            raise ValueError(
                "`layer_norm_epsilon` must be positive. "
                f"Received: layer_norm_epsilon={layer_norm_epsilon!r}"
            )
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.ffn_dropout = ffn_dropout
        self.activation = activation
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.attention_window = attention_window
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    # ----------------------------------------------------------- construction
    def _model_dim(self, input_shape: Sequence[int | None]) -> int:
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} expects inputs of shape (batch, length, "
                f"d_model) with a known d_model. Received: {tuple(input_shape)}"
            )
        d_model = int(input_shape[-1])
        if self.key_dim is None and d_model % self.num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads="
                f"{self.num_heads}; pass key_dim explicitly or change one of them."
            )
        return d_model

    def _attention(
        self, name: str, d_model: int, restricted: bool = False
    ) -> MultiHeadAttention:
        """An attention sub-layer; `restricted` self-attention uses the window."""
        key_dim = self.key_dim or d_model // self.num_heads
        extra = {}
        attention_class = MultiHeadAttention
        if restricted and self.attention_window is not None:
            attention_class = RestrictedMultiHeadAttention
            extra["window"] = self.attention_window
        return attention_class(
            **extra,
            num_heads=self.num_heads,
            key_dim=key_dim,
            value_dim=self.value_dim or key_dim,
            output_dim=d_model,
            dropout=self.attention_dropout,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def _self_attend(
        self,
        inputs: Any,
        padding_mask: Any | None,
        attention_mask: Any | None,
        use_causal_mask: bool,
        training: bool | None,
    ) -> tuple[Any, Any]:
        """Self-attention of the whole sequence: `(output, scores)`.

        Full attention (Eq. 1) under the merged mask, or with
        `attention_window` r the blocked restricted attention of §4, whose
        cost grows as O(r n) (its scores are expanded to the dense
        `(batch, heads, n, n)` layout only when they are asked for).
        """
        attention = self.self_attention
        queries, keys, values = attention.project_self_attention(inputs)
        if self.attention_window is not None:
            output, scores = attention.attend_local(
                queries,
                keys,
                values,
                query_mask=padding_mask,
                key_mask=padding_mask,
                use_causal_mask=use_causal_mask,
                attention_mask=attention_mask,
                training=training,
            )
            length = ops.shape(inputs)[1]
            return output, lambda: attention.local_to_dense_scores(
                scores, length, use_causal_mask
            )
        length = ops.shape(inputs)[1]
        mask = masking.merge_attention_masks(
            length,
            length,
            query_mask=padding_mask,
            key_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
        )
        if mask is not None:
            # (batch, 1, length, length): the same mask for every head.
            mask = ops.expand_dims(mask, -3)
        output, scores = attention.attend(
            queries, keys, values, mask, training=training
        )
        return output, lambda: scores

    def _feed_forward(self) -> FeedForward:
        return FeedForward(
            d_ff=self.d_ff,
            activation=self.activation,
            dropout=self.ffn_dropout,
            use_bias=self.use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )

    def _norm(self, name: str, input_shape: Sequence[int | None]) -> keras.layers.Layer:
        # LayerNormalization computes its statistics in float32 under every
        # dtype policy and casts the result back.
        norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(input_shape)
        return norm

    def _dropout(self, name: str) -> keras.layers.Layer:
        return Dropout(self.dropout, dtype=self.dtype_policy, name=name)

    # ---------------------------------------------------------------- wiring
    def _sublayer(
        self,
        inputs: Any,
        sublayer: Callable[[Any], Any],
        norm: keras.layers.Layer,
        dropout: keras.layers.Layer,
        training: bool | None,
    ) -> Any:
        """One residual sub-layer of §3.1 with the residual dropout of §5.4."""
        if self.norm_first:
            return residual_add(
                inputs, dropout(sublayer(norm(inputs)), training=training)
            )
        return norm(residual_add(inputs, dropout(sublayer(inputs), training=training)))

    def compute_output_shape(
        self, input_shape: Sequence[int | None], *args: Any, **kwargs: Any
    ) -> tuple[int | None, ...]:
        return tuple(input_shape)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "d_ff": self.d_ff,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "ffn_dropout": self.ffn_dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "attention_window": self.attention_window,
                "use_bias": self.use_bias,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
