# %% [markdown]
# # Distributed training: many devices, many machines
#
# "We trained our models on one machine with 8 NVIDIA P100 GPUs" (§5.2).
# Training was synchronous and data-parallel: every GPU holds a copy of the
# model, works on its own share of each batch, and the gradients are summed
# before every update. `keras_transformer.training` does the same with
# `tf.distribute`:
#
# * `MirroredStrategy`: the GPUs of one machine (or, here, the CPU split into
#   logical devices, so that this notebook runs anywhere);
# * `MultiWorkerMirroredStrategy`: several machines, described by the
#   `TF_CONFIG` environment variable.
#
# The code of a run does not change with the strategy. Batches hold a token
# budget for *all* replicas together, and the loss of each replica is
# divided by the number of real tokens in the *global* batch, so that the
# summed gradients are exactly those of one big batch.

# %%
# %matplotlib inline
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from keras_transformer import training

# Split the CPU into two logical devices. Importing TensorFlow is fine, but
# this must happen before TensorFlow creates its first tensor.
training.configure_cpu_devices(2)

FAST = os.environ.get("FAST") == "1"
tf.get_logger().setLevel("ERROR")  # no INFO lines from tf.distribute, tracing
WORKDIR = Path(os.environ.get("KT_WORKDIR", "runs")) / (
    "distributed_fast" if FAST else "distributed"
)
print("devices:", [device.name for device in tf.config.list_logical_devices()])

# %% [markdown]
# ## 1. One machine, several devices: `MirroredStrategy`
#
# `training.make_strategy("mirrored")` mirrors the model over all GPUs, or
# over the logical CPU devices when there is no GPU. The task is the
# synthetic one of `kt.data.synthetic_dates` (dates written out in six
# languages, to be translated into ISO 8601), which needs no download.

# %%
strategy = training.make_strategy("mirrored")
print(type(strategy).__name__, "with", strategy.num_replicas_in_sync, "replicas")


def dates_config(
    steps: int, dropout: float = 0.1, **train_settings
) -> training.TrainConfig:
    """A small model on the synthetic dates task."""
    return training.TrainConfig(
        model={
            "preset": "tiny",
            "max_length": 32,
            "dropout": dropout,
            # Eq. 7's warm-up, never longer than the run.
            "optimizer": {"warmup_steps": min(200 if FAST else 1000, steps)},
        },
        data=training.DataConfig(
            task="dates",
            num_train_examples=5_000 if FAST else 50_000,
            num_eval_examples=100 if FAST else 1_000,
            vocabulary_size=500,
            max_sentence_length=32,
            max_tokens_per_batch=1024 if FAST else 2048,
            bucket_boundaries=(8, 12, 16, 24, 32),
        ),
        train=training.TrainingConfig(
            **{
                "train_steps": steps,
                "steps_per_epoch": min(steps, 250),
                "bleu_samples": 32 if FAST else 200,
                "test_samples": 100 if FAST else 1_000,
                "log_every": 10,
                "num_translations": 3,
                "verbose": 2,
                **train_settings,  # these win
            }
        ),
    )


def epoch_lines(line: str) -> None:
    """Prints `train`'s messages but its line of every `train.log_every` updates."""
    if not line.startswith("step "):
        print(line)


config = dates_config(steps=40 if FAST else 1500)
start = time.perf_counter()
result = training.train(config, WORKDIR / "mirrored", strategy, printer=epoch_lines)
print(f"{result.steps} updates on 2 replicas in {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ### Two replicas compute the same update as one device
#
# The same configuration trained for a few steps on one device and on two
# replicas gives the same losses and, up to rounding, the same weights
# (dropout is switched off for this check: each replica draws its own
# dropout masks). Sums taken in a different order round differently, and
# Adam, which divides each gradient by its running magnitude, turns such
# differences in gradients close to zero into differences of up to one
# learning-rate step; they stay far below the size of the weights. This
# agreement is what the global normalisation of the loss buys: with a
# per-replica mean, a replica holding fewer real tokens would count as much
# as one holding many.

# %%
short = dates_config(
    steps=5, dropout=0.0, validation_every=5, keep_best=False, test_samples=8
)
single = training.train(short, WORKDIR / "check_single", "default", printer=None)
mirrored = training.train(short, WORKDIR / "check_mirrored", strategy, printer=None)
pairs = list(zip(single.model.get_weights(), mirrored.model.get_weights(), strict=True))
largest = max(float(np.max(np.abs(a - b))) for a, b in pairs)
scale = max(float(np.max(np.abs(a))) for a, _ in pairs)
print("training loss, one device:  ", single.history["loss"])
print("training loss, two replicas:", mirrored.history["loss"])
print(f"largest weight difference after 5 updates: {largest:.1e}", end=" ")
print(f"(largest weight: {scale:.2f})")

# %% [markdown]
# ## 2. Gradient accumulation: the paper's batch on fewer devices
#
# The paper's batches hold about 25,000 source and 25,000 target tokens
# (§5.1), spread over 8 GPUs. With fewer devices,
# `train.gradient_accumulation = k` sums the gradients of `k` batches into
# one update, normalised by the tokens of all `k`, so that an update equals
# one step on the `k` batches together:
#
# ```
# keras-transformer train --preset base --task multi30k --workdir runs/base \
#     --set data.max_tokens_per_batch=6250 --set train.gradient_accumulation=4
# ```
#
# ## 3. Several machines: `MultiWorkerMirroredStrategy` and `TF_CONFIG`
#
# Every machine (a *worker*) runs the same command; the environment variable
# `TF_CONFIG` tells each one the addresses of all workers and which one it
# is. Worker 0 is the *chief*: it writes the checkpoints, the TensorBoard
# logs and the final evaluation into the work directory; the others keep
# their own checkpoints under `<workdir>/workers/worker_<i>`. On two
# machines `host1` and `host2`:
#
# ```
# # on host1
# export TF_CONFIG='{"cluster": {"worker": ["host1:12345", "host2:12345"]},
#                    "task": {"type": "worker", "index": 0}}'
# keras-transformer train config.json --workdir /shared/run --strategy multiworker
#
# # on host2: the same, with "index": 1
# ```
#
# The work directory should be on a file system that all workers see, and
# every worker must be started with the same config and data. Each worker
# may itself have several GPUs: all of them are used.
#
# The cell below starts such a cluster of two workers on this machine, as
# two processes talking over local ports.

# %%


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


cluster_dir = WORKDIR / "multiworker"
cluster_dir.mkdir(parents=True, exist_ok=True)
config_path = dates_config(steps=10 if FAST else 500).save(cluster_dir / "config.json")
workers = [f"localhost:{free_port()}" for _ in range(2)]
processes = []
for index in range(2):
    tf_config = {
        "cluster": {"worker": workers},
        "task": {"type": "worker", "index": index},
    }
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps(tf_config),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    command = [
        sys.executable, "-m", "keras_transformer", "train", str(config_path),
        "--workdir", str(cluster_dir / "run"), "--strategy", "multiworker",
    ]  # fmt: skip
    print(f"worker {index}: TF_CONFIG={json.dumps(tf_config)}")
    log = open(cluster_dir / f"worker_{index}.log", "w")  # noqa: SIM115
    processes.append((subprocess.Popen(command, env=env, stdout=log, stderr=log), log))

start = time.perf_counter()
for process, log in processes:
    process.wait(timeout=1200)
    log.close()
print(f"both workers finished in {time.perf_counter() - start:.0f} s")
print("exit codes:", [process.returncode for process, _ in processes])
chief_log = (cluster_dir / "worker_0.log").read_text()
print("\n".join(line for line in chief_log.splitlines() if "replica" in line))
chief_result = json.loads((cluster_dir / "run" / "result.json").read_text())
print(f"the chief's result.json: {chief_result['steps']} updates")

# %% [markdown]
# ## 4. Monitoring with TensorBoard
#
# The chief writes TensorBoard logs into `<workdir>/logs`: the training loss,
# token accuracy, perplexity and learning rate every `train.log_every`
# updates (`train/`), the validation loss, BLEU, chrF, sample translations
# and an attention image after each validation (`validation/`), the test
# scores at the end (`test/`), and the run's hyperparameters (the HParams
# tab). Open them with
#
# ```
# tensorboard --logdir runs/distributed/mirrored/logs
# ```
#
# (in Jupyter: `%load_ext tensorboard` then
# `%tensorboard --logdir runs/distributed/mirrored/logs`). Pointing
# `--logdir` at a parent folder compares several runs. The same numbers can
# be read back in Python:

# %%
# size_guidance {"tensors": 0} keeps every point; by default the accumulator
# keeps a random sample of 10 per tag. (`keras_transformer.runs.
# logged_scalars(folder, tag)` does the same in one call.)
every_point = {"tensors": 0}
train_events = EventAccumulator(str(result.log_dir / "train"), every_point)
train_events.Reload()
validation_events = EventAccumulator(str(result.log_dir / "validation"), every_point)
validation_events.Reload()
print("training tags:", train_events.Tags()["tensors"])
print("validation tags:", validation_events.Tags()["tensors"])


def series(events: EventAccumulator, tag: str) -> tuple[list[int], list[float]]:
    points = events.Tensors(tag)
    return [p.step for p in points], [
        float(tf.make_ndarray(p.tensor_proto)) for p in points
    ]


fig, axes = plt.subplots(1, 3, figsize=(13, 3))
for ax, (events, tag) in zip(
    axes,
    [
        (train_events, "loss"),
        (train_events, "learning_rate"),
        (validation_events, "bleu"),
    ],
    strict=True,
):
    ax.plot(*series(events, tag), marker=".")
    ax.set(xlabel="update", title=tag)
plt.show()
