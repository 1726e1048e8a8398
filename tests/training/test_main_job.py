"""The shipped configs, trained for real (slow: minutes on a CPU)."""

from __future__ import annotations

import json
import os

import pytest

from tests.training.helpers import REPO_ROOT, run_cli

pytestmark = pytest.mark.slow


def test_dates_tiny_reaches_over_90_percent_exact_dates(tmp_path):
    """`keras-transformer train configs/dates_tiny.json`: the default main job."""
    workdir = tmp_path / "dates"
    process = run_cli(
        [
            "train",
            str(REPO_ROOT / "configs" / "dates_tiny.json"),
            "--workdir",
            str(workdir),
            "--set",
            "train.verbose=2",
        ],
        timeout=900,
        TF_NUM_INTRAOP_THREADS="0",
    )
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads((workdir / "result.json").read_text())
    config = json.loads((REPO_ROOT / "configs" / "dates_tiny.json").read_text())
    assert result["steps"] == config["train"]["train_steps"] == 1500
    assert result["evaluation"]["exact_match"] > 0.9
    assert result["evaluation"]["bleu"] > 90
    assert "output:" in process.stdout and "TensorBoard logs:" in process.stdout
    assert process.stdout.rstrip().endswith(
        "To translate your own sentences (type one, press Enter): "
        f"keras-transformer translate --workdir {workdir}"
    )


def test_multi30k_small_config_runs_on_the_shared_data(tmp_path):
    """A few updates of `configs/multi30k_small.json` on the real Multi30k files."""
    shared = os.environ.get("KT_SHARED_DATA") or str(
        REPO_ROOT.parent / "shared" / "data"
    )
    if not os.path.isdir(os.path.join(shared, "multi30k")):
        pytest.fail(f"Shared data not found at {shared}; set KT_SHARED_DATA.")
    workdir = tmp_path / "m30k"
    process = run_cli(
        [
            "train",
            str(REPO_ROOT / "configs" / "multi30k_small.json"),
            "--workdir",
            str(workdir),
            "--set",
            "train.train_steps=4",
            "--set",
            "model.optimizer.warmup_steps=4",
            "--set",
            "train.steps_per_epoch=2",
            "--set",
            "train.bleu_samples=8",
            "--set",
            "train.test_samples=8",
            "--set",
            "model.num_encoder_layers=1",
            "--set",
            "model.num_decoder_layers=1",
            "--set",
            "data.tokenizer_max_sentences=20000",
        ],
        timeout=900,
        KT_DATA_DIR=shared,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    result = json.loads((workdir / "result.json").read_text())
    assert result["steps"] == 4
    assert result["evaluation"]["split"] == "test_2016_flickr"
    assert (workdir / "averaged.weights.h5").is_file()  # evaluate_with: average


@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_run_resumes(tmp_path, precision):
    """train() in mixed precision, then resumed: the loss-scale optimizer restores."""
    from keras_transformer.training import train
    from tests.training.helpers import small_config

    first = train(
        small_config(f"train.precision={precision}", "train.train_steps=3"),
        tmp_path,
        printer=None,
    )
    assert first.steps == 3
    second = train(
        small_config(f"train.precision={precision}", "train.train_steps=6"),
        tmp_path,
        printer=None,
    )
    assert (second.initial_step, second.steps) == (3, 6)
    assert all(value == value for value in second.history["loss"])  # not NaN
