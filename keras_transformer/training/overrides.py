"""``--set key=value`` overrides of a `TrainConfig`, by dotted key.

Example:
    ```python
    config = apply_overrides(config, ["model.d_model=128", "train.seed=3"])
    ```

`training.config.known_keys` lists the valid keys at each level (the error
messages show them).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from keras_transformer.training.config import (
    TrainConfig,
    known_keys,
    unknown_key_hint,
)
from keras_transformer.training.kinds import DEFAULT_KIND, recipe_for
from keras_transformer.validation import first_few

__all__ = ["apply_overrides", "parse_override"]


#: Settings that follow the model when ``model=<preset>`` replaces it.
_FOLLOW_THE_MODEL = {
    "data": ("vocabulary_size", "max_sentence_length"),
    "train": ("label_smoothing",),
}


def parse_override(text: str) -> tuple[list[str], Any]:
    """Splits ``"model.d_model=128"`` into ``(["model", "d_model"], 128)``.

    The value is read as JSON when it parses (numbers, ``true``, ``null``,
    lists such as ``[8,16,32]``), otherwise kept as a string, so
    ``train.precision=mixed_bfloat16`` needs no quotes.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(
            f"Override {text!r} is not of the form key=value, e.g. "
            "model.d_model=128 or train.precision=mixed_bfloat16."
        )
    path = key.split(".")
    if any(not part for part in path):
        raise ValueError(f"Override {text!r} has an empty part in its key {key!r}.")
    raw = raw.strip()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return path, value


def apply_overrides(
    config: TrainConfig | Mapping[str, Any], overrides: Iterable[str]
) -> TrainConfig:
    """Applies ``key=value`` overrides (dotted keys) and validates the result.

    Args:
        config: a `TrainConfig`, or a raw mapping as read from a JSON file
            (whose ``"model"`` may still be a preset name).
        overrides: strings such as ``"model.d_model=128"``,
            ``"model.optimizer.warmup_steps=400"``, ``"data.task=multi30k"``
            or ``"model=small"`` (a preset for the whole model; it also
            resets `data.vocabulary_size`, `data.max_sentence_length` and
            `train.label_smoothing` to follow the new model, so override
            those after it if needed).

    Returns:
        The validated `TrainConfig`.

    Raises:
        ValueError: on an unknown key (the message lists the known ones) or
            an invalid value.
    """
    if isinstance(config, TrainConfig):
        raw = config.to_dict()
    else:
        raw = copy.deepcopy(dict(config))
    had_model = "model" in raw
    for text in overrides:
        path, value = parse_override(text)
        if path == ["model", "vocabulary_size"]:
            raise ValueError(
                "Set the vocabulary size with data.vocabulary_size: the learned "
                "tokenizer decides the model's vocabulary_size."
            )
        if path == ["model"]:
            # A new model brings its own vocabulary size, length and recipe.
            for section, names in _FOLLOW_THE_MODEL.items():
                if isinstance(raw.get(section), Mapping):
                    raw[section] = {
                        k: v for k, v in raw[section].items() if k not in names
                    }
        if path == ["data", "vocabulary_size"] and isinstance(
            raw.get("model"), Mapping
        ):
            raw["model"] = {
                k: v for k, v in raw["model"].items() if k != "vocabulary_size"
            }
        _set_path(raw, path, value, text, raw.get("kind"))
    if not had_model and isinstance(raw.get("model"), Mapping):
        # A config without a model section trains the kind's default model
        # (for text, the "tiny" preset); `model.*` overrides change that
        # model, not the TransformerConfig defaults (the paper's base model).
        default = recipe_for(raw.get("kind", DEFAULT_KIND)).default_model
        default = {"preset": default} if isinstance(default, str) else default
        raw["model"] = {**default, **raw["model"]}
    return TrainConfig.from_dict(raw)


def _unknown_key(
    path: list[str], text: str, known: list[str], kind: str | None
) -> ValueError:
    """The refusal of an unknown key, with the known keys beside it and
    `unknown_key_hint`'s hint (``--set`` the key where it is)."""
    hint = unknown_key_hint(path[-1], path[:-1], known, kind, text.split("=", 1)[-1])
    return ValueError(
        f"Unknown config key {'.'.join(path)!r} in override {text!r}.{hint} "
        f"Known keys here: {', '.join(known)}."
    )


def _set_path(
    raw: dict[str, Any], path: list[str], value: Any, text: str, kind: str | None
) -> None:
    node: dict[str, Any] = raw
    for depth, part in enumerate(path[:-1]):
        known = known_keys(path[:depth], kind)
        if part not in known:
            raise _unknown_key(path[: depth + 1], text, known, kind)
        child = node.get(part)
        if child is None and part in node:
            raise ValueError(
                f"Override {text!r}: {'.'.join(path[: depth + 1])!r} is null in "
                "the config; give it as a JSON object of settings, or leave it "
                "out to take the defaults."
            )
        if isinstance(child, str) and path[: depth + 1] == ["model"]:
            child = {"preset": child}
        elif isinstance(child, Mapping):
            child = dict(child)
        elif child is None:
            child = {}
        else:
            raise ValueError(
                f"Override {text!r}: {'.'.join(path[: depth + 1])!r} is a value, "
                "not a section."
            )
        node[part] = child
        node = child
    last = path[-1]
    known = known_keys(path[:-1], kind)
    if known and last not in known:
        raise _unknown_key(path, text, known, kind)
    if path == ["model"] and isinstance(value, str):
        value = {"preset": value}
    keys = known_keys(path, kind)
    if keys and value is not None and not isinstance(value, Mapping):
        # Refused here, not by a later override into it ("is a value").
        name = ".".join(path)
        raise ValueError(
            f"Override {text!r}: {name!r} is a section of settings "
            f"({first_few(keys, 4)}), not a value: set one of its keys "
            f"({name}.{keys[0]}=...) or give it as a JSON object."
        )
    node[last] = value
