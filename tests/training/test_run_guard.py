"""The run folder guarded: one writer, fingerprinted checkpoints, whole files.

The cases a careless user meets (issue 22): two commands writing one run
folder, a checkpoint or weights file copied in from another run, a config
changed after training, a full disk while the best weights are written, and
the checkpoint folder deleted during a run. Each is refused with one line
or survived with nothing lost.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, files, runs
from keras_transformer.files import FileWriteError
from keras_transformer.runs import (
    ForeignCheckpointError,
    RunFolder,
    checkpoint_fingerprint,
    checkpoint_paths,
)
from keras_transformer.training import average_checkpoints, train
from tests.training.helpers import (
    SMALL_CONFIG,
    holding_lock,
    small_config,
    subprocess_env,
    write_config,
)

#: Two checkpoints (ckpt-3, ckpt-6) and a best-weights file.
RUN_OVERRIDES = ("train.test_samples=2",)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished tiny runs of one config that differ only in their seed."""
    root = tmp_path_factory.mktemp("guard")
    first, second = root / "first", root / "second"
    train(small_config(*RUN_OVERRIDES), first, printer=None)
    train(small_config(*RUN_OVERRIDES, "train.seed=1"), second, printer=None)
    return first, second


@pytest.fixture
def run(two_runs, tmp_path):
    """A copy of the first run, and the second run (read only)."""
    copy = tmp_path / "run"
    shutil.copytree(two_runs[0], copy)
    return copy, two_runs[1]


def _one_line_error(capsys, *names: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    for name in names:
        assert name in lines[0], err
    return lines[0]


def _copy_in(checkpoint: Path, run: Path, step: int) -> str:
    """Copies another run's checkpoint into `run` as its newest, ckpt-<step>."""
    target = run / "checkpoints" / f"ckpt-{step}"
    for path in checkpoint.parent.glob(checkpoint.name + ".*"):
        shutil.copy(path, str(target) + path.name[len(checkpoint.name) :])
    listed = checkpoint_paths(run / "checkpoints")
    tf.compat.v1.train.update_checkpoint_state(
        str(run / "checkpoints"),
        str(target),
        all_model_checkpoint_paths=[*listed, str(target)],
    )
    return str(target)


# ------------------------------------------------------------ fingerprints
def test_every_checkpoint_and_best_weights_carry_the_runs_fingerprint(two_runs):
    first, second = two_runs
    expected = RunFolder(first).fingerprint()
    assert expected is not None
    for prefix in checkpoint_paths(first / "checkpoints"):
        assert checkpoint_fingerprint(prefix) == expected
    best = json.loads((first / "best.json").read_text())
    assert best["fingerprint"]["run_id"] == expected.run_id
    other = RunFolder(second).fingerprint()
    assert other is not None and other.run_id != expected.run_id


def test_a_checkpoint_of_another_run_is_refused_by_every_reader(run, capsys):
    workdir, other = run
    foreign = _copy_in(Path(checkpoint_paths(other / "checkpoints")[-1]), workdir, 100)
    other_id = RunFolder(other).fingerprint().run_id
    # average-checkpoints, in the library and on the command line.
    with pytest.raises(ForeignCheckpointError) as error:
        average_checkpoints(workdir, last=3)
    assert other_id in str(error.value) and str(other.resolve()) in str(error.value)
    assert not (workdir / "averaged.weights.h5").exists()
    assert cli.main(["average-checkpoints", "--workdir", str(workdir)]) == 2
    _one_line_error(capsys, "belongs to another run", other_id)
    # The newest checkpoint (translate, evaluate, export read it).
    folder = RunFolder(workdir)
    with pytest.raises(ForeignCheckpointError, match="belongs to another run"):
        folder.restore(folder.build_model(), "last")
    # A checkpoint named on the command line.
    sentences = workdir.parent / "sentences.txt"
    sentences.write_text("5 May 1990\n")
    status = cli.main(
        ["translate", "--workdir", str(workdir), "--weights", foreign]
        + ["--input", str(sentences)]
    )
    assert status == 1
    _one_line_error(capsys, "ckpt-100 belongs to another run")
    # Resuming the run.
    with pytest.raises(ForeignCheckpointError, match="ckpt-100 belongs to another"):
        train(small_config(*RUN_OVERRIDES, "train.train_steps=9"), workdir)


def test_best_weights_of_another_run_are_refused(run, capsys):
    workdir, other = run
    shutil.copy(other / "best.weights.h5", workdir / "best.weights.h5")
    shutil.copy(other / "best.json", workdir / "best.json")
    folder = RunFolder(workdir)
    with pytest.raises(ForeignCheckpointError, match="best.weights.h5 belongs"):
        folder.restore(folder.build_model(), "best")


def _translate(workdir: Path, *options: str) -> int:
    sentences = workdir.parent / "sentences.txt"
    sentences.write_text("5 May 1990\n")
    command = ["translate", "--workdir", str(workdir), "--input", str(sentences)]
    return cli.main([*command, "--output", str(workdir.parent / "out.txt"), *options])


@pytest.mark.parametrize("suffix", [".index", ".data-00000-of-00001"])
def test_a_checkpoint_of_another_run_is_refused_whichever_file_names_it(
    run, capsys, suffix
):
    """``--weights <other>/checkpoints/ckpt-6.index`` was restored unchecked
    (the check looked for ``ckpt-6.index.index``) and its translations were
    written into the run."""
    workdir, other = run
    other_id = RunFolder(other).fingerprint().run_id
    foreign = f"{checkpoint_paths(other / 'checkpoints')[-1]}{suffix}"
    command = ["evaluate", "--workdir", str(workdir), "--weights", foreign]
    status = cli.main([*command, "--beam-size", "1", "--max-sentences", "2"])
    assert status == 1
    _one_line_error(capsys, "ckpt-6 belongs to another run", other_id)
    assert not (workdir / "translations").exists()
    # The run's own checkpoint, named by any of its files, loads.
    own = f"{checkpoint_paths(workdir / 'checkpoints')[-1]}{suffix}"
    folder = RunFolder(workdir)
    folder.restore(folder.build_model(), own)


@pytest.mark.parametrize("damage", ["best.json of the run left", "best.json garbled"])
def test_best_weights_of_another_run_are_refused_whatever_lies_beside_them(
    run, capsys, damage
):
    """The fingerprint lived only in best.json: copying best.weights.h5 alone
    (or garbling best.json) loaded the other run's weights."""
    workdir, other = run
    other_id = RunFolder(other).fingerprint().run_id
    shutil.copy(other / "best.weights.h5", workdir / "best.weights.h5")
    if damage == "best.json garbled":
        (workdir / "best.json").write_text("{garbled")
    assert _translate(workdir, "--weights", "best") == 1
    _one_line_error(capsys, "best.weights.h5 belongs to another run", other_id)
    # Every reader of --weights best: export, evaluate, an ensemble.
    export = ["export", "--workdir", str(workdir), "--weights", "best"]
    assert cli.main([*export, "--output", str(workdir.parent / "export")]) == 1
    _one_line_error(capsys, "best.weights.h5 belongs to another run", other_id)
    assert not (workdir.parent / "export").exists()
    evaluate = ["evaluate", "--workdir", str(workdir), "--weights", "best"]
    assert cli.main([*evaluate, "--beam-size", "1", "--max-sentences", "2"]) == 1
    _one_line_error(capsys, "best.weights.h5 belongs to another run", other_id)
    ensemble = ["--ensemble", str(other), "--weights", "best"]
    assert _translate(workdir, *ensemble) == 1
    _one_line_error(capsys, "best.weights.h5 belongs to another run", other_id)


def test_deleting_checkpoints_json_keeps_the_checks_on(run, capsys):
    workdir, other = run
    other_id = RunFolder(other).fingerprint().run_id
    own = RunFolder(workdir).fingerprint()
    (workdir / "checkpoints" / "checkpoints.json").unlink()
    # The run's fingerprint is read from its own checkpoints.
    folder = RunFolder(workdir)
    assert folder.fingerprint() == own
    folder.restore(folder.build_model(), "best")
    foreign = checkpoint_paths(other / "checkpoints")[-1]
    assert _translate(workdir, "--weights", foreign) == 1
    _one_line_error(capsys, "ckpt-6 belongs to another run", other_id)
    shutil.copy(other / "best.weights.h5", workdir / "best.weights.h5")
    assert _translate(workdir, "--weights", "best") == 1
    _one_line_error(capsys, "best.weights.h5 belongs to another run", other_id)
    # With another run's checkpoint among its own, which run it is cannot be
    # told: every reader stops, naming both runs.
    _copy_in(Path(foreign), workdir, 100)
    assert _translate(workdir) == 1
    _one_line_error(capsys, "belong to 2 runs", other_id, own.run_id)
    with pytest.raises(ForeignCheckpointError, match="belong to 2 runs"):
        train(small_config(*RUN_OVERRIDES, "train.train_steps=9"), workdir)


def test_weights_without_a_fingerprint_need_the_option(run, capsys):
    """A bare ``x.weights.h5`` (or checkpoint) written by other code loaded
    without a word; now it takes --weights-without-fingerprint."""
    workdir, _ = run
    folder = RunFolder(workdir)
    model = folder.build_model()
    folder.restore(model, "last")
    bare = workdir.parent / "x.weights.h5"
    model.save_weights(bare)
    checkpoint = tf.train.Checkpoint(model=model).write(str(workdir.parent / "ckpt"))
    for weights in (str(bare), checkpoint):
        assert _translate(workdir, "--weights", weights) == 1
        line = _one_line_error(capsys, "carries no run fingerprint")
        assert "--weights-without-fingerprint" in line
        assert (
            _translate(
                workdir, "--weights", weights, *["--weights-without-fingerprint"]
            )
            == 0
        )
        assert "Traceback" not in capsys.readouterr().err
        with runs.accepting_weights_without_fingerprint():
            folder.restore(folder.build_model(), weights)
        with pytest.raises(ForeignCheckpointError, match="no run fingerprint"):
            folder.restore(folder.build_model(), weights)
    # A bare file of another model is a mismatch (not a removed checkpoint).
    other = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3)])
    other.save_weights(workdir.parent / "other.weights.h5")
    mismatch = pytest.raises(runs.CheckpointMismatchError, match="does not match")
    with runs.accepting_weights_without_fingerprint(), mismatch:
        folder.restore(model, str(workdir.parent / "other.weights.h5"))


@pytest.mark.parametrize(
    "output",
    [
        "best.weights.h5",
        "config.weights.h5",
        "data.weights.h5",
        "validation.weights.h5",
        "checkpoints/avg.weights.h5",
        "translations/avg.weights.h5",
        "OTHER",
    ],
)
def test_average_checkpoints_never_replaces_a_runs_own_files(run, capsys, output):
    """``--output <run>/best.weights.h5`` replaced the best weights and
    best.json: ``--weights best`` then silently meant the average;
    ``data.weights.h5`` replaced the run's data record ``data.json`` (and
    ``validation.weights.h5`` its ``validation.json``) with the average's
    info. A file in ``checkpoints/`` was refused with advice to write into
    ``translations/``, which the average refused in turn."""
    workdir, other = run
    target = other / "averaged.weights.h5" if output == "OTHER" else workdir / output

    def contents(folder: Path) -> dict:
        return {
            p.relative_to(folder): p.read_bytes()
            for p in folder.rglob("*")
            if p.is_file()
        }

    before, before_other = contents(workdir), contents(other)
    command = ["average-checkpoints", "--workdir", str(workdir), "--last", "2"]
    assert cli.main([*command, "--output", str(target)]) == 2
    line = _one_line_error(capsys, f"--output {target}")
    assert "translations/ folder" not in line, line
    assert contents(workdir) == before
    assert contents(other) == before_other
    with pytest.raises(ValueError, match="would replace best.weights.h5 and best"):
        average_checkpoints(workdir, last=2, output=workdir / "best.weights.h5")


def _flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def test_a_bit_flip_in_best_weights_is_one_line_and_never_loads_wrong_weights(
    run, capsys
):
    """A flipped bit gave an h5py RuntimeError traceback, or (in the numbers)
    other weights without a word."""
    import h5py

    workdir, _ = run
    best = workdir / "best.weights.h5"
    original = best.read_bytes()
    folder = RunFolder(workdir)
    model = folder.build_model()
    folder.restore(model, "best")
    expected = model.get_weights()
    with h5py.File(best, "r") as file:
        kernel = max((file[name] for name in _datasets(file)), key=lambda d: d.size)
        in_numbers = kernel.id.get_offset() + 5
    # 8 bytes spread over the file (the first is HDF5's signature), and one
    # in the numbers of the largest weight: refused as damaged, or (a bit
    # nothing reads) the same weights.
    damaged: dict[int, str] = {}
    spread = range(0, len(original), len(original) // 8)
    for offset in [*spread, in_numbers]:
        best.write_bytes(original)
        _flip_bit(best, offset)
        try:
            folder.restore(model, "best")
        except runs.CheckpointDamagedError as error:
            assert "\n" not in str(error) and str(best) in str(error)
            damaged[offset] = str(error)
            continue
        for a, b in zip(model.get_weights(), expected, strict=True):
            np.testing.assert_array_equal(a, b)
    assert "does not match the checksum" in damaged[in_numbers]
    # One that HDF5 itself cannot read (the RuntimeError of the issue).
    structure = next(o for o, e in damaged.items() if "not an HDF5 weights" in e)
    for offset in (structure, in_numbers):
        best.write_bytes(original)
        _flip_bit(best, offset)
        assert _translate(workdir, "--weights", "best") == 1
        _one_line_error(capsys, str(best))


def _datasets(file) -> list[str]:
    import h5py

    names: list[str] = []
    file.visititems(
        lambda name, item: (
            names.append(name) if isinstance(item, h5py.Dataset) else None
        )
    )
    return names


def test_average_checkpoints_takes_its_default_file_given_by_name(run, capsys):
    """``--output <run>/averaged.weights.h5``, where the average goes without
    --output, was refused as a file the run needs."""
    workdir, _ = run
    default = workdir / "averaged.weights.h5"
    command = ["average-checkpoints", "--workdir", str(workdir), "--last", "2"]
    assert cli.main([*command, "--output", str(default)]) == 0
    assert f"Averaged weights written to {default}" in capsys.readouterr().out
    RunFolder(workdir).restore(RunFolder(workdir).build_model(), "average")


def test_the_runs_own_checkpoints_still_load(run):
    workdir, _ = run
    folder = RunFolder(workdir)
    model = folder.build_model()
    folder.restore(model, "last")
    path = average_checkpoints(workdir, last=2)
    info = json.loads(path.with_name("averaged.json").read_text())
    assert info["fingerprint"]["run_id"] == folder.fingerprint().run_id
    folder.restore(folder.build_model(), "average")


def test_the_run_id_comes_from_the_checkpoints_when_checkpoints_json_lacks_it(run):
    """Without the run id in checkpoints.json, the one its checkpoints carry
    is the run's; `restore_checkpoint` loads a checkpoint without one (written
    by other code) when given no fingerprint, and refuses it against one."""
    workdir, _ = run
    metadata_file = workdir / "checkpoints" / "checkpoints.json"
    metadata = json.loads(metadata_file.read_text())
    for key in ("run_id", "config_hash", "workdir"):
        metadata.pop(key)
    metadata_file.write_text(json.dumps(metadata))
    folder = RunFolder(workdir)
    # The run's checkpoints still carry its fingerprint: it is read from them.
    carried = checkpoint_fingerprint(checkpoint_paths(workdir / "checkpoints")[-1])
    assert folder.fingerprint() == carried is not None
    model = folder.build_model()
    # A checkpoint without a fingerprint, as code before them wrote.
    folder.restore(model, "last")
    bare = tf.train.Checkpoint(model=model).write(str(workdir / "bare" / "ckpt"))
    assert checkpoint_fingerprint(bare) is None
    other = folder.build_model()
    # restore_checkpoint checks only against a given fingerprint; a run
    # folder's readers refuse it (test_weights_without_a_fingerprint_need_the_option).
    runs.restore_checkpoint(other, bare)
    with pytest.raises(ForeignCheckpointError, match="carries no run fingerprint"):
        runs.restore_checkpoint(other, bare, folder.fingerprint())
    for a, b in zip(model.get_weights(), other.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "changes",
    [
        {"d_ff": 96},
        {"num_encoder_layers": 2},
        {"num_encoder_layers": 2, "d_model": 64},
    ],
)
def test_a_config_changed_after_training_is_one_line_naming_config_json(run, changes):
    """A layer more than the checkpoint's translated without a word, that
    layer at its initial weights (a reader restored with `expect_partial`
    alone); now every weight of the model must get a value. With other
    shapes too, a few hundred warning lines followed the error at exit."""
    workdir, _ = run
    config = json.loads((workdir / "config.json").read_text())
    for field, value in changes.items():
        assert config["model"][field] != value
    config["model"].update(changes)
    (workdir / "config.json").write_text(json.dumps(config))
    child = subprocess.run(
        [sys.executable, "-m", "keras_transformer", "translate"]
        + ["--workdir", str(workdir)],
        input="5 May 1990\n",
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 1
    assert "Traceback" not in child.stderr
    # TensorFlow's ~170 warning lines about unrestored values are gone.
    assert "could not be found in the restored object" not in child.stderr
    errors = [line for line in child.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, child.stderr
    assert "does not match the model built from" in errors[0]
    assert str(workdir / "config.json") in errors[0]


def test_a_resume_on_other_data_as_read_is_one_line_unless_forced(
    run, monkeypatch, capsys, caplog
):
    """The data a resumed run reads can differ from its first start's with
    every setting the same (another copy under a moved ``data.data_dir``,
    another version downloaded, a reader that now cleans the text
    otherwise): the run went on with them, its tokenizer and best weights
    made from the others, without a word. Here the dates' reader changes
    one training pair."""
    from keras_transformer.data import TextPairs, datasets

    workdir, _ = run
    record = json.loads((workdir / "data.json").read_text(encoding="utf-8"))
    assert record["content"]["train"]["examples"] == 300
    real = datasets.synthetic_dates

    def one_pair_other(size, seed=0):
        pairs = real(size, seed=seed)
        if seed:  # the validation and test splits are left as they were
            return pairs
        return TextPairs(pairs.sources, ("1999-12-31", *pairs.targets[1:]))

    monkeypatch.setattr(datasets, "synthetic_dates", one_pair_other)
    config = write_config(
        workdir.parent,
        {
            **SMALL_CONFIG,
            "train": {**SMALL_CONFIG["train"], "test_samples": 2, "train_steps": 9},
        },
    )
    argv = ["train", str(config), "--workdir", str(workdir)]
    assert cli.main(argv) == 1
    line = _one_line_error(
        capsys,
        "was trained on other data: its data as read now differ from those of the "
        "run's first start in the train split (300 -> 300 examples)",
    )
    assert "--force" in line
    assert json.loads((workdir / "data.json").read_text(encoding="utf-8")) == record
    assert checkpoint_paths(workdir / "checkpoints")[-1].endswith("ckpt-6")
    with caplog.at_level(logging.WARNING):
        result = train(
            small_config(*RUN_OVERRIDES, "train.train_steps=9"),
            workdir,
            force=True,
            printer=None,
        )
    assert (result.initial_step, result.steps) == (6, 9)
    assert "Continuing on the new data (--force)" in caplog.text
    again = json.loads((workdir / "data.json").read_text(encoding="utf-8"))
    assert again["content"]["train"]["examples"] == 300
    assert again["content"]["train"] != record["content"]["train"]


def test_model_settings_that_keep_the_shapes_are_warned_of_and_not_resumed(run, caplog):
    """Another `num_heads` in `config.json` (the same weight shapes) loaded
    without a word and split the weights into other heads; the checkpoints
    now record the settings they were trained with, and a reader says which
    differ. Dropout, which a trained model does not read, is not named."""
    workdir, _ = run
    recorded = json.loads((workdir / "checkpoints" / "checkpoints.json").read_text())
    assert recorded["model_settings"]["num_heads"] == 2
    assert "dropout" not in recorded["model_settings"]
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        RunFolder(workdir).load()
    assert "other model settings" not in caplog.text
    config = json.loads((workdir / "config.json").read_text())
    config["model"].update(num_heads=4, dropout=0.3)
    (workdir / "config.json").write_text(json.dumps(config))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        RunFolder(workdir).load()
        RunFolder(workdir).load()  # once per process
    warnings = [r.message for r in caplog.records if "other model" in r.message]
    assert len(warnings) == 1, caplog.text
    assert "(num_heads: 2 -> 4)" in warnings[0] and "config.json" in warnings[0]
    # Resuming the edited run (its own config.json, so no "changed settings")
    # is refused before anything is written; it resumed with 4 heads.
    from keras_transformer.training import ConfigMismatchError, TrainConfig

    edited = (workdir / "config.json").read_bytes()
    metadata = (workdir / "checkpoints" / "checkpoints.json").read_bytes()
    with pytest.raises(ConfigMismatchError, match=r"\(num_heads: 2 -> 4\).*--force"):
        train(TrainConfig.load(workdir / "config.json"), workdir)
    assert (workdir / "config.json").read_bytes() == edited
    assert (workdir / "checkpoints" / "checkpoints.json").read_bytes() == metadata


def test_force_with_other_model_sizes_says_force_cannot_reshape_the_weights(run):
    """``train --set model.d_model=64 --force`` on a run of 32 said "config.json
    was changed after the checkpoint was written (restore the run's own
    settings)", as if someone had edited the file; the user asked for it."""
    from keras_transformer.runs import CheckpointMismatchError

    workdir, _ = run
    stored = (workdir / "config.json").read_bytes()
    config = small_config(*RUN_OVERRIDES, "model.d_model=64", "train.train_steps=9")
    with pytest.raises(CheckpointMismatchError) as error:
        train(config, workdir, printer=None, force=True)
    message = str(error.value)
    assert "does not match the model of the new settings" in message
    assert "(32, " in message or ", 32)" in message
    assert (
        "--force continues a run with other settings, but not with weights of "
        "other shapes" in message
    )
    assert "another --workdir" in message and "\n" not in message
    assert (workdir / "config.json").read_bytes() == stored


@pytest.mark.parametrize("change", ["kind", "vocabulary", "ctrl-c"])
def test_a_failed_resume_with_new_settings_leaves_the_runs_records(
    run, change, monkeypatch
):
    """``train configs/imdb.json --workdir <a translation run> --force``
    wrote the classification config over the run's ``config.json`` and then
    failed on the IMDB download: the run's settings were gone, and
    ``translate`` called it a classification run. A run keeps its kind, even
    with ``--force``; and a resume whose new settings fail after they were
    written (a vocabulary size the run's tokenizer lacks) puts ``config.json``
    (which held the failing size, so the same command without --set failed
    again), ``checkpoints.json`` and ``data.json`` back as they were; so does
    a Ctrl-C before the new settings trained."""
    from keras_transformer.training import TrainConfig

    workdir, _ = run
    records = [workdir / name for name in ("config.json", "data.json")]
    records.append(workdir / "checkpoints" / "checkpoints.json")
    before = [path.read_bytes() for path in records]
    if change == "kind":
        config = TrainConfig.from_dict({"kind": "classification"})
        message = f"{workdir} holds a translation run, and the config is a "
        message += "classification run's (its `kind`): a run keeps its kind"
    elif change == "vocabulary":
        config = small_config(*RUN_OVERRIDES, "data.vocabulary_size=121")
        message = "The run's tokenizer has 120 pieces but the config asks for"
    else:  # a setting that may change freely, then Ctrl-C while data load
        from keras_transformer.training import loop

        def interrupted(*args, **kwargs):
            assert b'"train_steps": 12' in records[0].read_bytes()  # written
            raise KeyboardInterrupt

        monkeypatch.setattr(loop, "_data_and_tokenizer", interrupted)
        config = small_config(*RUN_OVERRIDES, "train.train_steps=12")
        message = ""
    with pytest.raises((ValueError, KeyboardInterrupt)) as error:
        train(config, workdir, printer=None, force=True)
    assert str(error.value).startswith(message), error.value
    assert [path.read_bytes() for path in records] == before


# ----------------------------------------------------------- one writer
def test_writers_are_refused_while_another_holds_the_run(run, tmp_path, capsys):
    workdir, _ = run
    before = {
        p.relative_to(workdir): p.stat().st_mtime_ns
        for p in workdir.rglob("*")
        if p.is_file() and p.name != files.LOCK_FILE  # the holder writes it
    }
    config = write_config(tmp_path, SMALL_CONFIG)
    with holding_lock(workdir) as holder:
        commands = [
            ["train", str(config), "--workdir", str(workdir)],
            ["average-checkpoints", "--workdir", str(workdir), "--last", "2"],
        ]
        for command in commands:
            assert cli.main(command) == 1
            line = _one_line_error(capsys, f"PID {holder.pid}", "one writer at a time")
            assert "keras-transformer train" in line
        # evaluate scores, but does not write into a folder another writes.
        evaluate = ["evaluate", "--workdir", str(workdir), "--beam-size", "1"]
        assert cli.main([*evaluate, "--max-sentences", "2", "--no-progress"]) == 0
        captured = capsys.readouterr()
        assert "BLEU" in captured.out and "Hypotheses:" not in captured.out
        assert "Traceback" not in captured.err
        assert f"were not saved to {workdir / 'translations'}" in captured.err
        assert f"PID {holder.pid}" in captured.err
        # Readers need no lock.
        sentences = tmp_path / "sentences.txt"
        sentences.write_text("5 May 1990\n")
        status = cli.main(
            ["translate", "--workdir", str(workdir), "--input", str(sentences)]
            + ["--output", str(tmp_path / "out.txt")]
        )
        assert status == 0
        capsys.readouterr()
    after = {
        p.relative_to(workdir): p.stat().st_mtime_ns
        for p in workdir.rglob("*")
        if p.is_file() and p.name != files.LOCK_FILE  # the holder writes it
    }
    assert after == before, "a refused writer changed the run folder"
    # The killed holder left no stale lock.
    command = ["average-checkpoints", "--workdir", str(workdir), "--last", "2"]
    assert cli.main(command) == 0
    assert (workdir / "averaged.weights.h5").is_file()
    capsys.readouterr()


def test_an_average_into_a_run_being_written_reads_no_checkpoint(run, monkeypatch):
    """The run's writer lock is taken before the checkpoints are read (they
    were read first, racing the running train, and refused only at the
    write)."""
    from keras_transformer.training import checkpoints as training_checkpoints

    workdir, _ = run

    def unread(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a checkpoint was read before the lock was taken")

    monkeypatch.setattr(training_checkpoints, "_restore_model", unread)
    with holding_lock(workdir) as holder:
        refused = pytest.raises(files.FolderLockedError, match=f"PID {holder.pid}")
        with refused:
            average_checkpoints(workdir, last=2)
    assert not (workdir / "averaged.weights.h5").exists()


@pytest.mark.slow
def test_two_train_commands_on_one_folder(tmp_path):
    """The issue's case: both exited 0 and mixed their tokenizers."""
    longer = {**SMALL_CONFIG["train"], "train_steps": 60}
    config = write_config(tmp_path, {**SMALL_CONFIG, "train": longer})
    workdir = tmp_path / "run"
    command = [sys.executable, "-m", "keras_transformer", "train", str(config)]
    command += ["--workdir", str(workdir)]
    first = subprocess.Popen(
        command, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while (
        not (workdir / files.LOCK_FILE).is_file()
        or not (workdir / files.LOCK_FILE).read_text()
    ):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.2)
    second = subprocess.run(
        command, env=subprocess_env(), capture_output=True, text=True, timeout=300
    )
    first_out, _ = first.communicate(timeout=600)
    assert first.returncode == 0
    assert second.returncode == 1
    assert "Traceback" not in second.stderr
    assert f"PID {first.pid}" in second.stderr
    result = json.loads((workdir / "result.json").read_text())
    assert result["steps"] == 60


# ------------------------------------------------------------- full disk
def test_a_full_disk_at_the_best_weights_keeps_the_previous_pair(run, monkeypatch):
    workdir, _ = run
    best, info = workdir / "best.weights.h5", workdir / "best.json"
    previous = best.read_bytes(), info.read_text()
    folder = RunFolder(workdir)
    model = folder.build_model()
    folder.restore(model, "last")
    usage = type("Usage", (), {"free": 50_000, "total": 10**9, "used": 10**9})
    monkeypatch.setattr(files.shutil, "disk_usage", lambda _: usage)
    with pytest.raises(FileWriteError) as error:
        runs.save_weights(model, best, {"bleu": 1.0, "step": 9})
    message = str(error.value)
    assert str(best) in message and "no space left" in message
    assert "previous best.weights.h5 is intact" in message and "\n" not in message
    assert (best.read_bytes(), info.read_text()) == previous
    folder.restore(folder.build_model(), "best")


def _tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return mounted.returncode == 0


def test_a_really_full_disk_at_the_best_weights(run, tmp_path):
    """On a real small file system: the h5 writer never starts on a full disk."""
    disk = tmp_path / "disk"
    if not _tmpfs(disk, "4m"):
        pytest.skip("mounting a tmpfs needs root (the test above covers the logic)")
    try:
        workdir, _ = run
        folder = RunFolder(workdir)
        model = folder.build_model()
        folder.restore(model, "last")
        best = disk / "best.weights.h5"
        runs.save_weights(model, best, {"bleu": 1.0, "step": 3})
        previous = best.read_bytes()
        free = shutil.disk_usage(disk).free
        (disk / "filler").write_bytes(b"\0" * (free - 64 * 1024))
        with pytest.raises(FileWriteError, match="no space left on the device"):
            runs.save_weights(model, best, {"bleu": 2.0, "step": 6})
        assert best.read_bytes() == previous
        assert json.loads((disk / "best.json").read_text())["step"] == 3
        assert sorted(p.name for p in disk.iterdir()) == [
            "best.json",
            "best.weights.h5",
            "filler",
        ]
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.parametrize("name", ["best", "averaged"])
def test_a_kill_between_a_weights_file_and_its_json_loses_nothing(
    run, monkeypatch, name
):
    """`save_weights` renames the new weights file into place, then writes the
    .json beside it: a kill between the two left the .json of the file before,
    so a resumed run believed the old best value (and could replace better
    weights with worse) and the warning of an older average read old steps.
    The weights file carries its own record; the readers believe it, and a
    resumed run writes the .json anew."""
    from keras_transformer.runs import weights as weights_module
    from keras_transformer.training.callbacks import BestWeights

    workdir, _ = run
    folder = RunFolder(workdir)
    model = folder.build_model()
    folder.restore(model, "last")
    weights, info = workdir / f"{name}.weights.h5", workdir / f"{name}.json"
    record = (
        {"bleu": 99.5, "step": 6}
        if name == "best"
        else {"checkpoints": ["ckpt-6"], "steps": [6]}
    )
    fingerprint = checkpoint_fingerprint(checkpoint_paths(workdir / "checkpoints")[-1])
    older = (
        {"bleu": 0.5, "step": 3}
        if name == "best"
        else {"checkpoints": ["ckpt-3"], "steps": [3]}
    )
    runs.save_weights(model, weights, older, fingerprint)
    before = info.read_text()
    write = weights_module.write_atomically

    def killed(path, *args, **kwargs):
        if Path(path) == info:
            raise KeyboardInterrupt
        return write(path, *args, **kwargs)

    monkeypatch.setattr(weights_module, "write_atomically", killed)
    with pytest.raises(KeyboardInterrupt):
        runs.save_weights(model, weights, record, fingerprint)
    monkeypatch.setattr(weights_module, "write_atomically", write)
    assert info.read_text() == before  # the .json of the file before
    step = folder.weights_step("best" if name == "best" else "average")
    assert step == 6
    if name == "best":
        best = BestWeights(model, weights, "bleu")
        assert (best.value, best.step) == (99.5, 6)
        assert not best.is_better(99.0)
    else:
        # A reader writes nothing: the .json stays until the next average.
        assert info.read_text() == before
        return
    written = json.loads(info.read_text())
    assert {k: written[k] for k in record} == record
    assert written["fingerprint"]["run_id"] == fingerprint.run_id
    folder.restore(folder.build_model(), "best")


# --------------------------------------------- the checkpoint folder deleted
class _DeleteCheckpoints(keras.callbacks.Callback):
    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if epoch == 0:
            shutil.rmtree(self.folder)


def test_checkpoints_deleted_during_a_run_are_noticed(tmp_path, caplog):
    workdir = tmp_path / "run"
    checkpoint_dir = workdir / "checkpoints"
    with caplog.at_level(logging.WARNING, logger="keras_transformer.runs"):
        train(
            small_config(*RUN_OVERRIDES),
            workdir,
            callbacks=[_DeleteCheckpoints(checkpoint_dir)],
            printer=None,
        )
    assert "the folder was deleted during the run" in caplog.text
    # The state lists only what exists, and the metadata (the tokenizer and
    # fingerprint checks) was written again with the same tokenizer.
    assert [Path(p).name for p in checkpoint_paths(checkpoint_dir)] == ["ckpt-6"]
    metadata = json.loads((checkpoint_dir / "checkpoints.json").read_text())
    tokenizer = RunFolder(workdir).tokenizer()
    assert metadata["tokenizer_fingerprint"] == tokenizer.fingerprint
    assert (
        checkpoint_fingerprint(checkpoint_paths(checkpoint_dir)[-1]).run_id
        == (metadata["run_id"])
    )
    folder = RunFolder(workdir)
    folder.restore(folder.build_model(), "last")


def test_the_lock_file_is_released_after_train(tmp_path):
    workdir = tmp_path / "run"
    train(small_config(*RUN_OVERRIDES, "train.train_steps=3"), workdir, printer=None)
    with files.FolderLock(workdir, "a later command"):
        pass
    assert os.path.getsize(workdir / files.LOCK_FILE) == 0


@pytest.mark.parametrize(
    "name", ["config.json", "checkpoints.json", "result.json", "validation.json"]
)
def test_a_full_disk_at_each_run_file_keeps_its_previous_version(
    run, monkeypatch, name
):
    """Resuming writes config.json and checkpoints.json, an epoch's end
    validation.json (before its checkpoint), finishing result.json."""
    workdir, _ = run
    path = next(workdir.rglob(name))
    previous = path.read_bytes()
    flush = files._fsync_file

    def full_disk(written: Path) -> None:
        if Path(written).name.endswith(name):
            raise OSError(28, "No space left on device")
        flush(written)

    monkeypatch.setattr(files, "_fsync_file", full_disk)
    with pytest.raises(FileWriteError) as error:
        train(small_config(*RUN_OVERRIDES, "train.train_steps=9"), workdir)
    message = str(error.value)
    assert str(path) in message and "no space left on the device" in message
    assert f"the previous {name} is intact" in message and "\n" not in message
    assert path.read_bytes() == previous
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]
    # Space freed: the same command goes on and writes the file.
    monkeypatch.setattr(files, "_fsync_file", flush)
    result = train(small_config(*RUN_OVERRIDES, "train.train_steps=9"), workdir)
    assert result.steps == 9
    assert json.loads((workdir / "result.json").read_text())["steps"] == 9


def test_the_first_checkpoint_of_a_new_folder_warns_of_nothing(tmp_path, caplog):
    # A manager whose folder does not exist yet (no checkpoint written):
    # its first save makes the folder; no "deleted during the run" warning.
    variable = tf.Variable(1.0)
    folder = tmp_path / "checkpoints"
    manager = runs.CheckpointManager(
        tf.train.Checkpoint(value=variable), str(folder), max_to_keep=2
    )
    with caplog.at_level(logging.WARNING, logger="keras_transformer.runs"):
        runs.save_checkpoint(manager, 1)
        shutil.rmtree(folder)  # now a checkpoint is lost: that one warns
        runs.save_checkpoint(manager, 2)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "the folder was deleted" in warnings[0], warnings
    assert [Path(p).name for p in manager.checkpoints] == ["ckpt-2"]
