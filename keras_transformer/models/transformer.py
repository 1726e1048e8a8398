"""The encoder-decoder Transformer as a functional Keras model (Figure 1).

`TransformerStack` holds the named layers of the model and runs them: the
encoder stack (`encode`), the decoder stack with the tied pre-softmax
projection (`decode`), and the decoder one position at a time with key/value
caches (`init_cache`, `decode_beam_step`). Every other piece of the package
runs the model through these methods: `build_transformer` wires them into a
functional model `(source_ids, target_ids) -> logits`; `encoder_model` and
`decoder_model` rebuild the two halves from the same layers (so they share
the weights); `keras_transformer.decoding` searches with it (greedy decoding
and sampling with one hypothesis) and `keras_transformer.visualize`
asks it for the attention weights. Token id 0 is padding.

Written with `keras` and `keras.ops` only: no TensorFlow import.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
from keras import ops

from keras_transformer.backend.portable import reshape_target
from keras_transformer.conventions import PAD_ID
from keras_transformer.layers import (
    DecoderBlock,
    Dropout,
    EncoderBlock,
    LayerNormalization,
    PositionEmbedding,
    ScaledEmbedding,
    SinusoidalPositionEncoding,
)
from keras_transformer.models.config import TransformerConfig

#: The three kinds of attention (§3.2.3), the keys of the attention weights
#: returned with `return_attention_scores=True`: `encode` returns
#: `{"encoder_self": [...]}`, `decode` `{"decoder_self": [...],
#: "encoder_decoder": [...]}`, each a list with one tensor per block.
ATTENTION_KINDS = ("encoder_self", "decoder_self", "encoder_decoder")

#: The caches of the decoder blocks, one `DecoderBlock.init_cache` dict each.
DecoderCaches = list[dict[str, Any]]


def block_arguments(config: TransformerConfig, dtype: Any = None) -> dict[str, Any]:
    """The arguments of every `EncoderBlock` and `DecoderBlock` of `config`
    (§3.1, §3.2.2: `h` heads of `d_k`, `d_v`, the position-wise `d_ff`,
    the dropout of §5.4), with `dtype`; what `build_transformer` and
    `build_classifier` give their blocks."""
    return {
        "num_heads": config.num_heads,
        "d_ff": config.d_ff,
        "key_dim": config.head_key_dim,
        "value_dim": config.head_value_dim,
        "dropout": config.dropout,
        "ffn_dropout": config.ffn_dropout,
        "activation": config.activation,
        "norm_first": config.norm_first,
        "layer_norm_epsilon": config.layer_norm_epsilon,
        "attention_settings": config.attention_settings,
        "dtype": dtype,
    }


@dataclasses.dataclass
class TransformerStack:
    """The named layers of a model from `build_transformer`, and its stacks.

    Created by `build_transformer`, or found again by name in a built (or
    loaded) model with `TransformerStack.of(model)`. Its methods are the one
    place where the layers are chained (Figure 1):

    - `encode`: embedding, positions, dropout, the N encoder blocks (and the
      final LayerNorm of a pre-LN model);
    - `decode`: the same for the decoder, then the pre-softmax projection
      tied to the target embedding (§3.4);
    - `init_cache` and `decode_beam_step`: the decoder one position at a
      time, for one or several hypotheses per example, with key/value
      caches (every block's one `call` with a cache), for inference.

    Example:
    >>> import numpy as np, keras_transformer as kt
    >>> from keras import ops
    >>> model = kt.models.build_transformer(kt.models.presets["tiny"])
    >>> stack = TransformerStack.of(model)
    >>> source, target = np.array([[5, 6, 7, 3]]), np.array([[2, 8, 9]])
    >>> encoded, weights = stack.encode(source, return_attention_scores=True)
    >>> per_block = weights["encoder_self"]  # (batch, heads, source, source)
    >>> len(per_block), tuple(per_block[0].shape)
    (2, (1, 4, 4, 4))
    >>> logits = stack.decode(target, encoded, ops.not_equal(source, 0))
    >>> tuple(logits.shape)
    (1, 3, 1000)

    Reference: Vaswani et al. (2017), §3.1, §3.4 and Figure 1.
    """

    source_embedding: ScaledEmbedding
    target_embedding: ScaledEmbedding
    source_position: keras.layers.Layer
    target_position: keras.layers.Layer
    source_dropout: keras.layers.Layer
    target_dropout: keras.layers.Layer
    encoder_blocks: list[EncoderBlock]
    decoder_blocks: list[DecoderBlock]
    encoder_final_norm: keras.layers.Layer | None
    decoder_final_norm: keras.layers.Layer | None

    @classmethod
    def create(cls, config: TransformerConfig, dtype: Any = None) -> TransformerStack:
        """New layers for `config` (what `build_transformer` wires together)."""
        d_model = config.d_model
        source_embedding = ScaledEmbedding(
            config.vocabulary_size,
            d_model,
            mask_zero=True,
            dtype=dtype,
            name="shared_embedding" if config.share_embeddings else "source_embedding",
        )
        if config.share_embeddings:
            target_embedding = source_embedding
        else:
            target_embedding = ScaledEmbedding(
                config.target_vocabulary,
                d_model,
                mask_zero=True,
                dtype=dtype,
                name="target_embedding",
            )

        if config.position_encoding == "none":
            raise ValueError(
                "model.position_encoding='none' is only for classifiers (the "
                "word-order ablation of build_classifier); a translation model "
                "needs 'sinusoidal' or 'learned' positions (§3.5)."
            )

        def position(name: str) -> keras.layers.Layer:
            if config.position_encoding == "learned":
                return PositionEmbedding(config.max_length, dtype=dtype, name=name)
            return SinusoidalPositionEncoding(dtype=dtype, name=name)

        block_args = block_arguments(config, dtype)

        def final_norm(name: str) -> keras.layers.Layer | None:
            if not config.norm_first:
                return None
            return LayerNormalization(
                epsilon=config.layer_norm_epsilon, dtype=dtype, name=name
            )

        return cls(
            source_embedding=source_embedding,
            target_embedding=target_embedding,
            source_position=position("source_position"),
            target_position=position("target_position"),
            source_dropout=Dropout(config.dropout, dtype=dtype, name="source_dropout"),
            target_dropout=Dropout(config.dropout, dtype=dtype, name="target_dropout"),
            encoder_blocks=[
                EncoderBlock(**block_args, name=f"encoder_block_{i}")
                for i in range(config.num_encoder_layers)
            ],
            decoder_blocks=[
                DecoderBlock(**block_args, name=f"decoder_block_{i}")
                for i in range(config.num_decoder_layers)
            ],
            encoder_final_norm=final_norm("encoder_final_norm"),
            decoder_final_norm=final_norm("decoder_final_norm"),
        )

    @classmethod
    def of(cls, model: keras.Model) -> TransformerStack:
        """Finds the layers of a model built by `build_transformer`."""
        names = {layer.name: layer for layer in model.layers}
        if "shared_embedding" in names:
            source_embedding = target_embedding = names["shared_embedding"]
        elif "source_embedding" in names and "target_embedding" in names:
            source_embedding = names["source_embedding"]
            target_embedding = names["target_embedding"]
        else:
            raise ValueError(
                f"Model {model.name!r} was not built by build_transformer: it has "
                "no 'shared_embedding' or 'source_embedding'/'target_embedding' "
                "layer."
            )

        def blocks(prefix: str) -> list[Any]:
            found = []
            while f"{prefix}_{len(found)}" in names:
                found.append(names[f"{prefix}_{len(found)}"])
            return found

        return cls(
            source_embedding=source_embedding,
            target_embedding=target_embedding,
            source_position=names["source_position"],
            target_position=names["target_position"],
            source_dropout=names["source_dropout"],
            target_dropout=names["target_dropout"],
            encoder_blocks=blocks("encoder_block"),
            decoder_blocks=blocks("decoder_block"),
            encoder_final_norm=names.get("encoder_final_norm"),
            decoder_final_norm=names.get("decoder_final_norm"),
        )

    @property
    def max_source_length(self) -> int | None:
        """How many source positions the model supports: `None` (unbounded)
        for sinusoids, the table size for learned position embeddings."""
        return getattr(self.source_position, "max_length", None)

    @property
    def max_target_length(self) -> int | None:
        """How many target positions the model supports: `None` (unbounded)
        for sinusoids, the table size for learned position embeddings."""
        return getattr(self.target_position, "max_length", None)

    # ------------------------------------------------------------- stacks
    def encode(
        self,
        source_ids: Any,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ) -> Any:
        """The encoder stack (Figure 1, left).

        Embedding (x sqrt(d_model), §3.4), positional encoding (§3.5),
        dropout on the sum (§5.4) and the N encoder blocks (§3.1), then the
        final LayerNorm of a pre-LN model. Padding (id 0) is masked.

        Args:
            source_ids: int `(batch, source_length)`, 0 for padding.
            training: whether dropout is active.
            return_attention_scores: also return the attention weights.

        Returns:
            The encoder output `(batch, source_length, d_model)`; with
            `return_attention_scores`, `(output, scores)` where `scores` is
            `{"encoder_self": [one (batch, heads, source_length,
            source_length) tensor per block]}`.
        """
        # The embedding (mask_zero=True) attaches the padding mask to its
        # output as a Keras mask; every following layer passes it on.
        hidden = self.source_embedding(source_ids)
        hidden = self.source_position(hidden)
        hidden = self.source_dropout(hidden, training=training)
        scores: dict[str, list[Any]] = {"encoder_self": []}
        for block in self.encoder_blocks:
            hidden = block(
                hidden,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                hidden, self_scores = hidden
                scores["encoder_self"].append(self_scores)
        if self.encoder_final_norm is not None:
            hidden = self.encoder_final_norm(hidden)
        return (hidden, scores) if return_attention_scores else hidden

    def decode(
        self,
        target_ids: Any,
        encoder_output: Any,
        source_padding_mask: Any,
        training: bool | None = None,
        return_attention_scores: bool = False,
        last_position_only: bool = False,
    ) -> Any:
        """The decoder stack and the tied pre-softmax projection (Figure 1, right).

        Embedding, positional encoding, dropout, the N decoder blocks (masked
        self-attention, encoder-decoder attention, feed-forward; §3.1) and
        the final LayerNorm of a pre-LN model, then the logits
        `hidden @ E^T` with the target embedding matrix `E` (§3.4).

        Args:
            target_ids: int `(batch, target_length)`: the decoder inputs (the
                start token, then the target shifted right), 0 for padding.
            encoder_output: `(batch, source_length, d_model)` from `encode`.
            source_padding_mask: boolean `(batch, source_length)`, `True` on
                real source tokens.
            training: whether dropout is active.
            return_attention_scores: also return the attention weights.
            last_position_only: project only the last position onto the
                vocabulary (what decoding without caches needs): logits
                `(batch, 1, vocabulary)`, equal to the last row of the full
                logits.

        Returns:
            float32 logits `(batch, target_length, vocabulary)`; with
            `return_attention_scores`, `(logits, scores)` where `scores` is
            `{"decoder_self": [...], "encoder_decoder": [...]}`, one tensor
            per block: `(batch, heads, target_length, target_length)`
            (causal) and `(batch, heads, target_length, source_length)`.
        """
        # The target padding mask travels as a Keras mask (as in `encode`).
        hidden = self.target_embedding(target_ids)
        hidden = self.target_position(hidden)
        hidden = self.target_dropout(hidden, training=training)
        scores: dict[str, list[Any]] = {"decoder_self": [], "encoder_decoder": []}
        for block in self.decoder_blocks:
            hidden = block(
                hidden,
                encoder_output,
                encoder_padding_mask=source_padding_mask,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if return_attention_scores:
                hidden, self_scores, cross_scores = hidden
                scores["decoder_self"].append(self_scores)
                scores["encoder_decoder"].append(cross_scores)
        logits = self._logits(hidden, last_position_only)
        return (logits, scores) if return_attention_scores else logits

    # ---------------------------------------------------- cached decoding
    def init_cache(
        self, encoder_output: Any, max_length: int, beam_size: int | None = None
    ) -> DecoderCaches:
        """Empty key/value caches for decoding `max_length` target positions.

        Args:
            encoder_output: `(batch, source_length, d_model)` from `encode`.
            max_length: the number of target positions the caches hold (0:
                caches that `decode_beam_step(..., append=True)` grows).
            beam_size: with a number, caches for `decode_beam_step`, with one
                self-attention slot per hypothesis and position.

        Returns:
            One `DecoderBlock.init_cache` dict per decoder block: the
            encoder-decoder keys and values (computed here, once per source)
            and zero-filled self-attention caches `(batch, heads,
            max_length, head_dim)` (`(batch, heads, max_length * beam_size,
            head_dim)` with `beam_size`, slot `j` of position `t` at row
            `t * beam_size + j`).
        """
        supported = self.max_target_length
        if supported is not None and max_length > supported:
            raise ValueError(
                f"max_length={max_length} is longer than the model supports "
                f"(learned positions up to {supported}). Decode fewer tokens or "
                "train a model with a larger max_length."
            )
        rows = max_length * (beam_size or 1)
        return [block.init_cache(encoder_output, rows) for block in self.decoder_blocks]

    def decode_beam_step(
        self,
        token_ids: Any,
        caches: DecoderCaches,
        index: Any,
        source_padding_mask: Any,
        beam_mask: Any,
        append: bool = False,
        output_matrix: Any = None,
    ) -> tuple[Any, DecoderCaches]:
        """One decoder step of `beam` hypotheses per example (beam search).

        Every hypothesis of an example is at position `index`. They share
        the example's encoder-decoder keys and values, and self-attention
        caches with one slot per hypothesis and position: hypothesis `k`
        writes slot `k` of position `index`, and `beam_mask` names the slots
        of its history, so a search that reorders hypotheses after a step
        (§6.1) moves a mask rather than the caches. With `beam = 1` this is
        greedy decoding (or sampling) one token at a time.

        Args:
            token_ids: int `(batch, beam)`: each hypothesis' previous output
                (the start token at index 0); `beam` must be static.
            caches: from `init_cache(..., beam_size=beam)` or the previous
                step.
            index: the position (int or scalar tensor).
            source_padding_mask: boolean `(batch, source_length)`.
            beam_mask: boolean `(batch, beam, cached_length * beam)`, `True`
                where hypothesis `k` may attend to slot `j` of position `t`
                (flat index `t * beam + j`); `cached_length` is the length of
                the caches after this step (`index + 1` with `append`).
            append: the caches hold exactly the positions before `index` and
                grow by one (shapes change every step: a TensorFlow graph,
                not XLA); otherwise they have a fixed size and the step is
                written at `index`.
            output_matrix: `target_embedding.output_matrix()`, computed once
                before the steps of a search (the same logits, faster).

        Returns:
            `(logits, caches)`: float32 `(batch, beam, vocabulary)` and the
            updated caches.

        Reference: Vaswani et al. (2017), §3 and §6.1.
        """
        token_ids = ops.convert_to_tensor(token_ids, "int32")
        beam = token_ids.shape[1]
        if beam is None:
            raise ValueError(
                "decode_beam_step needs a static number of hypotheses. Received: "
                f"token_ids.shape={tuple(token_ids.shape)}"
            )
        # Every hypothesis sits at the same position: embed them as `batch *
        # beam` sequences of one token. (batch * beam, 1, d_model)
        hidden = self.target_embedding(ops.reshape(token_ids, (-1, 1)))
        hidden = self.target_position(hidden, start_index=index)
        # (batch, beam, d_model); the batch is the one size not known when
        # traced, so the target is a constant (see `reshape_target`).
        hidden = ops.reshape(hidden, (*reshape_target(token_ids, 2), hidden.shape[-1]))
        index = ops.cast(index, "int32")
        if append:  # room for this step's rows at the end of the caches
            caches = [_grown(cache, beam) for cache in caches]
        # The beam layout of the caches: row `t * beam + k` holds slot `k` of
        # position `t`; the hypotheses all sit at position `index`.
        rows = ops.shape(caches[0]["self_keys"])[2]
        row_positions = ops.arange(rows, dtype="int32")
        positions = (
            ops.zeros((beam,), "int32") + index,
            row_positions if beam == 1 else row_positions // beam,
        )
        return self._decode_cached(
            hidden,
            caches,
            index * beam,
            source_padding_mask,
            self_attention_mask=beam_mask,
            use_causal_mask=False,  # the history mask is causal
            positions=positions,
            output_matrix=output_matrix,
        )

    def _decode_cached(
        self,
        hidden: Any,
        caches: DecoderCaches,
        index: Any,
        source_padding_mask: Any,
        output_matrix: Any = None,
        **step: Any,
    ) -> tuple[Any, DecoderCaches]:
        """The decoder blocks over their caches (`DecoderBlock.call` with a
        cache and `step`'s masks), then the logits: `(logits, caches)`."""
        new_caches = []
        for block, cache in zip(self.decoder_blocks, caches, strict=True):
            hidden, cache = block.call(
                hidden,
                encoder_padding_mask=source_padding_mask,
                cache=cache,
                cache_update_index=index,
                **step,
            )
            new_caches.append(cache)
        return self._logits(hidden, output_matrix=output_matrix), new_caches

    def _logits(
        self, hidden: Any, last_position_only: bool = False, output_matrix: Any = None
    ) -> Any:
        """Final LayerNorm (pre-LN), then the projection tied to `E` (§3.4)."""
        if self.decoder_final_norm is not None:
            hidden = self.decoder_final_norm(hidden)
        if last_position_only:
            hidden = hidden[:, -1:]  # (batch, 1, d_model)
        return self.target_embedding(hidden, reverse=True, output_matrix=output_matrix)


def _grown(cache: dict[str, Any], rows: int) -> dict[str, Any]:
    """A decoder block's cache with `rows` zero rows appended to its
    self-attention keys and values (one `Pad` op each, whose widths are
    constants, instead of building a block of zeros of the cache's shape)."""

    def grown(x: Any) -> Any:
        return ops.pad(x, ((0, 0), (0, 0), (0, rows), (0, 0)))

    return {
        **cache,
        "self_keys": grown(cache["self_keys"]),
        "self_values": grown(cache["self_values"]),
    }


def build_transformer(
    config: TransformerConfig, name: str = "transformer", dtype: Any = None
) -> keras.Model:
    """Builds the paper's encoder-decoder model, `(source_ids, target_ids) -> logits`.

    Args:
        config: the hyperparameters, e.g. `kt.models.presets["base"]`.
        name: name of the model.
        dtype: a dtype policy for every layer (e.g. `"mixed_float16"`);
            defaults to Keras' global policy.

    Returns:
        A functional `keras.Model` taking int32 `source_ids (batch,
        source_length)` and `target_ids (batch, target_length)` (the target
        shifted right, starting with the start token) and returning float32
        logits `(batch, target_length, target_vocabulary_size)`. Padding (id 0)
        is masked everywhere. With a shared vocabulary the source embedding,
        target embedding and output projection are one matrix.

    Example:
    >>> import keras_transformer as kt
    >>> model = kt.models.build_transformer(kt.models.presets["tiny"])
    >>> model.output_shape
    (None, None, 1000)

    Reference: Vaswani et al. (2017), §3, Figure 1.
    """
    stack = TransformerStack.create(config, dtype=dtype)
    source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
    encoder_output = stack.encode(source_ids)
    logits = stack.decode(target_ids, encoder_output, ops.not_equal(source_ids, PAD_ID))
    return keras.Model(inputs=[source_ids, target_ids], outputs=logits, name=name)


def encoder_model(model: keras.Model) -> keras.Model:
    """The encoder of a `build_transformer` model: `source_ids -> encoder_output`.

    The returned model shares its layers (and so its weights) with `model`.
    """
    stack = TransformerStack.of(model)
    source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    return keras.Model(source_ids, stack.encode(source_ids), name="encoder")


def decoder_model(model: keras.Model) -> keras.Model:
    """The decoder: `(target_ids, encoder_output, source_ids) -> logits`.

    `source_ids` only supplies the padding mask of the encoder output. The
    returned model shares its layers with `model`.
    """
    stack = TransformerStack.of(model)
    d_model = stack.target_embedding.embedding_dim
    target_ids = keras.Input(shape=(None,), dtype="int32", name="target_ids")
    encoder_output = keras.Input(shape=(None, d_model), name="encoder_output")
    source_ids = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    logits = stack.decode(target_ids, encoder_output, ops.not_equal(source_ids, PAD_ID))
    inputs = [target_ids, encoder_output, source_ids]
    decoder = keras.Model(inputs, logits, name="decoder")
    # `encoder_model`'s output carries the source padding mask, which this
    # model reads from `source_ids` instead: taking it quietly spares every
    # `decoder([target, encoder(source), source])` Keras' "destroy the mask"
    # warning.
    decoder.supports_masking = True
    return decoder
