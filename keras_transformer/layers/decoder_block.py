"""One layer of the decoder stack (§3.1), with cached incremental decoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.layers import masking
from keras_transformer.layers._block import TransformerBlockBase


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderBlock(TransformerBlockBase):
    """Masked self-attention, encoder-decoder attention and a feed-forward net.

    "In addition to the two sub-layers in each encoder layer, the decoder
    inserts a third sub-layer, which performs multi-head attention over the
    output of the encoder stack ... We also modify the self-attention
    sub-layer in the decoder stack to prevent positions from attending to
    subsequent positions."

    Incremental decoding is the same call with a `cache` from `init_cache`:
    the step's keys and values are written into the self-attention cache
    at row `cache_update_index` (one layout, `MultiHeadAttention.empty_cache`:
    fixed size and static shapes, so the decoding loop compiles with XLA),
    and the encoder-decoder keys and values are those computed once by
    `init_cache`.

    Args:
        num_heads, d_ff, key_dim, value_dim, dropout, ffn_dropout, activation,
        norm_first, layer_norm_epsilon, attention_settings,
        kernel_initializer, bias_initializer: as for `EncoderBlock`; the
        window restricts the masked self-attention.
        **kwargs: base layer arguments.

    Call arguments:
        decoder_sequence: `(batch, target_length, d_model)`.
        encoder_sequence: the encoder output `(batch, source_length, d_model)`.
        decoder_padding_mask: boolean `(batch, target_length)`, `True` on real
            tokens; defaults to the Keras mask of `decoder_sequence`.
        encoder_padding_mask: boolean `(batch, source_length)`; defaults to the
            Keras mask of `encoder_sequence`.
        self_attention_mask: optional boolean
            `(batch, target_length, target_length)` added to the others.
        use_causal_mask: the decoder's causal mask (default true).
        return_attention_scores: also return both attention weights.
        training: whether dropout is active.
        cache: a dict from `init_cache` (or the previous step): the step's
            positions are decoded over it (inference: no dropout), and
            `encoder_sequence` may be omitted. With a cache
            `self_attention_mask` is over the cache rows (`(batch,
            step_length, rows)`, e.g. each hypothesis' history in a beam
            search) and `decoder_padding_mask` marks the step's queries.
        cache_update_index, positions: the cache row of the step's keys and
            values and where the queries and rows sit, as for
            `MultiHeadAttention.call`.

    Returns:
        `(batch, target_length, d_model)`, or `(output, self_scores,
        cross_scores)` with self scores `(batch, heads, target_length,
        target_length)` and cross scores `(batch, heads, target_length,
        source_length)`; with a cache, the updated cache comes last:
        `(output, cache)` or `(output, self_scores, cross_scores, cache)`
        (the self scores over the cache rows).

    Example:
    >>> import numpy as np
    >>> block = DecoderBlock(num_heads=2, d_ff=32)
    >>> y, x = np.zeros((2, 4, 8), "float32"), np.zeros((2, 6, 8), "float32")
    >>> tuple(block(y, x).shape)
    (2, 4, 8)

    Reference: Vaswani et al. (2017), §3.1, §3.2.3, §5.4.
    """

    def build(
        self,
        decoder_sequence_shape: Sequence[int | None],
        encoder_sequence_shape: Sequence[int | None] | None = None,
    ) -> None:
        d_model = self._model_dim(decoder_sequence_shape)
        if encoder_sequence_shape is None:
            encoder_sequence_shape = decoder_sequence_shape
        # Masked self-attention sub-layer.
        self.self_attention = self._attention(
            "self_attention", d_model, restricted=True
        )
        self.self_attention.build(decoder_sequence_shape, decoder_sequence_shape)
        self.self_attention_dropout = self._dropout("self_attention_dropout")
        self.self_attention_norm = self._norm(
            "self_attention_norm", decoder_sequence_shape
        )
        # Encoder-decoder attention sub-layer.
        self.cross_attention = self._attention("cross_attention", d_model)
        self.cross_attention.build(decoder_sequence_shape, encoder_sequence_shape)
        self.cross_attention_dropout = self._dropout("cross_attention_dropout")
        self.cross_attention_norm = self._norm(
            "cross_attention_norm", decoder_sequence_shape
        )
        # Feed-forward sub-layer.
        self.feed_forward = self._feed_forward()
        self.feed_forward.build(decoder_sequence_shape)
        self.feed_forward_dropout = self._dropout("feed_forward_dropout")
        self.feed_forward_norm = self._norm("feed_forward_norm", decoder_sequence_shape)
        self.built = True

    # ------------------------------------------------------------------ call
    def call(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any | None = None,
        decoder_padding_mask: Any | None = None,
        encoder_padding_mask: Any | None = None,
        self_attention_mask: Any | None = None,
        use_causal_mask: bool = True,
        return_attention_scores: bool = False,
        training: bool | None = None,
        decoder_sequence_mask: Any | None = None,
        encoder_sequence_mask: Any | None = None,
        cache: dict[str, Any] | None = None,
        cache_update_index: Any | None = None,
        positions: tuple[Any, Any] | None = None,
    ) -> Any:
        if decoder_padding_mask is None:
            decoder_padding_mask = decoder_sequence_mask
        if encoder_padding_mask is None:
            encoder_padding_mask = encoder_sequence_mask
        masking.check_mask_dtypes(
            decoder_padding_mask=decoder_padding_mask,
            encoder_padding_mask=encoder_padding_mask,
            self_attention_mask=self_attention_mask,
        )
        cache_arguments = cross_cache = None
        if cache is not None:
            training = False  # inference only
            decoder_sequence = ops.cast(decoder_sequence, self.compute_dtype)
            cache_arguments = {
                "cache": (cache["self_keys"], cache["self_values"]),
                "cache_update_index": cache_update_index,
                "positions": positions,
            }
            cross_cache = (cache["cross_keys"], cache["cross_values"])
        elif encoder_sequence is None:
            raise ValueError(
                "DecoderBlock needs the encoder output: pass encoder_sequence, "
                "or a cache from init_cache(encoder_sequence, rows)."
            )
        # Masked self-attention block.
        outputs, (self_scores, self_cache) = self._attention_sublayer(
            decoder_sequence,
            lambda x: self._self_attend(
                x,
                decoder_padding_mask,
                self_attention_mask,
                use_causal_mask,
                training,
                cache_arguments,
            ),
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        # Encoder-decoder attention block (its keys and values cached once).
        outputs, cross_scores = self._attention_sublayer(
            outputs,
            lambda x: self.cross_attention.call(
                x,
                encoder_sequence,
                query_mask=decoder_padding_mask,
                key_mask=encoder_padding_mask,
                training=training,
                cache=cross_cache,
            )[:2],
            self.cross_attention_norm,
            self.cross_attention_dropout,
            training,
        )
        # Feed-forward block.
        outputs = self._feed_forward_block(outputs, training)
        results = (outputs,)
        if return_attention_scores:
            results = (outputs, self_scores(), cross_scores)
        if cache is not None:
            new_cache = dict(zip(("self_keys", "self_values"), self_cache, strict=True))
            results = (*results, {**cache, **new_cache})
        return results[0] if len(results) == 1 else results

    # ------------------------------------------------------ cached decoding
    def init_cache(self, encoder_sequence: Any, rows: int) -> dict[str, Any]:
        """An empty self-attention cache and the encoder-decoder keys/values.

        Args:
            encoder_sequence: the encoder output `(batch, source_length,
                d_model)`.
            rows: the rows of the self-attention cache (one per target
                position, or one per hypothesis and position in a beam
                search: what each row holds is the caller's).

        Returns:
            A dict of four tensors: `self_keys` and `self_values`
            `(batch, kv_heads, rows, head_dim)` filled with zeros, and
            `cross_keys`, `cross_values` `(batch, kv_heads, source_length,
            head_dim)` (computed once per sequence).
        """
        if not self.built:
            raise ValueError(
                "DecoderBlock.init_cache needs a built block: call the block "
                "(or the model that holds it) once first."
            )
        cross_keys, cross_values = self.cross_attention.project_key_value(
            encoder_sequence
        )
        self_keys, self_values = self.self_attention.empty_cache(
            ops.shape(encoder_sequence)[0], rows
        )
        return {
            "self_keys": self_keys,
            "self_values": self_values,
            "cross_keys": cross_keys,
            "cross_values": cross_values,
        }

    # ----------------------------------------------------------- Keras glue
    def compute_output_spec(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        """Shapes of `call`'s results (the call arguments as keywords)."""
        output = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        if not kwargs.get("return_attention_scores"):
            return output
        batch, target_length = decoder_sequence.shape[0], decoder_sequence.shape[1]
        source_length = encoder_sequence.shape[1]
        self_scores = keras.KerasTensor(
            (batch, self.num_heads, target_length, target_length), dtype="float32"
        )
        cross_scores = keras.KerasTensor(
            (batch, self.num_heads, target_length, source_length), dtype="float32"
        )
        return output, self_scores, cross_scores
