"""The command line: parsing, config resolution, the subcommand table."""

from __future__ import annotations

import json

import pytest

from keras_transformer import cli
from tests.training.helpers import REPO_ROOT, SMALL_CONFIG, write_config


def test_subcommands_are_registered_in_one_table():
    assert {"train", "average-checkpoints"} <= set(cli.COMMANDS)
    parser = cli.build_parser()
    args = parser.parse_args(["average-checkpoints", "--workdir", "w"])
    assert args.handler is cli.COMMANDS["average-checkpoints"].run


def test_a_new_subcommand_plugs_in(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    def arguments(parser):
        parser.add_argument("--name", required=True)

    @cli.command("hello", "Say hello.", arguments)
    def hello(args):
        print(f"hello {args.name}")
        return 0

    assert cli.main(["hello", "--name", "world"]) == 0
    assert capsys.readouterr().out == "hello world\n"
    with pytest.raises(ValueError, match="registered twice"):
        cli.command("hello", "again", arguments)(hello)


def test_train_print_config_resolves_file_preset_task_and_overrides(tmp_path, capsys):
    path = write_config(tmp_path, SMALL_CONFIG)
    status = cli.main(
        [
            "train",
            str(path),
            "--workdir",
            str(tmp_path / "w"),
            "--set",
            "model.d_ff=96",
            "--set",
            "train.precision=mixed_bfloat16",
            "--print-config",
        ]
    )
    assert status == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["model"]["d_ff"] == 96 and printed["model"]["d_model"] == 32
    assert printed["train"]["precision"] == "mixed_bfloat16"
    assert not (tmp_path / "w").exists()  # nothing trained

    status = cli.main(
        [
            "train",
            "--preset",
            "small",
            "--task",
            "multi30k",
            "--workdir",
            "w",
            "--print-config",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    assert printed["data"]["task"] == "multi30k" and printed["model"]["d_model"] == 256


def test_shipped_configs_are_valid(capsys):
    for name in ("dates_tiny.json", "multi30k_small.json"):
        status = cli.main(
            [
                "train",
                str(REPO_ROOT / "configs" / name),
                "--workdir",
                "w",
                "--print-config",
            ]
        )
        assert status == 0, name
    capsys.readouterr()


def test_bad_input_is_reported_without_a_traceback(tmp_path, capsys):
    assert cli.main(["train", "--workdir", "w", "--set", "model.d_modle=1"]) == 2
    assert "Unknown config key 'model.d_modle'" in capsys.readouterr().err
    assert cli.main(["train", str(tmp_path / "none.json"), "--workdir", "w"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train"])  # --workdir is required
