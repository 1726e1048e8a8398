"""Tests of keras_transformer.data.datasets (local files and path logic only)."""

from __future__ import annotations

import datetime
import gzip
import zipfile
from pathlib import Path

import pytest

from keras_transformer.data import (
    datasets,
    load_multi30k,
    load_tatoeba_spa_eng,
    multi30k_url,
    synthetic_dates,
    tatoeba_split_of,
)


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keeps a developer's KT_DATA_DIR / KT_CACHE_DIR out of the tests."""
    monkeypatch.delenv("KT_DATA_DIR", raising=False)
    monkeypatch.delenv("KT_CACHE_DIR", raising=False)


# -- Multi30k -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("split", "size"), [("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)]
)
def test_multi30k_sizes(multi30k_dir: Path, split: str, size: int) -> None:
    pairs = load_multi30k(split, "de", "en", data_dir=multi30k_dir)
    assert len(pairs) == size
    assert dict(pairs.skipped) == {}


def test_multi30k_content_and_stray_tab(multi30k_dir: Path) -> None:
    pairs = load_multi30k("train", data_dir=multi30k_dir)
    assert pairs.sources[0].startswith("Zwei junge weiße Männer")
    assert pairs.targets[0].startswith("Two young, White males")
    line_7366 = pairs.sources[7365]
    assert line_7366 == (
        '"Zwei männliche und eine weibliche Person spielen in einer \tWasserfontäne."'
    )
    assert all(s == s.rstrip() for s in pairs.sources + pairs.targets)


def test_multi30k_fr_de_and_env_var(
    multi30k_dir: Path, shared_data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fr_de = load_multi30k("val", "fr", "de", data_dir=multi30k_dir)
    de_fr = load_multi30k("val", "de", "fr", data_dir=multi30k_dir)
    assert fr_de == de_fr.reversed()
    assert len(fr_de) == 1014
    monkeypatch.setenv("KT_DATA_DIR", str(shared_data_dir))
    assert load_multi30k("val", "fr", "de") == fr_de


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"split": "dev"}, r"`split` must be one of 'train', 'val'.*split='dev'"),
        (
            {"split": "val", "source_language": "es"},
            r"`source_language` must be one of .*'de'.*source_language='es'",
        ),
        (
            {"split": "val", "target_language": "cs"},
            r"`target_language` must be one of .*'fr'.*target_language='cs'",
        ),
        ({"split": "val", "target_language": "de"}, r"both 'de'"),
    ],
)
def test_multi30k_bad_arguments(multi30k_dir: Path, kwargs: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        load_multi30k(data_dir=multi30k_dir, **kwargs)


def test_multi30k_missing_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as info:
        load_multi30k("val", data_dir=missing)
    message = str(info.value)
    assert str(missing) in message and "does not exist" in message
    assert multi30k_url("val", "de") in message and "data_dir" in message
    # The setting as `train` takes it too (it said "pass data_dir=<that
    # folder>", the loader's argument only).
    assert "--set data.data_dir=FOLDER" in message and "KT_DATA_DIR" in message


def test_a_data_folder_one_level_off_names_the_setting_that_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder of all data sets (multi30k/, imdb/, ...) given as
    ``data_dir``, or a data set's own folder as ``KT_DATA_DIR`` (which names
    their parent), said that the file was missing and how to download it;
    the line now names the folder that holds it and the setting to use."""
    root = tmp_path / "data"
    (root / "multi30k").mkdir(parents=True)
    (root / "multi30k" / "val.de").write_text("Ein Hund.\n", encoding="utf-8")
    (root / "multi30k" / "val.en").write_text("A dog.\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as info:
        load_multi30k("val", data_dir=root)
    message = str(info.value)
    assert (
        "holds neither val.de.gz nor val.de, but its folder multi30k/ does" in message
    )
    assert message.endswith(f"to {root / 'multi30k'}.") and "Download" not in message
    monkeypatch.setenv("KT_DATA_DIR", str(root / "multi30k"))
    with pytest.raises(FileNotFoundError) as info:
        load_multi30k("val")
    message = str(info.value)
    assert f"does not exist, but {root / 'multi30k'} holds val.de" in message
    assert message.endswith(
        f"(or KT_DATA_DIR to {root}: it names the folder that holds multi30k/)."
    )
    monkeypatch.setenv("KT_DATA_DIR", str(root))
    assert load_multi30k("val").sources == ("Ein Hund.",)


def test_multi30k_url_and_cache_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert multi30k_url("test_2016_flickr", "fr") == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
        "test_2016_flickr.fr.gz"
    )
    with pytest.raises(ValueError, match="language='xx'"):
        multi30k_url("val", "xx")  # type: ignore[arg-type]
    monkeypatch.setenv("HOME", str(tmp_path))
    expected = tmp_path / ".cache" / "keras_transformer" / "multi30k"
    assert datasets.default_cache_dir("multi30k") == expected
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    assert datasets.default_cache_dir("multi30k") == tmp_path / "cache" / "multi30k"


def test_multi30k_download_path_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The download code runs offline against file:// URLs, once per file."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    for lang, text in (
        ("de", "Ein Hund.\nZwei Katzen.\n"),
        ("en", "A dog.\nTwo cats.\n"),
    ):
        with gzip.open(upstream / f"val.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    monkeypatch.setattr(
        datasets, "_MULTI30K_URL", upstream.as_uri() + "/{split}.{language}.gz"
    )
    monkeypatch.setenv("KT_CACHE_DIR", str(tmp_path / "cache"))
    pairs = load_multi30k("val")
    assert list(pairs) == [("Ein Hund.", "A dog."), ("Zwei Katzen.", "Two cats.")]
    cached = tmp_path / "cache" / "multi30k" / "val.de.gz"
    assert cached.is_file()
    (upstream / "val.de.gz").unlink()  # a second load must not download again
    assert load_multi30k("val") == pairs
    with pytest.raises(OSError, match="Could not download .*val.fr.gz.*data_dir") as e:
        load_multi30k("val", "fr", "en", cache_dir=tmp_path / "other")
    # Each command's way to set it (evaluate has no --set), and the variable.
    message = str(e.value)
    assert "evaluate --data-dir FOLDER" in message and "KT_DATA_DIR" in message


# -- Tatoeba ------------------------------------------------------------------


def test_tatoeba_splits_disjoint_and_sized(tatoeba_dir: Path) -> None:
    splits = {
        s: load_tatoeba_spa_eng(s, data_dir=tatoeba_dir)
        for s in ("train", "val", "test")
    }
    total = sum(len(p) for p in splits.values())
    assert total == 118964
    assert abs(len(splits["val"]) / total - 0.1) < 0.02
    assert abs(len(splits["test"]) / total - 0.1) < 0.02
    english = {name: set(p.sources) for name, p in splits.items()}
    assert not english["train"] & english["val"]
    assert not english["train"] & english["test"]
    assert not english["val"] & english["test"]
    assert any("ñ" in s for s in splits["train"].targets)


def test_tatoeba_deterministic_direction_and_fractions(tatoeba_dir: Path) -> None:
    first = load_tatoeba_spa_eng("val", data_dir=tatoeba_dir)
    assert load_tatoeba_spa_eng("val", data_dir=tatoeba_dir) == first
    es_en = load_tatoeba_spa_eng("val", data_dir=tatoeba_dir, direction="es-en")
    assert es_en == first.reversed()
    small = load_tatoeba_spa_eng(
        "test", data_dir=tatoeba_dir, val_fraction=0.05, test_fraction=0.02
    )
    assert 0.01 < len(small) / 118964 < 0.03
    # The split depends on the English sentence only, not on the process.
    assert tatoeba_split_of("Go.") == tatoeba_split_of("Go.")
    with pytest.raises(ValueError, match="'en-es', 'es-en'.*direction='en-fr'"):
        load_tatoeba_spa_eng("val", data_dir=tatoeba_dir, direction="en-fr")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="split='dev'"):
        load_tatoeba_spa_eng("dev", data_dir=tatoeba_dir)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="leaves nothing for training"):
        load_tatoeba_spa_eng(
            "val", data_dir=tatoeba_dir, val_fraction=0.6, test_fraction=0.5
        )


def test_tatoeba_download_and_unzip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spa-eng.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        # The current upstream file has a third column (attribution).
        zf.writestr("spa.txt", "Hi.\tHola.\tCC-BY 2.0 (France)\nRun!\t¡Corre!\tCC-BY\n")
        zf.writestr("_about.txt", "about")
    monkeypatch.setattr(datasets, "TATOEBA_SPA_ENG_URL", archive.as_uri())
    pairs = {
        s: load_tatoeba_spa_eng(
            s, cache_dir=tmp_path / "cache", val_fraction=0.0, test_fraction=0.0
        )
        for s in ("train", "val")
    }
    assert list(pairs["train"]) == [("Hi.", "Hola."), ("Run!", "¡Corre!")]
    assert len(pairs["val"]) == 0
    assert (tmp_path / "cache" / "spa.txt").is_file()


def test_tatoeba_missing_file(tmp_path: Path) -> None:
    with pytest.raises(
        FileNotFoundError, match="neither spa.txt.gz nor spa.txt.*spa-eng.zip"
    ):
        load_tatoeba_spa_eng("train", data_dir=tmp_path)


# -- Synthetic dates ----------------------------------------------------------


def test_synthetic_dates() -> None:
    pairs = synthetic_dates(500, seed=3)
    assert len(pairs) == 500
    assert synthetic_dates(500, seed=3) == pairs
    assert synthetic_dates(500, seed=4) != pairs
    for target in pairs.targets:
        date = datetime.date.fromisoformat(target)
        assert 1900 <= date.year <= 2099
        assert target == date.isoformat()
    for source, target in zip(pairs.sources, pairs.targets, strict=True):
        assert target[:4] in source  # four-digit years only
    text = " ".join(pairs.sources)
    for month in ("January", "Januar", "janvier", "enero", "gennaio", "januari"):
        assert month in text


def test_synthetic_dates_options_and_errors() -> None:
    pairs = synthetic_dates(
        20,
        locales=("pt_BR",),
        formats=("dd/MM/y",),
        start=datetime.date(2000, 2, 29),
        end=datetime.date(2000, 2, 29),
    )
    assert set(pairs.sources) == {"29/02/2000"} and set(pairs.targets) == {"2000-02-29"}
    with pytest.raises(ValueError, match="2-digit year in locale 'en'.*M/d/yy"):
        synthetic_dates(5, locales=("en",), formats=("short",))
    with pytest.raises(ValueError, match="must write the year, the month and the day"):
        synthetic_dates(5, formats=("MMMM y",))
    with pytest.raises(ValueError, match="Unknown locale 'xx_YY'"):
        synthetic_dates(5, locales=("en", "xx_YY"))
