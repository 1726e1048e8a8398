"""Importing TensorFlow without its start-up lines on standard error.

TensorFlow's C++ libraries log a few lines while they load (oneDNN custom
operations, "Could not find cuda drivers", the CPU instructions it was not
built for), before absl logging is initialised. ``TF_CPP_MIN_LOG_LEVEL``
does not reach them, nor does any other environment variable. The command
line therefore loads TensorFlow with file descriptor 2 pointed at a
temporary file, and passes on every captured line that is not one of those
start-up lines (a real error while loading stays visible):
`drop_tensorflow_startup_lines` wraps the first ``import tensorflow``,
wherever a command makes it. Only the command line does this; the library
never touches the process's file descriptors. (``TF_ENABLE_ONEDNN_OPTS=0``
would silence the oneDNN line too, but it changes the numerics, so it is
not used.)
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

#: The lines TensorFlow and its libraries print while they load.
STARTUP_LINE = re.compile(
    r"All log messages before absl::InitializeLog\(\) is called"
    r"|oneDNN custom operations are on"
    r"|Could not find cuda drivers"
    r"|failed call to cuInit"
    r"|cpu_feature_guard\.cc"
    r"|^To enable the following instructions:"
    r"|Unable to register cu(?:DNN|FFT|BLAS) factory"
    r"|computation placer already registered"
    r"|TF-TRT Warning: Could not find TensorRT"
)


@contextlib.contextmanager
def _startup_lines_dropped() -> Iterator[None]:
    """Points file descriptor 2 at a temporary file, then passes on the rest."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines(True)
            kept = [line for line in lines if not STARTUP_LINE.search(line)]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` as usual; its loading runs under `_startup_lines_dropped`."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # once: the first import of TensorFlow
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def quiet_exec_module(module: Any) -> None:
            with _startup_lines_dropped():
                exec_module(module)
                # CUDA's probe ("failed call to cuInit") logs when the devices
                # are first listed, not at import: list them here. Logical
                # devices can still be configured afterwards.
                module.config.list_physical_devices()

        spec.loader.exec_module = quiet_exec_module
        return spec


def drop_tensorflow_startup_lines() -> None:
    """Makes the first `import tensorflow` drop its start-up lines.

    TensorFlow is still imported where a command first needs it (a command
    that fails before that answers at once); only the lines of the list
    `STARTUP_LINE` are dropped, anything else it prints while loading is
    passed on to standard error.
    """
    if "tensorflow" in sys.modules or any(
        isinstance(finder, _QuietTensorFlowFinder) for finder in sys.meta_path
    ):
        return
    sys.meta_path.insert(0, _QuietTensorFlowFinder())
