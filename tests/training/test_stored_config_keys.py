"""A run's own stored ``config.json`` of an earlier layout resumes through
the command line; a config file a person writes must use today's keys."""

from __future__ import annotations

import json

from keras_transformer import cli
from keras_transformer.layers import AttentionSettings
from keras_transformer.training.config import TrainConfig

#: The keys an earlier version stored (`config.RENAMED_KEYS`).
OLD_LAYOUT = {
    "data": {"task": "dates", "max_length": 40},
    "model": {
        "preset": "tiny",
        "label_smoothing": 0.2,
        "attention_dropout": 0.1,
        "attention_window": 3,
        "relative_positions": 4,
        "relative_values": True,
    },
    "train": {"train_steps": 5000, "decode_extra_length": 7},
}


def test_the_runs_own_old_config_json_is_read_in_its_layout(tmp_path, capsys):
    workdir = tmp_path / "run"
    workdir.mkdir()
    stored = workdir / "config.json"
    stored.write_text(json.dumps(OLD_LAYOUT))
    command = ["train", str(stored), "--workdir", str(workdir), "--print-config"]
    assert cli.main(command) == 0
    config = TrainConfig.from_json(capsys.readouterr().out)
    assert config.data.max_sentence_length == 40
    assert config.train.label_smoothing == 0.2
    assert config.train.extra_length == 7
    assert config.model.attention_settings == AttentionSettings(
        dropout=0.1, window=3, relative_positions=4, relative_values=True
    )


def test_a_written_config_with_an_old_key_is_one_line_naming_the_new(tmp_path, capsys):
    written = tmp_path / "mine.json"
    written.write_text(json.dumps(OLD_LAYOUT))
    command = ["train", str(written), "--workdir", str(tmp_path / "run")]
    assert cli.main([*command, "--print-config"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "max_sentence_length" in error or "label_smoothing" in error
    assert not (tmp_path / "run").exists()
