"""`ImageTransformerConfig`: the hyperparameters of the Image Transformer."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from keras_transformer.layers.attention_settings import AttentionSettings
from keras_transformer.layers.image_block import (
    ATTENTION_TYPES,
    check_image_attention,
    check_local_1d,
)
from keras_transformer.layers.image_embedding import (
    check_image_d_model,
    check_image_shape,
    position_grid_shape,
)
from keras_transformer.layers.local_attention_2d import GENERATION_ORDERS
from keras_transformer.models.config import Presets, as_optimizer_config
from keras_transformer.schedules import OptimizerConfig
from keras_transformer.validation import (
    check_choice,
    check_fields,
    check_grid,
    check_known_names,
    check_pair,
    check_positive_int,
    check_rate,
)

__all__ = ["IMAGE_OUTPUTS", "ImageTransformerConfig", "image_presets"]

#: The output distributions (§3.4): a 256-way softmax per intensity, or a
#: mixture of discretized logistics per pixel.
IMAGE_OUTPUTS = ("categorical", "dmol")


@dataclasses.dataclass(frozen=True)
class ImageTransformerConfig:
    """Hyperparameters of the Image Transformer (Parmar et al., 2018).

    Only `build_image_transformer` reads this class; the layers take
    explicit arguments. The defaults are the paper's CIFAR-10 model with
    local 2D attention (§4, Table 4: 12 layers, `d_model = 512`, DMOL with
    10 components) except for the blocks, sized for 32 x 32 images.

    Attributes:
        image_shape: `(height, width, channels)` of the images.
        output: `"categorical"` (256-way softmax per intensity, channel-wise
            positions: a grid of `height x width * channels`) or `"dmol"`
            (a mixture of discretized logistics per pixel, one position per
            pixel: `height x width`), §3.4.
        num_mixtures: `K`, the components of the DMOL output (10).
        num_classes: class-conditional generation over this many classes
            (§4: a learned class embedding added to every position), or
            `None` for unconditional generation.
        attention: `"full"`, `"local_1d"` or `"local_2d"` (§3.2).
        query_block, memory_flange: `(h_q, w_q)` and `(h_m, w_m)` of local
            2D attention, in positions of the grid (with channel-wise
            positions a pixel is `channels` columns wide); `query_block`
            must tile the grid.
        generation_order: the order in which the positions are generated,
            the order of the causal masks, the input shift and sampling:
            `"blocks"` (the paper's, §3.2: "we generate the image one query
            block after another, ordering the blocks in raster-scan order",
            raster order inside each block) or `"image"` (one raster order
            over the whole image, this package's order up to 0.1.0). The two
            differ only with local 2D attention (the blocks of full and 1D
            local attention follow the raster order). `from_dict` reads a
            stored config without this key as `"image"`, the order it was
            trained with; new configs default to `"blocks"`.
        query_block_length, memory_length: `l_q` and `l_m` of local 1D
            attention, in positions; `l_q` must divide the positions.
        num_layers: the decoder layers `N`.
        d_model: the model size, a multiple of 4 (2D sinusoids).
        d_ff: the inner size of the feed-forward networks.
        num_heads: `h`.
        key_dim: `d_k`; `None` means `d_model / h`.
        dropout: residual and embedding dropout.
        ffn_dropout: dropout inside the feed-forward networks.
        norm_first: pre-LN blocks plus a final LayerNorm.
        layer_norm_epsilon: epsilon of every LayerNorm.
        activation: the feed-forward activation.
        optimizer: Adam and the learning-rate schedule (Eq. 7 of Vaswani et
            al.; the Image Transformer trains with the same recipe).
        attention_settings: the options of every attention layer
            (`AttentionSettings`, as for `TransformerConfig`, without a
            `window`): relative positions count distances in the generation
            order (raster order), with `"full"` and `"local_1d"` attention,
            not `"local_2d"`.
    """

    image_shape: tuple[int, int, int] = (32, 32, 3)
    output: str = "dmol"
    num_mixtures: int = 10
    num_classes: int | None = None
    attention: str = "local_2d"
    query_block: tuple[int, int] = (8, 8)
    memory_flange: tuple[int, int] = (8, 8)
    generation_order: str = "blocks"
    query_block_length: int = 256
    memory_length: int = 512
    num_layers: int = 12
    d_model: int = 512
    d_ff: int = 2048
    num_heads: int = 8
    key_dim: int | None = None
    dropout: float = 0.1
    ffn_dropout: float = 0.0
    norm_first: bool = False
    layer_norm_epsilon: float = 1e-6
    activation: str = "relu"
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    attention_settings: AttentionSettings = dataclasses.field(
        default_factory=AttentionSettings
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "image_shape", check_image_shape(self.image_shape))
        object.__setattr__(self, "optimizer", as_optimizer_config(self.optimizer))
        settings = AttentionSettings.of(self.attention_settings)
        object.__setattr__(self, "attention_settings", settings)
        object.__setattr__(
            self, "query_block", check_pair("query_block", self.query_block, 1)
        )
        object.__setattr__(
            self, "memory_flange", check_pair("memory_flange", self.memory_flange, 0)
        )
        sizes = ("num_mixtures", "num_layers", "d_ff", "num_heads")
        check_fields(check_positive_int, self, sizes)
        check_image_d_model(self.d_model)
        check_fields(
            check_positive_int, self, ("num_classes", "key_dim"), allow_none=True
        )
        check_fields(check_rate, self, ("dropout", "ffn_dropout"))
        if self.output not in IMAGE_OUTPUTS:
            raise ValueError(
                f"`output` must be one of {IMAGE_OUTPUTS}. Received: "
                f"output={self.output!r}"
            )
        if self.attention not in ATTENTION_TYPES:
            raise ValueError(
                f"`attention` must be one of {ATTENTION_TYPES}. Received: "
                f"attention={self.attention!r}"
            )
        check_choice("generation_order", self.generation_order, GENERATION_ORDERS)
        check_image_attention(self.attention, settings)
        settings.check_sizes(self.num_heads)
        if self.key_dim is None and self.d_model % self.num_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by num_heads="
                f"{self.num_heads}: set key_dim explicitly or change one of them."
            )
        rows, cols = self.grid_shape
        if self.attention == "local_2d":
            check_grid(rows, cols, self.query_block)
        elif self.attention == "local_1d":
            check_local_1d(rows * cols, self.query_block_length, self.memory_length)

    # ------------------------------------------------------------ geometry
    @property
    def positions(self) -> str:
        """`"channel"` (categorical) or `"pixel"` (DMOL): see `ImageEmbedding`."""
        return "channel" if self.output == "categorical" else "pixel"

    @property
    def grid_shape(self) -> tuple[int, int]:
        """`(rows, cols)` of the positions (`position_grid_shape`)."""
        return position_grid_shape(self.image_shape, self.positions)

    @property
    def num_positions(self) -> int:
        rows, cols = self.grid_shape
        return rows * cols

    @property
    def generation_query_block(self) -> tuple[int, int] | None:
        """The query blocks that order the generation, or `None` (raster order).

        `query_block` with local 2D attention in the `"blocks"` order; the
        whole image, `None`, otherwise.
        """
        if self.attention == "local_2d" and self.generation_order == "blocks":
            return self.query_block
        return None

    @property
    def head_key_dim(self) -> int:
        """`d_k`, resolved."""
        return self.key_dim or self.d_model // self.num_heads

    # --------------------------------------------------------------- I/O
    def replace(self, **changes: Any) -> ImageTransformerConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        for name in ("image_shape", "query_block", "memory_flange"):
            values[name] = list(values[name])
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> ImageTransformerConfig:
        """The config of a stored dict (`to_dict`, a run's config.json);
        fields left out take their defaults."""
        known = [field.name for field in dataclasses.fields(cls)]
        check_known_names(values, known, "ImageTransformerConfig fields")
        values = dict(values)
        for name in ("image_shape", "query_block", "memory_flange"):
            if isinstance(values.get(name), list):  # JSON has no tuples
                values[name] = tuple(values[name])
        return cls(**values)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ImageTransformerConfig:
        return cls.from_dict(json.loads(text))


#: Named configurations: the paper's CIFAR-10 sizes and a small one for
#: 32 x 32 RGB images trained on a CPU (the example notebook's): 4 layers of
#: local 2D attention, query blocks of 8 x 8 pixels with 4 rows above and 8
#: columns on each side, DMOL with 5 components, 0.14M parameters. The small
#: one normalizes before each sublayer (``norm_first``; the paper normalizes
#: after, §3.1 of Vaswani et al.), which lets it train at 1.2 x Eq. 7 with
#: 400 warm-up steps (a peak of 0.0075 for d_model = 64): with the layer
#: normalization after each sublayer it needed 0.2 x Eq. 7 and learned more
#: slowly (docs/results.md, "Choosing the settings").
image_presets: dict[str, ImageTransformerConfig] = Presets(
    {
        "paper_cifar10": ImageTransformerConfig(),
        "small": ImageTransformerConfig(
            num_layers=4,
            d_model=64,
            d_ff=128,
            num_heads=4,
            num_mixtures=5,
            query_block=(8, 8),
            memory_flange=(4, 8),
            dropout=0.0,
            norm_first=True,
            optimizer=OptimizerConfig(warmup_steps=400, learning_rate_scale=1.2),
        ),
    }
)
