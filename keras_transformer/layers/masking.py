"""Attention masks: one polarity everywhere, `True` means "may attend".

A padding mask has shape `(batch, length)` and is `True` on real tokens. An
attention mask has shape `(batch, query_length, key_length)` (or
`(query_length, key_length)`, shared by the batch). Padding, causal and
explicit masks are combined with a logical AND.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from keras_transformer import backend

# The most negative float16 number: a fill value that is safe in every float
# dtype. Masked logits are replaced by it before the softmax, and the weights
# are multiplied by the mask afterwards, so masked keys get exactly zero weight
# and a fully masked row gets all-zero weights (never NaN).
MASK_FILL_VALUE = backend.MASK_FILL_VALUE


def padding_mask(token_ids: Any, padding_id: int = 0) -> Any:
    """Boolean `(batch, length)` mask, `True` where `token_ids != padding_id`."""
    return ops.not_equal(token_ids, padding_id)


def causal_mask(
    query_length: Any, key_length: Any, query_offset: Any = 0, window: int | None = None
) -> Any:
    """Boolean `(query_length, key_length)` mask of the decoder (§3.2.3).

    Query `i` sits at position `query_offset + i` and may attend to the keys at
    positions `0 .. query_offset + i`, so that "predictions for position i can
    depend only on the known outputs at positions less than i". With a
    `window` r (restricted self-attention, §4) only the keys at positions
    `query_offset + i - r .. query_offset + i` remain.
    """
    return cached_positions_mask(query_length, key_length, query_offset, window=window)


def cached_positions_mask(
    query_length: Any,
    cache_length: Any,
    index: Any,
    beam_size: int = 1,
    causal: bool = True,
    window: int | None = None,
) -> Any:
    """Boolean `(query_length, cache_length)` mask over the rows of a cache.

    In the cache layout of `MultiHeadAttention.empty_cache`, row `r` holds
    position `r // beam_size` (slot `r % beam_size`), and the query `i` of a
    call that writes at position `index` sits at position `index + i //
    beam_size`: with one hypothesis, `i` consecutive positions; with a beam,
    the hypotheses of position `index`. A query may attend to the rows of
    the positions up to its own when `causal` (§3.2.3), and, with a `window`
    r, to none more than r positions back (§4). Which slot of a position
    belongs to which hypothesis is the caller's mask (see
    `TransformerStack.decode_beam_step`).
    """
    query_positions = ops.arange(query_length, dtype="int32")
    key_positions = ops.arange(cache_length, dtype="int32")
    if beam_size != 1:
        query_positions = ops.floor_divide(query_positions, beam_size)
        key_positions = ops.floor_divide(key_positions, beam_size)
    query_positions = query_positions + ops.cast(index, "int32")
    # (query_length, cache_length): how far back each key lies.
    distance = ops.expand_dims(query_positions, 1) - ops.expand_dims(key_positions, 0)
    mask = ops.greater_equal(distance, 0) if causal else None
    if window is not None:
        within = ops.less_equal(distance, window)
        mask = within if mask is None else ops.logical_and(mask, within)
    if mask is None:
        return ops.ones_like(distance, dtype="bool")
    return mask


def check_padding_mask(name: str, mask: Any) -> None:
    """Raises `ValueError` unless `mask` has rank 2, `(batch, length)`."""
    rank = len(mask.shape)
    if rank != 2:
        raise ValueError(
            f"`{name}` must be a padding mask of rank 2, (batch, length), with "
            f"True on real tokens. Received: {name}.shape={tuple(mask.shape)}. "
            "Pass an attention mask of shape (batch, query_length, key_length) "
            "as `attention_mask` instead."
        )


def merge_attention_masks(
    query_length: Any,
    key_length: Any,
    query_mask: Any | None = None,
    key_mask: Any | None = None,
    attention_mask: Any | None = None,
    use_causal_mask: bool = False,
    query_offset: Any = 0,
) -> Any | None:
    """Combines padding, explicit and causal masks into one boolean mask.

    Args:
        query_length, key_length: the two sequence lengths.
        query_mask: padding mask of the queries, `(batch, query_length)`.
        key_mask: padding mask of the keys, `(batch, key_length)`.
        attention_mask: explicit mask, `(batch, query_length, key_length)` or
            `(query_length, key_length)`.
        use_causal_mask: add the decoder's causal mask.
        query_offset: position of the first query (cached decoding).

    Returns:
        `None` when there is nothing to mask, else a boolean mask of shape
        `(batch or 1, query_length, key_length)`.
    """
    mask = None
    if attention_mask is not None:
        rank = len(attention_mask.shape)
        if rank not in (2, 3):
            raise ValueError(
                "`attention_mask` must have rank 3, (batch, query_length, "
                "key_length), or rank 2, (query_length, key_length), with True "
                "where attention is allowed. Received: "
                f"attention_mask.shape={tuple(attention_mask.shape)}"
            )
        mask = ops.cast(attention_mask, "bool")
        if rank == 2:
            mask = ops.expand_dims(mask, 0)
    if query_mask is not None:
        check_padding_mask("query_mask", query_mask)
        # (batch, query_length, 1)
        query_part = ops.expand_dims(ops.cast(query_mask, "bool"), -1)
        mask = query_part if mask is None else ops.logical_and(mask, query_part)
    if key_mask is not None:
        check_padding_mask("key_mask", key_mask)
        # (batch, 1, key_length)
        key_part = ops.expand_dims(ops.cast(key_mask, "bool"), -2)
        mask = key_part if mask is None else ops.logical_and(mask, key_part)
    if use_causal_mask:
        causal = ops.expand_dims(causal_mask(query_length, key_length, query_offset), 0)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


def masked_softmax(logits: Any, mask: Any | None = None) -> Any:
    """Softmax over the last axis in float32, with exact zeros where masked (Eq. 1).

    Args:
        logits: `(..., key_length)`.
        mask: optional boolean mask broadcastable to `logits`; `True` means
            "may attend".

    Returns:
        float32 weights; rows with no allowed key are all zeros.
    """
    logits = ops.cast(logits, "float32")
    if logits.shape[-1] == 1:
        # A single key takes all the weight (Keras warns on a softmax over an
        # axis of size 1, which is correct but pointless here).
        weights = ops.ones_like(logits)
        if mask is None:
            return weights
        return weights * ops.cast(mask, "float32")
    if mask is None:
        return ops.softmax(logits, axis=-1)
    return backend.masked_softmax(logits, mask)
