"""``--set key=value`` overrides of a `TrainConfig`, by dotted key.

Example:
    ```python
    config = apply_overrides(config, ["model.d_model=128", "train.seed=3"])
    ```

`known_keys` lists the valid keys at each level (the error messages show
them).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from keras_transformer.models import TransformerConfig
from keras_transformer.training.config import TrainConfig, option_sections
from keras_transformer.training.kinds import DEFAULT_KIND, recipe_for
from keras_transformer.training.sections import DataConfig, TrainingConfig
from keras_transformer.validation import close_name_hint

__all__ = ["apply_overrides", "known_keys", "parse_override"]


def _sections() -> dict[str, type]:
    """The config sections of settings and their dataclasses."""
    kinds = {kind: recipe_for(kind).settings for kind in option_sections()}
    return {"data": DataConfig, "train": TrainingConfig, **kinds}


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
    return TrainConfig.from_dict(raw)


def known_keys(path: list[str], kind: str | None = None) -> list[str]:
    """The valid keys below `path` (``[]``: the sections) in a config of
    `kind` (its model section is its `Recipe.model_config`)."""
    sections = _sections()
    if not path:
        return ["model", "data", "train", "kind", *sorted(option_sections())]
    if path[0] in sections and len(path) == 1:
        return [f.name for f in dataclasses.fields(sections[path[0]])]
    if path == ["model"]:
        model = recipe_for(kind or DEFAULT_KIND).model_config
        names = [f.name for f in dataclasses.fields(model)]
        # A text model section may name the preset it changes.
        return ["preset", *names] if model is TransformerConfig else names
    if path == ["model", "optimizer"]:
        return [f.name for f in dataclasses.fields(TransformerConfig().optimizer)]
    return []


def _unknown_key(
    path: list[str], text: str, known: list[str], kind: str | None
) -> ValueError:
    """The refusal of an unknown key: the known keys beside it, and a hint:
    the section of this kind of run that has a key of that name
    (``train.warmup_steps`` is ``model.optimizer.warmup_steps``), else the
    closest name beside it or elsewhere (a misspelling)."""
    name, parent = path[-1], path[:-1]
    kind = kind or DEFAULT_KIND
    own = [[kind]] if kind in option_sections() else []
    sections = [["model"], ["model", "optimizer"], ["data"], ["train"], *own]
    elsewhere = {
        key: ".".join([*section, key])
        for section in sections
        if section != parent
        for key in known_keys(section, kind)
    }
    value = text.split("=", 1)[-1]
    if name in elsewhere:
        hint = f" It is {elsewhere[name]}: --set {elsewhere[name]}={value}."
    else:
        hint = close_name_hint([name], known)
        close = difflib.get_close_matches(name, list(elsewhere), n=1, cutoff=0.75)
        if not hint and close:
            hint = f" Did you mean {elsewhere[close[0]]!r}?"
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
    node[last] = value
