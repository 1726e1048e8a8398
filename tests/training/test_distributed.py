"""Distribution and restarts, in real subprocesses.

Logical CPU devices and multi-worker collectives must be configured before
TensorFlow initialises, and a kill must hit a real process, so every test
here starts its own Python.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.data import SubwordTokenizer
from keras_transformer.schedules import NoamSchedule
from keras_transformer.training import checkpoint_paths
from keras_transformer.training.checkpoints import checkpoint_step
from tests.training.helpers import (
    REPO_ROOT,
    SMALL_CLASSIFICATION_CONFIG,
    SMALL_CONFIG,
    SMALL_IMAGE_CONFIG,
    run_cli,
    subprocess_env,
    write_config,
    write_reviews,
)

SCRIPTS = Path(__file__).parent / "scripts"


#: Translation runs with the default tests; the other kinds (the same strategy
#: code under their recipes, each run in child processes) with the slow ones.
KINDS = [
    "translation",
    pytest.param("classification", marks=pytest.mark.slow),
    pytest.param("image", marks=pytest.mark.slow),
]


def _result_line(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.parametrize("kind", KINDS)
def test_mirrored_on_two_cpu_devices_matches_one_device(kind):
    """Same global batches, dropout 0: 3 updates on 1 and on 2 replicas.

    The replicas split every batch and the loss divides by the global token
    (or review) count, so the updates are the same up to float32 summation
    order (the image trainer: bits/dim times images, summed over the
    replicas and accumulated batches, over the images of the update).
    Gradients are clipped after the sum over replicas. Tolerance: relative
    1e-5 on the loss of a held-out batch.
    """
    process = subprocess.run(
        [sys.executable, str(SCRIPTS / "mirrored_vs_single.py"), kind],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    results = _result_line(process.stdout)
    single = results["single_k1"]
    assert single["replicas"] == 1 and single["iterations"] == 3
    assert single["loss"] < single["initial_loss"] - 0.1  # it did learn
    names = ["mirrored_k1", "mirrored_k2"]
    assert sorted(results) == sorted(["single_k1", *names])
    for name in names:
        mirrored = results[name]
        assert mirrored["replicas"] == 2 and mirrored["iterations"] == 3
        assert mirrored["initial"] == single["initial"]  # same initial weights
        np.testing.assert_allclose(mirrored["loss"], single["loss"], rtol=1e-5)


def _free_ports(count: int) -> list[int]:
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("localhost", 0))
        sockets.append(sock)
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
    for process in processes:
        process.wait(timeout=30)


def _run_two_workers(
    tmp_path: Path, config: Path, workdir: Path, timeout: float = 300
) -> tuple[list[subprocess.Popen], list[str]]:
    """Runs ``train --strategy multiworker`` as two localhost workers.

    Returns the finished processes and their outputs (stdout and stderr).
    """
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    processes = []
    logs = []
    try:
        for index in range(2):
            tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            log = open(tmp_path / f"worker_{index}.log", "w")  # noqa: SIM115
            logs.append(log)
            processes.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "keras_transformer",
                        "train",
                        str(config),
                        "--workdir",
                        str(workdir),
                        "--strategy",
                        "multiworker",
                    ],
                    cwd=REPO_ROOT,
                    env=subprocess_env(TF_CONFIG=json.dumps(tf_config)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        deadline = time.monotonic() + timeout
        for process in processes:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"the multi-worker run did not finish in {timeout:.0f} s")
    finally:
        _stop(processes)
        for log in logs:
            log.close()
    outputs = [(tmp_path / f"worker_{i}.log").read_text() for i in range(2)]
    return processes, outputs


@pytest.mark.parametrize(
    ("tf_config", "message"),
    [
        (None, "which is not set. Set it on every worker"),
        ("{bad", "TF_CONFIG is not valid JSON"),
        ("[1]", "TF_CONFIG names no cluster: it must be like {"),
        (
            '{"cluster": {"worker": ["h:1"]}}',
            "TF_CONFIG names no task for this worker: ",
        ),
        (
            '{"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}}',
            "cluster.worker must be a list of 'host:port' addresses",
        ),
        (
            '{"cluster": {"worker": ["h:1"]}, "task": {"type": "chief", "index": 0}}',
            "task.type 'chief' is none of the cluster's jobs ('worker')",
        ),
        (
            '{"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", '
            '"index": 2}}',
            "task.index 2 is not one of the 2 addresses of cluster.worker: pass "
            "an index from 0 to 1.",
        ),
    ],
)
def test_a_bad_tf_config_is_refused_in_its_own_words(tf_config, message, monkeypatch):
    """TensorFlow refused a cluster without a task or an index past the
    workers as "When `cluster_spec` is given, you must also specify
    `task_type` and `task_id`" and "The `task_id` 3 exceeds the maximum id of
    worker"; they are now refused before the strategy is made, naming the
    TF_CONFIG key."""
    from keras_transformer.training.distribute import make_strategy

    if tf_config is None:
        monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
        monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(ValueError) as raised:
        make_strategy("multiworker")
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.slow  # two training processes: 30-40 s on a 2-core machine
def test_multi_worker_run_of_two_processes(tmp_path):
    """Two workers on localhost train 4 updates and end with the same weights.

    Only the chief learns the tokenizer; worker 1 receives its bytes through
    a collective (no shared folder needed) and saves the same tokenizer.
    """
    values = copy.deepcopy(SMALL_CONFIG)
    values["train"].update(train_steps=4, steps_per_epoch=2, test_samples=4)
    config = write_config(tmp_path, values)
    workdir = tmp_path / "run"
    processes, outputs = _run_two_workers(tmp_path, config, workdir)
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    chief = json.loads((workdir / "result.json").read_text())
    other = json.loads((workdir / "workers" / "worker_1" / "result.json").read_text())
    assert chief["steps"] == other["steps"] == 4
    assert chief["weights_checksum"] == other["weights_checksum"]
    assert chief["history"]["loss"] == other["history"]["loss"]
    assert "2 replica(s)" in outputs[0]
    tokenizers = [
        SubwordTokenizer.load(folder / "tokenizer")
        for folder in (workdir, workdir / "workers" / "worker_1")
    ]
    fingerprint = tokenizers[0].fingerprint
    assert tokenizers[1].fingerprint == fingerprint
    assert "Learning the tokenizer" in outputs[0]
    assert "Learning the tokenizer" not in outputs[1]
    assert f"Received the tokenizer {fingerprint[:12]} from the chief" in outputs[1]
    # Only the chief evaluates and writes TensorBoard logs.
    assert chief["evaluation"] is not None and other["evaluation"] is None
    assert (workdir / "logs" / "train").is_dir()
    assert not (workdir / "workers" / "worker_1" / "logs").exists()


@pytest.mark.slow
def test_multi_worker_run_stops_every_worker_when_the_chief_has_no_tokenizer(
    tmp_path,
):
    """The chief cannot learn the tokenizer (a vocabulary too large for the
    data): it still takes part in the broadcast, so worker 1 stops with a
    one-line error instead of waiting for the bytes forever."""
    values = copy.deepcopy(SMALL_CONFIG)
    values["data"]["vocabulary_size"] = 5000
    config = write_config(tmp_path, values)
    workdir = tmp_path / "run"
    processes, outputs = _run_two_workers(tmp_path, config, workdir, timeout=180)
    assert [process.returncode for process in processes] == [1, 1], outputs
    assert "vocabulary_size=5000 is too large" in outputs[0]
    assert "The chief worker could not load or learn the tokenizer" in outputs[1]
    assert "Traceback" not in outputs[0] + outputs[1]
    assert "Learning the tokenizer" not in outputs[1]
    assert not (workdir / "workers" / "worker_1" / "tokenizer").exists()


@pytest.mark.slow
def test_both_workers_make_the_validation_a_killed_chief_missed(tmp_path):
    """Killed during its last validation, the run's workers restart: the
    chief's `validation.json` says the validation of update 4 is pending,
    and every worker validates it (the validation loss is a collective),
    worker 1 on the chief's word (its folder keeps no record); none waits
    forever."""
    values = copy.deepcopy(SMALL_CONFIG)
    values["train"].update(train_steps=4, steps_per_epoch=2, test_samples=4)
    config = write_config(tmp_path, values)
    workdir = tmp_path / "run"
    processes, outputs = _run_two_workers(tmp_path, config, workdir)
    assert [process.returncode for process in processes] == [0, 0], outputs
    record = workdir / "validation.json"
    assert json.loads(record.read_text()) == {"step": 4, "epoch": 1, "validated": True}
    assert not (workdir / "workers" / "worker_1" / "validation.json").exists()
    # What a kill during the last validation leaves: the record still pending.
    record.write_text(json.dumps({"step": 4, "epoch": 1, "validated": False}))
    processes, outputs = _run_two_workers(tmp_path, config, workdir, timeout=180)
    assert [process.returncode for process in processes] == [0, 0], outputs
    said = "The run stopped during the validation of update 4: validating it"
    assert all(said in output for output in outputs), outputs
    assert json.loads(record.read_text())["validated"] is True


def _final_learning_rate(values: dict, steps: int) -> float:
    """The learning rate of the kind's schedule after `steps` updates."""
    if values.get("kind") == "classification":
        import keras

        settings = values["classification"]
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0,
            steps,
            warmup_target=settings.get("learning_rate", 1e-3),
            warmup_steps=int(steps * settings.get("warmup_share", 0.1)),
        )
        return float(schedule(steps))
    model = values["model"]
    # The learning rate of Eq. 7.
    return float(
        NoamSchedule(model["d_model"], model["optimizer"]["warmup_steps"])(steps)
    )


@pytest.mark.parametrize("kind", KINDS)
def test_killed_run_resumes_with_the_same_command(tmp_path, kind):
    """SIGKILL after a checkpoint exists; the same command finishes the run.

    Runs under MirroredStrategy on two logical CPU devices, so restoring
    mirrored variables is covered too.
    """
    if kind == "translation":
        values = copy.deepcopy(SMALL_CONFIG)
    elif kind == "image":
        values = copy.deepcopy(SMALL_IMAGE_CONFIG)
    else:
        values = copy.deepcopy(SMALL_CLASSIFICATION_CONFIG)
        values["data"]["data_dir"] = str(write_reviews(tmp_path / "reviews"))
    values["train"].update(
        train_steps=60, steps_per_epoch=5, validation_every=1000, test_samples=4
    )
    config = write_config(tmp_path, values)
    workdir = tmp_path / "run"
    command = [
        "train",
        str(config),
        "--workdir",
        str(workdir),
        "--strategy",
        "mirrored",
        "--cpu-devices",
        "2",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer", *command],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    state = workdir / "checkpoints" / "checkpoint"
    try:
        deadline = time.monotonic() + 240
        while not state.exists():
            if process.poll() is not None:
                pytest.fail(f"training ended early: {process.stdout.read()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no checkpoint after 240 s")
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        process.stdout.close()
    assert process.returncode == -signal.SIGKILL
    killed_at = checkpoint_step(checkpoint_paths(workdir / "checkpoints")[-1])
    assert 5 <= killed_at < 60 and killed_at % 5 == 0

    finished = run_cli(command, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:] + finished.stdout[-2000:]
    assert f"Resuming {workdir} from step {killed_at}" in finished.stdout
    result = json.loads((workdir / "result.json").read_text())
    assert result["initial_step"] == killed_at
    assert result["steps"] == 60
    # The learning rate at the final step: the schedule resumed too.
    expected = _final_learning_rate(values, 60)
    np.testing.assert_allclose(result["learning_rate"], expected, rtol=1e-6)
    # The resumed part trained exactly the remaining updates.
    assert len(result["history"]["loss"]) == (60 - killed_at) // 5
    assert checkpoint_step(checkpoint_paths(workdir / "checkpoints")[-1]) == 60
