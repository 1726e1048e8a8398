"""mkdocs hook: the example notebooks of `examples/` as pages of the site.

The notebooks live in `examples/` (where Jupyter and the code host show them)
and are committed with the outputs of a full run. This hook adds them to the
site's files as `examples/<name>.ipynb`, with `examples/README.md` as the
section's index page, before the mkdocs-jupyter plugin turns every `.ipynb`
file into a page (outputs and pictures included, nothing executed).
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def pages() -> list[str]:
    """The paths (relative to the repository, as in the nav) this hook adds."""
    notebooks = sorted(EXAMPLES.glob("[0-9][0-9]_*.ipynb"))
    return [f"examples/{path.name}" for path in [EXAMPLES / "README.md", *notebooks]]


# Before mkdocs-jupyter's on_files, which wraps the .ipynb files it finds.
@event_priority(100)
def on_files(files: Files, config) -> Files:
    for src_uri in pages():
        # A real source folder (the repository), so that the plugin's
        # wrapper of a notebook finds its path.
        files.append(
            File(
                src_uri,
                src_dir=str(REPO),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
