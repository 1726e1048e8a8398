#!/usr/bin/env python3
"""Draws the package's six floors as `docs/images/architecture.svg`.

    python docs/diagrams/architecture.py          # writes the SVG
    python docs/diagrams/architecture.py --check  # exit 1 if it is out of date

The floors are the table of `docs/architecture.md`; `tests/test_imports.py`
holds the package to the same table (and `tests/test_docs.py` checks that
this picture names exactly its modules, floor by floor). The SVG is written
by hand, without plotting libraries, so that it is small, sharp at any size
and diffs as text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from xml.sax.saxutils import escape

OUTPUT = Path(__file__).resolve().parents[1] / "images" / "architecture.svg"

#: (floor, modules, what they need, what lives there), top floor first.
FLOORS: list[tuple[int, tuple[str, ...], str, str]] = [
    (
        5,
        ("cli", "__main__"),
        "nothing before parsing",
        "keras-transformer train | evaluate | translate | export | average-checkpoints",
    ),
    (
        4,
        ("training", "export", "visualize"),
        "TensorFlow, TensorBoard, matplotlib",
        "train(), callbacks, tf.distribute; SavedModel, LiteRT, CTranslate2; heat maps",
    ),
    (
        3,
        ("translation",),
        "sacrebleu",
        "Translator: text → ids → search → text; BLEU and chrF",
    ),
    (
        2,
        ("runs",),
        "TensorFlow",
        "RunFolder: config, tokenizer, checkpoints; reading an export",
    ),
    (
        1,
        ("data", "decoding", "image_sampling"),
        "TensorFlow, tensorflow-text, sentencepiece",
        "tokenizer, data sets, tf.data batches; beam search; image completion",
    ),
    (
        0,
        (
            "layers",
            "models",
            "losses",
            "metrics",
            "schedules",
            "optimizers",
            "conventions",
            "files",
            "validation",
            "source_limits",
            "backend",
            "results_records",
            "cpu",
            "progress",
        ),
        "keras + numpy only, every Keras backend",
        "the paper's layers, the model stack, the loss of §5.4, Eq. 7",
    ),
]

WIDTH = 920
FLOOR_HEIGHT = 76
GAP = 10
MARGIN = 16
LEFT = 64  # the floor numbers
ARROW = 40  # the import arrow on the right
#: Fill and border of each floor, from the core (0) up.
COLOURS = [
    ("#dbe9f6", "#4a7fb5"),
    ("#e3f1e0", "#5a9a4f"),
    ("#eef3dc", "#8a9a3a"),
    ("#fbf0d9", "#c08a2e"),
    ("#fbe4da", "#c0603a"),
    ("#efe3f3", "#8a5aa0"),
]
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


def _text(x: float, y: float, text: str, size: int, **attributes: str) -> str:
    extra = "".join(
        f" {key.replace('_', '-')}='{value}'" for key, value in attributes.items()
    )
    return (
        f"<text x='{x:.0f}' y='{y:.0f}' font-size='{size}'{extra}>{escape(text)}</text>"
    )


def render() -> str:
    """The SVG document, as text."""
    height = 2 * MARGIN + 34 + len(FLOORS) * (FLOOR_HEIGHT + GAP) - GAP
    box_right = WIDTH - MARGIN - ARROW
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{height}' "
        f"viewBox='0 0 {WIDTH} {height}' {FONT}>",
        "<title>keras-transformer: six floors; a module imports only from its "
        "own floor and the floors below</title>",
        f"<rect width='{WIDTH}' height='{height}' fill='white'/>",
        _text(
            MARGIN,
            MARGIN + 16,
            "keras_transformer: a module imports from its own floor and the "
            "floors below, never above",
            15,
            font_weight="bold",
            fill="#333333",
        ),
    ]
    top = MARGIN + 34
    for row, (floor, modules, needs, what) in enumerate(FLOORS):
        y = top + row * (FLOOR_HEIGHT + GAP)
        fill, stroke = COLOURS[floor]
        parts.append(
            f"<rect x='{MARGIN + LEFT}' y='{y}' width='{box_right - MARGIN - LEFT}' "
            f"height='{FLOOR_HEIGHT}' rx='8' fill='{fill}' stroke='{stroke}' "
            "stroke-width='1.5'/>"
        )
        parts.append(
            _text(
                MARGIN + LEFT / 2 - 4,
                y + FLOOR_HEIGHT / 2 + 9,
                str(floor),
                26,
                font_weight="bold",
                fill=stroke,
                text_anchor="middle",
            )
        )
        names = " · ".join(f"{m}/" if m in PACKAGES else m for m in modules)
        parts.append(_text(MARGIN + LEFT + 14, y + 23, names, 15, font_weight="bold"))
        parts.append(_text(MARGIN + LEFT + 14, y + 44, what, 13, fill="#333333"))
        parts.append(
            _text(
                MARGIN + LEFT + 14,
                y + 64,
                f"needs: {needs}",
                12,
                fill="#555555",
                font_style="italic",
            )
        )
    # The direction of imports: from the top floor down to the core.
    x = box_right + ARROW / 2
    first = top + 8
    last = top + len(FLOORS) * (FLOOR_HEIGHT + GAP) - GAP - 8
    parts += [
        "<defs><marker id='head' markerWidth='10' markerHeight='10' refX='5' "
        "refY='5' orient='auto'><path d='M0,0 L10,5 L0,10 z' fill='#777777'/>"
        "</marker></defs>",
        f"<line x1='{x:.0f}' y1='{first}' x2='{x:.0f}' y2='{last}' stroke='#777777' "
        "stroke-width='2' marker-end='url(#head)'/>",
        _text(
            x + 5,
            (first + last) / 2,
            "imports",
            12,
            fill="#555555",
            text_anchor="middle",
            transform=f"rotate(90 {x + 5:.0f} {(first + last) / 2:.0f})",
        ),
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


#: Modules that are packages (shown with a trailing slash).
PACKAGES = {"cli", "training", "data", "layers", "models", "backend"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="Report an out-of-date SVG (exit 1)."
    )
    args = parser.parse_args(argv)
    text = render()
    current = OUTPUT.read_text("utf-8") if OUTPUT.is_file() else None
    if args.check:
        if current != text:
            print(f"{OUTPUT} is out of date: run python docs/diagrams/architecture.py")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
