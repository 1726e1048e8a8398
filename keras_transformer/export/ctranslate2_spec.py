"""A `build_transformer` model as a CTranslate2 `TransformerSpec` with its weights.

CTranslate2 has no TensorFlow/Keras converter: `transformer_spec` copies
the Keras weights into its model specification, and `check_convertible`
refuses first, in one line, what CTranslate2 cannot express. Used by
`keras_transformer.export.ctranslate2.export_ctranslate2`; imports numpy,
Keras and ``ctranslate2`` only when called.

Reference: Vaswani et al. (2017), §3.1-§3.5; Ainslie et al. (2023)
(grouped-query attention, CTranslate2's ``num_heads_kv``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["check_convertible", "transformer_spec"]

#: Keras activation name -> `ctranslate2.specs.common_spec.Activation` name.
_ACTIVATIONS = {
    "relu": "RELU",
    "gelu": "GELU",
    "silu": "SWISH",
    "swish": "SWISH",
    "tanh": "Tanh",
    "sigmoid": "Sigmoid",
}


# ------------------------------------------------------------------ refusals
def check_convertible(model: Any) -> None:
    """Refuses, in one line, a model that CTranslate2 cannot express.

    CTranslate2's Transformer has full (not restricted) attention, added
    sinusoidal or learned positions, no relative positions beside absolute
    ones, `d_v = d_k`, biases on every projection, and a few activations.

    Args:
        model: a Keras model from `build_transformer`.

    Raises:
        ValueError: naming the setting and what to do instead.
    """
    from keras_transformer.layers import PositionEmbedding, SinusoidalPositionEncoding
    from keras_transformer.models import TransformerStack

    stack = TransformerStack.of(model)
    for layer in (stack.source_position, stack.target_position):
        if not isinstance(layer, SinusoidalPositionEncoding | PositionEmbedding):
            raise ValueError(
                f"CTranslate2 cannot express the position layer {layer.name!r} "
                f"({type(layer).__name__}); export a model with "
                "model.position_encoding='sinusoidal' or 'learned'."
            )
        if layer.merge_mode != "add":
            raise ValueError(
                f"CTranslate2 adds position encodings; {layer.name!r} has "
                f"merge_mode={layer.merge_mode!r} (concatenated positions). Use "
                "keras-transformer export (the SavedModel) for this model."
            )
    for block in [*stack.encoder_blocks, *stack.decoder_blocks]:
        _check_block(block)


def _check_block(block: Any) -> None:
    """One block's settings that CTranslate2 has no counterpart for."""
    settings = block.attention_settings
    refusals = {
        "attention_settings.window": (
            settings.window,
            "restricted self-attention (§4)",
        ),
        "attention_settings.relative_positions": (
            settings.relative_positions,
            "relative position representations beside absolute positions "
            "(CTranslate2 drops the position encodings with them)",
        ),
        "attention_settings.use_bias": (
            None if settings.use_bias else False,
            "projections without biases",
        ),
        "value_dim": (
            block.value_dim if block.value_dim not in (None, block.key_dim) else None,
            "d_v different from d_k",
        ),
        "activation": (
            None if str(block.activation) in _ACTIVATIONS else block.activation,
            f"the activation (CTranslate2 has {', '.join(sorted(_ACTIVATIONS))})",
        ),
    }
    for name, (value, what) in refusals.items():
        if value is not None:
            raise ValueError(
                f"CTranslate2 cannot express model.{name}={value!r} ({what}); "
                "export this model with keras-transformer export (the "
                "SavedModel) instead."
            )


# ----------------------------------------------------------------- the spec
def _linear(spec: Any, kernels: Sequence[Any], biases: Sequence[Any]) -> None:
    """A CTranslate2 linear layer from Keras kernels `(in, out)`, fused along
    the outputs (CTranslate2 stores `(out, in)`)."""
    import numpy as np

    spec.weight = np.concatenate([np.asarray(k).T for k in kernels], axis=0)
    spec.bias = np.concatenate([np.asarray(b) for b in biases], axis=0)


def _norm(spec: Any, layer: Any) -> None:
    import numpy as np

    spec.gamma = np.asarray(layer.gamma)
    spec.beta = np.asarray(layer.beta)


def _attention(spec: Any, layer: Any, norm: Any, self_attention: bool) -> None:
    """Self-attention: one fused QKV linear; encoder-decoder attention: Q,
    then fused KV; then W^O (Eq. 2). Heads are the consecutive `d_k`
    slices of each projection, in both."""
    q, k, v = layer.query_kernel, layer.key_kernel, layer.value_kernel
    qb, kb, vb = layer.query_bias, layer.key_bias, layer.value_bias
    if self_attention:
        _linear(spec.linear[0], (q, k, v), (qb, kb, vb))
    else:
        _linear(spec.linear[0], (q,), (qb,))
        _linear(spec.linear[1], (k, v), (kb, vb))
    _linear(spec.linear[-1], (layer.output_kernel,), (layer.output_bias,))
    _norm(spec.layer_norm, norm)


def _feed_forward(spec: Any, block: Any) -> None:
    ffn = block.feed_forward
    inner, outer = ffn.inner_dense, ffn.output_dense
    _linear(spec.linear_0, (inner.kernel,), (inner.bias,))
    _linear(spec.linear_1, (outer.kernel,), (outer.bias,))
    _norm(spec.layer_norm, block.feed_forward_norm)


def _position_table(layer: Any, rows: int, depth: int) -> Any:
    """The `(rows, depth)` table the model adds: Eqs. 5-6 interleaved, or
    the learned embeddings of row (E)."""
    import numpy as np
    from keras import ops

    from keras_transformer.layers.position import sinusoidal_encoding

    if hasattr(layer, "position_embeddings"):
        return np.asarray(layer.position_embeddings)
    table = sinusoidal_encoding(np.arange(rows), depth, layer.max_wavelength)
    return ops.convert_to_numpy(table)


def transformer_spec(model: Any, position_rows: int) -> Any:
    """The `ctranslate2.specs.TransformerSpec` of a `build_transformer`
    model, its weights filled in (vocabularies not yet registered).

    Args:
        model: the Keras model (`check_convertible` first).
        position_rows: rows of the sinusoid table: the longest source or
            output the folder will serve (learned tables keep their size).

    Returns:
        The spec, post-LN (§3.1) or pre-LN with final norms as the model.

    Reference: Vaswani et al. (2017), §3.1-§3.5.
    """
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    from keras_transformer.models import TransformerStack

    stack = TransformerStack.of(model)
    first = stack.encoder_blocks[0]
    d_model = stack.source_embedding.embedding_dim
    head_dim = first.key_dim or d_model // first.num_heads
    activation = common_spec.Activation[_ACTIVATIONS[str(first.activation)]]
    # Grouped-query attention (Ainslie et al., 2023): CTranslate2's
    # `num_heads_kv`, the same consecutive grouping of the query heads.
    kv_heads = first.attention_settings.key_value_heads(first.num_heads)
    options = {
        "pre_norm": first.norm_first,
        "activation": activation,
        "head_dim": None if head_dim * first.num_heads == d_model else head_dim,
        "num_heads_kv": None if kv_heads == first.num_heads else kv_heads,
    }
    encoder = transformer_spec.TransformerEncoderSpec(
        len(stack.encoder_blocks), first.num_heads, **options
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        len(stack.decoder_blocks), first.num_heads, **options
    )
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = float(first.layer_norm_epsilon)

    for side, position in (
        (encoder, stack.source_position),
        (decoder, stack.target_position),
    ):
        table = _position_table(position, position_rows, d_model)
        side.position_encodings.encodings = table.astype("float32")
    encoder.embeddings[0].weight = np.asarray(stack.source_embedding.embeddings)
    decoder.embeddings.weight = np.asarray(stack.target_embedding.embeddings)
    # §3.4: the pre-softmax linear is the target embedding matrix, unscaled.
    decoder.projection.weight = np.asarray(stack.target_embedding.embeddings)
    for layer, block in zip(encoder.layer, stack.encoder_blocks, strict=True):
        _attention(
            layer.self_attention, block.self_attention, block.self_attention_norm, True
        )
        _feed_forward(layer.ffn, block)
    for layer, block in zip(decoder.layer, stack.decoder_blocks, strict=True):
        _attention(
            layer.self_attention, block.self_attention, block.self_attention_norm, True
        )
        _attention(
            layer.attention, block.cross_attention, block.cross_attention_norm, False
        )
        _feed_forward(layer.ffn, block)
    if stack.encoder_final_norm is not None:
        _norm(encoder.layer_norm, stack.encoder_final_norm)
        _norm(decoder.layer_norm, stack.decoder_final_norm)
    return spec
