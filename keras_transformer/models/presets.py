"""Named configurations: the paper's Table 3 and small CPU-friendly models.

`base` and `big` are the paper's two models. The `table3_*` entries are the
rows of Table 3 (each changes `base` as the row says); their parameter counts
match the table within the rounding of the paper's count (see
`docs/architecture.md`). `tiny` and `small` train on a CPU.
"""

from __future__ import annotations

from keras_transformer.models.config import Presets, TransformerConfig

BASE = TransformerConfig()

_TABLE3_ROWS: dict[str, dict] = {
    # (A) number of heads and head size, computation kept constant.
    "table3_A_h1": {"num_heads": 1, "key_dim": 512, "value_dim": 512},
    "table3_A_h4": {"num_heads": 4, "key_dim": 128, "value_dim": 128},
    "table3_A_h16": {"num_heads": 16, "key_dim": 32, "value_dim": 32},
    "table3_A_h32": {"num_heads": 32, "key_dim": 16, "value_dim": 16},
    # (B) smaller attention keys.
    "table3_B_dk16": {"key_dim": 16, "value_dim": 64},
    "table3_B_dk32": {"key_dim": 32, "value_dim": 64},
    # (C) model size.
    "table3_C_n2": {"num_encoder_layers": 2, "num_decoder_layers": 2},
    "table3_C_n4": {"num_encoder_layers": 4, "num_decoder_layers": 4},
    "table3_C_n8": {"num_encoder_layers": 8, "num_decoder_layers": 8},
    "table3_C_d256": {"d_model": 256, "key_dim": 32, "value_dim": 32},
    "table3_C_d1024": {"d_model": 1024, "key_dim": 128, "value_dim": 128},
    "table3_C_ff1024": {"d_ff": 1024},
    "table3_C_ff4096": {"d_ff": 4096},
    # (D) regularization (the label-smoothing rows: PRESET_LABEL_SMOOTHING).
    "table3_D_drop0.0": {"dropout": 0.0},
    "table3_D_drop0.2": {"dropout": 0.2},
    "table3_D_ls0.0": {},
    "table3_D_ls0.2": {},
    # (E) learned positional embedding instead of sinusoids.
    "table3_E_learned": {"position_encoding": "learned"},
}


def _cpu_model(
    vocabulary_size: int, *, layers: int, d_model: int, num_heads: int, max_length: int
) -> TransformerConfig:
    """A small `base`: `layers` blocks per stack and `d_ff = 4 d_model`, the
    paper's ratio (2048 = 4 x 512)."""
    return BASE.replace(
        vocabulary_size=vocabulary_size,
        num_encoder_layers=layers,
        num_decoder_layers=layers,
        d_model=d_model,
        d_ff=4 * d_model,
        num_heads=num_heads,
        max_length=max_length,
    )


presets: dict[str, TransformerConfig] = Presets(
    {
        "base": BASE,
        "big": BASE.replace(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3),
        **{name: BASE.replace(**row) for name, row in _TABLE3_ROWS.items()},
        # CPU-friendly models; the vocabulary size is replaced by the tokenizer's.
        "small": _cpu_model(8000, layers=3, d_model=256, num_heads=8, max_length=128),
        "tiny": _cpu_model(1000, layers=2, d_model=64, num_heads=4, max_length=64),
    }
)

#: The rows of Table 3 (D) that change label smoothing (§5.4), a training
#: setting: their model is `base`, and a `TrainConfig` built from the preset
#: name takes this value as `train.label_smoothing` unless it sets one.
PRESET_LABEL_SMOOTHING: dict[str, float] = {
    "table3_D_ls0.0": 0.0,
    "table3_D_ls0.2": 0.2,
}

# Parameter counts reported in Table 3 (millions), for the tests and docs.
PAPER_PARAMETER_COUNTS_M: dict[str, float] = {
    "base": 65,
    "big": 213,
    "table3_B_dk16": 58,
    "table3_B_dk32": 60,
    "table3_C_n2": 36,
    "table3_C_n4": 50,
    "table3_C_n8": 80,
    "table3_C_d256": 28,
    "table3_C_d1024": 168,
    "table3_C_ff1024": 53,
    "table3_C_ff4096": 90,
}


def get_preset(name: str) -> TransformerConfig:
    """The preset called `name`, with a helpful error for unknown names."""
    try:
        return presets[name]
    except KeyError:
        raise ValueError(
            f"Unknown preset {name!r}. Available: {', '.join(sorted(presets))}"
        ) from None
