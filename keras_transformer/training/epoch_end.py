"""An epoch's end that a stop cannot lose: its checkpoint comes before its validation.

At the end of an epoch `fit` first validates (the validation loss, then the
chief's callbacks: greedy-decoding BLEU, the best weights, attention
images), and only then calls ``on_epoch_end``. A checkpoint saved there
made a kill during the validation, which can take minutes, lose the whole
epoch's updates. `CheckpointCallback` saves the epoch's checkpoint after
its last update instead, before the validation, and records in the run
folder's ``validation.json`` that the epoch's validation is pending, then
that it is done once the epoch-end work is. A run resumed from that
checkpoint with its validation still pending validates it first
(`validate_pending_epoch`), so that neither the updates nor the epoch's
validation (and best weights) are lost. `fit_epochs` runs `fit` so that a
run resumed in the middle of an epoch ends its epochs (validations,
checkpoints) after the same updates as an uninterrupted run.

Under `MultiWorkerMirroredStrategy` only the chief keeps the record; the
other workers follow its decision (the validation loss is a collective
computation on every worker).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from keras_transformer.files import read_json_object, write_atomically
from keras_transformer.runs import save_checkpoint
from keras_transformer.training.callbacks import NaNGuard, has_diverged
from keras_transformer.training.distribute import broadcast_from_chief
from keras_transformer.training.kinds import recipe_for
from keras_transformer.training.preemption import (
    PreemptionCheckpoint,
    TrainingPreempted,
)
from keras_transformer.training.progress_logger import optimizer_step

__all__ = [
    "CheckpointCallback",
    "fit_epochs",
    "pending_validation",
    "validate_pending_epoch",
]

logger = logging.getLogger(__name__)


class CheckpointCallback(keras.callbacks.Callback):
    """Saves a `tf.train.CheckpointManager` checkpoint at the end of every epoch,
    before the epoch's validation.

    The checkpoint is numbered by the optimizer step and holds the model and
    the optimizer (its step counter and moments), so a restart resumes with
    the same step and learning rate. It is saved after the epoch's last
    update (or the update after which training stops), before `fit`
    validates; where `fit` gives no number of updates per epoch, at
    ``on_epoch_end``. Nothing is saved after a NaN loss. The write is
    complete or not seen (`keras_transformer.runs.save_checkpoint`): a full
    disk stops training with a `CheckpointWriteError`, and the previous
    checkpoint stays the latest.

    Args:
        manager: the run's checkpoint manager.
        nan_guard: the run's `NaNGuard`, or ``None``.
        record: the chief's ``validation.json``: written "pending" before
            each epoch-end checkpoint and "done" at ``on_epoch_end`` (put
            this callback after the validation callbacks); ``None`` on the
            other workers, or to keep no record.
    """

    def __init__(
        self,
        manager: tf.train.CheckpointManager,
        nan_guard: NaNGuard | None = None,
        record: Path | None = None,
    ) -> None:
        super().__init__()
        self.manager = manager
        self.nan_guard = nan_guard
        self.record = record
        self._epoch = 0

    def _save(self) -> None:
        if has_diverged(self.nan_guard):
            return
        step = optimizer_step(self.model)
        latest = self.manager.latest_checkpoint
        if latest is not None and latest.endswith(f"-{step}"):
            return
        if self.record is not None:  # before the checkpoint it speaks of
            write_record(self.record, step, self._epoch, validated=False)
        save_checkpoint(self.manager, step)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._epoch = epoch

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        updates = (self.params or {}).get("steps")
        if self.model.stop_training or (updates is not None and batch + 1 >= updates):
            self._save()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self._save()
        if self.record is not None and not has_diverged(self.nan_guard):
            step = optimizer_step(self.model)
            write_record(self.record, step, epoch, validated=True)


def write_record(path: Path, step: int, epoch: int, validated: bool) -> None:
    """Writes ``validation.json``: the epoch-end checkpoint `step`, its
    `epoch` (from 0) and whether the epoch's validation was done."""
    record = {"step": step, "epoch": epoch, "validated": validated}
    write_atomically(path, json.dumps(record) + "\n")


def pending_validation(path: Path | None, step: int) -> int | None:
    """The epoch (from 0) whose validation a run resumed from `step` still
    owes: the one `path` (``validation.json``) records as pending at that
    step; None when there is none (a checkpoint saved mid-epoch by a
    preemption, a validation that was done, a run without a record). A
    damaged record is told in a warning and read as none."""
    if path is None or not path.is_file():
        return None
    try:
        saved = read_json_object(path, "it is read as no pending validation.")
    except (OSError, ValueError) as error:
        logger.warning("%s", error)
        return None
    epoch = saved.get("epoch")
    if saved.get("step") != step or saved.get("validated", True) is not False:
        return None
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        logger.warning("%s holds epoch=%r: read as no pending validation.", path, epoch)
        return None
    return epoch


def validate_pending_epoch(
    trainer: keras.Model,
    step: int,
    record: Path | None,
    callbacks: Sequence[keras.callbacks.Callback],
    validation_data: Callable[[], Any],
    validation_every: int,
    say: Callable[[str], None],
) -> None:
    """Before a resumed run trains: the validation its checkpoint's epoch
    still owes (`pending_validation`), as `fit` would have made it.

    The validation loss (`trainer.evaluate` on `validation_data()`, when the
    epoch is one of every `validation_every`) goes into the logs, with
    which the chief's validation `callbacks` (BLEU, best weights, summaries)
    end the epoch; then the record says it is done. Every worker of a
    multi-worker run calls this, in step; the chief's record decides.

    Args:
        trainer: the model `fit` trains (the run's, restored).
        step: the step the run resumes from.
        record: the chief's ``validation.json`` (None on the other workers).
        callbacks: the validation callbacks (the chief's; none elsewhere).
        validation_data: makes the validation dataset (or None: none).
        validation_every: ``train.validation_every``.
        say: prints a line for the user.
    """
    epoch = pending_validation(record, step)
    strategy = trainer.distribute_strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        data = broadcast_from_chief(strategy, b"" if epoch is None else b"%d" % epoch)
        epoch = int(data) if data else None
    if epoch is None:
        return
    if (epoch + 1) % validation_every == 0:  # an epoch that `fit` validates
        say(
            f"The run stopped during the validation of update {step}: validating "
            "it before training goes on."
        )
        logs: dict[str, Any] = {}
        dataset = validation_data()
        if dataset is not None:
            found = trainer.evaluate(dataset, verbose=0, return_dict=True)
            logs = {f"val_{name}": float(value) for name, value in found.items()}
        for callback in callbacks:  # one `logs`, as in `fit`: BLEU joins it
            callback.set_model(trainer)
            callback.on_epoch_end(epoch, logs)
        values = [(k, v) for k, v in logs.items() if isinstance(v, (int, float))]
        if values:  # as the epoch's line of `PlainProgressLogger`
            words = [f"epoch {epoch + 1}", f"step {step}"]
            say("  ".join(words + [f"{name} {value:.4f}" for name, value in values]))
    if record is not None:
        write_record(record, step, epoch, validated=True)


class _OneTraining(keras.callbacks.Callback):
    """The run's callbacks, which see `fit_epochs`' `fit`s as one training.

    Each hook goes to every callback, in order, but ``on_train_begin`` (the
    first `fit`'s only) and ``on_train_end`` (kept until `end`): a user's
    `keras.callbacks.EarlyStopping` keeps its patience, `CheckpointAveraging`
    its snapshots, `PreemptionCheckpoint` its signal handlers, across the
    rest of a resumed epoch and the epochs after it.
    """

    def __init__(self, callbacks: Sequence[keras.callbacks.Callback]) -> None:
        super().__init__()
        self.callbacks = list(callbacks)
        self._begun = False
        self._end_logs: dict | None = None

    def set_model(self, model: keras.Model) -> None:
        super().set_model(model)
        for callback in self.callbacks:
            callback.set_model(model)

    def set_params(self, params: dict) -> None:
        super().set_params(params)
        for callback in self.callbacks:
            callback.set_params(params)

    def on_train_begin(self, logs: dict | None = None) -> None:
        if not self._begun:
            self._begun = True
            for callback in self.callbacks:
                callback.on_train_begin(logs)

    def on_train_end(self, logs: dict | None = None) -> None:
        self._end_logs = logs

    def end(self) -> None:
        """Every callback's ``on_train_end``, with the last `fit`'s logs."""
        for callback in self.callbacks:
            callback.on_train_end(self._end_logs)


def _forward(hook: str) -> Callable[..., None]:
    def forward(self: _OneTraining, *args: Any, **kwargs: Any) -> None:
        for callback in self.callbacks:
            getattr(callback, hook)(*args, **kwargs)

    forward.__name__ = hook
    return forward


_STAGES = ("epoch", "train_batch", "test", "test_batch", "predict", "predict_batch")
for _stage in _STAGES:
    for _hook in (f"on_{_stage}_begin", f"on_{_stage}_end"):
        setattr(_OneTraining, _hook, _forward(_hook))


class _EndAfterThisEpoch(keras.callbacks.Callback):
    """Ends `fit` after its first epoch (the rest of a resumed one); says
    whether another callback had asked to stop there."""

    others_stopped = False

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.others_stopped = bool(self.model.stop_training)
        self.model.stop_training = True


def fit_epochs(
    config: Any,
    trainer: keras.Model,
    data: Any,
    tokenizer: Any,
    callbacks: list[keras.callbacks.Callback],
    initial_step: int,
    schedule: tuple[int, int],
    verbose: int | None = None,
    validation_data: Callable[[], Any] | None = None,
) -> dict[str, list[float]]:
    """Runs `fit` from `initial_step` to the last update; Keras' history.

    The data stream skips the `initial_step` updates already made, so a
    resumed run sees the batches an uninterrupted one would (§5.1). A run
    resumed in the middle of an epoch (after a preemption) first trains the
    rest of that epoch alone, so that its epochs end, validate and save
    their checkpoints at the updates of the uninterrupted run (and
    checkpoint averaging, §6.1, averages the same ones); the callbacks see
    one training all the same (`_OneTraining`). A `PreemptionCheckpoint`
    among the callbacks ends `fit` early on SIGTERM or SIGINT, with a
    checkpoint; the history then holds the finished epochs.

    Args:
        config: the run's `TrainConfig`.
        trainer: the model to train.
        data, tokenizer: the run's data and tokenizer (its recipe makes the
            datasets).
        callbacks: the run's callbacks.
        initial_step: the update the run resumes from (0: a new run).
        schedule: (the run's updates, updates per epoch).
        verbose: `fit`'s (None: ``train.verbose``).
        validation_data: makes the validation dataset (None: the recipe's
            `validation_dataset`); `validate_pending_epoch` may have built it.
    """
    total_steps, per_epoch = schedule
    if initial_step >= total_steps:
        return {}  # a finished run: no dataset to build
    recipe = recipe_for(config)
    if validation_data is None:
        validation = recipe.validation_dataset(config, data, tokenizer)
    else:
        validation = validation_data()
    preemption = next(
        (c for c in callbacks if isinstance(c, PreemptionCheckpoint)), None
    )
    one_training = _OneTraining(callbacks)
    history: dict[str, list[float]] = {}
    step = initial_step
    try:
        try:
            while step < total_steps:
                epoch, done = divmod(step, per_epoch)
                end_after = _EndAfterThisEpoch()
                before = getattr(trainer, "history", None)
                try:
                    trainer.fit(
                        recipe.training_dataset(config, data, tokenizer, step),
                        epochs=math.ceil(total_steps / per_epoch),
                        initial_epoch=epoch,
                        steps_per_epoch=per_epoch - done,
                        validation_data=validation,
                        validation_freq=config.train.validation_every,
                        shuffle=False,
                        callbacks=[one_training, end_after] if done else [one_training],
                        verbose=config.train.verbose if verbose is None else verbose,
                    )
                finally:
                    if getattr(trainer, "history", None) is not before:
                        for name, values in _history_so_far(trainer).items():
                            history.setdefault(name, []).extend(values)
                reached = optimizer_step(trainer)
                if not done or end_after.others_stopped or reached % per_epoch:
                    break  # the last `fit`, a stop (a NaN, a callback), a short epoch
                step = reached
        except TrainingPreempted:
            pass  # `fit` ended without `on_train_end`
        one_training.end()  # flushes the summaries, among others
    finally:
        if preemption is not None:
            preemption.uninstall()
    if preemption is not None:
        preemption.finish()  # a signal after the last update still gets its checkpoint
    return history


def _history_so_far(trainer: keras.Model) -> dict[str, list[float]]:
    """Keras' history of the epochs `fit` finished (all of them, or before a stop)."""
    history = getattr(getattr(trainer, "history", None), "history", None) or {}
    return {k: [float(v) for v in values] for k, values in history.items()}
