"""Reading sentence-aligned parallel text into :class:`TextPairs`.

Two layouts are supported:

* two line-aligned files, one per language (:func:`read_parallel_files`), as
  used by Multi30k and the WMT corpora;
* one tab-separated file with a column per language (:func:`read_tsv_pairs`),
  as used by the Tatoeba/Anki sentence pairs.

Files may be plain text or gzip-compressed (a ``.gz`` suffix). Every line is
decoded as strict UTF-8 by this module so that a broken line can be reported
with its file and 1-based line number. Only trailing whitespace (including the
newline) is removed from a line; whitespace inside a line, TABs included, is
kept as it is.

A *bad line* (an empty sentence, invalid UTF-8, a sentence longer than
``max_chars`` characters, or in a TSV file a wrong number of columns) either
raises a :class:`ValueError` (``on_bad_line="raise"``, the default) or drops
the whole pair, on both sides so the corpus never goes out of alignment
(``on_bad_line="skip"``). Dropped pairs are counted by reason in
:attr:`TextPairs.skipped`.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import tensorflow as tf

from keras_transformer.files import check_utf8_start
from keras_transformer.validation import check_sentence, count_of

__all__ = [
    "BAD_LINE_POLICIES",
    "BadLinePolicy",
    "SKIP_EMPTY",
    "SKIP_INVALID_UTF8",
    "SKIP_REASON_NAMES",
    "SKIP_TOO_LONG",
    "SKIP_WRONG_COLUMNS",
    "TextPairs",
    "read_parallel_files",
    "read_tsv_pairs",
]

BadLinePolicy = Literal["raise", "skip"]

#: Keys of :attr:`TextPairs.skipped`.
SKIP_EMPTY = "empty"
SKIP_INVALID_UTF8 = "invalid_utf8"
SKIP_TOO_LONG = "too_long"
SKIP_WRONG_COLUMNS = "wrong_columns"

#: How :meth:`TextPairs.skip_summary` names each reason.
SKIP_REASON_NAMES = {
    SKIP_EMPTY: "empty line",
    SKIP_INVALID_UTF8: "invalid UTF-8",
    SKIP_TOO_LONG: "too long",
    SKIP_WRONG_COLUMNS: "wrong number of columns",
}

#: The values of ``on_bad_line`` (and of ``data.on_bad_line`` in a run).
BAD_LINE_POLICIES = ("raise", "skip")
_BAD_LINE_POLICIES = BAD_LINE_POLICIES
_DEFAULT_MAX_CHARS = 2000


@dataclasses.dataclass(frozen=True)
class TextPairs:
    """An immutable, aligned collection of (source, target) sentence pairs.

    Attributes:
        sources: Source-language sentences.
        targets: Target-language sentences; ``targets[i]`` translates
            ``sources[i]``.
        skipped: Number of pairs dropped while reading, by reason (for example
            ``{"empty": 2, "invalid_utf8": 1}``). Empty when nothing was
            dropped. :meth:`skip_summary` says it in words.
        files: The files the pairs were read from (source file first), as
            given to the reader; empty for generated or hand-built pairs. Not
            part of equality or the hash.
    """

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    skipped: Mapping[str, int] = dataclasses.field(default_factory=dict)
    files: tuple[str, ...] = dataclasses.field(default=(), compare=False)

    def __post_init__(self) -> None:
        # Accept any sequence (lists included) but store tuples, so that the
        # object really is immutable.
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "targets", tuple(self.targets))
        object.__setattr__(self, "skipped", MappingProxyType(dict(self.skipped)))
        object.__setattr__(self, "files", tuple(str(f) for f in self.files))
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"TextPairs needs as many targets as sources, got "
                f"{len(self.sources)} sources and {len(self.targets)} targets. "
                "Pass two sequences of the same length."
            )
        for name, sentences in (("sources", self.sources), ("targets", self.targets)):
            for i, sentence in enumerate(sentences):
                check_sentence(f"TextPairs.{name}[{i}]", sentence)

    def __len__(self) -> int:
        return len(self.sources)

    def __hash__(self) -> int:
        return hash((self.sources, self.targets, tuple(sorted(self.skipped.items()))))

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Iterates over ``(source, target)`` tuples."""
        return iter(zip(self.sources, self.targets, strict=True))

    def __repr__(self) -> str:
        skipped = dict(self.skipped)
        return f"TextPairs({len(self)} pairs, skipped={skipped})"

    @property
    def num_skipped(self) -> int:
        """The number of pairs dropped while reading, all reasons together."""
        return sum(self.skipped.values())

    def skip_summary(self) -> str:
        """What was dropped and kept, in words.

        Returns:
            For example ``"skipped 1 pair (invalid UTF-8: 1), kept 299"``, or
            ``"skipped 0 pairs, kept 300"``.
        """
        total = self.num_skipped
        text = f"skipped {total} pair{'' if total == 1 else 's'}"
        if total:
            reasons = ", ".join(
                f"{SKIP_REASON_NAMES.get(reason, reason)}: {count}"
                for reason, count in sorted(self.skipped.items())
                if count
            )
            text += f" ({reasons})"
        return f"{text}, kept {len(self)}"

    def to_dataset(self) -> tf.data.Dataset:
        """Returns the pairs as a ``tf.data.Dataset``.

        Returns:
            A dataset of ``(source, target)`` tuples of scalar ``tf.string``
            tensors, in order.
        """
        sources = tf.constant(self.sources, dtype=tf.string, shape=[len(self)])
        targets = tf.constant(self.targets, dtype=tf.string, shape=[len(self)])
        return tf.data.Dataset.from_tensor_slices((sources, targets))

    def take(self, n: int) -> TextPairs:
        """Returns the first ``n`` pairs (all of them if there are fewer).

        Args:
            n: Number of pairs to keep; must be non-negative.

        Returns:
            A new :class:`TextPairs` with the same ``skipped`` counts.
        """
        if n < 0:
            raise ValueError(f"take(n) needs n >= 0, got n={n}.")
        return TextPairs(self.sources[:n], self.targets[:n], self.skipped, self.files)

    def reversed(self) -> TextPairs:
        """Returns the pairs with source and target swapped.

        Returns:
            A new :class:`TextPairs` translating in the opposite direction.
        """
        return TextPairs(self.targets, self.sources, self.skipped, self.files)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


class _BadLineError(Exception):
    """Internal signal: one line is bad for ``reason``; ``detail`` explains."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _check_policy(on_bad_line: str, max_chars: int | None) -> None:
    if on_bad_line not in _BAD_LINE_POLICIES:
        raise ValueError(
            f"on_bad_line={on_bad_line!r} is not supported; use one of "
            f"{_BAD_LINE_POLICIES}."
        )
    if max_chars is not None and max_chars < 1:
        raise ValueError(
            f"max_chars must be a positive number of characters or None (no "
            f"limit), got {max_chars}."
        )


def _read_raw_lines(path: Path) -> list[bytes]:
    """Reads the lines of a plain or ``.gz`` file as bytes, newline included."""
    if path.is_dir():
        raise IsADirectoryError(
            f"{path} is a folder, not a text file: name a file in it."
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"Text file not found: {path}. Check the path (or the data_dir "
            "argument) points to an existing file."
        )
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            lines = f.readlines()
    except (OSError, EOFError) as e:  # e.g. a truncated or non-gzip ".gz" file
        raise OSError(
            f"Could not read {path}: {e}. If the file is not gzip-compressed, "
            "remove the '.gz' suffix; if it is truncated, download it again."
        ) from e
    if lines:
        check_utf8_start(path, lines[0])
        _check_mostly_utf8(path, lines)
    return lines


def _check_mostly_utf8(path: Path, lines: list[bytes]) -> None:
    """Refuses a file more than half of whose lines are not UTF-8: it is in
    another encoding, and skipping its bad lines (`on_bad_line="skip"`)
    would keep only the lines without accents (a German corpus in
    Windows-1252: the sentences without ä, ö, ü or ß)."""
    invalid = 0
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            invalid += 1
    if invalid * 2 > len(lines):
        raise ValueError(
            f"{path}: {invalid:,} of its {len(lines):,} lines are not valid "
            "UTF-8, so it is in another encoding (Windows-1252 or Latin-1, "
            "most likely). Convert it, e.g. with `iconv -f WINDOWS-1252 -t "
            f"UTF-8 {path} > converted.txt` (data.on_bad_line=skip drops a few "
            "bad lines, not most of a file)."
        )


def _utf8(raw: bytes, line_number: int) -> str:
    """One line as strict UTF-8; `_BadLineError` when it is not."""
    try:
        # Line 1 may start with a byte-order mark, which is not text.
        return raw.decode("utf-8-sig" if line_number == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise _BadLineError(
            SKIP_INVALID_UTF8,
            f"invalid UTF-8 ({e.reason} at byte {e.start} of the line)",
        ) from None


def _decode_line(raw: bytes, line_number: int, max_chars: int | None) -> str:
    """Decodes one line as strict UTF-8 and removes trailing whitespace."""
    text = _utf8(raw, line_number).rstrip()
    if not text:
        raise _BadLineError(SKIP_EMPTY, "empty line")
    _check_length(text, max_chars)
    return text


def _check_length(text: str, max_chars: int | None) -> None:
    if max_chars is not None and len(text) > max_chars:
        raise _BadLineError(
            SKIP_TOO_LONG,
            f"line of {len(text)} characters is longer than max_chars={max_chars}",
        )


def _bad_line_error(path: Path, line_number: int, bad: _BadLineError) -> ValueError:
    fixes = "pass on_bad_line='skip' (in a training config: data.on_bad_line="
    fixes += "skip) to drop such pairs (they are counted in TextPairs.skipped)"
    if bad.reason == SKIP_TOO_LONG:
        fixes += ", or raise max_chars (None disables the limit)"
    elif bad.reason == SKIP_INVALID_UTF8:
        fixes = "re-encode the file as UTF-8, or " + fixes
    else:
        fixes = "fix the file, or " + fixes
    return ValueError(
        f"{path}, line {line_number}: {bad.detail}. To continue, {fixes}."
    )


def read_parallel_files(
    source_path: str | os.PathLike[str],
    target_path: str | os.PathLike[str],
    *,
    on_bad_line: BadLinePolicy = "raise",
    max_chars: int | None = _DEFAULT_MAX_CHARS,
) -> TextPairs:
    """Reads two line-aligned files into sentence pairs.

    Line ``i`` of ``source_path`` translates line ``i`` of ``target_path``.
    A file whose name ends in ``.gz`` is read as gzip-compressed.

    Args:
        source_path: File of source-language sentences, one per line.
        target_path: File of target-language sentences, one per line.
        on_bad_line: What to do with an empty line, a line that is not valid
            UTF-8 or a line longer than ``max_chars`` on either side:
            ``"raise"`` a ``ValueError`` naming the file and line, or
            ``"skip"`` the pair (on both sides) and count it in
            :attr:`TextPairs.skipped`.
        max_chars: Longest accepted sentence in characters, after trailing
            whitespace is removed; ``None`` for no limit.

    Returns:
        The aligned :class:`TextPairs`.

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: If the files have different numbers of lines (whatever
            ``on_bad_line`` is), or on a bad line with ``on_bad_line="raise"``.
    """
    _check_policy(on_bad_line, max_chars)
    source_path, target_path = Path(source_path), Path(target_path)
    source_lines = _read_raw_lines(source_path)
    target_lines = _read_raw_lines(target_path)
    if len(source_lines) != len(target_lines):
        raise ValueError(
            "Parallel files must have the same number of lines, but "
            f"{source_path} has {count_of(len(source_lines), 'line')} and "
            f"{target_path} has "
            f"{len(target_lines)}. Check that the two files belong to the same "
            "corpus and split, and that neither is truncated."
        )

    sources: list[str] = []
    targets: list[str] = []
    skipped: Counter[str] = Counter()
    for index, (raw_source, raw_target) in enumerate(
        zip(source_lines, target_lines, strict=True)
    ):
        line_number = index + 1
        pair = []
        for path, raw in ((source_path, raw_source), (target_path, raw_target)):
            try:
                pair.append(_decode_line(raw, line_number, max_chars))
            except _BadLineError as bad:
                if on_bad_line == "raise":
                    raise _bad_line_error(path, line_number, bad) from None
                skipped[bad.reason] += 1
                break
        else:
            sources.append(pair[0])
            targets.append(pair[1])
    return TextPairs(
        tuple(sources),
        tuple(targets),
        dict(skipped),
        (str(source_path), str(target_path)),
    )


def _check_columns(
    source_column: int, target_column: int, num_columns: int | None
) -> int:
    """Checks the column arguments of `read_tsv_pairs`; returns the number of
    columns a line needs."""
    if source_column < 0 or target_column < 0 or source_column == target_column:
        raise ValueError(
            "source_column and target_column must be two different non-negative "
            f"column indices, got {source_column} and {target_column}."
        )
    needed = max(source_column, target_column) + 1
    if num_columns is not None and num_columns < needed:
        raise ValueError(
            f"num_columns={num_columns} is too small for source_column="
            f"{source_column} and target_column={target_column}; pass "
            f"num_columns >= {needed} or None."
        )
    return needed


def _tsv_cells(raw: bytes, index: int) -> list[str]:
    """The tab-separated cells of line `index` (0-based): strict UTF-8 (a
    byte-order mark on the first line is dropped), line ending removed;
    `_BadLineError` for invalid UTF-8 or an empty line."""
    text = _utf8(raw, index + 1).rstrip("\r\n")
    if not text.strip():
        raise _BadLineError(SKIP_EMPTY, "empty line")
    return text.split("\t")


def _tsv_pair(
    cells: list[str],
    expected: int,
    source_column: int,
    target_column: int,
    max_chars: int | None,
) -> tuple[str, str]:
    """The ``(source, target)`` cells of a line of `expected` columns, trailing
    whitespace removed; `_BadLineError` for a wrong column count, an empty
    cell or one longer than `max_chars`."""
    if len(cells) != expected:
        raise _BadLineError(
            SKIP_WRONG_COLUMNS,
            f"{len(cells)} tab-separated columns instead of {expected}",
        )
    source = cells[source_column].rstrip()
    target = cells[target_column].rstrip()
    if not source or not target:
        side = "source" if not source else "target"
        raise _BadLineError(SKIP_EMPTY, f"empty {side} column")
    _check_length(source, max_chars)
    _check_length(target, max_chars)
    return source, target


def read_tsv_pairs(
    path: str | os.PathLike[str],
    *,
    source_column: int = 0,
    target_column: int = 1,
    num_columns: int | None = None,
    skip_header: bool = False,
    on_bad_line: BadLinePolicy = "raise",
    max_chars: int | None = _DEFAULT_MAX_CHARS,
) -> TextPairs:
    """Reads sentence pairs from a tab-separated file.

    Each line holds the columns of one example separated by TABs (there is no
    quoting, so sentences cannot contain TABs). A ``.gz`` file is read as
    gzip-compressed.

    Args:
        path: The TSV file.
        source_column: 0-based column of the source sentence.
        target_column: 0-based column of the target sentence.
        num_columns: Number of columns every line must have. ``None`` takes
            the number of columns of the first data line.
        skip_header: Whether the first line is a header to ignore.
        on_bad_line: What to do with a line that is empty, not valid UTF-8,
            has a wrong number of columns, or whose source or target cell is
            empty or longer than ``max_chars``: ``"raise"`` a ``ValueError``
            naming the line, or ``"skip"`` it and count it in
            :attr:`TextPairs.skipped`.
        max_chars: Longest accepted sentence in characters; ``None`` for no
            limit.

    Returns:
        The :class:`TextPairs` of ``(line[source_column], line[target_column])``.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: On a bad line with ``on_bad_line="raise"``, or if a column
            index does not fit ``num_columns``.
    """
    _check_policy(on_bad_line, max_chars)
    needed = _check_columns(source_column, target_column, num_columns)
    path = Path(path)
    lines = _read_raw_lines(path)
    sources: list[str] = []
    targets: list[str] = []
    skipped: Counter[str] = Counter()
    expected = num_columns
    for index in range(1 if skip_header else 0, len(lines)):
        line_number = index + 1
        try:
            cells = _tsv_cells(lines[index], index)
            if expected is None:
                expected = len(cells)
                if expected < needed:
                    raise ValueError(
                        f"{path}, line {line_number}: the first line has "
                        f"{expected} tab-separated columns, too few for "
                        f"source_column={source_column} and target_column="
                        f"{target_column}. Check the file is tab-separated and "
                        "the column indices are right."
                    )
            source, target = _tsv_pair(
                cells, expected, source_column, target_column, max_chars
            )
        except _BadLineError as bad:
            if on_bad_line == "raise":
                raise _bad_line_error(path, line_number, bad) from None
            skipped[bad.reason] += 1
            continue
        sources.append(source)
        targets.append(target)
    return TextPairs(tuple(sources), tuple(targets), dict(skipped), (str(path),))
