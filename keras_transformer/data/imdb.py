"""The IMDB Large Movie Review data set (Maas et al., 2011) for sentiment tasks.

:func:`load_imdb` returns the 25,000 labelled reviews of one split as Python
strings and a label array (0 = negative, 1 = positive). It is used by the
text-classification example, where an encoder-only stack of the paper's
layers reads a whole review.

Where the data comes from, as for the translation sets:

1. ``data_dir``, when given: a folder holding ``train.tsv.gz`` and
   ``test.tsv.gz`` (or the uncompressed ``.tsv`` files), each a header row
   ``label<TAB>text`` followed by one ``<0|1><TAB><review>`` row per review;
2. else ``$KT_DATA_DIR/imdb`` when the environment variable ``KT_DATA_DIR``
   is set;
3. else the upstream ``aclImdb_v1.tar.gz`` archive is downloaded once into
   ``cache_dir`` (by default ``$KT_CACHE_DIR/imdb`` or
   ``~/.cache/keras_transformer/imdb``) and converted on the fly into the two
   TSV files above; the archive is deleted after a successful conversion.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import tarfile
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import tensorflow as tf

from keras_transformer.conventions import UNK_ID
from keras_transformer.data.datasets import (
    DATA_DIR_SETTING,
    default_cache_dir,
    download_file,
    find_local_file,
    local_data_dir,
)
from keras_transformer.validation import check_choice

__all__ = [
    "IMDB_SPLITS",
    "IMDB_URL",
    "REVIEW_READING",
    "clean_review",
    "convert_archive",
    "cut_review_ids",
    "load_imdb",
]

#: The upstream archive of the Large Movie Review Dataset v1.0.
IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_SPLITS = ("train", "test")
#: How a review is read where a run does not say (its ``classification``
#: section's defaults): the last `cut_review_ids` tokens kept of a long
#: review, and whether it is lowercased. Training, the export and
#: `keras_transformer.export.ReviewClassifier` take them from here.
REVIEW_READING = {"tail_tokens": 128, "lowercase": True}
_HEADER = "label\ttext"
_ARCHIVE = "aclImdb_v1.tar.gz"
_LABELS = {"neg": 0, "pos": 1}
# <br />, <br/>, <br> in any case: the only markup in the reviews.
_LINE_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
# aclImdb/<split>/<pos|neg>/<id>_<rating>.txt (the unlabelled "unsup" reviews
# and the bag-of-words files are ignored).
_MEMBER = re.compile(r"(?:^|/)aclImdb/(train|test)/(pos|neg)/(\d+)_(\d+)\.txt$")

ImdbSplit = Literal["train", "test"]


def clean_review(text: str) -> str:
    """Replaces the ``<br />`` tags of a review by spaces and tidies whitespace.

    Runs of whitespace become one space and the ends are stripped.

    Args:
        text: A raw review.

    Returns:
        The cleaned review.
    """
    return " ".join(_LINE_BREAK.sub(" ", text).split())


def _read_tsv(path: Path) -> tuple[list[str], np.ndarray]:
    """Reads one ``label<TAB>text`` file (plain or gzip) with a header row."""
    opener = gzip.open if path.suffix == ".gz" else open
    texts: list[str] = []
    labels: list[int] = []
    try:
        with opener(path, "rb") as raw:
            for number, line in enumerate(raw, start=1):
                try:
                    row = line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError as e:
                    raise ValueError(
                        f"{path}, line {number}: not valid UTF-8 ({e})."
                    ) from e
                if number == 1:
                    if row != _HEADER:
                        raise ValueError(
                            f"{path}, line 1: expected the header row "
                            f"{_HEADER!r}, found {row[:60]!r}. The file must "
                            "hold 'label<TAB>text' rows after that header."
                        )
                    continue
                label, sep, text = row.partition("\t")
                if not sep or label not in ("0", "1"):
                    raise ValueError(
                        f"{path}, line {number}: expected '<0 or 1><TAB><review>', "
                        f"found {row[:60]!r}."
                    )
                labels.append(int(label))
                texts.append(clean_review(text))
    except (OSError, EOFError) as e:
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"Cannot read {path}: {e}. Is it a complete file?") from e
    if not texts:
        raise ValueError(f"{path} holds no reviews after its header row.")
    return texts, np.asarray(labels, dtype="int32")


def _write_tsv(rows: list[tuple[int, int, str]], destination: Path) -> None:
    """Writes ``(label, id, text)`` rows sorted by label and id, atomically."""
    rows.sort(key=lambda row: (row[0], row[1]))
    fd, partial = tempfile.mkstemp(dir=destination.parent, suffix=".part")
    os.close(fd)
    try:
        with gzip.open(partial, "wt", encoding="utf-8", newline="\n") as out:
            out.write(_HEADER + "\n")
            for label, _, text in rows:
                out.write(f"{label}\t{' '.join(text.split())}\n")
        os.replace(partial, destination)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def convert_archive(archive: Path, destination: Path) -> None:
    """Converts ``aclImdb_v1.tar.gz`` into ``train.tsv.gz`` and ``test.tsv.gz``.

    The labelled reviews of ``aclImdb/{train,test}/{neg,pos}/*.txt`` are
    written one per row, negatives first, each class in the order of the
    review ids (the layout of the project's shared copy). Whitespace inside
    a review (newlines, TABs) becomes single spaces.

    Args:
        archive: The downloaded archive.
        destination: The folder to write the two files to.

    Raises:
        ValueError: If the archive holds no labelled review of a split.
    """
    rows: dict[str, list[tuple[int, int, str]]] = {s: [] for s in IMDB_SPLITS}
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                match = _MEMBER.search(member.name)
                if not match or not member.isfile():
                    continue
                split, polarity, review_id, _ = match.groups()
                handle = tar.extractfile(member)
                if handle is None:
                    continue
                with io.TextIOWrapper(handle, encoding="utf-8") as text:
                    rows[split].append((_LABELS[polarity], int(review_id), text.read()))
    except (tarfile.TarError, EOFError, OSError) as e:
        raise ValueError(
            f"{archive} is not a readable aclImdb archive ({e}). Delete it so "
            f"that it is downloaded again, or download {IMDB_URL} yourself, "
            f"convert it, and set {DATA_DIR_SETTING} to its folder."
        ) from e
    for split, split_rows in rows.items():
        if not split_rows:
            raise ValueError(
                f"{archive} holds no labelled review under aclImdb/{split}/"
                "{pos,neg}/; is it the Large Movie Review Dataset v1.0?"
            )
    destination.mkdir(parents=True, exist_ok=True)
    for split, split_rows in rows.items():
        _write_tsv(split_rows, destination / f"{split}.tsv.gz")


def _imdb_file(
    split: str,
    data_dir: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
) -> Path:
    """Local path of ``<split>.tsv(.gz)``, downloading and converting if needed."""
    local = local_data_dir(data_dir, "imdb")
    if local is not None:
        return find_local_file(
            local,
            f"{split}.tsv",
            f"Convert the labelled reviews of {IMDB_URL} into 'label<TAB>text' "
            "files (or let load_imdb download them).",
        )
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir("imdb")
    converted = cache / f"{split}.tsv.gz"
    if converted.is_file():
        return converted
    archive = download_file(IMDB_URL, cache / _ARCHIVE)
    convert_archive(archive, cache)
    archive.unlink(missing_ok=True)
    return converted


def load_imdb(
    split: ImdbSplit,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> tuple[list[str], np.ndarray]:
    """Loads the labelled reviews of one split of IMDB (Maas et al., 2011).

    Each split holds 25,000 reviews, 12,500 per class. The rows come in file
    order, which is **sorted by label**: shuffle before batching or
    splitting off a validation set. Each ``<br />`` tag is replaced by a
    space and runs of whitespace are collapsed (see :func:`clean_review`).

    Args:
        split: ``"train"`` or ``"test"``.
        data_dir: Folder holding ``<split>.tsv.gz`` (or ``<split>.tsv``).
            ``None`` uses ``$KT_DATA_DIR/imdb`` if ``KT_DATA_DIR`` is set,
            else downloads the upstream archive.
        cache_dir: Download folder; default ``$KT_CACHE_DIR/imdb`` or
            ``~/.cache/keras_transformer/imdb``.

    Returns:
        ``(texts, labels)``: the reviews, and an ``int32`` array of the same
        length with 0 for negative and 1 for positive.

    Raises:
        ValueError: On an unknown split, or a file that is not a
            ``label<TAB>text`` table (the message names the line).
        FileNotFoundError: If the local folder lacks the file.
        OSError: If a download fails.

    Example:
        >>> texts, labels = load_imdb("test")  # doctest: +SKIP
        >>> len(texts), int(labels.sum())  # doctest: +SKIP
        (25000, 12500)
    """
    check_choice("split", split, IMDB_SPLITS)
    return _read_tsv(_imdb_file(split, data_dir, cache_dir))


def cut_review_ids(
    ids: tf.RaggedTensor, max_length: int, tail_tokens: int
) -> tf.RaggedTensor:
    """The one review-cut rule, in TensorFlow (training and the SavedModel).

    A review longer than `max_length` tokens keeps its first
    ``max_length - tail_tokens`` tokens and its last `tail_tokens` (the
    verdict is often at the end); a review without any token becomes
    ``[UNK]``.

    Args:
        ids: the token ids of the reviews, ``[batch, (length)]``.
        max_length: ``data.max_sentence_length``.
        tail_tokens: ``classification.tail_tokens`` (at most `max_length`
            are kept).

    Returns:
        the cut ids, ``[batch, (min(length, max_length) or 1)]``.
    """
    tail = min(tail_tokens, max_length)
    lengths = ids.row_lengths()
    # [batch, (kept)]: one position for an empty review, its [UNK].
    kept = tf.ragged.range(tf.maximum(tf.minimum(lengths, max_length), 1))
    position = kept.flat_values
    row = kept.value_rowids()
    length = tf.gather(lengths, row)
    from_end = (length > max_length) & (position >= max_length - tail)
    # A position of the tail takes the token as far from the review's end.
    index = tf.where(from_end, position + length - max_length, position)
    # The ids with UNK after them, which an empty review reads. (Not a ragged
    # concat of [UNK] rows: along axis 1 it transposes int64 row indices,
    # which TensorFlow's oneDNN build answers with an error line on stderr
    # on some CPUs.)
    flat = ids.flat_values
    with_unknown = tf.concat([flat, tf.constant([UNK_ID], flat.dtype)], 0)
    index = tf.where(
        tf.equal(length, 0),
        tf.size(flat, out_type=index.dtype),
        tf.gather(ids.row_starts(), row) + index,
    )
    return kept.with_flat_values(tf.gather(with_unknown, index))
