"""One layer of the decoder stack (§3.1), with cached incremental decoding."""

from __future__ import annotations

from collections.abc import Callable, Sequence
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

    Incremental decoding feeds one (or a few) tokens per step through
    `call_cached`, reusing the keys and values of earlier positions from a
    fixed-size cache (static shapes, so the decoding loop compiles with XLA)
    and the encoder-decoder keys and values computed once by `init_cache`.

    Args:
        num_heads, d_ff, key_dim, value_dim, dropout, attention_dropout,
        ffn_dropout, activation, norm_first, layer_norm_epsilon, use_bias,
        attention_window, kernel_initializer, bias_initializer: as for
        `EncoderBlock`; the window restricts the masked self-attention.
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

    Returns:
        `(batch, target_length, d_model)`, or `(output, self_scores,
        cross_scores)` with self scores `(batch, heads, target_length,
        target_length)` and cross scores `(batch, heads, target_length,
        source_length)`.

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

    # ------------------------------------------------------------- full pass
    def call(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any,
        decoder_padding_mask: Any | None = None,
        encoder_padding_mask: Any | None = None,
        self_attention_mask: Any | None = None,
        use_causal_mask: bool = True,
        return_attention_scores: bool = False,
        training: bool | None = None,
        decoder_sequence_mask: Any | None = None,
        encoder_sequence_mask: Any | None = None,
    ) -> Any:
        if decoder_padding_mask is None:
            decoder_padding_mask = decoder_sequence_mask
        if encoder_padding_mask is None:
            encoder_padding_mask = encoder_sequence_mask
        target_length = ops.shape(decoder_sequence)[1]
        source_length = ops.shape(encoder_sequence)[1]
        cross_mask = masking.merge_attention_masks(
            target_length,
            source_length,
            query_mask=decoder_padding_mask,
            key_mask=encoder_padding_mask,
        )
        outputs, self_scores, cross_scores = self._forward(
            decoder_sequence,
            lambda x: self._self_attend(
                x, decoder_padding_mask, self_attention_mask, use_causal_mask, training
            ),
            cross_keys_values=self.cross_attention.project_key_value(encoder_sequence),
            cross_mask=_per_head(cross_mask),
            training=training,
        )
        if return_attention_scores:
            return outputs, self_scores(), cross_scores
        return outputs

    def _forward(
        self,
        decoder_sequence: Any,
        self_attend: Callable[[Any], tuple[Any, Callable[[], Any]]],
        cross_keys_values: tuple[Any, Any],
        cross_mask: Any,
        training: bool | None,
    ) -> tuple[Any, Callable[[], Any], Any]:
        """The three sub-layers; `self_attend(x)` returns `(output, scores_fn)`."""
        scores = {}

        # Masked self-attention block.
        def masked_self_attend(x: Any) -> Any:
            output, scores["self"] = self_attend(x)
            return output

        # Encoder-decoder attention block.
        def cross_attend(x: Any) -> Any:
            attention = self.cross_attention
            output, scores["cross"] = attention.attend(
                attention.project_query(x),
                *cross_keys_values,
                cross_mask,
                training=training,
            )
            return output

        outputs = self._sublayer(
            decoder_sequence,
            masked_self_attend,
            self.self_attention_norm,
            self.self_attention_dropout,
            training,
        )
        outputs = self._sublayer(
            outputs,
            cross_attend,
            self.cross_attention_norm,
            self.cross_attention_dropout,
            training,
        )
        # Feed-forward block.
        outputs = self._sublayer(
            outputs,
            lambda x: self.feed_forward(x, training=training),
            self.feed_forward_norm,
            self.feed_forward_dropout,
            training,
        )
        return outputs, scores["self"], scores["cross"]

    # ------------------------------------------------------ cached decoding
    def init_cache(
        self, encoder_sequence: Any, max_length: int, beam_size: int | None = None
    ) -> dict[str, Any]:
        """An empty self-attention cache and the encoder-decoder keys/values.

        Args:
            encoder_sequence: the encoder output `(batch, source_length,
                d_model)`.
            max_length: the number of target positions the cache can hold
                (0 for a cache that `call_beam_step(..., append=True)` grows).
            beam_size: with a number, a cache for `call_beam_step`: one
                self-attention slot per hypothesis at every position, and the
                encoder-decoder keys and values once per sequence.

        Returns:
            A dict of four tensors: `self_keys` and `self_values`
            `(batch, heads, max_length, head_dim)` filled with zeros
            (`(batch, heads, max_length * beam_size, head_dim)` with
            `beam_size`, slot `j` of position `t` at row `t * beam_size +
            j`), and `cross_keys`, `cross_values` `(batch, heads,
            source_length, head_dim)`.
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
            ops.shape(encoder_sequence)[0], max_length, beam_size
        )
        return {
            "self_keys": self_keys,
            "self_values": self_values,
            "cross_keys": cross_keys,
            "cross_values": cross_values,
        }

    def call_cached(
        self,
        decoder_step: Any,
        cache: dict[str, Any],
        cache_index: Any,
        encoder_padding_mask: Any | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Runs the block on the tokens at `cache_index ...` (inference only).

        Args:
            decoder_step: `(batch, step_length, d_model)`, the inputs of the
                positions `cache_index .. cache_index + step_length - 1`.
            cache: from `init_cache` or the previous step.
            cache_index: integer scalar (may be a tensor) where the step
                starts.
            encoder_padding_mask: boolean `(batch, source_length)`.

        Returns:
            `(outputs, cache)`: `(batch, step_length, d_model)` and the cache
            with this step's keys and values written at `cache_index`.
        """
        new_cache = dict(cache)

        def cached_self_attend(x: Any) -> tuple[Any, Callable[[], Any]]:
            output, scores, (keys, values) = self.self_attention.cached_self_attention(
                x,
                (cache["self_keys"], cache["self_values"]),
                cache_index,
                window=self.attention_window,
            )
            new_cache["self_keys"], new_cache["self_values"] = keys, values
            return output, lambda: scores

        outputs = self._cached_forward(
            decoder_step, cached_self_attend, cache, encoder_padding_mask
        )
        return outputs, new_cache

    def call_beam_step(
        self,
        hypotheses: Any,
        cache: dict[str, Any],
        cache_index: Any,
        beam_mask: Any,
        encoder_padding_mask: Any | None = None,
        append: bool = False,
    ) -> tuple[Any, dict[str, Any]]:
        """Runs the block on one position of `beam` hypotheses per sequence.

        The hypotheses of a sequence share its encoder-decoder keys and
        values (computed once, never repeated per hypothesis) and a
        self-attention cache with one slot per hypothesis and position,
        which is never reordered: `beam_mask` says which slots make up each
        hypothesis' history (see
        `MultiHeadAttention.cached_beam_self_attention`). Inference only.

        Args:
            hypotheses: `(batch, beam, d_model)`, the inputs at position
                `cache_index` of every hypothesis.
            cache: from `init_cache(..., beam_size=beam)` or the previous step.
            cache_index: integer scalar (may be a tensor): the position.
            beam_mask: boolean `(batch, beam, cached_length * beam)`.
            encoder_padding_mask: boolean `(batch, source_length)`.
            append: grow the cache by this position instead of writing it at
                `cache_index` (a cache holding exactly the earlier positions;
                graph mode only, as shapes change).

        Returns:
            `(outputs, cache)`: `(batch, beam, d_model)` and the new cache.

        Reference: Vaswani et al. (2017), §3.1 and §6.1.
        """
        new_cache = dict(cache)

        def beam_self_attend(x: Any) -> tuple[Any, Callable[[], Any]]:
            attention = self.self_attention
            output, scores, (keys, values) = attention.cached_beam_self_attention(
                x,
                (cache["self_keys"], cache["self_values"]),
                cache_index,
                beam_mask,
                window=self.attention_window,
                append=append,
            )
            new_cache["self_keys"], new_cache["self_values"] = keys, values
            return output, lambda: scores

        outputs = self._cached_forward(
            hypotheses, beam_self_attend, cache, encoder_padding_mask
        )
        return outputs, new_cache

    def _cached_forward(
        self,
        decoder_step: Any,
        self_attend: Callable[[Any], tuple[Any, Callable[[], Any]]],
        cache: dict[str, Any],
        encoder_padding_mask: Any | None,
    ) -> Any:
        """`_forward` at inference over the cached encoder-decoder keys/values."""
        cross_mask = None
        if encoder_padding_mask is not None:
            masking.check_padding_mask("encoder_padding_mask", encoder_padding_mask)
            # (batch, 1, source_length): the same for every query.
            cross_mask = ops.expand_dims(ops.cast(encoder_padding_mask, "bool"), -2)
        outputs, _, _ = self._forward(
            ops.cast(decoder_step, self.compute_dtype),
            self_attend,
            cross_keys_values=(cache["cross_keys"], cache["cross_values"]),
            cross_mask=_per_head(cross_mask),
            training=False,
        )
        return outputs

    # ----------------------------------------------------------- Keras glue
    def compute_output_spec(
        self,
        decoder_sequence: Any,
        encoder_sequence: Any,
        decoder_padding_mask: Any | None = None,
        encoder_padding_mask: Any | None = None,
        self_attention_mask: Any | None = None,
        use_causal_mask: bool = True,
        return_attention_scores: bool = False,
        training: bool | None = None,
        decoder_sequence_mask: Any | None = None,
        encoder_sequence_mask: Any | None = None,
    ) -> Any:
        output = keras.KerasTensor(decoder_sequence.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
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


def _per_head(mask: Any | None) -> Any | None:
    """(batch, query, key) -> (batch, 1, query, key): one mask for all heads."""
    return None if mask is None else ops.expand_dims(mask, -3)
