"""The conditions of a measurement: the CPU, its instruction sets, the load.

`keras_transformer.cpu.cpu_info` reads the CPU's model and the
instruction sets that decide which int8 and float kernels CTranslate2 and
oneDNN run (AVX2, AVX-512F, the VNNI int8 dot products, AMX) from
``/proc/cpuinfo``. `BackgroundLoad` runs busy processes beside a
measurement, as other jobs on a shared machine would: each stops when the
measurement ends, when its hard time limit passes, or when the process that
started it is gone, and it is killed on Ctrl-C or any exception of the
measurement.

Example:
    >>> with BackgroundLoad(2):  # doctest: +SKIP
    ...     measure()
"""

from __future__ import annotations

import multiprocessing
import os
import time
from types import TracebackType

__all__ = ["SERVED_CODE", "BackgroundLoad", "load_average"]

#: What a serving figure depends on (a results record's ``depends_on``
#: besides its script): the export, the search and model it runs, and the
#: int8 quantization of the SavedModel (`runs.exports.quantized`).
SERVED_CODE = [
    "keras_transformer/export",
    "keras_transformer/runs/exports.py",
    "keras_transformer/decoding",
    "keras_transformer/models/transformer.py",
    "keras_transformer/layers",
    "keras_transformer/backend",
]


def load_average() -> float:
    """The 1-minute load average (0.0 where the system has none)."""
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0


def _busy(stop: multiprocessing.synchronize.Event, limit: float, parent: int) -> None:
    """Keeps one core busy with pure Python until `stop` is set, `limit`
    seconds have passed, or the parent process is gone."""
    deadline = time.monotonic() + limit
    value = 1
    while not stop.is_set() and time.monotonic() < deadline and os.getppid() == parent:
        for _ in range(20_000):  # a few milliseconds between checks
            value = (value * 1_103_515_245 + 12_345) & 0x7FFFFFFF


class BackgroundLoad:
    """`processes` busy processes while the ``with`` block runs.

    Args:
        processes: how many (0: none).
        time_limit: seconds after which each stops by itself, whatever
            happens to the process that started it.

    Leaving the block (normally, by an exception or by Ctrl-C) sets the stop
    event, waits a few seconds, then terminates and finally kills any that
    did not stop.
    """

    def __init__(self, processes: int, time_limit: float = 3600.0) -> None:
        if processes < 0 or time_limit <= 0:
            raise ValueError(
                "processes must be >= 0 and time_limit > 0. Received: "
                f"processes={processes}, time_limit={time_limit}"
            )
        self.count, self.time_limit = processes, time_limit
        self._context = multiprocessing.get_context("spawn")
        self._stop = self._context.Event()
        self.processes: list[multiprocessing.process.BaseProcess] = []

    @property
    def pids(self) -> list[int]:
        """The process ids of the started busy processes."""
        return [process.pid for process in self.processes if process.pid]

    def __enter__(self) -> BackgroundLoad:
        try:
            for _ in range(self.count):
                process = self._context.Process(
                    target=_busy,
                    args=(self._stop, self.time_limit, os.getpid()),
                    daemon=True,
                )
                process.start()
                self.processes.append(process)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self, grace: float = 5.0) -> None:
        """Stops every busy process: asked, then terminated, then killed."""
        self._stop.set()
        deadline = time.monotonic() + grace
        for process in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in self.processes:
            if process.is_alive():
                process.terminate()
                process.join(1.0)
            if process.is_alive():
                process.kill()
                process.join(1.0)
