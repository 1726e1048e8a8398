"""What encoder and decoder blocks share: arguments, sub-layer wiring, config."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.backend import residual_add
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.attention_settings import AttentionSettings
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
    `attention_settings` (an `AttentionSettings` or a mapping of its fields)
    go unchanged to the self-attention; cross-attention gets them without
    the window and the relative positions. Their `use_bias` also sets the
    biases of the feed-forward network.
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        dropout: float = 0.1,
        ffn_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        layer_norm_epsilon: float = 1e-6,
        attention_settings: AttentionSettings | dict[str, Any] | None = None,
        kernel_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        bias_initializer: str | keras.initializers.Initializer = "zeros",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_positive_int("num_heads", num_heads)
        self.attention_settings = AttentionSettings.of(attention_settings)
        self.attention_settings.check_sizes(num_heads)
        check_positive_int("d_ff", d_ff)
        for name, size in (("key_dim", key_dim), ("value_dim", value_dim)):
            check_positive_int(name, size, allow_none=True)
        check_rate("dropout", dropout)
        check_rate("ffn_dropout", ffn_dropout)
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
        self.ffn_dropout = ffn_dropout
        self.activation = activation
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
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
        """An attention sub-layer; `restricted` self-attention uses the window
        (`RestrictedMultiHeadAttention`) and the relative positions."""
        settings = self.attention_settings
        if not restricted:
            return MultiHeadAttention(
                **self._attention_arguments(
                    name, d_model, settings.for_cross_attention()
                )
            )
        if settings.window is None:
            return MultiHeadAttention(**self._attention_arguments(name, d_model))
        return RestrictedMultiHeadAttention(
            window=settings.window, **self._attention_arguments(name, d_model)
        )

    def _attention_arguments(
        self, name: str, d_model: int, settings: AttentionSettings | None = None
    ) -> dict[str, Any]:
        """The arguments of an attention sub-layer (by default with the
        block's settings unchanged)."""
        key_dim = self.key_dim or d_model // self.num_heads
        return {
            "num_heads": self.num_heads,
            "key_dim": key_dim,
            "value_dim": self.value_dim or key_dim,
            "output_dim": d_model,
            "settings": settings or self.attention_settings,
            "kernel_initializer": self.kernel_initializer,
            "bias_initializer": self.bias_initializer,
            "dtype": self.dtype_policy,
            "name": name,
        }

    def _self_attend(
        self,
        inputs: Any,
        padding_mask: Any | None,
        attention_mask: Any | None,
        use_causal_mask: bool,
        training: bool | None,
        cache_arguments: dict[str, Any] | None = None,
    ) -> tuple[Any, tuple[Callable[[], Any], tuple[Any, Any] | None]]:
        """The self-attention layer's one call: `(output, (scores_fn, cache))`.

        Without a cache, the whole sequence: full attention (Eq. 1) under the
        merged mask, or with a `window` r the blocked restricted attention of
        §4, whose cost grows as O(r n) (its scores are expanded to the dense
        `(batch, heads, n, n)` layout only when `scores_fn` is called). With
        `cache_arguments` (`cache`, `cache_update_index`, `positions`, see
        `MultiHeadAttention.call`), the step's queries over the cache;
        `padding_mask` then marks the queries only.
        """
        attention = self.self_attention
        if cache_arguments is not None:
            output, scores, cache = attention.call(
                inputs,
                query_mask=padding_mask,
                attention_mask=attention_mask,
                use_causal_mask=use_causal_mask,
                **cache_arguments,
            )
            return output, (lambda: scores, cache)
        output, scores, _ = attention.call(
            inputs,
            query_mask=padding_mask,
            key_mask=padding_mask,
            attention_mask=attention_mask,
            use_causal_mask=use_causal_mask,
            training=training,
        )
        if self.attention_settings.window is None:
            return output, (lambda: scores, None)
        length = ops.shape(inputs)[1]
        return output, (
            lambda: attention.local_to_dense_scores(scores, length, use_causal_mask),
            None,
        )

    def _feed_forward(self) -> FeedForward:
        return FeedForward(
            d_ff=self.d_ff,
            activation=self.activation,
            dropout=self.ffn_dropout,
            use_bias=self.attention_settings.use_bias,
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
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        if not keras.backend.is_float_dtype(dtype):
            # Integer or boolean features count as their values, as Dense and
            # the attention take them (the residual sum cannot mix dtypes).
            inputs = keras.ops.cast(inputs, self.compute_dtype)
        if self.norm_first:
            return residual_add(
                inputs, dropout(sublayer(norm(inputs)), training=training)
            )
        return norm(residual_add(inputs, dropout(sublayer(inputs), training=training)))

    def _attention_sublayer(
        self,
        inputs: Any,
        attend: Callable[[Any], tuple[Any, Any]],
        norm: keras.layers.Layer,
        dropout: keras.layers.Layer,
        training: bool | None,
    ) -> tuple[Any, Any]:
        """`_sublayer` around `attend(x) -> (output, extra)`: `(outputs, extra)`
        (the extra being the attention weights, or the weights and a cache)."""
        extras = []

        def sublayer(x: Any) -> Any:
            output, extra = attend(x)
            extras.append(extra)
            return output

        return self._sublayer(inputs, sublayer, norm, dropout, training), extras[0]

    def _feed_forward_block(self, inputs: Any, training: bool | None) -> Any:
        """The position-wise feed-forward sub-layer (§3.3) with its residual."""
        return self._sublayer(
            inputs,
            lambda x: self.feed_forward(x, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            training,
        )

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
                "ffn_dropout": self.ffn_dropout,
                "activation": self.activation,
                "norm_first": self.norm_first,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "attention_settings": self.attention_settings.to_dict(),
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
