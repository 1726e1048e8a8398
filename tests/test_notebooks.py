"""Runs every example notebook top to bottom in its FAST smoke mode.

Each notebook is executed with nbclient on a kernel that runs *this*
interpreter (a kernelspec written into a temporary `JUPYTER_PATH`), with
`FAST=1`, `KT_DATA_DIR` pointing at the shared data and a temporary working
directory, and must finish without error and produce the outputs it exists
for (figures, printed scores). Notebooks that take over a minute in FAST mode
are marked `slow` (`pytest -m slow tests/test_notebooks.py`).

Run one notebook in full (not FAST) mode the same way with
`python tests/test_notebooks.py examples/03_text_classification.ipynb`
(the executed copy lands in `$KT_EXAMPLES_WORKDIR`, by default a folder in
the system's temp directory).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
KERNEL_NAME = "keras-transformer-tests"


def shared_data_dir() -> Path:
    configured = os.environ.get("KT_SHARED_DATA")
    return Path(configured) if configured else REPO.parent / "shared" / "data"


def write_kernelspec(root: Path) -> Path:
    """A kernelspec running `sys.executable`, under `root/kernels/`."""
    folder = root / "kernels" / KERNEL_NAME
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
            # TensorFlow's C++ start-up messages stay out of the notebook.
            "--IPKernelApp.capture_fd_output=False",
        ],
        "display_name": "keras-transformer tests",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def execute_notebook(
    path: Path,
    workdir: Path,
    *,
    fast: bool = True,
    timeout: int = 1800,
    env: dict[str, str] | None = None,
):
    """Executes `path` in `workdir` and returns `(notebook, seconds)`.

    The kernel inherits the environment of this process plus `env`, `FAST`
    and `KT_DATA_DIR` (unless already set).
    """
    import nbformat
    from nbclient import NotebookClient

    jupyter_path = write_kernelspec(workdir / "jupyter")
    updates = {
        "FAST": "1" if fast else "0",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "KT_WORKDIR": str(workdir / "runs"),
        **(env or {}),
    }
    if "KT_DATA_DIR" not in os.environ:
        updates["KT_DATA_DIR"] = str(shared_data_dir())
    previous = {key: os.environ.get(key) for key in [*updates, "JUPYTER_PATH"]}
    os.environ.update(updates)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter_path), *filter(None, [previous["JUPYTER_PATH"]])]
    )
    try:
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            kernel_name=KERNEL_NAME,
            timeout=timeout,
            resources={"metadata": {"path": str(workdir)}},
        )
        start = time.perf_counter()
        client.execute()
        return notebook, time.perf_counter() - start
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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


@pytest.fixture
def run(tmp_path: Path):
    def run_notebook(name: str):
        if not shared_data_dir().is_dir() and "KT_DATA_DIR" not in os.environ:
            pytest.fail(f"Shared data not found at {shared_data_dir()}.")
        notebook, seconds = execute_notebook(EXAMPLES / name, tmp_path)
        print(f"{name}: {seconds:.0f} s in FAST mode")
        return notebook

    return run_notebook


# ------------------------------------------------------------------ the list


def test_every_notebook_is_tested_and_built_from_its_source() -> None:
    names = sorted(p.name for p in EXAMPLES.glob("[0-9][0-9]_*.ipynb"))
    tested = sorted(NOTEBOOK_CHECKS)
    assert names == tested, "add a test for each notebook (and only those)"
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "build_notebooks.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_notebooks_are_stored_without_outputs() -> None:
    import nbformat

    for path in EXAMPLES.glob("[0-9][0-9]_*.ipynb"):
        notebook = nbformat.read(path, as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, path.name


# ------------------------------------------------------- one test per notebook


def check_quickstart(notebook) -> None:
    text = text_of(notebook)
    assert "each row sums to 1: True" in text
    assert "padding changes nothing: True" in text
    assert "63.08M" in text  # the base model's parameter count
    assert count_figures(notebook) >= 6


def check_translation(notebook) -> None:
    text = text_of(notebook)
    assert "test_2016_flickr: BLEU" in text
    assert "greedy:      BLEU" in text and "beam 4, 0.6: BLEU" in text
    assert "'serving_default'" in text
    assert "same translations as in-process beam search: True" in text
    assert "logs/train" in text
    # Token lengths, Eq. 7, the training curves, the attention heads.
    assert count_figures(notebook) >= 4


def check_text_classification(notebook) -> None:
    text = text_of(notebook)
    for position in ("sinusoidal", "none"):
        accuracy = re.search(rf"{position} +test accuracy (\S+),", text)
        assert accuracy and 0.0 <= float(accuracy.group(1)) <= 1.0
    # Without positions the model ignores word order exactly.
    change = re.search(
        r"none +largest change of P\(positive\) after shuffling: (\S+)", text
    )
    assert change and float(change.group(1)) < 1e-4
    assert count_figures(notebook) >= 2


def check_distributed(notebook) -> None:
    text = text_of(notebook)
    assert "MirroredStrategy with 2 replicas" in text
    assert "exit codes: [0, 0]" in text
    assert "the chief's result.json: 10 updates" in text
    assert "training tags:" in text
    assert count_figures(notebook) >= 1


def check_attention(notebook) -> None:
    text = text_of(notebook)
    assert "BLEU" in text
    # Dates alignments, one layer's heads, head statistics, two sentences with
    # two query words each, one full layer.
    assert count_figures(notebook) >= 8


def check_image_transformer(notebook) -> None:
    text = text_of(notebook)
    assert "PNG   lossless, one file per test patch:" in text
    assert re.search(
        r"test bits/dim: \d+\.\d+ \(Image Transformer, 216 patches\)", text
    )
    assert "given rows unchanged in every completion: True" in text
    # Figure 2's blocks, the patches, the completions (the curve needs two
    # epochs, which FAST mode has too).
    assert count_figures(notebook) >= 4


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


if __name__ == "__main__":
    # Full (not FAST) run of the notebooks named on the command line; the
    # executed copies go to $KT_EXAMPLES_WORKDIR (default: a temp folder).
    import tempfile

    import nbformat

    default = Path(tempfile.gettempdir()) / "keras_transformer_examples"
    workdir = Path(os.environ.get("KT_EXAMPLES_WORKDIR", default)).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:]:
        path = Path(name).resolve()
        notebook, seconds = execute_notebook(path, workdir, fast=False)
        output = workdir / f"{path.stem}.executed.ipynb"
        nbformat.write(notebook, output)
        print(f"{path.name}: {seconds:.0f} s; executed copy in {output}")
