"""Token embeddings scaled by sqrt(d_model), shared with the output layer (§3.4)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_transformer import backend
from keras_transformer.validation import check_positive_int


@keras.saving.register_keras_serializable(package="keras_transformer")
class ScaledEmbedding(keras.layers.Layer):
    """Token embedding multiplied by sqrt(d_model), usable as the output layer.

    "We use learned embeddings to convert the input tokens and output tokens
    to vectors of dimension d_model ... we share the same weight matrix
    between the two embedding layers and the pre-softmax linear
    transformation ... In the embedding layers, we multiply those weights by
    sqrt(d_model)." Calling the layer with `reverse=True` maps hidden states
    back onto the vocabulary with the transposed matrix, so one instance can
    serve as source embedding, target embedding and pre-softmax linear layer:
    one variable, shared.

    Args:
        vocabulary_size: number of tokens.
        embedding_dim: `d_model`.
        mask_zero: token id 0 is padding; the layer then emits a padding mask
            (`True` on real tokens) that downstream layers pick up.
        scale: multiply the embeddings by sqrt(embedding_dim) (§3.4).
        embeddings_initializer: initializer of the matrix; the default normal
            with standard deviation `embedding_dim ** -0.5` makes the scaled
            embeddings have unit variance.
        logits_dtype: dtype of the `reverse=True` output; float32 keeps the
            loss's softmax in float32 under mixed precision.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: integer token ids `(batch, length)`, or with `reverse=True`
            hidden states `(batch, length, embedding_dim)`.
        reverse: project hidden states onto the vocabulary (logits).
        output_matrix: with `reverse`, `output_matrix()` computed once by
            the caller: a decoding loop passes it to every step, whose
            product is then a plain `MatMul`, for a few rows faster than
            one with the transposed operand (the same logits).

    Example:
    >>> import numpy as np
    >>> embedding = ScaledEmbedding(vocabulary_size=100, embedding_dim=8)
    >>> hidden = embedding(np.array([[5, 6, 0]]))
    >>> tuple(hidden.shape), tuple(embedding(hidden, reverse=True).shape)
    ((1, 3, 8), (1, 3, 100))

    Reference: Vaswani et al. (2017), §3.4; Press & Wolf (2017).
    """

    def __init__(
        self,
        vocabulary_size: int,
        embedding_dim: int,
        mask_zero: bool = False,
        scale: bool = True,
        embeddings_initializer: str | keras.initializers.Initializer | None = None,
        logits_dtype: str = "float32",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_positive_int("vocabulary_size", vocabulary_size)
        check_positive_int("embedding_dim", embedding_dim)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.mask_zero = mask_zero
        self.scale = scale
        if embeddings_initializer is None:
            embeddings_initializer = keras.initializers.RandomNormal(
                stddev=embedding_dim**-0.5
            )
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.logits_dtype = logits_dtype
        self.supports_masking = True

    def build(self, input_shape: Sequence[int | None] | None = None) -> None:
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocabulary_size, self.embedding_dim),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def output_matrix(self) -> Any:
        """`E^T`, `(embedding_dim, vocabulary_size)` in the compute dtype: the
        pre-softmax linear transformation of §3.4, for ``call(hidden,
        reverse=True, output_matrix=...)``."""
        return ops.transpose(ops.cast(self.embeddings, self.compute_dtype))

    def call(
        self, inputs: Any, reverse: bool = False, output_matrix: Any = None
    ) -> Any:
        if reverse:
            if inputs.shape[-1] != self.embedding_dim:
                raise ValueError(
                    f"reverse=True projects hidden states of size "
                    f"{self.embedding_dim} onto the vocabulary. Received: "
                    f"inputs.shape={tuple(inputs.shape)}"
                )
            hidden = ops.cast(inputs, self.compute_dtype)
            if output_matrix is None:
                # (batch, length, vocabulary_size)
                embeddings = ops.cast(self.embeddings, self.compute_dtype)
                logits = backend.matmul_transposed(hidden, embeddings)
            else:  # the 2-D product of every linear map of the model
                logits = backend.linear(hidden, output_matrix)
            return ops.cast(logits, self.logits_dtype)
        self._check_ids(inputs)
        if "int" not in str(inputs.dtype):
            inputs = ops.cast(inputs, "int32")
        embeddings = ops.cast(self.embeddings, self.compute_dtype)
        # (batch, length, embedding_dim)
        outputs = ops.take(embeddings, inputs, axis=0)
        if self.scale:
            outputs = outputs * ops.cast(math.sqrt(self.embedding_dim), outputs.dtype)
        return outputs

    def _check_ids(self, ids: Any) -> None:
        """Raises a one-line `ValueError` for token ids outside the
        vocabulary, or not whole numbers, where their values are known
        (NumPy or eager; not inside a traced function). The lookup would
        fail with TensorFlow's error on a CPU, give zeros on a GPU, and read
        a row from the end for a negative id."""
        values = backend.known_values(ids)
        if values is None or not values.size:
            return
        if values.dtype.kind == "f" and not np.array_equal(values, np.round(values)):
            raise ValueError(
                f"{self.name} looks up integer token ids. Received non-integer "
                f"values of dtype {values.dtype}, shape {values.shape}. Hidden "
                "states go onto the vocabulary with reverse=True."
            )
        low, high = values.min(), values.max()
        if low < 0 or high >= self.vocabulary_size:
            raise ValueError(
                f"Token ids must lie in [0, {self.vocabulary_size}) for {self.name} "
                f"(vocabulary_size={self.vocabulary_size}). Received ids from "
                f"{low:g} to {high:g}. Pass ids of the tokenizer the layer was "
                "built for, or a larger vocabulary_size."
            )

    def compute_mask(self, inputs: Any, mask: Any = None) -> Any:
        # Keras passes only the inputs: hidden states (float) mean reverse=True,
        # whose logits carry no mask.
        if not self.mask_zero or "int" not in str(inputs.dtype):
            return None
        return ops.not_equal(inputs, 0)

    def compute_output_shape(
        self,
        input_shape: Sequence[int | None],
        reverse: bool = False,
        output_matrix: Any = None,
    ) -> tuple[int | None, ...]:
        if reverse:
            return (*tuple(input_shape[:-1]), self.vocabulary_size)
        return (*tuple(input_shape), self.embedding_dim)

    def compute_output_spec(
        self, inputs: Any, reverse: bool = False, output_matrix: Any = None
    ) -> Any:
        shape = self.compute_output_shape(inputs.shape, reverse=reverse)
        dtype = self.logits_dtype if reverse else self.compute_dtype
        return keras.KerasTensor(shape, dtype=dtype)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "embedding_dim": self.embedding_dim,
                "mask_zero": self.mask_zero,
                "scale": self.scale,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
                "logits_dtype": self.logits_dtype,
            }
        )
        return config
