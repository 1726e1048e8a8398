"""What a run tells its reader: skipped data, and TensorBoard as people read it.

One short run on `task="files"` whose training files hold three bad lines
(invalid UTF-8, a 100,000-character line, an empty line): the skips are
printed, written to ``result.json`` and to TensorBoard (``data/skipped``);
``data.on_bad_line=raise`` stops at the first bad line instead. The logs
are then read as TensorBoard reads them: the HParams metrics point at scalars
that exist, every quantity is written once, and the attention maps are one
image per layer and kind.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing.plugin_event_multiplexer import (
    EventMultiplexer,
)
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.plugins.hparams import metrics as hparams_metrics

from keras_transformer.data import synthetic_dates
from keras_transformer.training import DataConfig, train
from keras_transformer.visualize import KINDS
from tests.training.helpers import small_config

NUM_GOOD = 300


def _write_lines(path: Path, lines: list[bytes]) -> str:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, str]:
    """Line-aligned dates with three bad training lines, and clean dev files."""
    folder = tmp_path_factory.mktemp("corpus")
    good = synthetic_dates(NUM_GOOD, seed=5)
    sources = [s.encode() for s in good.sources]
    targets = [t.encode() for t in good.targets]
    # Line 4: invalid UTF-8 in the source; line 11: a 100,000-character
    # target; line 21: an empty source.
    sources.insert(3, b"Montag, \xff\xfe 3. Mai 2021")
    targets.insert(3, b"2021-05-03")
    sources.insert(10, b"Dienstag, 4. Mai 2021")
    targets.insert(10, b"9" * 100_000)
    sources.insert(20, b"")
    targets.insert(20, b"2021-05-05")
    dev = synthetic_dates(16, seed=6)
    return {
        "train_source": _write_lines(folder / "train.de", sources),
        "train_target": _write_lines(folder / "train.en", targets),
        "validation_source": _write_lines(
            folder / "dev.de", [s.encode() for s in dev.sources]
        ),
        "validation_target": _write_lines(
            folder / "dev.en", [t.encode() for t in dev.targets]
        ),
    }


def _files_config(corpus: dict[str, str], *overrides: str):
    settings = [f"data.{key}={value}" for key, value in corpus.items()]
    return small_config("data.task=files", *settings, *overrides)


@pytest.fixture(scope="module")
def logged() -> list[str]:
    """The messages the package logged while `run` trained."""
    return []


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory, logged):
    workdir = tmp_path_factory.mktemp("monitored")
    printed: list[str] = []
    config = _files_config(corpus, "train.attention_images=true")
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("keras_transformer").addHandler(handler)
    try:
        result = train(config, workdir, printer=printed.append)
    finally:
        logging.getLogger("keras_transformer").removeHandler(handler)
    return workdir, result, printed


def test_skipped_pairs_are_printed(run, corpus, logged):
    """Printed once: they were logged as a warning too, so that the command
    line showed each line twice (on standard output and standard error)."""
    _, _, printed = run
    expected = (
        f"train split ({corpus['train_source']}, {corpus['train_target']}): "
        f"skipped 3 pairs (empty line: 1, invalid UTF-8: 1, too long: 1), "
        f"kept {NUM_GOOD}"
    )
    assert expected in printed
    # Only the split with skips gets a line; it comes before the training plan.
    assert sum("skipped" in line for line in printed) == 1
    plan = next(i for i, line in enumerate(printed) if line.startswith("Training "))
    assert printed.index(expected) < plan
    assert [line for line in logged if "skipped" in line] == []


def test_skipped_pairs_in_the_result_file(run, corpus):
    workdir, result, _ = run
    saved = json.loads((workdir / "result.json").read_text())
    train_entry, validation_entry = saved["skipped_pairs"]
    assert train_entry == {
        "split": "train",
        "files": [corpus["train_source"], corpus["train_target"]],
        "kept": NUM_GOOD,
        "skipped": {"empty": 1, "invalid_utf8": 1, "too_long": 1},
        "summary": (
            "skipped 3 pairs (empty line: 1, invalid UTF-8: 1, too long: 1), "
            f"kept {NUM_GOOD}"
        ),
    }
    assert validation_entry["split"] == "validation"
    assert validation_entry["skipped"] == {} and validation_entry["kept"] == 16
    assert result.skipped_pairs == saved["skipped_pairs"]


def test_skipped_pairs_in_tensorboard(run, corpus):
    workdir, _, _ = run
    texts = []
    for path in sorted((workdir / "logs" / "train").glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "data/skipped":
                    text = tf.make_ndarray(value.tensor).item().decode()
                    texts.append((event.step, text))
    assert len(texts) == 1
    step, text = texts[0]
    assert step == 0
    assert corpus["train_source"] in text and "invalid UTF-8: 1" in text
    assert "too long: 1" in text and "empty line: 1" in text
    assert f"kept {NUM_GOOD}" in text


def test_raise_policy_names_the_file_and_line(corpus, tmp_path):
    config = _files_config(corpus, "data.on_bad_line=raise")
    with pytest.raises(ValueError) as info:
        train(config, tmp_path / "strict", printer=None)
    message = str(info.value)
    assert re.search(
        re.escape(corpus["train_source"]) + r", line 4: invalid UTF-8", message
    )
    assert "data.on_bad_line=skip" in message
    with pytest.raises(ValueError, match="on_bad_line"):
        DataConfig(on_bad_line="ignore")


# ------------------------------------------------------------- TensorBoard
def _multiplexer(logs: Path) -> EventMultiplexer:
    """The logs as `tensorboard --logdir <logs>` loads them (run names too)."""
    multiplexer = EventMultiplexer(tensor_size_guidance={"images": 0})
    multiplexer.AddRunsFromDirectory(str(logs))
    multiplexer.Reload()
    return multiplexer


def test_hparams_metrics_point_at_written_scalars(run):
    workdir, _, _ = run
    multiplexer = _multiplexer(workdir / "logs")
    hparams = multiplexer.PluginRunToTagToContent(hparams_metadata.PLUGIN_NAME)
    sessions = [
        run_name
        for run_name, tags in hparams.items()
        if hparams_metadata.SESSION_START_INFO_TAG in tags
    ]
    assert len(sessions) == 1
    experiments = [
        tags[hparams_metadata.EXPERIMENT_TAG]
        for tags in hparams.values()
        if hparams_metadata.EXPERIMENT_TAG in tags
    ]
    assert len(experiments) == 1
    experiment = hparams_metadata.parse_experiment_plugin_data(experiments[0])
    assert len(experiment.metric_infos) >= 3
    assert "model.d_model" in {h.name for h in experiment.hparam_infos}
    scalars = multiplexer.PluginRunToTagToContent("scalars")
    for info in experiment.metric_infos:
        # The run and tag TensorBoard's HParams dashboard reads the value from.
        run_name, tag = hparams_metrics.run_tag_from_session_and_metric(
            sessions[0], info.name
        )
        assert tag in scalars.get(run_name, {}), (run_name, tag, sorted(scalars))
        assert multiplexer.Tensors(run_name, tag)  # it has values
    names = {(info.name.tag, info.display_name) for info in experiment.metric_infos}
    assert ("bleu", "validation/bleu") in names


def test_each_quantity_is_written_once(run):
    workdir, _, _ = run
    scalars = _multiplexer(workdir / "logs").PluginRunToTagToContent("scalars")
    tags = {run_name: set(run_tags) for run_name, run_tags in scalars.items()}
    assert tags == {
        "train": {"loss", "token_accuracy", "perplexity", "learning_rate"},
        "validation": {
            "loss",
            "token_accuracy",
            "perplexity",
            "bleu",
            "chrf",
            "exact_match",
        },
        "test": {"bleu", "chrf", "exact_match"},
    }
    for run_tags in tags.values():
        assert not any(tag.startswith("epoch_") for tag in run_tags)
    # One point per step: the learning rate is not written twice at an epoch end.
    multiplexer = _multiplexer(workdir / "logs")
    steps = [event.step for event in multiplexer.Tensors("train", "learning_rate")]
    assert len(steps) == len(set(steps))


def test_one_attention_image_per_layer_and_kind(run):
    workdir, _, _ = run
    multiplexer = _multiplexer(workdir / "logs")
    images = multiplexer.PluginRunToTagToContent("images")
    expected = {f"attention/{kind}/layer_0" for kind in KINDS}
    assert set(images["validation"]) == expected
    for tag in sorted(expected):
        events = multiplexer.Tensors("validation", tag)
        assert [e.step for e in events] == [3, 6]
        width, height, png = tf.make_ndarray(events[-1].tensor_proto)
        pixels = tf.io.decode_png(png).numpy()
        assert pixels.shape[:2] == (int(height), int(width))
        # Two heads side by side, with readable room per token.
        assert 150 < int(width) < 1600 and 100 < int(height) < 1200
        assert np.ptp(pixels) > 0
