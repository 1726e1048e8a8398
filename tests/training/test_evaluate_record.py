"""`keras-transformer evaluate --record NAME` writes the scores as a results record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keras_transformer import cli
from keras_transformer.results_records import check_references, read_records
from tests.training.helpers import small_config


@pytest.fixture(scope="module")
def one_update_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of one update (a few seconds)."""
    from keras_transformer.training import train

    workdir = tmp_path_factory.mktemp("record") / "run"
    config = small_config(
        "train.train_steps=1",
        "train.steps_per_epoch=1",
        "train.validation_every=1000",
        "train.test_samples=2",
        "train.keep_best=false",
        "model.optimizer.warmup_steps=1",
    )
    train(config, workdir, printer=None)
    return workdir


def test_evaluate_writes_the_printed_scores_as_a_record(
    one_update_run, tmp_path, capsys
):
    records_dir = tmp_path / "results"
    arguments = ["evaluate", "--workdir", str(one_update_run), "--beam-size", "1"]
    arguments += ["--max-sentences", "2", "--no-progress", "--json"]
    assert (
        cli.main([*arguments, "--record", "tiny", "--records-dir", str(records_dir)])
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    record = read_records(records_dir)["tiny"]
    assert record.figures["bleu"] == printed["bleu"]
    assert record.figures["chrf"] == printed["chrf"]
    assert record.sample == f"2 sentences of {printed['split']}"
    assert record.command.startswith("keras-transformer evaluate ")
    assert f"--workdir {one_update_run}" in record.command
    assert "--max-sentences 2" in record.command and "--record" not in record.command
    assert record.timing == "none" and record.machine and record.date
    shown = f"{record.figures['bleu']:.2f}<!-- record: tiny.bleu -->"
    assert check_references(shown, {"tiny": record}, "page") == []


def test_evaluate_without_record_writes_none(one_update_run, tmp_path, capsys):
    records_dir = tmp_path / "results"
    arguments = ["evaluate", "--workdir", str(one_update_run), "--beam-size", "1"]
    arguments += ["--max-sentences", "2", "--no-progress"]
    assert cli.main([*arguments, "--records-dir", str(records_dir)]) == 0
    assert "BLEU" in capsys.readouterr().out
    assert not records_dir.exists()
