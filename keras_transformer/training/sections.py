"""The ``data`` and ``train`` sections of a `TrainConfig`: `DataConfig`
(the task, the languages, the vocabulary and the batching, §5.1) and
`TrainingConfig` (the length of the run, accumulation, precision,
checkpoints and evaluation), each a frozen dataclass that checks its
settings."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from keras_transformer.conventions import PRECISIONS, TASK_NAMES
from keras_transformer.data.batching import (
    DEFAULT_BUCKET_BOUNDARIES,
    DEFAULT_MAX_TOKENS_PER_BATCH,
)
from keras_transformer.decoding.settings import default_setting
from keras_transformer.validation import (
    check_bool,
    check_choice,
    check_fields,
    check_int,
    check_positive_int,
    check_rate,
    check_string,
)

__all__ = [
    "MAX_BUCKET_BOUNDARIES",
    "TASKS",
    "FILE_SETTINGS",
    "DataConfig",
    "TrainingConfig",
    "shorten",
]

#: The `data.task` values (defined, without TensorFlow, in `conventions`).
TASKS = TASK_NAMES
#: The translation direction of a task whose config names no languages.
DEFAULT_DIRECTION = ("de", "en")
TASK_DIRECTIONS = {"tatoeba": ("en", "es")}
EVALUATE_WITH = ("last", "best", "average")
TOO_LONG = ("drop", "truncate")
#: `data.on_bad_line` (the readers' policy in `kt.data.text`).
BAD_LINE_POLICIES = ("skip", "raise")
TOKENIZER_MODEL_TYPES = ("unigram", "bpe")
#: The most entries `data.bucket_boundaries` may have (XLA compiles one
#: program per bucket, so a handful is usual).
MAX_BUCKET_BOUNDARIES = 1_000
#: `train.seed` seeds NumPy too, whose seeds are below 2**32.
MAX_SEED = 2**32 - 1


def shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to `limit` characters (a message stays one line)."""
    shown = repr(value)
    return shown if len(shown) <= limit else f"{shown[: limit - 3]}..."


def _bucket_boundaries(value: Any) -> tuple[int, ...]:
    """`data.bucket_boundaries` checked: 1 to `MAX_BUCKET_BOUNDARIES` strictly
    increasing positive integers (a list or tuple), as a tuple."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            "`data.bucket_boundaries` must be a list of strictly increasing "
            f"positive integers, e.g. [8, 16, 32]. Received: {shorten(value)}"
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
            f"and remove duplicates). Received: {shorten(list(value))}"
        )
    return tuple(value)


#: The `DataConfig` settings that name files of ``task="files"``.
FILE_SETTINGS = (
    "train_source",
    "train_target",
    "validation_source",
    "validation_target",
    "test_source",
    "test_target",
)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the sentence pairs come from and how they are batched.

    Attributes:
        task: ``"dates"`` (synthetic dates to ISO 8601, no download),
            ``"multi30k"`` (Multi30k Task 1), ``"tatoeba"`` (Tatoeba
            English-Spanish) or ``"files"`` (your own parallel text).
        source_language, target_language: for Multi30k ``de``/``en``/``fr``;
            for Tatoeba ``en`` and ``es`` in either order. Informative for
            the other tasks. ``None`` (the default) takes the task's own
            direction (`TASK_DIRECTIONS`: ``de`` to ``en``, Tatoeba ``en``
            to ``es``), or with the other side given, the other language of
            that pair.
        data_dir: the folder holding the data set's files (``None``: the
            loaders' defaults, ``$KT_DATA_DIR`` or a download).
        train_source, train_target: for ``task="files"``, two line-aligned
            files (plain or ``.gz``), or one tab-separated file in
            ``train_source`` with ``train_target`` left ``None``.
        validation_source, validation_target: the validation pairs of
            ``task="files"``, in the same layout (required unless
            ``held_out_pairs`` is set).
        test_source, test_target: the test pairs of ``task="files"``;
            ``None`` evaluates on the validation pairs at the end. These
            paths and `data_dir` are stored absolute: a relative one (or
            ``~``) is taken from the current folder when the config is made.
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
    source_language: str | None = None
    target_language: str | None = None
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
        check_fields(check_string, self, languages, section="data", allow_none=True)
        self._resolve_direction()
        paths = ("data_dir", *FILE_SETTINGS)
        check_fields(check_string, self, paths, section="data", allow_none=True)
        for name in paths:
            # Absolute, from the folder the config is given in (and `~`): a
            # run's config.json names the same files from any folder.
            path = getattr(self, name)
            if path is not None:
                object.__setattr__(
                    self, name, os.path.abspath(os.path.expanduser(path))
                )
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

    def _resolve_direction(self) -> None:
        """Languages left out (``None``) from the task's `TASK_DIRECTIONS`:
        both, or the other language of the pair than the side given."""
        first, second = TASK_DIRECTIONS.get(self.task, DEFAULT_DIRECTION)
        source, target = self.source_language, self.target_language
        if source is None:
            source = second if target == first else first
        if target is None:
            target = first if source == second else second
        object.__setattr__(self, "source_language", source)
        object.__setattr__(self, "target_language", target)

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
        own_files = [name for name in FILE_SETTINGS if getattr(self, name)]
        if own_files and self.task != "files":
            # The named tasks read their own files: this one was ignored.
            raise ValueError(
                f"`data.{own_files[0]}` names a file of your own, which only "
                f"data.task='files' reads; with task={self.task!r} it would be "
                "ignored. Set data.task=files (train --task files), or remove "
                f"it (--set data.{own_files[0]}=null)."
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
            `train_steps` and `epochs` may be set; with neither, one epoch
            (a translation run: at least twice its warm-up of Eq. 7).
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
        attention_images: draw those maps at every validation, one image
            per layer and kind of attention (Matplotlib, on the CPU,
            whatever the model's size); ``false`` skips them. The validation
            scores and the example's translation are logged either way.
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
    attention_images: bool = True
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
                "Set either `train.train_steps` or `train.epochs`, not both "
                "(`--set train.epochs=null` or `--set train.train_steps=null` "
                "clears the one a config file sets). "
                f"Received: train_steps={self.train_steps}, epochs={self.epochs}"
            )
        # The paper's label smoothing is 0.1 (null: the preset's).
        check_rate("train.label_smoothing", self.label_smoothing, allow_none=True)
        at_least_zero = ("extra_length", "attention_example", "num_translations")
        check_fields(check_int, self, at_least_zero, section="train", minimum=0)
        check_int("train.seed", self.seed, 0, MAX_SEED)
        switches = ("jit_compile", "keep_best", "attention_images")
        check_fields(check_bool, self, switches, section="train")
        check_choice("train.verbose", self.verbose, (0, 1, 2))
        check_choice("train.precision", self.precision, PRECISIONS)
        check_choice("train.evaluate_with", self.evaluate_with, EVALUATE_WITH)
