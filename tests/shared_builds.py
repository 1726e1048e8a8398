"""Builds that every process of a test session shares.

`make test` runs on several pytest-xdist workers, and a session fixture
runs once per worker: a tiny trained run or export that three workers need
was built three times. `built_once` builds it once per session, in a folder
that all workers see (the session's temporary folder, above each worker's
own), under a file lock: the first worker to ask builds it, the others wait
and read it. Outside pytest-xdist (one process, or a script that imports
the test helpers) the folder is private to the process.

What is built here is READ by the tests; a test that writes into it works on
a copy (``shutil.copytree(folder, tmp_path / "copy")``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock

_root: Path | None = None


def use_session_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Share builds through this session's temporary folder: the folder of
    all workers under pytest-xdist, this process's own otherwise."""
    global _root
    base = tmp_path_factory.getbasetemp()
    _root = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name` after `build(folder)`, run once per session.

    A build that raised leaves no mark: the next process to ask starts it
    again in an empty folder.
    """
    global _root
    if _root is None:
        _root = Path(tempfile.mkdtemp(prefix="keras_transformer_tests_"))
    folder = _root / "built_once" / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    done = folder.parent / f"{name}.done"
    with FileLock(folder.parent / f"{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder
