"""kt.export: an export folder appears whole or not at all (crashes, a full
disk, SIGKILL, two exports into one folder), the format registry and the
commands' dispatch on a folder's format."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import keras
import pytest
import tensorflow as tf

from keras_transformer import cli, export, files
from keras_transformer.data import (
    SubwordTokenizer,
    synthetic_dates,
)
from keras_transformer.export import saved_model
from keras_transformer.translation import translate_lines
from tests.export_helpers import (
    INPUTS,
    another_tokenizer,
    run_like_folder,
    served_translations,
    tiny_model,
    tiny_translator,
)
from tests.training.helpers import REPO_ROOT, holding_lock, subprocess_env


# ----------------------------------------------------- atomic export folder
def _tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` (relative path) and its SHA-256."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def _leftovers(parent: Path) -> list[str]:
    """Temporary folders of exports beside the targets in `parent`."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".tmp-"))


@pytest.fixture
def earlier(exported: Path, tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the module's export (beam 4) to overwrite, and its files."""
    target = tmp_path / "models" / "1"
    shutil.copytree(exported, target)
    return target, _tree(target)


#: Traced archives of this process, by model, tokenizer and settings.
_TRACED_ARCHIVES: dict[tuple[int, int, Any], Any] = {}


@pytest.fixture
def traced_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Exports of one model with one set of settings share one traced archive.

    These tests check how an export's folder is written (crashes, a full
    disk, leftovers, locks), not the tracing, which takes most of an
    export's time and which tests/test_export.py checks; each export still
    writes its own SavedModel, and the tests translate with what it wrote.
    """
    traced = saved_model.translate_archive

    def translate_archive(model: Any, tokenizer: Any, settings: Any) -> Any:
        # The cached archive tracks the model, so its id() is not reused.
        key = (id(model), id(tokenizer), settings)
        if key not in _TRACED_ARCHIVES:
            _TRACED_ARCHIVES[key] = traced(model, tokenizer, settings)
        return _TRACED_ARCHIVES[key]

    monkeypatch.setattr(saved_model, "translate_archive", translate_archive)


def _assert_whole_earlier(target: Path, tree: dict[str, str]) -> None:
    """`target` is the earlier export, byte for byte, and translates as it did."""
    assert _tree(target) == tree
    assert export.is_export_dir(target)
    model, tokenizer = tiny_translator()
    sentences = synthetic_dates(3, seed=4).sources
    assert served_translations(tf.saved_model.load(str(target)), sentences) == (
        translate_lines(model, tokenizer, sentences)
    )
    assert json.loads((target / "export.json").read_text())["beam_size"] == 4


def _fail_after(original: Any, error: BaseException) -> Any:
    """`original`, then `error`: a failure once its files are written."""

    def failing(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        raise error

    return failing


def _crash_after(where: str, error: BaseException, patch: pytest.MonkeyPatch) -> None:
    """Makes the next export fail with `error` once `where` has been written."""
    if where == "saved_model":  # the reported moment: saved_model.pb is there
        archive = type(keras.export.ExportArchive())  # the backend's class
        patch.setattr(archive, "write_out", _fail_after(archive.write_out, error))
    else:
        save = export.save_model_and_tokenizer
        writer = export.saved_model  # the module whose writer calls it
        patch.setattr(writer, "save_model_and_tokenizer", _fail_after(save, error))


@pytest.mark.parametrize(
    "where, existing",
    [("saved_model", True), ("model_and_tokenizer", True), ("saved_model", False)],
)
@pytest.mark.usefixtures("traced_once")
def test_a_failed_export_leaves_the_earlier_one_whole_and_a_retry_succeeds(
    earlier: tuple[Path, dict[str, str]],
    where: str,
    existing: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reported: a crash once ``saved_model.pb`` existed left an export folder
    whose ``model.keras`` was a stub and which had no tokenizer; with
    --overwrite the earlier export was already deleted."""
    target, tree = earlier
    path = target if existing else target.with_name("2")
    model, tokenizer = tiny_translator()
    with monkeypatch.context() as patch:
        _crash_after(where, RuntimeError("killed"), patch)
        with pytest.raises(RuntimeError, match="killed"):
            export.export_translator(
                model, tokenizer, path, beam_size=1, overwrite=existing
            )
    # The earlier export is whole; a new folder was not created; nothing else.
    _assert_whole_earlier(target, tree)
    assert path.exists() == existing
    assert _leftovers(target.parent) == []
    # The retry writes the new export (in place of the earlier one).
    export.export_translator(model, tokenizer, path, beam_size=1, overwrite=existing)
    assert json.loads((path / "export.json").read_text())["beam_size"] == 1
    assert served_translations(tf.saved_model.load(str(path)), INPUTS[:3]) == (
        translate_lines(model, tokenizer, INPUTS[:3], beam_size=1)
    )
    assert export.is_export_dir(path) and _leftovers(target.parent) == []


def test_full_disk_during_export_is_one_line_and_keeps_the_earlier_export(
    earlier: tuple[Path, dict[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command line, the disk full while model.keras is written: one line,
    exit status 1, the earlier export whole."""
    target, tree = earlier
    full = OSError(errno.ENOSPC, "No space left on device")
    _crash_after("model_and_tokenizer", full, monkeypatch)
    argv = ["export", "--workdir", str(target), "--output", str(target)]
    assert cli.main([*argv, "--overwrite", "--beam-size", "1"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0] == (
        f"keras-transformer export: error: Could not write {target}: no space "
        "left on the device; the previous 1 is intact. Free disk space, then run "
        "the same command again."
    )
    _assert_whole_earlier(target, tree)
    assert _leftovers(target.parent) == []


@pytest.mark.parametrize("kind", ["tensorflow", "free_space"])
@pytest.mark.usefixtures("traced_once")
def test_full_disk_in_the_library_is_a_file_write_error(
    earlier: tuple[Path, dict[str, str]], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TensorFlow's full-disk error while writing the SavedModel (a new
    folder), and a disk with less free space than the export needs (refused
    before anything is written; an earlier export)."""
    target, tree = earlier
    model, tokenizer = tiny_translator()
    if kind == "tensorflow":
        path, kept = target.with_name("2"), "2 was not created"
        full = tf.errors.ResourceExhaustedError(
            None, None, "variables/variables.data-00000-of-00001; No space left"
        )
        _crash_after("saved_model", full, monkeypatch)
    else:
        path, kept = target, "are free; the previous 1 is intact"
        usage = shutil.disk_usage(target.parent)
        monkeypatch.setattr(
            files.shutil, "disk_usage", lambda _: usage._replace(free=1000)
        )
    with pytest.raises(files.FileWriteError) as error:
        export.export_translator(model, tokenizer, path, beam_size=1, overwrite=True)
    message = str(error.value)
    assert error.value.errno == errno.ENOSPC and "\n" not in message
    assert message.startswith(f"Could not write {path}: no space left on the device")
    assert kept in message and "Free disk space" in message
    _assert_whole_earlier(target, tree)
    assert not target.with_name("2").exists() and _leftovers(target.parent) == []


@pytest.mark.usefixtures("traced_once")
def test_a_leftover_temporary_folder_is_no_export_and_blocks_nothing(
    earlier: tuple[Path, dict[str, str]],
) -> None:
    """A killed export leaves ``.tmp-<pid>-<name>`` beside the target: it is
    never read as an export, and the next export of that name removes it
    (not the temporary folder of another name that ends the same)."""
    target, _ = earlier
    parent = target.parent
    stale = parent / ".tmp-99999-1"  # whole enough to look like an export
    shutil.copytree(target, stale)
    other = parent / ".tmp-99999-v-1"  # another target's, "v-1"
    other.mkdir()
    assert not export.is_export_dir(stale)
    with pytest.raises(FileNotFoundError, match="not a folder written by"):
        export.load_export(stale)
    with pytest.raises(FileExistsError, match="temporary folder"):
        export.export_translator(*tiny_translator(), stale, overwrite=True)
    path = export.export_translator(
        *tiny_translator(), target, beam_size=1, overwrite=True
    )
    assert path == target and export.is_export_dir(target)
    assert _leftovers(parent) == [other.name]
    # The lock was beside the export, not in it: the folder holds the export
    # only; and it is gone once the export ends (it stayed, an empty file).
    assert not (parent / ".1.lock").exists()
    assert sorted(p.name for p in target.iterdir()) == sorted(
        [
            "assets",
            "fingerprint.pb",
            "model.keras",
            "saved_model.pb",
            "tokenizer",
            "variables",
            "export.json",
        ]
    )


@pytest.mark.usefixtures("traced_once")
def test_an_overwrite_keeps_what_else_the_earlier_export_folder_held(
    earlier: tuple[Path, dict[str, str]],
) -> None:
    target, _ = earlier
    (target / "NOTES.md").write_text("trained on dates\n")
    (target / "extra").mkdir()
    (target / "extra" / "a.txt").write_text("a")
    export.export_translator(*tiny_translator(), target, beam_size=1, overwrite=True)
    assert (target / "NOTES.md").read_text() == "trained on dates\n"
    assert (target / "extra" / "a.txt").read_text() == "a"
    assert json.loads((target / "export.json").read_text())["beam_size"] == 1


def test_two_exports_into_one_folder_cannot_interleave(
    earlier: tuple[Path, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    target, tree = earlier
    lock = export.lock_path(target)
    assert lock == target.parent / ".1.lock"
    with holding_lock(target, "another export", lock) as holder:
        with pytest.raises(files.FolderLockedError, match=f"PID {holder.pid}"):
            export.export_translator(
                *tiny_translator(), target, beam_size=1, overwrite=True
            )
        argv = ["export", "--workdir", str(target), "--output", str(target)]
        assert cli.main([*argv, "--overwrite"]) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1, err
        assert "another export" in err and "one writer at a time" in err
    _assert_whole_earlier(target, tree)


def _other_format_export(export_format: str, exported: Path, path: Path) -> Path:
    """An export of another format than `export_format`: a copy of the
    SavedModel, or (for the SavedModel) the files of a LiteRT export."""
    if export_format != "savedmodel":
        return Path(shutil.copytree(exported, path))
    path.mkdir()
    for name in ("litert.json", "model.tflite", "tokenizer.model"):
        (path / name).write_text(name)
    return path


@pytest.mark.parametrize("export_format", ["savedmodel", "litert", "ctranslate2"])
def test_overwrite_deletes_no_folder_without_an_export_of_its_format(
    exported: Path,
    tmp_path: Path,
    export_format: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Reported (issue 35): ``export --format litert --overwrite --output RUN``
    exited 0 and left RUN with only the LiteRT files: its checkpoints,
    config, tokenizer and logs deleted; a folder of someone's files went the
    same way. Every format now refuses, with one line, a folder that holds
    no export of its own format (a run folder, someone's files, another
    format's export), before the model is loaded, and deletes nothing.
    Without ``--overwrite`` the refusal no longer suggests it. The run
    folder is named as one: it said "is not empty and holds no export"."""
    if export_format == "ctranslate2" and not importlib.util.find_spec("ctranslate2"):
        pytest.skip("the CTranslate2 export needs the ctranslate2 extra")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.txt").write_text("mine")
    targets = [
        run_like_folder(tmp_path / "run"),
        notes,
        _other_format_export(export_format, exported, tmp_path / "other"),
    ]
    found_in = ["is a training run's folder, not a"] + ["is not empty and holds no"] * 2
    for target, found in zip(targets, found_in, strict=True):
        tree = _tree(target)
        argv = ["export", "--workdir", str(exported), "--output", str(target)]
        status = cli.main([*argv, "--format", export_format, "--overwrite"])
        err = capsys.readouterr().err
        assert status == 1, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert f"{target} {found}" in err, err
        assert "refusing to delete it" in err, err
        # Without --overwrite, the refusal does not offer it either.
        assert cli.main([*argv, "--format", export_format]) == 1
        err = capsys.readouterr().err
        assert f"{target} {found}" in err, err
        refusal = err.split(str(target), 1)[-1]
        assert "overwrite" not in refusal and len(err.strip().splitlines()) == 1, err
        assert _tree(target) == tree  # byte for byte
    assert _leftovers(tmp_path) == []


def test_an_export_appears_with_its_test_set_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``test_set.json`` (the run's data settings and seed, which ``evaluate
    --workdir EXPORT`` scores) was written after the export was swapped in:
    a kill or a full disk between the two left an export that did not know
    its test set. It is written into the new folder before the swap, for
    every format (the conversion is replaced here by a few marks); a damaged
    ``config.json`` stops the export before the conversion."""
    from keras_transformer.export.formats import export_run_as, test_set_record
    from keras_transformer.export.target import (
        TEST_SET_FILE,
        ExportFormat,
        writing_export,
    )

    run = run_like_folder(tmp_path / "run")
    config = {"kind": "translation", "data": {"task": "dates"}, "train": {"seed": 7}}
    (run / "config.json").write_text(json.dumps(config))
    at_swap: list[dict[str, Any]] = []

    def converted(  # what each format's run export does, in miniature
        self: ExportFormat, workdir: Path, output_dir: Path, weights: str, **_: Any
    ) -> Path:
        with writing_export(Path(output_dir), True, self) as folder:
            for mark in self.marks:
                (folder / mark).write_text(mark)
        record = Path(output_dir) / TEST_SET_FILE  # the moment of the swap
        at_swap.append(json.loads(record.read_text()) if record.exists() else {})
        return Path(output_dir)

    monkeypatch.setattr(ExportFormat, "run_export", converted)
    expected = {"data": {"task": "dates"}, "seed": 7}
    for name in ("savedmodel", "litert", "ctranslate2"):
        output = tmp_path / name
        assert export_run_as(name, run, output) == output
        assert json.loads((output / TEST_SET_FILE).read_text()) == expected
    again = export_run_as("savedmodel", tmp_path / "savedmodel", tmp_path / "again")
    assert at_swap == [expected] * 4  # an export of the export keeps it
    assert json.loads((again / TEST_SET_FILE).read_text()) == expected
    (tmp_path / "bare").mkdir()
    assert test_set_record(tmp_path / "bare") is None  # an export recording none

    (run / "config.json").write_text("{")
    with pytest.raises(ValueError) as error:
        export_run_as("savedmodel", run, tmp_path / "late")
    assert "config.json" in str(error.value) and "\n" not in str(error.value)
    assert len(at_swap) == 4 and not (tmp_path / "late").exists()


# ------------------------------------------------------ killed while writing
def _start_export(workdir: Path, output: Path) -> subprocess.Popen:
    """``keras-transformer export --overwrite`` (greedy) in a child process."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "keras_transformer",
            "export",
            "--workdir",
            str(workdir),
            "--output",
            str(output),
            "--beam-size",
            "1",
            "--overwrite",
        ],
        cwd=REPO_ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _moments(parent: Path, pid: int) -> dict[str, Any]:
    """When to kill the child: conditions on what it has written so far."""
    temporary = parent / f".tmp-{pid}-1"
    return {
        "holding the lock": lambda: f'"pid": {pid}' in _read(parent / ".1.lock"),
        "temporary folder created": temporary.is_dir,
        "saved_model.pb written": (temporary / "saved_model.pb").is_file,
        "model.keras written": (temporary / "model.keras").is_file,
        "export.json written": (temporary / "export.json").is_file,
    }


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_sigkill_during_export_overwrite_keeps_the_earlier_export(
    exported: Path, earlier: tuple[Path, dict[str, str]]
) -> None:
    """SIGKILL at five moments of ``export --overwrite``: the target is the
    earlier export, whole (or, killed as it swapped, the new one, whole),
    never a mix; a leftover temporary folder is no export; then the same
    command succeeds and leaves nothing beside the export."""
    target, tree = earlier
    outcomes = {}
    started = time.monotonic()
    for moment in _moments(target.parent, 0):
        child = _start_export(exported, target)
        reached = _moments(target.parent, child.pid)[moment]
        deadline = time.monotonic() + 300
        while not reached():
            assert child.poll() is None, (moment, child.communicate()[0][-3000:])
            assert time.monotonic() < deadline, f"never reached: {moment}"
            time.sleep(0.002)
        child.kill()
        child.communicate()
        leftovers = [target.parent / name for name in _leftovers(target.parent)]
        # At most the killed child's: each export removes the stale ones first.
        assert [p.name for p in leftovers] in ([], [f".tmp-{child.pid}-1"])
        assert all(not export.is_export_dir(path) for path in leftovers)
        if _tree(target) == tree:
            _assert_whole_earlier(target, tree)
            outcomes[moment] = "earlier export intact"
        else:  # the swap had happened: the new export, whole
            assert moment == "export.json written", moment
            assert json.loads((target / "export.json").read_text())["beam_size"] == 1
            assert export.is_export_dir(target)
            tf.saved_model.load(str(target))
            outcomes[moment] = "new export complete"
        print(
            f"killed when {moment}: {outcomes[moment]}, leftovers "
            f"{[p.name for p in leftovers]}; {time.monotonic() - started:.0f} s"
        )
    assert list(outcomes.values())[:4] == ["earlier export intact"] * 4
    child = _start_export(exported, target)
    output = child.communicate(timeout=300)[0]
    assert child.returncode == 0, output[-3000:]
    assert json.loads((target / "export.json").read_text())["beam_size"] == 1
    model, tokenizer = tiny_translator()
    assert served_translations(tf.saved_model.load(str(target)), INPUTS) == (
        translate_lines(model, tokenizer, INPUTS, beam_size=1)
    )
    assert _leftovers(target.parent) == []


@pytest.mark.usefixtures("traced_once")
@pytest.mark.parametrize(
    "damage",
    [
        "model cut",
        "model empty",
        "tokenizer deleted",
        "tokenizer of another",
        "model of another",
        "model of another of the same size",
    ],
)
def test_a_damaged_export_is_named_with_the_way_back(
    earlier: tuple[Path, dict[str, str]], tmp_path: Path, capsys, damage: str
) -> None:
    """An export whose ``model.keras`` was cut short: Keras said "File not
    found: filepath=.../model.keras" of a file that is there; one without its
    ``tokenizer/`` was "not a training work directory: config.json is
    missing". A tokenizer, or a model, of another export of the same size
    was served: every translation wrong, without a word. Each command
    that reads it now names the damage and the way back, in one line."""
    target, _ = earlier
    model = target / "model.keras"
    if damage == "tokenizer deleted":
        shutil.rmtree(target / "tokenizer")
        expected = f"{target} holds a SavedModel export's model.keras but no tokenizer/"
    elif damage == "tokenizer of another":
        shutil.rmtree(target / "tokenizer")
        another = another_tokenizer()
        assert another.vocabulary_size == tiny_translator()[1].vocabulary_size
        another.save(target / "tokenizer")
        expected = f"The tokenizer of {target} is not the one the export was written"
    elif damage == "model of another":  # of another vocabulary size
        dates = synthetic_dates(200, seed=3)
        other = SubwordTokenizer.train([*dates.sources, *dates.targets], 100)
        tiny_model(other).save(model)
        expected = f"{model} embeds 100 token ids but the export's tokenizer has 120"
    elif damage == "model of another of the same size":  # served without a word
        tiny_model(tiny_translator()[1]).save(model)
        expected = f"{model} is not the file the export was written with"
    else:
        model.write_bytes(model.read_bytes()[:1000] if damage == "model cut" else b"")
        expected = f"{model} is " + (
            "not a .keras zip file (cut short or damaged)"
            if damage == "model cut"
            else "empty (0 bytes)"
        )
    source = tmp_path / "in.txt"
    source.write_text("Montag, 3. Juli 2023\n")
    for argv in (
        ["translate", "--workdir", str(target), "--input", str(source)],
        ["export", "--workdir", str(target), "--output", str(tmp_path / "again")],
    ):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if ": error: " in line]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert expected in lines[0], err
        assert "from a copy, or " in lines[0].lower(), err
        assert "export its run again" in lines[0] or "--format savedmodel" in lines[0]
    assert not (tmp_path / "again").exists()


def test_an_empty_folder_is_filled_and_keeps_its_permissions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "models" / "3"
    target.mkdir(parents=True)
    target.chmod(0o750)
    monkeypatch.chdir(target)
    with pytest.raises(FileExistsError, match="current folder"):
        export.export_translator(*tiny_translator(), ".", beam_size=1)
    monkeypatch.chdir(tmp_path)
    path = export.export_translator(*tiny_translator(), "models/3", beam_size=1)
    assert path == Path("models/3") and export.is_export_dir(target)
    assert target.stat().st_mode & 0o777 == 0o750
    assert _leftovers(target.parent) == [] and not (target.parent / ".3.lock").exists()


def test_the_format_registry_lists_the_three_formats() -> None:
    from keras_transformer.export import formats

    assert list(formats.FORMATS) == ["savedmodel", "litert", "ctranslate2"]
    found = {name: formats.get_format(name) for name in formats.FORMATS}
    assert {n: f.name for n, f in found.items()} == {
        "savedmodel": "SavedModel",
        "litert": "LiteRT",
        "ctranslate2": "CTranslate2",
    }
    for name, export_format in found.items():
        assert export_format.option == name and "translation" in export_format.kinds
        # A run export of its own, or one through its model export.
        assert callable(export_format.export_run) != callable(
            export_format.export_model
        )
        assert callable(export_format.load_translator)
    assert found["savedmodel"].kinds == ("translation", "classification", "image")
    assert found["litert"].quantizations == ("int8", "float32")
    assert found["ctranslate2"].quantizations[0] == "float32"
    with pytest.raises(ValueError, match="formats are savedmodel, litert, ctranslate2"):
        formats.get_format("onnx")
    bare = dataclasses.replace(found["litert"], export_model=None)
    with pytest.raises(TypeError, match="LiteRT format registers no run export"):
        bare.run_export("run", "folder")


def test_cli_refuses_an_unknown_format_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["export", "--workdir", str(tmp_path), "--output", str(tmp_path / "x")]
    assert cli.main([*argv, "--format", "onnx"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-transformer export: error: --format: Unknown export format 'onnx'; "
        "the formats are savedmodel, litert, ctranslate2."
    ]


def test_cli_translate_dispatches_on_the_folder_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``translate --workdir`` of a LiteRT folder goes to the LiteRT
    translator, which serves neither n-best lists nor prefixes: refused in
    one line before anything loads."""
    from keras_transformer.export import litert

    folder = tmp_path / "litert"
    folder.mkdir()
    for name in (litert.INFO_FILE, litert.MODEL_FILE, litert.TOKENIZER_FILE):
        (folder / name).write_text("{}")
    source = tmp_path / "in.txt"
    source.write_text("ein Hund\n")
    argv = ["translate", "--workdir", str(folder), "--input", str(source)]
    assert cli.main([*argv, "--n-best", "2", "--prefix-column"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-transformer translate: error: --n-best, --prefix-file/--prefix-column: "
        "not served from a LiteRT folder; translate with the run folder "
        "(--workdir RUN) instead."
    ]
