"""mkdocs hook: the site serves its own MathJax and code colours (no CDN).

A page of the site must show rendered math and coloured code with no
network, offline or behind a firewall, and the repository holds no copy of
third-party code. So both come from installed Python packages at build time:

* MathJax 3 from the `django-static-mathjax` package (installed by the
  `dev` extra; its files need no Django): its `es5/` bundle
  `tex-mml-chtml.js`, with the fonts, TeX extensions and accessibility
  parts it loads on demand, becomes `assets/mathjax/` of the site, with
  MathJax's licence;
* the colours of the code blocks from Pygments, which highlights them while
  the site is built (`pymdownx.highlight` with `use_pygments: true`):
  `stylesheets/pygments.css` is Pygments' own style sheet for them.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from mkdocs.structure.files import File, Files
from pygments.formatters import HtmlFormatter

#: Where MathJax's files go in the site; mkdocs.yml loads
#: `assets/mathjax/tex-mml-chtml.js`.
MATHJAX_DEST = "assets/mathjax"
#: The bundles of `es5/` other than the one the site loads, left out.
OTHER_BUNDLES = {
    "mml-chtml.js",
    "mml-svg.js",
    "node-main.js",
    "tex-chtml-full-speech.js",
    "tex-chtml-full.js",
    "tex-chtml.js",
    "tex-mml-svg.js",
    "tex-svg-full.js",
    "tex-svg.js",
}
#: The Pygments style of the code blocks (close to the theme's colours).
PYGMENTS_STYLE = "friendly"


def mathjax_folder() -> Path:
    """MathJax's `es5/` folder in the installed `django-static-mathjax`."""
    try:
        root = importlib.resources.files("mathjax") / "static" / "mathjax"
    except ModuleNotFoundError as error:
        raise SystemExit(
            "MathJax for the docs site is missing: "
            "pip install -e '.[dev]' (it installs django-static-mathjax)"
        ) from error
    es5 = Path(str(root)) / "es5"
    if not (es5 / "tex-mml-chtml.js").is_file():
        raise SystemExit(
            f"{es5}/tex-mml-chtml.js not found: reinstall django-static-mathjax"
        )
    return es5


def mathjax_files() -> dict[str, Path]:
    """Site path -> installed file, for every MathJax file the site serves."""
    es5 = mathjax_folder()
    files = {
        f"{MATHJAX_DEST}/{path.relative_to(es5).as_posix()}": path
        for path in sorted(es5.rglob("*"))
        if path.is_file() and path.relative_to(es5).as_posix() not in OTHER_BUNDLES
    }
    files[f"{MATHJAX_DEST}/LICENSE"] = es5.parent / "LICENSE"
    return files


def on_files(files: Files, config) -> Files:
    for src_uri, path in mathjax_files().items():
        files.append(File.generated(config, src_uri, abs_src_path=str(path)))
    css = HtmlFormatter(style=PYGMENTS_STYLE).get_style_defs(".highlight")
    files.append(File.generated(config, "stylesheets/pygments.css", content=css))
    return files
