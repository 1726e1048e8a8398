"""`PlainProgressLogger`: training progress as plain lines or one redrawn line."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.progress import (
    RedrawnLine,
    format_duration,
    progress_bar,
    seconds_left,
)
from keras_transformer.validation import check_positive_int

__all__ = ["PlainProgressLogger", "current_learning_rate", "optimizer_step"]

logger = logging.getLogger(__name__)


def optimizer_step(model: keras.Model) -> int:
    """The optimizer updates `model` has made (survives a restart)."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


def current_learning_rate(model: keras.Model) -> float:
    """The learning rate of `model`'s next update."""
    return float(keras.ops.convert_to_numpy(model.optimizer.learning_rate))


def _scalar(value: Any) -> float:
    return float(np.mean(np.asarray(value, dtype=np.float64)))


class PlainProgressLogger(keras.callbacks.Callback):
    """Training progress: updates done of the run's total, rate and time left.

    Keras' progress bar counts the updates of one epoch and redraws itself
    with carriage returns and ANSI escapes, which a log file (a cluster job,
    CI, ``> train.log``) keeps as one endless line. This callback prints
    instead, every `every` optimizer steps, one plain line:

    ```text
    step 150/2000  loss 3.4521  tokens/s 9876  lr 5.24e-04  elapsed 0:01:23  eta 0:16:01
    ```

    (eta: the time left at the mean rate of this run's updates so far,
    validation included; the loss is the epoch's running mean, as in the
    progress bar; tokens/s counts the real target tokens since the previous
    line, from the trainer's `TokenStatistics`, and is left out where it
    cannot be read, e.g. under `MultiWorkerMirroredStrategy`) and at the end
    of every epoch a line with its training and validation values:

    ```text
    epoch 2/10  step 400  loss 3.1022  token_accuracy 0.4120  val_loss 2.9876
    val_bleu 12.3000  elapsed 0:03:05
    ```

    (one line, wrapped here). Each line is flushed at once. With
    ``terminal=True`` the step line, with a bar and the updates per second
    instead of tokens/s, is redrawn in place on `stream` after every update
    (at most every `redraw_seconds`); the epoch lines are printed below it.
    `train()` uses it with ``verbose=0`` (Keras' own progress bar off).

    Args:
        every: updates between two lines (`train.log_every`).
        total_steps: the run's length, shown as ``step <n>/<total>``.
        printer: where the lines go.
        terminal: redraw the step line in place on `stream`.
        stream: the terminal (``None``: standard output).
        redraw_seconds: the least time between two redraws on a terminal.
    """

    def __init__(
        self,
        every: int,
        total_steps: int | None = None,
        printer: Callable[[str], None] = print,
        terminal: bool = False,
        stream: Any = None,
        redraw_seconds: float = 0.1,
    ) -> None:
        super().__init__()
        check_positive_int("every", every)
        self.every = every
        self.total_steps = total_steps
        self.printer = printer
        self.terminal = terminal
        self._stream = stream
        self._start = time.monotonic()
        self._first_step = 0
        self._mark: tuple[float, float] | None = None
        self._line = RedrawnLine(self._terminal, redraw_seconds)

    def _say(self, line: str) -> None:
        self._line.end()
        self.printer(line)
        stream = sys.stdout
        if stream is not None and not stream.closed:
            stream.flush()

    def _terminal(self) -> Any:
        return sys.stdout if self._stream is None else self._stream

    def step_line(self, step: int, now: float, logs: dict | None) -> str:
        """The progress line after update `step`, at time `now` (monotonic)."""
        total = f"/{self.total_steps}" if self.total_steps else ""
        parts = [f"step {step}{total}"]
        done, elapsed = step - self._first_step, now - self._start
        if self.terminal:
            if self.total_steps:
                parts[0] += " " + progress_bar(step, self.total_steps)
            if done > 0 and elapsed > 0:
                parts.append(f"{done / elapsed:.1f} updates/s")
        if logs and "loss" in logs:
            parts.append(f"loss {_scalar(logs['loss']):.4f}")
        tokens = self._tokens() if not self.terminal else None
        if tokens is not None and self._mark is not None:
            since, before = self._mark
            if now > since and tokens >= before:
                parts.append(f"tokens/s {(tokens - before) / (now - since):.0f}")
            self._mark = (now, tokens)
        parts.append(f"lr {current_learning_rate(self.model):.3g}")
        parts.append(f"elapsed {format_duration(elapsed)}")
        run_total = self.total_steps - self._first_step if self.total_steps else None
        left = seconds_left(done, run_total, elapsed)
        if left is not None:
            parts.append(f"eta {format_duration(left)}")
        return "  ".join(parts)

    def _tokens(self) -> float | None:
        """Real target tokens of this epoch so far, summed over replicas."""
        variable = getattr(getattr(self.model, "statistics", None), "tokens", None)
        strategy = getattr(self.model, "distribute_strategy", None)
        if variable is None or isinstance(
            strategy, tf.distribute.MultiWorkerMirroredStrategy
        ):
            return None
        try:
            return float(keras.ops.convert_to_numpy(variable))
        except Exception as e:  # noqa: BLE001 - a log line must not stop training
            logger.debug("Cannot read the token count: %s", e)
            return None

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._start = time.monotonic()
        self._first_step = optimizer_step(self.model)  # a resumed run's first update

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        # The trainer's metrics (and its token count) restart every epoch.
        self._mark = (time.monotonic(), 0.0)

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = optimizer_step(self.model)
        now = time.monotonic()
        if self.terminal:
            last = step == self.total_steps
            if last or self._line.due(now):
                self._line.draw(self.step_line(step, now, logs), now)
            return
        if step % self.every:
            return
        self._say(self.step_line(step, now, logs))

    def on_train_end(self, logs: dict | None = None) -> None:
        self._line.end()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        epochs = (self.params or {}).get("epochs")
        parts = [f"epoch {epoch + 1}" + (f"/{epochs}" if epochs else "")]
        parts.append(f"step {optimizer_step(self.model)}")
        for name, value in (logs or {}).items():
            try:
                parts.append(f"{name} {_scalar(value):.4f}")
            except (TypeError, ValueError):
                continue
        parts.append(f"elapsed {format_duration(time.monotonic() - self._start)}")
        self._say("  ".join(parts))
