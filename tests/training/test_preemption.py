"""Faults that lose nothing: SIGTERM/SIGINT checkpoints, and plain progress logs.

A preempted run (SIGTERM from a scheduler, or one Ctrl-C) saves a
checkpoint at the next step boundary, exits 0 with the command that
resumes it, and the rerun goes on from that step; a second Ctrl-C aborts
at once and leaves the last regular checkpoint intact. When standard
output is not a terminal, training prints plain lines, never a progress
bar's carriage returns.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.cli._signals import raise_interrupted
from keras_transformer.models import build_transformer, presets
from keras_transformer.training import TranslationTrainer, checkpoint_paths, train
from keras_transformer.training.loop import _progress
from keras_transformer.training.preemption import (
    PreemptionCheckpoint,
    TrainingAborted,
    TrainingPreempted,
)
from keras_transformer.training.progress_logger import PlainProgressLogger
from tests.training.helpers import (
    REPO_ROOT,
    SMALL_CONFIG,
    run_cli,
    small_config,
    subprocess_env,
    write_config,
)

#: One progress line: step, running loss, tokens/s, learning rate, elapsed.
STEP_LINE = re.compile(
    r"step (\d+)/(\d+)  loss \d+\.\d{4}  tokens/s \d+  lr \S+  elapsed \d+:\d\d:\d\d"
    r"  eta \d+:\d\d:\d\d"
)
STOPPED = re.compile(r"Training stopped by (SIG\w+) after update (\d+); saved (\S+)\.")


def _steps(directory: Path) -> list[int]:
    return [int(Path(p).name.split("-")[-1]) for p in checkpoint_paths(directory)]


class SignalAt(keras.callbacks.Callback):
    """Sends this process `signals` after update `step` (checking first that
    a `PreemptionCheckpoint` handles them, so a bug cannot kill pytest)."""

    def __init__(self, step: int, *signals: int) -> None:
        super().__init__()
        self.step, self.signals = step, signals

    def on_train_batch_end(self, batch, logs=None):
        if (
            int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            != self.step
        ):
            return
        for signum in self.signals:
            handler = signal.getsignal(signum)
            assert isinstance(getattr(handler, "__self__", None), PreemptionCheckpoint)
            os.kill(os.getpid(), signum)


# ------------------------------------------------------------- the callback
def _dense_run(tmp_path: Path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(0.01)
    model.compile(optimizer=optimizer, loss="mse")
    optimizer.build(model.trainable_variables)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=optimizer), str(tmp_path), 5
    )
    data = tf.data.Dataset.from_tensors((np.ones((4, 3)), np.ones((4, 1)))).repeat()
    return model, manager, data


def test_sigterm_saves_at_the_step_boundary_and_stops(tmp_path):
    model, manager, data = _dense_run(tmp_path)
    preemption = PreemptionCheckpoint(manager)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(TrainingPreempted) as stop:
            model.fit(
                data,
                epochs=3,
                steps_per_epoch=5,
                verbose=0,
                shuffle=False,
                callbacks=[SignalAt(7, signal.SIGTERM), preemption],
            )
    finally:
        preemption.uninstall()
    assert (stop.value.step, stop.value.signal_name) == (7, "SIGTERM")
    assert stop.value.checkpoint == manager.latest_checkpoint
    assert _steps(tmp_path) == [7] and model.stop_training
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_handlers_are_restored_after_a_run_without_signals(tmp_path):
    model, manager, data = _dense_run(tmp_path)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    preemption = PreemptionCheckpoint(manager)

    class Check(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            assert preemption.installed

    model.fit(
        data,
        epochs=1,
        steps_per_epoch=2,
        verbose=0,
        shuffle=False,
        callbacks=[Check(), preemption],
    )
    assert not preemption.installed and preemption.requested is None
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert _steps(tmp_path) == []


def test_a_second_sigint_aborts_at_once(tmp_path):
    model, manager, data = _dense_run(tmp_path)
    manager.save(checkpoint_number=0)
    before = signal.getsignal(signal.SIGINT)
    preemption = PreemptionCheckpoint(manager)
    try:
        with pytest.raises(KeyboardInterrupt) as stop:
            model.fit(
                data,
                epochs=1,
                steps_per_epoch=5,
                verbose=0,
                shuffle=False,
                callbacks=[SignalAt(3, signal.SIGINT, signal.SIGINT), preemption],
            )
    finally:
        preemption.uninstall()
    assert preemption.requested == signal.SIGINT
    assert _steps(tmp_path) == [0]  # nothing saved after the abort
    assert signal.getsignal(signal.SIGINT) is before
    # One line that names the checkpoint a rerun resumes from.
    assert isinstance(stop.value, TrainingAborted)
    assert (stop.value.checkpoint, stop.value.step) == (manager.latest_checkpoint, 0)
    assert str(stop.value) == (
        "Second interrupt: stopping now without a checkpoint; the run resumes "
        f"from {manager.latest_checkpoint} (update 0). Run the same command again "
        "to go on."
    )


# -------------------------------------------------------- progress as lines
def _tiny_trainer() -> TranslationTrainer:
    keras.utils.set_random_seed(3)
    config = presets["tiny"].replace(
        vocabulary_size=50,
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=16,
        d_ff=32,
        num_heads=2,
    )
    trainer = TranslationTrainer(build_transformer(config))
    optimizer = keras.optimizers.Adam(1e-3)
    trainer.compile(optimizer=optimizer)
    optimizer.build(trainer.transformer.trainable_variables)
    return trainer


def _fit_two_epochs_of_three_steps(progress: keras.callbacks.Callback) -> None:
    """Six updates of the tiny trainer, two epochs, with `progress` watching."""
    ids = np.random.default_rng(0).integers(4, 50, size=(3, 4, 6)).astype("int32")
    data = tf.data.Dataset.from_tensors(((ids[0], ids[1]), ids[2])).repeat()
    _tiny_trainer().fit(
        data,
        epochs=2,
        steps_per_epoch=3,
        verbose=0,
        shuffle=False,
        callbacks=[progress],
    )


def test_plain_progress_lines(capsys):
    _fit_two_epochs_of_three_steps(PlainProgressLogger(2, total_steps=6))
    out = capsys.readouterr().out
    assert "\r" not in out and "\b" not in out and "\x1b" not in out
    lines = out.splitlines()
    steps = [line for line in lines if line.startswith("step ")]
    assert all(STEP_LINE.fullmatch(line) for line in steps), steps
    assert [int(STEP_LINE.fullmatch(line)[1]) for line in steps] == [2, 4, 6]
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [line.split("  ")[:2] for line in epochs] == [
        ["epoch 1/2", "step 3"],
        ["epoch 2/2", "step 6"],
    ]
    assert all("token_accuracy " in line for line in epochs)


class _Stream:
    def __init__(self, tty: bool) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_line_redrawn_on_a_terminal_with_its_eta(capsys):
    """On a terminal the step line is redrawn in place (a bar, updates/s and
    the time left of the whole run); the epoch lines are printed as lines."""
    terminal = io.StringIO()
    _fit_two_epochs_of_three_steps(
        PlainProgressLogger(2, 6, terminal=True, stream=terminal, redraw_seconds=0)
    )
    drawn = terminal.getvalue()
    redraws = [line.rstrip() for line in drawn.replace("\n", "").split("\r")[1:]]
    assert [line.split()[:2] for line in redraws] == [
        ["step", f"{n}/6"] for n in range(1, 7)
    ]
    assert re.search(r"\[#+-*\]  \d+\.\d updates/s  loss ", redraws[0])
    assert all(re.search(r"  eta \d+:\d\d:\d\d$", line) for line in redraws[:-1])
    assert redraws[-1].endswith("eta 0:00:00")
    epochs = [line.split("  ")[:2] for line in capsys.readouterr().out.splitlines()]
    assert epochs == [["epoch 1/2", "step 3"], ["epoch 2/2", "step 6"]]


def test_progress_bar_on_a_terminal_plain_lines_elsewhere():
    config = small_config("train.verbose=1", "train.log_every=7")
    verbose, callbacks = _progress(config, print, 10, stream=_Stream(True))
    assert verbose == 0 and callbacks[0].terminal and callbacks[0].total_steps == 10
    assert _progress(config, None, 10, stream=_Stream(True)) == (1, [])
    per_epoch = small_config("train.verbose=2")
    assert _progress(per_epoch, print, 10, stream=_Stream(True)) == (2, [])
    verbose, callbacks = _progress(config, print, 10, stream=_Stream(False))
    assert verbose == 0 and len(callbacks) == 1 and not callbacks[0].terminal
    assert isinstance(callbacks[0], PlainProgressLogger) and callbacks[0].every == 7
    assert _progress(config, None, 10, stream=_Stream(False)) == (0, [])
    quiet = small_config("train.verbose=0")
    assert _progress(quiet, print, 10, stream=_Stream(False)) == (0, [])


# ------------------------------------------------------------------ train()
@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """`small_config`'s 6 updates, never stopped (read only)."""
    return train(small_config(), tmp_path_factory.mktemp("uninterrupted"))


def test_train_stops_on_sigterm_and_a_rerun_resumes(tmp_path, capsys, uninterrupted):
    """In-process: stopped after update 4 of 6 (mid-epoch), then resumed,
    with the dropout masks an uninterrupted run draws: the resumed run's
    streams started again from their seeds, repeating the first updates'
    masks, and ended with other weights."""
    config = small_config("train.verbose=1")
    before = signal.getsignal(signal.SIGTERM)
    result = train(config, tmp_path, callbacks=[SignalAt(4, signal.SIGTERM)])
    out = capsys.readouterr().out
    assert result.preempted and result.steps == 4 and result.evaluation is None
    assert _steps(tmp_path / "checkpoints") == [3, 4]
    assert not (tmp_path / "result.json").exists()
    assert signal.getsignal(signal.SIGTERM) is before
    assert STOPPED.search(out).groups()[:2] == ("SIGTERM", "4")
    assert [
        int(STEP_LINE.search(line)[1])
        for line in out.splitlines()
        if line.startswith("step ")
    ] == [1, 2, 3, 4]
    assert "\r" not in out
    assert result.history["loss"] and len(result.history["loss"]) == 1

    resumed = train(config, tmp_path, printer=None)
    assert not resumed.preempted
    assert (resumed.initial_step, resumed.steps) == (4, 6)
    assert resumed.evaluation is not None
    assert _steps(tmp_path / "checkpoints") == [3, 4, 6]
    assert json.loads((tmp_path / "result.json").read_text())["steps"] == 6
    assert resumed.weights_checksum == uninterrupted.weights_checksum


def test_the_epoch_checkpoint_comes_before_the_epochs_validation(tmp_path, caplog):
    """In a plain `fit`, the epoch's checkpoint is on disk when its
    validation starts, and the record says when the validation is done."""
    from keras_transformer.training.epoch_end import (
        CheckpointCallback,
        pending_validation,
    )

    model, manager, data = _dense_run(tmp_path)
    record = tmp_path / "validation.json"
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            seen.append((_steps(tmp_path), json.loads(record.read_text())))

    model.fit(
        data,
        epochs=2,
        steps_per_epoch=3,
        validation_data=data,
        validation_steps=1,
        verbose=0,
        callbacks=[CheckpointCallback(manager, record=record), Probe()],
    )
    assert seen == [
        ([3], {"step": 3, "epoch": 0, "validated": False}),
        ([3, 6], {"step": 6, "epoch": 1, "validated": False}),
    ]
    assert json.loads(record.read_text())["validated"] is True
    assert pending_validation(record, 6) is None
    record.write_text('{"step": 6, "epoch": 1, "validated": false}')
    assert pending_validation(record, 6) == 1 and pending_validation(record, 3) is None
    # A damaged record: one warning naming it, and no validation owed.
    record.write_text('{"step": 6')
    assert pending_validation(record, 6) is None
    assert f"{record} is not valid JSON" in caplog.text


class _Killed(BaseException):
    """A kill, in-process: nothing of the run's code runs after it."""


def _record_validations(monkeypatch, kill_first: bool) -> list[int]:
    """The updates at which `ValidationTranslations` ends an epoch (its
    BLEU decoding and best weights); with `kill_first`, the first one is a
    kill (`_Killed`) instead."""
    from keras_transformer.training.callbacks import ValidationTranslations
    from keras_transformer.training.progress_logger import optimizer_step

    steps: list[int] = []
    real = ValidationTranslations.on_epoch_end

    def on_epoch_end(self, epoch, logs=None):
        steps.append(optimizer_step(self.model))
        if kill_first and len(steps) == 1:
            raise _Killed
        real(self, epoch, logs)

    monkeypatch.setattr(ValidationTranslations, "on_epoch_end", on_epoch_end)
    return steps


def _count_validation_datasets(monkeypatch) -> list[int]:
    """[how many validation datasets the translation recipe has made]."""
    from keras_transformer.training.translation_recipe import TranslationRecipe

    built = [0]
    real = TranslationRecipe.validation_dataset

    def validation_dataset(self, *args):
        built[0] += 1
        return real(self, *args)

    monkeypatch.setattr(TranslationRecipe, "validation_dataset", validation_dataset)
    return built


def test_a_kill_during_an_epochs_validation_loses_none_of_its_updates(
    tmp_path, monkeypatch, capsys, uninterrupted
):
    """The epoch's checkpoint was saved after its validation, so a kill
    during the validation (BLEU decoding can take minutes) lost the whole
    epoch's updates: the rerun started again from the epoch before. It is
    saved before the validation now, and the rerun validates that epoch
    first: it ends as a run never killed does."""
    config = small_config()
    validated = _record_validations(monkeypatch, kill_first=True)
    with pytest.raises(_Killed):
        train(config, tmp_path / "killed")
    assert validated == [3]
    assert _steps(tmp_path / "killed" / "checkpoints") == [3]
    record = tmp_path / "killed" / "validation.json"
    assert json.loads(record.read_text()) == {
        "step": 3,
        "epoch": 0,
        "validated": False,
    }

    built = _count_validation_datasets(monkeypatch)
    resumed = train(config, tmp_path / "killed", printer=print)
    out = capsys.readouterr().out
    assert resumed.initial_step == 3 and resumed.steps == 6
    assert validated == [3, 3, 6]
    assert built == [1]  # one validation dataset, for the redone validation and fit
    assert (
        "The run stopped during the validation of update 3: validating it before "
        "training goes on." in out
    )
    line = r"^epoch 1  step 3  val_loss \d+\.\d{4}  .*val_bleu \d+\.\d{4}"
    assert re.search(line, out, re.M), out
    assert json.loads(record.read_text()) == {"step": 6, "epoch": 1, "validated": True}
    # The same weights, best BLEU and best.json as a run never killed.
    monkeypatch.undo()
    assert resumed.weights_checksum == uninterrupted.weights_checksum
    assert resumed.best_validation_score == uninterrupted.best_validation_score
    best = json.loads((tmp_path / "killed" / "best.json").read_text())
    never_killed = json.loads((uninterrupted.workdir / "best.json").read_text())
    assert best == never_killed | {"fingerprint": best["fingerprint"]}
    # A rerun of the finished run owes no validation.
    train(config, tmp_path / "killed", printer=print)
    assert "validating it" not in capsys.readouterr().out


def test_sigterm_during_validation_stops_at_its_batch_and_the_rerun_validates(
    tmp_path, monkeypatch
):
    """A SIGTERM during the validation loss waited for the whole validation
    and the BLEU decoding, which may outlast a scheduler's grace period. It
    now stops at the validation batch (the epoch's checkpoint is saved), and
    the rerun makes that epoch's validation first."""

    class SignalInValidation(keras.callbacks.Callback):
        def on_test_batch_begin(self, batch, logs=None):
            handler = signal.getsignal(signal.SIGTERM)
            assert isinstance(getattr(handler, "__self__", None), PreemptionCheckpoint)
            os.kill(os.getpid(), signal.SIGTERM)

    config = small_config()
    validated = _record_validations(monkeypatch, kill_first=False)
    stopped = train(config, tmp_path, callbacks=[SignalInValidation()])
    assert stopped.preempted and stopped.steps == 3
    assert validated == [] and _steps(tmp_path / "checkpoints") == [3]
    resumed = train(config, tmp_path)
    assert (resumed.initial_step, resumed.steps) == (3, 6)
    assert validated == [3, 6]


class _UserCallback(keras.callbacks.Callback):
    """A user's callback: records training begins, epoch ends and training
    ends; with `stop_after_epoch`, asks to stop at the end of that epoch."""

    def __init__(self, stop_after_epoch: int | None = None) -> None:
        super().__init__()
        self.stop_after_epoch = stop_after_epoch
        self.events: list[str] = []

    def on_train_begin(self, logs=None):
        self.events.append("begin")

    def on_epoch_end(self, epoch, logs=None):
        self.events.append(f"epoch {epoch + 1}")
        if epoch + 1 == self.stop_after_epoch:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self.events.append("end")


def test_a_callbacks_stop_at_the_end_of_a_resumed_epoch_ends_the_run(tmp_path):
    """A user's callback (an `EarlyStopping`) that stopped the training at
    the end of the resumed epoch's rest was overruled: the run went on with
    the next epochs."""
    config = small_config("train.train_steps=9")
    stopped = train(config, tmp_path, callbacks=[SignalAt(4, signal.SIGTERM)])
    assert stopped.preempted and stopped.steps == 4
    stopper = _UserCallback(stop_after_epoch=2)
    resumed = train(config, tmp_path, callbacks=[stopper])
    assert (resumed.initial_step, resumed.steps) == (4, 6)
    assert stopper.events == ["begin", "epoch 2", "end"]
    assert _steps(tmp_path / "checkpoints") == [3, 4, 6]


def test_a_run_resumed_mid_epoch_ends_its_epochs_where_an_uninterrupted_one_does(
    tmp_path, monkeypatch, capsys
):
    """Resumed after update 4 (3 per epoch), the run's epochs ran updates
    5-7 and 8-9: its validations and checkpoints came after 7 and 9 instead
    of 6 and 9, so its best weights and its averaged checkpoints (§6.1)
    were chosen among other updates than an uninterrupted run's. It trains
    the rest of the stopped epoch alone first now."""
    config = small_config("train.train_steps=9", "train.verbose=1")
    validated = _record_validations(monkeypatch, kill_first=False)
    stopped = train(config, tmp_path, callbacks=[SignalAt(4, signal.SIGTERM)])
    assert stopped.preempted and stopped.steps == 4 and validated == [3]
    capsys.readouterr()
    hooks = _UserCallback()
    resumed = train(config, tmp_path, callbacks=[hooks])
    assert (resumed.initial_step, resumed.steps) == (4, 9)
    # One training for the user's callbacks, though `fit` ran twice (an
    # `EarlyStopping` would have reset its patience at the second begin).
    assert hooks.events == ["begin", "epoch 2", "epoch 3", "end"]
    assert validated == [3, 6, 9]
    assert _steps(tmp_path / "checkpoints") == [3, 4, 6, 9]
    assert len(resumed.history["loss"]) == len(resumed.history["val_loss"]) == 2
    epochs = [line.split("  ")[:2] for line in capsys.readouterr().out.splitlines()]
    assert [words for words in epochs if words[0].startswith("epoch")] == [
        ["epoch 2/3", "step 6"],
        ["epoch 3/3", "step 9"],
    ]


# ------------------------------------------------------ the command, for real
def _cli_args(config: Path, workdir: Path, *overrides: str) -> list[str]:
    words = ["train", str(config), "--workdir", str(workdir)]
    for override in overrides:
        words += ["--set", override]
    return words


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)
def test_the_command_stops_on_a_signal_and_resumes(tmp_path, signum):
    """A run of (almost) endless length gets `signum` once it has printed
    step 6 (after the checkpoint of epoch 1): exit 0, the resume command,
    a checkpoint of the step it stopped at; the rerun, shortened, finishes."""
    config = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    overrides = [
        "train.train_steps=100000",
        "train.steps_per_epoch=5",
        "train.validation_every=1000",
        "train.verbose=1",
    ]
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_transformer",
            *_cli_args(config, workdir, *overrides),
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.append(child.stderr.read()))
    drain.start()
    watchdog = threading.Timer(360, child.kill)  # a hung child fails the test
    watchdog.start()
    lines: list[str] = []
    deadline = time.monotonic() + 240
    try:
        for line in child.stdout:
            lines.append(line)
            step = STEP_LINE.match(line)
            if step and int(step[1]) >= 6:
                child.send_signal(signum)
                break
            assert time.monotonic() < deadline, "no progress line in time"
        lines += child.stdout.read().splitlines(keepends=True)
        assert child.wait(timeout=120) == 0, "".join(lines) + "".join(errors)
    finally:
        watchdog.cancel()
        if child.poll() is None:
            child.kill()
        drain.join()
    out = "".join(lines)
    assert "\r" not in out
    name, step, saved = STOPPED.search(out).groups()
    step = int(step)
    assert name == signal.Signals(signum).name and step >= 6
    assert _steps(workdir / "checkpoints")[-1] == step and saved.endswith(f"-{step}")
    resume = re.search(r"To resume, run the same command again: (.+)", out)[1]
    assert resume.startswith(f"keras-transformer train {config} --workdir {workdir}")
    assert "--set train.train_steps=100000" in resume

    shorter = [*overrides[1:], f"train.train_steps={step + 2}"]
    rerun = run_cli(_cli_args(config, workdir, *shorter))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"from step {step} " in rerun.stdout
    assert json.loads((workdir / "result.json").read_text())["steps"] == step + 2


CHILD = """
import os, signal, sys
import keras
from keras_transformer.training import train
from tests.training.helpers import small_config

class Twice(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == 7:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)

train(
    small_config("train.train_steps=20", "train.steps_per_epoch=5"),
    sys.argv[1],
    callbacks=[Twice()],
    printer=None,
)
"""


@pytest.mark.slow
def test_two_sigints_abort_and_keep_the_last_checkpoint(tmp_path):
    from keras_transformer.training import load_trained_model

    workdir = tmp_path / "run"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(workdir)],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert child.returncode != 0
    assert "TrainingAborted: Second interrupt" in child.stderr
    assert _steps(workdir / "checkpoints") == [5]
    model, _, _ = load_trained_model(workdir)  # the checkpoint reads back
    assert model.count_params() > 0
    resumed = train(
        small_config("train.train_steps=7", "train.steps_per_epoch=5"),
        workdir,
        printer=None,
    )
    assert (resumed.initial_step, resumed.steps) == (5, 7)


# ----------------------------------------- signals outside the updates, and twice
def _command_lines(stderr: str) -> list[str]:
    """The lines of the command itself (not TensorFlow's start-up logs)."""
    lines = stderr.splitlines()
    return [line for line in lines if line.startswith("keras-transformer")]


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (Linux: /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)[1], 16)
    return bool(caught >> (signum - 1) & 1)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize(
    ("signum", "status"),
    [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_before_the_first_update_ends_the_command_with_one_line(
    tmp_path, signum, status
):
    """The signal comes as soon as the command handles it (from its first
    line, long before TensorFlow has loaded): one line, exit 128 + signal."""
    config = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    child = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer", *_cli_args(config, workdir)],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _catches(child.pid, signal.SIGTERM):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.005)
        child.send_signal(signum)
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    name = signal.Signals(signum).name
    assert child.returncode == status, out + err
    assert "Traceback" not in err and out == ""
    assert _command_lines(err) == [
        f"keras-transformer train: Stopped by {name} before the first update; "
        "nothing to save. Run the same command again to start."
    ]
    assert not (workdir / "checkpoints").exists()


def test_a_signal_outside_the_updates_names_the_last_checkpoint(
    tmp_path, monkeypatch, capsys
):
    """After checkpoints exist (e.g. during the final evaluation, or while a
    resumed run loads), the line says which one the rerun goes on from."""
    from keras_transformer import cli

    (tmp_path / "checkpoints").mkdir()
    for step in (3, 12, 6):
        (tmp_path / "checkpoints" / f"ckpt-{step}.index").write_bytes(b"")

    def interrupted(args):
        raise cli.CommandInterrupted(signal.SIGTERM)

    entry = dataclasses.replace(cli.COMMANDS["train"], run=interrupted)
    monkeypatch.setitem(cli.COMMANDS, "train", entry)
    status = cli.main(["train", "--workdir", str(tmp_path)])
    assert status == 143
    assert capsys.readouterr().err == (
        "keras-transformer train: Stopped by SIGTERM outside the updates; nothing "
        f"new to save: the last checkpoint is {tmp_path / 'checkpoints' / 'ckpt-12'} "
        "(update 12). Run the same command again to go on from it.\n"
    )


def test_a_signal_while_the_model_is_built_ends_the_command_with_one_line(
    tmp_path, monkeypatch, capsys
):
    """SIGTERM after the data and tokenizer are ready, before the first
    update (while the model is built): exit 143, one line, no checkpoint."""
    from keras_transformer import cli
    from keras_transformer.training import loop

    build = loop._build

    def build_then_terminate(*args, **kwargs):
        built = build(*args, **kwargs)
        # The command's handler, or the signal would end pytest.
        assert signal.getsignal(signal.SIGTERM) is raise_interrupted
        os.kill(os.getpid(), signal.SIGTERM)
        return built

    monkeypatch.setattr(loop, "_build", build_then_terminate)
    config = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    status = cli.main(_cli_args(config, workdir))
    captured = capsys.readouterr()
    assert status == 143, captured.out + captured.err
    assert "Traceback" not in captured.err
    assert _command_lines(captured.err) == [
        "keras-transformer train: Stopped by SIGTERM before the first update; "
        "nothing to save. Run the same command again to start."
    ]
    assert (workdir / "tokenizer").exists()  # it got that far
    assert _steps(workdir / "checkpoints") == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_main_handles_both_signals_and_restores_the_handlers(monkeypatch, capsys):
    from keras_transformer import cli

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    seen = {}

    def probe(args):
        seen["handlers"] = (
            signal.getsignal(signal.SIGTERM),
            signal.getsignal(signal.SIGINT),
        )
        # The command's handler, or the signal would end pytest.
        assert seen["handlers"] == (raise_interrupted, raise_interrupted)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)  # interrupted at once
        return 0

    entry = dataclasses.replace(cli.COMMANDS["translate"], run=probe)
    monkeypatch.setitem(cli.COMMANDS, "translate", entry)
    started = time.monotonic()
    status = cli.main(["translate", "--workdir", "w"])
    assert time.monotonic() - started < 4
    assert status == 130
    assert capsys.readouterr().err == (
        "keras-transformer translate: Stopped by SIGINT before it finished. Run the "
        "same command again.\n"
    )
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_second_ctrl_c_in_the_train_command_is_one_line(
    tmp_path, monkeypatch, capsys
):
    """Ctrl-C twice after update 4: no traceback, one line naming the
    checkpoint of update 3, exit 130; nothing saved after update 3."""
    from keras_transformer import cli
    from keras_transformer.training import loop

    fit = loop.fit_epochs

    def fit_with_two_interrupts(
        config, trainer, data, tokenizer, callbacks, *rest, **options
    ):
        callbacks = [SignalAt(4, signal.SIGINT, signal.SIGINT), *callbacks]
        return fit(config, trainer, data, tokenizer, callbacks, *rest, **options)

    monkeypatch.setattr(loop, "fit_epochs", fit_with_two_interrupts)
    config = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT)
    overrides = ("train.train_steps=9", "train.validation_every=1000")
    status = cli.main(_cli_args(config, workdir, *overrides))
    captured = capsys.readouterr()
    checkpoint = workdir / "checkpoints" / "ckpt-3"
    assert status == 130, captured.out + captured.err
    assert "Traceback" not in captured.err
    assert _command_lines(captured.err) == [
        "keras-transformer train: Second interrupt: stopping now without a "
        f"checkpoint; the run resumes from {checkpoint} (update 3). Run the same "
        "command again to go on."
    ]
    assert _steps(workdir / "checkpoints") == [3]
    assert signal.getsignal(signal.SIGINT) is before
