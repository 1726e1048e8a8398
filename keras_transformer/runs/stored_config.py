"""The ``config.json`` that earlier code stored in a run folder, read today.

`upgrade_stored_config` is the one place that knows the old layouts: the
renamed keys (`RENAMED_KEYS`) and the image runs of before kinds
(`is_image_run_layout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["RENAMED_KEYS", "is_image_run_layout", "upgrade_stored_config"]


#: Config keys of earlier versions and their names now. A run folder's
#: stored ``config.json`` is read with them renamed (`upgrade_stored_config`);
#: a config file or ``--set`` override that uses one is refused
#: (`training.config.refuse_renamed_keys`).
RENAMED_KEYS = {
    "model.label_smoothing": "train.label_smoothing",
    "train.decode_extra_length": "train.extra_length",
    "data.max_length": "data.max_sentence_length",
    "model.attention_dropout": "model.attention_settings.dropout",
    "model.attention_window": "model.attention_settings.window",
    "model.relative_positions": "model.attention_settings.relative_positions",
    "model.relative_values": "model.attention_settings.relative_values",
}


#: The ``train`` settings of an image run's ``config.json`` of 0.2 (the
#: layout before kinds) that moved to the ``image`` section.
_IMAGE_TRAIN_KEYS = ("batch_size", "evaluation_batch_size", "flip")
#: The ``train`` defaults of that layout, for a stored one that leaves one out.
_OLD_IMAGE_TRAIN_DEFAULTS = {
    "train_steps": 2000,
    "steps_per_epoch": 200,
    "seed": 0,
    "keep_checkpoints": 3,
    "log_every": 50,
    "jit_compile": False,
    "verbose": 1,
}


def is_image_run_layout(values: Mapping[str, Any]) -> bool:
    """Whether a raw config is in the layout of the ``config.json`` of image
    runs before kinds existed (0.2): no ``kind``, a
    ``model`` with an ``image_shape``."""
    model = values.get("model")
    return (
        "kind" not in values and isinstance(model, Mapping) and "image_shape" in model
    )


def _upgrade_image_run_dict(values: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config in the image layout of 0.2 as a ``kind="image"`` one.

    ``data.*`` and ``train.batch_size``, ``train.evaluation_batch_size``,
    ``train.flip`` move to the ``image`` section; the other ``train``
    settings stay, with that layout's defaults where missing.
    """
    unknown = sorted(set(values) - {"model", "data", "train"})
    if unknown:
        raise ValueError(
            f"Unknown image run config sections: {unknown}. Known: "
            "['data', 'model', 'train']"
        )
    train = {**_OLD_IMAGE_TRAIN_DEFAULTS, **dict(values.get("train", {}))}
    image = dict(values.get("data", {}))
    image.update({key: train.pop(key) for key in _IMAGE_TRAIN_KEYS if key in train})
    # Written before `generation_order` existed: one raster order (0.1.0).
    model = {"generation_order": "image", **values["model"]}
    return {"kind": "image", "model": model, "image": image, "train": train}


def upgrade_stored_config(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``config.json`` that an earlier version stored in a run folder, in
    today's layout; the one place that knows the old layouts.

    Only a stored run's config is read this way (`RunFolder.raw_config`,
    `training.checkpoints.load_stored_config`), silently: a config file a
    person writes must use today's keys (`training.config.
    refuse_renamed_keys`). What it maps:

    * ``model.label_smoothing`` -> ``train.label_smoothing``;
    * ``train.decode_extra_length`` -> ``train.extra_length``;
    * ``data.max_length`` -> ``data.max_sentence_length``;
    * ``model.attention_dropout``, ``model.attention_window``,
      ``model.relative_positions``, ``model.relative_values`` ->
      ``model.attention_settings.dropout``, ``.window``,
      ``.relative_positions``, ``.relative_values`` (text and image models);
    * an image run without ``kind`` (before kinds: ``model`` with ``image_shape``,
      ``data`` and ``train``) -> ``kind="image"``, ``data`` and the batch
      settings of ``train`` as the ``image`` section
      (`_upgrade_image_run_dict`);
    * an image model without ``generation_order`` -> ``"image"``, the one
      raster order the code of that time generated in (a config file
      without it gets the paper's block order, Parmar et al. 2018, §3.2).

    Where a stored config holds both an old key and its new name, the new
    name's value is kept.
    """
    if is_image_run_layout(values):
        values = _upgrade_image_run_dict(values)
    upgraded = {
        key: dict(value) if isinstance(value, Mapping) else value
        for key, value in values.items()
    }
    for old, new in RENAMED_KEYS.items():
        old_section, old_name = old.split(".")
        *new_path, new_name = new.split(".")
        section = upgraded.get(old_section)
        if not isinstance(section, dict) or old_name not in section:
            continue
        value = section.pop(old_name)
        target: Any = upgraded
        for part in new_path:  # a copy of each section on the way down
            if isinstance(target, dict):
                inner = target.get(part, {})
                target[part] = dict(inner) if isinstance(inner, Mapping) else inner
                target = target[part]
        if isinstance(target, dict):
            target.setdefault(new_name, value)
    model = upgraded.get("model")
    if upgraded.get("kind") == "image" and isinstance(model, dict):
        upgraded["model"] = {"generation_order": "image", **model}
    return upgraded
