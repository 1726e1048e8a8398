"""keras_transformer.files: atomic files and folders, and the writer lock."""

from __future__ import annotations

import errno
import json
import os
import socket
import time
from pathlib import Path

import pytest

from keras_transformer import files
from keras_transformer.files import (
    FileWriteError,
    FolderLock,
    FolderLockedError,
    atomic_directory,
    atomic_file,
    check_free_space,
    write_atomically,
)
from tests.training.helpers import holding_lock

REPO_ROOT = Path(__file__).resolve().parents[1]


def _full_disk(*_args: object, **_kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_write_atomically_replaces_the_file_whole(tmp_path):
    path = tmp_path / "result.json"
    write_atomically(path, "old")
    write_atomically(path, "new")
    assert path.read_text() == "new"
    # No temporary file is left beside it.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_failed_write_keeps_the_previous_file_and_is_one_line(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    write_atomically(path, "previous")
    monkeypatch.setattr(files.os, "replace", _full_disk)
    with pytest.raises(FileWriteError) as error:
        write_atomically(path, "new")
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message
    assert "no space left on the device" in message
    assert "the previous result.json is intact" in message
    assert error.value.errno == errno.ENOSPC
    assert path.read_text() == "previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_folder_where_the_file_goes_is_named_in_the_remedy(tmp_path):
    """A folder in the way was told "Check the folder's permissions and the
    disk", which a user checks in vain."""
    path = tmp_path / "out.txt"
    path.mkdir()
    with pytest.raises(FileWriteError) as error:
        write_atomically(path, "new")
    message = str(error.value)
    assert f"Could not write {path}: is a directory; nothing was written." in message
    assert f"Remove or rename the folder {path}, then run the same" in message
    assert "permissions" not in message and path.is_dir()


def test_a_partial_output_whose_state_cannot_be_written_is_one_message(
    tmp_path, monkeypatch
):
    """A full disk at ``OUT.partial.json`` gave "Could not write OUT.partial:
    Could not write OUT.partial.json: ...; ... again.; ... again." (the
    state's error wrapped in the lines' one)."""
    from keras_transformer.translation import lines as lines_module
    from keras_transformer.translation.lines import PartialOutput

    out = tmp_path / "out.txt"
    partial = PartialOutput(out, "signature")
    assert partial.start() == (0, False)
    partial.append(["a", "b"], 2)

    def full_disk(path, data):
        raise files.write_error(path, OSError(errno.ENOSPC, "No space left"))

    monkeypatch.setattr(lines_module, "write_atomically", full_disk)
    with pytest.raises(FileWriteError) as error:
        partial.append(["c"], 3)
    partial.stop()
    message = str(error.value)
    assert message.count("Could not write") == 1 and message.count("again") == 1
    assert (
        f"Could not write {out}.partial.json: no space left on the device; "
        f"{out}.partial keeps the output of the first 2 input lines. Free disk "
        "space, then run the same command again." == message
    )
    assert error.value.errno == errno.ENOSPC


@pytest.mark.parametrize(
    ("number", "reason"),
    [
        (errno.ENOENT, "no such file or directory"),
        (errno.EROFS, "read-only file system"),
    ],
)
def test_an_output_in_a_folder_that_takes_no_file_is_named_not_its_lock(
    tmp_path, monkeypatch, number, reason
):
    """``--output /proc/out.txt``: the lock file beside it cannot be made
    (ENOENT; EROFS on a read-only mount), and the one line named
    ``/proc/.out.txt.lock``, a file the user never asked for; it names the
    output now."""
    from keras_transformer.translation.lines import PartialOutput

    out = tmp_path / "out.txt"
    real_open = files.os.open

    def no_new_file(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(number, os.strerror(number), path)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", no_new_file)
    with pytest.raises(FileWriteError) as raised:
        PartialOutput(out, "signature").start()
    message = str(raised.value)
    assert message.startswith(f"Could not write {out}: {reason}")
    assert ".lock" not in message
    assert list(tmp_path.iterdir()) == []


def test_a_kill_inside_finish_leaves_a_state_that_the_next_run_drops_quietly(
    tmp_path,
):
    """A kill between `finish`'s rename of ``OUT.partial`` and its removal of
    ``OUT.partial.json`` made the next run of the same command warn that the
    partial output "held the translations of another command ... or was
    damaged"; the output was whole."""
    from keras_transformer.translation.lines import PartialOutput

    out = tmp_path / "out.txt"
    first = PartialOutput(out, "signature")
    assert first.start() == (0, False)
    first.append(["a", "b"], 2)
    state = first.state_path.read_bytes()
    first.finish()
    first.state_path.write_bytes(state)  # as the kill left it
    again = PartialOutput(out, "signature")
    assert again.start() == (0, False)  # nothing dropped, nothing to go on from
    assert json.loads(again.state_path.read_text())["lines"] == 0
    assert out.read_text() == "a\nb\n"  # the finished output, until replaced
    again.append(["c"], 1)
    again.finish()
    assert out.read_text() == "c\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    # A state whose lines were emptied is still told as damaged.
    damaged = PartialOutput(out, "signature")
    damaged.start()
    damaged.append(["d"], 1)
    damaged.lines_path.write_bytes(b"")
    damaged.stop()
    last = PartialOutput(out, "signature")
    assert last.start() == (0, True)
    last.stop()


def test_atomic_file_keeps_the_writers_suffix(tmp_path):
    # Keras insists on ".weights.h5" and ".keras": the temporary name ends
    # with the final name.
    with atomic_file(tmp_path / "best.weights.h5") as temporary:
        assert temporary.name.endswith("best.weights.h5")
        assert temporary.parent == tmp_path
        temporary.write_bytes(b"weights")
    assert (tmp_path / "best.weights.h5").read_bytes() == b"weights"


def test_an_exception_inside_atomic_file_leaves_nothing(tmp_path):
    with (
        pytest.raises(RuntimeError, match="writer failed"),
        atomic_file(tmp_path / "a.txt") as temporary,
    ):
        temporary.write_text("half")
        raise RuntimeError("writer failed")
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_swaps_in_a_complete_folder(tmp_path):
    target = tmp_path / "export"
    with atomic_directory(target) as folder:
        (folder / "a.txt").write_text("one")
    assert (target / "a.txt").read_text() == "one"
    with atomic_directory(target) as folder:
        # The old folder stays whole while the new one is written.
        assert (target / "a.txt").read_text() == "one"
        (folder / "b.txt").write_text("two")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_failed_folder_write_keeps_the_previous_folder(tmp_path):
    target = tmp_path / "export"
    with atomic_directory(target) as folder:
        (folder / "a.txt").write_text("one")
    with (
        pytest.raises(FileWriteError, match="the previous export is intact"),
        atomic_directory(target) as folder,
    ):
        (folder / "b.txt").write_text("two")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_stale_temporary_folder_is_removed_by_the_next_write(tmp_path):
    stale = tmp_path / ".tmp-999999-export"
    stale.mkdir()
    (stale / "saved_model.pb").write_text("half")
    with atomic_directory(tmp_path / "export") as folder:
        (folder / "a.txt").write_text("one")
    assert not stale.exists()


def test_check_free_space_refuses_before_writing(tmp_path, monkeypatch):
    path = tmp_path / "best.weights.h5"
    path.write_bytes(b"previous")
    usage = type("Usage", (), {"free": 1000, "total": 2000, "used": 1000})
    monkeypatch.setattr(files.shutil, "disk_usage", lambda _: usage)
    with pytest.raises(FileWriteError) as error:
        check_free_space(path, 5000)
    message = str(error.value)
    assert "5,000 bytes" in message and "1,000 are free" in message
    assert "previous best.weights.h5 is intact" in message
    check_free_space(path, 999)  # enough room: no error
    # A file system of size 0 (/proc) is no full disk: the write says why.
    usage.total = usage.free = 0
    check_free_space(path, 5000)


def test_the_lock_is_reentrant_in_one_process(tmp_path):
    lock = FolderLock(tmp_path, "outer")
    with lock, FolderLock(tmp_path, "inner"):
        assert lock.holder()["command"] == "outer"
    # Released: another process may take it now (checked below); here the
    # holder record is cleared.
    assert lock.holder() == {}


def test_the_running_holder_is_a_live_process_of_this_host(tmp_path):
    lock = FolderLock(tmp_path, "reader")
    assert lock.running_holder() is None  # no lock file
    with FolderLock(tmp_path, "this process"):
        assert lock.running_holder()["command"] == "this process"
    assert lock.running_holder() is None  # released: the record is cleared
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "command": "x"}
    for record, running in (
        (holder, True),
        ({**holder, "host": "another-host"}, False),  # not known from here
        ({**holder, "pid": "12"}, False),  # garbled
    ):
        (tmp_path / "writer.lock").write_text(json.dumps(record))
        assert (lock.running_holder() is not None) == running


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    with holding_lock(tmp_path) as holder:
        with pytest.raises(FolderLockedError) as error:
            FolderLock(tmp_path, "keras-transformer export").acquire()
        message = str(error.value)
        assert f"PID {holder.pid}" in message
        assert "keras-transformer train" in message
        assert "host" in message and str(tmp_path / "writer.lock") in message
        assert "\n" not in message
    # The holder was killed (SIGKILL): the system released its lock.
    deadline = time.monotonic() + 10
    while True:
        try:
            with FolderLock(tmp_path, "after the kill"):
                break
        except FolderLockedError:
            assert time.monotonic() < deadline, "the lock outlived its holder"
            time.sleep(0.1)


def test_a_lock_file_removed_on_release_is_taken_again_when_replaced(
    tmp_path, monkeypatch
):
    """An export's lock file beside its folder (``.NAME.lock``) stayed behind,
    empty, after every export; it is now deleted when released. A writer
    that opened the old file and got its flock after that deletion must not
    go on holding a lock nobody else can see: it takes the lock again on the
    file now at the path."""
    import fcntl
    import os

    lock_file = tmp_path / ".out.lock"
    lock = FolderLock(tmp_path / "out", "export", lock_file, remove_when_released=True)
    with lock:
        assert lock.holder()["command"] == "export"
    assert not lock_file.exists()

    real = FolderLock._locked_descriptor
    calls = []

    def deleted_first(self: FolderLock) -> int:
        calls.append(1)
        if len(calls) > 1:
            return real(self)
        # The other writer opened the file, then deleted it on release.
        descriptor = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock_file.unlink()
        return descriptor

    monkeypatch.setattr(FolderLock, "_locked_descriptor", deleted_first)
    with lock:
        assert len(calls) == 2
        # The file at the path is the one held: a third writer is refused.
        assert lock.holder()["command"] == "export"
        third = os.open(lock_file, os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(third)
    assert not lock_file.exists()


def test_a_read_only_folder_is_one_line(tmp_path, monkeypatch):
    def read_only(*_args: object, **_kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(files.os, "open", read_only)
    with pytest.raises(FileWriteError, match="read-only file system; nothing in"):
        FolderLock(tmp_path, "train").acquire()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "is empty"),
        (b"\n  \n", "is empty"),
        (b'{"step": ', "is not valid JSON (Expecting value: line 1 column 10"),
        (b"\xff\xfe{}", "is not valid JSON ('utf-8' codec can't decode"),
        (b"[1, 2]", "holds a JSON array, not an object"),
    ],
)
def test_a_damaged_record_is_named_with_what_is_wrong(tmp_path, content, problem):
    """A record emptied by a crash during its write said "is not valid JSON
    (Expecting value: line 1 column 1 (char 0))"; it is now named empty."""
    record = tmp_path / "best.json"
    record.write_bytes(content)
    with pytest.raises(ValueError) as error:
        files.read_json_object(record, "Restore it.")
    assert str(error.value).startswith(f"{record} {problem}"), error.value
    assert str(error.value).endswith(": Restore it.")
