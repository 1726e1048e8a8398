"""The docstring examples of the package, run by the default ``pytest``.

pyproject.toml's ``testpaths`` has ``keras_transformer`` beside ``tests``:
every module of the package is collected as a doctest module (the
equivalent of ``--doctest-modules`` for this folder only; the scripts under
``tests/`` run code when imported and are no doctest modules). So ``make
test`` and CI fail when an example in a docstring breaks, and ``pytest
keras_transformer/layers/attention.py`` runs one module's examples.

Each example starts on the TensorFlow backend (unless ``KERAS_BACKEND`` says
otherwise), without TensorFlow's start-up lines, from seed 1234 and the
float32 policy, like the tests (`tests/conftest.py`). Examples that need a
trained run or a downloaded data set are marked ``# doctest: +SKIP``.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402
from _pytest.doctest import DoctestItem, DoctestModule  # noqa: E402

PACKAGE = Path(__file__).resolve().parent / "keras_transformer"
#: Modules that are no doctest modules: importing ``__main__`` runs the CLI.
NOT_DOCTESTS = {"__main__.py"}


def pytest_collect_file(
    file_path: Path, parent: pytest.Collector
) -> pytest.Collector | None:
    """The package's modules as doctest modules (unless --doctest-modules,
    which collects them itself)."""
    if (
        file_path.suffix == ".py"
        and PACKAGE in file_path.parents
        and file_path.name not in NOT_DOCTESTS
        and not parent.config.option.doctestmodules
    ):
        return DoctestModule.from_parent(parent, path=file_path)
    return None


@pytest.fixture(autouse=True)
def _seed_docstring_examples(request: pytest.FixtureRequest):
    """Each docstring example starts from seed 1234 and the float32 policy."""
    if not isinstance(request.node, DoctestItem):
        yield
        return
    import keras

    keras.utils.set_random_seed(1234)
    policy = keras.config.dtype_policy()
    yield
    keras.config.set_dtype_policy(policy)


# ------------------------------------------------------- garbage collection
# A test process keeps millions of Python objects alive (TensorFlow graphs of
# the module-scoped models, Keras layers, traced functions). Python's full
# garbage collection walks all of them, and it runs again and again as tests
# allocate, so every test got slower the longer the process ran: a file of run
# tests took 72 s alone and 193 s after three other files. After each test the
# objects that are still alive are collected once and then frozen
# (`gc.freeze`): later collections skip them. When the process holds more
# than `UNFREEZE_ABOVE_BYTES`, a module's end unfreezes and collects
# everything once, so what the module's fixtures held is freed.
UNFREEZE_ABOVE_BYTES = 6 * 2**30


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


@pytest.hookimpl(trylast=True)  # after pytest has torn down the test's fixtures
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Collect what the test left, then freeze the survivors."""
    module_ends = nextitem is None or (
        nextitem.getparent(pytest.Module) is not item.getparent(pytest.Module)
    )
    if module_ends and _resident_bytes() > UNFREEZE_ABOVE_BYTES:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
