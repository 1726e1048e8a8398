"""Fixtures shared by the tests of ``keras_transformer.data``."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from keras_transformer.data import SubwordTokenizer, load_multi30k, load_tatoeba_spa_eng

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """The shared data folder: ``$KT_SHARED_DATA`` or ``<repo>/../shared/data``."""
    configured = os.environ.get("KT_SHARED_DATA")
    path = Path(configured) if configured else REPO_ROOT.parent / "shared" / "data"
    if not path.is_dir():
        pytest.fail(
            f"Shared data folder not found at {path}. Set KT_SHARED_DATA to the "
            "folder holding multi30k/, tatoeba_spa_eng/ and imdb/ (see "
            "shared/data/README.md)."
        )
    return path


@pytest.fixture(scope="session")
def multi30k_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "multi30k"


@pytest.fixture(scope="session")
def tatoeba_dir(shared_data_dir: Path) -> Path:
    return shared_data_dir / "tatoeba_spa_eng"


@pytest.fixture(scope="session")
def multi30k_val(multi30k_dir: Path):
    return load_multi30k("val", "de", "en", data_dir=multi30k_dir)


@pytest.fixture(scope="session")
def tokenizer(multi30k_dir: Path, tatoeba_dir: Path) -> SubwordTokenizer:
    """A small shared de/en/es vocabulary, trained on ~4000 sentences."""
    german_english = load_multi30k("train", data_dir=multi30k_dir).take(1000)
    spanish_english = load_tatoeba_spa_eng("train", data_dir=tatoeba_dir)
    # Tatoeba is sorted by length; take long and short sentences alike.
    step = len(spanish_english) // 1000
    sample = spanish_english.sources[::step], spanish_english.targets[::step]
    texts = itertools.chain(
        german_english.sources, german_english.targets, sample[0], sample[1]
    )
    return SubwordTokenizer.train(texts, vocabulary_size=1000)
