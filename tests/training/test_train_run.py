"""train() end to end on tiny dates: outputs, TensorBoard, checkpoints, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from keras_transformer.data import SubwordTokenizer, synthetic_dates
from keras_transformer.schedules import NoamSchedule
from keras_transformer.training import (
    TrainingDivergedError,
    apply_overrides,
    average_checkpoints,
    checkpoint_paths,
    load_trained_model,
    train,
)
from keras_transformer.training.loop import ConfigMismatchError
from keras_transformer.training.pipeline import (
    learn_tokenizer,
    load_task,
    training_dataset,
)
from tests.training.helpers import small_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One short run: 6 updates in 2 epochs of 3, validation (and attention
    images) after each."""
    workdir = tmp_path_factory.mktemp("run")
    config = small_config("train.attention_images=true")
    result = train(config, workdir, printer=None)
    return config, workdir, result


def test_run_outputs(run):
    config, workdir, result = run
    assert result.steps == 6 and result.initial_step == 0
    expected_rate = NoamSchedule(
        config.model.d_model, config.model.optimizer.warmup_steps
    )(6)
    np.testing.assert_allclose(result.learning_rate, float(expected_rate), rtol=1e-6)
    assert (workdir / "config.json").is_file()
    assert SubwordTokenizer.load(workdir / "tokenizer").vocabulary_size == 120
    assert [Path(p).name for p in checkpoint_paths(workdir / "checkpoints")] == [
        "ckpt-3",
        "ckpt-6",
    ]
    assert (workdir / "best.weights.h5").is_file()
    assert len(result.history["loss"]) == 2 and "val_bleu" in result.history
    evaluation = result.evaluation
    assert evaluation.num_sentences == 8 and evaluation.split == "test"
    assert evaluation.bleu_signature.startswith("nrefs:1|case:mixed")
    assert "chrF" not in evaluation.chrf_signature  # the signature, not a score
    assert len(evaluation.translations) == 8
    saved = json.loads((workdir / "result.json").read_text())
    assert saved["steps"] == 6 and len(saved["evaluation"]["translations"]) == 2


def test_the_logged_scalars_and_training_time_of_a_run(run, tmp_path):
    # The readers the notebooks use: a run's learning-rate curve is Eq. 7 at
    # every logged step; its training time is positive and below the wall
    # time of this test module; an unknown tag or folder reads as empty.
    from keras_transformer.runs import logged_scalars, logged_training_seconds

    config, workdir, _ = run
    steps, rates = logged_scalars(workdir / "logs" / "train", "learning_rate")
    assert steps and steps == sorted(steps) and steps[-1] == 6
    schedule = NoamSchedule(config.model.d_model, config.model.optimizer.warmup_steps)
    np.testing.assert_allclose(
        rates, [float(schedule(step)) for step in steps], rtol=1e-5
    )
    assert logged_scalars(workdir / "logs" / "train", "no_such_tag") == ([], [])
    seconds = logged_training_seconds(workdir / "logs" / "train")
    assert 0 < seconds < 600
    assert logged_training_seconds(tmp_path) == 0


def test_logged_scalars_reads_every_point_of_a_long_curve(tmp_path):
    # TensorBoard's accumulator keeps a random sample of 10 points per tag
    # unless told otherwise; a curve of 240 summaries must come back whole.
    from keras_transformer.runs import logged_scalars

    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        for step in range(50, 12_001, 50):
            tf.summary.scalar("bits_per_dim", 10_000.0 / step, step=step)
    writer.close()
    steps, values = logged_scalars(tmp_path, "bits_per_dim")
    assert steps == list(range(50, 12_001, 50))
    np.testing.assert_allclose(values, [10_000.0 / step for step in steps], rtol=1e-6)


def test_logged_scalars_of_a_resumed_run_are_the_points_tensorboard_shows(tmp_path):
    """A run killed after update 10 and resumed from its checkpoint at
    update 5 logs updates 6-10 again (a second event file); a validation
    redone logs its step again. TensorBoard's data server shows the later
    points (a step that goes back drops the earlier points from it on);
    `logged_scalars` returned both, and the notebooks' curves zigzagged."""
    from keras_transformer.runs import logged_scalars

    def log(points: list[tuple[int, float]]) -> None:
        writer = tf.summary.create_file_writer(str(tmp_path))
        with writer.as_default():
            for step, value in points:
                tf.summary.scalar("loss", value, step=step)
        writer.close()

    log([(step, float(step)) for step in range(1, 11)])
    log([(step, 100.0 + step) for step in range(6, 13)])
    steps, values = logged_scalars(tmp_path, "loss")
    assert steps == list(range(1, 13))
    assert values == [1.0, 2.0, 3.0, 4.0, 5.0, *(100.0 + s for s in range(6, 13))]
    log([(12, 7.0)])  # the validation of update 12, redone
    assert logged_scalars(tmp_path, "loss") == (steps, [*values[:-1], 7.0])
    log([(8, 50.0)])  # resumed from update 7: the points past it are orphans
    assert logged_scalars(tmp_path, "loss") == (steps[:8], [*values[:7], 50.0])


def _events(directory: Path) -> EventAccumulator:
    """Every event of one log folder, loaded (no sampling of tensors)."""
    accumulator = EventAccumulator(str(directory), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def _tags(directory: Path) -> dict[str, set[str]]:
    """Tags by plugin (scalars, images, text, hparams) in one log folder."""
    accumulator = _events(directory)
    found: dict[str, set[str]] = {}
    for tag in accumulator.Tags()["tensors"]:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        found.setdefault(plugin, set()).add(tag)
    return found


def test_tensorboard_events(run):
    _, workdir, _ = run
    logs = workdir / "logs"
    train_tags = _tags(logs / "train")
    assert {"loss", "token_accuracy", "perplexity", "learning_rate"} <= train_tags[
        "scalars"
    ]
    # One writer per quantity: no keras.callbacks.TensorBoard epoch_* copies.
    assert not any(tag.startswith("epoch_") for tag in train_tags["scalars"])
    assert "data/skipped" in train_tags["text"]
    validation_tags = _tags(logs / "validation")
    assert {
        "loss",
        "token_accuracy",
        "perplexity",
        "bleu",
        "chrf",
        "exact_match",
    } == validation_tags["scalars"]
    assert "attention/encoder_decoder/layer_0" in validation_tags["images"]
    assert "translation" in validation_tags["text"]
    assert {"bleu", "chrf"} <= _tags(logs / "test")["scalars"]
    # The HParams session is the run of its metrics (see test_monitoring.py).
    hparams = _tags(logs / "validation")["hparams"]
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= hparams

    # Summaries are indexed by optimizer step; the image is a real RGBA picture.
    accumulator = _events(logs / "validation")
    assert [e.step for e in accumulator.Tensors("bleu")] == [3, 6]
    image = accumulator.Tensors("attention/encoder_decoder/layer_0")[-1]
    width, height = (int(v) for v in tf.make_ndarray(image.tensor_proto)[:2])
    assert width > 50 and height > 50


def test_hparams_record_the_config(run):
    from tensorboard.plugins.hparams import plugin_data_pb2

    config, workdir, _ = run
    accumulator = _events(workdir / "logs" / "validation")
    content = accumulator.SummaryMetadata(
        "_hparams_/session_start_info"
    ).plugin_data.content
    data = plugin_data_pb2.HParamsPluginData.FromString(content)
    hparams = data.session_start_info.hparams
    # Integers are written as text: TensorBoard prints numbers as "32.000".
    assert hparams["model.d_model"].string_value == str(config.model.d_model)
    assert hparams["model.optimizer.beta_2"].number_value == 0.98
    assert hparams["data.task"].string_value == "dates"


def test_resume_a_finished_run_for_more_steps(run, tmp_path):
    config, workdir, _ = run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    # Leaving the attention images out is a change a resumed run accepts.
    longer = apply_overrides(
        config,
        [
            "train.train_steps=9",
            "train.evaluate_with=best",
            "train.attention_images=false",
        ],
    )
    result = train(longer, copy, printer=None)
    assert result.initial_step == 6 and result.steps == 9
    # The validation at update 9 logged its scores but drew no image.
    accumulator = _events(copy / "logs" / "validation")
    assert [e.step for e in accumulator.Tensors("bleu")] == [3, 6, 9]
    images = accumulator.Tensors("attention/encoder_decoder/layer_0")
    assert [e.step for e in images] == [3, 6]
    assert result.history["loss"] and len(result.history["loss"]) == 1
    # The final evaluation used the weights with the best validation BLEU.
    best = json.loads((copy / "best.json").read_text())
    assert best["step"] in (3, 6, 9) and result.best_validation_score == best["bleu"]
    assert [Path(p).name for p in checkpoint_paths(copy / "checkpoints")] == [
        "ckpt-3",
        "ckpt-6",
        "ckpt-9",
    ]
    rate = NoamSchedule(config.model.d_model, config.model.optimizer.warmup_steps)(9)
    np.testing.assert_allclose(result.learning_rate, float(rate), rtol=1e-6)


def test_a_damaged_best_json_stops_a_resume_in_one_line(run, tmp_path, capsys):
    """best.json holds the value a resumed run must beat to replace the best
    weights. The weights file carries that record too: a garbled best.json
    beside it is written anew from it. Beside a weights file without one, a
    garbled best.json is refused naming it and the fix (was a bare
    JSONDecodeError), before an update; doing what it says resumes."""
    import h5py

    from keras_transformer.cli import main
    from keras_transformer.runs import weights as weights_module
    from keras_transformer.training.callbacks import BestWeights

    config, workdir, _ = run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    best, weights = copy / "best.json", copy / "best.weights.h5"
    whole = json.loads(best.read_text())
    best.write_text('{"bleu": 12.5, "step"')
    kept = BestWeights(None, weights, "bleu")
    assert (kept.value, kept.step) == (whole["bleu"], whole["step"])
    assert json.loads(best.read_text()) == whole
    with h5py.File(weights, "r+") as file:  # as written before it had a record
        del file.attrs[weights_module.WEIGHTS_INFO_ATTRIBUTE]
        file.attrs[weights_module.FILE_CHECKSUM_ATTRIBUTE] = (
            weights_module._file_digest(file)
        )
    kept = weights.read_bytes()
    longer = apply_overrides(config, ["train.train_steps=9"])
    best.write_text('{"bleu": 12.5, "step"')
    remedy = "delete it and best.weights.h5"
    with pytest.raises(ValueError, match=f"best.json is not valid JSON.*{remedy}"):
        train(longer, copy, printer=None)
    for value, shown in (('"high"', "'high'"), ("NaN", "nan")):
        best.write_text(f'{{"bleu": {value}, "step": 3}}')
        with pytest.raises(ValueError, match=f"bleu={shown} at step=3, not a finite"):
            train(longer, copy, printer=None)
    config_file = tmp_path / "config.json"
    config_file.write_text(longer.to_json(), encoding="utf-8")
    assert main(["train", str(config_file), "--workdir", str(copy)]) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in err and len(lines) == 1, err
    assert str(best) in lines[0] and remedy in lines[0]
    names = [Path(p).name for p in checkpoint_paths(copy / "checkpoints")]
    assert names == ["ckpt-3", "ckpt-6"] and weights.read_bytes() == kept
    best.unlink()
    weights.unlink()
    result = train(longer, copy, printer=None)
    assert result.initial_step == 6 and result.steps == 9
    assert json.loads(best.read_text())["step"] == 9 and weights.is_file()


def test_changed_config_is_refused(run):
    _, workdir, _ = run
    with pytest.raises(ConfigMismatchError, match="model.d_ff: 64 -> 128"):
        train(small_config("model.d_ff=128"), workdir, printer=None)


@pytest.mark.parametrize("train_steps", [6, 3])
def test_a_run_with_nothing_left_to_train_says_so(run, tmp_path, train_steps):
    """A finished run trained again (or given fewer updates than it made)
    said "Training 6 updates ..." and then evaluated, training none."""
    config, workdir, _ = run
    copy = shutil.copytree(workdir, tmp_path / "run")
    printed: list[str] = []
    fewer = apply_overrides(config, [f"train.train_steps={train_steps}"])
    result = train(fewer, copy, printer=printed.append)
    assert result.initial_step == 6
    said = "all the 6" if train_steps == 6 else "more than the 3"
    assert (
        f"The run has made 6 updates, {said} planned: nothing is left to train"
        in "\n".join(printed)
    ), printed
    assert sorted(p.name for p in (copy / "checkpoints").glob("*.index")) == [
        p.name for p in sorted((workdir / "checkpoints").glob("*.index"))
    ]


def test_tokenizer_that_does_not_match_the_checkpoint_is_refused(run, tmp_path):
    config, workdir, _ = run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    other = synthetic_dates(300, seed=99)
    stranger = SubwordTokenizer.train(
        [*other.targets, *other.sources], vocabulary_size=120, seed=5
    )
    assert stranger.fingerprint != SubwordTokenizer.load(copy / "tokenizer").fingerprint
    stranger.save(copy / "tokenizer")
    with pytest.raises(ValueError, match="does not match the checkpoint") as error:
        train(config, copy, printer=None)
    assert "fingerprint" in str(error.value)
    # The run's advice only: it also told a command-line user to call
    # SubwordTokenizer.load(<its directory>).
    assert "restore the tokenizer/ folder of this run" in str(error.value)
    assert "SubwordTokenizer" not in str(error.value)
    with pytest.raises(ValueError, match="fingerprint"):
        load_trained_model(copy)


def test_half_written_tokenizer_is_learned_again_before_a_checkpoint(tmp_path, caplog):
    """A cut tokenizer.model and no tokenizer.json (a full disk, old version)."""
    from keras_transformer.training.loop import _tokenizer

    config = small_config()
    data = load_task(config.data, seed=config.train.seed)
    expected = learn_tokenizer(data.train, config.data, seed=config.train.seed)
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    proto = expected.model_proto
    (folder / "tokenizer.model").write_bytes(proto[: len(proto) // 2])
    said = []
    with caplog.at_level("WARNING"):
        tokenizer = _tokenizer(
            config, tmp_path, data.train, tf.distribute.get_strategy(), said.append
        )
    assert "holds an incomplete tokenizer" in caplog.text
    assert "learned again" in caplog.text
    assert said == ["Learning the tokenizer (120 pieces)."]
    assert tokenizer.fingerprint == expected.fingerprint  # deterministic
    assert SubwordTokenizer.load(folder).fingerprint == expected.fingerprint


def test_half_written_tokenizer_of_a_run_with_checkpoints_is_refused(run, tmp_path):
    config, workdir, _ = run
    copy = tmp_path / "run"
    shutil.copytree(workdir, copy)
    (copy / "tokenizer" / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError) as error:
        train(config, copy, printer=None)
    message = str(error.value)
    assert "holds tokenizer.model but no tokenizer.json" in message
    assert "restore the folder" in message and "\n" not in message
    assert not (copy / "tokenizer" / "tokenizer.json").exists()  # not relearned


def test_average_checkpoints(run, tmp_path):
    config, workdir, _ = run
    output = average_checkpoints(workdir, last=2, output=tmp_path / "avg.weights.h5")
    averaged, _, _ = load_trained_model(workdir, weights=str(output))
    singles = []
    for path in checkpoint_paths(workdir / "checkpoints"):
        model, _, _ = load_trained_model(workdir, weights=path)
        singles.append(model.get_weights())
    for value, first, second in zip(averaged.get_weights(), *singles, strict=True):
        np.testing.assert_allclose(value, (first + second) / 2, rtol=1e-6, atol=1e-7)
    info = json.loads((tmp_path / "avg.json").read_text())
    assert info["steps"] == [3, 6]
    with pytest.raises(ValueError, match="has 2"):
        average_checkpoints(workdir, last=5)


def test_resumed_data_stream_continues_where_it_stopped():
    config = small_config()
    data = load_task(config.data, seed=0)
    tokenizer = SubwordTokenizer.train(
        [*data.train.sources, *data.train.targets], vocabulary_size=120
    )

    def elements(skip: int, count: int):
        dataset = training_dataset(
            data.train, tokenizer, config.data, seed=0, skip_updates=skip
        )
        return [x[1].numpy() for x in dataset.take(count)]

    uninterrupted = elements(0, 7)
    resumed = elements(4, 3)
    for a, b in zip(uninterrupted[4:], resumed, strict=True):
        np.testing.assert_array_equal(a, b)


class _Poison(keras.callbacks.Callback):
    """Writes NaN into the embedding after the given step."""

    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations) == self.step:
            weights = self.model.transformer.get_layer("shared_embedding").weights[0]
            weights.assign(np.full(weights.shape, np.nan, "float32"))


def test_nan_loss_stops_the_run_with_a_clear_message(tmp_path):
    config = small_config("train.train_steps=9")
    with pytest.raises(TrainingDivergedError) as error:
        train(config, tmp_path, callbacks=[_Poison(4)], printer=None)
    message = str(error.value)
    assert "loss became nan at step 5" in message
    assert "ckpt-3" in message and "learning_rate_scale" in message
    # No checkpoint of the broken weights was written.
    assert [Path(p).name for p in checkpoint_paths(tmp_path / "checkpoints")] == [
        "ckpt-3"
    ]


def test_cli_average_checkpoints(run, tmp_path, capsys):
    from keras_transformer.cli import main

    _, workdir, _ = run
    output = tmp_path / "cli.weights.h5"
    assert (
        main(
            [
                "average-checkpoints",
                "--workdir",
                str(workdir),
                "--last",
                "2",
                "--output",
                str(output),
            ]
        )
        == 0
    )
    assert output.is_file() and str(output) in capsys.readouterr().out
    assert main(["average-checkpoints", "--workdir", str(workdir), "--last", "9"]) == 2
    error = capsys.readouterr().err
    assert "Cannot average the last 9 checkpoints" in error and "--last" in error


def test_train_without_a_config_resumes_the_run_in_its_workdir(run, tmp_path, capsys):
    """``train --workdir RUN`` built the default config and refused it as
    different from the run's; it now takes the run's stored config (and
    --set on top of it), as ``train RUN/config.json --workdir RUN`` does."""
    import json

    from keras_transformer.cli import main
    from keras_transformer.models.presets import get_preset

    config, workdir, _ = run
    assert main(["train", "--workdir", str(workdir), "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(config.to_json())
    argv = ["train", "--workdir", str(workdir), "--set", "train.train_steps=9"]
    assert main([*argv, "--print-config"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["train"]["train_steps"] == 9
    assert printed["model"] == json.loads(config.to_json())["model"]
    # A new folder still gets the defaults (--preset/--task).
    new = ["train", "--workdir", str(tmp_path / "new"), "--preset", "tiny"]
    assert main([*new, "--print-config"]) == 0
    tiny = get_preset("tiny").d_model
    assert json.loads(capsys.readouterr().out)["model"]["d_model"] == tiny
    # A folder whose config.json is not a run's is refused, not read.
    converted = tmp_path / "ct2"
    converted.mkdir()
    (converted / "config.json").write_text('{"bos_token": "<s>"}')
    assert main(["train", "--workdir", str(converted), "--print-config"]) == 2
    assert "is not a run's config" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argument, value, received",
    [
        ("workdir", None, "None"),
        ("printer", 5, "5"),
        ("callbacks", [5], "5"),
        ("callbacks", "stop", "'stop'"),
        ("callbacks", keras.callbacks.History(), "wrap one callback in a list"),
    ],
)
def test_train_refuses_a_wrong_argument_before_writing(
    tmp_path, argument, value, received
):
    """``printer=5`` failed with "'int' object is not callable" after the
    run folder held config.json and a lock; ``workdir=None`` with
    os.fspath's message; one callback not in a list was not iterable."""
    arguments = {"workdir": tmp_path / "run", argument: value}
    with pytest.raises(TypeError, match=f"`{argument}` must be") as error:
        train(small_config(), **arguments)
    assert received in str(error.value) and "\n" not in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_train_refuses_a_folder_that_holds_files_but_no_run(run, tmp_path, capsys):
    """``train --workdir <an export folder, a run's checkpoints/, a project>``
    wrote a run among the files there (a folder both an export and a run)."""
    from keras_transformer.cli import main
    from keras_transformer.runs import RunFolder

    config, workdir, _ = run
    checkpoints = workdir / "checkpoints"
    before = sorted(p.name for p in checkpoints.iterdir())
    with pytest.raises(ValueError, match=r"holds checkpoint, .*, \.\.\. but no run"):
        RunFolder(checkpoints).check_trainable()
    # train names the run whose folder it is, before that.
    with pytest.raises(ValueError, match=r"would write into checkpoints/ of the run"):
        train(config, checkpoints, printer=None)
    assert sorted(p.name for p in checkpoints.iterdir()) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    config_file = tmp_path / "config.json"
    config_file.write_text(config.to_json(), encoding="utf-8")
    assert main(["train", str(config_file), "--workdir", str(mine)]) != 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "holds notes.txt but no run" in error
    assert "Pass a new or empty folder" in error
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    # A CTranslate2 export holds a config.json of its own: train replaced it
    # with the run's and trained a run into the export.
    converted = tmp_path / "ct2"
    converted.mkdir()
    (converted / "config.json").write_text('{"bos_token": "<s>", "eos_token": "</s>"}')
    (converted / "model.bin").write_bytes(b"weights")
    files = {p.name: p.read_bytes() for p in converted.iterdir()}
    with pytest.raises(ValueError, match=r"config.json is not a run's config"):
        train(config, converted, printer=None)
    assert main(["train", str(config_file), "--workdir", str(converted)]) != 0
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "Pass a new or empty folder" in error
    assert {p.name: p.read_bytes() for p in converted.iterdir()} == files
    # What a run writes before its config.json (a run killed at its start),
    # and hidden files, leave the folder trainable.
    started = tmp_path / "started"
    (started / "tokenizer").mkdir(parents=True)
    (started / "writer.lock").write_text("")
    (started / ".DS_Store").write_text("")
    assert RunFolder(started).check_trainable().path == started


def test_a_warmup_longer_than_the_run_is_refused_before_training(tmp_path, capsys):
    """Eq. 7 would only rise: refused with the reason from the config alone,
    before the run folder is made (no config.json, no tokenizer)."""
    from keras_transformer.cli import main

    config = small_config("train.train_steps=2")  # its warm-up is 3 updates
    with pytest.raises(ValueError, match=r"warmup_steps=3\) is longer than the run"):
        train(config, tmp_path / "library", printer=None)
    assert not (tmp_path / "library").exists()

    config_file = tmp_path / "config.json"
    config_file.write_text(config.to_json(), encoding="utf-8")
    workdir = tmp_path / "cli"
    assert main(["train", str(config_file), "--workdir", str(workdir)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1, error
    assert "model.optimizer.warmup_steps to at most 2" in error
    assert not workdir.exists()
    # With epochs, the updates of an epoch are learned from the data: the
    # same check then comes once the data is read.
    by_epochs = small_config(
        "train.train_steps=null",
        "train.epochs=1",
        "train.steps_per_epoch=null",
        "model.optimizer.warmup_steps=300",
    )
    with pytest.raises(ValueError, match=r"warmup_steps=300\) is longer"):
        train(by_epochs, tmp_path / "epochs", printer=None)
    assert not (tmp_path / "epochs" / "checkpoints").exists()
    # Lengthening the run (or shortening the warm-up) makes the same config train.
    result = train(
        small_config("train.train_steps=2", "model.optimizer.warmup_steps=2"),
        tmp_path / "fixed",
        printer=None,
    )
    assert result.steps == 2
