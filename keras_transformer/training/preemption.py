"""Preemption: a checkpoint and a clean stop on SIGTERM or SIGINT.

`PreemptionCheckpoint` turns the signal a scheduler sends before it kills a
job (or a Ctrl-C) into a checkpoint at the next step boundary and a
`TrainingPreempted` out of `fit`; a second Ctrl-C stops at once
(`TrainingAborted`).
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.runs import save_checkpoint
from keras_transformer.training.callbacks import NaNGuard, has_diverged
from keras_transformer.training.progress_logger import optimizer_step

__all__ = ["PreemptionCheckpoint", "TrainingAborted", "TrainingPreempted"]

logger = logging.getLogger(__name__)


class TrainingPreempted(Exception):  # noqa: N818 - a stop, not an error
    """Raised out of `fit` by `PreemptionCheckpoint` once its checkpoint is saved.

    `train()` catches it and returns a `TrainResult` with ``preempted=True``;
    code that calls `fit` with a `PreemptionCheckpoint` itself catches it
    the same way.

    Attributes:
        step: the optimizer step the checkpoint holds.
        signal_name: the signal that asked for the stop (``"SIGTERM"``, ...).
        checkpoint: the path of the checkpoint.
    """

    def __init__(self, step: int, signal_name: str, checkpoint: str | None) -> None:
        super().__init__(
            f"Training stopped by {signal_name} at step {step}; checkpoint: "
            f"{checkpoint}."
        )
        self.step = step
        self.signal_name = signal_name
        self.checkpoint = checkpoint


class TrainingAborted(KeyboardInterrupt):
    """A second Ctrl-C while a preemption checkpoint was pending: stopped at once.

    Raised by `PreemptionCheckpoint` without saving anything; the message
    is one line that names the checkpoint a rerun resumes from. A
    `KeyboardInterrupt`, as Ctrl-C is.

    Attributes:
        signum: the signal (SIGINT).
        checkpoint: the newest complete checkpoint, or ``None``.
        step: its update, or ``None``.
    """

    def __init__(self, checkpoint: str | None, step: int | None = None) -> None:
        if checkpoint is None:
            where = (
                "no checkpoint was saved yet, so the run starts again from the "
                "first update"
            )
        else:
            update = f" (update {step})" if step is not None else ""
            where = f"the run resumes from {checkpoint}{update}"
        super().__init__(
            f"Second interrupt: stopping now without a checkpoint; {where}. Run "
            "the same command again to go on."
        )
        self.signum = int(signal.SIGINT)
        self.checkpoint = checkpoint
        self.step = step


class PreemptionCheckpoint(keras.callbacks.Callback):
    """Saves a checkpoint and stops at the next step boundary on SIGTERM or SIGINT.

    Cloud schedulers and Kubernetes send SIGTERM some seconds before they
    kill a job. From `on_train_begin` to `on_train_end` this callback
    replaces the handlers of SIGTERM and SIGINT (Ctrl-C) with one that only
    sets a flag. At the end of the update that is running (or of the
    validation batch, when the signal came during `fit`'s validation; at
    the start of the next epoch, when it came during the epoch-end
    callbacks) the model and optimizer are saved through `manager`, the
    same `tf.train.CheckpointManager` the `CheckpointCallback` uses,
    numbered by the optimizer step (during validation the epoch's
    checkpoint is there already), and `TrainingPreempted` is raised out of
    `fit`. So the stop skips the validation pass, BLEU decoding and
    epoch-end work of the unfinished epoch, which can take longer than a
    scheduler's grace period; a run resumed after a stop during an epoch's
    validation validates that epoch first
    (`keras_transformer.training.epoch_end`). A second SIGINT while the
    stop is pending raises `TrainingAborted` (a `KeyboardInterrupt`) at
    once, as Ctrl-C usually does; its one-line message names the checkpoint
    a rerun resumes from (the last checkpoint written stays intact: a
    checkpoint becomes the latest only once it is complete). After a NaN
    loss (`nan_guard`) nothing is saved.

    The previous handlers are restored at the end of training; call
    `uninstall` in a ``finally`` block too, since `on_train_end` does not run
    when `fit` raises. Handlers can only be installed from the main thread;
    elsewhere the callback does nothing.

    Distribution: with one device or a `MirroredStrategy` (all replicas in
    this process) every replica stops after the same update. Under
    `MultiWorkerMirroredStrategy` the signal may reach the workers at
    different steps, and a worker that stopped alone would leave the others
    waiting in their next all-reduce; there the handlers are not installed:
    SIGTERM ends the process as before, and a restart resumes from the last
    epoch checkpoint.

    Args:
        manager: the run's checkpoint manager.
        nan_guard: the run's `NaNGuard`, or ``None``.
        signals: the signals handled.
    """

    def __init__(
        self,
        manager: tf.train.CheckpointManager,
        nan_guard: NaNGuard | None = None,
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT),
    ) -> None:
        super().__init__()
        self.manager = manager
        self.nan_guard = nan_guard
        self.signals = tuple(signals)
        self.requested: int | None = None
        self.step: int | None = None
        self.checkpoint: str | None = None
        self._previous: dict[int, Any] = {}

    @property
    def signal_name(self) -> str | None:
        """The name of the signal that asked for the stop, if one did."""
        if self.requested is None:
            return None
        return signal.Signals(self.requested).name

    @property
    def installed(self) -> bool:
        """Whether the handlers are in place."""
        return bool(self._previous)

    def install(self) -> None:
        """Installs the handlers (main thread, not multi-worker); idempotent."""
        if self._previous:
            return
        if threading.current_thread() is not threading.main_thread():
            logger.info("Not in the main thread: no preemption checkpoints.")
            return
        strategy = getattr(self.model, "distribute_strategy", None)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            logger.info(
                "MultiWorkerMirroredStrategy: SIGTERM and SIGINT keep their "
                "handlers; a restart resumes from the last epoch checkpoint."
            )
            return
        for signum in self.signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        """Restores the handlers that were there before; idempotent."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested is not None and signum == signal.SIGINT:
            self.uninstall()
            latest = self.manager.latest_checkpoint
            step = None
            if latest is not None and latest.rsplit("-", 1)[-1].isdigit():
                step = int(latest.rsplit("-", 1)[-1])
            raise TrainingAborted(latest, step)
        if self.requested is None:
            self.requested = signum
            logger.warning(
                "%s received: saving a checkpoint after this update, then stopping%s.",
                signal.Signals(signum).name,
                "; press Ctrl-C again to abort at once"
                if signum == signal.SIGINT
                else "",
            )

    def save(self) -> str | None:
        """Saves a checkpoint of the current step (unless there is one); its path.

        The write is complete or not seen (`keras_transformer.runs.save_checkpoint`).
        """
        step = optimizer_step(self.model)
        latest = self.manager.latest_checkpoint
        if latest is None or not latest.endswith(f"-{step}"):
            latest = save_checkpoint(self.manager, step)
        self.step, self.checkpoint = step, latest
        return latest

    def finish(self) -> None:
        """After `fit`: saves the checkpoint of a stop asked for after the last update.

        A signal that arrives once the last update has run finds no step
        boundary left to stop at; its checkpoint is written here. Nothing is
        saved after a NaN loss.
        """
        if self.requested is None or self.checkpoint is not None:
            return
        if has_diverged(self.nan_guard):
            return
        self.save()

    def resume_message(self) -> str:
        """The line that tells the user how to go on after a stop."""
        return (
            f"Training stopped by {self.signal_name} after update {self.step}; "
            f"saved {self.checkpoint}. Train again with the same config and work "
            "directory to resume."
        )

    def _stop_if_requested(self) -> None:
        if self.requested is None:
            return
        if has_diverged(self.nan_guard):
            return  # the NaN guard ends the run; broken weights are not saved
        checkpoint = self.save()
        self.model.stop_training = True
        raise TrainingPreempted(self.step, self.signal_name, checkpoint)

    def on_train_begin(self, logs: dict | None = None) -> None:
        self.install()

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._stop_if_requested()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._stop_if_requested()

    def on_test_batch_end(self, batch: int, logs: dict | None = None) -> None:
        self._stop_if_requested()

    def on_test_end(self, logs: dict | None = None) -> None:
        self._stop_if_requested()

    def on_train_end(self, logs: dict | None = None) -> None:
        self.uninstall()
