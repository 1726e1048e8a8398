"""Position information: sinusoidal encodings (Eqs. 5-6) and learned embeddings.

Both layers either add their encoding to the token embeddings (the paper's
choice, §3.5) or concatenate it to them (`merge_mode="concat"`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

from keras_transformer.validation import check_choice, check_positive_int

MERGE_MODES = ("add", "concat")


def sinusoidal_encoding(
    positions: Any, depth: int, max_wavelength: float = 10000.0
) -> Any:
    """The table of Eqs. 5-6 for the given positions, in float32.

    `PE(pos, 2i) = sin(pos / 10000^(2i / d))` and
    `PE(pos, 2i + 1) = cos(pos / 10000^(2i / d))`: sines on even and cosines on
    odd dimensions, interleaved exactly as in the paper (the TensorFlow
    tutorial concatenates them instead; the two differ by a fixed permutation
    of the dimensions).

    Args:
        positions: integer or float tensor `(length,)` of positions.
        depth: the encoding size `d`, an even number.
        max_wavelength: the base of the geometric progression (10000).

    Returns:
        `(length, depth)` float32 encodings.

    Reference: Vaswani et al. (2017), §3.5, Eqs. 5-6.
    """
    positions = ops.cast(positions, "float32")
    # 2i / d for i = 0 .. d/2 - 1.
    exponents = ops.arange(0, depth, 2, dtype="float32") / float(depth)
    inverse_frequencies = ops.exp(-math.log(max_wavelength) * exponents)
    # (length, depth / 2)
    angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequencies, 0)
    # (length, depth / 2, 2) -> (length, depth): sin, cos, sin, cos, ...
    interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
    return ops.reshape(interleaved, (-1, depth))


class _PositionLayer(keras.layers.Layer):
    """Shared behaviour: merge modes, masks, start index, output shapes."""

    def __init__(
        self,
        merge_mode: str = "add",
        encoding_dim: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        check_choice("merge_mode", merge_mode, MERGE_MODES)
        if merge_mode == "concat":
            if encoding_dim is None:
                raise ValueError(
                    "`encoding_dim` is required with merge_mode='concat': it is "
                    "the size of the position encoding appended to each token. "
                    "Received: encoding_dim=None"
                )
            check_positive_int("encoding_dim", encoding_dim)
        self.merge_mode = merge_mode
        self.encoding_dim = encoding_dim
        self.supports_masking = True

    def _depth(self, input_shape: Sequence[int | None]) -> int:
        if len(input_shape) != 3:
            raise ValueError(
                f"{type(self).__name__} expects inputs of rank 3, "
                "(batch, length, features). "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        if self.merge_mode == "concat":
            return int(self.encoding_dim)
        if input_shape[-1] is None:
            raise ValueError(
                "The feature dimension of the inputs must be known. "
                f"Received: inputs.shape={tuple(input_shape)}"
            )
        return int(input_shape[-1])

    def _merge(self, inputs: Any, encoding: Any) -> Any:
        """Adds or concatenates a `(length, depth)` encoding to the inputs."""
        encoding = ops.cast(encoding, self.compute_dtype)
        inputs = ops.cast(inputs, self.compute_dtype)
        if self.merge_mode == "add":
            return inputs + ops.expand_dims(encoding, 0)
        batch = ops.shape(inputs)[0]
        # (batch, length, depth)
        tiled = ops.broadcast_to(
            ops.expand_dims(encoding, 0),
            (batch, ops.shape(encoding)[0], ops.shape(encoding)[1]),
        )
        return ops.concatenate([inputs, tiled], axis=-1)

    def compute_output_shape(
        self, input_shape: Sequence[int | None]
    ) -> tuple[int | None, ...]:
        if self.merge_mode == "add":
            return tuple(input_shape)
        last = None if input_shape[-1] is None else input_shape[-1] + self.encoding_dim
        return (*tuple(input_shape[:-1]), last)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {"merge_mode": self.merge_mode, "encoding_dim": self.encoding_dim}
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionEncoding(_PositionLayer):
    """Adds (or concatenates) the fixed sinusoidal encodings of Eqs. 5-6.

    Works for any sequence length: the table is computed on the fly for the
    positions `start_index .. start_index + length - 1`, so incremental
    decoding passes the index of the token it feeds.

    Args:
        merge_mode: `"add"` (the paper) or `"concat"`.
        encoding_dim: size of the encoding with `merge_mode="concat"`; with
            `"add"` it is the feature size of the inputs.
        max_wavelength: base of the wavelengths' geometric progression.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(batch, length, features)` token embeddings.
        start_index: integer position of the first token (default 0).

    Returns:
        `(batch, length, features)` (add) or
        `(batch, length, features + encoding_dim)` (concat).

    Example:
    >>> import numpy as np
    >>> layer = SinusoidalPositionEncoding()
    >>> tuple(layer(np.zeros((2, 7, 16), "float32")).shape)
    (2, 7, 16)

    Reference: Vaswani et al. (2017), §3.5, Eqs. 5-6.
    """

    def __init__(
        self,
        merge_mode: str = "add",
        encoding_dim: int | None = None,
        max_wavelength: float = 10000.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(merge_mode=merge_mode, encoding_dim=encoding_dim, **kwargs)
        if not max_wavelength > 1:
            raise ValueError(
                "`max_wavelength` must be greater than 1. "
                f"Received: max_wavelength={max_wavelength!r}"
            )
        self.max_wavelength = float(max_wavelength)

    def build(self, input_shape: Sequence[int | None]) -> None:
        depth = self._depth(input_shape)
        if depth % 2:
            raise ValueError(
                "Sinusoidal position encodings pair a sine and a cosine per "
                "frequency (Eqs. 5-6), so their size must be even. Received: "
                f"encoding size {depth} (inputs.shape={tuple(input_shape)}, "
                f"merge_mode={self.merge_mode!r}). Use an even d_model, or a "
                "learned PositionEmbedding."
            )
        self._encoding_depth = depth
        self.built = True

    def call(self, inputs: Any, start_index: Any = 0) -> Any:
        length = ops.shape(inputs)[1]
        positions = ops.arange(length, dtype="int32") + ops.cast(start_index, "int32")
        encoding = sinusoidal_encoding(
            positions, self._encoding_depth, self.max_wavelength
        )
        return self._merge(inputs, encoding)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["max_wavelength"] = self.max_wavelength
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionEmbedding(_PositionLayer):
    """Learned position embeddings, the variant of Table 3, row (E).

    Args:
        max_length: the number of positions that have an embedding; longer
            sequences are refused with a `ValueError`.
        merge_mode: `"add"` (as in the paper) or `"concat"`.
        encoding_dim: size of the embedding with `merge_mode="concat"`.
        embeddings_initializer: initializer of the position table.
        **kwargs: base layer arguments.

    Call arguments:
        inputs: `(batch, length, features)` token embeddings.
        start_index: integer position of the first token (default 0).

    Example:
    >>> import numpy as np
    >>> layer = PositionEmbedding(max_length=10)
    >>> tuple(layer(np.zeros((2, 7, 16), "float32")).shape)
    (2, 7, 16)

    Reference: Vaswani et al. (2017), §3.5 and Table 3 (E); Gehring et al.
    (2017).
    """

    def __init__(
        self,
        max_length: int,
        merge_mode: str = "add",
        encoding_dim: int | None = None,
        embeddings_initializer: str | keras.initializers.Initializer = "glorot_uniform",
        **kwargs: Any,
    ) -> None:
        super().__init__(merge_mode=merge_mode, encoding_dim=encoding_dim, **kwargs)
        check_positive_int("max_length", max_length)
        self.max_length = max_length
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape: Sequence[int | None]) -> None:
        depth = self._depth(input_shape)
        self._check_length(input_shape[1])
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_length, depth),
            initializer=self.embeddings_initializer,
        )
        self.built = True

    def _check_length(self, length: int | None, start_index: Any = 0) -> None:
        if length is None or not isinstance(start_index, int):
            return
        if start_index + length > self.max_length:
            raise ValueError(
                f"Sequence of {start_index + length} positions is longer than "
                f"this PositionEmbedding supports (max_length={self.max_length}). "
                "Truncate the inputs, or build the layer with a larger max_length."
            )

    def call(self, inputs: Any, start_index: Any = 0) -> Any:
        self._check_length(inputs.shape[1], start_index)
        length = ops.shape(inputs)[1]
        # (length, depth)
        # The variable's value: JAX's slice refuses a Keras variable itself.
        embeddings = ops.convert_to_tensor(self.position_embeddings)
        encoding = ops.slice(
            embeddings,
            (ops.cast(start_index, "int32"), 0),
            (length, ops.shape(embeddings)[1]),
        )
        return self._merge(inputs, encoding)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            {
                "max_length": self.max_length,
                "embeddings_initializer": keras.initializers.serialize(
                    self.embeddings_initializer
                ),
            }
        )
        return config
