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

A config file or ``--set`` override that uses a key of an earlier version
(`RENAMED_KEYS`) is refused with a one-line error naming the new key. The
``config.json`` that an earlier version stored in a run folder is read
with its old keys renamed (`upgrade_stored_config`), so that run resumes
and loads unchanged.
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
    PRECISIONS,
    TASK_NAMES,
)
from keras_transformer.data.batching import (
    DEFAULT_BUCKET_BOUNDARIES,
    DEFAULT_MAX_TOKENS_PER_BATCH,
)
from keras_transformer.decoding.settings import default_setting
from keras_transformer.files import write_atomically
from keras_transformer.models import TransformerConfig, get_preset
from keras_transformer.models.image_config import ImageTransformerConfig
from keras_transformer.models.presets import PRESET_LABEL_SMOOTHING
from keras_transformer.runs import (
    RENAMED_KEYS,
    is_image_run_layout,
    upgrade_stored_config,
)
from keras_transformer.training.kinds import DEFAULT_KIND, KIND_SECTIONS, KINDS
from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_fields,
    check_int,
    check_known_names,
    check_positive_int,
    check_rate,
    check_string,
)

__all__ = [
    "DataConfig",
    "MAX_BUCKET_BOUNDARIES",
    "MAX_CONFIG_BYTES",
    "RENAMED_KEYS",
    "RESUMABLE_CHANGES",
    "TASKS",
    "TrainConfig",
    "TrainingConfig",
    "check_before_training",
    "check_warmup",
    "config_differences",
    "estimated_parameters",
    "implied_label_smoothing",
    "read_config_file",
    "reconcile_vocabulary_size",
    "refuse_renamed_keys",
    "renamed_key_error",
    "upgrade_stored_config",
]

#: The `data.task` values (defined, without TensorFlow, in `conventions`).
TASKS = TASK_NAMES
EVALUATE_WITH = ("last", "best", "average")
TOO_LONG = ("drop", "truncate")
#: `data.on_bad_line` (the readers' policy in `kt.data.text`).
BAD_LINE_POLICIES = ("skip", "raise")
TOKENIZER_MODEL_TYPES = ("unigram", "bpe")
#: The most entries `data.bucket_boundaries` may have (XLA compiles one
#: program per bucket, so a handful is usual).
MAX_BUCKET_BOUNDARIES = 1_000
#: The largest config file read (1 MB; the largest valid config is a few kB).
MAX_CONFIG_BYTES = 1_000_000
#: `train.seed` seeds NumPy too, whose seeds are below 2**32.
MAX_SEED = 2**32 - 1
#: The fewest pieces `data.vocabulary_size` may ask for: SentencePiece's four
#: special ids and one piece (`SubwordTokenizer.train`'s minimum; unigram and
#: BPE alike, neither with byte fallback).
MIN_VOCABULARY_SIZE = 5
#: The most: a million pieces, far above the vocabularies of subword models
#: (the paper's 37,000 and 32,000), beyond which SentencePiece runs for hours
#: on any text that could fill them.
MAX_VOCABULARY_SIZE = 1_000_000
#: Bytes that training holds per parameter, at least: the float32 weight, its
#: gradient and Adam's two moments (mixed precision keeps float32 weights).
TRAINING_BYTES_PER_PARAMETER = 16

#: Keys that may differ between a run and its restart without `--force`:
#: they change how long the run goes on, or what is evaluated and reported,
#: not what an update computes.
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
        "image.directory",
        "image.validation_images",
        "image.evaluation_batch_size",
    }
)


def renamed_key_error(old: str) -> ValueError:
    """The one-line error for the old config key `old` (`RENAMED_KEYS`)."""
    return ValueError(
        f"The config key {old!r} was renamed: use {RENAMED_KEYS[old]!r} instead."
    )


def refuse_renamed_keys(values: Mapping[str, Any]) -> None:
    """Raises `renamed_key_error` when a raw config mapping (sections of
    settings) uses an old key of `RENAMED_KEYS`. Sections that are not
    mappings (e.g. a preset name as ``"model"``) are left alone."""
    for old in RENAMED_KEYS:
        section, name = old.split(".")
        settings = values.get(section)
        if isinstance(settings, Mapping) and name in settings:
            raise renamed_key_error(old)


def _shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to `limit` characters (a message stays one line)."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


def _from_mapping(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    if values is None:
        raise ValueError(
            f"The `{section}` section is null: give it as a JSON object of "
            "settings, or leave it out to take the defaults."
        )
    if not isinstance(values, Mapping):
        raise ValueError(
            f"The `{section}` section must be a JSON object of settings. "
            f"Received: {_shorten(values)}"
        )
    refuse_renamed_keys({section: values})
    known = {field.name for field in dataclasses.fields(cls)}
    check_known_names(values, known, f"`{section}` settings", listing="Known settings")
    return cls(**values)


def _bucket_boundaries(value: Any) -> tuple[int, ...]:
    """`data.bucket_boundaries` checked: 1 to `MAX_BUCKET_BOUNDARIES` strictly
    increasing positive integers (a list or tuple), as a tuple."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            "`data.bucket_boundaries` must be a list of strictly increasing "
            f"positive integers, e.g. [8, 16, 32]. Received: {_shorten(value)}"
        )
    if not 1 <= len(value) <= MAX_BUCKET_BOUNDARIES:
        raise ValueError(
            "`data.bucket_boundaries` must hold 1 to "
            f"{MAX_BUCKET_BOUNDARIES:,} lengths (XLA compiles one program per "
            f"bucket; a handful is usual). Received: {len(value):,} entries"
        )
    for index, boundary in enumerate(value):
        check_positive_int(f"data.bucket_boundaries[{index}]", boundary)
    if any(b >= c for b, c in zip(value, value[1:], strict=False)):
        raise ValueError(
            "`data.bucket_boundaries` must be strictly increasing (sort them "
            f"and remove duplicates). Received: {_shorten(list(value))}"
        )
    return tuple(value)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the sentence pairs come from and how they are batched.

    Attributes:
        task: ``"dates"`` (synthetic dates to ISO 8601, no download),
            ``"multi30k"`` (Multi30k Task 1), ``"tatoeba"`` (Tatoeba
            English-Spanish) or ``"files"`` (your own parallel text).
        source_language, target_language: for Multi30k ``de``/``en``/``fr``;
            for Tatoeba ``en`` and ``es`` in either order. Informative for
            the other tasks.
        data_dir: the folder holding the data set's files (``None``: the
            loaders' defaults, ``$KT_DATA_DIR`` or a download).
        train_source, train_target: for ``task="files"``, two line-aligned
            files (plain or ``.gz``), or one tab-separated file in
            ``train_source`` with ``train_target`` left ``None``.
        validation_source, validation_target: the validation pairs of
            ``task="files"``, in the same layout (required unless
            ``held_out_pairs`` is set).
        test_source, test_target: the test pairs of ``task="files"``;
            ``None`` evaluates on the validation pairs at the end.
        held_out_pairs: for ``task="files"`` with only training files: hold
            out this many source sentences of the training file, with their
            pairs, as the validation split, and as many again as the test
            split. Which ones is decided by a hash of each source sentence,
            the same on every machine and run, and all pairs of one source
            sentence land in the same split (see
            `keras_transformer.data.tasks.held_out_splits`).
        num_train_examples, num_eval_examples: sizes of the synthetic dates
            splits (the validation and test splits each get
            ``num_eval_examples``).
        vocabulary_size: size of the shared source-target subword vocabulary
            learned on the training pairs (§5.1: "a shared source-target
            vocabulary"). This is the one place to set it: the tokenizer
            learns this many pieces, and ``model.vocabulary_size`` records
            it. ``None`` takes the model's (its preset's) ``vocabulary_size``.
        tokenizer_model_type: ``"unigram"`` or ``"bpe"`` (SentencePiece).
        tokenizer_max_sentences: learn the vocabulary on a random sample of
            this many sentences (``None``: all).
        max_sentence_length: the longest sentence a batch holds, source or
            target side, in subword tokens including START/END: longer
            training pairs are dropped or truncated (`too_long`), longer
            validation and test sources truncated. At most the model's
            ``max_length`` (the positions it supports). ``None``: the
            model's ``max_length`` or the largest bucket boundary, whichever
            is smaller.
        max_tokens_per_batch: the token budget of one (global) batch and
            side, padding included, split over all replicas. One optimizer
            update sees ``max_tokens_per_batch * train.gradient_accumulation``
            tokens (§5.1: about 25,000 source and 25,000 target tokens).
        bucket_boundaries: the padded lengths of the length buckets: 1 to
            `MAX_BUCKET_BOUNDARIES` strictly increasing positive integers,
            the largest at least `max_sentence_length`. A batch is padded to
            the first boundary that holds its longest sentence; boundaries
            above the first one that holds `max_sentence_length` are unused.
        too_long: ``"drop"`` or ``"truncate"`` training pairs over
            ``max_sentence_length``.
        shuffle_buffer: pairs in the shuffle buffer (``None``: all).
        on_bad_line: what reading the ``files``, ``multi30k`` and
            ``tatoeba`` data does with a bad line (empty, invalid UTF-8,
            longer than 2000 characters, or a wrong number of TSV columns):
            ``"skip"`` drops the pair on both sides (training prints, logs to
            TensorBoard and writes to ``result.json`` how many, per file and
            reason), ``"raise"`` stops at the first one with an error naming
            its file and line number.
    """

    task: str = "dates"
    source_language: str = "de"
    target_language: str = "en"
    data_dir: str | None = None
    train_source: str | None = None
    train_target: str | None = None
    validation_source: str | None = None
    validation_target: str | None = None
    test_source: str | None = None
    test_target: str | None = None
    held_out_pairs: int | None = None
    num_train_examples: int = 50_000
    num_eval_examples: int = 1_000
    vocabulary_size: int | None = None
    tokenizer_model_type: str = "unigram"
    tokenizer_max_sentences: int | None = 2_000_000
    max_sentence_length: int | None = None
    max_tokens_per_batch: int = DEFAULT_MAX_TOKENS_PER_BATCH
    bucket_boundaries: tuple[int, ...] = DEFAULT_BUCKET_BOUNDARIES
    too_long: str = "drop"
    shuffle_buffer: int | None = None
    on_bad_line: str = "skip"

    def __post_init__(self) -> None:
        check_choice("data.task", self.task, TASKS)
        check_choice("data.on_bad_line", self.on_bad_line, BAD_LINE_POLICIES)
        check_choice(
            "data.tokenizer_model_type",
            self.tokenizer_model_type,
            TOKENIZER_MODEL_TYPES,
        )
        check_choice("data.too_long", self.too_long, TOO_LONG)
        languages = ("source_language", "target_language")
        check_fields(check_string, self, languages, section="data")
        paths = (
            "data_dir",
            "train_source",
            "train_target",
            "validation_source",
            "validation_target",
            "test_source",
            "test_target",
        )
        check_fields(check_string, self, paths, section="data", allow_none=True)
        counts = ("num_train_examples", "num_eval_examples", "max_tokens_per_batch")
        check_fields(check_positive_int, self, counts, section="data")
        optional = (
            "vocabulary_size",
            "tokenizer_max_sentences",
            "shuffle_buffer",
            "held_out_pairs",
        )
        check_fields(
            check_positive_int, self, optional, section="data", allow_none=True
        )
        self._check_lengths()
        self._check_task()

    def _check_lengths(self) -> None:
        """`max_sentence_length`, `bucket_boundaries` (stored as a tuple) and
        `max_tokens_per_batch` fit together."""
        longest = self.max_sentence_length
        check_positive_int("data.max_sentence_length", longest, allow_none=True)
        if longest is not None and longest < 2:
            raise ValueError(
                "`data.max_sentence_length` must be at least 2 (one token plus "
                f"END). Received: max_sentence_length={longest}"
            )
        boundaries = _bucket_boundaries(self.bucket_boundaries)
        object.__setattr__(self, "bucket_boundaries", boundaries)
        if longest is not None and boundaries[-1] < longest:
            raise ValueError(
                f"`data.max_sentence_length`={longest} exceeds the largest bucket "
                f"boundary {boundaries[-1]}: add a boundary >= {longest} to "
                "data.bucket_boundaries or lower data.max_sentence_length."
            )
        longest = longest or boundaries[-1]
        if self.max_tokens_per_batch < longest:
            raise ValueError(
                f"`data.max_tokens_per_batch`={self.max_tokens_per_batch} cannot "
                f"hold one sentence of {longest} tokens (data.max_sentence_length);"
                " raise it or lower data.max_sentence_length."
            )

    def _check_task(self) -> None:
        """The languages and files that `task` needs."""
        if self.task == "multi30k":
            for name in ("source_language", "target_language"):
                check_choice(f"data.{name}", getattr(self, name), ("de", "en", "fr"))
        if self.task == "tatoeba" and {
            self.source_language,
            self.target_language,
        } != {"en", "es"}:
            raise ValueError(
                "The tatoeba task translates between English and Spanish: set "
                "data.source_language and data.target_language to 'en' and 'es' "
                f"(either order). Received: {self.source_language!r} -> "
                f"{self.target_language!r}"
            )
        if self.task in ("multi30k", "tatoeba") and (
            self.source_language == self.target_language
        ):
            raise ValueError(
                "`data.source_language` and `data.target_language` must differ. "
                f"Received: both {self.source_language!r}"
            )
        if self.held_out_pairs is not None and self.task != "files":
            raise ValueError(
                "`data.held_out_pairs` splits your own training file, so it "
                f"needs data.task='files'. Received: task={self.task!r}"
            )
        if self.task == "files":
            if not self.train_source:
                raise ValueError(
                    "task='files' needs `data.train_source`: the path of a source "
                    "file (with the matching `data.train_target` file), or of one "
                    "tab-separated file of pairs."
                )
            held_out = self.held_out_pairs is not None
            given = [
                name
                for name in ("validation_source", "test_source")
                if getattr(self, name)
            ]
            if held_out and given:
                raise ValueError(
                    "`data.held_out_pairs` takes the validation and test pairs "
                    f"out of the training file, but `data.{given[0]}` is set "
                    "too. Use one or the other."
                )
            if not held_out and not self.validation_source:
                raise ValueError(
                    "task='files' needs validation pairs: set "
                    "`data.validation_source` (a source file with its "
                    "`data.validation_target`, or one tab-separated file), or "
                    "`data.held_out_pairs=N` to hold out N source sentences of "
                    "the training file for validation and N more for test."
                )

    @property
    def direction(self) -> str:
        """``"<source>-<target>"``, e.g. ``"de-en"``."""
        return f"{self.source_language}-{self.target_language}"


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """How long and how to train, checkpoint and evaluate.

    Attributes:
        train_steps: optimizer updates in the whole run. Exactly one of
            `train_steps` and `epochs` may be set; with neither, one epoch.
        epochs: length of the run in epochs of `steps_per_epoch` updates.
        steps_per_epoch: optimizer updates per epoch (``None``: one pass over
            the training pairs). Every epoch ends with a checkpoint; every
            `validation_every` epochs it also reports validation loss, BLEU
            and attention maps.
        validation_every: epochs between two validations.
        gradient_accumulation: `k`, the number of batches whose gradients are
            summed into one optimizer update, so that a few devices reach the
            paper's ~25,000 tokens per update (§5.1). The sum is normalised
            by the token count of all `k` batches, so an update equals one
            step on the concatenated batch.
        label_smoothing: `epsilon_ls` of the loss (§5.4: 0.1). ``None``:
            the preset's (the label-smoothing rows of Table 3 (D)) or 0.1.
        jit_compile: compile the train step with XLA.
        precision: ``"float32"``, ``"mixed_float16"`` (with dynamic loss
            scaling) or ``"mixed_bfloat16"``.
        seed: seed of the initialisation, dropout, data order and the
            synthetic data.
        keep_checkpoints: how many of the latest checkpoints are kept (at
            least 5 for the averaging of §6.1).
        keep_best: also keep the weights with the best validation BLEU.
        bleu_samples: validation pairs translated (greedily) for the BLEU
            reported during training.
        extra_length: the decoder may emit the source length plus this many
            tokens (§6.1: "input length + 50"; `conventions.EXTRA_LENGTH`).
        log_every: updates between two training summaries in TensorBoard,
            and between two printed progress lines when standard output is
            not a terminal (see `verbose`).
        attention_example: index of the validation pair whose attention maps
            are drawn into TensorBoard.
        test_samples: test pairs translated at the end (``None``: all).
        evaluate_with: the weights evaluated at the end: ``"last"``,
            ``"best"`` (best validation BLEU) or ``"average"`` (the average
            of the kept checkpoints, §6.1).
        num_translations: translations printed at the end.
        verbose: progress output: 0 silent; on a terminal, 1 a line
            redrawn in place (updates done of the run, updates per second,
            the time left) and one line per epoch, 2 Keras' line per epoch.
            Otherwise (a cluster job, CI, a file) 1 and 2 print one plain
            line every `log_every` updates, with the time left, and one per
            epoch, never carriage returns or ANSI escapes.
    """

    train_steps: int | None = None
    epochs: int | None = None
    steps_per_epoch: int | None = None
    validation_every: int = 1
    gradient_accumulation: int = 1
    label_smoothing: float | None = None
    jit_compile: bool = False
    precision: str = "float32"
    seed: int = 0
    keep_checkpoints: int = 5
    keep_best: bool = True
    bleu_samples: int = 200
    extra_length: int = default_setting("extra_length")
    log_every: int = 50
    attention_example: int = 0
    test_samples: int | None = None
    evaluate_with: str = "last"
    num_translations: int = 5
    verbose: int = 1

    def __post_init__(self) -> None:
        lengths = ("train_steps", "epochs", "steps_per_epoch", "test_samples")
        check_fields(
            check_positive_int, self, lengths, section="train", allow_none=True
        )
        counts = (
            "validation_every",
            "gradient_accumulation",
            "keep_checkpoints",
            "bleu_samples",
            "log_every",
        )
        check_fields(check_positive_int, self, counts, section="train")
        if self.train_steps is not None and self.epochs is not None:
            raise ValueError(
                "Set either `train.train_steps` or `train.epochs`, not both. "
                f"Received: train_steps={self.train_steps}, epochs={self.epochs}"
            )
        # The paper's label smoothing is 0.1 (null: the preset's).
        check_rate("train.label_smoothing", self.label_smoothing, allow_none=True)
        at_least_zero = ("extra_length", "attention_example", "num_translations")
        check_fields(check_int, self, at_least_zero, section="train", minimum=0)
        check_int("train.seed", self.seed, 0, MAX_SEED)
        switches = ("jit_compile", "keep_best")
        check_fields(check_bool, self, switches, section="train")
        check_choice("train.verbose", self.verbose, (0, 1, 2))
        check_choice("train.precision", self.precision, PRECISIONS)
        check_choice("train.evaluate_with", self.evaluate_with, EVALUATE_WITH)


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
    the preset, or 0.1). Old key names (`RENAMED_KEYS`) are refused.

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
    #: The kind of run (`kinds.KINDS`), and the section of its own settings
    #: (``classification``, ``image``); a translation run has none.
    kind: str = DEFAULT_KIND
    classification: Any = None
    image: Any = None

    def __post_init__(self) -> None:
        _resolve_kind(self)
        if self.kind == "image":
            _resolve_image_run(self)
            return
        model = _resolve_model(self.model)
        data = self.data
        if not isinstance(data, DataConfig):
            data = _from_mapping(DataConfig, "data", data)
        train = self.train
        if not isinstance(train, TrainingConfig):
            train = _from_mapping(TrainingConfig, "train", train)
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
            implied = implied_label_smoothing(self.model)
            train = dataclasses.replace(train, label_smoothing=implied)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "train", train)

    # ------------------------------------------------------------------ I/O
    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some sections replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain JSON-compatible values.

        A translation run writes no ``kind`` key and no kind section, as
        before kinds existed: its ``config.json`` stays the same.
        """
        values = dataclasses.asdict(self)
        values["data"]["bucket_boundaries"] = list(self.data.bucket_boundaries)
        if self.kind == "image":
            # The image kind reads its images from the `image` section.
            values["model"] = self.model.to_dict()
            del values["data"]
        for key in ("kind", *(section for section, _ in KIND_SECTIONS.values())):
            if values.get(key) is None or self.kind == DEFAULT_KIND:
                values.pop(key, None)
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
                f"A training config must be a JSON object. Received: {_shorten(values)}"
            )
        known = {"model", "data", "train", "kind"}
        known |= {section for section, _ in KIND_SECTIONS.values()}
        if is_image_run_layout(values):
            raise ValueError(
                "This is the layout of an image run of an earlier version "
                "(model, data, train; no kind). Set kind='image' and give the "
                "images and batches as the `image` section (image.source, "
                "image.batch_size, ...) instead of `data`."
            )
        check_known_names(
            values, known, "config sections", listing="A config has the sections"
        )
        if values.get("kind") == "image" and "data" in values:
            raise ValueError(
                "An image run (kind='image') reads its images from the `image` "
                "section (image.source, image.batch_size, ...); remove `data`."
            )
        refuse_renamed_keys(values)
        model_values = values.get(
            "model", {} if values.get("kind") == "image" else "tiny"
        )
        data = _from_mapping(DataConfig, "data", values.get("data", {}))
        if isinstance(model_values, Mapping) and "vocabulary_size" in model_values:
            reconcile_vocabulary_size(
                _resolve_model(model_values), data, model_sets_it=True
            )
        return cls(
            model=model_values,
            data=data,
            train=_from_mapping(TrainingConfig, "train", values.get("train", {})),
            kind=values.get("kind", DEFAULT_KIND),
            **{
                section: values[section]
                for section, _ in KIND_SECTIONS.values()
                if section in values
            },
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


def _resolve_kind(config: TrainConfig) -> None:
    """Checks `config.kind` and fills in (or parses) its own section."""
    check_choice("kind", config.kind, KINDS)
    for kind, (section, cls) in KIND_SECTIONS.items():
        value = getattr(config, section)
        if kind != config.kind:
            if value is not None:
                raise ValueError(
                    f"The `{section}` section belongs to kind={kind!r} runs; this "
                    f"config has kind={config.kind!r}. Set kind to {kind!r} or "
                    f"remove the section."
                )
            continue
        if value is None:
            value = cls()
        elif not isinstance(value, cls):
            value = _from_mapping(cls, section, value)
        object.__setattr__(config, section, value)


def _resolve_image_run(config: TrainConfig) -> None:
    """The sections of an image run: `model` an `ImageTransformerConfig`
    (a mapping of its fields; the default model section stands for the
    default image model), `train` a `TrainingConfig`."""
    model = config.model
    if isinstance(model, TransformerConfig) and model == get_preset("tiny"):
        model = ImageTransformerConfig()
    elif isinstance(model, Mapping):
        if "vocabulary_size" in model or "preset" in model:
            raise ValueError(
                "The `model` section of an image run holds ImageTransformerConfig "
                "settings (image_shape, attention, ...), not a text preset."
            )
        # A written config without `generation_order` gets the paper's order;
        # a stored one keeps "image" (`checkpoints.load_stored_config`).
        default = {"generation_order": ImageTransformerConfig.generation_order}
        model = ImageTransformerConfig.from_dict({**default, **model})
    if not isinstance(model, ImageTransformerConfig):
        raise ValueError(
            "The `model` section of an image run must be an "
            "ImageTransformerConfig or a JSON object of its settings. Received: "
            f"{_shorten(model)}"
        )
    train = config.train
    if not isinstance(train, TrainingConfig):
        train = _from_mapping(TrainingConfig, "train", train)
    object.__setattr__(config, "model", model)
    object.__setattr__(config, "train", train)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"The training config is not valid JSON: {e}") from e
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
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: the config file is not UTF-8 text ({e}).") from e
    try:
        values = _parse_json(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    if not isinstance(values, dict):
        raise ValueError(
            f"{path}: a training config must be a JSON object of the sections "
            f"model, data and train. Received: {_shorten(values)}"
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
                f"model.preset={_shorten(preset)}"
            )
        if "label_smoothing" in values:
            raise renamed_key_error("model.label_smoothing")
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
        known = {field.name for field in dataclasses.fields(TransformerConfig)}
        check_known_names(
            values, known, "model settings", listing="Known (besides 'preset')"
        )
        return base.replace(**values)
    raise ValueError(
        'The `model` section must be a preset name (e.g. "tiny"), or a JSON '
        'object of model settings, optionally with a "preset" they change. '
        f"Received: {_shorten(model)}"
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


# ------------------------------------------ checks of the run before training
def planned_updates(train: TrainingConfig) -> int | None:
    """The run's optimizer updates as far as the config tells them (as
    training counts them): `train_steps`, else `epochs` (1 if unset) times
    `steps_per_epoch`; None when the update count of an epoch is learned
    from the data."""
    if train.train_steps is not None:
        return train.train_steps
    if train.steps_per_epoch is None:
        return None
    return (train.epochs or 1) * train.steps_per_epoch


def check_warmup(config: TrainConfig, total_steps: int) -> None:
    """Raises `ValueError` when the warm-up of Eq. 7 is longer than a
    translation run of `total_steps` updates: the learning rate would only
    rise, and the run end at its peak. Other kinds are not checked (their
    schedules are their own)."""
    if config.kind != "translation":
        return
    warmup = config.model.optimizer.warmup_steps
    if warmup > total_steps:
        raise ValueError(
            f"The warm-up of Eq. 7 (model.optimizer.warmup_steps={warmup}) is "
            f"longer than the run ({total_steps} updates): the learning rate "
            "would only rise and never decay. Set model.optimizer.warmup_steps "
            f"to at most {total_steps}, or train longer (train.train_steps or "
            "train.epochs)."
        )


def _attention_parameters(
    d_model: int, heads: int, key_dim: int, value_dim: int
) -> int:
    """Weights of one multi-head attention: queries, keys, values, output."""
    return d_model * heads * (2 * key_dim + value_dim) + heads * value_dim * d_model


def _model_parts(config: TrainConfig) -> list[tuple[str, int, str]]:
    """(part, parameters, the settings that size it) of the config's model,
    counting the weight matrices (a lower bound: biases and norms left out)."""
    model = config.model
    d_model, d_ff = model.d_model, model.d_ff
    ffn = 2 * d_model * d_ff
    if config.kind == "image":
        key_dim = model.head_key_dim
        attention = _attention_parameters(d_model, model.num_heads, key_dim, key_dim)
        sizes = f"model.d_model={d_model}, model.d_ff={d_ff}"
        return [
            (
                f"{model.num_layers} layer(s)",
                model.num_layers * (attention + ffn),
                f"model.num_layers={model.num_layers}, {sizes}",
            )
        ]
    attention = _attention_parameters(
        d_model, model.num_heads, model.head_key_dim, model.head_value_dim
    )
    sizes = f"model.d_model={d_model}, model.d_ff={d_ff}"
    vocabulary = model.vocabulary_size
    if not model.share_embeddings:
        vocabulary += model.target_vocabulary
    layers = model.num_encoder_layers
    parts = [
        (
            "embeddings",
            vocabulary * d_model,
            f"data.vocabulary_size={config.data.vocabulary_size}, "
            f"model.d_model={d_model}",
        ),
        (
            f"{layers} encoder layer(s)",
            layers * (attention + ffn),
            f"model.num_encoder_layers={layers}, {sizes}",
        ),
    ]
    if config.kind == "translation":
        layers = model.num_decoder_layers
        parts.append(
            (
                f"{layers} decoder layer(s)",
                layers * (2 * attention + ffn),
                f"model.num_decoder_layers={layers}, {sizes}",
            )
        )
    return parts


def estimated_parameters(config: TrainConfig) -> int:
    """The parameters of the config's model, from its sizes alone (its weight
    matrices: a slight underestimate), without building it."""
    return sum(count for _, count, _ in _model_parts(config))


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def check_before_training(config: TrainConfig) -> None:
    """The checks of a run that need only its config, made before anything
    is written to the run folder (``train --print-config`` makes them too):

    * a warm-up of Eq. 7 longer than the run, where the config gives the
      number of updates (`planned_updates`; otherwise training checks it
      once the data tells the updates of an epoch);
    * a model that cannot fit in this machine's memory: its parameters
      (`estimated_parameters`) times `TRAINING_BYTES_PER_PARAMETER`.

    Raises:
        ValueError: one line naming the settings and what to change.
    """
    total = planned_updates(config.train)
    if total is not None:
        check_warmup(config, total)
    memory = physical_memory()
    parts = _model_parts(config)
    parameters = sum(count for _, count, _ in parts)
    needed = parameters * TRAINING_BYTES_PER_PARAMETER
    if memory is None or needed <= memory:
        return
    largest = max(parts, key=lambda part: part[1])
    listed = "; ".join(f"{name}: {count:.3g} ({sizes})" for name, count, sizes in parts)
    raise ValueError(
        f"The model of this config cannot fit in memory: about {parameters:.3g} "
        f"parameters ({listed}) need at least {needed / 2**30:,.0f} GiB to train "
        f"({TRAINING_BYTES_PER_PARAMETER} bytes each: the float32 weight, its "
        "gradient and Adam's two moments), and this machine has "
        f"{memory / 2**30:,.1f} GiB. Lower the sizes of the largest part, the "
        f"{largest[0]} ({largest[2]})."
    )
