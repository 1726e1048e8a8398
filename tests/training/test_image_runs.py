"""Image runs like translation runs: best weights, the paper's order, old folders.

* An image run keeps the weights of its lowest validation bits/dim
  (``best.weights.h5`` and ``best.json``), as a translation run keeps those
  of its best validation BLEU and a classification run those of its best
  accuracy: one mechanism (`callbacks.BestWeights`), read by
  ``train.evaluate_with=best`` and ``keras-transformer evaluate --weights best``.
* An image config without ``model.generation_order`` gets the paper's
  block order (Parmar et al. 2018, §3.2); a config in the layout of before
  0.1.0 (model, data, train, no ``kind``) is refused in one line.
* A run folder whose checkpoints carry no fingerprint (no
  ``checkpoints.json``) resumes, as a translation run's does.
"""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import cli
from keras_transformer.runs import (
    ForeignCheckpointError,
    RunFolder,
    accepting_weights_without_fingerprint,
    checkpoint_fingerprint,
    checkpoint_paths,
    restore_checkpoint,
)
from keras_transformer.training import TrainConfig, train
from keras_transformer.training.callbacks import BestValidationWeights, BestWeights
from keras_transformer.training.classification import ClassificationRecipe
from keras_transformer.training.image_recipe import ImageRecipe
from tests.training.helpers import (
    SMALL_IMAGE_CONFIG,
    old_image_layout,
    small_image_config,
    write_config,
)


def _weights(model: keras.Model) -> list[np.ndarray]:
    return [np.asarray(w) for w in model.get_weights()]


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


# ---------------------------------------------------------------- best weights
def _tiny_trained_model() -> keras.Model:
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((2, 2)), np.ones((2, 1)), epochs=1, verbose=0)
    return model


@pytest.mark.parametrize(
    ("metric", "lower_is_better", "values", "kept"),
    [
        ("val_accuracy", False, [0.5, 0.4, 0.7, 0.7], [0.5, 0.5, 0.7, 0.7]),
        ("val_bits_per_dim", True, [5.0, 5.5, 4.5, float("nan")], [5, 5, 4.5, 4.5]),
    ],
)
def test_the_best_weights_follow_the_metric_and_survive_a_resume(
    tmp_path, metric, lower_is_better, values, kept
):
    model = _tiny_trained_model()
    path = tmp_path / "best.weights.h5"
    name = metric.removeprefix("val_")

    def callback() -> BestValidationWeights:
        found = BestValidationWeights(
            metric, BestWeights(model, path, name, lower_is_better=lower_is_better)
        )
        found.set_model(model)
        return found

    best = callback()
    assert best.best_value is None
    for epoch, (value, expected) in enumerate(zip(values, kept, strict=True)):
        best.on_epoch_end(epoch, {"loss": 1.0, metric: value})
        assert best.best_value == pytest.approx(expected)
        assert json.loads(path.with_name("best.json").read_text())[name] == (
            pytest.approx(expected)
        )
    # A step without this validation (or with a NaN loss) changes nothing.
    best.on_epoch_end(9, {"loss": 1.0})
    best.on_epoch_end(9, {"loss": float("nan"), metric: 0.0 if lower_is_better else 1})
    assert best.best_value == pytest.approx(kept[-1])
    # A resumed run starts from the stored value: a worse one is not kept.
    resumed = callback()
    assert resumed.best_value == pytest.approx(kept[-1])
    worse = kept[-1] + (1.0 if lower_is_better else -0.1)
    resumed.on_epoch_end(10, {"loss": 1.0, metric: worse})
    assert resumed.best_value == pytest.approx(kept[-1])
    # Without a path (train.keep_best=false) only the value is kept.
    path.unlink()
    valueless = BestValidationWeights(metric, BestWeights(model, None, name))
    valueless.set_model(model)
    valueless.on_epoch_end(0, {metric: 0.25})
    assert valueless.best_value == 0.25 and not path.exists()


@pytest.mark.parametrize(
    ("recipe", "metric", "lower_is_better"),
    [
        (ClassificationRecipe(), "val_accuracy", False),
        (ImageRecipe(), "val_bits_per_dim", True),
    ],
)
@pytest.mark.parametrize("keep_best", [True, False])
def test_classification_and_image_recipes_keep_the_best_weights(
    tmp_path, recipe, metric, lower_is_better, keep_best
):
    run = types.SimpleNamespace(
        config=types.SimpleNamespace(train=types.SimpleNamespace(keep_best=keep_best)),
        root=tmp_path,
        model=_tiny_trained_model(),
        fingerprint=None,
    )
    validation = recipe.validation(run)
    assert isinstance(validation, BestValidationWeights)
    assert validation.metric == metric
    assert validation.best.lower_is_better is lower_is_better
    assert validation.best.path == (tmp_path / "best.weights.h5" if keep_best else None)
    validation.set_model(run.model)
    validation.on_epoch_end(0, {metric: 0.75})
    assert recipe.best_validation_score(validation) == 0.75
    assert recipe.best_validation_score(None) is None
    assert (tmp_path / "best.weights.h5").is_file() is keep_best


def test_an_image_run_keeps_its_best_weights_in_the_papers_order(tmp_path, capsys):
    """A hand-written image config without ``generation_order`` (a new run):
    the paper's block order; the weights of the lowest validation bits/dim
    are kept, evaluated at the end (``train.evaluate_with=best``) and by
    ``keras-transformer evaluate --weights best``."""
    # Trains its own: validation and best weights, which the shared runs skip.
    values = json.loads(json.dumps(SMALL_IMAGE_CONFIG))
    del values["model"]["generation_order"]
    values["train"]["evaluate_with"] = "best"
    path = write_config(tmp_path, values)
    config = TrainConfig.load(path)
    assert config.model.generation_order == "blocks"
    workdir = tmp_path / "run"
    result = train(config, workdir, printer=None)
    stored = json.loads((workdir / "config.json").read_text())
    assert stored["model"]["generation_order"] == "blocks"

    history = result.history["val_bits_per_dim"]
    assert len(history) == 2  # after updates 3 and 6
    best = json.loads((workdir / "best.json").read_text())
    assert best["bits_per_dim"] == pytest.approx(min(history))
    assert best["step"] == 3 * (1 + int(np.argmin(history)))
    assert result.best_validation_score == pytest.approx(best["bits_per_dim"])
    folder = RunFolder(workdir)
    assert best["fingerprint"]["run_id"] == folder.fingerprint().run_id
    # The best weights are those of the checkpoint of their step.
    model, _ = folder.load("best")
    at_step = folder.build_model()
    restore_checkpoint(at_step, str(workdir / "checkpoints" / f"ckpt-{best['step']}"))
    _assert_same(_weights(model), _weights(at_step))

    # `evaluate --weights best` reports what the final evaluation measured.
    capsys.readouterr()
    command = ["evaluate", "--workdir", str(workdir), "--weights", "best", "--json"]
    assert cli.main(command) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["bits_per_dim"] == pytest.approx(result.evaluation.bits_per_dim)


# ------------------------------------------------------------ generation order
def test_a_config_without_the_order_gets_the_papers_block_order(tmp_path):
    handwritten = json.loads(json.dumps(SMALL_IMAGE_CONFIG))
    del handwritten["model"]["generation_order"]
    config = TrainConfig.from_dict(handwritten)
    assert config.model.generation_order == "blocks"
    path = write_config(tmp_path, handwritten)
    assert TrainConfig.load(path) == config
    # What this release stores names the order and reads back the same.
    again = TrainConfig.from_json(config.to_json())
    assert again == config and '"generation_order": "blocks"' in config.to_json()
    image_order = small_image_config("model.generation_order=image")
    assert TrainConfig.from_json(image_order.to_json()) == image_order
    # `--set` knows the image model's keys.
    assert small_image_config("model.query_block=[4,4]").model.query_block == (4, 4)
    with pytest.raises(ValueError, match="Known keys here: .*generation_order"):
        small_image_config("model.preset=tiny")
    # The layout of before 0.1.0 (no kind, the images as `data`): one line
    # naming the file and what it does not know.
    old_path = write_config(tmp_path, old_image_layout(config), "old.json")
    with pytest.raises(ValueError, match="old.json: Unknown") as refused:
        TrainConfig.load(old_path)
    assert "\n" not in str(refused.value)


# ------------------------------------------------------------ old run folders
def _strip_fingerprints(workdir: Path, config: TrainConfig) -> None:
    """Makes `workdir` a run folder whose checkpoints carry no fingerprint:
    its newest checkpoint rewritten without one, no ``checkpoints.json``."""
    checkpoint_dir = workdir / "checkpoints"
    newest = checkpoint_paths(checkpoint_dir)[-1]
    step = int(newest.rsplit("-", 1)[1])
    recipe = ImageRecipe()
    model = recipe.build_model(config, None)
    optimizer = recipe.optimizer(config, config.train.train_steps)
    optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    checkpoint.restore(newest).expect_partial().assert_existing_objects_matched()
    assert int(optimizer.iterations.numpy()) == step
    shutil.rmtree(checkpoint_dir)
    manager = tf.train.CheckpointManager(checkpoint, str(checkpoint_dir), 3)
    legacy = manager.save(checkpoint_number=step)
    assert checkpoint_fingerprint(legacy) is None
    assert not (checkpoint_dir / "checkpoints.json").exists()
    for name in ("best.weights.h5", "best.json"):
        (workdir / name).unlink(missing_ok=True)


def test_an_image_run_without_fingerprints_resumes_only_when_accepted(tmp_path, capsys):
    """Checkpoints without a fingerprint (a run of the code before them) are
    refused in one line by the readers and by train; with
    --weights-without-fingerprint the run resumes from them and then
    fingerprints its folder and its new checkpoints."""
    # Trains its own: the raster order, which no shared run uses.
    order = "model.generation_order=image"
    first = small_image_config(order, "train.train_steps=3")
    workdir = tmp_path / "run"
    train(first, workdir, printer=None)
    _strip_fingerprints(workdir, first)
    folder = RunFolder(workdir)
    assert folder.fingerprint() is None
    with pytest.raises(ForeignCheckpointError, match="ckpt-3 carries no run finger"):
        folder.load("last")
    with accepting_weights_without_fingerprint():
        old_weights = _weights(folder.load("last")[0])
    second = small_image_config(order)

    # A refused train leaves the run as it was (it wrote a new run id into
    # checkpoints.json and the new train_steps into config.json).
    def records() -> dict[str, bytes | None]:
        paths = [workdir / "config.json", workdir / "checkpoints" / "checkpoints.json"]
        return {p.name: p.read_bytes() if p.is_file() else None for p in paths}

    before = records()
    with pytest.raises(ForeignCheckpointError, match="--weights-without-fingerprint"):
        train(second, workdir, printer=None)
    assert records() == before
    config_file = tmp_path / "image.json"
    config_file.write_text(second.to_json(), encoding="utf-8")
    argv = ["train", str(config_file), "--workdir", str(workdir)]
    assert cli.main(argv) != 0
    assert records() == before
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert "Traceback" not in err and len(lines) == 1, err
    assert "ckpt-3 carries no run fingerprint" in lines[0]
    assert [Path(p).name for p in checkpoint_paths(workdir / "checkpoints")] == [
        "ckpt-3"
    ]

    assert cli.main([*argv, "--weights-without-fingerprint"]) == 0
    assert "from step 3" in capsys.readouterr().out
    assert json.loads((workdir / "result.json").read_text())["steps"] == 6
    assert [Path(p).name for p in checkpoint_paths(workdir / "checkpoints")] == [
        "ckpt-3",
        "ckpt-6",
    ]
    resumed = RunFolder(workdir)
    expected = resumed.fingerprint()
    assert expected is not None
    assert checkpoint_fingerprint(workdir / "checkpoints" / "ckpt-6") == expected
    assert checkpoint_fingerprint(workdir / "checkpoints" / "ckpt-3") is None
    resumed.load("last")  # ckpt-6, the run's own
    # The old checkpoint is the one that was resumed, unchanged.
    at_3 = resumed.build_model()
    with accepting_weights_without_fingerprint():
        restore_checkpoint(at_3, str(workdir / "checkpoints" / "ckpt-3"))
    _assert_same(_weights(at_3), old_weights)
