"""Named translation data sets as :class:`~keras_transformer.data.TextPairs`.

* :func:`load_multi30k`: Multi30k Task 1 (Elliott et al., 2016), image
  descriptions in German, English and French; 29,000 / 1,014 / 1,000 pairs.
* :func:`load_tatoeba_spa_eng`: English-Spanish sentence pairs from
  Tatoeba via manythings.org/anki, split deterministically by English
  sentence.
* :func:`synthetic_dates`: dates written out in many languages and styles,
  to be translated into ISO 8601; needs no download and trains in minutes on
  a CPU.

Where the files come from, for the downloadable sets:

1. ``data_dir``, when given: a folder holding the data set's files;
2. else ``$KT_DATA_DIR/<name>`` when the environment variable ``KT_DATA_DIR``
   is set (``<name>`` is ``multi30k`` or ``tatoeba_spa_eng``);
3. else a download from the upstream location into ``cache_dir``, by default
   ``$KT_CACHE_DIR/<name>`` or ``~/.cache/keras_transformer/<name>``. A file is
   downloaded once and reused afterwards.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import random
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import babel
import babel.dates

from keras_transformer.data.text import (
    BadLinePolicy,
    TextPairs,
    read_parallel_files,
    read_tsv_pairs,
)
from keras_transformer.validation import check_choice

__all__ = [
    "DATA_DIR_ENV",
    "CACHE_DIR_ENV",
    "MULTI30K_LANGUAGES",
    "MULTI30K_SPLITS",
    "TATOEBA_SPA_ENG_URL",
    "default_cache_dir",
    "load_multi30k",
    "load_tatoeba_spa_eng",
    "multi30k_url",
    "synthetic_dates",
    "tatoeba_split_of",
]

#: Environment variable naming a folder that holds ``multi30k/`` and
#: ``tatoeba_spa_eng/``; used when ``data_dir`` is not given.
DATA_DIR_ENV = "KT_DATA_DIR"
#: The data folder as a loader's argument and as a run's setting, in messages.
DATA_DIR_SETTING = (
    "data_dir (a run's data.data_dir: train --set data.data_dir=FOLDER, "
    "evaluate --data-dir FOLDER)"
)
#: Environment variable overriding the download cache root
#: (default ``~/.cache/keras_transformer``).
CACHE_DIR_ENV = "KT_CACHE_DIR"

MULTI30K_SPLITS = ("train", "val", "test_2016_flickr")
MULTI30K_LANGUAGES = ("de", "en", "fr")
_MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
    "{split}.{language}.gz"
)

TATOEBA_SPA_ENG_URL = "http://www.manythings.org/anki/spa-eng.zip"
TATOEBA_SPLITS = ("train", "val", "test")
TATOEBA_DIRECTIONS = ("en-es", "es-en")
_TATOEBA_FILE = "spa.txt"

Multi30kSplit = Literal["train", "val", "test_2016_flickr"]
Multi30kLanguage = Literal["de", "en", "fr"]
TatoebaSplit = Literal["train", "val", "test"]
TatoebaDirection = Literal["en-es", "es-en"]

# Some hosts (manythings.org among them) refuse Python's default user agent.
_USER_AGENT = "Mozilla/5.0 (compatible; keras-transformer data loader)"


# ---------------------------------------------------------------------------
# Locating and downloading files
# ---------------------------------------------------------------------------


def default_cache_dir(name: str) -> Path:
    """Returns the download cache folder for the data set ``name``.

    Args:
        name: Data set folder name, e.g. ``"multi30k"``.

    Returns:
        ``$KT_CACHE_DIR/<name>`` if ``KT_CACHE_DIR`` is set, else
        ``~/.cache/keras_transformer/<name>``.
    """
    root = os.environ.get(CACHE_DIR_ENV)
    base = Path(root) if root else Path.home() / ".cache" / "keras_transformer"
    return base.expanduser() / name


def local_data_dir(data_dir: str | os.PathLike[str] | None, name: str) -> Path | None:
    """The folder to read ``name`` from, or ``None`` to download it."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    root = os.environ.get(DATA_DIR_ENV)
    if root:
        return Path(root).expanduser() / name
    return None


def _holds(directory: Path, filename: str) -> bool:
    """Whether `directory` holds ``filename`` or its ``.gz`` twin."""
    return any((directory / n).is_file() for n in (f"{filename}.gz", filename))


def find_local_file(directory: Path, filename: str, how_to_get: str) -> Path:
    """Returns ``directory/filename`` or its ``.gz`` twin, whichever exists.

    Raises:
        FileNotFoundError: (one line) how to get the file; where a folder
            one level up or down holds it (their parent given as
            ``data_dir``, a data set's own folder as ``KT_DATA_DIR``), the
            setting that finds it.
    """
    for candidate in (directory / f"{filename}.gz", directory / filename):
        if candidate.is_file():
            return candidate
    where = f"Cannot load {directory / filename}(.gz): "
    try:
        below = sorted(
            d for d in directory.iterdir() if d.is_dir() and _holds(d, filename)
        )
    except OSError:  # not a folder, or not one this process may read
        below = []
    if below:
        raise FileNotFoundError(
            f"{where}{directory} holds neither {filename}.gz nor {filename}, but "
            f"its folder {below[0].name}/ does: set {DATA_DIR_SETTING} to "
            f"{below[0]}."
        )
    parent = directory.parent
    if not directory.is_dir() and _holds(parent, filename):
        # KT_DATA_DIR set to the data set's own folder: it names their parent.
        env = (
            f" (or {DATA_DIR_ENV} to {parent.parent}: it names the folder that "
            f"holds {directory.name}/)"
            if parent.name == directory.name
            else ""
        )
        raise FileNotFoundError(
            f"{where}the data folder {directory} does not exist, but {parent} "
            f"holds {filename}: set {DATA_DIR_SETTING} to {parent}{env}."
        )
    if not directory.is_dir():
        problem = f"the data folder {directory} does not exist"
    else:
        problem = f"{directory} holds neither {filename}.gz nor {filename}"
    raise FileNotFoundError(
        f"{where}{problem}. {how_to_get} Then "
        f"set {DATA_DIR_SETTING} to that folder (or {DATA_DIR_ENV} to its "
        f"parent), or leave both unset to download it automatically."
    )


def download_file(url: str, destination: Path) -> Path:
    """Downloads ``url`` to ``destination`` atomically, unless already there."""
    if destination.is_file():
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    fd, partial = tempfile.mkstemp(dir=destination.parent, suffix=".part")
    try:
        with (
            os.fdopen(fd, "wb") as out,
            urllib.request.urlopen(request, timeout=60) as response,
        ):
            shutil.copyfileobj(response, out)
        os.replace(partial, destination)
    except (urllib.error.URLError, OSError) as e:
        raise OSError(
            f"Could not download {url} to {destination}: {e}. Check the internet "
            f"connection, or download the file by hand and set {DATA_DIR_SETTING} "
            f"to the folder holding it (or {DATA_DIR_ENV} to its parent)."
        ) from e
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return destination


# ---------------------------------------------------------------------------
# Multi30k
# ---------------------------------------------------------------------------


def multi30k_url(split: Multi30kSplit, language: Multi30kLanguage) -> str:
    """Returns the upstream URL of one Multi30k Task 1 file.

    Args:
        split: ``"train"``, ``"val"`` or ``"test_2016_flickr"``.
        language: ``"de"``, ``"en"`` or ``"fr"``.

    Returns:
        The ``raw.githubusercontent.com`` URL of ``<split>.<language>.gz``.
    """
    check_choice("split", split, MULTI30K_SPLITS)
    check_choice("language", language, MULTI30K_LANGUAGES)
    return _MULTI30K_URL.format(split=split, language=language)


def _multi30k_file(
    split: str,
    language: str,
    data_dir: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
) -> Path:
    """Local path of one Multi30k file, downloading it into the cache if needed."""
    url = multi30k_url(split, language)  # type: ignore[arg-type]
    filename = f"{split}.{language}"
    local = local_data_dir(data_dir, "multi30k")
    if local is not None:
        return find_local_file(local, filename, f"Download it from {url}.")
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir("multi30k")
    return download_file(url, cache / f"{filename}.gz")


def load_multi30k(
    split: Multi30kSplit,
    source_language: Multi30kLanguage = "de",
    target_language: Multi30kLanguage = "en",
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    on_bad_line: BadLinePolicy = "raise",
) -> TextPairs:
    """Loads one split of Multi30k Task 1 (Elliott et al., 2016).

    The raw, cased text is returned as it is; only trailing whitespace is
    removed from each line (``train.de`` line 7366 keeps its stray TAB).

    Args:
        split: ``"train"`` (29,000 pairs), ``"val"`` (1,014) or
            ``"test_2016_flickr"`` (1,000).
        source_language: One of ``"de"``, ``"en"``, ``"fr"``.
        target_language: One of ``"de"``, ``"en"``, ``"fr"``, different from
            ``source_language``.
        data_dir: Folder holding ``<split>.<language>.gz`` (or the
            uncompressed files). ``None`` uses ``$KT_DATA_DIR/multi30k`` if
            ``KT_DATA_DIR`` is set, else downloads from GitHub.
        cache_dir: Download folder; default ``$KT_CACHE_DIR/multi30k`` or
            ``~/.cache/keras_transformer/multi30k``.
        on_bad_line: ``"raise"`` or ``"skip"``, see
            :func:`~keras_transformer.data.read_parallel_files`.

    Returns:
        The :class:`TextPairs` of the split.

    Raises:
        ValueError: On an unknown split or language, or equal languages.
        FileNotFoundError: If ``data_dir`` lacks a needed file.
        OSError: If a download fails.
    """
    check_choice("split", split, MULTI30K_SPLITS)
    check_choice("source_language", source_language, MULTI30K_LANGUAGES)
    check_choice("target_language", target_language, MULTI30K_LANGUAGES)
    if source_language == target_language:
        raise ValueError(
            f"source_language and target_language are both {source_language!r}; "
            "choose two different languages, e.g. 'de' and 'en'."
        )
    source = _multi30k_file(split, source_language, data_dir, cache_dir)
    target = _multi30k_file(split, target_language, data_dir, cache_dir)
    return read_parallel_files(source, target, on_bad_line=on_bad_line)


# ---------------------------------------------------------------------------
# Tatoeba English-Spanish
# ---------------------------------------------------------------------------


def _tatoeba_file(
    data_dir: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
) -> Path:
    """Local path of ``spa.txt``, downloading and unzipping it if needed."""
    local = local_data_dir(data_dir, "tatoeba_spa_eng")
    if local is not None:
        return find_local_file(
            local,
            _TATOEBA_FILE,
            f"Download {TATOEBA_SPA_ENG_URL} and unzip {_TATOEBA_FILE} from it.",
        )
    cache = (
        Path(cache_dir).expanduser()
        if cache_dir
        else default_cache_dir("tatoeba_spa_eng")
    )
    extracted = cache / _TATOEBA_FILE
    if extracted.is_file():
        return extracted
    archive = download_file(TATOEBA_SPA_ENG_URL, cache / "spa-eng.zip")
    with zipfile.ZipFile(archive) as zf:
        members = [n for n in zf.namelist() if Path(n).name == _TATOEBA_FILE]
        if not members:
            raise OSError(
                f"{archive} holds no {_TATOEBA_FILE}; delete it so that it is "
                f"downloaded again, or set {DATA_DIR_SETTING} to a folder holding "
                "spa.txt."
            )
        partial = cache / f"{_TATOEBA_FILE}.part"
        with zf.open(members[0]) as src, open(partial, "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(partial, extracted)
    return extracted


def tatoeba_split_of(
    english: str, *, val_fraction: float = 0.1, test_fraction: float = 0.1
) -> TatoebaSplit:
    """Returns the split an English sentence belongs to.

    The sentence's BLAKE2b hash, read as a number in ``[0, 1)``, falls into
    ``test`` below ``test_fraction``, into ``val`` below
    ``test_fraction + val_fraction``, else into ``train``. The result is the
    same on every machine and in every process, and all translations of one
    English sentence land in the same split.

    Args:
        english: The English sentence.
        val_fraction: Share of English sentences in ``val``.
        test_fraction: Share of English sentences in ``test``.

    Returns:
        ``"train"``, ``"val"`` or ``"test"``.
    """
    digest = hashlib.blake2b(english.encode("utf-8"), digest_size=8).digest()
    position = int.from_bytes(digest, "big") / 2**64
    if position < test_fraction:
        return "test"
    if position < test_fraction + val_fraction:
        return "val"
    return "train"


def load_tatoeba_spa_eng(
    split: TatoebaSplit,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    val_fraction: float = 0.1,
    test_fraction: float = 0.1,
    direction: TatoebaDirection = "en-es",
    on_bad_line: BadLinePolicy = "raise",
) -> TextPairs:
    """Loads a split of the Tatoeba/Anki English-Spanish sentence pairs.

    Many English sentences have several Spanish translations; the split is
    made by English sentence (see :func:`tatoeba_split_of`) so that no English
    sentence appears in two splits. Fractions count distinct English
    sentences, so the pair counts match them only approximately.

    Args:
        split: ``"train"``, ``"val"`` or ``"test"``.
        data_dir: Folder holding ``spa.txt.gz`` or ``spa.txt``
            (``English<TAB>Spanish[<TAB>attribution]`` lines). ``None`` uses
            ``$KT_DATA_DIR/tatoeba_spa_eng`` if ``KT_DATA_DIR`` is set, else
            downloads ``spa-eng.zip`` from manythings.org.
        cache_dir: Download folder; default ``$KT_CACHE_DIR/tatoeba_spa_eng``
            or ``~/.cache/keras_transformer/tatoeba_spa_eng``.
        val_fraction: Approximate share of the data in ``val``.
        test_fraction: Approximate share of the data in ``test``.
        direction: ``"en-es"`` (English source) or ``"es-en"``.
        on_bad_line: ``"raise"`` or ``"skip"``, see
            :func:`~keras_transformer.data.read_tsv_pairs`.

    Returns:
        The :class:`TextPairs` of the split, in file order.

    Raises:
        ValueError: On an unknown split or direction, or bad fractions.
        FileNotFoundError: If ``data_dir`` lacks the file.
        OSError: If the download fails.
    """
    check_choice("split", split, TATOEBA_SPLITS)
    check_choice("direction", direction, TATOEBA_DIRECTIONS)
    for name, value in (
        ("val_fraction", val_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}.")
    if val_fraction + test_fraction >= 1.0:
        raise ValueError(
            f"val_fraction + test_fraction = {val_fraction + test_fraction} leaves "
            "nothing for training; make their sum smaller than 1."
        )
    pairs = read_tsv_pairs(_tatoeba_file(data_dir, cache_dir), on_bad_line=on_bad_line)
    keep = [
        i
        for i, english in enumerate(pairs.sources)
        if tatoeba_split_of(
            english, val_fraction=val_fraction, test_fraction=test_fraction
        )
        == split
    ]
    selected = TextPairs(
        tuple(pairs.sources[i] for i in keep),
        tuple(pairs.targets[i] for i in keep),
        pairs.skipped,
        pairs.files,
    )
    return selected if direction == "en-es" else selected.reversed()


# ---------------------------------------------------------------------------
# Synthetic dates
# ---------------------------------------------------------------------------

#: Locales used by :func:`synthetic_dates` by default.
DEFAULT_DATE_LOCALES = ("en", "de", "fr", "es", "it", "nl")
#: Formats used by :func:`synthetic_dates` by default: CLDR standard formats
#: and LDML patterns that spell the month out (or, for German ``medium``,
#: use an unambiguous ``dd.MM.yyyy``) and always write four-digit years.
DEFAULT_DATE_FORMATS = (
    "full",
    "long",
    "medium",
    "d MMMM y",
    "d MMM y",
    "EEE, d MMM y",
    "MMMM d, y",
)
_STANDARD_FORMATS = ("full", "long", "medium", "short")


def _date_pattern(fmt: str, locale: babel.Locale) -> str:
    if fmt in _STANDARD_FORMATS:
        return babel.dates.get_date_format(fmt, locale=locale).pattern
    return fmt


def _check_date_pattern(fmt: str, locale: babel.Locale) -> None:
    """Ensures the pattern writes a full year, a month and a day."""
    pattern = _date_pattern(fmt, locale)
    fields = set(babel.dates.parse_pattern(pattern).format.split("%(")[1:])
    names = {field.split(")")[0] for field in fields}
    if "yy" in names:
        raise ValueError(
            f"Date format {fmt!r} writes a 2-digit year in locale '{locale}' "
            f"(pattern {pattern!r}), so the century is ambiguous. Use a pattern "
            "with a full year instead, e.g. 'dd/MM/y'."
        )
    has_year = any(n[0] in "yu" for n in names)
    has_month = any(n[0] in "ML" for n in names)
    has_day = any(n[0] == "d" for n in names)
    if not (has_year and has_month and has_day):
        raise ValueError(
            f"Date format {fmt!r} (pattern {pattern!r} in locale '{locale}') must "
            "write the year, the month and the day (LDML letters y, M and d), "
            "otherwise the ISO date cannot be recovered from the text."
        )


def synthetic_dates(
    num_examples: int,
    *,
    seed: int = 0,
    locales: Sequence[str] = DEFAULT_DATE_LOCALES,
    formats: Sequence[str] = DEFAULT_DATE_FORMATS,
    start: datetime.date = datetime.date(1900, 1, 1),
    end: datetime.date = datetime.date(2099, 12, 31),
) -> TextPairs:
    """Builds a toy translation task: written-out dates to ISO 8601.

    Each source is a date uniformly drawn from ``[start, end]``, written with
    :func:`babel.dates.format_date` (CLDR locale data) in a random locale and
    a random format, e.g. ``"Donnerstag, 5. Januar 2023"`` or
    ``"5 janv. 2023"``; the target is ``"2023-01-05"``. It needs no download
    and a small Transformer learns it in minutes on a CPU.

    Numeric formats are left out by default: their day/month order depends on
    the locale, which the text alone does not reveal. Formats writing
    two-digit years are refused.

    Args:
        num_examples: Number of pairs to generate.
        seed: Seed of the generator; the same seed gives the same pairs.
        locales: CLDR locale identifiers, e.g. ``"en"``, ``"de_CH"``.
        formats: ``"full"``, ``"long"``, ``"medium"``, ``"short"`` (the
            locale's CLDR standard formats) or LDML date patterns such as
            ``"d MMMM y"`` (month and weekday names follow the locale).
        start: First possible date.
        end: Last possible date.

    Returns:
        The :class:`TextPairs` of (written date, ISO date).

    Raises:
        ValueError: On an unknown locale, a format without a full year, month
            and day, or an empty date range.
    """
    if num_examples < 0:
        raise ValueError(f"num_examples must be >= 0, got {num_examples}.")
    if not locales or not formats:
        raise ValueError("locales and formats must each name at least one entry.")
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start}); swap them.")
    parsed = []
    for name in locales:
        try:
            parsed.append(babel.Locale.parse(name))
        except (babel.UnknownLocaleError, ValueError) as e:
            raise ValueError(
                f"Unknown locale {name!r} ({e}). Use a CLDR locale identifier "
                "such as 'en', 'de' or 'pt_BR'."
            ) from e
    for locale in parsed:
        for fmt in formats:
            _check_date_pattern(fmt, locale)

    rng = random.Random(seed)
    first, span = start.toordinal(), end.toordinal() - start.toordinal() + 1
    sources, targets = [], []
    for _ in range(num_examples):
        locale = rng.choice(parsed)
        fmt = rng.choice(formats)
        date = datetime.date.fromordinal(first + rng.randrange(span))
        sources.append(babel.dates.format_date(date, fmt, locale=locale))
        targets.append(date.isoformat())
    return TextPairs(tuple(sources), tuple(targets))
