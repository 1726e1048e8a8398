"""Tests of keras_transformer.data.text."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.data import TextPairs, read_parallel_files, read_tsv_pairs


def write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_reads_plain_and_gzip(tmp_path: Path, suffix: str) -> None:
    src = write(
        tmp_path / f"a.de{suffix}",
        "Ein Hund.\nZwei  Katzen  \r\nÄpfel\tund Birnen".encode(),
    )
    tgt = write(tmp_path / f"a.en{suffix}", b"A dog.\nTwo cats.\nApples and pears \n")
    pairs = read_parallel_files(src, tgt)
    assert len(pairs) == 3
    # Only trailing whitespace goes; inner runs of spaces and TABs stay.
    assert pairs.sources == ("Ein Hund.", "Zwei  Katzen", "Äpfel\tund Birnen")
    assert pairs.targets == ("A dog.", "Two cats.", "Apples and pears")
    assert dict(pairs.skipped) == {}


def test_mismatched_line_counts_always_raise(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"eins\nzwei\ndrei\n")
    tgt = write(tmp_path / "a.en", b"one\ntwo\n")
    for policy in ("raise", "skip"):
        with pytest.raises(ValueError) as info:
            read_parallel_files(src, tgt, on_bad_line=policy)
        message = str(info.value)
        assert str(src) in message and str(tgt) in message
        assert "3 lines" in message and "has 2" in message


def test_empty_line_raises_with_line_number_and_fix(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"eins\n  \ndrei\n")
    tgt = write(tmp_path / "a.en", b"one\ntwo\nthree\n")
    with pytest.raises(ValueError, match=r"a\.de, line 2: empty line") as info:
        read_parallel_files(src, tgt)
    assert "on_bad_line='skip'" in str(info.value)


def test_empty_line_skipped_on_both_sides(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"eins\nzwei\ndrei\nvier\n")
    tgt = write(tmp_path / "a.en", b"one\n\nthree\n\n")
    pairs = read_parallel_files(src, tgt, on_bad_line="skip")
    assert list(pairs) == [("eins", "one"), ("drei", "three")]
    assert pairs.skipped == {"empty": 2}


def test_invalid_utf8(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de.gz", b"eins\nzwei\n\xff\xfe kaputt\n")
    tgt = write(tmp_path / "a.en.gz", b"one\ntwo\nthree\n")
    with pytest.raises(ValueError) as info:
        read_parallel_files(src, tgt)
    message = str(info.value)
    assert str(src) in message and "line 3" in message and "invalid UTF-8" in message
    assert "on_bad_line='skip'" in message
    pairs = read_parallel_files(src, tgt, on_bad_line="skip")
    assert pairs.sources == ("eins", "zwei") and pairs.targets == ("one", "two")
    assert pairs.skipped == {"invalid_utf8": 1}


@pytest.mark.parametrize(
    ("encoding", "name"),
    [("utf-16", "UTF-16"), ("utf-16-be", None), ("utf-32", "UTF-32")],
)
def test_a_file_in_another_unicode_encoding_is_refused(
    tmp_path: Path, encoding: str, name: str | None
) -> None:
    """A file saved as UTF-16 (an editor's "Unicode") was read line by line
    as UTF-8: its first line skipped as invalid, every other one kept as
    text with a NUL between every two characters, and trained on."""
    text = "eins\tone\nzwei\ttwo\ndrei\tthree\n"
    path = write(tmp_path / "pairs.tsv.gz", text.encode(encoding))
    for policy in ("raise", "skip"):
        with pytest.raises(ValueError) as info:
            read_tsv_pairs(path, on_bad_line=policy)
        (message,) = str(info.value).splitlines()
        if name is None:  # no byte-order mark
            assert message.startswith(f"{path} holds NUL bytes in its first line")
        else:
            assert message == (
                f"{path} is {name} text, not UTF-8 (it starts with {name}'s "
                f"byte-order mark): convert it, e.g. with `iconv -f {name} -t "
                f"UTF-8 {path} > converted.txt`, or save it as UTF-8."
            )
    source = write(tmp_path / "a.de", "eins\n".encode(encoding))
    with pytest.raises(ValueError, match="not UTF-8|NUL bytes"):
        read_parallel_files(source, write(tmp_path / "a.en", b"one\n"))
    # A UTF-8 byte-order mark is UTF-8: read, without the mark.
    utf8 = write(tmp_path / "utf8.tsv", text.encode("utf-8-sig"))
    assert read_tsv_pairs(utf8).sources == ("eins", "zwei", "drei")


def test_a_file_mostly_not_utf8_is_refused_whatever_the_policy(tmp_path: Path) -> None:
    """A German corpus saved as Windows-1252 lost every sentence with ä, ö,
    ü or ß as "invalid UTF-8" (skipped, and counted), and trained on the
    rest; with held-out pairs it said "only 7 distinct ones ... Lower
    data.held_out_pairs"."""
    german = ["Mädchen läuft", "grüne Straße", "Haus", "über Brücken"]
    text = "".join(f"{sentence}\t{i}\n" for i, sentence in enumerate(german))
    path = write(tmp_path / "pairs.tsv", text.encode("cp1252"))
    for policy in ("raise", "skip"):
        with pytest.raises(ValueError) as info:
            read_tsv_pairs(path, on_bad_line=policy)
        assert str(info.value) == (
            f"{path}: 3 of its 4 lines are not valid UTF-8, so it is in another "
            "encoding (Windows-1252 or Latin-1, most likely). Convert it, e.g. "
            f"with `iconv -f WINDOWS-1252 -t UTF-8 {path} > converted.txt` "
            "(data.on_bad_line=skip drops a few bad lines, not most of a file)."
        )
    # Half of the lines or fewer: the bad ones are skipped and counted.
    path.write_bytes(text.encode("utf-8") + "Füße\t5\n".encode("cp1252"))
    assert read_tsv_pairs(path, on_bad_line="skip").skipped == {"invalid_utf8": 1}


def test_too_long_line(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"kurz\n" + b"x" * 30 + b"\nauch kurz\n")
    tgt = write(tmp_path / "a.en", b"short\nlong\nalso short\n")
    with pytest.raises(
        ValueError, match=r"line 2: line of 30 characters .* max_chars=20"
    ):
        read_parallel_files(src, tgt, max_chars=20)
    pairs = read_parallel_files(src, tgt, max_chars=20, on_bad_line="skip")
    assert pairs.targets == ("short", "also short")
    assert pairs.skipped == {"too_long": 1}
    assert len(read_parallel_files(src, tgt, max_chars=None)) == 3


def test_invalid_arguments_and_missing_file(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", b"eins\n")
    with pytest.raises(ValueError, match="on_bad_line='ignore'.*'raise', 'skip'"):
        read_parallel_files(src, src, on_bad_line="ignore")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="missing.en"):
        read_parallel_files(src, tmp_path / "missing.en")
    # A folder was "Text file not found" (it exists).
    with pytest.raises(IsADirectoryError, match="is a folder, not a text file"):
        read_parallel_files(src, tmp_path)


def test_tsv_pairs_and_bad_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pairs.tsv.gz",
        "Hi.\tHola.\tCC-BY\nOnly one column\nNiño.\tChild.\tCC-BY\n".encode(),
    )
    with pytest.raises(
        ValueError, match=r"line 2: 1 tab-separated columns instead of 3"
    ):
        read_tsv_pairs(path)
    pairs = read_tsv_pairs(path, on_bad_line="skip")
    assert list(pairs) == [("Hi.", "Hola."), ("Niño.", "Child.")]
    assert pairs.skipped == {"wrong_columns": 1}
    swapped = read_tsv_pairs(path, source_column=1, target_column=0, on_bad_line="skip")
    assert swapped.sources == ("Hola.", "Child.")


def test_tsv_header_and_empty_cell(tmp_path: Path) -> None:
    path = write(tmp_path / "x.tsv", b"label\ttext\n1\tgood\n0\t \n")
    with pytest.raises(ValueError, match="line 3: empty target column"):
        read_tsv_pairs(path, skip_header=True)
    pairs = read_tsv_pairs(path, skip_header=True, on_bad_line="skip")
    assert list(pairs) == [("1", "good")] and pairs.skipped == {"empty": 1}


def test_text_pairs_api() -> None:
    pairs = TextPairs(["a", "b", "c"], ["x", "y", "z"], {"empty": 1})
    assert len(pairs) == 3 and pairs.sources == ("a", "b", "c")
    assert pairs.take(2) == TextPairs(("a", "b"), ("x", "y"), {"empty": 1})
    assert pairs.take(10) == pairs
    assert pairs.reversed().sources == ("x", "y", "z")
    assert pairs.reversed().reversed() == pairs
    assert hash(pairs.reversed().reversed()) == hash(pairs)
    dataset = pairs.to_dataset()
    assert dataset.element_spec == (
        tf.TensorSpec([], tf.string),
        tf.TensorSpec([], tf.string),
    )
    assert [(s.decode(), t.decode()) for s, t in dataset.as_numpy_iterator()] == list(
        pairs
    )
    assert len(list(TextPairs((), ()).to_dataset())) == 0
    with pytest.raises(ValueError, match="2 sources and 1 targets"):
        TextPairs(("a", "b"), ("x",))
    with pytest.raises(TypeError, match="a bytes, not a str. Decode bytes"):
        TextPairs((b"a",), ("x",))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="a NoneType, not a str. Pass one str"):
        TextPairs(("a",), (None,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pairs.skipped["new"] = 1  # type: ignore[index]


# ------------------------------------------------- skipped pairs, in words
def _bad_corpus(tmp_path: Path) -> tuple[Path, Path]:
    """Five pairs: invalid UTF-8, an overlong line and an empty line among them."""
    src = write(
        tmp_path / "train.de",
        b"eins\n\xff kaputt\ndrei\n" + b"x" * 100_000 + b"\nfuenf\n\n",
    )
    tgt = write(tmp_path / "train.en", b"one\ntwo\nthree\nfour\nfive\nsix\n")
    return src, tgt


def test_skip_summary_and_files(tmp_path: Path) -> None:
    src, tgt = _bad_corpus(tmp_path)
    pairs = read_parallel_files(src, tgt, on_bad_line="skip")
    assert list(pairs) == [("eins", "one"), ("drei", "three"), ("fuenf", "five")]
    assert pairs.skipped == {"invalid_utf8": 1, "too_long": 1, "empty": 1}
    assert pairs.num_skipped == 3
    assert pairs.skip_summary() == (
        "skipped 3 pairs (empty line: 1, invalid UTF-8: 1, too long: 1), kept 3"
    )
    assert pairs.files == (str(src), str(tgt))
    # The files follow the pairs but are not part of their identity.
    assert pairs.take(1).files == pairs.files == pairs.reversed().files
    assert pairs == TextPairs(pairs.sources, pairs.targets, pairs.skipped)
    one = TextPairs(["a"], ["b"], {"invalid_utf8": 1})
    assert one.skip_summary() == "skipped 1 pair (invalid UTF-8: 1), kept 1"
    assert TextPairs(["a"], ["b"]).skip_summary() == "skipped 0 pairs, kept 1"
    tsv = write(tmp_path / "x.tsv", b"a\tb\nonly\nc\td\n")
    tsv_pairs = read_tsv_pairs(tsv, on_bad_line="skip")
    assert tsv_pairs.files == (str(tsv),)
    assert tsv_pairs.skip_summary() == (
        "skipped 1 pair (wrong number of columns: 1), kept 2"
    )


def test_files_task_reports_and_raises(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from keras_transformer.data.tasks import get_task

    src, tgt = _bad_corpus(tmp_path)
    dev_src = write(tmp_path / "dev.de", b"sieben\n")
    dev_tgt = write(tmp_path / "dev.en", b"seven\n")
    settings = SimpleNamespace(
        task="files",
        train_source=str(src),
        train_target=str(tgt),
        validation_source=str(dev_src),
        validation_target=str(dev_tgt),
        test_source=None,
        test_target=None,
        on_bad_line="skip",
    )
    data = get_task("files").load(settings)  # type: ignore[arg-type]
    assert len(data.train) == 3 and data.test_name == "validation"
    assert data.skip_messages() == [
        f"train split ({src}, {tgt}): skipped 3 pairs (empty line: 1, "
        "invalid UTF-8: 1, too long: 1), kept 3"
    ]
    train_entry, validation_entry = data.skipped()  # test = validation: once
    assert train_entry["skipped"] == {"empty": 1, "invalid_utf8": 1, "too_long": 1}
    assert train_entry["files"] == [str(src), str(tgt)] and train_entry["kept"] == 3
    assert validation_entry["skipped"] == {} and validation_entry["kept"] == 1
    # The default (settings without on_bad_line) skips, as before.
    del settings.on_bad_line
    assert len(get_task("files").load_split("train", settings)) == 3  # type: ignore[arg-type]
    settings.on_bad_line = "raise"
    with pytest.raises(ValueError, match=r"train\.de, line 2: invalid UTF-8"):
        get_task("files").load_split("train", settings)  # type: ignore[arg-type]
