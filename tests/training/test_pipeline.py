"""The data side of a run: tasks, tokenizer, training and validation streams."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.data import (
    SubwordTokenizer,
    make_translation_dataset,
    synthetic_dates,
)
from keras_transformer.training import DataConfig
from keras_transformer.training.loop import _steps
from keras_transformer.training.pipeline import (
    count_updates,
    learn_tokenizer,
    load_task,
    training_dataset,
    validation_dataset,
)
from tests.training.helpers import REPO_ROOT, small_config


@pytest.fixture(scope="module")
def shared_data() -> Path:
    configured = os.environ.get("KT_SHARED_DATA")
    path = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        pytest.fail(f"Shared data folder not found at {path}; set KT_SHARED_DATA.")
    return path


@pytest.fixture(scope="module")
def dates():
    config = small_config()
    data = load_task(config.data, seed=0)
    return config, data, learn_tokenizer(data.train, config.data)


def _write_lines(path: Path, lines: list[str]) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    return str(path)


def test_files_task_reads_parallel_and_tab_separated_files(tmp_path):
    pairs = synthetic_dates(40, seed=3)
    config = DataConfig(
        task="files",
        train_source=_write_lines(tmp_path / "train.src.gz", list(pairs.sources)),
        train_target=_write_lines(tmp_path / "train.tgt", list(pairs.targets)),
        validation_source=_write_lines(
            tmp_path / "dev.tsv",
            [f"{s}\t{t}" for s, t in zip(pairs.sources, pairs.targets, strict=True)][
                :10
            ]
            + ["broken line without a tab"],
        ),
    )
    data = load_task(config)
    assert data.train == pairs
    assert len(data.validation) == 10  # the broken line is skipped
    assert data.test == data.validation and data.test_name == "validation"
    with pytest.raises(ValueError, match="tab-separated"):
        load_task(
            DataConfig(
                task="files",
                train_source=config.train_target,
                validation_source=config.validation_source,
            )
        )


def test_named_tasks_on_the_shared_data(shared_data):
    multi30k = load_task(
        DataConfig(task="multi30k", data_dir=str(shared_data / "multi30k"))
    )
    assert (len(multi30k.train), len(multi30k.validation), len(multi30k.test)) == (
        29000,
        1014,
        1000,
    )
    assert multi30k.test_name == "test_2016_flickr"
    tatoeba = load_task(
        DataConfig(
            task="tatoeba",
            source_language="es",
            target_language="en",
            data_dir=str(shared_data / "tatoeba_spa_eng"),
        )
    )
    english = set(tatoeba.train.targets)
    assert english and not english & set(tatoeba.test.targets)  # split by English


def test_dates_splits_are_seeded_and_distinct(dates):
    config, data, _ = dates
    assert len(data.train) == 300 and len(data.validation) == len(data.test) == 16
    assert data.validation != data.test
    assert load_task(config.data, seed=0) == data


def test_training_stream_with_accumulation(dates):
    config, data, tokenizer = dates
    dataset = training_dataset(data.train, tokenizer, config.data, accumulation=2)
    (source, target), labels = next(iter(dataset))
    assert source.shape[1] == 2 and labels.shape[1] == 2
    assert source.shape[2] in config.data.bucket_boundaries
    # Each of the 2 batches respects the per-batch token budget.
    assert (
        source.shape[0] * source.shape[2]
        <= config.data.max_tokens_per_batch + (source.shape[2])
    )
    # Teacher forcing: the decoder input is the label shifted right.
    labels = labels.numpy()
    without_end = np.where(labels == tokenizer.END_ID, 0, labels)
    np.testing.assert_array_equal(target.numpy()[..., 1:], without_end[..., :-1])


def test_validation_stream_is_one_known_pass(dates):
    config, data, tokenizer = dates
    dataset = validation_dataset(data.validation, tokenizer, config.data)
    batches = list(dataset)
    assert int(dataset.cardinality()) == len(batches)
    assert sum(int(b[1].shape[0]) for b in batches) == len(data.validation)


def test_epoch_length_defaults_to_one_pass(dates):
    config, data, tokenizer = dates
    per_pass = count_updates(data.train, tokenizer, config.data)
    one_pass = make_translation_dataset(
        data.train,
        tokenizer,
        max_tokens_per_batch=config.data.max_tokens_per_batch,
        bucket_boundaries=config.data.bucket_boundaries,
        max_sentence_length=config.data.max_sentence_length,
        seed=5,
    )
    assert per_pass == sum(1 for _ in one_pass) > 1
    by_epochs = small_config(
        "train.train_steps=null", "train.epochs=2", "train.steps_per_epoch=null"
    )
    total, per_epoch = _steps(by_epochs, data, tokenizer)
    assert (total, per_epoch) == (2 * per_pass, per_pass)
    assert _steps(small_config(), data, tokenizer) == (6, 3)


def test_tokenizer_is_shared_and_reproducible(dates):
    config, data, tokenizer = dates
    again = learn_tokenizer(data.train, config.data)
    assert again.fingerprint == tokenizer.fingerprint
    assert isinstance(tokenizer, SubwordTokenizer)
    assert tokenizer.vocabulary_size == config.data.vocabulary_size
    # Source words and target digits are both in the one vocabulary.
    assert tokenizer.decode(tokenizer.encode(["5 mars 2001", "2001-03-05"])) == [
        "5 mars 2001",
        "2001-03-05",
    ]
