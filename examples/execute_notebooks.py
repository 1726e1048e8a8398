"""Executes example notebooks and stores their outputs in `examples/`.

    python examples/execute_notebooks.py 01_quickstart 03_text_classification

runs each named notebook top to bottom in full mode (`FAST=0`), on a
Jupyter kernel that uses this Python, and writes the notebook with its
outputs to `examples/<name>.ipynb`: that is how the committed notebooks get
their outputs. The notebook is built afresh from `examples/sources/<name>.py`
first, so the outputs always belong to the source. How long the run took, in
which mode and with which versions is recorded in the notebook's metadata
(`metadata.keras_transformer`).

The kernel runs in a work folder (`--workdir`, by default a new temporary
folder) with `KT_WORKDIR=runs`, so the training runs of the notebooks land in
`<workdir>/runs/` and their paths print as `runs/...`. Notebooks named
together share that folder, in the order given: `05_attention_visualisation`
reuses the Multi30k run of `02_translation` when both are run in one command.
Data sets are read from `$KT_DATA_DIR` (default: `../shared/data` next to the
checkout when it exists).

`--fast` runs the smoke mode instead and writes nothing unless `--output` is
given (the tests run every notebook that way, on a copy).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import nbformat

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent
KERNEL_NAME = "keras-transformer-examples"
#: Where the run of a notebook is recorded in its metadata.
METADATA_KEY = "keras_transformer"


def _builder():
    """`examples/build_notebooks.py`, imported by path (examples/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "build_notebooks", EXAMPLES / "build_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_build = _builder()
KERNELSPEC, build_notebook = _build.KERNELSPEC, _build.build_notebook


def shared_data_dir() -> Path:
    """`$KT_SHARED_DATA`, else the `shared/data` folder next to the checkout."""
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
        "display_name": "keras-transformer examples",
        "language": "python",
    }
    (folder / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    return root


def strip_outputs(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `notebook` without outputs, execution counts or run metadata."""
    stripped = copy.deepcopy(notebook)
    stripped.metadata.pop(METADATA_KEY, None)
    for cell in stripped.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    return stripped


def execute_notebook(
    notebook: nbformat.NotebookNode,
    workdir: Path,
    *,
    fast: bool,
    timeout: int | None = None,
    env: dict[str, str] | None = None,
) -> tuple[nbformat.NotebookNode, float]:
    """Executes a copy of `notebook` in `workdir`; returns it and the seconds.

    The kernel inherits this process's environment plus `env`, `FAST`,
    `KT_WORKDIR=runs` (relative to `workdir`) and `KT_DATA_DIR` (unless set).
    `timeout` is the limit of one cell in seconds (`None`: no limit).
    """
    from nbclient import NotebookClient

    workdir.mkdir(parents=True, exist_ok=True)
    jupyter_path = write_kernelspec(workdir / ".jupyter")
    updates = {
        "FAST": "1" if fast else "0",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "KERAS_BACKEND": "tensorflow",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "KT_WORKDIR": "runs",
        **(env or {}),
    }
    if "KT_DATA_DIR" not in os.environ and shared_data_dir().is_dir():
        updates["KT_DATA_DIR"] = str(shared_data_dir())
    previous = {key: os.environ.get(key) for key in [*updates, "JUPYTER_PATH"]}
    os.environ.update(updates)
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        [str(jupyter_path), *filter(None, [previous["JUPYTER_PATH"]])]
    )
    executed = strip_outputs(notebook)
    try:
        client = NotebookClient(
            executed,
            kernel_name=KERNEL_NAME,
            timeout=timeout,
            record_timing=False,
            resources={"metadata": {"path": str(workdir)}},
        )
        start = time.perf_counter()
        client.execute()
        seconds = time.perf_counter() - start
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    # The committed notebook names the standard kernel, not this one.
    executed.metadata["kernelspec"] = dict(KERNELSPEC)
    return executed, seconds


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for name in ("keras", "tensorflow", "tensorflow-text", "jax"):
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def record_run(
    notebook: nbformat.NotebookNode, *, fast: bool, seconds: float
) -> nbformat.NotebookNode:
    """Writes how the outputs were made into `notebook.metadata`."""
    notebook.metadata[METADATA_KEY] = {
        "mode": "fast" if fast else "full",
        "seconds": round(seconds),
        "executed_on": datetime.date.today().isoformat(),
        "cpu_count": os.cpu_count(),
        "versions": _versions(),
    }
    return notebook


def notebook_names(names: list[str]) -> list[str]:
    """`01_quickstart`, `01_quickstart.ipynb` or a path: the source's stem."""
    stems = []
    for name in names:
        stem = Path(name).name.removesuffix(".ipynb").removesuffix(".py")
        if not (EXAMPLES / "sources" / f"{stem}.py").is_file():
            known = sorted(p.stem for p in (EXAMPLES / "sources").glob("[0-9]*.py"))
            raise SystemExit(
                f"No notebook source examples/sources/{stem}.py. Known: "
                f"{', '.join(known)}."
            )
        stems.append(stem)
    return stems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("notebooks", nargs="+", help="e.g. 01_quickstart")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="Folder the kernels run in (their training runs go to "
        "<workdir>/runs); default: a new temporary folder.",
    )
    parser.add_argument(
        "--fast", action="store_true", help="Run the FAST smoke mode instead."
    )
    parser.add_argument(
        "--output",
        type=Path,
        help="Folder for the executed notebooks (default: examples/ for a full "
        "run; nothing is written for --fast without it).",
    )
    parser.add_argument(
        "--timeout",
        type=int,
        default=None,
        help="Limit of one cell in seconds (default: none).",
    )
    args = parser.parse_args(argv)
    stems = notebook_names(args.notebooks)
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="kt_notebooks_"))).resolve()
    output = args.output or (None if args.fast else EXAMPLES)
    if args.fast and output is not None and output.resolve() == EXAMPLES:
        parser.error(
            "--fast outputs are smoke-test outputs; they are never written to "
            "examples/. Pass another --output folder."
        )
    for stem in stems:
        notebook = build_notebook(EXAMPLES / "sources" / f"{stem}.py")
        mode = "FAST" if args.fast else "full"
        print(f"{stem}: running in {mode} mode in {workdir} ...", flush=True)
        executed, seconds = execute_notebook(
            notebook, workdir, fast=args.fast, timeout=args.timeout
        )
        record_run(executed, fast=args.fast, seconds=seconds)
        message = f"{stem}: {seconds:.0f} s"
        if output is not None:
            output.mkdir(parents=True, exist_ok=True)
            target = output / f"{stem}.ipynb"
            target.write_text(nbformat.writes(executed) + "\n", encoding="utf-8")
            message += f", written to {target}"
        print(message, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
