"""The kinds of run: one config with a kind, one registry of recipes.

Translation is the default kind (a stored config without ``kind`` is one,
and its ``config.json`` has no kind key); classification has its own
section and recipe. The tests of the run itself (resume, damaged
checkpoints, SIGKILL, MirroredStrategy) are parametrized over the kinds in
test_faults.py and test_distributed.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from keras_transformer.data import SubwordTokenizer
from keras_transformer.training import TrainConfig, apply_overrides
from keras_transformer.training.classification import (
    ClassificationRecipe,
    load_reviews,
    review_dataset,
)
from keras_transformer.training.kinds import recipe_for, register_recipe
from keras_transformer.training.recipes import Recipe
from keras_transformer.training.translation_recipe import TranslationRecipe
from tests.training.helpers import (
    REPO_ROOT,
    SMALL_CLASSIFICATION_CONFIG,
    SMALL_CONFIG,
    small_classification_config,
    write_reviews,
)


def test_a_config_without_kind_is_translation_and_stays_without_it():
    config = TrainConfig.from_dict(SMALL_CONFIG)
    assert config.kind == "translation" and config.options is None
    assert "kind" not in config.to_dict() and "classification" not in config.to_dict()
    assert isinstance(recipe_for(config), TranslationRecipe)
    again = TrainConfig.from_json(config.to_json())
    assert again == config


def test_the_imdb_config_round_trips_with_its_section():
    config = TrainConfig.load(REPO_ROOT / "configs" / "imdb.json")
    assert config.kind == "classification"
    settings = config.options
    # The notebook's settings (examples/03_text_classification.ipynb).
    assert (settings.batch_size, settings.learning_rate) == (32, 1e-3)
    assert (config.model.d_model, config.model.num_heads, config.model.d_ff) == (
        64,
        4,
        128,
    )
    assert config.model.dropout == 0.2 and config.data.vocabulary_size == 8000
    assert config.data.max_sentence_length == 512 and config.train.epochs == 3
    values = json.loads(config.to_json())
    assert values["kind"] == "classification"
    assert values["classification"]["tail_tokens"] == 128
    assert TrainConfig.from_dict(values) == config
    assert isinstance(recipe_for(config), ClassificationRecipe)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"kind": "poetry"}, "`kind` must be one of"),
        ({"classification": {"batch_size": 8}}, "belongs to kind='classification'"),
        (
            {"kind": "classification", "classification": {"batch_size": 0}},
            "classification.batch_size",
        ),
        (
            {"kind": "classification", "classification": {"task": "sst2"}},
            "classification.task",
        ),
        (
            {"kind": "classification", "classification": {"shuffle": True}},
            "Unknown `classification` settings",
        ),
        # `train --set kind=classification --task multi30k` ignored --task.
        (
            {"kind": "classification", "data": {"task": "multi30k"}},
            r"A classification run reads its reviews from `classification.task` "
            r"\('imdb'\); `data.task` \('multi30k', a translation task\) is not "
            r"read. Remove it \(and --task\), or set kind to 'translation'.",
        ),
    ],
)
def test_bad_kinds_and_sections_are_one_line_errors(values, message):
    with pytest.raises(ValueError, match=message) as error:
        TrainConfig.from_dict(values)
    assert "\n" not in str(error.value)


def test_overrides_reach_the_kind_and_its_section():
    config = apply_overrides(
        SMALL_CLASSIFICATION_CONFIG, ["classification.batch_size=8", "train.seed=3"]
    )
    assert config.options.batch_size == 8 and config.train.seed == 3
    with pytest.raises(ValueError, match="Unknown config key 'classification.size'"):
        apply_overrides(SMALL_CLASSIFICATION_CONFIG, ["classification.size=8"])
    switched = apply_overrides(SMALL_CONFIG, ["kind=classification"])
    assert switched.kind == "classification"
    assert switched.options.batch_size == 32


def test_a_registered_recipe_is_found_and_an_unknown_kind_is_named(monkeypatch):
    """A kind is one module and one `register_recipe` line: the config and
    its ``--set`` overrides find it (registered for this test only)."""
    import dataclasses

    from keras_transformer.training import kinds

    monkeypatch.setattr(kinds, "_RECIPES", dict(kinds._RECIPES))

    @dataclasses.dataclass(frozen=True)
    class EchoConfig:
        loudness: int = 3

    class Echo(Recipe):
        kind = "echo"
        settings = EchoConfig
        output_commands = "listen to it"

    register_recipe(Echo())
    assert isinstance(recipe_for("echo"), Echo)
    config = apply_overrides(SMALL_CONFIG, ["kind=echo", "echo.loudness=5"])
    assert config.options == EchoConfig(5) and config.to_dict()["echo"] == {
        "loudness": 5
    }
    with pytest.raises(
        ValueError, match="`kind` must be one of .*echo.*Received: 'sound'"
    ):
        recipe_for("sound")


def test_resumed_review_stream_continues_where_it_stopped(tmp_path):
    """The stream is a function of the seed: skipping k updates gives the
    batches an uninterrupted run sees from update k on, across epochs."""
    config = small_classification_config(write_reviews(tmp_path))
    data = load_reviews(config)
    tokenizer = ClassificationRecipe().learn_tokenizer(config, data.train)
    per_epoch = ClassificationRecipe().updates_per_epoch(config, data, tokenizer)
    assert per_epoch >= 18  # 288 reviews, 16 per batch, bucketed
    whole = list(review_dataset(data.train, tokenizer, config, seed=0).take(40))
    resumed = list(
        review_dataset(data.train, tokenizer, config, seed=0, skip_updates=25).take(15)
    )
    for (ids, labels), (want_ids, want_labels) in zip(resumed, whole[25:], strict=True):
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(labels, want_labels)
    # Every epoch is a new order of the same reviews.
    first = np.concatenate([labels for _, labels in whole[:per_epoch]])
    assert len(first) == len(data.train)
    assert sorted(first) == sorted(data.train.labels)
    second = [ids.numpy().tolist() for ids, _ in whole[per_epoch : 2 * per_epoch]]
    assert second != [ids.numpy().tolist() for ids, _ in whole[:per_epoch]]


def test_long_reviews_keep_their_head_and_tail(tmp_path):
    config = small_classification_config(
        write_reviews(tmp_path),
        "data.max_sentence_length=8",
        "classification.tail_tokens=3",
    )
    tokenizer = SubwordTokenizer.train(
        ["a b c d e f g h i j k l m n o p"] * 20, vocabulary_size=22
    )
    from keras_transformer.training.classification import Reviews, encode_reviews

    text = "a b c d e f g h i j k l m n o p"
    flat, lengths = encode_reviews(Reviews([text], np.array([1])), tokenizer, config)
    ids = tokenizer.encode([text])[0]
    assert lengths.tolist() == [8]
    assert flat.tolist() == ids[:5] + ids[-3:]


def test_test_sample_holds_both_classes(tmp_path):
    """The test file is sorted by label; a sample of it must not be."""
    config = small_classification_config(
        write_reviews(tmp_path), "train.test_samples=10"
    )
    data = load_reviews(config)
    assert len(data.test) == 10 and 0 < data.test.labels.sum() < 10
    assert len(data.validation) == 32 and len(data.train) == 288


def test_evaluate_reports_the_accuracy_of_a_classification_run(
    tmp_path, capsys, monkeypatch
):
    """`keras-transformer evaluate` on a classification run: its test accuracy,
    the same as the run's final evaluation of the same weights."""
    from keras_transformer import cli
    from keras_transformer.training import train

    # Trains its own: the final evaluation of 16 test reviews (shared: 2).
    reviews = write_reviews(tmp_path / "reviews")
    config = small_classification_config(reviews, "train.train_steps=9")
    result = train(config, tmp_path / "run", printer=None)
    assert result.evaluation.examples == 16
    stored = json.loads((tmp_path / "run" / "result.json").read_text())
    assert stored["evaluation"]["accuracy"] == result.evaluation.accuracy
    capsys.readouterr()
    status = cli.main(["evaluate", "--workdir", str(tmp_path / "run"), "--json"])
    out = capsys.readouterr().out
    assert status == 0, out
    evaluated = json.loads(out)
    assert evaluated["examples"] == 16 and evaluated["split"] == "test"
    assert evaluated["accuracy"] == pytest.approx(result.evaluation.accuracy)
    status = cli.main(
        ["evaluate", "--workdir", str(tmp_path / "run"), "--max-sentences", "6"]
    )
    assert status == 0
    assert capsys.readouterr().out.startswith("accuracy ")
    # The flags of a translation's evaluation were ignored; now refused.
    argv = ["evaluate", "--workdir", str(tmp_path / "run"), "--no-progress"]
    for flags, named in (
        (["--beam-size", "2"], "--beam-size"),
        (
            ["--sample", "--seed", "3", "--batch-size", "8"],
            "--method, --seed, --batch-size",
        ),
        (["--source", str(reviews / "test.tsv")], "--source"),
    ):
        assert cli.main([*argv, *flags]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(
            f"error: {named}: a classification run's evaluation translates "
            "nothing (it scores the run's own test split); leave "
            f"{'it' if ',' not in named else 'them'} out."
        ), line
    # A flag added to evaluate later is refused too (the refused flags were a
    # list kept by hand beside the parser).
    from keras_transformer.cli import evaluate

    add_arguments = evaluate.add_arguments

    def with_a_new_flag(parser):
        add_arguments(parser)
        parser.add_argument("--new-flag", type=int)

    monkeypatch.setattr(evaluate, "add_arguments", with_a_new_flag)
    command = dataclasses.replace(
        cli.COMMANDS["evaluate"], add_arguments=with_a_new_flag
    )
    monkeypatch.setitem(cli.COMMANDS, "evaluate", command)
    assert cli.main([*argv, "--new-flag", "3"]) == 2
    assert "error: --new-flag: a classification run's" in capsys.readouterr().err


def test_the_image_config_round_trips_in_the_papers_order():
    """configs/image_sample_patches.json: notebook 06's run (the "small" image
    preset on 32 x 32 patches) in the paper's block order (§3.2)."""
    import keras_transformer as kt
    from keras_transformer.training.image_recipe import ImageRecipe

    config = TrainConfig.load(REPO_ROOT / "configs" / "image_sample_patches.json")
    assert config.kind == "image" and isinstance(recipe_for(config), ImageRecipe)
    assert config.model == kt.models.image_presets["small"]
    assert config.model.generation_order == "blocks"
    assert (config.options.batch_size, config.options.flip) == (8, True)
    assert (config.train.train_steps, config.train.steps_per_epoch) == (12000, 400)
    # Evaluated as the paper evaluates (§6.1): the average of the last five
    # checkpoints (the last 2,000 updates).
    assert (config.train.evaluate_with, config.train.keep_checkpoints) == (
        "average",
        5,
    )
    values = json.loads(config.to_json())
    assert "data" not in values and TrainConfig.from_dict(values) == config
    changed = apply_overrides(config, ["image.batch_size=4", "model.d_model=32"])
    assert (changed.options.batch_size, changed.model.d_model) == (4, 32)
    # "A image run": the article, and where a data section comes from.
    with pytest.raises(
        ValueError, match="^An image run .* remove `data` .which --task"
    ):
        TrainConfig.from_dict({**values, "data": {"task": "dates"}})
    with pytest.raises(ValueError, match="image.batch_size"):
        apply_overrides(config, ["image.batch_size=0"])


def test_evaluate_reports_the_bits_per_dim_of_an_image_run(tmp_path, capsys):
    """`keras-transformer train` on an image config, then `evaluate`: the
    test bits/dim of the run's final evaluation, with the PNG reference."""
    from keras_transformer import cli
    from tests.training.helpers import SMALL_IMAGE_CONFIG, write_config

    # Trains its own: the `train` command on an image config is under test.
    path = write_config(tmp_path, SMALL_IMAGE_CONFIG)
    run = tmp_path / "run"
    assert cli.main(["train", str(path), "--workdir", str(run)]) == 0
    stored = json.loads((run / "result.json").read_text())
    evaluation = stored["evaluation"]
    assert evaluation["images"] == 64 and np.isfinite(evaluation["bits_per_dim"])
    assert evaluation["codecs"]["PNG"] > 0
    assert not (run / "tokenizer").exists()
    capsys.readouterr()
    status = cli.main(["evaluate", "--workdir", str(run), "--json"])
    out = capsys.readouterr().out
    assert status == 0, out
    evaluated = json.loads(out)
    assert evaluated["bits_per_dim"] == pytest.approx(evaluation["bits_per_dim"])
    assert cli.main(["evaluate", "--workdir", str(run), "--max-sentences", "8"]) == 0
    assert "bits/dim on 8 test images" in capsys.readouterr().out
    # `complete`: 4 test images, each given its top 2 rows (one row of 2 x 2
    # query blocks), 3 completions and the original, 4 x 4 pixels each.
    grid = tmp_path / "grid.png"
    command = ["complete", "--workdir", str(run), "--output", str(grid)]
    assert cli.main(command) == 0
    assert "Completions of 4 test images" in capsys.readouterr().out
    from PIL import Image

    from keras_transformer.data.images import load_sample_patches

    picture = np.asarray(Image.open(grid))
    assert picture.shape == ((4 * 4 + 3) * 4, (5 * 4 + 4) * 4, 3)
    first = load_sample_patches(4, 64).test.images[0]
    given = picture[:8:4, :16:4]  # the first image's given rows, unscaled
    np.testing.assert_array_equal(given, first[:2])
    completed = picture[:16:4, 20:36:4]  # its first completion keeps them
    np.testing.assert_array_equal(completed[:2], first[:2])
    assert (picture[8:16:4, :16:4] == 128).all()  # the rows it was not given
