"""One layer of the encoder stack (§3.1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras

from keras_transformer.layers import masking
from keras_transformer.layers._block import TransformerBlockBase


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderBlock(TransformerBlockBase):
    """Self-attention and a feed-forward network, each wrapped in a residual.

    "Each layer has two sub-layers. The first is a multi-head self-attention
    mechanism, and the second is a simple, position-wise fully connected
    feed-forward network. We employ a residual connection around each of the
    two sub-layers, followed by layer normalization." With
    `use_causal_mask=True` the block is also the layer of a decoder-only
    language model.

    Args:
        num_heads: number of attention heads `h`.
        d_ff: inner size of the feed-forward network.
        key_dim: size of each head `d_k`; defaults to `d_model / h`.
        value_dim: size `d_v`; defaults to `key_dim`.
        dropout: residual dropout `P_drop` on each sub-layer output (§5.4).
        ffn_dropout: dropout inside the feed-forward network.
        activation: activation of the feed-forward network (ReLU).
        norm_first: pre-LN variant `x + Sublayer(LayerNorm(x))`; the paper's
            post-LN `LayerNorm(x + Sublayer(x))` when false. A stack of pre-LN
            blocks should end with a final LayerNorm.
        layer_norm_epsilon: epsilon of the layer normalizations.
        attention_settings: the `AttentionSettings` of the attention layers
            (dropout, biases, relative positions, key/value heads); its
            `window` restricts self-attention to keys within that distance
            (§4, "restricted self-attention"), computed blockwise in O(r n)
            time and memory.
        kernel_initializer, bias_initializer: of the projections.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(batch, length, d_model)`.
        padding_mask: boolean `(batch, length)`, `True` on real tokens. When
            omitted, the Keras mask of `inputs` (from `mask_zero=True`) is used.
        attention_mask: boolean `(batch, length, length)`, `True` where
            attention is allowed; combined with the padding mask.
        use_causal_mask: forbid attention to later positions.
        return_attention_scores: also return the self-attention weights.
        training: whether dropout is active.

    Returns:
        `(batch, length, d_model)`, or `(output, scores)` with scores
        `(batch, num_heads, length, length)`.

    Example:
    >>> import numpy as np
    >>> block = EncoderBlock(num_heads=2, d_ff=32)
    >>> tuple(block(np.zeros((2, 5, 8), "float32")).shape)
    (2, 5, 8)

    Reference: Vaswani et al. (2017), §3.1, §3.2.3, §5.4.
    """

    def build(self, input_shape: Sequence[int | None]) -> None:
        d_model = self._model_dim(input_shape)
        # Self-attention sub-layer.
        self.self_attention = self._attention(
            "self_attention", d_model, restricted=True
        )
        self.self_attention.build(input_shape, input_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.self_attention_norm = self._norm("self_attention_norm", input_shape)
        # Feed-forward sub-layer.
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(input_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")
        self.feed_forward_norm = self._norm("feed_forward_norm", input_shape)
        self.built = True

    def call(
        self,
        inputs: Any,
        padding_mask: Any | None = None,
        attention_mask: Any | None = None,
        use_causal_mask: bool = False,
        return_attention_scores: bool = False,
        training: bool | None = None,
        mask: Any | None = None,
    ) -> Any:
        if padding_mask is None:
            padding_mask = mask
        masking.check_mask_dtypes(
            padding_mask=padding_mask, attention_mask=attention_mask
        )
        # Self-attention block.
        outputs, (scores, _) = self._attention_sublayer(
            inputs,
            lambda x: self._self_attend(
                x, padding_mask, attention_mask, use_causal_mask, training
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        # Feed-forward block.
        outputs = self._feed_forward_block(outputs, training)
        if return_attention_scores:
            return outputs, scores()
        return outputs

    def compute_output_spec(self, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        """Shapes of `call`'s results (the call arguments as keywords)."""
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not kwargs.get("return_attention_scores"):
            return output
        batch, length = inputs.shape[0], inputs.shape[1]
        scores = keras.KerasTensor(
            (batch, self.num_heads, length, length), dtype="float32"
        )
        return output, scores
