#!/usr/bin/env python3
"""Draws the model of Figure 1 (Vaswani et al., 2017) from the code.

Builds `kt.models.build_transformer(kt.models.presets["tiny"])` (N = 2
encoder and 2 decoder blocks, d_model = 64; the base model has N = 6 and
d_model = 512, the same graph otherwise) and draws its layer graph with
`keras.utils.plot_model` (pydot and Graphviz) into
``docs/images/transformer_model.png``: the two inputs, the shared embedding
(§3.4) with the position encodings (§3.5) and dropout (§5.4), the encoder
blocks, the decoder blocks that each read the encoder output, and the
shared embedding again as the output layer (the edge back to it).

Usage (from the repository root; ``apt-get install graphviz`` and
``pip install pydot``)::

    .venv/bin/python docs/diagrams/model_figure.py
    .venv/bin/python docs/diagrams/model_figure.py --output /tmp/model.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

OUTPUT = Path(__file__).resolve().parents[1] / "images" / "transformer_model.png"
PRESET = "tiny"


def draw_model(output: Path, preset: str = PRESET, dpi: int = 64) -> None:
    """Writes the layer graph of `build_transformer(presets[preset])` as a PNG.

    Args:
        output: the PNG to write.
        preset: a name of `kt.models.presets`.
        dpi: resolution of the drawing.

    Raises:
        SystemExit: when pydot or Graphviz is missing.
    """
    import keras

    from keras_transformer.models import build_transformer, presets

    model = build_transformer(presets[preset])
    try:
        keras.utils.plot_model(
            model,
            to_file=str(output),
            show_shapes=True,
            show_layer_names=True,
            dpi=dpi,
        )
    except ImportError as error:
        raise SystemExit(
            f"{error}: install pydot and Graphviz (pip install pydot; "
            "apt-get install graphviz)"
        ) from error
    from PIL import Image

    # A 64-colour palette: black, white and grey lose nothing visible.
    with Image.open(output) as image:
        small = image.convert("RGB").quantize(colors=64, dither=Image.Dither.NONE)
    small.save(output, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    parser.add_argument("--preset", default=PRESET)
    args = parser.parse_args(argv)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    draw_model(args.output, args.preset)
    print(f"{args.output}: {args.output.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
