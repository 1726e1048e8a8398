"""The package never calls its own deprecated names.

`pyproject.toml` makes a `DeprecationWarning` attributed to a module of the
package an error (``error::DeprecationWarning:keras_transformer(\\.|$)``);
`warn_deprecated`'s stacklevel attributes each warning to the line that
used the old name. So a path of the package that still calls a deprecated
name fails the tests, while a test that calls one on purpose (under
`pytest.warns`) passes. These tests check both halves of that mechanism.
"""

from __future__ import annotations

import inspect
import json
import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest


def _caller_in_module(module_name: str) -> Callable[[], None]:
    """A function of a module named `module_name` that calls a deprecated
    wrapper of the package (`decoding.deprecated.check_integer`)."""
    from keras_transformer.decoding import deprecated

    module = types.ModuleType(module_name)
    module.__dict__["deprecated"] = deprecated
    exec(
        "def call():\n    deprecated.check_integer('beam_size', 4, 1)\n",
        module.__dict__,
    )
    return module.call


def test_a_package_call_of_a_deprecated_name_is_an_error():
    """The filter in pyproject.toml is active: the same deprecated wrapper,
    called from a module of the package, raises."""
    package_caller = _caller_in_module("keras_transformer._deprecation_probe")
    with pytest.raises(DeprecationWarning, match="decoding.check_integer.*0.4"):
        package_caller()
    # A module whose name only starts with the package's is not the package.
    _caller_in_module("keras_transformer_plugin")()  # ignored
    # Called from a test on purpose, it only warns.
    test_caller = _caller_in_module("tests.test_deprecations_probe")
    with pytest.warns(DeprecationWarning, match="decoding.check_integer"):
        test_caller()
    test_caller()  # outside pytest.warns: ignored, not an error


def _deprecated_uses() -> dict[str, Callable[[], Any]]:
    """One use of each kind of deprecated name, written in this module."""
    from keras_transformer.decoding import deprecated
    from keras_transformer.decoding.settings import settings_with
    from keras_transformer.models import TransformerConfig
    from keras_transformer.training import config as training_config
    from keras_transformer.training.config import DataConfig, TrainConfig
    from keras_transformer.training.image import (
        ImageDataConfig,
        ImageRunConfig,
        ImageTrainingConfig,
    )
    from keras_transformer.training.overrides import apply_overrides

    data = DataConfig(max_sentence_length=12)
    # A public function of the package that passes its keywords along (as
    # `Translator` and `export_translator` do to `settings_with`).
    passes_along = types.ModuleType("keras_transformer._passes_along")
    passes_along.__dict__["settings_with"] = settings_with
    exec(
        "def build(**settings):\n    return settings_with(None, settings)\n",
        passes_along.__dict__,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        image_data = ImageDataConfig()
        image_training = ImageTrainingConfig()
    return {
        "function": lambda: deprecated.check_integer("beam_size", 4, 1),
        "renamed argument": lambda: DataConfig(max_length=12),
        "property": lambda: data.max_length,
        "module attribute": lambda: training_config.PAPER_LABEL_SMOOTHING,
        "model argument": lambda: TransformerConfig(label_smoothing=0.2),
        "config key": lambda: TrainConfig.from_dict({"data": {"max_length": 12}}),
        "model config key": lambda: TrainConfig.from_dict(
            {"model": {"label_smoothing": 0.2}}
        ),
        "override key": lambda: apply_overrides({}, ["data.max_length=12"]),
        "keyword passed along": lambda: passes_along.build(length_penalty=0.6),
        "dataclass ImageDataConfig": lambda: ImageDataConfig(),
        "dataclass ImageTrainingConfig": lambda: ImageTrainingConfig(),
        "dataclass ImageRunConfig": lambda: ImageRunConfig(
            data=image_data, train=image_training
        ),
    }


@pytest.mark.parametrize("kind", sorted(_deprecated_uses()))
def test_a_deprecation_warning_names_the_line_that_used_the_old_name(kind: str):
    use = _deprecated_uses()[kind]
    with pytest.warns(DeprecationWarning, match="removed in 0.4") as record:
        use()
    ours = [w for w in record if "removed in 0.4" in str(w.message)]
    assert ours
    line = use.__code__.co_firstlineno  # the lambda's: the use of the old name
    assert {(w.filename, w.lineno) for w in ours} == {(__file__, line)}, [
        (w.filename, w.lineno, str(w.message)) for w in ours
    ]


def test_an_old_key_of_a_config_file_names_the_caller_outside_the_package(tmp_path):
    """An old key reaches the package as data (`TrainConfig.load`, through
    `from_dict` and `upgrade_config_dict`): the warning names the first line
    outside the package, so reading an old run's config.json is no error."""
    from keras_transformer.training.config import TrainConfig

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"data": {"max_length": 12}}))
    with pytest.warns(DeprecationWarning, match="data.max_length") as record:
        config = TrainConfig.load(path)
    line = inspect.currentframe().f_lineno - 1
    assert config.data.max_sentence_length == 12
    assert [(w.filename, w.lineno) for w in record] == [(__file__, line)]
    # Read by a module of the package (a resume reads the stored config):
    # still the first caller outside it, not an error.
    reader = types.ModuleType("keras_transformer._config_reader")
    reader.__dict__.update(TrainConfig=TrainConfig, path=path)
    exec("def read():\n    return TrainConfig.load(path)\n", reader.__dict__)
    assert reader.read().data.max_sentence_length == 12
