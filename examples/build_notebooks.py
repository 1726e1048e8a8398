"""Builds the example notebooks from their sources in `examples/sources/`.

Each notebook is written as a plain Python file in the "percent" format, so
that it can be read, diffed and linted like any other module:

    # %% [markdown]
    # # A title
    # Some text with an equation, $\\mathrm{softmax}(QK^T / \\sqrt{d_k})V$.

    # %%
    import keras_transformer as kt

In code cells, a commented magic such as `# %matplotlib inline` becomes the
magic itself.

`python examples/build_notebooks.py` writes `examples/<name>.ipynb` for
every `examples/sources/<name>.py` whose cells (code and markdown, with
stable cell ids) differ from the notebook's, without outputs; a notebook
whose cells equal its source's is left as it is, outputs included. Give a
rebuilt notebook its outputs again with `examples/execute_notebooks.py`.
`--check` only reports the notebooks whose cells differ from their sources
(exit status 1), which the tests run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

EXAMPLES = Path(__file__).resolve().parent
SOURCES = EXAMPLES / "sources"
_CELL_MARKER = re.compile(r"^# %%(?P<rest>.*)$")
# A commented IPython magic in a code cell, e.g. "# %matplotlib inline".
_MAGIC = re.compile(r"^# %(?=[a-z])")

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def parse_cells(text: str) -> list[tuple[str, str]]:
    """Splits a percent-format file into `(cell_type, source)` pairs.

    Markdown cells lose the `# ` in front of each line. Blank lines around a
    cell are dropped; text before the first marker is ignored.
    """
    cells: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        match = _CELL_MARKER.match(line)
        if match:
            kind = "markdown" if "[markdown]" in match.group("rest") else "code"
            cells.append((kind, []))
        elif cells:
            cells[-1][1].append(line)
    parsed = []
    for kind, lines in cells:
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip():
            lines.pop(0)
        if kind == "markdown":
            lines = [_uncomment(line) for line in lines]
        else:
            lines = [_MAGIC.sub("%", line) for line in lines]
        source = "\n".join(lines).strip("\n")
        if source:
            parsed.append((kind, source))
    return parsed


def _uncomment(line: str) -> str:
    if line.startswith("# "):
        return line[2:]
    if line.rstrip() == "#":
        return ""
    raise ValueError(f"A markdown line must start with '# ': {line!r}")


def build_notebook(source: Path) -> nbformat.NotebookNode:
    """The notebook of one source file, without outputs."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": KERNELSPEC,
        "language_info": {"name": "python"},
    }
    for index, (kind, text) in enumerate(parse_cells(source.read_text("utf-8"))):
        if kind == "markdown":
            cell = nbformat.v4.new_markdown_cell(text)
        else:
            cell = nbformat.v4.new_code_cell(text)
        cell.id = f"{source.stem[:2]}-{index:02d}"
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def cells(notebook: nbformat.NotebookNode) -> list[tuple[str, str, str]]:
    """`(cell_type, id, source)` of every cell: what must equal the source's."""
    return [
        (cell.cell_type, cell.get("id", ""), cell.source) for cell in notebook.cells
    ]


def render(notebook: nbformat.NotebookNode) -> str:
    return nbformat.writes(notebook) + "\n"


def sources() -> list[Path]:
    return sorted(SOURCES.glob("[0-9][0-9]_*.py"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="Report out-of-date notebooks instead of writing them.",
    )
    args = parser.parse_args(argv)
    stale = []
    for source in sources():
        target = EXAMPLES / f"{source.stem}.ipynb"
        built = build_notebook(source)
        if target.is_file() and cells(nbformat.read(target, 4)) == cells(built):
            continue
        stale.append(target.name)
        if not args.check:
            target.write_text(render(built), encoding="utf-8")
    if args.check and stale:
        print(
            "Out of date (run `python examples/build_notebooks.py`, then "
            "`python examples/execute_notebooks.py` for their outputs): "
            + ", ".join(stale)
        )
        return 1
    if not args.check:
        print(f"Wrote {len(stale)} notebook(s) without outputs: {', '.join(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
