"""The command line: parsing, config resolution, the subcommand table."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from keras_transformer import cli
from tests.training.helpers import (
    REPO_ROOT,
    SMALL_CONFIG,
    SMALL_IMAGE_CONFIG,
    small_config,
    subprocess_env,
    write_config,
)


def test_subcommands_are_registered_in_one_table():
    assert {"train", "average-checkpoints"} <= set(cli.COMMANDS)
    parser = cli.build_parser()
    args = parser.parse_args(["average-checkpoints", "--workdir", "w"])
    assert args.handler is cli.COMMANDS["average-checkpoints"].run


def test_the_translating_commands_share_the_model_and_decoding_groups():
    """evaluate, translate and export take the model and the decoding
    settings through one `add_translator_arguments`: the same two groups."""
    import argparse

    parser = cli.build_parser()
    subcommands = next(
        action
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    decoding = ["--method", "--beam-size", "--alpha", "--early-stop"]
    decoding += ["--max-input-length", "--extra-length", "--temperature"]
    decoding += ["--n-best", "--sample", "--top-k", "--top-p", "--seed"]
    for name in ("evaluate", "translate", "export"):
        command = subcommands.choices[name]
        groups = {
            group.title: [action.option_strings[0] for action in group._group_actions]
            for group in command._action_groups
        }
        model = ["--workdir", "--weights", "--weights-without-fingerprint"]
        assert groups["model"] == model, name
        batch = [] if name == "export" else ["--batch-size"]
        assert groups["decoding"] == decoding + batch, name
        assert "--workdir" not in groups[command._optionals.title], name


def test_cpu_devices_make_the_default_strategy_mirrored():
    """`--cpu-devices 2` alone split the CPU, then trained one replica."""
    from keras_transformer.cli.train import strategy_name

    parser = cli.build_parser()
    cases = {
        (): "default",
        ("--cpu-devices", "1"): "default",
        ("--cpu-devices", "2"): "mirrored",
        ("--cpu-devices", "2", "--strategy", "multiworker"): "multiworker",
        ("--strategy", "mirrored"): "mirrored",
    }
    for flags, expected in cases.items():
        args = parser.parse_args(["train", "--workdir", "w", *flags])
        assert strategy_name(args) == expected, flags


def test_cpu_devices_out_of_range_name_the_flag(tmp_path, capsys, monkeypatch):
    """It said "`count` must be a positive integer. Received: count=0"; and
    999 devices on 2 cores took all the memory and never finished an update."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    workdir = tmp_path / "run"
    for value in ("0", "-2", "9", "999"):
        argv = ["train", "--workdir", str(workdir), "--cpu-devices", value]
        assert cli.main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert error.endswith(
            f"--cpu-devices {value}: pass from 1 to 8 logical CPU devices (this "
            "machine has 2 CPU cores; the devices try the mirrored code path and "
            "add no speed)."
        ), error
    assert not workdir.exists()


def test_numeric_decoding_flags_out_of_range_name_the_flag(tmp_path, capsys):
    """`translate --batch-size 0` said "`batch_size` must be a positive
    integer. Received: batch_size=0" after loading the model; each numeric
    flag is now refused first, in one line naming it."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    source = tmp_path / "in.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    output = tmp_path / "out.txt"
    bad = {
        "--beam-size": "0",
        "--alpha": "nan",
        "--max-input-length": "1",
        "--extra-length": "-1",
        "--temperature": "0.0",
        "--n-best": "0",
        "--top-k": "0",
        "--top-p": "1.5",
        "--seed": "-1",
        "--batch-size": "0",
    }
    commands = {
        "translate": ["--input", str(source), "--output", str(output)],
        "evaluate": [],
        "export": ["--output", str(output)],
    }
    for command, extra in commands.items():
        for flag, value in bad.items():
            if command == "export" and flag in ("--batch-size", "--temperature"):
                continue  # export has no --batch-size; images sample at 0
            argv = [command, "--workdir", str(workdir), *extra, flag, value]
            assert cli.main(argv) == 2, argv
            error = capsys.readouterr().err.strip().splitlines()
            said = f"error: {flag} {value}: pass "
            assert len(error) == 1 and said in error[0], (argv, error)
    assert not output.exists()
    # evaluate's own: --max-sentences 0 was refused after the test set was
    # read (exit 1), --step -5 not at all (a negative TensorBoard step).
    for flag, value, what in (
        ("--max-sentences", "0", "a positive number of sentences"),
        ("--step", "-5", "a TensorBoard step of 0 or more"),
    ):
        assert cli.main(["evaluate", "--workdir", str(workdir), flag, value]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(f"error: {flag} {value}: pass {what}."), line
    # An image export samples at temperature 0 (its most likely values).
    argv = ["export", "--workdir", str(workdir), "--output", str(output)]
    for flag, value in (("--temperature", "-1.0"), ("--given-rows", "-1")):
        assert cli.main([*argv, flag, value]) == 2
        assert f"error: {flag} {value}: pass " in capsys.readouterr().err
    assert cli.main([*argv, "--temperature", "0"]) == 1  # the empty folder
    error = capsys.readouterr().err
    assert "config.json is missing" in error and "--temperature" not in error
    # average-checkpoints named the Python argument: "`last` must be a ...".
    for value in ("0", "-3"):
        assert (
            cli.main(
                ["average-checkpoints", "--workdir", str(workdir)] + ["--last", value]
            )
            == 2
        )
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(f"error: --last {value}: pass 1 or more checkpoints.")
    # --n-best above the beam said "n_best=9 is larger than beam_size=4"
    # after loading; where the beam is known (a run's), it is refused first.
    argv = ["translate", "--workdir", str(workdir), "--input", str(source)]
    for flags, search in (
        (["--n-best", "9"], "--beam-size 4 keeps 4"),
        (["--n-best", "2", "--sample"], "--method sample keeps 1"),
    ):
        assert cli.main([*argv, *flags]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == (
            f"keras-transformer translate: error: --n-best {flags[1]} prints that "
            f"many hypotheses of one beam search, but {search}: pass --beam-size "
            f"{flags[1]} or more (and no other --method), or a smaller --n-best."
        )


def test_n_best_is_checked_early_only_where_the_beam_is_known(tmp_path):
    """An export's own beam (of any format) is read with it: `--method beam
    --n-best 6` on an export of beam 8 must not be refused for the default
    beam of 4; a given beam, or another method, is known at once."""
    import argparse

    from keras_transformer.cli.translate import _check_n_best
    from keras_transformer.export import litert

    export = tmp_path / "litert"
    export.mkdir()
    for name in (litert.INFO_FILE, litert.MODEL_FILE, litert.TOKENIZER_FILE):
        (export / name).write_text("{}")
    run = tmp_path / "run"
    run.mkdir()

    def check(workdir, given, method="beam", beam_size=4):
        namespace = argparse.Namespace(
            workdir=str(workdir),
            n_best=6,
            method=method,
            beam_size=beam_size,
            given_settings=frozenset(given),
        )
        _check_n_best(namespace)

    check(export, {"method"})  # the export's own beam decides, once read
    check(export, set())
    check(run, {"beam_size"}, beam_size=6)
    for workdir, given, method in (
        (export, {"beam_size"}, "beam"),
        (export, {"method"}, "sample"),
        (run, set(), "beam"),
        (run, {"method"}, "beam"),
    ):
        with pytest.raises(cli.CommandError, match="^--n-best 6 prints that many"):
            check(workdir, given, method)


def test_a_given_decoding_flag_is_passed_on_even_at_its_default():
    """`search_settings` passes the flags the command line gave, default
    values included (they replace an export folder's own settings), and
    any value that is not the default; nothing for an empty command line."""
    from keras_transformer.cli._common import search_settings

    parser = cli.build_parser()
    run = ["translate", "--workdir", "w"]
    assert search_settings(parser.parse_args(run)) == {}
    given = parser.parse_args([*run, "--beam-size", "4", "--sample", "--top-k", "5"])
    assert search_settings(given) == {"beam_size": 4, "method": "sample", "top_k": 5}
    alpha = parser.parse_args(
        ["export", "--workdir", "w", "--output", "o", "--alpha", "0.6"]
    )
    assert search_settings(alpha) == {"alpha": 0.6}


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
    shipped = sorted((REPO_ROOT / "configs").glob("*.json"))
    assert len(shipped) >= 5
    for path in shipped:
        status = cli.main(["train", str(path), "--workdir", "w", "--print-config"])
        assert status == 0, path.name
        resolved = json.loads(capsys.readouterr().out)
        # The Multi30k configs of both directions say their direction.
        for source, target in (("de", "en"), ("en", "de")):
            if f"_{source}_{target}" in path.stem:
                assert resolved["data"]["source_language"] == source, path.name
                assert resolved["data"]["target_language"] == target, path.name


def test_bad_input_is_reported_without_a_traceback(tmp_path, capsys):
    assert cli.main(["train", "--workdir", "w", "--set", "model.d_modle=1"]) == 2
    assert "Unknown config key 'model.d_modle'" in capsys.readouterr().err
    assert cli.main(["train", str(tmp_path / "none.json"), "--workdir", "w"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train"])  # --workdir is required


#: Bad settings of the issue: each must be refused when the config is read,
#: before anything is written to --workdir (so `--print-config` refuses it).
BAD_OVERRIDES = [
    ("model.optimizer.warmup_steps=abc", "`model.optimizer.warmup_steps`", "'abc'"),
    (
        "model.optimizer.learning_rate_scale=nan",
        "`model.optimizer.learning_rate_scale` must be a positive number",
        "'nan'",
    ),
    (
        "model.optimizer.learning_rate_scale=NaN",
        "`model.optimizer.learning_rate_scale` must be a positive number",
        "=nan",
    ),
    (
        "model.optimizer.beta_1=-10",
        "`model.optimizer.beta_1` must be a rate in [0, 1)",
        "-10",
    ),
    ("model.optimizer.epsilon=true", "`model.optimizer.epsilon`", "True"),
    ("data.bucket_boundaries=8", "`data.bucket_boundaries` must be a list", "8"),
    ("model.dropout=abc", "`model.dropout` must be a rate in [0, 1)", "'abc'"),
    ("train.verbose=true", "`train.verbose` must be one of 0, 1, 2", "True"),
    ("train.seed=-1", "`train.seed` must be an integer from 0", "-1"),
    ("model.optimizer=null", "`model.optimizer` must be a mapping", "None"),
    # What the config alone shows of the run (issue 35: these were refused
    # only after config.json and the tokenizer were written, or built for
    # minutes, or ran out of memory).
    (
        "model.optimizer.warmup_steps=7",
        "(model.optimizer.warmup_steps=7) is longer than the run",
        "(6 updates)",
    ),
    (
        "data.vocabulary_size=3",
        "`data.vocabulary_size` must be an integer from 5",
        "=3",
    ),
    (
        "data.vocabulary_size=1000000000",
        "`data.vocabulary_size` must be an integer from 5 to 1000000",
        "=1000000000",
    ),
    (
        "model.d_ff=1000000000000",
        "The model of this config cannot fit in memory",
        "model.d_ff=1000000000000",
    ),
]


def _assert_refused(status: int, captured, *expected: str) -> None:
    """Exit status 2, one error line naming the problem, nothing else."""
    assert status == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("keras-transformer train: error: ")
    assert "Traceback" not in captured.err
    for text in expected:
        assert text in lines[0], (text, lines[0])


@pytest.mark.parametrize("print_config", [True, False])
@pytest.mark.parametrize(("override", "field", "value"), BAD_OVERRIDES)
def test_bad_settings_are_refused_before_the_workdir_is_touched(
    tmp_path, capsys, override, field, value, print_config
):
    path = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    argv = ["train", str(path), "--workdir", str(workdir), "--set", override]
    status = cli.main(argv + (["--print-config"] if print_config else []))
    _assert_refused(status, capsys.readouterr(), field, value)
    assert not workdir.exists()


def test_a_model_too_large_for_memory_is_refused_from_its_config(
    tmp_path, capsys, monkeypatch
):
    """model.num_encoder_layers=1000000 (8.2e9 parameters, 131 GB to train)
    is refused from the config, naming the setting, on a 16 GiB machine,
    before anything is built or written; the same config with a few layers
    fits."""
    from keras_transformer.training import checks

    monkeypatch.setattr(checks, "physical_memory", lambda: 16 * 2**30)
    path = write_config(tmp_path, SMALL_CONFIG)
    workdir = tmp_path / "run"
    argv = ["train", str(path), "--workdir", str(workdir)]
    for extra in (["--print-config"], []):
        layers = "model.num_encoder_layers=1000000"
        status = cli.main([*argv, "--set", layers, *extra])
        _assert_refused(status, capsys.readouterr(), layers, "16.0 GiB")
        assert not workdir.exists()
    assert (
        cli.main([*argv, "--set", "model.num_encoder_layers=6", "--print-config"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["model"]["num_encoder_layers"] == 6


def test_running_out_of_device_memory_is_one_line(monkeypatch, capsys):
    """TensorFlow's ResourceExhaustedError (memory the config check could not
    foresee) is one line, exit 1, not a traceback."""
    import tensorflow as tf

    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    @cli.command("exhaust", "Runs out of memory.", lambda parser: None)
    def exhaust(args):
        raise tf.errors.ResourceExhaustedError(
            None, None, "OOM when allocating tensor with shape[64,1000000000000]"
        )

    assert cli.main(["exhaust"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("keras-transformer exhaust: error: out of memory (OOM ")
    assert "model.d_ff" in err


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({**SMALL_CONFIG, "model": 5}, "The `model` section must be a preset name"),
        ({**SMALL_CONFIG, "train": None}, "The `train` section is null"),
        (
            {**SMALL_CONFIG, "data": {**SMALL_CONFIG["data"], "bucket_boundaries": 8}},
            "`data.bucket_boundaries` must be a list",
        ),
        (
            {
                **SMALL_CONFIG,
                "data": {
                    **SMALL_CONFIG["data"],
                    "bucket_boundaries": list(range(1, 2002)),
                },
            },
            "must hold 1 to 1,000 lengths",
        ),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_config_files_are_refused_before_the_workdir_is_touched(
    tmp_path, capsys, values, message
):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(values))
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine")
    for extra in (["--print-config"], []):
        status = cli.main(["train", str(path), "--workdir", str(workdir), *extra])
        _assert_refused(status, capsys.readouterr(), message)
        # The run folder holds what it held: no config.json, no tokenizer.
        assert sorted(p.name for p in workdir.iterdir()) == ["notes.txt"]


def test_an_oversize_config_file_is_refused_with_its_size(tmp_path, capsys):
    path = tmp_path / "huge.json"
    boundaries = list(range(1, 300_000))
    path.write_text(json.dumps({"data": {"bucket_boundaries": boundaries}}))
    workdir = tmp_path / "run"
    status = cli.main(["train", str(path), "--workdir", str(workdir)])
    size = f"{path.stat().st_size:,} bytes"
    _assert_refused(status, capsys.readouterr(), str(path), size, "1,000,000")
    assert not workdir.exists()
    # --task on a config whose data section is not an object: one line too.
    path.write_text(json.dumps({"data": None}))
    status = cli.main(["train", str(path), "--workdir", "w", "--task", "dates"])
    _assert_refused(status, capsys.readouterr(), "`data` section")


def _run_cli(*argv: str) -> subprocess.CompletedProcess:
    env = subprocess_env()
    env.pop("TF_CPP_MIN_LOG_LEVEL")  # TensorFlow would log: it must not start
    return subprocess.run(
        [sys.executable, "-m", "keras_transformer", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )


def _assert_no_tensorflow_logs(output: str) -> None:
    lowered = output.lower()
    assert "tensorflow" not in lowered and "cuda" not in lowered, output
    assert "oneDNN" not in output and "absl" not in output, output


def test_a_finished_run_names_the_command_to_try_it(monkeypatch):
    """`train` ends with the command that uses the run, per kind, as the
    program was called (`make demo` calls `.venv/bin/keras-transformer`)."""
    from keras_transformer.cli.train import try_it_line

    monkeypatch.setattr("sys.argv", [".venv/bin/keras-transformer", "train"])
    assert try_it_line("translation", "runs/my dates") == (
        "To translate your own sentences (type one, press Enter): "
        ".venv/bin/keras-transformer translate --workdir 'runs/my dates'"
    )
    monkeypatch.setattr("sys.argv", ["/x/keras_transformer/__main__.py", "train"])
    assert try_it_line("image", "r") == (
        "To complete its test images from their top rows: "
        "keras-transformer complete --workdir r --output completions.png"
    )
    assert try_it_line("classification", "r") == (
        "To classify your own reviews (type one, press Enter): "
        "keras-transformer classify --workdir r"
    )
    # Each suggestion is a command line the parser takes (the image one
    # lacked complete's required --output).
    from keras_transformer.training.kinds import known_kinds

    for kind in known_kinds():
        words = shlex.split(try_it_line(kind, "r").split(": ", 1)[1])[1:]
        cli.build_parser().parse_args(words)


def test_help_and_argument_errors_answer_without_tensorflow():
    shown = _run_cli("--help")
    assert shown.returncode == 0, shown.stderr
    for name in ("train", "average-checkpoints", "evaluate", "translate", "export"):
        assert name in shown.stdout
    _assert_no_tensorflow_logs(shown.stdout + shown.stderr)

    train_help = _run_cli("train", "--help")
    assert train_help.returncode == 0, train_help.stderr
    assert "--workdir" in train_help.stdout and "--set" in train_help.stdout
    assert "dates" in train_help.stdout and "multiworker" in train_help.stdout
    _assert_no_tensorflow_logs(train_help.stdout + train_help.stderr)

    wrong = _run_cli("train", "--workdir", "w", "--task", "nope")
    assert wrong.returncode == 2
    assert "invalid choice: 'nope'" in wrong.stderr
    _assert_no_tensorflow_logs(wrong.stdout + wrong.stderr)

    # --version was "the following arguments are required: COMMAND".
    from keras_transformer import __version__

    version = _run_cli("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"keras-transformer {__version__}"


def test_building_the_parser_imports_neither_tensorflow_nor_keras():
    code = (
        "import sys\n"
        "import keras_transformer.cli as cli\n"
        "cli.build_parser().parse_args(['evaluate', '--workdir', 'w'])\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'numpy', 'sacrebleu')"
        " if m in sys.modules)\n"
        "print(','.join(heavy) or 'none')\n"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=subprocess_env(),
        cwd=REPO_ROOT,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "none"


def test_a_command_with_another_keras_backend_says_so(monkeypatch, capsys):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert cli.main(["average-checkpoints", "--workdir", "w"]) == 2
    error = capsys.readouterr().err
    assert "KERAS_BACKEND='jax'" in error
    assert "KERAS_BACKEND=tensorflow" in error


def test_a_missing_train_extra_is_named_with_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    def needs_sacrebleu(args):
        raise ModuleNotFoundError("No module named 'sacrebleu'", name="sacrebleu")

    cli.command("needs-sacrebleu", "A command whose import fails.", lambda p: None)(
        needs_sacrebleu
    )
    assert cli.main(["needs-sacrebleu"]) == 2
    error = capsys.readouterr().err
    assert "'sacrebleu' is not installed" in error
    assert "pip install 'keras3-transformer[train]'" in error


def test_an_image_run_without_scikit_image_names_the_image_extra(
    monkeypatch, capsys, tmp_path
):
    """The `train` extra leaves scikit-image out; an image run on the bundled
    photographs says which extra brings it, in one line, before training."""
    monkeypatch.setitem(sys.modules, "skimage", None)
    monkeypatch.setitem(sys.modules, "skimage.data", None)
    config = write_config(tmp_path, SMALL_IMAGE_CONFIG)
    workdir = tmp_path / "run"
    assert cli.main(["train", str(config), "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0, error
    assert "'skimage' is not installed" in error
    assert "pip install 'keras3-transformer[image]'" in error
    assert not list(workdir.glob("checkpoints/ckpt-*"))


def test_other_missing_modules_keep_their_traceback(monkeypatch):
    monkeypatch.setattr(cli, "COMMANDS", dict(cli.COMMANDS))

    def needs_something(args):
        raise ModuleNotFoundError(
            "No module named 'no_such_thing'", name="no_such_thing"
        )

    cli.command("needs-something", "A command with a bug.", lambda p: None)(
        needs_something
    )
    with pytest.raises(ModuleNotFoundError, match="no_such_thing"):
        cli.main(["needs-something"])


# ------------------------------------------- evaluate on a read-only run folder
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of one update (a few seconds)."""
    from keras_transformer.training import train

    workdir = tmp_path_factory.mktemp("evaluate") / "run"
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


def _files(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Makes `folder` look read-only to `os.access` (root writes anyway, so
    the tests also check that nothing in it changed)."""
    access = os.access
    folder = folder.resolve()

    def read_only_access(path, mode, *args, **kwargs):
        inside = Path(path).resolve().is_relative_to(folder)
        if inside and mode & os.W_OK:
            return False
        return access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", read_only_access)


EVALUATE = ["--beam-size", "1", "--max-sentences", "2", "--no-progress"]


def _warnings(stderr: str) -> list[str]:
    assert "Traceback" not in stderr
    return [line for line in stderr.splitlines() if line.startswith("keras-")]


def test_evaluate_scores_a_read_only_run_folder_without_writing(
    trained_run: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    before = _files(trained_run)
    _read_only(monkeypatch, trained_run)
    assert cli.main(["evaluate", "--workdir", str(trained_run), *EVALUATE]) == 0
    captured = capsys.readouterr()
    assert "BLEU" in captured.out and "Hypotheses:" not in captured.out
    translations, scores = _warnings(captured.err)
    assert translations == (
        "keras-transformer evaluate: warning: the translations will not be saved "
        f"to {trained_run / 'translations' / 'test.beam1.last.txt'}: {trained_run} "
        "is not writable. Scoring goes on; pass --hypotheses FILE to save them "
        "elsewhere."
    )
    assert scores.startswith(
        "keras-transformer evaluate: warning: the scores for TensorBoard will not "
        f"be saved to {trained_run / 'logs' / 'evaluate_test_beam1'}: "
    )
    assert scores.endswith("pass --log-dir FOLDER to save them elsewhere.")
    assert _files(trained_run) == before

    # --json says that nothing was saved.
    argv = ["evaluate", "--workdir", str(trained_run), *EVALUATE, "--json"]
    assert cli.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["hypotheses_path"] is None and printed["log_dir"] is None


def test_evaluate_run_again_replaces_its_saved_translations(
    trained_run: Path, capsys
) -> None:
    """The saved file matches the scores printed by the latest run (an
    existing file, not executable, was taken for unwritable and kept)."""
    saved = trained_run / "translations" / "test.beam1.last.txt"
    argv = ["evaluate", "--workdir", str(trained_run), "--beam-size", "1"]
    for count in (1, 2):
        assert cli.main([*argv, "--max-sentences", str(count), "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert _warnings(captured.err) == []
        assert f"Hypotheses: {saved}" in captured.out
        assert len(saved.read_text(encoding="utf-8").splitlines()) == count


def test_evaluations_with_other_search_settings_keep_their_own_files(
    trained_run: Path, capsys
) -> None:
    """An alpha or stopping rule other than the defaults joins the default
    file name: each evaluation's saved translations stay beside the others."""
    argv = ["evaluate", "--workdir", str(trained_run), "--max-sentences", "1"]
    runs = {
        "test.beam2.last.txt": [],
        "test.beam2.alpha1.last.txt": ["--alpha", "1"],
        "test.beam2.heuristic.last.txt": ["--early-stop", "heuristic"],
        "test.beam2.alpha0.heuristic.last.txt": [
            "--alpha",
            "0",
            "--early-stop",
            "heuristic",
        ],
    }
    for name, flags in runs.items():
        assert cli.main([*argv, "--beam-size", "2", *flags, "--no-progress"]) == 0
        saved = trained_run / "translations" / name
        assert f"Hypotheses: {saved}" in capsys.readouterr().out
    for name in runs:
        assert (trained_run / "translations" / name).is_file()
    assert (trained_run / "logs" / "evaluate_test_beam2.alpha1").is_dir()


def test_evaluate_progress_into_a_pipe_is_plain_lines(
    trained_run: Path, tmp_path: Path, capsys
) -> None:
    """Standard error that is not a terminal gets no carriage returns or
    ANSI escapes from the progress report (issue 33), only plain lines, each
    with the time left until the last."""
    argv = ["evaluate", "--workdir", str(trained_run), "--beam-size", "1"]
    argv += ["--max-sentences", "4", "--batch-size", "2"]
    argv += ["--hypotheses", str(tmp_path / "h.txt")]
    assert cli.main([*argv, "--log-dir", str(tmp_path / "logs")]) == 0
    err = capsys.readouterr().err
    assert not any(char in err for char in "\r\b\x1b"), repr(err)
    lines = [line for line in err.splitlines() if " sentences  " in line]
    assert [line.split()[0] for line in lines] == ["2/4", "4/4"], err
    assert re.search(r"  elapsed \d:\d\d:\d\d  eta \d:\d\d:\d\d$", lines[0])
    assert re.search(r"^4/4 sentences  .*  elapsed \d:\d\d:\d\d$", lines[1])


def test_evaluate_names_a_file_where_the_translations_folder_goes(
    trained_run: Path, tmp_path: Path, capsys
) -> None:
    """A file named ``translations`` in the run folder was called "not
    writable"; it is a file where the folder goes."""
    import shutil

    workdir = shutil.copytree(trained_run, tmp_path / "run")
    shutil.rmtree(workdir / "translations", ignore_errors=True)
    (workdir / "translations").write_text("notes\n")
    assert cli.main(["evaluate", "--workdir", str(workdir), *EVALUATE]) == 0
    captured = capsys.readouterr()
    assert "BLEU" in captured.out
    (translations,) = _warnings(captured.err)
    assert translations == (
        "keras-transformer evaluate: warning: the translations will not be saved "
        f"to {workdir / 'translations' / 'test.beam1.last.txt'}: "
        f"{workdir / 'translations'} is a file, not a folder. Scoring goes on; "
        "pass --hypotheses FILE to save them elsewhere."
    )
    assert (workdir / "translations").read_text() == "notes\n"


def test_evaluate_task_files_of_a_run_of_another_task_is_one_line(
    trained_run: Path, capsys
) -> None:
    """``evaluate --task files`` of a dates run said that task='files' needs
    `data.train_source`, a config setting, where the command takes
    --source and --reference."""
    argv = ["evaluate", "--workdir", str(trained_run), "--task", "files"]
    assert cli.main(argv) == 1
    (line,) = _warnings(capsys.readouterr().err)
    assert f"{trained_run} holds no run of task 'files'" in line
    assert line.endswith("pass --source FILE --reference FILE to score files.")


def test_evaluate_with_only_hypotheses_on_a_read_only_run_folder(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    before = _files(trained_run)
    _read_only(monkeypatch, trained_run)
    hypotheses = tmp_path / "hypotheses.txt"
    argv = ["evaluate", "--workdir", str(trained_run), *EVALUATE]
    assert cli.main([*argv, "--hypotheses", str(hypotheses)]) == 0
    captured = capsys.readouterr()
    assert f"Hypotheses: {hypotheses}" in captured.out and "BLEU" in captured.out
    (scores,) = _warnings(captured.err)
    assert "scores for TensorBoard will not be saved" in scores
    assert len(hypotheses.read_text(encoding="utf-8").splitlines()) == 2
    assert _files(trained_run) == before


def test_evaluate_says_in_one_line_when_a_write_fails(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The folder looks writable, but the writes fail (read-only file system,
    TensorFlow's PermissionDeniedError): the scores, one line each."""
    import errno

    import tensorflow as tf

    from keras_transformer import files
    from keras_transformer.translation import lines

    def read_only_file(path, content):
        raise files.write_error(path, OSError(errno.EROFS, "Read-only file system"))

    def denied_writer(logdir, *args, **kwargs):
        raise tf.errors.PermissionDeniedError(
            None, None, f"{logdir}; Read-only file system [Op:CreateSummaryFileWriter]"
        )

    monkeypatch.setattr(lines, "write_atomically", read_only_file)
    monkeypatch.setattr(tf.summary, "create_file_writer", denied_writer)
    assert cli.main(["evaluate", "--workdir", str(trained_run), *EVALUATE]) == 0
    captured = capsys.readouterr()
    assert "BLEU" in captured.out and "Hypotheses:" not in captured.out
    translations, scores = _warnings(captured.err)
    path = trained_run / "translations" / "test.beam1.last.txt"
    assert translations == (
        "keras-transformer evaluate: warning: the translations could not be saved "
        f"to {path} (read-only file system); the scores are complete. Pass "
        "--hypotheses FILE to save them elsewhere."
    )
    log_dir = trained_run / "logs" / "evaluate_test_beam1"
    assert scores.startswith(
        "keras-transformer evaluate: warning: the scores for TensorBoard could not "
        f"be saved to {log_dir} (read-only file system)"
    )

    # An output the user asked for is an error (exit 1), still one line,
    # after the scores.
    log_dir = tmp_path / "logs"
    argv = ["evaluate", "--workdir", str(trained_run), *EVALUATE]
    assert cli.main([*argv, "--log-dir", str(log_dir)]) == 1
    captured = capsys.readouterr()
    assert "BLEU" in captured.out
    assert _warnings(captured.err)[-1] == (
        f"keras-transformer evaluate: error: Could not write {log_dir}: read-only "
        "file system; no scores were logged there. Check the folder's permissions "
        "and the disk, then run the same command again."
    )

    # So is a file of translations the user named, which is saved in parts
    # as they are made: the scores are still complete.
    hypotheses = tmp_path / "hypotheses.txt"
    argv = ["evaluate", "--workdir", str(trained_run), *EVALUATE, "--json"]
    assert cli.main([*argv, "--hypotheses", str(hypotheses)]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["num_sentences"] == 2
    assert json.loads(captured.out)["hypotheses_path"] is None
    errors = [line for line in _warnings(captured.err) if ": error: " in line]
    assert errors == [
        f"keras-transformer evaluate: error: Could not write {hypotheses}.partial"
        ".json: read-only file system; nothing made so far is lost. Check the "
        "folder's permissions and the disk, then run the same command again."
    ]
    assert not hypotheses.exists()


@pytest.mark.slow
def test_evaluate_on_a_read_only_mount(trained_run: Path, tmp_path: Path) -> None:
    """For real, where this process may mount (root): a read-only bind mount
    (two commands, ~30 s)."""
    mount = tmp_path / "read-only"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "--bind", str(trained_run), str(mount)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("cannot bind-mount here (needs root); the tests above fake it")
    try:
        remounted = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(mount)], capture_output=True
        )
        assert remounted.returncode == 0, remounted.stderr
        with pytest.raises(OSError):
            (mount / "probe").write_text("")
        hypotheses = tmp_path / "hypotheses.txt"
        argv = ["evaluate", "--workdir", str(mount), *EVALUATE]
        done = subprocess.run(
            [sys.executable, "-m", "keras_transformer", *argv],
            capture_output=True,
            text=True,
            timeout=240,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert "BLEU" in done.stdout
        lines = _warnings(done.stderr)
        assert len(lines) == 2 and all("read-only file system" in x for x in lines)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "keras_transformer",
                *argv,
                "--hypotheses",
                str(hypotheses),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env=subprocess_env(),
            cwd=REPO_ROOT,
        )
        assert done.returncode == 0, done.stderr
        assert len(_warnings(done.stderr)) == 1 and hypotheses.exists()
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


def test_one_set_for_two_settings_is_told_to_repeat_set(capsys) -> None:
    """``train --set a=1 b=2`` stopped with argparse's bare "unrecognized
    arguments: b=2" (or, without a config file, "config file b=2 does not
    exist"); the line now says to write --set before each."""
    argv = ["train", "--workdir", "w", "--set", "train.train_steps=9"]
    assert cli.main([*argv, "train.seed=1"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "config file train.seed=1 does not exist" in error
    assert "write --set before it (--set train.seed=1)" in error
    config = str(REPO_ROOT / "configs" / "dates_tiny.json")
    with pytest.raises(SystemExit) as stopped:
        cli.main(["train", config, *argv[1:], "train.seed=1"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unrecognized arguments: train.seed=1" in error
    assert "write --set before each (--set train.seed=1)" in error
    # Other commands take no --set, and other words are no settings: no hint.
    for other in (["translate", "--workdir", "w", "a=b"], [*argv, config, "--bogus"]):
        with pytest.raises(SystemExit):
            cli.main(other)
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert "unrecognized arguments:" in error and "--set" not in error


# ------------------------------------------------- translate at a terminal
def _sigterm() -> KeyboardInterrupt:
    from keras_transformer.cli import CommandInterrupted

    return CommandInterrupted(signal.SIGTERM)


class _Terminal:
    """Standard input at a terminal: the lines come one at a time, and
    `printed` keeps what the command printed before each next line came
    (`errors`: what it wrote to standard error by then)."""

    def __init__(self, lines: list[bytes], capsys) -> None:
        self.lines, self.capsys, self.printed, self.errors = lines, capsys, [], ""

    def isatty(self) -> bool:
        return True

    @property
    def buffer(self):
        for line in self.lines:
            yield line
            captured = self.capsys.readouterr()
            self.printed.append(captured.out)
            self.errors += captured.err


def _typed(
    argv: list[str], typed: list[bytes], monkeypatch: pytest.MonkeyPatch, capsys
) -> tuple[list[list[str]], list[str]]:
    """The command run with `typed` entered at a terminal (exit 0): the lines
    it printed after each typed line, and its warnings."""
    terminal = _Terminal(typed, capsys)
    monkeypatch.setattr("sys.stdin", terminal)
    assert cli.main(argv) == 0
    err = terminal.errors + capsys.readouterr().err
    return [out.splitlines() for out in terminal.printed], _warnings(err)


def _typed_into(
    output: Path,
    argv: list[str],
    typed: list[bytes],
    monkeypatch: pytest.MonkeyPatch,
    capsys,
) -> list[str]:
    """The lines of `output` after the command, with ``--output`` `output`,
    ran with `typed` entered at a terminal (exit 0)."""
    monkeypatch.setattr("sys.stdin", _Terminal(typed, capsys))
    assert cli.main([*argv, "--output", str(output)]) == 0
    capsys.readouterr()
    return output.read_text(encoding="utf-8").splitlines()


def test_translate_at_a_terminal_answers_each_line_as_it_is_typed(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Typed sentences were read to the end of input (Ctrl-D) before any was
    translated: the user saw nothing. Each is now translated when entered."""
    sentences = ["3. März 2001", "23 mars 1950"]
    argv = ["translate", "--workdir", str(trained_run), "--beam-size", "2"]
    expected = []
    for index, sentence in enumerate(sentences):
        source = tmp_path / f"{index}.txt"
        source.write_text(f"{sentence}\n", encoding="utf-8")
        assert cli.main([*argv, "--n-best", "2", "--input", str(source)]) == 0
        expected.append(capsys.readouterr().out.splitlines())
    typed = [f"{sentences[0]}\r\n".encode(), b"\xff bad\n", sentences[1].encode()]
    printed, warnings = _typed([*argv, "--n-best", "2"], typed, monkeypatch, capsys)
    # Line 3's n-best indices are its own (2), as in a file of three lines.
    third = [line.replace("0 |||", "2 |||", 1) for line in expected[1]]
    # A skipped line prints an empty line: ``> FILE`` keeps a line per line.
    assert printed == [expected[0], [""], third]
    assert warnings == [
        "keras-transformer translate: type a sentence and press Enter to "
        "translate it; Ctrl-D (or Ctrl-C) ends.",
        "keras-transformer translate: warning: line 2 is not valid UTF-8: skipped.",
    ]
    # With --output the translations are written there, a line per typed line.
    output = tmp_path / "typed.txt"
    best = [lines[0].split(" ||| ")[1] for lines in expected]
    written = _typed_into(output, argv, typed, monkeypatch, capsys)
    assert written == [best[0], "", best[1]]

    # Ctrl-C ends the typing as Ctrl-D does: exit 0, the lines translated
    # so far written (it said "Stopped by SIGINT ... Run the same command
    # again", exit 130); SIGTERM still stops the command (and writes nothing).
    class _Interrupted(_Terminal):
        @property
        def buffer(self):
            yield from super().buffer
            raise self.interrupt

    for interrupt, status in ((KeyboardInterrupt(), 0), (_sigterm(), 143)):
        output.unlink(missing_ok=True)
        terminal = _Interrupted(typed[:1], capsys)
        terminal.interrupt = interrupt
        monkeypatch.setattr("sys.stdin", terminal)
        assert cli.main([*argv, "--output", str(output)]) == status
        capsys.readouterr()
        if status == 0:
            assert output.read_text(encoding="utf-8").splitlines() == [best[0]]
        else:
            assert not output.exists()
    # A file of lines paired with the input's needs the input's lines first.
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("1999\n", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", _Terminal(typed, capsys))
    assert cli.main([*argv, "--prefix-file", str(prefixes)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "keras-transformer translate: error: --prefix-file pairs its lines with "
        "the input's, which a terminal gives one at a time: pass the sentences "
        "as --input FILE (or pipe them in)."
    )


def test_score_at_a_terminal_answers_each_pair_as_it_is_typed(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`score` read typed pairs to the end of input (Ctrl-D) before scoring
    any: the user saw nothing. Each is now scored when entered, and a line
    without a tab is skipped with a warning (in a file it ends the command)."""
    pairs = ["3. März 2001\t2001-03-03", "23 mars 1950\t1950-03-23"]
    pairs_file = tmp_path / "pairs.txt"
    pairs_file.write_text("".join(f"{pair}\n" for pair in pairs), encoding="utf-8")
    argv = ["score", "--workdir", str(trained_run)]
    assert cli.main([*argv, "--input", str(pairs_file)]) == 0
    expected = capsys.readouterr().out.splitlines()
    assert len(expected) == 2 and all("\t" in line for line in expected)
    typed = [f"{pairs[0]}\r\n".encode(), b"no tab\n", b"\xff\tx\n", pairs[1].encode()]
    printed, warnings = _typed(argv, typed, monkeypatch, capsys)
    assert printed == [expected[:1], [""], [""], expected[1:]]
    assert warnings == [
        "keras-transformer score: type 'source<TAB>target' and press Enter to "
        "score the pair; Ctrl-D (or Ctrl-C) ends.",
        "keras-transformer score: warning: line 2 has no tab: type "
        "'source<TAB>target'.",
        "keras-transformer score: warning: line 3 is not valid UTF-8: skipped.",
    ]
    # With --output the scores are written there, a line per typed line.
    written = _typed_into(tmp_path / "scores.txt", argv, typed, monkeypatch, capsys)
    assert written == [expected[0], "", "", expected[1]]
    # --target without --source is refused, not taken for typing.
    monkeypatch.setattr("sys.stdin", _Terminal(typed, capsys))
    assert cli.main([*argv, "--target", str(pairs_file)]) == 2
    assert "Pass both --source and --target" in capsys.readouterr().err
