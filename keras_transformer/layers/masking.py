"""Attention masks: one polarity everywhere, `True` means "may attend";
and the checks of the shapes of what an attention layer is given.

A padding mask has shape `(batch, length)` and is `True` on real tokens. An
attention mask has shape `(batch, query_length, key_length)` (a batch of 1
is shared by the batch), as in Keras' `MultiHeadAttention`: a
`(query_length, key_length)` one could not be told from a padding mask
whose batch equals the query length. Padding, causal and explicit masks
are combined with a logical AND.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer import backend
from keras_transformer.validation import check_int, check_positive_int

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
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(
        query_offset, "int32"
    )
    key_positions = ops.arange(key_length, dtype="int32")
    # (query_length, key_length): how far back each key lies.
    distance = ops.expand_dims(query_positions, 1) - ops.expand_dims(key_positions, 0)
    mask = ops.greater_equal(distance, 0)
    if window is not None:
        mask = ops.logical_and(mask, ops.less_equal(distance, window))
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


def check_mask_dtypes(**masks: Any) -> None:
    """Raises `ValueError` naming a mask of a floating dtype: masks are
    boolean, or integers 0 and 1, with `True` (1) where attention is allowed.
    A float mask cannot be read safely: an additive mask (0 where allowed, a
    large negative number where not, as in many tutorials) would be cast to
    the inverse of itself, and a mask of 1.0 on padding to its inverse too;
    both computed without a word. A Python list (which has neither shape
    nor dtype) is refused with `TypeError` naming the conversion."""
    for name, mask in masks.items():
        if mask is None:
            continue
        if not (hasattr(mask, "dtype") and hasattr(mask, "shape")):
            raise TypeError(
                f"`{name}` must be a tensor or NumPy array of booleans, True "
                f"where attention is allowed. Received: {name} of type "
                f"{type(mask).__name__}. Pass np.asarray({name}, dtype=bool)."
            )
        dtype = keras.backend.standardize_dtype(mask.dtype)
        if "float" in dtype:
            raise ValueError(
                f"`{name}` must be boolean (or integers 0 and 1), True where "
                f"attention is allowed. Received: {name}.dtype={dtype}. A float "
                "mask is not read, since its meaning is ambiguous: pass "
                "`mask == 0` for an additive mask (0 where allowed, a large "
                "negative number where not), or `mask > 0.5` for one of 1.0 "
                "where allowed."
            )


def _known(length: Any) -> int | None:
    """A length as a Python int, or None where only the graph knows it."""
    try:
        return int(length)
    except TypeError:  # None, or a symbolic tensor
        return None


def check_mask_shapes(
    query_length: Any,
    key_length: Any,
    query_mask: Any | None = None,
    key_mask: Any | None = None,
    attention_mask: Any | None = None,
) -> None:
    """Raises `ValueError` naming a mask whose rank, or a length known before
    the call, disagrees with the attention's: a padding mask passed as
    `attention_mask`, or the mask of another sequence, which would fail
    inside the softmax with a broadcasting error, or of a float dtype
    (`check_mask_dtypes`). `attention_mask` must be
    `(batch, query_length, key_length)`: a two-dimensional one is refused,
    since a `(batch, length)` padding mask whose batch equals the query
    length has the shape of a `(query_length, key_length)` mask."""
    check_mask_dtypes(
        query_mask=query_mask, key_mask=key_mask, attention_mask=attention_mask
    )
    lengths = {"query": _known(query_length), "key": _known(key_length)}
    for name, mask, side in (
        ("query_mask", query_mask, "query"),
        ("key_mask", key_mask, "key"),
    ):
        if mask is None:
            continue
        check_padding_mask(name, mask)
        found = _known(mask.shape[1])
        if None not in (found, lengths[side]) and found != lengths[side]:
            raise ValueError(
                f"`{name}` covers {found} positions but the {side} sequence has "
                f"{lengths[side]}. Received: {name}.shape={tuple(mask.shape)}. "
                f"Pass the padding mask of the {side} sequence."
            )
    if attention_mask is None:
        return
    shape = tuple(attention_mask.shape)
    wanted = (lengths["query"], lengths["key"])
    found = tuple(_known(length) for length in shape[-2:])
    agree = len(shape) == 3 and all(
        None in pair or pair[0] == pair[1] for pair in zip(found, wanted, strict=True)
    )
    if not agree:
        query = "query_length" if wanted[0] is None else wanted[0]
        key = "key_length" if wanted[1] is None else wanted[1]
        raise ValueError(
            "`attention_mask` must be (batch, query_length, key_length), here "
            f"(batch, {query}, {key}), True where attention is allowed. "
            f"Received: attention_mask.shape={shape}. A padding mask, (batch, "
            "length), goes in `query_mask` or `key_mask` (`value_mask`) "
            f"instead; a ({query}, {key}) mask shared by the batch as "
            "mask[None]."
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
        attention_mask: explicit mask, `(batch, query_length, key_length)`
            (a batch of 1: shared by the batch).
        use_causal_mask: add the decoder's causal mask.
        query_offset: position of the first query (cached decoding).

    Returns:
        `None` when there is nothing to mask, else a boolean mask of shape
        `(batch or 1, query_length, key_length)`.
    """
    check_mask_shapes(query_length, key_length, query_mask, key_mask, attention_mask)
    mask = None
    if attention_mask is not None:
        mask = ops.cast(attention_mask, "bool")
    if query_mask is not None:
        # (batch, query_length, 1)
        query_part = ops.expand_dims(ops.cast(query_mask, "bool"), -1)
        mask = query_part if mask is None else ops.logical_and(mask, query_part)
    if key_mask is not None:
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


def restricted_attention_mask(length: int, window: int, causal: bool = False) -> Any:
    """The dense equivalent of `RestrictedMultiHeadAttention`'s band.

    Query `i` may attend to key `j` when `|i - j| <= window`, and when
    `causal`, only to `i - window <= j <= i`. Costs `O(length^2)`; meant for
    tests, small inputs and the dense decoding cache of `DecoderBlock`.

    Args:
        length: the sequence length `n`.
        window: the radius `r`.
        causal: keep only the left half of the band (decoder self-attention).

    Returns:
        boolean `(length, length)`, `True` means "may attend".

    Example:
    >>> import numpy as np
    >>> np.asarray(restricted_attention_mask(4, 1)).astype(int)[0].tolist()
    [1, 1, 0, 0]
    """
    check_positive_int("window", window)
    positions = ops.arange(length, dtype="int32")
    # (length, length): query position minus key position.
    distance = ops.expand_dims(positions, 1) - ops.expand_dims(positions, 0)
    if causal:
        return ops.logical_and(distance >= 0, distance <= window)
    return ops.abs(distance) <= window


def local_block_attention_mask(
    length: int,
    query_block_length: int,
    memory_length: int,
    causal: bool = False,
) -> Any:
    """The dense equivalent of `LocalBlockAttention`'s memory pattern.

    Query `i` lies in the block starting at `s = (i // query_block_length) *
    query_block_length` and may attend to keys `s - memory_length <= j < s +
    query_block_length` (and only `j <= i` when `causal`). Costs
    `O(length^2)`.

    Args:
        length: the sequence length `n`.
        query_block_length: `l_q`.
        memory_length: `l_m`, the positions preceding each block.
        causal: mask the keys after each query.

    Returns:
        boolean `(length, length)`, `True` means "may attend".
    """
    check_positive_int("query_block_length", query_block_length)
    check_int("memory_length", memory_length, 0)
    positions = ops.arange(length, dtype="int32")
    # (length, 1): first position of each query's block.
    starts = ops.expand_dims((positions // query_block_length) * query_block_length, 1)
    keys = ops.expand_dims(positions, 0)
    mask = ops.logical_and(
        keys >= starts - memory_length, keys < starts + query_block_length
    )
    if causal:
        mask = ops.logical_and(mask, keys <= ops.expand_dims(positions, 1))
    return mask


def input_features(name: str, shape: Sequence[int | None]) -> int:
    """The last dimension of the attention input `name` (its features),
    after checking that it is `(batch, length, features)` with known
    features."""
    if len(shape) != 3:
        raise ValueError(
            f"MultiHeadAttention expects `{name}` of rank 3 "
            f"(batch, length, features). Received: {name}.shape={tuple(shape)}"
        )
    if shape[-1] is None:
        raise ValueError(
            f"The last dimension of `{name}` must be known. "
            f"Received: {name}.shape={tuple(shape)}"
        )
    return int(shape[-1])


def check_attention_inputs(layer: Any, query: Any, value: Any, key: Any) -> None:
    """Raises a one-line `ValueError` where the static shapes of the inputs
    of the built attention `layer` disagree with each other or with its
    kernels (another batch size, keys and values of different lengths,
    features of another width): they would fail inside a matrix product
    with TensorFlow's own error."""
    inputs = {"query": query, "value": value, "key": key}
    shapes = {name: tuple(x.shape) for name, x in inputs.items() if x is not None}
    received = ", ".join(f"{name}.shape={shape}" for name, shape in shapes.items())
    # Without a value the query is the value; without a key, the value is.
    read_as = {"query": "query", "value": "value" if value is not None else "query"}
    read_as["key"] = "key" if key is not None else read_as["value"]
    for name, source in read_as.items():
        features = input_features(source, shapes[source])
        width = getattr(layer, f"{name}_kernel").shape[0]
        if features != width:
            role = f"`{name}`" if name == source else f"`{source}` (as the {name})"
            raise ValueError(
                f"{role} has {features} features but {layer.name} was built for "
                f"{width}; call it with inputs of the width it was built with. "
                f"Received: {received}"
            )
    batches = {shape[0] for shape in shapes.values()} - {None}
    if len(batches) > 1:
        raise ValueError(
            f"{layer.name}'s inputs hold different numbers of sequences: pass "
            f"one value (and key) sequence per query sequence. Received: {received}"
        )
    if value is not None and key is not None:
        lengths = {shapes["key"][1], shapes["value"][1]} - {None}
        if len(lengths) > 1:
            raise ValueError(
                f"`key` and `value` must have the same length (one value per "
                f"key). Received: {received}"
            )
