"""Faults that lose nothing: damaged checkpoints, a full disk, wrong paths.

A damaged checkpoint (truncated, empty or missing file) is skipped with a
message naming the file, and every reader (training's resume, translate,
evaluate, average-checkpoints) falls back to the newest intact one; only
`train`, which holds the run's lock, moves it aside as ``*.corrupt`` (never
deleted). The checkpoints are their files on disk and the records of
``checkpoints.json``: a deleted or garbled TensorFlow state file, or an
unreadable ``checkpoints.json``, loses nothing. A checkpoint write that
fails (a full disk) stops training with one line and leaves the previous
checkpoint the latest. Every path argument of the wrong kind is refused with one line.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli, runs
from keras_transformer.runs import (
    CheckpointDamagedError,
    CheckpointWriteError,
    RunFolder,
    checkpoint_paths,
    checkpoint_problem,
    checkpoint_step,
    recorded_checkpoints,
)
from keras_transformer.training import average_checkpoints, train
from keras_transformer.translation import load_translator
from tests.training.helpers import (
    REPO_ROOT,
    SHARED_RUN_OVERRIDES,
    SMALL_CONFIG,
    damage_file,
    holding_lock,
    small_classification_config,
    small_config,
    small_image_config,
    subprocess_env,
    write_config,
)

#: Three checkpoints (ckpt-3, ckpt-6, ckpt-9), no validation pass: the
#: settings of the session's shared runs (tests/conftest.py).
RUN_OVERRIDES = SHARED_RUN_OVERRIDES
DATA = "ckpt-9.data-00000-of-00001"


@pytest.fixture(scope="module")
def trained(shared_translation_run):
    """A finished tiny run with checkpoints at steps 3, 6 and 9 (read only)."""
    assert _names(shared_translation_run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    return shared_translation_run


@pytest.fixture
def run(trained, tmp_path):
    """A copy of the trained run that a test may damage."""
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


@pytest.fixture(scope="module")
def reviews(shared_reviews):
    """Synthetic reviews for the classification runs (those of the shared one)."""
    return shared_reviews


def _kind_config(kind: str, reviews: Path, *overrides: str):
    if kind == "translation":
        return small_config(*RUN_OVERRIDES, *overrides)
    if kind == "image":
        return small_image_config(*RUN_OVERRIDES, *overrides)
    return small_classification_config(reviews, *RUN_OVERRIDES, *overrides)


@pytest.fixture(scope="module")
def trained_classification(shared_classification_run):
    """The classification twin of `trained`: checkpoints at 3, 6 and 9."""
    assert _names(shared_classification_run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    return shared_classification_run


@pytest.fixture(scope="module")
def trained_image(shared_image_run):
    """The image twin of `trained`: checkpoints at 3, 6 and 9."""
    assert _names(shared_image_run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    return shared_image_run


@pytest.fixture(params=["translation", "classification", "image"])
def kind_run(request, tmp_path):
    """(kind, a copy of that kind's trained run that a test may damage)."""
    name = {"translation": "trained", "classification": "trained_classification"}
    name = name.get(request.param, "trained_image")
    copy = tmp_path / "run"
    shutil.copytree(request.getfixturevalue(name), copy)
    return request.param, copy


def _names(workdir: Path) -> list[str]:
    return [Path(p).name for p in checkpoint_paths(workdir / "checkpoints")]


def _weights_of(workdir: Path, name: str) -> list[np.ndarray]:
    folder = RunFolder(workdir)
    model = folder.build_model()
    runs.restore_checkpoint(model, str(folder.checkpoint_dir / name))
    return model.get_weights()


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _one_line_error(capsys, *names: str) -> str:
    """The one ``keras-transformer <command>: error: ...`` line, checked."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert len(lines) == 1, err
    start = err.index(lines[0])
    rest = err[start + len(lines[0]) :].strip()
    assert not rest, f"the error continues on more lines: {err}"
    for name in names:
        assert name in lines[0], err
    return lines[0]


# ------------------------------------------------------ damaged checkpoints
@pytest.mark.parametrize(
    "name, how, expected",
    [
        ("ckpt-9.index", "truncate", "is damaged"),
        ("ckpt-9.index", "empty", "is empty (0 bytes)"),
        (DATA, "truncate", "is damaged"),
        (DATA, "empty", "is empty (0 bytes)"),
        (DATA, "delete", "(its data file) is missing"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_and_is_kept(
    kind_run, name, how, expected, caplog
):
    _, run = kind_run
    checkpoints = run / "checkpoints"
    intact = _weights_of(run, "ckpt-6")
    size = damage_file(checkpoints / name, how)
    assert checkpoint_problem(checkpoints / "ckpt-9") is not None
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        model, _ = RunFolder(run).load()
    _assert_same(model.get_weights(), intact)
    # The message names the file and what is wrong with it.
    message = " ".join(r.getMessage() for r in caplog.records)
    named = checkpoints / name if how != "delete" else checkpoints / "ckpt-9.data-"
    assert str(named) in message and expected in message, message
    assert "left in place" in message
    # A reader holds no lock: it renames and deletes nothing.
    assert not list(checkpoints.glob("*.corrupt"))
    if how == "truncate":
        assert (checkpoints / name).stat().st_size == size // 2
    assert RunFolder(run).weights_step() == 6


@pytest.mark.parametrize("name", ["ckpt-9.index", DATA])
def test_train_resumes_from_the_newest_intact_checkpoint(
    kind_run, reviews, name, caplog
):
    kind, run = kind_run
    damage_file(run / "checkpoints" / name, "truncate")
    config = _kind_config(kind, reviews, "train.train_steps=12")
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        result = train(config, run, printer=None)
    assert result.initial_step == 6 and result.steps == 12
    message = " ".join(r.getMessage() for r in caplog.records)
    assert name in message and "does not match" not in message
    assert (run / "checkpoints" / f"{name}.corrupt").is_file()
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9", "ckpt-12"]
    for path in checkpoint_paths(run / "checkpoints"):
        assert checkpoint_problem(path) is None


def test_only_damaged_checkpoints_never_restart_silently_from_zero(kind_run, reviews):
    kind, run = kind_run
    for step in (3, 6, 9):
        damage_file(run / "checkpoints" / f"ckpt-{step}.index", "empty")
    config = _kind_config(kind, reviews)
    with pytest.raises(CheckpointDamagedError, match="Every checkpoint") as error:
        train(config, run, printer=None)
    assert "ckpt-3.index is empty" in str(error.value)
    assert len(list((run / "checkpoints").glob("*.corrupt"))) == 6
    # Again: the damaged files are still there, so it still refuses.
    with pytest.raises(CheckpointDamagedError, match="step 0"):
        train(config, run, printer=None)
    with pytest.raises(CheckpointDamagedError, match="only damaged files"):
        RunFolder(run).load()
    # With --force the run starts again from step 0; the damaged files stay.
    result = train(_kind_config(kind, reviews, "train.train_steps=3"), run, force=True)
    assert result.initial_step == 0 and result.steps == 3
    assert len(list((run / "checkpoints").glob("*.corrupt"))) == 6


def test_a_model_of_another_config_is_a_mismatch_not_damage(run):
    from keras_transformer.training import apply_overrides

    other = apply_overrides(small_config(*RUN_OVERRIDES), ["model.d_ff=128"])
    with pytest.raises(ValueError, match="does not match the model") as error:
        train(other, run, force=True, printer=None)
    assert "damaged" not in str(error.value)
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    assert not list((run / "checkpoints").glob("*.corrupt"))


def test_average_checkpoints_skips_a_damaged_one(run, caplog):
    damage_file(run / "checkpoints" / DATA, "truncate")
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        path = average_checkpoints(run, last=2)
    assert DATA in caplog.text and "left in place" in caplog.text
    info = json.loads(path.with_name("averaged.json").read_text())
    assert info["steps"] == [3, 6]
    assert (run / "checkpoints" / DATA).is_file()
    assert not list((run / "checkpoints").glob("*.corrupt"))


def test_an_output_file_never_replaces_a_file_the_command_reads(run, tmp_path, capsys):
    """``translate --input a.txt --output a.txt`` replaced the source file
    with its translations (and ``evaluate --hypotheses`` the references,
    and ``translate --output`` its ``--constraints-file``)."""
    source, reference = tmp_path / "source.txt", tmp_path / "reference.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    reference.write_text("2023-07-03\n")
    os.link(reference, tmp_path / "hard-link.txt")
    translate = ["translate", "--workdir", str(run), "--input", str(source)]
    evaluate = ["evaluate", "--workdir", str(run), "--source", str(source)]
    evaluate += ["--reference", str(reference), "--hypotheses"]
    score = ["score", "--workdir", str(run), "--source", str(source)]
    score += ["--target", str(reference), "--output"]
    cases = [
        ([*translate, "--output"], source, "--input"),
        (evaluate, tmp_path / "hard-link.txt", "--reference"),
        (score, tmp_path / "." / "source.txt", "--source"),
        ([*translate, "--prefix-file", str(reference), "--output"], reference, ""),
        ([*translate, "--constraints-file", str(reference), "--output"], reference, ""),
    ]
    cases[-2:] = [(argv, output, argv[-3]) for argv, output, _ in cases[-2:]]
    for argv, output, read in cases:
        assert cli.main([*argv, str(output)]) == 2, argv
        _one_line_error(capsys, f"{output} is also {read}", "Pass another")
    assert source.read_text() == "Montag, 3. Juli 2023\n"
    assert reference.read_text() == "2023-07-03\n"


def test_a_constraints_file_is_read_as_the_input_is(run, tmp_path, capsys):
    """A ``--constraints-file`` that is not UTF-8 was a bare "'utf-8' codec
    can't decode byte" naming no file; it is read as ``--input`` is: the
    same refusals naming the file, and lines split on newlines only."""
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    constraints = tmp_path / "constraints.txt"
    translate = ["translate", "--workdir", str(run), "--input", str(source)]
    translate += ["--constraints-file", str(constraints), "--no-progress"]
    for content, problem in [
        ("2023".encode("utf-16"), "is UTF-16 text, not UTF-8"),
        (b"2023-07-03 \xe9\n", "is not valid UTF-8 (line 1, byte 11)"),
    ]:
        constraints.write_bytes(content)
        assert cli.main(translate) in (1, 2)
        _one_line_error(capsys, f"{constraints} {problem}")
    # A line separator inside a phrase is no line break: one line for one
    # input line (it was read as two, and refused).
    constraints.write_text("2023\u2028-07\n", encoding="utf-8")
    assert cli.main([*translate, "--output", str(tmp_path / "out.txt")]) == 0
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 1


def test_an_average_of_no_intact_checkpoint_says_why(run, capsys):
    """``average-checkpoints`` of a run whose checkpoints are all damaged, or
    that has none yet, said "has 0 intact ([]). Average fewer (--last)",
    advice that cannot help."""
    average = ["average-checkpoints", "--workdir", str(run), "--last", "2"]
    for index in (run / "checkpoints").glob("ckpt-*.index"):
        index.write_bytes(b"")
    assert cli.main(average) == 2
    line = _one_line_error(capsys, "none of the 3 checkpoints in", "Restore them")
    assert "--last" not in line
    shutil.rmtree(run / "checkpoints")
    assert cli.main(average) == 2
    line = _one_line_error(capsys, "holds no checkpoint yet. Train the run first.")
    assert "--last" not in line


def test_an_average_is_never_written_into_an_export(run, exported):
    """`average_checkpoints(output=<export>/x.weights.h5)` wrote the average
    and its info file into the export folder, which `export --overwrite`
    replaces whole (the command line refused it; the library did not)."""
    before = sorted(p.relative_to(exported) for p in exported.rglob("*"))
    with pytest.raises(ValueError, match="lies in the SavedModel export"):
        average_checkpoints(run, last=2, output=exported / "x.weights.h5")
    assert sorted(p.relative_to(exported) for p in exported.rglob("*")) == before


def test_weights_of_an_image_run_are_refused_naming_no_empty_tokenizer(
    trained, trained_image
):
    """The refusal said "written by run <id> in <folder> (tokenizer ), but
    this folder is ...": an image run has no tokenizer to name."""
    folder, image_folder = runs.RunFolder(trained), runs.RunFolder(trained_image)
    image_weights = str(trained_image / "checkpoints" / "ckpt-9")
    with pytest.raises(runs.ForeignCheckpointError) as error:
        folder.restore(folder.build_model(), image_weights)
    message = str(error.value)
    image_run = image_folder.fingerprint()
    assert f"written by run {image_run.run_id} in {trained_image}, but" in message
    assert f"(tokenizer {folder.fingerprint().tokenizer[:12]})" in message
    assert "(tokenizer )" not in message and "\n" not in message


def test_weights_given_for_an_export_are_refused(exported, tmp_path, capsys):
    """``translate --workdir <export> --weights best`` translated with the
    export's own weights without a word; every command that reads a model
    now says that an export holds its weights."""
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    commands = [
        ["translate", "--workdir", str(exported), "--input", str(source)],
        ["score", "--workdir", str(exported), "--source", str(source)]
        + ["--target", str(source)],
        ["evaluate", "--workdir", str(exported), "--source", str(source)]
        + ["--reference", str(source)],
        ["export", "--workdir", str(exported), "--output", str(tmp_path / "x")],
    ]
    for argv in commands:
        assert cli.main([*argv, "--weights", "best"]) == 2, argv
        _one_line_error(capsys, f"--workdir {exported} is an export", "leave out")
    assert not (tmp_path / "x").exists()
    assert cli.main(commands[0]) == 0  # without --weights
    assert capsys.readouterr().out.strip()
    from keras_transformer.translation import Translator

    with pytest.raises(ValueError, match="is an export, which holds the weights"):
        Translator.load(exported, "average")


def test_a_run_folder_before_its_first_checkpoint_says_so(tmp_path, run, capsys):
    """A run refused while it read its data (or just started) holds only
    config.json: `translate` and `export` said "tokenizer/tokenizer.model not
    found. Pass the folder that SubwordTokenizer.save(directory) wrote"."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    small_config().save(fresh / "config.json")
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    commands = (
        ["translate", "--workdir", str(fresh), "--input", str(source)],
        ["export", "--workdir", str(fresh), "--output", str(tmp_path / "out")],
    )
    for argv in commands:
        assert cli.main(argv) == 1
        _one_line_error(
            capsys,
            f"{fresh} holds no trained model yet",
            "its training was refused or stopped before it wrote them. Train it "
            f"(keras-transformer train --workdir {fresh})",
        )
    # While a training holds the folder (it said "Wait for its first
    # checkpoint" whether one did or not).
    with holding_lock(fresh) as writer:
        assert cli.main(commands[0]) == 1
        _one_line_error(
            capsys,
            f"keras-transformer train (PID {writer.pid}) is starting its training",
            "Wait for its first checkpoint",
        )
    # Killed: the lock file still names it, and the process is gone.
    assert json.loads((fresh / "writer.lock").read_text())["pid"] == writer.pid
    assert cli.main(commands[0]) == 1
    _one_line_error(capsys, "its training was refused or stopped")
    # With the tokenizer learned, before the first checkpoint.
    shutil.copytree(run / "tokenizer", fresh / "tokenizer")
    assert cli.main(commands[0]) == 1
    _one_line_error(capsys, "holds no checkpoint yet: train first")


@pytest.mark.parametrize(
    "damage", ["folder deleted", "model deleted", "model cut", "model empty"]
)
def test_a_run_without_its_tokenizer_says_how_to_get_it_back(
    run, tmp_path, capsys, damage
):
    """The tokenizer of a run with checkpoints deleted or damaged: `translate`
    said "tokenizer/tokenizer.model not found. Pass the folder that
    SubwordTokenizer.save(directory) wrote", or "The bytes are not a valid
    SentencePiece model" naming no file. Each now names what is missing and
    the way back, which works: `train --workdir` learns the same tokenizer
    again (checked against the checkpoints). It trains no update: the run is
    finished, only its tokenizer is learned again and the test set scored."""
    folder, model = run / "tokenizer", run / "tokenizer" / "tokenizer.model"
    if damage == "folder deleted":
        shutil.rmtree(folder)
        expected = (
            f"{run} has checkpoints but no tokenizer ({folder} is missing)",
            f"keras-transformer train --workdir {run}`",
        )
    elif damage == "model deleted":
        model.unlink()
        expected = (f"{folder} holds tokenizer.json but no tokenizer.model",)
    else:
        model.write_bytes(model.read_bytes()[:100] if damage == "model cut" else b"")
        size = 100 if damage == "model cut" else 0
        expected = (f"{model} is damaged: its {size} bytes are not a SentencePiece",)
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    translate = ["translate", "--workdir", str(run), "--input", str(source)]
    assert cli.main(translate) == 1
    line = _one_line_error(capsys, *expected)
    if damage != "folder deleted":
        assert f"Restore {folder} from a copy" in line
        assert "learned again (`keras-transformer train --workdir <the run>`" in line
        shutil.rmtree(folder)  # what the line says
    assert cli.main(["train", "--workdir", str(run)]) == 0
    assert cli.main(translate) == 0
    assert capsys.readouterr().out.strip()


def test_weights_naming_no_checkpoint_list_the_runs_checkpoints(run, capsys):
    """``--weights <run>/checkpoints/ckpt-5`` (no such step) said "ckpt-5.index
    is missing ... restore the file from a backup", as if a file were lost."""
    source = run / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    for weights in (run / "checkpoints" / "ckpt-5", run / "ckpt-9"):
        argv = ["translate", "--workdir", str(run), "--input", str(source)]
        assert cli.main([*argv, "--weights", str(weights)]) == 1
        line = _one_line_error(capsys, "names no checkpoint", "ckpt-3, ckpt-6, ckpt-9")
        assert "backup" not in line
    # A file that is no weights (config.json) said "Cannot restore
    # config.json: config.json.index is missing ... restore it from a backup".
    argv = ["translate", "--workdir", str(run), "--input", str(source)]
    assert cli.main([*argv, "--weights", str(run / "config.json")]) == 1
    line = _one_line_error(capsys, "is a file but neither a .weights.h5", "ckpt-3")
    assert "backup" not in line


def test_a_checkpoint_removed_while_read_is_not_taken_for_a_mismatch(run, caplog):
    """``translate`` during a ``train`` with ``keep_checkpoints=1`` said "ckpt-N
    does not match the model built from config.json ... config.json was
    changed": the train had removed the checkpoint while it was read. A
    reader now reads the newest again, without calling it damaged."""
    folder = runs.RunFolder(run)
    model = folder.build_model()
    removals = {"left": 1}

    def restore(prefix: str) -> None:
        if removals["left"]:  # the train removes it while it is read...
            removals["left"] -= 1
            name, step = Path(prefix).name, runs.checkpoint_step(prefix)
            for file in runs.checkpoint_files(prefix):  # ...and writes a newer one
                file.rename(file.with_name(file.name.replace(name, f"ckpt-{step + 9}")))
        runs.restore_checkpoint(model, prefix)

    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        restored = runs.restore_newest_checkpoint(run / "checkpoints", restore)
    assert Path(restored).name == "ckpt-18"  # was ckpt-9 when first listed
    assert "damaged" not in caplog.text and "does not match" not in caplog.text
    # Removed every time: one line that says so, after READ_ATTEMPTS tries.
    removals["left"] = 3
    with pytest.raises(runs.CheckpointRemovedError, match="removed 3 times while"):
        runs.restore_newest_checkpoint(run / "checkpoints", restore)


def test_checkpoints_removed_while_averaging_are_replaced_by_the_newest(
    run, tmp_path, monkeypatch
):
    """``average-checkpoints --output elsewhere`` during a ``train`` of the run
    (which takes no lock) failed with "ckpt-N.index is missing... restore the
    file from a backup" when the train removed its oldest checkpoint: the
    newest are now chosen again; when they keep going, one line says why."""
    from keras_transformer.training import checkpoints as training_checkpoints

    original = training_checkpoints._restore_model
    read: list[str] = []

    def rotating(model, path, **kwargs):  # noqa: ANN001, ANN202
        read.append(Path(path).name)
        if len(read) == 1:  # a train removes its oldest checkpoint meanwhile
            for file in runs.checkpoint_files(run / "checkpoints" / "ckpt-6"):
                file.unlink()
        return original(model, path, **kwargs)

    monkeypatch.setattr(training_checkpoints, "_restore_model", rotating)
    path = average_checkpoints(run, last=2, output=tmp_path / "avg.weights.h5")
    assert read[0] == "ckpt-6" and read[-2:] == ["ckpt-3", "ckpt-9"]
    assert json.loads(path.with_name("avg.json").read_text())["steps"] == [3, 9]

    # A train that writes and removes faster than they are read, every time.
    aside = tmp_path / "aside"
    aside.mkdir()
    newest_intact = training_checkpoints._newest_intact

    def written_again(checkpoint_dir, count):  # noqa: ANN001, ANN202
        for file in aside.iterdir():
            file.rename(checkpoint_dir / file.name)
        return newest_intact(checkpoint_dir, count)

    def removed(model, path, **kwargs):  # noqa: ANN001, ANN202
        for file in runs.checkpoint_files(path):
            file.rename(aside / file.name)
        return original(model, path, **kwargs)

    monkeypatch.setattr(training_checkpoints, "_newest_intact", written_again)
    monkeypatch.setattr(training_checkpoints, "_restore_model", removed)
    with pytest.raises(ValueError, match=r"removed 3 times while they were read"):
        average_checkpoints(run, last=2, output=tmp_path / "avg2.weights.h5")


def test_average_checkpoints_averages_every_kind(kind_run, capsys, caplog):
    # The same command for translation, classification and image runs: the
    # run's own model, each weight the mean of the last checkpoints' values.
    kind, run = kind_run
    assert cli.main(["average-checkpoints", "--workdir", str(run), "--last", "2"]) == 0
    assert "averaged.weights.h5" in capsys.readouterr().out
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        model, _ = RunFolder(run).load(weights="average")
    assert "average-checkpoints" not in caplog.text  # of the newest checkpoints
    second, third = _weights_of(run, "ckpt-6"), _weights_of(run, "ckpt-9")
    averaged = model.get_weights()
    assert len(averaged) == len(second) == len(third)
    for value, a, b in zip(averaged, second, third, strict=True):
        np.testing.assert_allclose(value, (a + b) / 2, rtol=1e-6, atol=1e-7)
    info = json.loads((run / "averaged.json").read_text())
    assert info["steps"] == [6, 9], kind
    # An average written before the run trained on was loaded without a word.
    weights, record = run / "averaged.weights.h5", run / "averaged.json"
    kept = weights.read_bytes(), record.read_bytes()
    older = {"checkpoints": ["ckpt-3", "ckpt-6"], "steps": [3, 6]}
    runs.save_weights(model, weights, older, runs.weights_file_fingerprint(weights))
    try:
        with caplog.at_level(logging.WARNING, logger="keras_transformer"):
            RunFolder(run).load(weights="average")
    finally:
        weights.write_bytes(kept[0])
        record.write_bytes(kept[1])
    assert (
        "averages checkpoints up to step 6, but the run has trained to step 9 "
        "since: run `keras-transformer average-checkpoints --workdir"
    ) in caplog.text


@pytest.mark.parametrize(
    "command", ["translate", "evaluate", "average-checkpoints", "export"]
)
def test_cli_commands_fall_back_and_say_so(run, tmp_path, command, capsys, caplog):
    damage_file(run / "checkpoints" / DATA, "truncate")
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\nFreitag, 1. März 2024\n")
    argv = {
        "translate": [
            "--input",
            str(source),
            "--output",
            str(tmp_path / "out.txt"),
            "--beam-size",
            "1",
            "--no-progress",
        ],
        "evaluate": [
            "--source",
            str(source),
            "--reference",
            str(source),
            "--beam-size",
            "1",
            "--no-progress",
        ],
        "average-checkpoints": ["--last", "2"],
        "export": ["--output", str(tmp_path / "exported")],
    }[command]
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        status = cli.main([command, "--workdir", str(run), *argv])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert DATA in caplog.text and "left in place" in caplog.text
    # Commands that only read the run rename nothing (they hold no lock).
    assert (run / "checkpoints" / DATA).is_file()
    assert not list((run / "checkpoints").glob("*.corrupt"))
    if command == "translate":
        assert len((tmp_path / "out.txt").read_text().splitlines()) == 2
    if command == "export":
        assert list((tmp_path / "exported").rglob("saved_model.pb"))


def test_a_named_damaged_checkpoint_is_one_clear_error(run, tmp_path, capsys):
    damage_file(run / "checkpoints" / "ckpt-6.index", "truncate")
    weights = str(run / "checkpoints" / "ckpt-6")
    with pytest.raises(CheckpointDamagedError, match="ckpt-6.index is damaged"):
        load_translator(run, weights)
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    argv = ["--workdir", str(run), "--weights", weights, "--input", str(source)]
    status = cli.main(["translate", *argv])
    assert status == 1
    _one_line_error(capsys, "ckpt-6.index")
    # A checkpoint the user named is reported, not moved.
    assert (run / "checkpoints" / "ckpt-6.index").is_file()


# ---------------------------------------------- the checkpoint state file
def _state_file(run: Path) -> Path:
    return run / "checkpoints" / "checkpoint"


@pytest.mark.parametrize("how", ["delete", "garbage"])
def test_a_lost_state_file_resumes_from_the_newest_checkpoint(
    run, tmp_path, how, capsys
):
    # TensorFlow's `checkpoint` file is not what lists a run's checkpoints.
    if how == "delete":
        _state_file(run).unlink()
    else:
        _state_file(run).write_bytes(b"\x00garbage {{{ not a checkpoint state\n")
    newest = _weights_of(run, "ckpt-9")
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    model, _ = RunFolder(run).load()
    _assert_same(model.get_weights(), newest)
    assert RunFolder(run).weights_step() == 9
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    argv = ["--workdir", str(run), "--input", str(source), "--beam-size", "1"]
    assert cli.main(["translate", *argv, "--output", str(tmp_path / "out.txt")]) == 0
    assert "no checkpoint" not in capsys.readouterr().err

    # train resumes at ckpt-9, never from 0, and writes the state file anew:
    # its manager keeps train.keep_checkpoints=3 of the checkpoints on disk.
    steps = ("train.train_steps=12", "train.keep_checkpoints=3")
    result = train(small_config(*RUN_OVERRIDES, *steps), run, printer=None)
    assert (result.initial_step, result.steps) == (9, 12)
    assert _names(run) == ["ckpt-6", "ckpt-9", "ckpt-12"]
    state = tf.train.get_checkpoint_state(str(run / "checkpoints"))
    assert [Path(p).name for p in state.all_model_checkpoint_paths] == _names(run)
    recorded = json.loads((run / "checkpoints" / "checkpoints.json").read_text())
    assert recorded["checkpoints"] == ["ckpt-6", "ckpt-9", "ckpt-12"]


def test_a_checkpoint_never_recorded_is_found_and_kept(run):
    # A process killed while it read ckpt-9 back leaves its complete files,
    # recorded neither in checkpoints.json nor in TensorFlow's state file.
    checkpoints = run / "checkpoints"
    runs.forget_checkpoint(checkpoints, checkpoints / "ckpt-9")
    metadata_file = checkpoints / "checkpoints.json"
    metadata = json.loads(metadata_file.read_text())
    if "checkpoints" in metadata:
        metadata["checkpoints"].remove("ckpt-9")
    metadata_file.write_text(json.dumps(metadata))
    index = (checkpoints / "ckpt-9.index").read_bytes()
    assert "ckpt-9" in _names(run)
    result = train(small_config(*RUN_OVERRIDES, "train.train_steps=12"), run)
    assert result.initial_step == 9
    # It was recorded, not removed or written again.
    assert (checkpoints / "ckpt-9.index").read_bytes() == index
    assert "ckpt-9" in json.loads(metadata_file.read_text())["checkpoints"]
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9", "ckpt-12"]


@pytest.mark.parametrize("damage", ["garbled", "another run's"])
def test_a_garbled_checkpoints_json_is_one_warning_not_a_block(
    run, tmp_path, caplog, damage, request
):
    """Also one copied from another run folder (a file from another run),
    which blamed the run's own files: its tokenizer ("restore the tokenizer/
    folder of this run") or its config.json ("it was changed after
    training"), and `train --force` was refused even so."""
    metadata_file = run / "checkpoints" / "checkpoints.json"
    run_id = json.loads(metadata_file.read_text())["run_id"]
    if damage == "garbled":
        metadata_file.write_text('{"vocabulary_size": 2')
        expected = "not valid JSON"
    else:
        other = request.getfixturevalue("trained_classification")
        shutil.copy(other / "checkpoints" / "checkpoints.json", metadata_file)
        other_id = json.loads(metadata_file.read_text())["run_id"]
        expected = f"another run's (run {other_id} in {other}; the checkpoints"
    newest = _weights_of(run, "ckpt-9")
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    argv = ["--workdir", str(run), "--input", str(source), "--beam-size", "1"]
    with caplog.at_level(logging.WARNING, logger="keras_transformer"):
        model, _ = RunFolder(run).load()
        status = cli.main(["translate", *argv, "--output", str(tmp_path / "o.txt")])
    assert status == 0
    _assert_same(model.get_weights(), newest)
    warnings = [
        r.getMessage() for r in caplog.records if "checkpoints.json" in r.getMessage()
    ]
    assert len(warnings) == 1, warnings
    assert str(metadata_file) in warnings[0] and expected in warnings[0]
    assert "tokenizer" not in warnings[0]
    # train goes on from ckpt-9 and writes the file again, same run id.
    result = train(small_config(*RUN_OVERRIDES, "train.train_steps=12"), run)
    assert result.initial_step == 9
    assert json.loads(metadata_file.read_text())["run_id"] == run_id


# ----------------------------------------------------------------- full disk
def _full_disk(kind: str):
    def write(self, prefix, options=None):
        # Half a data file, then the disk is full.
        Path(f"{prefix}.data-00000-of-00001").write_bytes(b"\0" * 100)
        if kind == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device", prefix)
        raise tf.errors.ResourceExhaustedError(
            None, None, f"{prefix}.data-00000-of-00001; No space left on device"
        )

    return write


@pytest.mark.parametrize("kind", ["oserror", "tensorflow"])
def test_full_disk_stops_with_one_line_and_keeps_the_last_checkpoint(
    run, tmp_path, kind, monkeypatch, capsys
):
    before = _weights_of(run, "ckpt-9")
    monkeypatch.setattr(tf.train.Checkpoint, "_write", _full_disk(kind))
    config = small_config(*RUN_OVERRIDES, "train.train_steps=12")
    with pytest.raises(CheckpointWriteError) as error:
        train(config, run, printer=None)
    message = str(error.value)
    assert error.value.errno == errno.ENOSPC
    assert "ckpt-12" in message and "no space left" in message
    assert "ckpt-9 is intact and still the latest" in message
    assert "Free disk space" in message and "\n" not in message
    # Nothing of the failed write is left; ckpt-9 is intact and the latest.
    assert not list((run / "checkpoints").glob("ckpt-12*"))
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    assert checkpoint_problem(run / "checkpoints" / "ckpt-9") is None
    monkeypatch.undo()
    model, _ = RunFolder(run).load()
    _assert_same(model.get_weights(), before)

    # The command line: one line, exit status 1, no traceback.
    monkeypatch.setattr(tf.train.Checkpoint, "_write", _full_disk(kind))
    path = write_config(tmp_path, SMALL_CONFIG, name="config.json")
    argv = ["train", str(path), "--workdir", str(run)]
    for override in (*RUN_OVERRIDES, "train.train_steps=12"):
        argv += ["--set", override]
    assert cli.main(argv) == 1
    _one_line_error(capsys, "ckpt-12", "no space left")
    assert _names(run) == ["ckpt-3", "ckpt-6", "ckpt-9"]
    if kind == "oserror":
        # A first checkpoint: a run the same command starts over, said so
        # (it said "... of <folder>. no earlier checkpoint exists; ...
        # again to resume.").
        fresh = tmp_path / "fresh"
        with pytest.raises(CheckpointWriteError) as error:
            train(config, fresh, printer=None)
        message = str(error.value)
        assert ". No earlier checkpoint exists; nothing of the" in message
        assert message.endswith("again (it starts over: none to resume).")


# ------------------------------------------------------ paths of wrong kind
def _paths(tmp_path: Path) -> tuple[Path, Path]:
    file = tmp_path / "a_file.txt"
    file.write_text("x\n")
    folder = tmp_path / "a_folder"
    folder.mkdir()
    return file, folder


def _wrong_paths(tmp_path: Path) -> list[tuple[list[str], str]]:
    """(argv, what the one line must say) for every command's path arguments."""
    file, folder = _paths(tmp_path)
    config = write_config(tmp_path, SMALL_CONFIG, name="c.json")
    w = str(folder)
    return [
        (["train", str(config), "--workdir", str(file)], "is a file, not a folder"),
        (["train", str(folder), "--workdir", w], "is a folder, not a file"),
        (
            ["train", str(config), "--workdir", str(file / "run")],
            "cannot be created",
        ),
        (["translate", "--workdir", str(file)], "is a file, not a folder"),
        (["translate", "--workdir", str(tmp_path / "nope")], "does not exist"),
        (["translate", "--workdir", w, "--input", w], "is a folder, not a file"),
        (["translate", "--workdir", w, "--output", w], "is a folder, not a file"),
        (
            ["translate", "--workdir", w, "--weights", f"{w}/x.weights.h5"],
            "does not exist",
        ),
        (["evaluate", "--workdir", str(file)], "is a file, not a folder"),
        (
            ["evaluate", "--workdir", w, "--source", w, "--reference", str(file)],
            "is a folder, not a file",
        ),
        (
            ["evaluate", "--workdir", w, "--hypotheses", w, "--task", "dates"],
            "is a folder, not a file",
        ),
        (
            ["evaluate", "--workdir", w, "--log-dir", str(file), "--task", "dates"],
            "is a file, not a folder",
        ),
        (["export", "--workdir", str(file), "--output", "x"], "is a file, not a"),
        (["export", "--workdir", w, "--output", str(file)], "is a file, not a"),
        (["average-checkpoints", "--workdir", str(file)], "is a file, not a"),
        (
            ["average-checkpoints", "--workdir", w, "--output", w],
            "is a folder, not a file",
        ),
    ]


def test_every_path_argument_of_the_wrong_kind_is_one_true_line(tmp_path, capsys):
    for argv, expected in _wrong_paths(tmp_path):
        status = cli.main(argv)
        assert status in (1, 2), argv
        line = _one_line_error(capsys, expected)
        assert "--" in line or "config file" in line, line


def test_library_refuses_a_file_for_a_run_folder(tmp_path):
    file, _ = _paths(tmp_path)
    with pytest.raises(NotADirectoryError, match="is a file, not a run folder"):
        RunFolder(file)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RunFolder(tmp_path / "missing").check()
    with pytest.raises(NotADirectoryError, match="is a file"):
        load_translator(file)
    with pytest.raises(NotADirectoryError, match="is a file"):
        train(small_config(*RUN_OVERRIDES), file, printer=None)
    assert file.read_text() == "x\n"


def test_the_library_names_an_export_of_another_format_for_a_run(tmp_path):
    """`Translator.load` of a CTranslate2 export said it "holds no trained
    model yet ... Train it (keras-transformer train --workdir ...)", and of
    a LiteRT export that "config.json is missing": advice that loses the
    export. Now one line naming what the folder holds and what reads it; an
    empty folder's line is as before."""
    from keras_transformer.translation import Translator

    ctranslate2 = tmp_path / "ct2"
    ctranslate2.mkdir()
    (ctranslate2 / "config.json").write_text('{"layer_norm_epsilon": 1e-06}')
    (ctranslate2 / "model.bin").write_bytes(b"\0")
    (ctranslate2 / "keras_transformer.json").write_text("{}")
    litert = tmp_path / "lite"
    litert.mkdir()
    for name in ("litert.json", "model.tflite", "tokenizer.model"):
        (litert / name).write_text("{}")
    for folder, why, held in (
        (
            ctranslate2,
            "its config.json is a CTranslate2 export's",
            "config.json, keras_transformer.json, model.bin",
        ),
        (
            litert,
            "config.json is missing",
            "litert.json, model.tflite, tokenizer.model",
        ),
    ):
        for load in (Translator.load, lambda path: RunFolder(path).check()):
            with pytest.raises(FileNotFoundError) as error:
                load(folder)
            message = str(error.value)
            assert message.startswith(
                f"{folder} is not a training work directory: {why} (it holds {held})."
            )
            assert "translate --workdir" in message and "\n" not in message
            assert "Train it" not in message
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as error:
        Translator.load(empty)
    assert str(error.value) == (
        f"{empty} is not a training work directory: config.json is missing. "
        "Pass the --workdir of a `keras-transformer train` run."
    )


def test_a_folder_that_is_no_run_names_the_runs_it_holds(tmp_path):
    """``classify --workdir`` of an empty folder, or of the folder above a
    run, said it "is a translation export, not a classification one"; every
    loader now says that the folder is no run, and names the run folders
    inside it, the likely slip (the parent of the run given)."""
    from keras_transformer.export import ReviewClassifier
    from keras_transformer.translation import Translator

    empty, one, two = tmp_path / "empty", tmp_path / "one", tmp_path / "two"
    empty.mkdir()
    for run in (one / "run", two / "b", two / "a"):
        run.mkdir(parents=True)
        (run / "config.json").write_text("{}")  # what makes a folder a run
    (two / "notes.txt").write_text("mine")
    cases = [
        (empty, f"{empty} is not a training work directory: config.json is missing."),
        (
            one,
            f"{one} is not a training work directory, but its folder run/ is "
            f"one: pass --workdir {one / 'run'}.",
        ),
        (
            two,
            f"{two} is not a training work directory, but its folders a, b are: "
            f"pass one as --workdir, e.g. {two / 'a'}.",
        ),
    ]
    for folder, message in cases:
        for load in (Translator.load, ReviewClassifier.load):
            with pytest.raises(FileNotFoundError) as error:
                load(folder)
            assert str(error.value).startswith(message), error.value


@pytest.fixture
def locked_folder(tmp_path, monkeypatch):
    """A folder this process may not read, write or enter.

    `chmod 0` does that for a normal user; root (as in CI's containers)
    passes every permission check, so there the folder is locked by
    denying it in `os.access`, through which every permission check of the
    package goes.
    """
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        real_access = os.access

        def access(path, mode, *args, **kwargs):
            inside = Path(path).resolve().is_relative_to(locked.resolve())
            return False if inside else real_access(path, mode, *args, **kwargs)

        monkeypatch.setattr(os, "access", access)
    yield locked
    locked.chmod(0o755)


def test_unreadable_paths_are_one_line(locked_folder, capsys):
    assert cli.main(["translate", "--workdir", str(locked_folder)]) in (1, 2)
    _one_line_error(capsys, "permission denied")
    argv = ["train", "--workdir", str(locked_folder / "run")]
    assert cli.main(argv) in (1, 2)
    _one_line_error(capsys, "permission denied")


# ------------------------------------------------- killed while writing
CHILD = """
import sys
from keras_transformer.training import train
from tests.training.helpers import FAST_CHECKPOINTS, small_config

config = small_config(f"train.train_steps={sys.argv[2]}", *FAST_CHECKPOINTS)
train(config, sys.argv[1])
print("FINISHED", flush=True)
"""


def _start(workdir: Path, steps: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-u", "-c", CHILD, str(workdir), str(steps)],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _resumed_from(output: str) -> int:
    found = re.search(r"Resuming .* from step (\d+)", output)
    return int(found.group(1)) if found else 0


def _leftovers(directory: Path, listed: list[str]) -> bool:
    """Whether files of an unrecorded (interrupted) write are in `directory`."""
    names = {Path(p).name for p in listed}
    for path in directory.iterdir():
        stem = path.name.split(".")[0].removesuffix("_temp")
        if stem.startswith("ckpt-") and stem not in names:
            return True
    return False


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_loses_the_run(tmp_path):
    """20 SIGKILLs at random moments of a run that checkpoints every update.

    After each kill every listed checkpoint reads back whole, and the next
    start resumes from the newest of them (never from garbage, never from
    step 0 once a checkpoint existed). Prints the fault-matrix row.
    """
    workdir, rng = tmp_path / "run", random.Random(11)
    checkpoint_dir = workdir / "checkpoints"
    trials, interrupted_writes, expected = 20, 0, 0
    cut_writes: set[str] = set()  # checkpoints a kill cut before they were whole
    started = time.monotonic()
    for trial in range(trials):
        child = _start(workdir, 100_000)
        deadline = time.monotonic() + 180
        while True:
            paths = checkpoint_paths(checkpoint_dir) if checkpoint_dir.is_dir() else []
            if paths and checkpoint_step(paths[-1]) > expected:
                break
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < deadline, "no new checkpoint in 180 s"
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.25))
        child.kill()
        output = child.communicate()[0]
        assert _resumed_from(output) == expected, (trial, expected, output[-2000:])
        listed = checkpoint_paths(checkpoint_dir)
        assert listed, output[-2000:]
        # Only the write the kill cut may be incomplete: the newest listed
        # checkpoint, never recorded. Every other one reads back whole.
        recorded = recorded_checkpoints(checkpoint_dir)
        intact = [path for path in listed if checkpoint_problem(path) is None]
        cut = [path for path in listed if path not in intact]
        assert cut in ([], listed[-1:]), (trial, cut)
        assert not [path for path in cut if Path(path).name in recorded], cut
        cut_writes.update(Path(path).name for path in cut)
        interrupted_writes += _leftovers(checkpoint_dir, intact)
        assert intact and checkpoint_step(intact[-1]) > expected
        expected = checkpoint_step(intact[-1])
        print(
            f"trial {trial + 1}: resumed from the intact ckpt-{_resumed_from(output)}"
            f", killed; newest intact now ckpt-{expected}; interrupted writes "
            f"so far {interrupted_writes}; {time.monotonic() - started:.0f} s",
            flush=True,
        )
    child = _start(workdir, expected + 2)
    output = child.communicate(timeout=300)[0]
    assert child.returncode == 0 and "FINISHED" in output, output[-3000:]
    assert _resumed_from(output) == expected
    # Only the cut writes may have been moved aside; never a whole checkpoint.
    moved_aside = {path.name.split(".")[0] for path in checkpoint_dir.glob("*.corrupt")}
    assert moved_aside <= cut_writes, (moved_aside, cut_writes)
    print(
        f"\nSIGKILL during training with a checkpoint every update: {trials} "
        f"trials, {trials} survived (resumed from the newest listed checkpoint, "
        f"all listed checkpoints intact), {interrupted_writes} kills left files of "
        f"an interrupted write, 0 checkpoints lost; {time.monotonic() - started:.0f} s"
    )


# ------------------------------- user errors: one line, no traceback (issue 35)
def test_a_run_of_another_kind_is_one_line_naming_it(
    trained, trained_image, tmp_path, capsys
):
    """translate/score on an image run, complete on a translation run, an
    image run in --ensemble: exit 2, one line naming the folder and its kind
    (was an AttributeError traceback)."""
    from keras_transformer.translation import Translator

    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    pairs = tmp_path / "pairs.txt"
    pairs.write_text("Montag, 3. Juli 2023\t2023-07-03\n")
    image, text = str(trained_image), str(trained)
    cases = [
        (["translate", "--workdir", image, "--input", str(source)], "--workdir"),
        (["score", "--workdir", image, "--input", str(pairs)], "--workdir"),
        (
            [
                "translate",
                "--workdir",
                text,
                "--ensemble",
                image,
                "--input",
                str(source),
            ],
            "--ensemble",
        ),
    ]
    for argv, argument in cases:
        assert cli.main(argv) == 2, argv
        _one_line_error(
            capsys, f"{argument} {image} is an image run", "needs a translation run"
        )
    output = tmp_path / "grid.png"
    assert cli.main(["complete", "--workdir", text, "--output", str(output)]) == 2
    _one_line_error(capsys, f"--workdir {text} is a translation run", "image run")
    assert not output.exists()
    with pytest.raises(ValueError, match="kind 'image'.*not a translation run"):
        Translator.load(trained_image)


def test_complete_refuses_no_images_or_no_samples(trained_image, tmp_path, capsys):
    """`complete --samples 0` wrote a grid of given rows and originals, "0
    completions"; `--images 0` named the config's `train.test_samples`;
    `--seed -1` failed in numpy; `--given-rows 99` named `given_rows`;
    `--images 99999` and `--output grid.txt`, below, were not refused."""
    from keras_transformer.training.image_recipe import complete_run_images

    output = tmp_path / "grid.png"
    run = ["complete", "--workdir", str(trained_image), "--output", str(output)]
    for flag, what in (("--samples", "completions per image"), ("--images", "test")):
        assert cli.main([*run, flag, "0"]) == 2
        _one_line_error(capsys, f"{flag} 0: pass a positive number", what)
    # numpy's bare "expected non-negative integer".
    assert cli.main([*run, "--seed", "-1"]) == 2
    _one_line_error(capsys, "--seed -1: pass a seed of 0 or more")
    # Rows the run's images lack were refused in the Python argument's
    # words: "Received: given_rows=99. Pass e.g. given_rows=2 ...".
    assert cli.main([*run, "--given-rows", "99"]) == 2
    _one_line_error(capsys, "Received: --given-rows 99. Pass e.g. --given-rows 2")
    # More images than the test split holds: the grid held what there was,
    # and the command said it held all that were asked for.
    assert cli.main([*run, "--images", "99999"]) == 2
    _one_line_error(capsys, "images, fewer than --images 99999: pass at most ")
    # An ending that is no image type: Pillow's "unknown file extension: ",
    # after the completions were drawn.
    for name in ("grid.txt", "grid"):
        path = tmp_path / name
        argv = ["complete", "--workdir", str(trained_image), "--output", str(path)]
        assert cli.main(argv) == 2
        _one_line_error(capsys, f"{path} does not end in an image file type")
        assert not path.exists()
    assert not output.exists()
    with pytest.raises(ValueError, match="`samples` must be a positive integer"):
        complete_run_images(trained_image, output, samples=0)
    with pytest.raises(ValueError, match="`seed` must be a non-negative integer"):
        complete_run_images(trained_image, output, seed=-1)
    assert not output.exists()


def test_a_damaged_tokenizer_record_names_its_file(run, tmp_path, capsys):
    """A tokenizer.json that is not JSON: one line naming it (was a bare
    JSONDecodeError naming no file)."""
    record = run / "tokenizer" / "tokenizer.json"
    record.write_text('{"fingerprint": ')
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    assert cli.main(["translate", "--workdir", str(run), "--input", str(source)]) == 1
    _one_line_error(capsys, f"{record} is not valid JSON", "Restore")
    record.write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a JSON array, not an object"):
        load_translator(run)


def test_a_damaged_run_config_names_its_file(run, tmp_path, capsys):
    """A run's config.json that is not a JSON object: one line naming it and
    saying to restore it, for the readers of the run."""
    record = run / "config.json"
    record.write_text('{"model": ')
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    argv = ["translate", "--workdir", str(run), "--input", str(source)]
    assert cli.main(argv) != 0
    _one_line_error(capsys, f"{record} is not valid JSON", "restore it from a copy")
    record.write_text('"model"')
    with pytest.raises(ValueError, match="holds a JSON string, not an object"):
        RunFolder(run).load()


def test_an_output_file_never_writes_over_a_run_or_an_export(
    run, exported, tmp_path, capsys
):
    """``translate --output <run>/config.json`` replaced the run's settings
    with a translation; no output file of a command may now write over what
    a run holds, nor into an export folder."""
    source = tmp_path / "source.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    translate = ["translate", "--workdir", str(run), "--input", str(source)]
    evaluate = ["evaluate", "--workdir", str(run), "--max-sentences", "2"]
    cases = [
        ([*translate, "--output", str(run / "config.json")], "over config.json"),
        ([*translate, "--output", str(run / "checkpoints" / "x")], "into checkpoints/"),
        ([*evaluate, "--hypotheses", str(run / "result.json")], "over result.json"),
        ([*translate, "--output", str(exported / "export.json")], "SavedModel export"),
    ]

    def contents(folder: Path) -> dict:
        return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    # evaluate's TensorBoard folder (was written into an export folder).
    log_cases = [
        ([*evaluate, "--log-dir", str(exported)], "SavedModel export"),
        ([*evaluate, "--log-dir", str(exported / "logs")], "SavedModel export"),
        ([*evaluate, "--log-dir", str(run / "checkpoints")], "into checkpoints/"),
        ([*evaluate, "--log-dir", str(run / "tokenizer" / "x")], "into tokenizer/"),
    ]

    before, before_export = contents(run), contents(exported)
    for argv, words in cases:
        assert cli.main(argv) == 2, argv
        _one_line_error(capsys, f"{argv[-1]} ", words, "pass a file outside it")
    for argv, words in log_cases:
        assert cli.main(argv) == 2, argv
        _one_line_error(capsys, f"{argv[-1]} ", words, "pass a folder outside it")
    # evaluate --record NAME --records-dir FOLDER: the record's file
    # (--record config --records-dir <run> replaced the run's config.json),
    # and names and folders that were refused only after the evaluation.
    record = [*evaluate, "--record"]
    record_cases = [
        ([*record, "config", "--records-dir", str(run)], "over config.json", "file"),
        ([*record, "x", "--records-dir", str(run / "checkpoints")], "into", "folder"),
        ([*record, "x", "--records-dir", str(exported)], "SavedModel", "folder"),
        ([*record, "x", "--records-dir", str(source)], "is a file", "pass a folder"),
        ([*record, "../x", "--records-dir", str(tmp_path)], "not a record name", ""),
    ]
    for argv, words, remedy in record_cases:
        assert cli.main(argv) == 2, argv
        error = _one_line_error(capsys, "--record", words, remedy)
        assert "--records-dir" in error or "../x" in error, error
    assert not (tmp_path / "x.json").exists()
    # export --output: an export was written into a run's checkpoints/ or
    # tokenizer/, and into another export (an export that would hold one);
    # train --workdir: a run was trained inside these too.
    export = ["export", "--workdir", str(run), "--output"]
    train = ["train", str(REPO_ROOT / "configs" / "dates_tiny.json"), "--workdir"]
    folder_cases = [
        ([*export, str(run / "checkpoints" / "x")], "into checkpoints/"),
        ([*export, str(run / "tokenizer" / "x")], "into tokenizer/"),
        ([*export, str(exported / "x"), "--format", "ctranslate2"], "SavedModel"),
        ([*export, str(exported / "variables" / "x"), "--overwrite"], "SavedModel"),
        ([*train, str(run / "checkpoints" / "new_run")], "into checkpoints/"),
        ([*train, str(exported / "new_run")], "SavedModel"),
    ]
    # average-checkpoints and complete of an export said that config.json
    # was missing.
    for argv, holds_no in [
        (["average-checkpoints", "--workdir", str(exported)], "checkpoints"),
        (
            ["complete", "--workdir", str(exported), "--output", str(tmp_path / "x")],
            "test",
        ),
    ]:
        assert cli.main(argv) == 2
        _one_line_error(capsys, "is a SavedModel export", f"holds no {holds_no}")
    for argv, words in folder_cases:
        assert cli.main(argv) == 2, argv
        option = "--output" if argv[0] == "export" else "--workdir"
        _one_line_error(capsys, option, words, "pass a folder outside it")
    assert contents(run) == before and contents(exported) == before_export
    # The run's translations/ folder, and other names in it, stay free.
    for output in (run / "translations" / "mine.txt", run / "mine.txt"):
        assert cli.main([*translate, "--output", str(output)]) == 0
        assert output.read_text(encoding="utf-8").strip()
    # A log folder may lie in the run's logs/.
    log_dir = run / "logs" / "mine"
    assert cli.main([*evaluate, "--beam-size", "1", "--log-dir", str(log_dir)]) == 0
    assert any(p.name.startswith("events.out") for p in log_dir.rglob("*"))


def test_train_and_export_in_python_refuse_a_folder_in_a_run_or_an_export(
    run, exported
):
    """The command line refused these folders, but ``train(config,
    "<export>/new_run")`` in Python trained a run that the next ``export
    --overwrite`` deleted with the export, and ``export_run_as`` wrote into
    a run's checkpoints/."""
    from keras_transformer.export import export_run_as
    from keras_transformer.training import TrainConfig

    config = TrainConfig.load(REPO_ROOT / "configs" / "dates_tiny.json")
    cases = [
        (run / "checkpoints" / "new_run", "into checkpoints/ of the run"),
        (exported / "new_run", "lies in the SavedModel export"),
    ]
    for workdir, words in cases:
        with pytest.raises(ValueError, match=re.escape(words)):
            train(config, workdir)
        assert not workdir.exists()
    for output_dir, words in [
        (run / "tokenizer" / "x", "into tokenizer/ of the run"),
        (exported / "x", "lies in the SavedModel export"),
    ]:
        with pytest.raises(ValueError, match=re.escape(words)):
            export_run_as("ctranslate2", run, output_dir)
        assert not output_dir.exists()


def test_a_folder_in_place_of_the_writer_lock_says_what_to_do(run, capsys):
    """writer.lock made a folder: evaluate (which locks for its outputs) says
    what the path is and what to do (was "[Errno 21] Is a directory")."""
    lock = run / "writer.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    argv = ["evaluate", "--workdir", str(run), "--beam-size", "1"]
    assert cli.main([*argv, "--max-sentences", "2", "--no-progress"]) == 1
    line = _one_line_error(capsys, f"{lock} is a folder", "Remove or rename")
    assert "Errno" not in line


def test_a_stopped_translation_keeps_its_parts_and_the_same_command_goes_on(
    trained, tmp_path, capsys, monkeypatch
):
    """``translate --input BIG --output OUT`` wrote OUT only at the end: a
    Ctrl-C, a kill or a full disk after hours of translating lost them all.
    The lines are now translated in parts, each saved to OUT.partial when
    done, and the same command run again goes on after the saved parts."""
    import argparse
    import signal

    from keras_transformer.cli import CommandInterrupted
    from keras_transformer.cli import _parts as parts_module
    from keras_transformer.cli import translate as translate_command
    from keras_transformer.data.datasets import synthetic_dates
    from keras_transformer.files import FolderLockedError
    from keras_transformer.translation import Translator

    monkeypatch.setattr(parts_module, "CHUNK_LINES", 4)
    lines = list(synthetic_dates(10, seed=4).sources)
    source = tmp_path / "source.txt"
    source.write_text("".join(f"{line}\n" for line in lines))
    out = tmp_path / "out" / "translations.txt"
    partial = out.with_name("translations.txt.partial")
    command = ["--workdir", str(trained), "--weights", "last", "--batch-size", "1"]
    command += ["--input", str(source)]
    parser = argparse.ArgumentParser()
    translate_command.add_arguments(parser)
    translator = Translator.load(trained)
    expected = translator.translate(lines)
    assert len(expected) == 10 and any(expected)

    calls, stop_at = _stop_in_call(monkeypatch, "translate", signal.SIGINT)

    def translate_into(output: str, lines: list[str] = lines, *options: str) -> None:
        given = [*command, "--output", output, "--no-progress", *options]
        translate_command._translate_lines(
            parser.parse_args(given), translator, lines, {}
        )

    # Standard output gets each part as it is done: the same lines.
    capsys.readouterr()
    stop_at["call"] = None
    translate_into("-")
    assert capsys.readouterr().out.splitlines() == expected and calls == [4, 4, 2]
    # Stopped in the third part, on the command line (parts of 4 lines: at
    # least CHUNK_LINES, and 4 batches).
    stop_at["call"], calls[:] = 3, []
    assert cli.main(["translate", *command, "--output", str(out)]) == 130
    err = capsys.readouterr().err
    assert (
        f"Stopped by SIGINT after line 8 of the input, whose translations are in "
        f"{out}.partial. Run the same command again to go on from line 9." in err
    )
    assert not out.exists()
    assert partial.read_text().splitlines() == expected[:8]
    # A kill between a part's lines and its record: the extra lines are made
    # again.
    with open(partial, "a") as file:
        file.write("half of a part\n")
    stop_at["call"], calls[:] = None, []
    translate_into(str(out))
    assert calls == [2]  # lines 9 and 10 only
    assert "going on after line 8 of 10" in capsys.readouterr().err
    assert out.read_text().splitlines() == expected
    assert sorted(p.name for p in out.parent.iterdir()) == ["translations.txt"]
    # A partial output of another command (another input) is started again.
    stop_at["call"], calls[:] = 2, []
    with pytest.raises(CommandInterrupted):
        translate_into(str(out))
    assert partial.read_text().splitlines() == expected[:4]
    stop_at["call"], calls[:] = None, []
    others = [line.replace("1", "2") for line in lines]
    translate_into(str(out), others)
    assert calls == [4, 4, 2]
    assert "held the translations of another command" in capsys.readouterr().err
    assert out.read_text().splitlines() == translator.translate(others)
    # One writer at a time: the output's lock is released after a stop.
    assert not out.with_name(".translations.txt.lock").exists()
    lock_file = out.with_name(".translations.txt.lock")
    with (
        holding_lock(out, lock_file=lock_file),
        pytest.raises(FolderLockedError) as error,
    ):
        translate_into(str(out))
    assert f"{out} is being written by keras-transformer train" in str(error.value)
    assert "or use another output file." in str(error.value)
    # An output inside the run folder is no change of the model.
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    inside = run / "hypotheses.txt"
    stop_at["call"], calls[:] = 2, []
    with pytest.raises(CommandInterrupted):
        translate_into(str(inside), lines, "--workdir", str(run))
    # Nor is what `evaluate` writes into it meanwhile (its hypotheses and
    # TensorBoard scores).
    for written in ("translations/test.beam4.last.txt", "logs/evaluate/events"):
        (run / written).parent.mkdir(exist_ok=True)
        (run / written).write_text("written by evaluate\n")
    stop_at["call"], calls[:] = None, []
    translate_into(str(inside), lines, "--workdir", str(run))
    assert calls == [4, 2] and inside.read_text().splitlines() == expected


def _stop_in_call(
    monkeypatch: pytest.MonkeyPatch, method: str, signum: int
) -> tuple[list[int], dict[str, int | None]]:
    """Counts the calls of `Translator.<method>` and stops one with `signum`
    (`CommandInterrupted`, as the command's signal handler raises it).

    Returns the sizes of the calls so far (the length of each call's first
    argument) and ``{"call": N}``: the call that is stopped (first: 3; None
    for none), for the test to change.
    """
    from keras_transformer.cli import CommandInterrupted
    from keras_transformer.translation import Translator

    calls: list[int] = []
    stop_at: dict[str, int | None] = {"call": 3}
    original = getattr(Translator, method)

    def counted(translator, first, *args, **kwargs):
        calls.append(len(first))
        if len(calls) == stop_at["call"]:
            raise CommandInterrupted(signum)
        return original(translator, first, *args, **kwargs)

    monkeypatch.setattr(Translator, method, counted)
    return calls, stop_at


def test_a_stopped_score_keeps_its_parts_and_the_same_command_goes_on(
    trained, tmp_path, capsys, monkeypatch
):
    """``score --output OUT`` wrote OUT only at the end, as ``translate`` did:
    the pairs are now scored in parts, each saved to OUT.partial when done,
    and the same command run again goes on after the saved parts."""
    import signal

    from keras_transformer.cli import _parts as parts_module
    from keras_transformer.cli import score as score_command
    from keras_transformer.data.datasets import synthetic_dates
    from keras_transformer.translation import Translator

    monkeypatch.setattr(parts_module, "CHUNK_LINES", 4)
    dates = synthetic_dates(10, seed=5)
    sources, targets = tmp_path / "sources.txt", tmp_path / "targets.txt"
    sources.write_text("".join(f"{line}\n" for line in dates.sources))
    targets.write_text("".join(f"{line}\n" for line in dates.targets))
    translator = Translator.load(trained, "last", batch_size=1)
    expected = score_command._score_lines(
        translator.score(list(dates.sources), list(dates.targets))
    )
    out = tmp_path / "scores.txt"
    command = ["score", "--workdir", str(trained), "--weights", "last"]
    command += ["--batch-size", "1", "--source", str(sources)]
    command += ["--target", str(targets), "--output", str(out)]

    calls, stop_at = _stop_in_call(monkeypatch, "score", signal.SIGTERM)
    capsys.readouterr()
    assert cli.main(command) == 143
    assert (
        "keras-transformer score: Stopped by SIGTERM after line 8 of the input, "
        f"whose scores are in {out}.partial. Run the same command again to go "
        "on from line 9." in capsys.readouterr().err
    )
    assert not out.exists()
    partial = out.with_name("scores.txt.partial")
    assert partial.read_text().splitlines() == expected[:8]
    stop_at["call"], calls[:] = None, []
    assert cli.main(command) == 0
    assert calls == [2]  # pairs 9 and 10 only
    err = capsys.readouterr().err
    assert "going on after line 8 of 10: the scores" in err
    assert "2/2 pairs" in err  # the progress of what is left (files given)
    assert out.read_text().splitlines() == expected
    assert sorted(p.name for p in tmp_path.iterdir() if "scores" in p.name) == [
        "scores.txt"
    ]
    # Other targets are another command: scored from the first pair.
    stop_at["call"], calls[:] = 2, []
    assert cli.main(command) == 143
    assert "after line 4 of the input" in capsys.readouterr().err
    targets.write_text("".join(f"{line}!\n" for line in dates.targets))
    stop_at["call"], calls[:] = None, []
    assert cli.main([*command, "--no-progress"]) == 0
    assert calls == [4, 4, 2]
    err = capsys.readouterr().err
    assert "held the scores of another command" in err and " pairs " not in err
    assert out.read_text().splitlines() != expected
    assert len(out.read_text().splitlines()) == 10


def test_a_stopped_evaluation_keeps_its_parts_and_the_same_command_goes_on(
    run, tmp_path, capsys, monkeypatch
):
    """``evaluate`` translated the whole test set and wrote its translations
    at the end: a stop lost them all. They are now saved in parts as they
    are made (into the run folder, under its writer lock), the same command
    run again goes on after them, and its scores are those of an evaluation
    that was never stopped."""
    import signal

    from keras_transformer.cli import _parts as parts_module
    from keras_transformer.data.datasets import synthetic_dates

    monkeypatch.setattr(parts_module, "CHUNK_LINES", 4)
    dates = synthetic_dates(10, seed=6)
    sources, references = tmp_path / "sources.txt", tmp_path / "references.txt"
    sources.write_text("".join(f"{line}\n" for line in dates.sources))
    references.write_text("".join(f"{line}\n" for line in dates.targets))
    command = ["evaluate", "--workdir", str(run), "--weights", "last"]
    command += ["--beam-size", "2", "--batch-size", "1", "--json"]
    command += ["--source", str(sources), "--reference", str(references)]
    saved = run / "translations" / "sources.txt.beam2.last.txt"
    partial = saved.with_name(saved.name + ".partial")

    # Never stopped (its translations elsewhere: the same command otherwise).
    whole = tmp_path / "whole.txt"
    assert cli.main([*command, "--hypotheses", str(whole)]) == 0
    expected = json.loads(capsys.readouterr().out)
    expected_lines = whole.read_text().splitlines()
    assert len(expected_lines) == 10 and any(expected_lines)
    assert expected["chrf"] > 0  # scores that a lost line would change

    calls, stop_at = _stop_in_call(monkeypatch, "translate", signal.SIGTERM)
    assert cli.main(command) == 143
    assert (
        "keras-transformer evaluate: Stopped by SIGTERM after sentence 8 of the "
        f"test set, whose translations are in {partial}. Run the same command "
        "again to go on from sentence 9." in capsys.readouterr().err
    )
    assert not saved.exists()
    assert partial.read_text().splitlines() == expected_lines[:8]

    # While another command writes the run folder, the scores are complete
    # (the rest translated in memory) and the partial output stays as it was.
    stop_at["call"], calls[:] = None, []
    with holding_lock(run):
        assert cli.main(command) == 0
    assert calls == [10]
    captured = capsys.readouterr()
    assert f"were not saved to {saved}" in captured.err
    printed = json.loads(captured.out)
    for key in ("bleu", "chrf", "exact_match", "num_sentences"):
        assert printed[key] == expected[key], key
    assert partial.read_text().splitlines() == expected_lines[:8]

    # The same command goes on after sentence 8.
    calls[:] = []
    assert cli.main(command) == 0
    assert calls == [2]
    captured = capsys.readouterr()
    assert "going on after sentence 8 of 10: the translations" in captured.err
    printed = json.loads(captured.out)
    for key in ("bleu", "chrf", "exact_match", "num_sentences", "translations"):
        assert printed[key] == expected[key], key
    assert printed["hypotheses_path"] == str(saved)
    assert saved.read_text().splitlines() == expected_lines
    assert sorted(path.name for path in saved.parent.iterdir()) == [saved.name]


def test_an_evaluation_goes_on_from_kept_translations_only_one_per_sentence(
    tmp_path, monkeypatch
):
    """Kept translations that are not one line per sentence (a translation
    holding a line feed, or a damaged file of the same size) are made again
    for the scores, instead of shifting every later translation against its
    reference. A stand-in translator: what is tested is the order of the
    parts, not the model."""
    import argparse
    import signal

    from keras_transformer.cli import CommandInterrupted
    from keras_transformer.cli import _parts as parts_module
    from keras_transformer.cli import evaluate as evaluate_command

    monkeypatch.setattr(parts_module, "CHUNK_LINES", 4)
    sources = [f"sentence {number}" for number in range(10)]

    class Translator:
        cut_lines: list[int] = []

        def __init__(self, stop_at: int | None = None) -> None:
            self.calls: list[int] = []
            self.stop_at = stop_at

        def translate(self, lines, progress=False):
            self.calls.append(len(lines))
            if len(self.calls) == self.stop_at:
                raise CommandInterrupted(signal.SIGINT)
            return [line.upper() for line in lines]

    parser = argparse.ArgumentParser()
    evaluate_command.add_arguments(parser)
    model = tmp_path / "model"
    model.mkdir()
    args = parser.parse_args(["--workdir", str(model), "--batch-size", "1"])
    saved = tmp_path / "hypotheses.txt"

    def evaluate(translator: Translator) -> list[str]:
        output = evaluate_command._Output("the translations", saved, "", True)
        translations, ok = evaluate_command._translate_test_set(
            args, translator, sources, output
        )
        assert ok
        return translations

    with pytest.raises(CommandInterrupted):
        evaluate(Translator(stop_at=3))
    partial = tmp_path / "hypotheses.txt.partial"
    kept = partial.read_bytes()
    assert kept.decode().splitlines() == [line.upper() for line in sources[:8]]
    # The same bytes, one more line.
    partial.write_bytes(kept.replace(b" ", b"\n", 1))
    translator = Translator()
    assert evaluate(translator) == [line.upper() for line in sources]
    assert translator.calls == [8, 2]  # the 8 made again, then the rest
