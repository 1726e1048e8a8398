"""The named tasks of `keras-transformer train`: their splits and how to load them.

One registry, `TASKS`, answers every question about a task: which splits it
has (`Task.splits`), which one is its test set (`Task.test_split`), and how
to read one split's `TextPairs` from a run's data settings
(`Task.load_split`) or all three (`Task.load`). Training
(`kt.training.pipeline.load_task`), the config's validation and the
``evaluate`` command all use it.

The task names themselves are `keras_transformer.conventions.TASK_NAMES`,
which imports without TensorFlow (the command line builds its choices from
it); this module imports the readers only when a split is loaded.

Example:
>>> from keras_transformer.data.tasks import get_task
>>> task = get_task("multi30k")
>>> task.splits, task.test_split
(('train', 'val', 'test_2016_flickr'), 'test_2016_flickr')

Reference: Vaswani et al. (2017), §5.1 (training data and batching); the
data sets here are small stand-ins for WMT 2014.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from keras_transformer.conventions import TASK_NAMES
from keras_transformer.validation import first_few

if TYPE_CHECKING:
    from keras_transformer.data.text import TextPairs

__all__ = [
    "TASKS",
    "TASK_NAMES",
    "Task",
    "TaskData",
    "TaskSettings",
    "check_file_paths",
    "get_task",
    "held_out_splits",
]


class TaskSettings(Protocol):
    """The data settings a task reads (a `kt.training.DataConfig` has them)."""

    task: str
    source_language: str
    target_language: str
    data_dir: str | None
    train_source: str | None
    train_target: str | None
    validation_source: str | None
    validation_target: str | None
    test_source: str | None
    test_target: str | None
    num_train_examples: int
    num_eval_examples: int
    # Also read, when the settings have them: ``on_bad_line`` ("skip" or
    # "raise"; "skip" when absent), what the file readers do with a bad line,
    # and ``held_out_pairs`` (None when absent), the validation and test
    # sentences a ``files`` task holds out of its training file.


#: What the readers do with a bad line when the settings do not say.
DEFAULT_ON_BAD_LINE = "skip"


def _on_bad_line(settings: TaskSettings) -> Any:
    return getattr(settings, "on_bad_line", None) or DEFAULT_ON_BAD_LINE


def _held_out_pairs(settings: TaskSettings) -> int | None:
    return getattr(settings, "held_out_pairs", None)


@dataclasses.dataclass(frozen=True)
class TaskData:
    """The three splits of a task.

    Attributes:
        train, validation, test: the sentence pairs.
        test_name: what the test pairs are, e.g. ``"test_2016_flickr"`` (or
            ``"validation"`` when a ``files`` task has no test files).
    """

    train: TextPairs
    validation: TextPairs
    test: TextPairs
    test_name: str

    def skipped(self) -> list[dict[str, Any]]:
        """The pairs each split dropped while reading (bad lines), split by split.

        Returns:
            One dict per split read from files: ``{"split", "files",
            "kept", "skipped": {reason: count}, "summary"}`` (the summary in
            words, e.g. ``"skipped 1 pair (invalid UTF-8: 1), kept 299"``).
            Generated splits (the dates) are left out; so is the test split
            when it is the validation split again. Splits cut from one file
            (Tatoeba) count that file's skips once, with the first of them.
        """
        splits = [("train", self.train), ("validation", self.validation)]
        if self.test_name != "validation":
            splits.append((self.test_name, self.test))
        found: list[dict[str, Any]] = []
        counted: set[tuple[str, ...]] = set()
        for split, pairs in splits:
            if not (pairs.files or pairs.num_skipped):
                continue
            if pairs.files and pairs.files in counted:
                pairs = dataclasses.replace(pairs, skipped={})
            counted.add(pairs.files)
            found.append(
                {
                    "split": split,
                    "files": list(pairs.files),
                    "kept": len(pairs),
                    "skipped": dict(sorted(pairs.skipped.items())),
                    "summary": pairs.skip_summary(),
                }
            )
        return found

    def skip_messages(self) -> list[str]:
        """One line per split that dropped pairs, naming its files.

        For example ``"train split (corpus/train.de, corpus/train.en):
        skipped 1 pair (invalid UTF-8: 1), kept 299"``; empty when nothing
        was dropped.
        """
        return [
            f"{entry['split']} split ({', '.join(entry['files']) or 'generated'}): "
            f"{entry['summary']}"
            for entry in self.skipped()
            if sum(entry["skipped"].values())
        ]


@dataclasses.dataclass(frozen=True)
class Task:
    """A named data set: its splits and how to read each one.

    Attributes:
        name: the `data.task` value.
        description: one line for help texts.
        splits: the split names `load_split` accepts, train first, then
            validation, then test.
        loader: ``(split, settings, seed) -> TextPairs``.
    """

    name: str
    description: str
    splits: tuple[str, str, str]
    loader: Callable[[str, Any, int], TextPairs] = dataclasses.field(repr=False)

    @property
    def test_split(self) -> str:
        """The split evaluated at the end of training (and by ``evaluate``)."""
        return self.splits[2]

    def load_split(
        self, split: str, settings: TaskSettings, seed: int = 0
    ) -> TextPairs:
        """The pairs of one split.

        Args:
            split: one of `splits`.
            settings: the data settings (a `DataConfig`).
            seed: seed of generated data (the synthetic dates).

        Raises:
            ValueError: for a split the task does not have.
        """
        if split not in self.splits:
            raise ValueError(
                f"{split!r} is not a split of task {self.name!r}. Use one of: "
                f"{', '.join(self.splits)}."
            )
        return self.loader(split, settings, seed)

    def load(self, settings: TaskSettings, seed: int = 0) -> TaskData:
        """The train, validation and test pairs."""
        train, validation, test = (
            self.load_split(split, settings, seed) for split in self.splits
        )
        return TaskData(train, validation, test, self.test_name(settings))

    def test_name(self, settings: TaskSettings) -> str:
        """The name of the test pairs (``files`` without test files: validation)."""
        if (
            self.name == "files"
            and not settings.test_source
            and not _held_out_pairs(settings)
        ):
            return "validation"
        return self.test_split


# ------------------------------------------------------------------ loaders
#: Seeds of the synthetic dates splits are the seed plus these offsets.
_DATES_SPLIT_SEEDS = {"train": 0, "validation": 1_000_003, "test": 2_000_003}


def _dates(split: str, settings: TaskSettings, seed: int) -> TextPairs:
    from keras_transformer.data.datasets import synthetic_dates

    size = (
        settings.num_train_examples if split == "train" else settings.num_eval_examples
    )
    return synthetic_dates(size, seed=seed + _DATES_SPLIT_SEEDS[split])


def _multi30k(split: str, settings: TaskSettings, seed: int) -> TextPairs:
    from keras_transformer.data.datasets import load_multi30k

    return load_multi30k(
        split,  # type: ignore[arg-type]
        settings.source_language,  # type: ignore[arg-type]
        settings.target_language,  # type: ignore[arg-type]
        data_dir=settings.data_dir,
        on_bad_line=_on_bad_line(settings),
    )


def _tatoeba(split: str, settings: TaskSettings, seed: int) -> TextPairs:
    from keras_transformer.data.datasets import load_tatoeba_spa_eng

    return load_tatoeba_spa_eng(
        split,  # type: ignore[arg-type]
        data_dir=settings.data_dir,
        direction=f"{settings.source_language}-{settings.target_language}",  # type: ignore[arg-type]
        on_bad_line=_on_bad_line(settings),
    )


def held_out_splits(sources: Sequence[str], held_out: int) -> list[str]:
    """The split of each pair when a file's pairs are held out by source sentence.

    The distinct source sentences are ordered by their BLAKE2b hash: the
    first `held_out` go to ``"test"``, the next `held_out` to
    ``"validation"``, the rest to ``"train"``. The order depends only on the
    sentences, not on the file's order, the machine or the seed, and every
    pair of one source sentence lands in the same split, so no source
    sentence is both trained on and scored.

    Args:
        sources: the source sentence of each pair.
        held_out: source sentences per held-out split (``data.held_out_pairs``).

    Returns:
        ``"train"``, ``"validation"`` or ``"test"`` for each pair.

    Raises:
        ValueError: when the held-out splits would leave nothing to train on.
    """
    distinct = sorted(set(sources), key=lambda s: (_sentence_hash(s), s))
    if 2 * held_out >= len(distinct):
        raise ValueError(
            f"data.held_out_pairs={held_out} holds out {2 * held_out} source "
            f"sentences for validation and test, but there are only "
            f"{len(distinct)} distinct ones: nothing would be left to train "
            "on. Lower data.held_out_pairs."
        )
    names = ("test", "validation")
    split_of = {
        sentence: names[rank // held_out] if rank < 2 * held_out else "train"
        for rank, sentence in enumerate(distinct)
    }
    return [split_of[source] for source in sources]


def _sentence_hash(sentence: str) -> bytes:
    return hashlib.blake2b(sentence.encode("utf-8"), digest_size=8).digest()


def _held_out(split: str, pairs: TextPairs, held_out: int) -> TextPairs:
    """The pairs of `split` when `held_out` sources each go to validation and test."""
    from keras_transformer.data.text import TextPairs

    keep = [
        i
        for i, name in enumerate(held_out_splits(pairs.sources, held_out))
        if name == split
    ]
    return TextPairs(
        tuple(pairs.sources[i] for i in keep),
        tuple(pairs.targets[i] for i in keep),
        pairs.skipped,
        pairs.files,
    )


def _read_files(
    source: str, target: str | None, on_bad_line: Any, split: str
) -> TextPairs:
    """The pairs of one split's files; held-out splits read the same file
    three times in a row, so the last reading is kept (files unchanged)."""
    stamp = tuple(
        (path, os.stat(path).st_mtime_ns, os.stat(path).st_size)
        for path in (source, target)
        if path and os.path.exists(path)
    )
    key = (source, target, on_bad_line, split, stamp)
    if _last_read and _last_read[0] == key:
        return _last_read[1]
    pairs = _read_files_uncached(source, target, on_bad_line, split)
    _last_read[:] = [key, pairs]
    return pairs


#: ``[key, pairs]`` of the last `_read_files`.
_last_read: list[Any] = []


def check_file_paths(settings: TaskSettings) -> None:
    """Refuses a ``files`` task whose data file settings name a folder or no
    file, or a source of pairs without a target that is not a ``.tsv`` file,
    naming the setting (`train` makes it before a run folder is written).

    Raises:
        ValueError: a setting names a folder (its files are listed), or a
            ``.tsv`` file of pairs is missing its suffix.
        FileNotFoundError: a setting names nothing.
    """
    if settings.task != "files":
        return
    for split in ("train", "validation", "test"):
        source = getattr(settings, f"{split}_source", None)
        target = getattr(settings, f"{split}_target", None)
        _check_split_files(split, source, target)


def _check_split_files(split: str, source: str | None, target: str | None) -> None:
    """A split's named files are files (not folders), a source without a
    target is a ``.tsv`` file of pairs, and each exists: the first problem
    is refused, naming its setting."""
    named = [
        (f"data.{split}_{side}", path)
        for side, path in (("source", source), ("target", target))
        if path is not None
    ]
    for setting, path in named:
        if os.path.isdir(path):
            inside = sorted(
                name
                for name in os.listdir(path)
                if os.path.isfile(os.path.join(path, name))
            )
            holds = f"it holds {first_few(inside, 3)}" if inside else "it is empty"
            raise ValueError(
                f"{setting} {path} is a folder, not a file ({holds}): name the "
                f"file itself ({setting}={os.path.join(path, 'FILE')})."
            )
    if (
        source is not None
        and target is None
        and not re.search(r"\.tsv(\.gz)?$", source)
    ):
        raise ValueError(
            f"data.{split}_target is not set, so data.{split}_source={source!r} "
            "must be a tab-separated file of pairs (ending in .tsv or "
            f".tsv.gz). Set data.{split}_target to the matching target file "
            "for line-aligned files."
        )
    for setting, path in named:
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{setting} {path} does not exist: check the path (a relative "
                "one is read from the folder the command runs in)."
            )


def _read_files_uncached(
    source: str, target: str | None, on_bad_line: Any, split: str
) -> TextPairs:
    from keras_transformer.data.text import (
        SKIP_REASON_NAMES,
        read_parallel_files,
        read_tsv_pairs,
    )

    _check_split_files(split, source, target)
    if target is None:
        pairs = read_tsv_pairs(source, num_columns=None, on_bad_line=on_bad_line)
    else:
        pairs = read_parallel_files(source, target, on_bad_line=on_bad_line)
    if not len(pairs):
        # Said here, by the file: the tokenizer or the held-out split said
        # "no non-empty sentence" or "only 0 distinct ones".
        skipped = ", ".join(
            f"{SKIP_REASON_NAMES.get(reason, reason)}: {count}"
            for reason, count in pairs.skipped.items()
        )
        why = f"every line was skipped ({skipped})" if skipped else "it is empty"
        want = "a pair" if target is None else "a sentence"
        raise ValueError(
            f"data.{split}_source {source} holds no pairs: {why}. Pass files "
            f"with {want} on each line."
        )
    return pairs


def _files(split: str, settings: TaskSettings, seed: int) -> TextPairs:
    held_out = _held_out_pairs(settings)
    if held_out:
        source, target = settings.train_source, settings.train_target
        if not source:
            raise ValueError(
                "task='files' needs `data.train_source` to hold pairs out of it."
            )
        pairs = _read_files(source, target, _on_bad_line(settings), "train")
        return _held_out(split, pairs, held_out)
    if split == "test" and not settings.test_source:
        split = "validation"  # no test files: the end evaluates on validation
    source = getattr(settings, f"{split}_source")
    target = getattr(settings, f"{split}_target")
    if not source:
        raise ValueError(
            f"task='files' needs `data.{split}_source` to load its {split} pairs."
        )
    return _read_files(source, target, _on_bad_line(settings), split)


#: Every task by name, in the order of `TASK_NAMES`.
TASKS: dict[str, Task] = {
    task.name: task
    for task in (
        Task(
            "dates",
            "synthetic dates in six languages to ISO 8601 (no download)",
            ("train", "validation", "test"),
            _dates,
        ),
        Task(
            "multi30k",
            "Multi30k Task 1 (de, en, fr)",
            ("train", "val", "test_2016_flickr"),
            _multi30k,
        ),
        Task(
            "tatoeba",
            "Tatoeba English-Spanish, either direction",
            ("train", "val", "test"),
            _tatoeba,
        ),
        Task(
            "files",
            "your own line-aligned or tab-separated files (or one file with "
            "data.held_out_pairs)",
            ("train", "validation", "test"),
            _files,
        ),
    )
}
assert tuple(TASKS) == TASK_NAMES


def get_task(name: str) -> Task:
    """The task called `name`, with the list of known tasks when there is none."""
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(
            f"Unknown task {name!r}: `data.task` must be one of "
            f"{', '.join(map(repr, TASK_NAMES))}."
        ) from None
