"""What a project page has: a citation record, a contributing guide whose
commands exist, and a README and docs index that present every capability
and every notebook."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def _read(name: str) -> str:
    return (REPO / name).read_text(encoding="utf-8")


def test_citation_names_the_software_and_the_paper() -> None:
    import keras_transformer

    citation = yaml.safe_load(_read("CITATION.cff"))
    assert citation["cff-version"] == "1.2.0"
    assert citation["type"] == "software"
    assert str(citation["version"]) == keras_transformer.__version__
    paper = citation["preferred-citation"]
    assert paper["title"] == "Attention Is All You Need"
    assert paper["year"] == 2017
    assert paper["authors"][0]["family-names"] == "Vaswani"
    assert len(paper["authors"]) == 8


def test_contributing_names_make_targets_that_exist() -> None:
    contributing = _read("CONTRIBUTING.md")
    targets = set(re.findall(r"^([\w-]+):", _read("Makefile"), flags=re.M))
    named = set(re.findall(r"\bmake ([\w-]+)", contributing))
    assert {"setup", "test", "test-slow", "lint", "docs"} <= named
    assert named <= targets, f"not in the Makefile: {sorted(named - targets)}"
    for section in ("a layer", "a task", "a decoding strategy", "a command"):
        assert f"**A {section.split(' ', 1)[1]}**" in contributing, section
    assert "docs/results/*.json" in contributing


def test_readme_and_index_present_every_capability_and_notebook() -> None:
    notebooks = sorted(p.name for p in (REPO / "examples").glob("0*.ipynb"))
    assert len(notebooks) >= 6
    for page, prefix in (("README.md", "examples/"), ("docs/index.md", "examples/")):
        text = _read(page)
        missing = [n for n in notebooks if f"({prefix}{n})" not in text]
        assert not missing, f"{page} does not link {missing}"
        for capability in ("Image Transformer", "IMDB", "JAX", "classif"):
            assert capability in text, f"{page} does not mention {capability}"
    index = _read("docs/index.md")
    assert "on the TensorFlow backend" not in index  # the core runs on any
    assert "any Keras backend" in index
