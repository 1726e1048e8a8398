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


def test_held_out_splits_are_fixed_by_the_sentences_alone():
    sources = [f"sentence {i}" for i in range(200)]
    splits = tasks.held_out_splits(sources, 15)
    assert splits.count("test") == splits.count("validation") == 15
    assert splits.count("train") == 170
    # Reordering the file changes nothing: each sentence keeps its split.
    order = list(reversed(range(200)))
    reordered = tasks.held_out_splits([sources[i] for i in order], 15)
    assert [reordered[order.index(i)] for i in range(200)] == splits
    # More held out: the test split keeps its sentences and gains new ones.
    wider = tasks.held_out_splits(sources, 20)
    assert all(w == "test" for s, w in zip(splits, wider, strict=True) if s == "test")
    with pytest.raises(ValueError, match="only 200 distinct ones"):
        tasks.held_out_splits(sources, 100)


def test_a_single_tsv_file_gives_all_three_splits(tmp_path):
    lines = [f"Satz {i}\tsentence {i}" for i in range(120)]
    lines += ["Satz 7\tanother sentence 7", "kaputt"]  # a repeat, a bad line
    path = tmp_path / "pairs.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    settings = DataConfig(task="files", train_source=str(path), held_out_pairs=10)
    data = load_task(settings)
    assert data.test_name == "test"
    assert (len(data.validation), len(data.test)) in {(10, 11), (11, 10), (10, 10)}
    assert len(data.train) + len(data.validation) + len(data.test) == 121
    splits = [set(p.sources) for p in (data.train, data.validation, data.test)]
    assert not (splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2])
    both_sevens = [
        p for p in (data.train, data.validation, data.test) if "Satz 7" in p.sources
    ]
    assert len(both_sevens) == 1 and both_sevens[0].sources.count("Satz 7") == 2
    # The bad line is counted once, for the one file.
    assert [entry["skipped"] for entry in data.skipped()] == [
        {"wrong_columns": 1},
        {},
        {},
    ]
    assert len(data.skip_messages()) == 1
    # `evaluate` asks for the test split alone: the same pairs.
    test = tasks.get_task("files").load_split("test", settings)
    assert test == data.test


def test_held_out_pairs_and_own_files_are_checked_against_the_task():
    with pytest.raises(ValueError, match="data.held_out_pairs=N"):
        DataConfig(task="files", train_source="pairs.tsv")
    with pytest.raises(ValueError, match="validation_source` is set too"):
        DataConfig(
            task="files",
            train_source="pairs.tsv",
            validation_source="dev.tsv",
            held_out_pairs=5,
        )
    with pytest.raises(ValueError, match="needs data.task='files'"):
        DataConfig(task="dates", held_out_pairs=5)
    # A file of one's own under another task trained that task's data (the
    # dates, by default) without a word.
    for setting in ("train_source", "validation_target", "test_source"):
        with pytest.raises(ValueError) as error:
            DataConfig(task="dates", **{setting: "pairs.tsv"})
        assert str(error.value) == (
            f"`data.{setting}` names a file of your own, which only "
            "data.task='files' reads; with task='dates' it would be ignored. Set "
            "data.task=files (train --task files), or remove it (--set "
            f"data.{setting}=null)."
        )
    with pytest.raises(ValueError, match="positive integer"):
        DataConfig(task="files", train_source="pairs.tsv", held_out_pairs=0)


def test_a_split_file_without_pairs_is_named(tmp_path):
    """An empty training file, or one of blank lines, failed in the
    tokenizer ("Cannot train a tokenizer on no text: texts held no non-empty
    sentence") or, with held-out pairs, said "there are only 0 distinct
    ones ... Lower data.held_out_pairs"; an empty validation file was read
    as a split of no pairs."""
    pairs, empty, blank = (tmp_path / name for name in ("p.tsv", "e.tsv", "b.tsv"))
    pairs.write_text("a\tA\nb\tB\n", encoding="utf-8")
    empty.write_bytes(b"")
    blank.write_text("\n \n\n", encoding="utf-8")
    files = tasks.get_task("files")
    cases = [
        ("train", {"train_source": empty, "held_out_pairs": 1}, "it is empty"),
        ("train", {"train_source": empty, "validation_source": pairs}, "it is empty"),
        (
            "validation",
            {"train_source": pairs, "validation_source": blank},
            "every line was skipped (empty line: 3)",
        ),
    ]
    for split, paths, why in cases:
        settings = DataConfig(
            task="files",
            **{k: v if isinstance(v, int) else str(v) for k, v in paths.items()},
        )
        name = "train" if "held_out_pairs" in paths else split
        with pytest.raises(ValueError) as error:
            files.load_split(split, settings)
        assert str(error.value) == (
            f"data.{name}_source {paths[f'{name}_source']} holds no pairs: {why}. "
            "Pass files with a pair on each line."
        )
    (tmp_path / "e.en").write_bytes(b"")
    aligned = DataConfig(
        task="files",
        train_source=str(empty),
        train_target=str(tmp_path / "e.en"),
        validation_source=str(pairs),
    )
    with pytest.raises(ValueError, match="with a sentence on each line"):
        files.load_split("train", aligned)


def test_data_files_that_are_folders_or_missing_are_named_before_the_run_folder(
    tmp_path,
):
    """``--set data.train_source=corpus`` (a folder) said "Text file not
    found: .../corpus"; a missing file said so without the setting; both,
    and a source of pairs that is not a ``.tsv`` file, left a run folder
    with a config.json of a run that never started, so the corrected
    command printed "Restarting ... with changed settings"."""
    from keras_transformer.training import train
    from tests.training.helpers import small_config

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.tsv", "b.tsv", "c.de", "d.en"):
        (corpus / name).write_text("a\tA\n", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "pairs.csv").write_text("a,A\n", encoding="utf-8")
    (tmp_path / "pairs.tsv").write_text("a\tA\n", encoding="utf-8")
    cases = [
        (
            {"train_source": corpus, "held_out_pairs": 1},
            ValueError,
            f"data.train_source {corpus} is a folder, not a file (it holds a.tsv, "
            f"b.tsv, c.de, ...): name the file itself "
            f"(data.train_source={corpus}/FILE).",
        ),
        (
            {"train_source": tmp_path / "pairs.tsv", "validation_source": corpus},
            ValueError,
            f"data.validation_source {corpus} is a folder",
        ),
        (
            {
                "train_source": tmp_path / "pairs.tsv",
                "validation_source": tmp_path / "pairs.tsv",
                "test_source": tmp_path / "pairs.tsv",
                "test_target": tmp_path / "empty",
            },
            ValueError,
            "data.test_target",
        ),
        (
            {"train_source": tmp_path / "missing.tsv", "held_out_pairs": 1},
            FileNotFoundError,
            f"data.train_source {tmp_path / 'missing.tsv'} does not exist: check "
            "the path",
        ),
        (
            {"train_source": tmp_path / "pairs.csv", "held_out_pairs": 1},
            ValueError,
            "so data.train_source=",
        ),
    ]
    for settings, error, message in cases:
        overrides = [f"data.{key}={value}" for key, value in settings.items()]
        config = small_config("data.task=files", *overrides)
        with pytest.raises(error) as raised:
            train(config, tmp_path / "run", printer=None)
        assert message in str(raised.value)
        assert not (tmp_path / "run").exists()
        # The loader (evaluate, a library caller) names the setting too.
        with pytest.raises(error) as raised:
            tasks.get_task("files").load(config.data)
        assert message in str(raised.value)
    empty = DataConfig(
        task="files", train_source=str(tmp_path / "empty"), held_out_pairs=1
    )
    with pytest.raises(ValueError, match=r"is a folder, not a file \(it is empty\)"):
        tasks.check_file_paths(empty)
