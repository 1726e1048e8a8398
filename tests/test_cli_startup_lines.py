"""The command line prints none of TensorFlow's start-up lines (cli/_startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from keras_transformer.cli._startup import STARTUP_LINE, _startup_lines_dropped

ROOT = Path(__file__).resolve().parents[1]

#: What TensorFlow 2.21 printed on this machine while loading, before the fix.
TENSORFLOW_STARTUP = (
    "WARNING: All log messages before absl::InitializeLog() is called are "
    "written to STDERR\n"
    "I0000 00:00:1795690323.642597   24692 port.cc:153] oneDNN custom operations "
    "are on. You may see slightly different numerical results due to "
    "floating-point round-off errors from different computation orders. To turn "
    "them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.\n"
    "I0000 00:00:1795690323.642991   24692 cudart_stub.cc:31] Could not find cuda "
    "drivers on your machine, GPU will not be used.\n"
    "I0000 00:00:1795690324.324608   25514 cpu_feature_guard.cc:227] This "
    "TensorFlow binary is optimized to use available CPU instructions in "
    "performance-critical operations.\n"
    "To enable the following instructions: AVX2 AVX512F FMA, in other "
    "operations, rebuild TensorFlow with the appropriate compiler flags.\n"
)


def _command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the lines come regardless
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def test_startup_lines_are_dropped_and_other_lines_kept(capfd):
    with _startup_lines_dropped():
        os.write(2, TENSORFLOW_STARTUP.encode())
        os.write(2, b"E0000 a real error while loading\n")
    _, err = capfd.readouterr()
    assert err == "E0000 a real error while loading\n"
    assert all(STARTUP_LINE.search(line) for line in TENSORFLOW_STARTUP.splitlines())


def test_help_prints_nothing_on_standard_error(tmp_path):
    answer = _command("--help", cwd=tmp_path)
    assert answer.returncode == 0
    assert "train" in answer.stdout
    assert answer.stderr == ""


@pytest.mark.slow  # imports TensorFlow in a fresh process: 10-30 s here
def test_a_command_that_loads_tensorflow_prints_only_its_error(tmp_path):
    answer = _command("translate", "--workdir", str(tmp_path), cwd=tmp_path)
    assert answer.returncode == 1
    assert answer.stderr.splitlines() == [
        f"keras-transformer translate: error: {tmp_path} is not a training work "
        "directory: config.json is missing. Pass the --workdir of a "
        "`keras-transformer train` run."
    ]


@pytest.mark.slow  # pytest-xdist starts a worker that imports TensorFlow: 10-20 s
def test_the_parallel_test_run_prints_none_of_them(tmp_path):
    """`make test` (pytest-xdist) loads TensorFlow in its workers before
    pytest captures output; tests/conftest.py drops the lines there too."""
    environment = {**os.environ}
    environment.pop("TF_CPP_MIN_LOG_LEVEL", None)
    answer = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-q", "-p", "no:cacheprovider"]
        + ["tests/test_imports.py::test_the_graph_sees_imports_inside_functions"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=300,
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "1 passed" in answer.stdout
    output = answer.stdout + answer.stderr
    assert not [line for line in output.splitlines() if STARTUP_LINE.search(line)]
