"""The task registry: names, splits, and loading through `load_task`."""

from __future__ import annotations

import pytest

from keras_transformer.conventions import TASK_NAMES
from keras_transformer.data import tasks
from keras_transformer.training import DataConfig
from keras_transformer.training.pipeline import TaskData, load_task


def test_registry_covers_every_task_name():
    assert tuple(tasks.TASKS) == TASK_NAMES
    assert tasks.get_task("multi30k").test_split == "test_2016_flickr"
    assert tasks.get_task("tatoeba").splits == ("train", "val", "test")
    with pytest.raises(ValueError, match="must be one of 'dates'"):
        tasks.get_task("wmt14")


def test_load_task_uses_the_registry():
    settings = DataConfig(task="dates", num_train_examples=20, num_eval_examples=5)
    data = load_task(settings, seed=3)
    assert isinstance(data, TaskData) and data.test_name == "test"
    assert (len(data.train), len(data.validation), len(data.test)) == (20, 5, 5)
    # One split alone equals the same split of the whole task.
    task = tasks.get_task("dates")
    test = task.load_split("test", settings, seed=3)
    assert list(test.sources) == list(data.test.sources)
    assert list(data.validation.sources) != list(data.test.sources)
    with pytest.raises(ValueError, match="not a split of task 'dates'"):
        task.load_split("val", settings)


def test_files_task_falls_back_to_validation(tmp_path):
    (tmp_path / "train.tsv").write_text("a\tA\nb\tB\n")
    (tmp_path / "dev.tsv").write_text("c\tC\n")
    settings = DataConfig(
        task="files",
        train_source=str(tmp_path / "train.tsv"),
        validation_source=str(tmp_path / "dev.tsv"),
    )
    data = load_task(settings)
    assert data.test_name == "validation" and list(data.test.targets) == ["C"]
    with pytest.raises(ValueError, match="tab-separated"):
        tasks.get_task("files").load_split(
            "train",
            DataConfig(task="files", train_source="x.txt", validation_source="y"),
        )
