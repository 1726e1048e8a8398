"""The TensorBoard records of a run (``<workdir>/logs``), read back.

`logged_scalars` gives the points of one scalar summary, and
`logged_training_seconds` the run's own training time over every process
that trained it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import tensorflow as tf

__all__ = ["logged_scalars", "logged_training_seconds"]


def logged_scalars(
    log_dir: str | os.PathLike[str], tag: str
) -> tuple[list[int], list[float]]:
    """`(steps, values)` of the scalar summary `tag` in a TensorBoard folder,
    as TensorBoard shows them.

    Reads every event file of `log_dir` (e.g. ``<workdir>/logs/train``;
    a resumed run has one per process) and every point of the tag, steps in
    order; `([], [])` when the folder holds no such summary. A run resumed
    after a kill logs again the updates since its last checkpoint (and a
    validation redone, its step): as TensorBoard does, a point whose step
    is not past the last one read (in the order they were written) drops
    the earlier points from that step on, so each step has one point, from
    the weights the run went on with.
    """
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    # size_guidance 0 keeps every point: by default the accumulator keeps a
    # random sample of 10 per tag, which would thin out any longer curve.
    events = EventAccumulator(str(log_dir), size_guidance={"tensors": 0})
    events.Reload()
    if tag not in events.Tags()["tensors"]:
        return [], []
    kept: list[Any] = []
    for point in sorted(events.Tensors(tag), key=lambda point: point.wall_time):
        while kept and kept[-1].step >= point.step:
            kept.pop()
        kept.append(point)
    return [p.step for p in kept], [
        float(tf.make_ndarray(p.tensor_proto)) for p in kept
    ]


def logged_training_seconds(log_dir: str | os.PathLike[str]) -> float:
    """Seconds of training recorded in a run's TensorBoard training folder.

    For each process that trained the run (a resumed run has several event
    files, named ``events.out.tfevents.<time>.<host>.<pid>.<n>.v2``), the
    span from its first event to its last training summary
    (``learning_rate``, written with every one), summed over the processes:
    the run's own time however many calls trained it.
    """
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader,
    )

    starts: dict[tuple[str, ...], float] = {}
    ends: dict[tuple[str, ...], float] = {}
    for path in Path(log_dir).glob("events.out.tfevents.*"):
        match = re.match(r".*tfevents\.\d+\.(.+)\.(\d+)\.\d+", path.name)
        if match is None:
            continue
        process = match.groups()
        for event in EventFileLoader(str(path)).Load():
            starts[process] = min(starts.get(process, event.wall_time), event.wall_time)
            if any(value.tag == "learning_rate" for value in event.summary.value):
                ends[process] = max(ends.get(process, 0.0), event.wall_time)
    return sum(ends[process] - starts[process] for process in ends)
