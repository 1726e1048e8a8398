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


def _block_of(text: str, position: int) -> str:
    """The paragraph (or, in a table, the row) holding `position`."""
    line_start = text.rfind("\n", 0, position) + 1
    line_end = text.find("\n", position)
    line = text[line_start : None if line_end < 0 else line_end]
    if line.lstrip().startswith("|"):
        return line
    start = text.rfind("\n\n", 0, position)
    end = text.find("\n\n", position)
    return text[start + 1 : None if end < 0 else end]


def test_pages_that_quote_a_stale_record_say_so(records):
    stale = {name for name, record in records.items() if record.stale}
    silent = [
        f"{where}: {match.group(0)}"
        for where, text in _markdown_pages().items()
        for match in REFERENCE.finditer(text)
        if match.group("record") in stale
        and "stale" not in _block_of(text, match.start()).lower()
    ]
    assert silent == [], (
        "these references quote a record marked stale without saying so in "
        f"their paragraph or table row: {silent}"
    )


def _git(folder: Path, *args: str) -> str:
    import subprocess

    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=folder,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_a_record_goes_stale_when_its_files_change(tmp_path, capsys):
    from keras_transformer.results_records import main, stale_records

    _git(tmp_path, "init", "-q")
    (tmp_path / "config.json").write_text("{}\n")
    (tmp_path / "other.txt").write_text("a\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "first")
    measured = _git(tmp_path, "rev-parse", "--short", "HEAD")
    folder = tmp_path / "docs" / "results"
    write_record(
        folder,
        "run",
        {"bleu": 30.0},
        command="c",
        sample="s",
        timing="none",
        commit=measured,
        depends_on=["config.json"],
    )
    write_record(
        folder,
        "other",
        {"bleu": 1.0},
        command="c",
        sample="s",
        timing="none",
        commit="unknown",
        depends_on=["config.json"],
    )
    (tmp_path / "README.md").write_text("BLEU 30.0<!-- record: run.bleu -->\n")
    assert stale_records(read_records(folder), tmp_path) == {
        "other": ["(commit 'unknown' not in this checkout)"]
    }
    (tmp_path / "other.txt").write_text("b\n")  # not a file the record names
    assert "run" not in stale_records(read_records(folder), tmp_path)
    (tmp_path / "config.json").write_text('{"steps": 2}\n')  # uncommitted
    assert stale_records(read_records(folder), tmp_path)["run"] == ["config.json"]
    assert main(["--root", str(tmp_path)]) == 1
    printed = capsys.readouterr().out
    assert "run (measured at" in printed and "NOT marked stale" in printed
    assert "quoted by: README.md" in printed
    # A check at a later commit (with its reason) makes it current again.
    _git(tmp_path, "commit", "-qam", "second")
    record = json.loads((folder / "run.json").read_text())
    record["checked"] = [
        {"commit": _git(tmp_path, "rev-parse", "HEAD"), "note": "same steps"}
    ]
    (folder / "run.json").write_text(json.dumps(record))
    assert "run" not in stale_records(read_records(folder), tmp_path)


def test_the_checkouts_stale_records_are_all_marked():
    """Every record listed stale says so (or `make records` fails)."""
    import subprocess

    from keras_transformer.results_records import stale_records

    if (
        subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True
        ).returncode
        != 0
    ):
        pytest.fail("the records check needs the git history of the checkout")
    records = read_records(RECORDS)
    unmarked = sorted(
        set(stale_records(records, ROOT))
        - {name for name, record in records.items() if record.stale}
    )
    assert unmarked == [], (
        f"records {unmarked} changed since their commit: re-measure them, add a "
        "`checked` entry saying why they still hold, or mark them `stale` "
        "(python -m keras_transformer.results_records)"
    )


def test_the_machine_line_names_the_cpu_and_its_instruction_sets():
    from keras_transformer.cpu import cpu_info
    from keras_transformer.results_records import describe_machine

    line = describe_machine()
    assert line.startswith(f"{cpu_info().describe()}, ")
    assert " CPU cores" in line.partition(")")[2]
