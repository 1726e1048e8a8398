"""The example notebooks: committed with the outputs of a full run, smoke-run in CI.

* Each committed notebook's cells (code and markdown) equal its source in
  `examples/sources/`, and its outputs come from one full (not FAST) run of
  exactly those cells (`examples/execute_notebooks.py` writes them), checked
  with the same content checks as the smoke runs.
* Every notebook is run top to bottom in its FAST smoke mode on a copy
  without outputs (the committed file is never written), with nbclient on a
  kernel that runs *this* interpreter, `KT_DATA_DIR` pointing at the shared
  data and a temporary working directory; it must finish without error and
  produce the outputs it exists for (figures, printed scores). Notebooks
  that take over a minute in FAST mode, or over half a minute to repeat what
  faster tests cover, are marked `slow` (`pytest -m slow tests/test_notebooks.py`).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
SOURCES = EXAMPLES / "sources"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


executor = _load("execute_notebooks")
builder = _load("build_notebooks")

#: Notebooks committed without outputs until their full run (a long
#: training) is executed with `examples/execute_notebooks.py`: 03 and 06
#: since they train through `train` (the engine of `keras-transformer train`).
AWAITING_FULL_RUN: set[str] = set()


def outputs(notebook) -> Iterator[dict]:
    for cell in notebook.cells:
        if cell.cell_type == "code":
            yield from cell.get("outputs", [])


def text_of(notebook) -> str:
    """Everything the notebook printed (streams and text results)."""
    parts = []
    for output in outputs(notebook):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output and "text/plain" in output["data"]:
            parts.append(output["data"]["text/plain"])
    return "\n".join(parts)


def count_figures(notebook) -> int:
    return sum("image/png" in output.get("data", {}) for output in outputs(notebook))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def run(tmp_path: Path) -> Callable:
    """Runs a copy of a committed notebook in FAST mode; returns the copy."""

    def run_notebook(name: str):
        if not executor.shared_data_dir().is_dir() and "KT_DATA_DIR" not in os.environ:
            pytest.fail(f"Shared data not found at {executor.shared_data_dir()}.")
        committed = EXAMPLES / name
        before = _digest(committed)
        copy = executor.strip_outputs(nbformat.read(committed, as_version=4))
        nbformat.write(copy, tmp_path / name)
        notebook, seconds = executor.execute_notebook(
            nbformat.read(tmp_path / name, as_version=4),
            tmp_path / "work",
            fast=True,
            timeout=1800,
        )
        print(f"{name}: {seconds:.0f} s in FAST mode")
        assert _digest(committed) == before, f"the FAST run changed {name}"
        return notebook

    return run_notebook


# ------------------------------------------------------------------ the list


def test_every_notebook_is_tested_and_built_from_its_source() -> None:
    names = sorted(p.name for p in EXAMPLES.glob("[0-9][0-9]_*.ipynb"))
    tested = sorted(NOTEBOOK_CHECKS)
    assert names == tested, "add a test for each notebook (and only those)"
    assert names == sorted(f"{p.stem}.ipynb" for p in builder.sources())
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "build_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("source", builder.sources(), ids=lambda p: p.stem)
def test_committed_cells_equal_the_source(source: Path) -> None:
    """Code and markdown, cell by cell, as `build_notebooks.py` makes them."""
    committed = nbformat.read(EXAMPLES / f"{source.stem}.ipynb", as_version=4)
    expected = builder.parse_cells(source.read_text("utf-8"))
    found = [(cell.cell_type, cell.source) for cell in committed.cells]
    for index, (want, got) in enumerate(zip(expected, found, strict=False)):
        assert got == want, f"{source.stem}: cell {index} differs from its source"
    assert len(found) == len(expected), f"{source.stem}: cells added or removed"
    assert committed.metadata.kernelspec == builder.KERNELSPEC


@pytest.mark.parametrize(
    "name", sorted(p.name for p in EXAMPLES.glob("[0-9][0-9]_*.ipynb"))
)
def test_committed_outputs_come_from_one_full_run(name: str) -> None:
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    run = notebook.metadata.get(executor.METADATA_KEY)
    if name in AWAITING_FULL_RUN:
        assert run is None and not any(cell.outputs for cell in code), (
            f"{name} has outputs: remove it from AWAITING_FULL_RUN if they come "
            "from `python examples/execute_notebooks.py`"
        )
        assert all(cell.execution_count is None for cell in code)
        return
    assert run is not None, (
        f"{name} has no outputs: run `python examples/execute_notebooks.py "
        f"{name.removesuffix('.ipynb')}`"
    )
    assert run["mode"] == "full" and run["seconds"] > 0
    # Every code cell, in order, in one kernel, without an error.
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert not [o for o in outputs(notebook) if o.get("output_type") == "error"]
    assert "FAST: True" not in text_of(notebook)
    NOTEBOOK_CHECKS[name](notebook, fast=False)


# ------------------------------------------------------- one test per notebook


def check_quickstart(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    assert "each row sums to 1: True" in text
    assert "padding changes nothing: True" in text
    assert "63.08M" in text  # the base model's parameter count
    assert count_figures(notebook) >= 6


def check_translation(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    assert "test_2016_flickr: BLEU" in text
    assert "greedy:      BLEU" in text and "beam 4, 0.6: BLEU" in text
    assert "'serving_default'" in text
    assert "same translations as in-process beam search: True" in text
    assert "logs/train" in text
    # Token lengths, Eq. 7, the training curves, the attention heads.
    assert count_figures(notebook) >= 4


def check_text_classification(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    for position in ("sinusoidal", "none"):
        accuracy = re.search(rf"{position} +test accuracy (\S+),", text)
        assert accuracy and 0.0 <= float(accuracy.group(1)) <= 1.0
        if not fast:  # 25,000 test reviews after three epochs
            assert float(accuracy.group(1)) > 0.85
    # Without positions the model ignores word order exactly.
    change = re.search(
        r"none +largest change of P\(positive\) after shuffling: (\S+)", text
    )
    assert change and float(change.group(1)) < 1e-4
    # `keras-transformer evaluate` on a run folder, and the training times
    # read from the runs' TensorBoard records.
    assert re.search(r"accuracy \d\.\d{4} on \d+ test reviews", text)
    minutes = re.findall(r"test accuracy \S+, (\S+) min of training", text)
    assert len(minutes) == 2 and all(float(m) > 0 for m in minutes)
    assert count_figures(notebook) >= 2


def check_distributed(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    assert "MirroredStrategy with 2 replicas" in text
    assert "exit codes: [0, 0]" in text
    assert f"the chief's result.json: {10 if fast else 500} updates" in text
    assert "training tags:" in text
    assert count_figures(notebook) >= 1


def check_attention(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    assert "BLEU" in text
    # Dates alignments, one layer's heads, head statistics, two sentences with
    # two query words each, one full layer.
    assert count_figures(notebook) >= 8


def check_image_transformer(notebook, fast: bool = True) -> None:
    text = text_of(notebook)
    assert "PNG   lossless, one file per test patch:" in text
    trained = re.search(
        r"test bits/dim: (\d+\.\d+) \(Image Transformer, (\w+) weights, 216 "
        r"patches\)",
        text,
    )
    assert trained and trained.group(2) == "average"  # the config's evaluate_with
    # Completions at two temperatures, each keeping the given rows.
    assert text.count("given rows unchanged in every completion: True") == 2
    assert "given rows unchanged in every completion: False" not in text
    # The command line's evaluation of the run folder, for each choice of
    # weights; with the run's own choice it agrees with `train`'s.
    evaluated = dict(
        re.findall(
            r"keras-transformer evaluate --weights (\w+): (\d+\.\d+) bits/dim", text
        )
    )
    assert sorted(evaluated) == ["average", "best", "last"]
    assert abs(float(evaluated["average"]) - float(trained.group(1))) < 1e-3
    # The training time is read from the run's TensorBoard records.
    minutes = re.search(r"training time recorded by the run: (\S+) min", text)
    assert minutes and float(minutes.group(1)) > 0
    # Figure 2's blocks in both orders, the patches, the training curve from
    # TensorBoard, the completions at two temperatures.
    assert count_figures(notebook) >= 5


NOTEBOOK_CHECKS = {
    "01_quickstart.ipynb": check_quickstart,
    "02_translation.ipynb": check_translation,
    "03_text_classification.ipynb": check_text_classification,
    "04_distributed_training.ipynb": check_distributed,
    "05_attention_visualisation.ipynb": check_attention,
    "06_image_transformer.ipynb": check_image_transformer,
}


def test_01_quickstart(run) -> None:
    check_quickstart(run("01_quickstart.ipynb"))


@pytest.mark.slow
def test_02_translation(run) -> None:
    check_translation(run("02_translation.ipynb"))


# Slow (38 s in the default run): what it runs is covered there by faster tests
# (test_kinds.py's classification train/evaluate, test_classifier.py's order).
@pytest.mark.slow
def test_03_text_classification(run) -> None:
    check_text_classification(run("03_text_classification.ipynb"))


@pytest.mark.slow
def test_04_distributed_training(run) -> None:
    check_distributed(run("04_distributed_training.ipynb"))


@pytest.mark.slow
def test_05_attention_visualisation(run) -> None:
    check_attention(run("05_attention_visualisation.ipynb"))


@pytest.mark.slow
def test_06_image_transformer(run) -> None:
    check_image_transformer(run("06_image_transformer.ipynb"))
