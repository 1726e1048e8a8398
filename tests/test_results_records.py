"""Every quoted figure comes from a results record; committed outputs are clean.

The records are `docs/results/*.json` (`keras_transformer.results_records`);
the pages are the README, `docs/**/*.md`, `examples/README.md` and the
notebooks' markdown cells. See docs/results.md, "Results records".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from keras_transformer.results_records import (
    REFERENCE,
    check_references,
    read_records,
    write_record,
)

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results"
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))

#: Pages whose every headline figure must carry a record reference.
HEADLINE_PAGES = ("README.md", "examples/README.md")
#: A headline figure: a number with a unit of time, score, ratio or share.
HEADLINE_FIGURE = re.compile(
    r"(?<![\w.,/])\d[\d,]*(?:\.\d+)?"
    r"(?:x|%|\s?(?:min|minutes|hours?|s|bits/dim|BLEU)\b)"
    r"(?!\**\s*<!-- record:)"
)
#: Paths of one machine: the work folders, temporary and home directories.
MACHINE_PATH = re.compile(r"(?:/work/|/tmp/|/home/|/root/|/var/folders/|[A-Z]:\\Users)")
#: A printed line that reports a score (an evaluation printed twice repeats it).
SCORE_LINE = re.compile(r"BLEU \d|accuracy \d|bits/dim")
#: The per-update and per-epoch lines of `train`.
PROGRESS_LINE = re.compile(r"^(?:step|epoch) \d+/\d+ ", re.MULTILINE)


def _markdown_pages() -> dict[str, str]:
    """Every page that may quote a figure, by its path in the checkout."""
    paths = [ROOT / "README.md", ROOT / "examples" / "README.md"]
    paths += sorted((ROOT / "docs").rglob("*.md"))
    pages = {str(path.relative_to(ROOT)): path.read_text("utf-8") for path in paths}
    for notebook in NOTEBOOKS:
        cells = json.loads(notebook.read_text("utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                name = f"{notebook.relative_to(ROOT)} cell {index}"
                pages[name] = "".join(cell["source"])
    return pages


def _printed_outputs(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, the text its code printed) for every code cell."""
    cells = json.loads(notebook.read_text("utf-8"))["cells"]
    return [
        (
            index,
            "".join("".join(out.get("text", "")) for out in cell.get("outputs", [])),
        )
        for index, cell in enumerate(cells)
        if cell["cell_type"] == "code"
    ]


@pytest.fixture(scope="module")
def records():
    return read_records(RECORDS)


def test_every_record_says_how_it_was_measured(records):
    assert len(records) >= 10
    for record in records.values():
        for field in ("what", "command", "commit", "date", "machine", "sample"):
            assert getattr(record, field).strip(), f"{record.name}: empty {field}"
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", record.date), record.name
        assert record.figures, record.name
        if record.commit == "unknown" or "backfilled" in record.source:
            assert "backfilled from" in record.source, record.name


def test_record_evidence_is_in_the_committed_outputs(records):
    """A backfilled figure is still what its committed output shows."""
    checked = 0
    for record in records.values():
        for evidence in record.evidence:
            text = (ROOT / evidence["file"]).read_text("utf-8")
            assert evidence["text"] in text, (
                f"{record.name}: {evidence['file']} no longer contains "
                f"{evidence['text']!r}; re-measure and update the record"
            )
            checked += 1
    assert checked >= 20


def test_pages_quote_their_records(records):
    problems = []
    references = 0
    for where, text in _markdown_pages().items():
        problems += check_references(text, records, where)
        references += len(REFERENCE.findall(text))
    assert not problems, "\n".join(problems)
    assert references >= 60


def test_every_record_is_quoted(records):
    quoted = set()
    for text in _markdown_pages().values():
        quoted |= {match.group("record") for match in REFERENCE.finditer(text)}
    assert set(records) - quoted == set()


@pytest.mark.parametrize("page", HEADLINE_PAGES)
def test_headline_figures_carry_a_reference(page):
    text = (ROOT / page).read_text("utf-8")
    # Code blocks show commands, not figures.
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    unmarked = [match.group(0) for match in HEADLINE_FIGURE.finditer(prose)]
    assert unmarked == [], (
        f"{page} quotes {unmarked} without a record reference; add "
        "<!-- record: name.key --> after each (docs/results.md, Results records)"
    )


def test_a_contradicted_or_missing_figure_is_reported(records, tmp_path):
    assert (
        check_references(
            "**0.8843**<!-- record: imdb.accuracy_sinusoidal -->", records, "p"
        )
        == []
    )
    assert (
        check_references("0.884<!-- record: imdb.accuracy_sinusoidal -->", records, "p")
        == []
    )
    (wrong,) = check_references(
        "0.8851<!-- record: imdb.accuracy_sinusoidal -->", records, "p"
    )
    assert "holds 0.8843" in wrong
    (missing,) = check_references("0.8851<!-- record: imdb.f1 -->", records, "p")
    assert "no record holds" in missing
    (loose,) = check_references(
        "about <!-- record: imdb.accuracy_none -->", records, "p"
    )
    assert "does not follow a number" in loose
    assert (
        check_references(
            "7.58M<!-- record: train_step_latest.parameters -->", records, "p"
        )
        == []
    )
    assert HEADLINE_FIGURE.search("scores 38.9 BLEU") is not None
    assert (
        HEADLINE_FIGURE.search(
            "26.5<!-- record: multi30k_fast.minutes_to_val_bleu_38 --> min"
        )
        is None
    )


def test_write_record_round_trip_and_bad_input(tmp_path):
    path = write_record(
        tmp_path,
        "speed",
        {"ms_per_step": 283.1},
        command="python benchmarks/train_step.py",
        sample="64 pairs",
        timing="measured",
        machine="2 CPU cores",
        commit="abc1234",
        date="2026-01-02",
    )
    (record,) = read_records(tmp_path).values()
    assert (record.name, record.figures, record.commit) == (
        "speed",
        {"ms_per_step": 283.1},
        "abc1234",
    )
    assert path.name == "speed.json"
    with pytest.raises(ValueError, match="timing must be one of"):
        write_record(
            tmp_path, "speed", {"a": 1.0}, command="c", sample="s", timing="guessed"
        )
    with pytest.raises(ValueError, match="record name"):
        write_record(
            tmp_path, "a b", {"a": 1.0}, command="c", sample="s", timing="none"
        )
    with pytest.raises(ValueError, match="A figure is a number"):
        write_record(
            tmp_path, "ok", {"a": "fast"}, command="c", sample="s", timing="none"
        )
    (tmp_path / "other.json").write_text(json.dumps({"name": "speed"}))
    with pytest.raises(ValueError, match="not a results record"):
        read_records(tmp_path)


def _committed_text_files() -> dict[str, str]:
    paths = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "examples" / "README.md"]
    paths += sorted((ROOT / "docs").rglob("*.md")) + sorted(RECORDS.glob("*.json"))
    paths += sorted((ROOT / "docs" / "images").glob("*.svg")) + NOTEBOOKS
    return {str(path.relative_to(ROOT)): path.read_text("utf-8") for path in paths}


def test_no_machine_path_in_committed_outputs_or_docs():
    found = {
        name: sorted(set(MACHINE_PATH.findall(text)))
        for name, text in _committed_text_files().items()
        if MACHINE_PATH.search(text)
    }
    assert found == {}, f"machine paths in committed files: {found}"
    assert MACHINE_PATH.search("data: /work/shared/data")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_cells_print_few_progress_lines_and_nothing_twice(notebook):
    for index, text in _printed_outputs(notebook):
        progress = PROGRESS_LINE.findall(text)
        assert len(progress) <= 20, (
            f"{notebook.name} cell {index}: {len(progress)} progress lines"
        )
        score_lines = [line for line in text.splitlines() if SCORE_LINE.search(line)]
        # A score printed again, alone or inside a longer line.
        repeated = {
            line
            for index, line in enumerate(score_lines)
            if any(line in other for other in score_lines[index + 1 :])
            or any(line in other for other in score_lines[:index])
        }
        assert repeated == set(), (
            f"{notebook.name} cell {index} prints twice: {repeated}"
        )
