"""`TrainConfig`: everything a training run needs, as one frozen dataclass.

A config has three sections, each a frozen dataclass:

* `model`: a `TransformerConfig` (or the name of a preset) with every model
  hyperparameter and, in `model.optimizer`, every optimizer constant of §5.3;
* `data`: the task, the languages, the vocabulary and the batching (§5.1);
* `train`: the length of the run, accumulation, precision, checkpoints and
  evaluation.

Configs round-trip through JSON (`to_json` / `from_json`, `save` / `load`)
and take overrides as dotted keys (`apply_overrides`, in
`kt.training.overrides`), e.g. ``model.d_model=128``,
``model.optimizer.warmup_steps=400``, ``data.max_tokens_per_batch=2048`` or
``train.precision=mixed_bfloat16``.

One owner and one name per setting:

==============================  ==========================================
setting                         owner
==============================  ==========================================
vocabulary size (§5.1)          ``data.vocabulary_size``: the size the
                                tokenizer learns; the learned tokenizer
                                decides, ``model.vocabulary_size`` records
                                it (`reconcile_vocabulary_size`)
label smoothing (§5.4)          ``train.label_smoothing``
output allowance (§6.1, +50)    ``train.extra_length``
longest training sentence       ``data.max_sentence_length``
positions the model supports    ``model.max_length``
==============================  ==========================================
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from keras_transformer.conventions import (
    LABEL_SMOOTHING,
)
from keras_transformer.files import check_utf8_start, write_atomically
from keras_transformer.models import TransformerConfig, get_preset
from keras_transformer.models.presets import PRESET_LABEL_SMOOTHING
from keras_transformer.training.kinds import DEFAULT_KIND, known_kinds, recipe_for
from keras_transformer.training.sections import DataConfig, TrainingConfig, shorten
from keras_transformer.validation import (
    check_int,
    check_known_names,
    close_name_hint,
    closest_name,
    with_article,
)

__all__ = [
    "MAX_CONFIG_BYTES",
    "RESUMABLE_CHANGES",
    "TrainConfig",
    "config_differences",
    "implied_label_smoothing",
    "known_keys",
    "option_sections",
    "read_config_file",
    "reconcile_vocabulary_size",
    "resolve_text_sections",
    "resolve_train_section",
    "section_from_mapping",
    "unknown_key_hint",
]

#: The largest config file read (1 MB; the largest valid config is a few kB).
MAX_CONFIG_BYTES = 1_000_000
#: The fewest pieces `data.vocabulary_size` may ask for: SentencePiece's four
#: special ids and one piece (`SubwordTokenizer.train`'s minimum; unigram and
#: BPE alike, neither with byte fallback).
MIN_VOCABULARY_SIZE = 5
#: The most: a million pieces, far above the vocabularies of subword models
#: (the paper's 37,000 and 32,000), beyond which SentencePiece runs for hours
#: on any text that could fill them.
MAX_VOCABULARY_SIZE = 1_000_000

#: Keys that may differ between a run and its restart without `--force`:
#: they change how long the run goes on, or what is evaluated and reported,
#: not what an update computes (and a kind's `Recipe.resumable_changes`).
RESUMABLE_CHANGES = frozenset(
    {
        "data.data_dir",
        "train.train_steps",
        "train.epochs",
        "train.verbose",
        "train.test_samples",
        "train.num_translations",
        "train.evaluate_with",
        "train.keep_checkpoints",
        "train.keep_best",
        "train.validation_every",
        "train.bleu_samples",
        "train.extra_length",
        "train.log_every",
        "train.attention_example",
        "train.attention_images",
    }
)


def section_from_mapping(
    cls: type, section: str, values: Mapping[str, Any], kind: str | None = None
) -> Any:
    """The dataclass `cls` of a config section from its JSON object `values`,
    its keys checked (one-line errors naming the section; one unknown key
    gets `unknown_key_hint`'s hint for a run of `kind`)."""
    if values is None:
        raise ValueError(
            f"The `{section}` section is null: give it as a JSON object of "
            "settings, or leave it out to take the defaults."
        )
    if not isinstance(values, Mapping):
        raise ValueError(
            f"The `{section}` section must be a JSON object of settings. "
            f"Received: {shorten(values)}"
        )
    check_section_keys(values, [section], kind)
    return cls(**values)


def check_section_keys(
    values: Mapping[str, Any], path: list[str], kind: str | None = None
) -> None:
    """Raises the one-line `ValueError` of keys that the section at `path`
    (``["model", "optimizer"]``) of a run of `kind` lacks (`known_keys`):
    the known keys, and for a single unknown one, `unknown_key_hint`'s hint."""
    known = sorted(known_keys(path, kind))
    unknown = [name for name in values if name not in known]
    # One unknown key may belong to another section; several get the
    # closest names beside them (`check_known_names`' own hint).
    hint = (
        unknown_key_hint(unknown[0], path, known, kind) if len(unknown) == 1 else None
    )
    if path == ["model"] and "preset" in unknown:
        hint = (
            f" The model of a kind={kind!r} run takes no preset (`--preset` "
            "and `model.preset` name text models): give its settings instead."
        )
    check_known_names(
        values,
        known,
        f"`{'.'.join(path)}` settings",
        listing="Known settings",
        hint=hint,
    )


def _check_model_keys(model: Any, kind: str) -> None:
    """`check_section_keys` for a `model` section given as a mapping (and
    its ``optimizer``), before anything reads it: a key of another section
    is named where it belongs."""
    if not isinstance(model, Mapping):
        return
    check_section_keys(model, ["model"], kind)
    if isinstance(model.get("optimizer"), Mapping):
        check_section_keys(model["optimizer"], ["model", "optimizer"], kind)


def _sections() -> dict[str, type]:
    """The config sections of settings and their dataclasses."""
    kinds = {kind: recipe_for(kind).settings for kind in option_sections()}
    return {"data": DataConfig, "train": TrainingConfig, **kinds}


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


def unknown_key_hint(
    name: str,
    parent: list[str],
    known: list[str],
    kind: str | None = None,
    value: str | None = None,
) -> str:
    """A hint for the unknown key `name` below `parent` (``["train"]``): the
    section of this kind of run that has a key of that name
    (``train.warmup_steps`` is ``model.optimizer.warmup_steps``; with `value`,
    as a ``--set``), else the closest of the `known` names beside it or of
    the keys elsewhere (a misspelling), else ``""``."""
    kind = kind or DEFAULT_KIND
    own = [[kind]] if kind in option_sections() else []
    sections = [["model"], ["model", "optimizer"], ["data"], ["train"], *own]
    elsewhere = {
        key: ".".join([*section, key])
        for section in sections
        if section != parent
        for key in known_keys(section, kind)
    }
    if name in elsewhere:
        where = elsewhere[name]
        return f" It is {where}" + (f": --set {where}={value}." if value else ".")
    hint = close_name_hint([name], known)
    if hint or (close := closest_name(name, elsewhere)) is None:
        return hint
    return f" Did you mean {elsewhere[close]!r}?"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """A complete training run: model, data and training settings.

    `model` may be given as a `TransformerConfig`, a preset name (``"tiny"``,
    ``"small"``, ``"base"``, ...) or a mapping of `TransformerConfig` fields,
    optionally with a ``"preset"`` key whose preset the fields then modify.
    It is always stored resolved, as a `TransformerConfig`. The paper's
    recipe is the default: Adam with 0.9/0.98/1e-9, Eq. 7 with 4000 warm-up
    steps (`model.optimizer`), label smoothing 0.1 (`train.label_smoothing`)
    and dropout 0.1.

    Resolving fills in what follows from other settings: the vocabulary size
    (`reconcile_vocabulary_size`), `data.max_sentence_length` (from
    `model.max_length` and the buckets) and `train.label_smoothing` (from
    the preset, or 0.1).

    Example:
    >>> from keras_transformer.training.overrides import apply_overrides
    >>> config = TrainConfig(model="tiny", data=DataConfig(task="dates"))
    >>> config = apply_overrides(config, ["model.d_model=32", "train.seed=3"])
    >>> config.model.d_model, config.data.vocabulary_size
    (32, 1000)
    """

    model: TransformerConfig = dataclasses.field(
        default_factory=lambda: get_preset("tiny")
    )
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    train: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    #: The kind of run (`kinds.known_kinds`).
    kind: str = DEFAULT_KIND
    #: The kind's own settings (its `Recipe.settings`), written as the
    #: section named after the kind (``classification``, ``image``); None
    #: for a kind without one.
    options: Any = None

    def __post_init__(self) -> None:
        _check_model_keys(self.model, self.kind)
        recipe = _resolve_options(self)
        recipe.resolve_sections(self)

    # ------------------------------------------------------------------ I/O
    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some sections replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-compatible values.

        A translation run writes no ``kind`` key, as before kinds existed:
        its ``config.json`` stays the same. A kind with settings of its own
        writes them as the section named after it.
        """
        values = {
            "model": self.model.to_dict(),
            "train": dataclasses.asdict(self.train),
        }
        if recipe_for(self).reads_data_section:
            values["data"] = dataclasses.asdict(self.data)
            values["data"]["bucket_boundaries"] = list(self.data.bucket_boundaries)
        if self.kind != DEFAULT_KIND:
            values["kind"] = self.kind
        if self.options is not None:
            values[self.kind] = dataclasses.asdict(self.options)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TrainConfig:
        """Builds a config from `to_dict` output or a hand-written mapping.

        Missing sections and settings take their defaults; unknown ones are
        refused with the list of the known ones, and so is a section given
        as ``null``. Every setting is checked for its type and range (see
        `DataConfig`, `TrainingConfig`, `TransformerConfig` and
        `OptimizerConfig`): a bad one raises a one-line `ValueError` naming
        its dotted key, what it accepts and the value received.
        """
        if not isinstance(values, Mapping):
            raise ValueError(
                f"A training config must be a JSON object. Received: {shorten(values)}"
            )
        sections = option_sections()
        check_known_names(
            values,
            {"model", "data", "train", "kind", *sections},
            "config sections",
            listing="A config has the sections",
        )
        kind = values.get("kind", DEFAULT_KIND)
        recipe = recipe_for(kind)
        for section in sections - {kind}:
            if section in values:
                raise ValueError(
                    f"The `{section}` section belongs to kind={section!r} runs; "
                    f"this config has kind={kind!r}. Set kind to {section!r} or "
                    "remove the section."
                )
        if not recipe.reads_data_section and "data" in values:
            raise ValueError(
                f"{with_article(kind).capitalize()} run (kind={kind!r}) "
                f"reads its data from the `{kind}` section ({kind}.batch_size, "
                "...); remove `data` (which --task and --set data.* write)."
            )
        model_values = values.get("model", recipe.default_model)
        data = section_from_mapping(DataConfig, "data", values.get("data", {}), kind)
        if isinstance(model_values, Mapping) and "vocabulary_size" in model_values:
            _check_model_keys(model_values, kind)
            reconcile_vocabulary_size(
                _resolve_model(model_values), data, model_sets_it=True
            )
        return cls(
            model=model_values,
            data=data,
            train=section_from_mapping(
                TrainingConfig, "train", values.get("train", {}), kind
            ),
            kind=kind,
            options=values.get(kind),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        return cls.from_dict(_parse_json(text))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Writes the resolved config as JSON (atomically: old file or new)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return write_atomically(path, self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TrainConfig:
        """Reads a config written by `save` (or by hand); see `read_config_file`."""
        path = Path(path)
        values = read_config_file(path)
        try:
            return cls.from_dict(values)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e

    def flat(self) -> dict[str, Any]:
        """The settings as ``{"model.d_model": 512, ...}`` (for HParams)."""
        return dict(_flatten(self.to_dict()))


def option_sections() -> set[str]:
    """The config sections of the kinds' own settings (named after them)."""
    return {kind for kind in known_kinds() if recipe_for(kind).settings}


def _resolve_options(config: TrainConfig) -> Any:
    """Checks `config.kind` and fills in (or parses) its own settings; the
    kind's recipe."""
    recipe = recipe_for(config.kind)
    value, settings = config.options, recipe.settings
    if settings is None:
        if value is not None:
            raise ValueError(
                f"kind={config.kind!r} runs have no settings section of their "
                "own; remove it."
            )
        return recipe
    if value is None:
        value = settings()
    elif not isinstance(value, settings):
        value = section_from_mapping(settings, config.kind, value, config.kind)
    object.__setattr__(config, "options", value)
    return recipe


def resolve_text_sections(config: TrainConfig) -> None:
    """Resolves the sections of a text kind's `config` in place: `model` a
    `TransformerConfig` (`_resolve_model`), `data` a `DataConfig`, `train` a
    `TrainingConfig`, with what follows from other settings filled in: the
    vocabulary size (`reconcile_vocabulary_size`), `data.max_sentence_length`
    (from `model.max_length` and the buckets) and `train.label_smoothing`
    (`implied_label_smoothing`)."""
    model = _resolve_model(config.model)
    data = config.data
    if not isinstance(data, DataConfig):
        data = section_from_mapping(DataConfig, "data", data, config.kind)
    train = resolve_train_section(config)
    model, data = reconcile_vocabulary_size(model, data)
    # Before a tokenizer is learned: SentencePiece refuses fewer pieces,
    # and runs for hours towards a vocabulary that no text fills.
    check_int(
        "data.vocabulary_size",
        data.vocabulary_size,
        MIN_VOCABULARY_SIZE,
        MAX_VOCABULARY_SIZE,
    )
    longest = data.max_sentence_length
    if longest is None:
        longest = min(model.max_length, data.bucket_boundaries[-1])
        data = dataclasses.replace(data, max_sentence_length=longest)
    elif longest > model.max_length:
        raise ValueError(
            f"`data.max_sentence_length`={longest} is longer than the model "
            f"supports (model.max_length={model.max_length}). Lower "
            "data.max_sentence_length or raise model.max_length."
        )
    if train.label_smoothing is None:
        implied = implied_label_smoothing(config.model)
        train = dataclasses.replace(train, label_smoothing=implied)
    object.__setattr__(config, "model", model)
    object.__setattr__(config, "data", data)
    object.__setattr__(config, "train", train)


def resolve_train_section(config: TrainConfig) -> TrainingConfig:
    """`config.train` as a `TrainingConfig`."""
    if isinstance(config.train, TrainingConfig):
        return config.train
    return section_from_mapping(TrainingConfig, "train", config.train, config.kind)


def _parse_json(text: str) -> Any:
    if not text.strip():
        raise ValueError(
            "The training config is empty: write a JSON object of settings, "
            "such as configs/dates_tiny.json."
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"The training config is not valid JSON: {e}. (JSON has no comments, "
            "trailing commas or single quotes; a config is a JSON file such as "
            "configs/dates_tiny.json.)"
        ) from e
    except RecursionError:
        raise ValueError(
            "The training config is nested too deeply to be a config."
        ) from None


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The raw settings of a JSON config file, before they are resolved.

    Raises:
        FileNotFoundError: when `path` is not a file.
        ValueError: (one line naming the file) when it is larger than
            `MAX_CONFIG_BYTES`, not UTF-8, not valid JSON or not a JSON
            object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Training config {path} does not exist.")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{path}: the config file is {size:,} bytes; a training config is a "
            f"few kB and at most {MAX_CONFIG_BYTES:,} bytes are read. Is it the "
            "right file?"
        )
    data = path.read_bytes()
    check_utf8_start(path, data)
    try:
        text = data.decode("utf-8-sig")  # an editor's byte-order mark is UTF-8
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: the config file is not UTF-8 text ({e}).") from e
    try:
        values = _parse_json(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(values, dict):
        raise ValueError(
            f"{path}: a training config must be a JSON object of the sections "
            f"model, data and train. Received: {shorten(values)}"
        )
    return values


def reconcile_vocabulary_size(
    model: TransformerConfig, data: DataConfig, *, model_sets_it: bool = False
) -> tuple[TransformerConfig, DataConfig]:
    """The one rule for the vocabulary size: `data.vocabulary_size` owns it.

    §5.1: one "shared source-target vocabulary". The tokenizer learns
    `data.vocabulary_size` pieces and, once learned, decides (a resumed run
    checks it against the checkpoints); `model.vocabulary_size` records it.
    ``data.vocabulary_size=None`` takes the model's (its preset's) size.

    Args:
        model: the resolved model settings.
        data: the data settings.
        model_sets_it: whether the config itself (not a preset) set
            ``model.vocabulary_size``; then a different
            ``data.vocabulary_size`` is a contradiction.

    Returns:
        ``(model, data)`` with the same vocabulary size.

    Raises:
        ValueError: for a separate target vocabulary, or two different sizes
            set by hand.
    """
    if model.target_vocabulary_size not in (None, model.vocabulary_size):
        raise ValueError(
            "Training learns one shared source-target vocabulary (§5.1), so "
            "model.target_vocabulary_size must be null. Received: "
            f"target_vocabulary_size={model.target_vocabulary_size}"
        )
    size = data.vocabulary_size
    if size is None:
        return model, dataclasses.replace(data, vocabulary_size=model.vocabulary_size)
    if size != model.vocabulary_size:
        if model_sets_it:
            raise ValueError(
                "The config sets two vocabulary sizes: model.vocabulary_size="
                f"{model.vocabulary_size} and data.vocabulary_size={size}. The "
                "tokenizer decides the model's: set only data.vocabulary_size."
            )
        model = model.replace(vocabulary_size=size)
    return model, data


def implied_label_smoothing(model: Any) -> float:
    """The label smoothing (§5.4) that a ``model`` section implies, for a
    config that leaves ``train.label_smoothing`` unset (null): the preset's
    (`PRESET_LABEL_SMOOTHING`: the rows of Table 3 (D)), else the paper's
    `conventions.LABEL_SMOOTHING` (0.1).

    Args:
        model: the ``model`` section as given: a `TransformerConfig`, a
            preset name or a mapping (checked by `_resolve_model` first).
    """
    if isinstance(model, Mapping):
        model = model.get("preset")
    if not isinstance(model, str):
        return LABEL_SMOOTHING
    return PRESET_LABEL_SMOOTHING.get(model, LABEL_SMOOTHING)


def _resolve_model(model: Any) -> TransformerConfig:
    """The model settings as a `TransformerConfig`."""
    if isinstance(model, TransformerConfig):
        return model
    if isinstance(model, str):
        return get_preset(model)
    if isinstance(model, Mapping):
        values = dict(model)
        has_preset = "preset" in values
        preset = values.pop("preset", None)
        if has_preset and not isinstance(preset, str):
            raise ValueError(
                "`model.preset` must be the name of a preset (tiny, small, base, "
                "big, table3_*), or left out for the defaults. Received: "
                f"model.preset={shorten(preset)}"
            )
        if preset is None:
            return TransformerConfig.from_dict(values)
        base = get_preset(preset)
        if isinstance(values.get("optimizer"), Mapping):
            # The preset's optimizer, with the given settings changed (the
            # model checks the names and values).
            values["optimizer"] = {
                **dataclasses.asdict(base.optimizer),
                **values["optimizer"],
            }
        # Its keys were checked by `_check_model_keys`.
        return base.replace(**values)
    raise ValueError(
        'The `model` section must be a preset name (e.g. "tiny"), or a JSON '
        'object of model settings, optionally with a "preset" they change. '
        f"Received: {shorten(model)}"
    )


def _flatten(values: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{name}.")
        else:
            yield name, value


def config_differences(old: TrainConfig, new: TrainConfig) -> dict[str, tuple]:
    """``{"model.d_model": (old, new), ...}`` for every setting that differs."""
    before, after = old.flat(), new.flat()
    return {
        key: (before.get(key), after.get(key))
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }
