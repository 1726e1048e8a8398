"""Choosing a `tf.distribute` strategy: one device, several GPUs, several machines.

The same training code runs under every strategy: the dataset is batched by
the global token budget and distributed by Keras (each replica gets a slice
of every batch), the loss is normalised by the global token count
(`MaskedSparseCrossEntropy`'s convention), and gradients are summed over
the replicas.

* ``"default"``: `MirroredStrategy` over all GPUs when there are several,
  otherwise the default (single-device) strategy.
* ``"mirrored"``: `MirroredStrategy` over all GPUs, or over all logical CPU
  devices when there is no GPU (see `configure_cpu_devices`).
* ``"multiworker"``: `MultiWorkerMirroredStrategy`, with the cluster read
  from the ``TF_CONFIG`` environment variable.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import STRATEGIES
from keras_transformer.validation import check_positive_int

__all__ = [
    "STRATEGIES",
    "broadcast_from_chief",
    "configure_cpu_devices",
    "is_chief",
    "make_strategy",
    "worker_index",
]


def configure_cpu_devices(count: int) -> None:
    """Splits the CPU into `count` logical devices, to run `MirroredStrategy` on it.

    Must be called before TensorFlow initialises its devices (before the
    first tensor is created); the command line does it first thing.

    Args:
        count: the number of logical CPU devices (1 leaves the CPU as is).

    Raises:
        RuntimeError: when TensorFlow is already initialised.
    """
    check_positive_int("count", count)
    cpus = tf.config.list_physical_devices("CPU")
    current = tf.config.get_logical_device_configuration(cpus[0])
    if count == 1 and not current:
        return
    if current is not None and len(current) == count:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError as e:
        raise RuntimeError(
            f"Cannot split the CPU into {count} logical devices: TensorFlow is "
            "already initialised. Call configure_cpu_devices() (or pass "
            "--cpu-devices) before anything creates a tensor, e.g. at the top "
            "of the program."
        ) from e


def make_strategy(name: str = "default") -> tf.distribute.Strategy:
    """Creates the strategy called `name` (see the module docstring).

    Args:
        name: ``"default"``, ``"mirrored"`` or ``"multiworker"``.

    Returns:
        The strategy. Create it before building the model, and create a
        `MultiWorkerMirroredStrategy` at the start of the program.

    Raises:
        ValueError: for an unknown name, or ``"multiworker"`` without
            ``TF_CONFIG``.
    """
    if name not in STRATEGIES:
        raise ValueError(
            f"Unknown strategy {name!r}. Use one of: {', '.join(STRATEGIES)}."
        )
    if name == "multiworker":
        return _multi_worker_strategy()
    # Physical devices can be listed without initialising TensorFlow.
    gpus = tf.config.list_physical_devices("GPU")
    if name == "default":
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy()
        return tf.distribute.get_strategy()
    if name == "mirrored":
        if gpus:
            return tf.distribute.MirroredStrategy()
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(
            devices=cpus, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )


def _multi_worker_strategy() -> tf.distribute.Strategy:
    config = os.environ.get("TF_CONFIG")
    if not config:
        raise ValueError(
            "The multiworker strategy reads the cluster from the TF_CONFIG "
            "environment variable, which is not set. Set it on every worker, "
            'e.g. {"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
            '"task": {"type": "worker", "index": 0}} (see docs/training.md).'
        )
    try:
        values = json.loads(config)
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON ({e}): {config!r}") from e
    _check_tf_config(values)
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except RuntimeError as e:
        raise RuntimeError(
            f"{e}: create the multiworker strategy before anything else uses "
            "TensorFlow (make_strategy('multiworker') first thing in the program)."
        ) from e


def _check_tf_config(values: Any) -> None:
    """Refuses, in TF_CONFIG's own words, a cluster or task that TensorFlow
    would refuse as ``cluster_spec``, ``task_type`` and ``task_id``."""
    example = (
        '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": '
        '{"type": "worker", "index": 0}} (index 1 on the second worker)'
    )
    cluster = values.get("cluster") if isinstance(values, dict) else None
    task = values.get("task") if isinstance(values, dict) else None
    if not isinstance(cluster, dict) or not cluster or not isinstance(task, dict):
        missing = "task for this worker" if cluster else "cluster"
        raise ValueError(f"TF_CONFIG names no {missing}: it must be like {example}.")
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(
            isinstance(address, str) and ":" in address for address in addresses
        ):
            raise ValueError(
                f"TF_CONFIG's cluster.{job} must be a list of 'host:port' "
                f"addresses. Received: {addresses!r}"
            )
    kind, index = task.get("type"), task.get("index")
    if kind not in cluster:
        raise ValueError(
            f"TF_CONFIG's task.type {kind!r} is none of the cluster's jobs "
            f"({', '.join(map(repr, cluster))})."
        )
    count = len(cluster[kind])
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise ValueError(
            f"TF_CONFIG's task.index {index!r} is not one of the {count} "
            f"addresses of cluster.{kind}: pass an index from 0 to {count - 1}."
        )


def _resolver(strategy: tf.distribute.Strategy) -> Any:
    return getattr(strategy, "cluster_resolver", None)


def worker_index(strategy: tf.distribute.Strategy) -> int:
    """This worker's index in a multi-worker cluster (0 otherwise)."""
    resolver = _resolver(strategy)
    if resolver is None or resolver.task_type is None:
        return 0
    return int(resolver.task_id or 0)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the shared outputs (logs, the main checkpoints).

    The chief is the ``"chief"`` task, or worker 0 of a cluster without one;
    a single-process run is always the chief.
    """
    resolver = _resolver(strategy)
    if resolver is None or resolver.task_type is None:
        return True
    task_type = resolver.task_type
    if task_type == "chief":
        return True
    if task_type == "worker":
        cluster = resolver.cluster_spec().as_dict()
        return "chief" not in cluster and int(resolver.task_id or 0) == 0
    return False


def broadcast_from_chief(strategy: tf.distribute.Strategy, data: bytes) -> bytes:
    """The chief's `data` on every worker (each must call this, in step).

    A sum over all replicas to which only the chief's replicas contribute:
    first the length, then the bytes as 32-bit words in float64 (exact). Each
    replica of the chief adds them, so the sums are ``copies`` times them.
    """
    chief = is_chief(strategy)

    @tf.function
    def total(values: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(tf.identity, args=(values,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    mine = float(chief), float(len(data) if chief else 0)
    copies, length = (int(v) for v in total(tf.constant(mine, tf.float64)).numpy())
    length //= max(copies, 1)
    words = -(-length // 4)
    if chief:
        values = np.frombuffer(data.ljust(words * 4, b"\0"), "<u4").astype(np.float64)
    else:
        values = np.zeros(words, np.float64)
    if not words:
        return b""
    summed = total(tf.constant(values)).numpy() / copies
    return np.rint(summed).astype("<u4").tobytes()[:length]
