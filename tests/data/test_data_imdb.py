"""Tests of keras_transformer.data.imdb: the shared copy, file checks, path logic.

The download itself is never exercised: a tiny aclImdb-shaped archive built
here stands in for it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import numpy as np
import pytest

from keras_transformer.data import imdb
from keras_transformer.data.imdb import clean_review, load_imdb


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keeps a developer's KT_DATA_DIR / KT_CACHE_DIR out of the tests."""
    monkeypatch.delenv("KT_DATA_DIR", raising=False)
    monkeypatch.delenv("KT_CACHE_DIR", raising=False)


@pytest.fixture(scope="module")
def imdb_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "imdb"


def _write_tsv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("".join(line + "\n" for line in lines))
    return path


# -- the shared copy ----------------------------------------------------------


@pytest.mark.parametrize("split", ["train", "test"])
def test_shared_copy_sizes_and_balance(imdb_dir: Path, split: str) -> None:
    texts, labels = load_imdb(split, data_dir=imdb_dir)
    assert len(texts) == len(labels) == 25_000
    assert labels.dtype == np.int32
    assert set(np.unique(labels).tolist()) == {0, 1}
    assert int(labels.sum()) == 12_500
    # Sorted by label, as the README warns.
    assert labels[0] == 0 and labels[-1] == 1
    assert not any("<br" in text.lower() for text in texts)
    assert all(text and text == text.strip() for text in texts)


def test_shared_copy_first_review(imdb_dir: Path) -> None:
    texts, _ = load_imdb("train", data_dir=imdb_dir)
    assert texts[0].startswith("Story of a man who has unnatural feelings for a pig.")


def test_env_var_points_at_the_parent(
    imdb_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KT_DATA_DIR", str(imdb_dir.parent))
    texts, labels = load_imdb("test")
    assert len(texts) == 25_000 and int(labels.sum()) == 12_500


# -- cleaning and bad files ---------------------------------------------------


def test_clean_review() -> None:
    raw = "Great film.<br /><br />Really.<BR/>Yes<br>  no  "
    assert clean_review(raw) == "Great film. Really. Yes no"


def test_plain_tsv_and_cleaning(tmp_path: Path) -> None:
    (tmp_path / "test.tsv").write_text(
        "label\ttext\n1\tGood.<br />Very good.\n0\tBad\twith a tab.\n",
        encoding="utf-8",
    )
    texts, labels = load_imdb("test", data_dir=tmp_path)
    assert texts == ["Good. Very good.", "Bad with a tab."]
    assert labels.tolist() == [1, 0]


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train.tsv"):
        load_imdb("train", data_dir=tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_imdb("train", data_dir=tmp_path / "nowhere")


def test_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="split='unsup'"):
        load_imdb("unsup", data_dir=tmp_path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["text\tlabel", "1\tfine"], "line 1: expected the header"),
        (["label\ttext", "1\tfine", "positive\tbad label"], "line 3"),
        (["label\ttext", "1 no tab"], "line 2"),
        (["label\ttext"], "holds no reviews"),
    ],
)
def test_bad_rows(tmp_path: Path, lines: list[str], message: str) -> None:
    _write_tsv(tmp_path / "train.tsv.gz", lines)
    with pytest.raises(ValueError, match=message):
        load_imdb("train", data_dir=tmp_path)


def test_bad_utf8_and_truncated_gzip(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_bytes(b"label\ttext\n1\t\xff\xfe\n")
    with pytest.raises(ValueError, match="line 2: not valid UTF-8"):
        load_imdb("train", data_dir=tmp_path)
    data = gzip.compress(b"label\ttext\n" + b"1\tgood\n" * 1000)
    (tmp_path / "test.tsv.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="Cannot read"):
        load_imdb("test", data_dir=tmp_path)


# -- download cache and conversion --------------------------------------------


def _fake_archive(path: Path) -> Path:
    """An aclImdb-shaped archive with 2 + 1 reviews per class and split."""
    reviews = {
        "aclImdb/train/pos/10_9.txt": "Loved it.<br /><br />Ten stars.",
        "aclImdb/train/pos/2_8.txt": "Good\nfun.",
        "aclImdb/train/neg/1_1.txt": "Awful.",
        "aclImdb/train/neg/0_3.txt": "Boring\tand long.",
        "aclImdb/train/unsup/0_0.txt": "Not labelled.",
        "aclImdb/test/pos/0_10.txt": "Brilliant.",
        "aclImdb/test/neg/0_2.txt": "Dull.",
        "aclImdb/README": "about",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in reviews.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_download_converts_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _fake_archive(tmp_path / "upstream.tar.gz")
    calls: list[str] = []

    def fake_download(url: str, destination: Path) -> Path:
        calls.append(url)
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(source.read_bytes())
        return destination

    monkeypatch.setattr(imdb, "download_file", fake_download)
    cache = tmp_path / "cache"
    texts, labels = load_imdb("train", cache_dir=cache)
    assert calls == [imdb.IMDB_URL]
    # Negatives first, then by review id; whitespace and <br /> cleaned.
    assert texts == ["Boring and long.", "Awful.", "Good fun.", "Loved it. Ten stars."]
    assert labels.tolist() == [0, 0, 1, 1]
    assert sorted(p.name for p in cache.iterdir()) == ["test.tsv.gz", "train.tsv.gz"]
    # The other split was converted in the same pass: no second download.
    texts, labels = load_imdb("test", cache_dir=cache)
    assert (texts, labels.tolist()) == (["Dull.", "Brilliant."], [0, 1])
    assert calls == [imdb.IMDB_URL]


def test_default_cache_dir_from_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path))
    _write_tsv(tmp_path / "imdb" / "test.tsv.gz", ["label\ttext", "1\tcached"])

    def no_download(url: str, destination: Path) -> Path:
        raise AssertionError("a cached file must not be downloaded again")

    monkeypatch.setattr(imdb, "download_file", no_download)
    texts, labels = load_imdb("test")
    assert texts == ["cached"] and labels.tolist() == [1]


def test_data_dir_wins_over_env(
    tmp_path: Path, imdb_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KT_DATA_DIR", str(imdb_dir.parent))
    _write_tsv(tmp_path / "test.tsv.gz", ["label\ttext", "0\tmine"])
    assert load_imdb("test", data_dir=tmp_path)[0] == ["mine"]


def test_bad_archive(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken_download(url: str, destination: Path) -> Path:
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_bytes(b"not a tarball")
        return destination

    monkeypatch.setattr(imdb, "download_file", broken_download)
    with pytest.raises(ValueError, match="not a readable aclImdb archive"):
        load_imdb("train", cache_dir=tmp_path)
