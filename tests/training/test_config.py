"""TrainConfig: the paper's defaults, overrides, validation, JSON, resume checks."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

import pytest

from keras_transformer.models import ImageTransformerConfig, TransformerConfig, presets
from keras_transformer.training import (
    DataConfig,
    TrainConfig,
    TrainingConfig,
    apply_overrides,
    config_differences,
    parse_override,
)
from keras_transformer.training.checkpoints import (
    ConfigMismatchError,
    prepare_run_config,
)
from tests.training.helpers import SMALL_CONFIG, small_config, write_config


def test_defaults_are_the_papers_recipe():
    config = TrainConfig(model="base")
    optimizer = config.model.optimizer
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert optimizer.warmup_steps == 4000 and optimizer.learning_rate_scale == 1.0
    assert optimizer.clipnorm is None
    assert config.train.label_smoothing == 0.1 and config.model.dropout == 0.1
    assert config.train.gradient_accumulation == 1
    assert config.train.precision == "float32"
    # The shared vocabulary size follows the model unless data sets it.
    assert config.data.vocabulary_size == config.model.vocabulary_size == 37000


def test_model_from_preset_name_mapping_and_dataclass():
    by_name = TrainConfig(model="small")
    by_mapping = TrainConfig(model={"preset": "small"})
    assert by_name.model == by_mapping.model == presets["small"]
    changed = TrainConfig(model={"preset": "small", "optimizer": {"warmup_steps": 7}})
    assert changed.model.optimizer.warmup_steps == 7
    assert changed.model.optimizer.beta_2 == 0.98  # the rest stays the preset's
    assert TrainConfig(model=presets["tiny"]).model == presets["tiny"]


def test_overrides_by_dotted_key():
    config = apply_overrides(
        TrainConfig(),
        [
            "model.d_model=128",
            "model.optimizer.warmup_steps=400",
            "model.optimizer.clipnorm=1.0",
            "data.task=multi30k",
            "data.bucket_boundaries=[8,16,32,64]",
            "data.vocabulary_size=900",
            "train.precision=mixed_bfloat16",
            "train.jit_compile=true",
            "train.test_samples=null",
        ],
    )
    assert config.model.d_model == 128
    assert config.model.optimizer.warmup_steps == 400
    assert config.model.optimizer.clipnorm == 1.0
    assert config.data.task == "multi30k"
    assert config.data.bucket_boundaries == (8, 16, 32, 64)
    assert config.data.vocabulary_size == config.model.vocabulary_size == 900
    assert config.train.precision == "mixed_bfloat16"
    assert config.train.jit_compile is True
    assert config.train.test_samples is None


def test_override_of_the_whole_model_with_a_preset():
    config = apply_overrides(TrainConfig(), ["model=small", "model.num_heads=4"])
    assert config.model == presets["small"].replace(num_heads=4)
    assert config.data.vocabulary_size == 8000
    assert config.data.max_sentence_length == 128
    # On a raw mapping whose model is still a preset name too.
    raw = {"model": "tiny"}
    assert apply_overrides(raw, ["model.d_ff=128"]).model.d_ff == 128


def test_model_overrides_without_a_model_section_change_the_default_model():
    """`train --workdir RUN --set model.dropout=0.2` (no config file) trained
    the TransformerConfig defaults, the paper's base model of 37,000 tokens,
    instead of the "tiny" model the same command trains without `--set`."""
    config = apply_overrides({}, ["model.dropout=0.2", "model.optimizer.clipnorm=1"])
    assert config.model == presets["tiny"].replace(
        dropout=0.2,
        optimizer=dataclasses.replace(presets["tiny"].optimizer, clipnorm=1.0),
    )
    assert config.data.vocabulary_size == presets["tiny"].vocabulary_size
    assert apply_overrides({}, ["model=small", "model.dropout=0.2"]).model == (
        presets["small"].replace(dropout=0.2)
    )
    assert apply_overrides({}, ["model.preset=small"]).model == presets["small"]
    # An image run's default model is the ImageTransformerConfig defaults.
    image = apply_overrides({"kind": "image"}, ["model.num_layers=3"])
    assert image.model == ImageTransformerConfig(num_layers=3)
    classifier = apply_overrides({"kind": "classification"}, ["model.dropout=0.3"])
    assert classifier.model == presets["tiny"].replace(dropout=0.3)
    # A model section, even one without a preset, keeps its meaning.
    assert apply_overrides({"model": {}}, ["model.dropout=0.2"]).model == (
        TransformerConfig(dropout=0.2)
    )


def test_a_task_without_languages_takes_its_own_direction():
    """`train --task tatoeba` was refused ("translates between English and
    Spanish ... Received: 'de' -> 'en'"), though the docs suggest it."""
    directions = {
        (None, None, "tatoeba"): ("en", "es"),
        ("es", None, "tatoeba"): ("es", "en"),
        (None, "en", "tatoeba"): ("es", "en"),
        (None, None, "multi30k"): ("de", "en"),
        ("en", None, "multi30k"): ("en", "de"),
        ("fr", None, "multi30k"): ("fr", "en"),
        (None, "de", "multi30k"): ("en", "de"),
        (None, None, "dates"): ("de", "en"),
    }
    for (source, target, task), direction in directions.items():
        data = DataConfig(task=task, source_language=source, target_language=target)
        assert (data.source_language, data.target_language) == direction
    raw = {"data": {"task": "tatoeba"}}
    assert TrainConfig.from_dict(raw).data.direction == "en-es"
    assert apply_overrides({}, ["data.task=tatoeba"]).data.direction == "en-es"
    with pytest.raises(ValueError, match="English and Spanish.*'de' -> 'es'"):
        DataConfig(task="tatoeba", source_language="de")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.d_modle=128", "Unknown config key 'model.d_modle'"),
        ("train.stepz=1", "Unknown config key 'train.stepz'"),
        ("optimizer.warmup_steps=1", "Unknown config key 'optimizer'"),
        ("model.optimizer.warmup=1", "Unknown config key 'model.optimizer.warmup'"),
        # A misspelt key is named; one of another section says where it is.
        ("train.train_step=9", "train.train_step=9'. Did you mean 'train_steps'? "),
        ("modle.d_model=3", "'modle.d_model=3'. Did you mean 'model'? Known keys"),
        (
            "train.warmup_steps=9",
            "It is model.optimizer.warmup_steps: --set model.optimizer.warmup_steps=9.",
        ),
        (
            "train.learning_rate=1",
            "Did you mean 'model.optimizer.learning_rate_scale'?",
        ),
        ("train.batch_size=1", "'train.batch_size=1'. Known keys here: train_steps"),
        ("data.task=wmt", "`data.task` must be one of"),
        ("train.precision=float16", "`train.precision` must be one of"),
        ("train.gradient_accumulation=0", "positive integer"),
        ("model.dropout=1.5", "`model.dropout` must be a rate in [0, 1)"),
        ("data.max_sentence_length=100", "exceeds the largest bucket boundary"),
        ("data.max_sentence_length=100", "exceeds the largest bucket boundary"),
        ("train.label_smoothing=1.0", "`train.label_smoothing` must be"),
        ("train.epochs=3", "either `train.train_steps` or `train.epochs`"),
        ("train.epochs=3", "or `--set train.train_steps=null` clears the one"),
        (
            "model.vocabulary_size=10",
            "Set the vocabulary size with data.vocabulary_size",
        ),
        ("d_model", "not of the form key=value"),
    ],
)
def test_bad_overrides_are_refused_with_a_clear_message(override, message):
    with pytest.raises(ValueError, match=_escape(message)):
        apply_overrides(SMALL_CONFIG, [override])


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_unknown_keys_list_the_known_ones():
    with pytest.raises(ValueError) as error:
        apply_overrides({}, ["data.max_tokens=1"])
    assert "max_tokens_per_batch" in str(error.value)


def test_parse_override_reads_json_values_and_plain_strings():
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=1e-9") == (["a"], 1e-9)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=mixed_float16") == (["a"], "mixed_float16")
    assert parse_override("a = true") == (["a"], True)
    with pytest.raises(ValueError, match="empty part"):
        parse_override("a..b=1")


def test_json_round_trip(tmp_path):
    config = small_config("train.precision=mixed_float16", "model.norm_first=true")
    assert TrainConfig.from_json(config.to_json()) == config
    path = config.save(tmp_path / "config.json")
    assert TrainConfig.load(path) == config
    values = json.loads(path.read_text())
    assert set(values) == {"model", "data", "train"}
    assert values["model"]["optimizer"]["epsilon"] == 1e-9
    assert "preset" not in values["model"]  # stored resolved


def test_invalid_json_and_sections_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not valid JSON"):
        TrainConfig.from_json("{")
    # A trailing comma (or a YAML file) is named as what JSON lacks.
    with pytest.raises(ValueError, match=r"line 1 column 24 .*no comments, trailing"):
        TrainConfig.from_json('{"train": {"epochs": 1,}}')
    # An empty file is named as empty, not "Expecting value: line 1 column 1".
    for empty in ("", " \n"):
        with pytest.raises(ValueError, match="^The training config is empty: write"):
            TrainConfig.from_json(empty)
    with pytest.raises(ValueError, match="Unknown config sections"):
        TrainConfig.from_dict({"optimizer": {}})
    with pytest.raises(ValueError, match="two vocabulary sizes"):
        TrainConfig.from_dict(
            {"model": {"vocabulary_size": 10}, "data": {"vocabulary_size": 20}}
        )
    with pytest.raises(FileNotFoundError):
        TrainConfig.load(tmp_path / "missing.json")


def test_section_validation():
    with pytest.raises(ValueError, match="needs `data.train_source`"):
        DataConfig(task="files")
    with pytest.raises(ValueError, match="English and Spanish"):
        DataConfig(task="tatoeba", source_language="de", target_language="en")
    with pytest.raises(ValueError, match="longer than the model supports"):
        TrainConfig(model="tiny", data=DataConfig(max_sentence_length=96))
    with pytest.raises(ValueError, match="shared source-target vocabulary"):
        TrainConfig(
            model=presets["tiny"].replace(
                target_vocabulary_size=7, share_embeddings=False
            )
        )
    with pytest.raises(ValueError, match="`train.verbose`"):
        TrainingConfig(verbose=5)


def test_config_differences_and_flat_keys():
    old = small_config()
    new = small_config("model.d_model=64", "train.train_steps=9")
    assert config_differences(old, new) == {
        "model.d_model": (32, 64),
        "train.train_steps": (6, 9),
    }
    assert old.flat()["model.optimizer.beta_2"] == 0.98


def _fake_checkpoint(directory):
    checkpoints = directory / "checkpoints"
    checkpoints.mkdir(parents=True)
    # A checkpoint is its files on disk (TensorFlow's state file is not asked).
    (checkpoints / "ckpt-3.index").write_bytes(b"index")
    (checkpoints / "ckpt-3.data-00000-of-00001").write_bytes(b"data")


def test_restart_with_a_changed_config_is_refused(tmp_path):
    config = small_config()
    assert prepare_run_config(config, tmp_path, force=False) is False
    # Before any checkpoint, a new config replaces the old one; a tokenizer
    # learned for other data settings is discarded.
    (tmp_path / "tokenizer").mkdir()
    other_data = small_config("data.num_train_examples=200")
    assert prepare_run_config(other_data, tmp_path, force=False) is False
    assert not (tmp_path / "tokenizer").exists()
    assert prepare_run_config(config, tmp_path, force=False) is False

    _fake_checkpoint(tmp_path)
    # The same config, or a longer run, resumes.
    assert prepare_run_config(config, tmp_path, force=False) is True
    longer = small_config("train.train_steps=12")
    assert prepare_run_config(longer, tmp_path, force=False) is True
    changed = small_config("train.train_steps=12", "model.dropout=0.3")
    with pytest.raises(ConfigMismatchError) as error:
        prepare_run_config(changed, tmp_path, force=False)
    message = str(error.value)
    assert "model.dropout: 0.1 -> 0.3" in message
    assert "--force" in message and "--workdir" in message
    # --force accepts it and records the new config.
    assert prepare_run_config(changed, tmp_path, force=True) is True
    assert TrainConfig.load(tmp_path / "config.json") == changed
    # Into or out of mixed_float16 (a loss-scale optimizer of other state)
    # --force failed at the restore with TensorFlow's "RestoreV2 ... tensor_name
    # = optimizer/..."; it is refused first, with or without --force.
    # float32 <-> mixed_bfloat16 (no loss scale) resumes with --force.
    for precision in ("mixed_float16", "mixed_bfloat16"):
        other = small_config("train.train_steps=12", "model.dropout=0.3",
                             f"train.precision={precision}")  # fmt: skip
        if precision == "mixed_bfloat16":
            assert prepare_run_config(other, tmp_path, force=True) is True
            prepare_run_config(changed, tmp_path, force=True)
            continue
        for force in (False, True):
            with pytest.raises(ConfigMismatchError, match="even with --force"):
                prepare_run_config(other, tmp_path, force=force)
        assert TrainConfig.load(tmp_path / "config.json") == changed


# ------------------------------------------------ one owner per setting
#: Keys that are no setting (names the settings had before 0.1.0) and the
#: setting the error's list of known ones offers instead (None: the setting
#: is in another section, `train.label_smoothing`).
NOT_SETTINGS = {
    "model.label_smoothing": None,
    "data.max_length": "max_sentence_length",
    "train.decode_extra_length": "extra_length",
}


@pytest.mark.parametrize("key", sorted(NOT_SETTINGS))
def test_a_key_that_is_no_setting_is_one_line_listing_the_known_ones(key, tmp_path):
    """In a config file, an override or a mapping: refused in one line that
    names the key and lists the known settings."""
    section, name = key.split(".")
    values = {**SMALL_CONFIG, section: {**SMALL_CONFIG[section], name: 24}}
    attempts = (
        lambda: TrainConfig.load(write_config(tmp_path, values)),
        lambda: apply_overrides(small_config(), [f"{key}=24"]),
        lambda: apply_overrides(values, []),
    )
    for attempt in attempts:
        with pytest.raises(ValueError, match="Unknown") as raised:
            attempt()
        message = str(raised.value)
        assert "\n" not in message and name in message and "Known" in message
        if NOT_SETTINGS[key] is not None:
            assert NOT_SETTINGS[key] in message.split("Known", 1)[1]


def test_old_names_are_gone_from_python():
    with pytest.raises(TypeError):
        DataConfig(max_length=32)
    with pytest.raises(TypeError):
        TrainingConfig(decode_extra_length=7)
    assert not hasattr(DataConfig(), "max_length")
    assert not hasattr(TrainingConfig(), "decode_extra_length")
    with pytest.raises(
        ValueError,
        match=r"Unknown `model` settings: \['label_smoothing'\]\. It is "
        r"train\.label_smoothing\.",
    ):
        TrainConfig(model={**SMALL_CONFIG["model"], "label_smoothing": 0.3})


def test_label_smoothing_rows_of_table_3_set_the_training_setting():
    assert TrainConfig(model="base").train.label_smoothing == 0.1
    assert TrainConfig(model="table3_D_ls0.2").train.label_smoothing == 0.2
    assert TrainConfig(model={"preset": "table3_D_ls0.0"}).train.label_smoothing == 0
    assert presets["table3_D_ls0.0"] == presets["base"]  # the model is base's
    explicit = TrainConfig(model="table3_D_ls0.2", train={"label_smoothing": 0.05})
    assert explicit.train.label_smoothing == 0.05
    # A new preset brings its own label smoothing, like its vocabulary size.
    swapped = apply_overrides(TrainConfig(), ["model=table3_D_ls0.0"])
    assert swapped.train.label_smoothing == 0.0


def test_vocabulary_size_has_one_owner():
    from keras_transformer.training.config import reconcile_vocabulary_size

    model, data = reconcile_vocabulary_size(presets["tiny"], DataConfig())
    assert data.vocabulary_size == model.vocabulary_size == 1000
    model, data = reconcile_vocabulary_size(
        presets["tiny"], DataConfig(vocabulary_size=300)
    )
    assert model.vocabulary_size == 300
    with pytest.raises(ValueError, match="two vocabulary sizes"):
        reconcile_vocabulary_size(
            presets["tiny"], DataConfig(vocabulary_size=300), model_sets_it=True
        )


def test_overrides_have_one_home():
    from keras_transformer.training import config as config_module
    from keras_transformer.training import overrides

    assert not hasattr(config_module, "apply_overrides")
    assert not hasattr(config_module, "parse_override")
    # The keys of a config are the config module's (a file's unknown key
    # and a --set's get the same hints); overrides uses them.
    assert overrides.known_keys is config_module.known_keys
    assert "known_keys" not in overrides.__all__
    assert "max_sentence_length" in config_module.known_keys(["data"])
    assert "label_smoothing" in config_module.known_keys(["train"])


def test_task_names_need_no_tensorflow():
    import subprocess
    import sys

    code = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('c', "
        "'keras_transformer/conventions.py')\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "print(module.TASK_NAMES, 'tensorflow' in sys.modules)\n"
    )
    from tests.training.helpers import REPO_ROOT

    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert out.stdout.strip() == "('dates', 'multi30k', 'tatoeba', 'files') False"
    from keras_transformer.training.sections import TASKS

    assert TASKS == ("dates", "multi30k", "tatoeba", "files")


# ------------------------------------------------- every field: type and range
#: (dotted key, a value it must refuse): wrong types (a string for a number,
#: a bool for an integer, a float for an integer, a scalar for a list, null
#: where null means nothing) and values out of range (NaN, infinities,
#: negative, zero, a probability of 1 or more).
BAD_VALUES = [
    ("model.optimizer.warmup_steps", "abc"),
    ("model.optimizer.warmup_steps", 0),
    ("model.optimizer.warmup_steps", 400.5),
    ("model.optimizer.warmup_steps", True),
    ("model.optimizer.learning_rate_scale", "nan"),
    ("model.optimizer.learning_rate_scale", float("nan")),
    ("model.optimizer.learning_rate_scale", 0),
    ("model.optimizer.beta_1", -10),
    ("model.optimizer.beta_2", 1.0),
    ("model.optimizer.epsilon", 0),
    ("model.optimizer.epsilon", True),
    ("model.optimizer.clipnorm", -1.0),
    ("model.optimizer.clipnorm", float("inf")),
    ("model.d_model", True),
    ("model.d_model", 32.0),
    ("model.num_heads", None),
    ("model.max_length", -1),
    ("model.key_dim", 0),
    ("model.dropout", "abc"),
    ("model.attention_settings.dropout", float("inf")),
    ("model.attention_settings.window", 0),
    ("model.attention_settings.num_key_value_heads", 3),
    ("model.ffn_dropout", -0.1),
    ("model.norm_first", 1),
    ("model.share_embeddings", "yes"),
    ("model.layer_norm_epsilon", 0),
    ("model.activation", 5),
    ("model.activation", "nope"),
    ("model.position_encoding", "rotary"),
    ("data.task", None),
    ("data.source_language", 5),
    ("data.data_dir", ""),
    ("data.vocabulary_size", -1),
    ("data.max_tokens_per_batch", "4096"),
    ("data.shuffle_buffer", 0),
    ("data.max_sentence_length", 1),
    ("data.bucket_boundaries", 8),
    ("data.bucket_boundaries", "8,16"),
    ("data.bucket_boundaries", {"8": 16}),
    ("data.bucket_boundaries", [8, 16.0, 24]),
    ("data.bucket_boundaries", [16, 8, 24]),
    ("data.bucket_boundaries", []),
    ("data.too_long", True),
    ("data.on_bad_line", "warn"),
    ("train.train_steps", "abc"),
    ("train.seed", -1),
    ("train.seed", 2**32),
    ("train.seed", 1.5),
    ("train.verbose", True),
    ("train.verbose", 3),
    ("train.jit_compile", "true"),
    ("train.keep_best", 1),
    ("train.attention_images", "false"),
    ("train.label_smoothing", float("nan")),
    ("train.label_smoothing", "0.1"),
    ("train.extra_length", -1),
    ("train.precision", None),
    ("train.log_every", 0.5),
    ("train.evaluate_with", "first"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES)
def test_every_field_is_checked_for_type_and_range(key, value):
    override = f"{key}={json.dumps(value)}"
    with pytest.raises(ValueError) as error:
        apply_overrides(SMALL_CONFIG, [override])
    message = str(error.value)
    assert "\n" not in message
    assert f"`{key}" in message  # names the field (or its entry)
    if not isinstance(value, (list, dict)):
        assert repr(value) in message  # and the value received
    # A config file with the same value fails the same way.
    raw = json.loads(json.dumps(SMALL_CONFIG))
    section, *names = key.split(".")
    node = raw[section]
    for name in names[:-1]:
        node = node.setdefault(name, {})
    node[names[-1]] = value
    with pytest.raises(ValueError, match=_escape(f"`{key}")):
        TrainConfig.from_dict(raw)


def _every_key() -> list[str]:
    from keras_transformer.training.config import known_keys

    keys = ["model", "data", "train", "model.optimizer"]
    for path in (["model"], ["model", "optimizer"], ["data"], ["train"]):
        keys += [".".join([*path, name]) for name in known_keys(path)]
    return sorted(set(keys))


def test_no_value_of_any_setting_raises_anything_but_a_one_line_value_error():
    # Whatever a config file or --set gives any setting, the config is
    # either valid or refused with a ValueError (the command line prints it
    # as one line): never a TypeError or another traceback.
    values = ["abc", "", -7, 0, 0.5, True, None, [1], [], {"a": 1}, float("nan")]
    refused = 0
    for key in _every_key():
        for value in values:
            try:
                apply_overrides(SMALL_CONFIG, [f"{key}={json.dumps(value)}"])
            except ValueError as e:
                assert "\n" not in str(e), (key, value, str(e))
                refused += 1
    assert refused > 10 * len(_every_key())


def _image_config() -> dict:
    return json.loads(
        (
            Path(__file__).parents[2] / "configs" / "image_sample_patches.json"
        ).read_text()
    )


def test_overrides_of_an_image_run_know_the_image_model_keys():
    config = apply_overrides(
        _image_config(),
        [
            "model.num_layers=2",
            "model.generation_order=image",
            "model.query_block=[4,4]",
            "model.optimizer.warmup_steps=50",
        ],
    )
    assert config.kind == "image"
    assert config.model.num_layers == 2
    assert config.model.generation_order == "image"
    assert config.model.query_block == (4, 4)
    assert config.model.optimizer.warmup_steps == 50
    with pytest.raises(ValueError, match="Known keys here: .*query_block"):
        apply_overrides(_image_config(), ["model.num_encoder_layers=2"])


def test_no_value_of_an_image_model_setting_raises_anything_but_a_value_error():
    from keras_transformer.training.config import known_keys

    values = ["abc", "", -7, 0, 0.5, True, None, [1], [], {"a": 1}, float("nan")]
    keys = [f"model.{name}" for name in known_keys(["model"], "image")]
    refused = 0
    for key in keys:
        for value in values:
            try:
                apply_overrides(_image_config(), [f"{key}={json.dumps(value)}"])
            except ValueError as e:
                assert "\n" not in str(e), (key, value, str(e))
                refused += 1
    assert refused > 8 * len(keys)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"train": None}, "The `train` section is null"),
        ({"data": None}, "The `data` section is null"),
        ({"model": None}, "The `model` section must be a preset name"),
        ({"model": 5}, "The `model` section must be a preset name"),
        ({"model": [1]}, "The `model` section must be a preset name"),
        ({"model": {"preset": None}}, "`model.preset` must be the name of a preset"),
        ({"model": {"preset": 3}}, "`model.preset` must be the name of a preset"),
        ({"model": {"optimizer": None}}, "`model.optimizer` must be a mapping"),
        (
            {"model": {"preset": "tiny", "optimizer": None}},
            "`model.optimizer` must be a mapping",
        ),
        ({"model": {"optimizer": 5}}, "`model.optimizer` must be a mapping"),
        (
            {"model": {"preset": "tiny", "optimizer": {"warmup": 3}}},
            "Unknown `model.optimizer` settings: ['warmup']",
        ),
        (
            {"model": {"optimizer": {"warmup": 3}}},
            "Unknown `model.optimizer` settings: ['warmup']",
        ),
        ({"data": 5}, "The `data` section must be a JSON object"),
        ({"train": "fast"}, "The `train` section must be a JSON object"),
    ],
)
def test_null_and_misshapen_sections_are_refused(raw, message):
    with pytest.raises(ValueError, match=_escape(message)):
        TrainConfig.from_dict(raw)


def test_an_override_into_a_null_section_is_refused():
    with pytest.raises(ValueError, match="'train' is null in the config"):
        apply_overrides({"train": None}, ["train.seed=3"])
    with pytest.raises(ValueError, match="'model.optimizer' is null in the config"):
        apply_overrides(
            {"model": {"preset": "tiny", "optimizer": None}},
            ["model.optimizer.warmup_steps=3"],
        )
    # A section that is absent takes its defaults, and the override.
    assert apply_overrides({}, ["train.seed=3"]).train.seed == 3


def test_an_override_that_makes_a_section_a_value_is_the_one_refused():
    """``--set train=5 --set train.seed=3`` blamed the second override
    ("'train' is a value, not a section"); the first is the mistake, and is
    refused naming the section's keys."""
    for overrides, name in (
        (["train=5", "train.seed=3"], "train"),
        (["model.optimizer=3", "model.optimizer.warmup_steps=4"], "model.optimizer"),
        (["data=[1]"], "data"),
    ):
        with pytest.raises(ValueError) as error:
            apply_overrides(SMALL_CONFIG, overrides)
        message = str(error.value)
        assert message.startswith(
            f"Override {overrides[0]!r}: {name!r} is a section of settings ("
        ), message
        assert f"set one of its keys ({name}." in message
    # A model section may be a preset's name, and a section a JSON object.
    small = apply_overrides({}, ["model=small"]).model
    assert small.num_encoder_layers == 3 and small.d_model == 256  # not tiny
    assert apply_overrides({}, ['train={"seed": 3}']).train.seed == 3


def test_bucket_boundaries_are_bounded_in_number():
    from keras_transformer.training.sections import MAX_BUCKET_BOUNDARIES

    most = list(range(1, MAX_BUCKET_BOUNDARIES + 1))
    config = apply_overrides(SMALL_CONFIG, [f"data.bucket_boundaries={most}"])
    assert config.data.bucket_boundaries == tuple(most)
    with pytest.raises(ValueError, match="must hold 1 to 1,000 lengths") as error:
        apply_overrides(SMALL_CONFIG, [f"data.bucket_boundaries={most + [10**4]}"])
    assert "1,001 entries" in str(error.value)
    assert len(str(error.value)) < 300  # the list itself is not repeated


def test_oversize_deep_and_non_object_config_files_are_refused(tmp_path):
    from keras_transformer.training.config import MAX_CONFIG_BYTES, read_config_file

    big = tmp_path / "big.json"
    boundaries = list(range(1, MAX_CONFIG_BYTES // 7))
    big.write_text(json.dumps({"data": {"bucket_boundaries": boundaries}}))
    assert big.stat().st_size > MAX_CONFIG_BYTES
    for read in (read_config_file, TrainConfig.load):
        with pytest.raises(ValueError, match="at most 1,000,000 bytes") as error:
            read(big)
        assert str(big) in str(error.value) and "\n" not in str(error.value)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        TrainConfig.load(deep)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must be a JSON object"):
        TrainConfig.load(listed)
    assert read_config_file(write_config(tmp_path, SMALL_CONFIG)) == SMALL_CONFIG


def test_a_config_saved_with_a_byte_order_mark_or_as_utf16(tmp_path):
    """A config saved by an editor with a UTF-8 byte-order mark was refused
    ("Unexpected UTF-8 BOM (decode using utf-8-sig)"); one saved as UTF-16
    said "not UTF-8 text ('utf-8' codec can't decode byte 0xff ...)"."""
    from keras_transformer.training.config import read_config_file

    marked = tmp_path / "marked.json"
    marked.write_text(json.dumps(SMALL_CONFIG), encoding="utf-8-sig")
    assert read_config_file(marked) == SMALL_CONFIG
    utf16 = tmp_path / "utf16.json"
    utf16.write_text(json.dumps(SMALL_CONFIG), encoding="utf-16")
    with pytest.raises(ValueError, match=r"is UTF-16 text, not UTF-8 .*-f UTF-16"):
        TrainConfig.load(utf16)


def test_train_given_a_path_or_a_dict_says_how_to_make_a_config(tmp_path):
    """`train("configs/x.json", ...)` said only "`config` must be a
    TrainConfig. Received: str"; nothing is written."""
    from keras_transformer.training import train

    for config in ("configs/dates_tiny.json", {"model": "tiny"}):
        with pytest.raises(TypeError) as raised:
            train(config, tmp_path / "run")
        assert str(raised.value) == (
            "`config` must be a TrainConfig. Received: "
            f"{type(config).__name__}; read a file with TrainConfig.load(path), "
            "or use TrainConfig.from_dict."
        )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"train": {"warmup_steps": 9}},
            "Unknown `train` settings: ['warmup_steps']. It is "
            "model.optimizer.warmup_steps. Known settings: [",
        ),
        (
            {"data": {"train_steps": 9}},
            "Unknown `data` settings: ['train_steps']. It is train.train_steps. ",
        ),
        (
            {"train": {"train_step": 9}},
            "Unknown `train` settings: ['train_step']. Did you mean 'train_steps'? ",
        ),
        (
            {"kind": "classification", "train": {"batch_size": 9}},
            "['batch_size']. It is classification.batch_size. Known settings: [",
        ),
        # The model section and its optimizer, of a text and an image run.
        (
            {"model": {"preset": "tiny", "warmup_steps": 9}},
            "Unknown `model` settings: ['warmup_steps']. It is "
            "model.optimizer.warmup_steps. Known settings: [",
        ),
        (
            {"model": {"optimizer": {"label_smoothing": 0.2}}},
            "Unknown `model.optimizer` settings: ['label_smoothing']. It is "
            "train.label_smoothing. Known settings: [",
        ),
        # A model section that sets the vocabulary size is read before the
        # config is built (to reconcile it with data.vocabulary_size).
        (
            {"model": {"vocabulary_size": 900, "warmup_steps": 9}},
            "Unknown `model` settings: ['warmup_steps']. It is "
            "model.optimizer.warmup_steps. Known settings: [",
        ),
        (
            {"model": {"preset": "tiny", "vocabulary_size": 900, "d_mdel": 8}},
            "Unknown `model` settings: ['d_mdel']. Did you mean 'd_model'? ",
        ),
        (
            {"kind": "image", "model": {"num_layer": 2}},
            "Unknown `model` settings: ['num_layer']. Did you mean 'num_layers'? ",
        ),
        (
            {"kind": "image", "model": {"preset": "tiny"}},
            "Unknown `model` settings: ['preset']. The model of a kind='image' run "
            "takes no preset (`--preset` and `model.preset` name text models): give "
            "its settings instead. Known settings: ['activation', 'attention',",
        ),
        # Two unknown keys: each one's closest name, no "It is".
        (
            {"train": {"train_step": 9, "warmup_steps": 1}},
            "['train_step', 'warmup_steps']. Did you mean 'train_steps' for "
            "'train_step'? Known settings: [",
        ),
    ],
)
def test_a_config_files_unknown_key_says_where_it_is(values, message):
    """A config file's key in the wrong section listed the section's keys
    only; it now says where the key is, as `--set` does."""
    with pytest.raises(ValueError) as raised:
        TrainConfig.from_dict(values)
    assert message in str(raised.value)


def test_data_file_paths_are_stored_absolute(tmp_path, monkeypatch):
    """A run trained with ``data.train_source=data/pairs.tsv`` stored that
    relative path: `evaluate` or a resume from another folder said "Text
    file not found: data/pairs.tsv". Paths are now taken from the folder the
    config is given in (and ``~`` expanded) and stored absolute."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    data = DataConfig(
        task="files",
        train_source="data/pairs.tsv",
        held_out_pairs=10,
        data_dir="~/corpora",
    )
    assert data.train_source == str(tmp_path / "data" / "pairs.tsv")
    assert data.data_dir == str(tmp_path / "home" / "corpora")
    assert data.train_target is None
    config = small_config(
        "data.task=files", "data.train_source=pairs.tsv", "data.held_out_pairs=5"
    )
    config.save(tmp_path / "config.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = TrainConfig.load(tmp_path / "config.json")
    assert loaded.data.train_source == str(tmp_path / "pairs.tsv")
    assert config_differences(config, loaded) == {}


def test_a_resume_on_changed_data_files_is_refused(tmp_path, caplog):
    """A run of ``task='files'`` whose training file was edited or replaced
    between two starts resumed on the new text (with the tokenizer learned
    from the old) without a word. ``data.json`` records the files' content
    at the first start; a changed one is refused as a changed config is."""
    from keras_transformer.training.data_record import check_data_content

    run = tmp_path / "run"
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{i} a\t{i} b\n" for i in range(20)), encoding="utf-8")
    config = small_config(
        "data.task=files", f"data.train_source={pairs}", "data.held_out_pairs=5"
    )
    assert prepare_run_config(config, run, force=False) is False
    record = json.loads((run / "data.json").read_text(encoding="utf-8"))
    assert list(record) == ["train_source"]
    assert record["train_source"]["path"] == str(pairs)
    assert record["train_source"]["size"] == pairs.stat().st_size
    _fake_checkpoint(run)
    content = {"train": {"examples": 10, "sha256": "0"}}
    check_data_content(content, run, force=False, source="its data")
    # Touched but the same text: resumes (and records the new time, keeping
    # the record of the data as read).
    os.utime(pairs, ns=(1, 1))
    assert prepare_run_config(config, run, force=False) is True
    record = json.loads((run / "data.json").read_text(encoding="utf-8"))
    assert record["train_source"]["mtime_ns"] == 1
    assert record["content"] == content
    # Another text at the same path: refused, naming the file and the ways on.
    pairs.write_text("x\ty\n" * 20, encoding="utf-8")
    with pytest.raises(ConfigMismatchError) as error:
        prepare_run_config(config, run, force=False)
    message = str(error.value)
    assert f"data.train_source {pairs} (" in message
    assert "was trained on other text" in message
    assert "--force" in message and "--workdir" in message
    assert "\n" not in message
    # The same size (an edit of one letter a line): the hash tells.
    pairs.write_text("".join(f"{i} c\t{i} b\n" for i in range(20)), encoding="utf-8")
    assert pairs.stat().st_size == record["train_source"]["size"]
    with pytest.raises(ConfigMismatchError, match="was trained on other text"):
        prepare_run_config(config, run, force=False)
    # A file missing at a resume (the data loader says so) keeps its record.
    moved = pairs.rename(tmp_path / "moved.tsv")
    prepare_run_config(config, run, force=False)
    assert json.loads((run / "data.json").read_text(encoding="utf-8")) == record
    moved.rename(pairs)
    # --force continues on the new text, with a warning, and records it.
    with caplog.at_level(logging.WARNING):
        assert prepare_run_config(config, run, force=True) is True
    assert "Continuing on the new text (--force)" in caplog.text
    assert prepare_run_config(config, run, force=False) is True
    # A garbled record is a warning, and written anew.
    (run / "data.json").write_text("{", encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert prepare_run_config(config, run, force=False) is True
    assert "data.json is not valid JSON" in caplog.text
    assert json.loads((run / "data.json").read_text(encoding="utf-8"))
    # A new run of the dates in the folder (no checkpoint) drops the record.
    shutil.rmtree(run / "checkpoints")
    assert prepare_run_config(small_config(), run, force=False) is False
    assert not (run / "data.json").exists()


def test_a_garbled_data_record_is_one_warning_at_a_resume(tmp_path, caplog):
    """A resume reads ``data.json`` twice (its files when the config is
    prepared, the data as read once they are): a garbled one was warned of
    twice, saying the *files* would be recorded of a task that has none."""
    from keras_transformer.training.data_record import check_data_content

    run, config = tmp_path / "run", small_config()  # the built-in dates
    assert prepare_run_config(config, run, force=False) is False
    _fake_checkpoint(run)
    content = {"train": {"examples": 10, "sha256": "0"}}
    (run / "data.json").write_text("{", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert prepare_run_config(config, run, force=False) is True
        check_data_content(content, run, force=False, source="its data")
    assert caplog.text.count("data.json is not valid JSON") == 1, caplog.text
    assert "train records the data as read now." in caplog.text
    assert json.loads((run / "data.json").read_text())["content"] == content


def test_the_data_as_read_are_recorded_and_checked(tmp_path, caplog):
    """Data that changed between two starts without a file setting changing
    (another copy under a moved ``data.data_dir``, another version
    downloaded, a reader that cleans the text otherwise) were trained on
    without a word. ``data.json`` records the training examples as read; a
    resume on others is refused unless forced."""
    import numpy as np

    from keras_transformer.data import TextPairs, synthetic_dates
    from keras_transformer.data.images import ImageSplit
    from keras_transformer.data.tasks import TaskData
    from keras_transformer.training.data_record import (
        CONTENT_KEY,
        check_data_content,
        data_content,
    )

    pairs = synthetic_dates(20, seed=0)
    data = TaskData(pairs, pairs.take(5), pairs.take(5), test_name="test")
    content = data_content(data)
    assert content == {"train": {"examples": 20, "sha256": content["train"]["sha256"]}}
    # Where the pairs were read from is not what they hold; the validation
    # and test splits may change; one letter of one sentence is another content.
    moved = TextPairs(pairs.sources, pairs.targets, files=("elsewhere.tsv",))
    assert data_content(TaskData(moved, pairs.take(4), pairs.take(1), "x")) == content
    edited = TextPairs((pairs.sources[0] + "!", *pairs.sources[1:]), pairs.targets)
    assert (
        data_content(TaskData(edited, pairs.take(5), pairs.take(5), "test"))["train"]
        != content["train"]
    )
    images = ImageSplit(np.zeros((3, 2, 2, 1), np.uint8), np.arange(3))
    brighter = ImageSplit(np.ones((3, 2, 2, 1), np.uint8), np.arange(3))
    image_content = data_content(TaskData(images, images, images, "test"))
    assert image_content["train"]["examples"] == 3
    assert data_content(TaskData(brighter, images, images, "test")) != image_content
    assert data_content(TaskData(object(), images, images, "test")) is None
    without_length = dataclasses.make_dataclass("Texts", [("texts", list)])(["a"])
    assert data_content(TaskData(without_length, images, images, "test")) is None

    run = tmp_path / "run"
    check_data_content(content, run, force=False, source="its data")
    record = json.loads((run / "data.json").read_text(encoding="utf-8"))
    assert record == {CONTENT_KEY: content}
    check_data_content(content, run, force=False, source="its data")  # the same
    other = data_content(TaskData(edited, pairs.take(5), pairs.take(5), "test"))
    with pytest.raises(ValueError) as error:
        check_data_content(other, run, force=False, source="its data (data.data_dir D)")
    message = str(error.value)
    assert (
        "was trained on other data: its data (data.data_dir D) as read now differ "
        "from those of the run's first start in the train split (20 -> 20 examples),"
    ) in message
    assert "--force" in message and "--workdir" in message and "\n" not in message
    assert json.loads((run / "data.json").read_text(encoding="utf-8")) == record
    with caplog.at_level(logging.WARNING):
        check_data_content(other, run, force=True, source="its data")
    assert "Continuing on the new data (--force)" in caplog.text
    check_data_content(other, run, force=False, source="its data")  # recorded


def test_a_run_without_a_length_trains_at_least_twice_its_warmup():
    """With neither `train.train_steps` nor `train.epochs` a run trained one
    epoch: the defaults (`train --workdir RUN`: the dates, 116 updates an
    epoch) were refused against the paper's 4,000 warm-up steps. A
    translation run now trains one epoch or its warm-up twice over, whichever
    is longer; the other kinds (no Eq. 7) one epoch."""
    from keras_transformer.training.checks import check_before_training, planned_updates

    config = TrainConfig.from_dict({})
    assert config.model.optimizer.warmup_steps == 4000
    assert planned_updates(config) is None  # an epoch's updates: from the data
    assert planned_updates(config, 116) == 8000
    assert planned_updates(config, 9000) == 9000
    per_epoch = apply_overrides(config, ["train.steps_per_epoch=116"])
    assert planned_updates(per_epoch) == 8000
    check_before_training(per_epoch)  # was refused: "(116 updates)"
    one_epoch = apply_overrides(per_epoch, ["train.epochs=1"])
    with pytest.raises(ValueError, match=r"longer than the run \(116 updates\)"):
        check_before_training(one_epoch)
    assert planned_updates(apply_overrides(config, ["train.train_steps=50"]), 9) == 50
    classifier = TrainConfig.from_dict({"kind": "classification"})
    assert planned_updates(classifier, 116) == 116 * (classifier.train.epochs or 1)
