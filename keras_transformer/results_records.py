"""Results records: every measured figure the documentation quotes, in one place.

A results record is a small JSON file (``docs/results/<name>.json`` in a
checkout) that holds one group of measured figures together with what a
reader needs to trust them: the command that measured them, the commit and
date, the machine and how busy it was, the sample they were measured on
(200 validation sentences or the whole set) and whether a time was measured
or estimated. A page that quotes a figure marks it with a reference placed
right after the number::

    test accuracy **0.8843**<!-- record: imdb.accuracy_sinusoidal -->

`check_references` (run by ``tests/test_results_records.py`` over the
README, ``docs/**/*.md``, ``examples/README.md`` and the notebooks' markdown)
fails when a reference names a figure that no record holds or when the
number in front of it is not the record's figure rounded to the digits
shown. The HTML comment is invisible on the rendered page.

This module needs only the standard library (floor 0): the commands and
benchmarks that measure figures call `write_record`.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = write_record(folder, "demo", {"bleu": 38.93}, command="make demo",
    ...                     sample="1,014 validation sentences", timing="none",
    ...                     commit="0000000", date="2026-01-01", machine="2 CPU cores")
    >>> records = read_records(folder)
    >>> check_references("BLEU 38.9<!-- record: demo.bleu -->", records, "page.md")
    []
    >>> problems = check_references("BLEU 39.5<!-- record: demo.bleu -->", records, "p")
    >>> problems[0][:37]
    'p: 39.5 is marked as record demo.bleu'
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from keras_transformer.cpu import cpu_info
from keras_transformer.files import write_atomically

#: Whether a record's times were measured, estimated, or it holds no time.
TIMINGS = ("measured", "estimated", "none")
#: A record's name, the stem of its file: letters, digits, ``_`` and ``-``.
RECORD_NAME = re.compile(r"[\w-]+")

#: A reference: a number, an optional unit, then ``<!-- record: name.key -->``.
REFERENCE = re.compile(
    r"(?P<number>\d[\d,]*(?:\.\d+)?)"
    r"(?P<unit>x|%|M| ?(?:min|minutes|s|bits/dim|BLEU))?"
    r"\**\s*<!-- record: (?P<record>[\w-]+)\.(?P<key>\w+) -->"
)
# A reference comment whose number could not be read (checked separately).
_ANY_REFERENCE = re.compile(r"<!-- record: (?P<ref>[^>]*?) -->")


@dataclass(frozen=True)
class ResultsRecord:
    """One group of measured figures and how they were measured.

    Attributes:
        name: the record's name, the file name without ``.json``.
        figures: the figures by key, e.g. ``{"accuracy_sinusoidal": 0.8843}``.
        what: one sentence saying what was measured.
        command: the command that measured the figures.
        commit: the commit of the code that measured them.
        date: the day of the measurement (``YYYY-MM-DD``).
        machine: the machine and how busy it was.
        sample: what the figures were measured on, e.g. "the first 200
            validation sentences" or "all 25,000 test reviews".
        timing: ``"measured"``, ``"estimated"`` or ``"none"`` (no time).
        source: where a backfilled record's figures were read from.
        evidence: ``{"file": ..., "text": ...}`` pairs: committed outputs
            that must contain the text (the test checks them).
        depends_on: the files and folders of the checkout whose change may
            change the figures (the config, the data and tokenizer code, the
            benchmark script). `stale_records` lists the record once one of
            them changed after `commit`.
        checked: ``{"commit": ..., "note": ...}`` entries: a later commit at
            which a maintainer checked that the `depends_on` files still
            describe the measured run, and why (a refactor whose numerics
            tests pass, a config committed after the run it describes).
            Staleness counts from the last one.
        stale: empty, or one sentence a maintainer writes when
            `stale_records` lists the record and it is not re-measured yet:
            what changed and what it may do to the figures. Every page that
            quotes a stale record must say so (the word "stale" within the
            paragraph or table row of the reference).
    """

    name: str
    figures: dict[str, float]
    what: str
    command: str
    commit: str
    date: str
    machine: str
    sample: str
    timing: str
    source: str = ""
    evidence: list[dict[str, str]] = field(default_factory=list)
    depends_on: list[str] = field(default_factory=list)
    checked: list[dict[str, str]] = field(default_factory=list)
    stale: str = ""


def _git_commit() -> str:
    """The short commit of the working directory's checkout, or "unknown"."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return found.stdout.strip() or "unknown"


def describe_machine() -> str:
    """This machine in words: the CPU and its instruction sets
    (`keras_transformer.cpu`), its cores, memory, and the load average now."""
    memory = ""
    try:
        with open("/proc/meminfo", encoding="utf-8") as lines:
            kib = int(
                next(line for line in lines if line.startswith("MemTotal")).split()[1]
            )
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = ""
    if hasattr(os, "getloadavg"):
        load = f", load average {os.getloadavg()[0]:.1f}"
    cpu = cpu_info().describe()
    return f"{cpu}, {platform.machine()}, {os.cpu_count()} CPU cores{memory}{load}"


def write_record(
    directory: str | os.PathLike[str],
    name: str,
    figures: Mapping[str, float],
    *,
    command: str,
    sample: str,
    timing: str,
    what: str = "",
    machine: str | None = None,
    commit: str | None = None,
    date: str | None = None,
    source: str = "",
    depends_on: Sequence[str] = (),
) -> Path:
    """Writes (or replaces) the record `name` in `directory`, whole or not at all.

    Args:
        directory: the records folder (``docs/results`` in a checkout).
        name: the record's name (letters, digits, ``_`` and ``-``).
        figures: the measured figures by key.
        command: the command that measured them.
        sample: what they were measured on.
        timing: ``"measured"``, ``"estimated"`` or ``"none"``.
        what: one sentence saying what was measured.
        machine: the machine; `describe_machine()` when ``None``.
        commit: the code's commit; ``git rev-parse --short HEAD`` when ``None``.
        date: the day; today (UTC) when ``None``.
        source: for a backfilled record, the output it was read from.
        depends_on: the files and folders whose change may change the
            figures (`ResultsRecord.depends_on`).

    Returns:
        The path of the written file.

    Raises:
        ValueError: for a bad name, timing or figure.
    """
    if not RECORD_NAME.fullmatch(name):
        raise ValueError(
            f"A record name is letters, digits, '_' and '-'. Received: name={name!r}"
        )
    if timing not in TIMINGS:
        raise ValueError(
            f"timing must be one of {TIMINGS}. Received: timing={timing!r}"
        )
    for key, value in figures.items():
        if not re.fullmatch(r"\w+", key) or not isinstance(value, int | float):
            raise ValueError(
                f"A figure is a number under a key of letters, digits and '_'. "
                f"Received: {key!r}={value!r}"
            )
    record = ResultsRecord(
        name=name,
        figures=dict(figures),
        what=what,
        command=command,
        commit=commit or _git_commit(),
        date=date or datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        machine=machine or describe_machine(),
        sample=sample,
        timing=timing,
        source=source,
        depends_on=list(depends_on),
    )
    path = Path(directory) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(record), indent=2, ensure_ascii=False) + "\n"
    write_atomically(path, text.encode("utf-8"))
    return path


def read_records(directory: str | os.PathLike[str]) -> dict[str, ResultsRecord]:
    """Every record in `directory`, by name.

    Raises:
        ValueError: for a file that is not a record (missing or unknown keys,
            a name that differs from the file name, a bad timing).
    """
    records = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            record = ResultsRecord(**json.loads(path.read_text(encoding="utf-8")))
        except (TypeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path} is not a results record: {e}") from e
        if record.name != path.stem or record.timing not in TIMINGS:
            raise ValueError(
                f"{path}: the name must be the file's ({path.stem!r}) and the "
                f"timing one of {TIMINGS}. Received: name={record.name!r}, "
                f"timing={record.timing!r}"
            )
        records[record.name] = record
    return records


def check_references(
    text: str, records: Mapping[str, ResultsRecord], where: str
) -> list[str]:
    """The problems of the record references in `text`, one line each.

    A reference is wrong when its record or figure does not exist, or when
    the number in front of it is not the figure rounded to the decimals the
    page shows (``0.884`` and ``0.8843`` both quote 0.8843; ``0.885`` does
    not; ``7.58M`` quotes 7,577,600).

    Args:
        text: a page's text (markdown, or a notebook cell's).
        records: the records by name (`read_records`).
        where: the page's name, for the messages.

    Returns:
        One line per problem; empty when every reference holds.
    """
    problems = []
    readable = {match.end(): match for match in REFERENCE.finditer(text)}
    for comment in _ANY_REFERENCE.finditer(text):
        match = readable.get(comment.end())
        if match is None:
            problems.append(
                f"{where}: the reference <!-- record: {comment.group('ref')} --> "
                "does not follow a number; put it right after the figure it marks."
            )
            continue
        name, key = match.group("record"), match.group("key")
        record = records.get(name)
        if record is None or key not in record.figures:
            problems.append(
                f"{where}: {match.group('number')} is marked as record {name}.{key}, "
                f"which no record holds; add it to docs/results/{name}.json."
            )
            continue
        shown = match.group("number").replace(",", "")
        decimals = len(shown.partition(".")[2])
        value = record.figures[key] / (1e6 if match.group("unit") == "M" else 1)
        if round(value, decimals) != float(shown):
            problems.append(
                f"{where}: {match.group('number')} is marked as record {name}.{key}, "
                f"but the record holds {record.figures[key]}; quote the record's "
                "figure."
            )
    return problems


#: A commit named in a record's ``commit`` (the first hexadecimal word).
_COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def changed_files(
    commit: str, paths: Sequence[str], root: str | os.PathLike[str] = "."
) -> list[str] | None:
    """The files under `paths` that differ between `commit` and the work tree.

    Uncommitted changes count. ``None`` when `commit` names no commit of the
    checkout at `root` (a record of another branch, "unknown", or no git).
    """
    found = _COMMIT.search(commit)
    if found is None or not paths:
        return None if found is None else []
    try:
        diff = subprocess.run(
            ["git", "diff", "--name-only", found.group(0), "--", *paths],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if diff.returncode != 0:
        return None
    return diff.stdout.split()


def stale_records(
    records: Mapping[str, ResultsRecord], root: str | os.PathLike[str] = "."
) -> dict[str, list[str]]:
    """The records whose `depends_on` files changed after their commit.

    The commit is the record's, or that of its last `checked` entry.

    Returns:
        For each stale record, the changed files; a record whose commit the
        checkout does not hold maps to ``["(commit <x> not in this
        checkout)"]``. Records without `depends_on` are never listed.
    """
    stale = {}
    for name, record in records.items():
        if not record.depends_on:
            continue
        since = record.checked[-1]["commit"] if record.checked else record.commit
        changed = changed_files(since, record.depends_on, root)
        if changed is None:
            stale[name] = [f"(commit {since!r} not in this checkout)"]
        elif changed:
            stale[name] = changed
    return stale


def _quoting_pages(pages: Mapping[str, str], name: str) -> list[str]:
    return sorted(
        where
        for where, text in pages.items()
        if any(m.group("record") == name for m in REFERENCE.finditer(text))
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m keras_transformer.results_records``: lists stale records.

    Prints each record whose files changed after its commit, the changed
    files and the pages that quote it; exits 1 when one is found and not
    marked ``stale`` in its record (so that ``make records`` fails until it
    is re-measured or marked), else 0.
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m keras_transformer.results_records",
        description="List the results records whose files changed since "
        "the commit that measured them.",
    )
    parser.add_argument("--records", default="docs/results")
    parser.add_argument("--root", default=".", help="the checkout")
    args = parser.parse_args(argv)
    root = Path(args.root)
    records = read_records(root / args.records)
    pages = {
        str(path.relative_to(root)): path.read_text(encoding="utf-8")
        for path in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
        if path.is_file()
    }
    unmarked = 0
    stale = stale_records(records, root)
    for name, changed in sorted(stale.items()):
        record = records[name]
        mark = "marked stale" if record.stale else "NOT marked stale"
        unmarked += not record.stale
        since = record.checked[-1]["commit"] if record.checked else record.commit
        print(f"{name} (measured at {record.commit}, checked at {since}, {mark}):")
        print(f"  changed since: {', '.join(changed[:8])}")
        if len(changed) > 8:
            print(f"  ... and {len(changed) - 8} more")
        quoted = _quoting_pages(pages, name)
        print(f"  quoted by: {', '.join(quoted) or 'no page'}")
    fresh = len([r for r in records.values() if r.depends_on]) - len(stale)
    print(
        f"{len(stale)} stale record(s), {fresh} current, "
        f"{sum(not r.depends_on for r in records.values())} without depends_on"
    )
    return 1 if unmarked else 0


if __name__ == "__main__":
    raise SystemExit(main())
