"""Files that appear whole or not at all, and one writer per folder.

Every file the package writes into a run folder or an export goes through
this module:

- `write_atomically` / `atomic_file`: the content is written under a
  temporary name in the same folder, flushed to disk (fsync), then renamed
  over the final name and the folder fsynced. A reader, a crash or a full
  disk sees the old file or the new one, never half of one.
- `atomic_directory`: a folder (an export) is written beside its final name
  and swapped in when complete; the previous folder stays intact until then.
- `FolderLock`: an advisory lock (``writer.lock``) that every command that
  writes a folder takes; a second writer is refused with a message naming
  the holder's PID, host and command. Readers never take it.

A write that fails (a full disk, a read-only folder, an I/O error) raises
`FileWriteError`: one line that names the file, what went wrong, and says
that the previous file is intact. `read_json_object` reads back the JSON
records those writes leave (a damaged one is one line naming the file);
`check_utf8_start` refuses a text file that is not UTF-8 from its first line.

Pure Python (standard library only): every level of the package may use it.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "LOCK_FILE",
    "FileWriteError",
    "FolderLock",
    "FolderLockedError",
    "as_os_error",
    "atomic_directory",
    "atomic_file",
    "check_export_files",
    "check_export_tokenizer",
    "check_free_space",
    "check_utf8_start",
    "file_checksums",
    "file_problem",
    "file_sha256",
    "fsync_directory",
    "read_json_object",
    "short_error",
    "write_atomically",
]

#: The lock file of a folder that one process writes at a time.
LOCK_FILE = "writer.lock"
#: The prefix of the temporary files and folders of an unfinished write.
TEMPORARY_PREFIX = ".tmp-"


class FileWriteError(OSError):
    """Writing a file or folder failed; the previous version is intact.

    The message is one line: the file, what went wrong (``no space left on
    the device``, ``read-only file system``, ...) and what to do.
    """

    def __str__(self) -> str:
        # OSError would print "[Errno 28] None: '<file>'" once errno and
        # filename are set (as `write_error` does): the message is the line.
        return str(self.args[0]) if self.args else super().__str__()


_JSON_TYPE_NAMES = {
    "list": "array",
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
    "NoneType": "null",
}


def read_json_object(path: str | os.PathLike[str], remedy: str) -> dict:
    """The JSON object a file holds (a run's or an export's record).

    Args:
        path: the file.
        remedy: what the user can do when it is damaged (one sentence).

    Raises:
        ValueError: one line naming the file, saying what is wrong (not UTF-8,
            not JSON, a JSON array or string instead of an object) and ending
            in `remedy`.
        OSError: the file cannot be read (missing, permission denied).
    """
    path = Path(path)
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        reason = " ".join(str(e).split())[:200] or type(e).__name__
        empty = isinstance(e, json.JSONDecodeError) and not e.doc.strip()
        problem = "is empty" if empty else f"is not valid JSON ({reason})"
    else:
        if isinstance(value, dict):
            return value
        kind = _JSON_TYPE_NAMES.get(type(value).__name__, type(value).__name__)
        problem = f"holds a JSON {kind}, not an object"
    raise ValueError(f"{path} {problem}: {remedy}")


#: Byte-order marks of the Unicode encodings other than UTF-8 (UTF-32's
#: first: its little-endian mark begins with UTF-16's).
_OTHER_ENCODING_MARKS = (
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def check_utf8_start(name: str | os.PathLike[str], data: bytes) -> None:
    """Refuses a text file whose first line (of `data`, the file's bytes or
    its first line) shows it is not UTF-8: a UTF-16 or UTF-32 byte-order
    mark (a text editor's "Unicode"), or NUL bytes (UTF-16 without a mark,
    or not text). Its lines would otherwise read as text with a NUL between
    every two characters.

    Raises:
        ValueError: one line naming the file, its encoding and a conversion.
    """
    first_line = data.split(b"\n", 1)[0]
    for mark, encoding in _OTHER_ENCODING_MARKS:
        if first_line.startswith(mark):
            raise ValueError(
                f"{name} is {encoding} text, not UTF-8 (it starts with "
                f"{encoding}'s byte-order mark): convert it, e.g. with `iconv "
                f"-f {encoding} -t UTF-8 {name} > converted.txt`, or save it as "
                "UTF-8."
            )
    if b"\x00" in first_line:
        raise ValueError(
            f"{name} holds NUL bytes in its first line: it is UTF-16 text "
            "without a byte-order mark, or not text. Save it as UTF-8 (e.g. "
            f"`iconv -f UTF-16LE -t UTF-8 {name} > converted.txt`)."
        )


def _reason(error: BaseException) -> str:
    number = getattr(error, "errno", None)
    if number == errno.ENOSPC or "no space left" in str(error).lower():
        return "no space left on the device"
    if number == errno.EROFS:
        return "read-only file system"
    if number in (errno.EACCES, errno.EPERM):
        return "permission denied"
    strerror = getattr(error, "strerror", None)
    if strerror:
        return str(strerror).lower()
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:200]


def _is_full(error: BaseException) -> bool:
    return getattr(error, "errno", None) == errno.ENOSPC or (
        "no space left" in str(error).lower()
    )


def as_os_error(error: BaseException) -> OSError:
    """`error` as an `OSError` with its errno (TensorFlow's file errors have none).

    An `OSError` is returned as it is. Another error (TensorFlow's
    ``OpError`` of a failed file write) is classified by its message and
    type: a full disk, a read-only file system, a permission denied; else
    an I/O error with the first 200 characters of its message.
    """
    if isinstance(error, OSError):
        return error
    text = " ".join(str(getattr(error, "message", None) or error).split())
    lowered = text.lower()
    if "no space left" in lowered:
        number = errno.ENOSPC
    elif "read-only file system" in lowered:
        number = errno.EROFS
    elif type(error).__name__ == "PermissionDeniedError" or (
        "permission denied" in lowered
    ):
        number = errno.EACCES
    else:
        return OSError(errno.EIO, text[:200])
    return OSError(number, os.strerror(number))


def write_error(
    path: str | os.PathLike[str], error: BaseException, kept: str | None = None
) -> FileWriteError:
    """A `FileWriteError` for a failed write of `path` caused by `error`."""
    path = Path(path)
    if getattr(error, "errno", None) == errno.EISDIR:
        # A folder where the file goes (made by hand, or by another program):
        # the target of a rename, or the file opened.
        folder = getattr(error, "filename2", None) or getattr(error, "filename", None)
        advice = f"Remove or rename the folder {folder or path}"
        kept = kept or "nothing was written"
    elif _is_full(error):
        advice = "Free disk space"
    else:
        advice = "Check the folder's permissions and the disk"
    kept = kept or (
        f"the previous {path.name} is intact"
        if path.exists()
        else f"no partial {path.name} was left"
    )
    result = FileWriteError(
        f"Could not write {path}: {_reason(error)}; {kept}. {advice}, then run "
        "the same command again."
    )
    # `errno` lets callers tell a full disk, `filename` which file failed.
    result.errno = errno.ENOSPC if _is_full(error) else getattr(error, "errno", None)
    result.filename = str(path)
    return result


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flushes a folder's entries (a rename in it) to disk, where supported."""
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as file:
        os.fsync(file.fileno())


def _fsync_tree(directory: Path) -> None:
    for folder, _, names in os.walk(directory):
        for name in names:
            _fsync_file(Path(folder) / name)
        fsync_directory(folder)


def _temporary_name(path: Path) -> Path:
    # The final name stays the end of the temporary one, so that writers
    # that insist on a suffix (``.weights.h5``, ``.keras``) accept it.
    return path.with_name(f"{TEMPORARY_PREFIX}{os.getpid()}-{path.name}")


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def check_free_space(
    path: str | os.PathLike[str], needed_bytes: int, kept: str | None = None
) -> None:
    """Refuses a write of about `needed_bytes` that the disk cannot hold.

    For writers that do not fail cleanly on a full disk (HDF5 may crash the
    process): checked before they start, so the previous file stays intact.

    Raises:
        FileWriteError: naming `path` when the free space is smaller.
    """
    path = Path(path)
    try:
        usage = shutil.disk_usage(path.parent)
    except OSError:
        return
    free = usage.free
    # A file system of size 0 (proc, sysfs) is no disk: the write itself
    # says what is wrong there, not "no space left".
    if usage.total and free < needed_bytes:
        raise write_error(
            path,
            OSError(errno.ENOSPC, "No space left on device"),
            kept=(
                kept
                or (
                    f"it needs about {needed_bytes:,} bytes and {free:,} are free; "
                    + (
                        f"the previous {path.name} is intact"
                        if path.exists()
                        else f"nothing was written to {path.name}"
                    )
                )
            ),
        )


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary path to write; renames it to `path` when done.

    Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with atomic_file(folder / "result.json") as temporary:
    ...     _ = temporary.write_text("{}")
    >>> (folder / "result.json").read_text()
    '{}'

    Raises:
        FileWriteError: when writing, flushing or renaming fails; the
            temporary file is removed and the previous `path` is untouched.
    """
    path = Path(path)
    temporary = _temporary_name(path)
    _remove(temporary)
    try:
        yield temporary
        if temporary.is_dir():
            _fsync_tree(temporary)
        else:
            _fsync_file(temporary)
        os.replace(temporary, path)
        fsync_directory(path.parent)
    except OSError as e:
        raise write_error(path, e) from e
    finally:
        _remove(temporary)


def write_atomically(path: str | os.PathLike[str], content: str | bytes) -> Path:
    """Writes `content` (text as UTF-8) to `path`: the old file or the new one.

    Raises:
        FileWriteError: on a full disk or any other failed write; the
            previous file is intact.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    path = Path(path)
    with atomic_file(path) as temporary, open(temporary, "wb") as file:
        file.write(data)
        file.flush()
    return path


def _exchange(a: Path, b: Path) -> bool:
    """Swaps two paths in one step (Linux ``renameat2(RENAME_EXCHANGE)``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = renameat2(
        at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange
    )
    return result == 0


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yields a temporary folder beside `path`; swaps it in when complete.

    The previous folder at `path` (if any) stays whole until the new one is
    written and flushed, then the two are exchanged in one rename (two
    renames where the system lacks ``renameat2``) and the old one removed.
    A crash or a failure before the swap leaves `path` as it was, plus a
    hidden temporary folder that the next write removes.

    Raises:
        FileWriteError: when writing or swapping fails; `path` is untouched.
    """
    path = Path(path)
    temporary = _temporary_name(path)
    # ``.tmp-<pid>-<name>`` exactly: not the folder of another name that
    # ends with this one (``.tmp-7-my-model`` is not a stale ``model``).
    stale_name = re.compile(rf"{re.escape(TEMPORARY_PREFIX)}\d+-{re.escape(path.name)}")
    for stale in path.parent.glob(f"{TEMPORARY_PREFIX}*-{path.name}"):
        if stale_name.fullmatch(stale.name):
            _remove(stale)
    try:
        temporary.mkdir(parents=True)
        yield temporary
        _fsync_tree(temporary)
        if path.exists():
            if not _exchange(temporary, path):
                old = path.with_name(f".old-{os.getpid()}-{path.name}")
                os.replace(path, old)
                os.replace(temporary, path)
                temporary = old
        else:
            os.replace(temporary, path)
        fsync_directory(path.parent)
    except OSError as e:
        raise write_error(
            path,
            e,
            kept=(
                f"the previous {path.name} is intact"
                if path.exists()
                else f"{path.name} was not created"
            ),
        ) from e
    finally:
        _remove(temporary)


# ------------------------------------------------------------------ locks
class FolderLockedError(OSError):
    """Another process is writing the folder (it holds ``writer.lock``)."""


#: Locks this process holds: resolved folder -> (descriptor, depth).
_HELD: dict[str, list[int]] = {}


def _is_file_of(descriptor: int, path: Path) -> bool:
    """Whether the open file `descriptor` is the file at `path` now."""
    try:
        found = path.stat()
    except OSError:
        return False
    opened = os.fstat(descriptor)
    return (found.st_dev, found.st_ino) == (opened.st_dev, opened.st_ino)


class FolderLock:
    """One writer per folder: an advisory lock on ``<folder>/writer.lock``.

    Taken by every command that writes a run folder or an export (train,
    average-checkpoints, evaluate's outputs, export); readers (translate,
    evaluate's scoring) never take a run's lock; ``translate --output`` locks
    its output file (`translation.lines.PartialOutput`). The lock is an
    ``flock`` on the file, so the system releases it when the holder exits,
    even after SIGKILL; the file itself only tells who holds it (PID, host,
    command, start). Re-entrant within one process.

    Args:
        folder: what the lock guards, named in a refusal: a folder (created
            if missing, with the default `lock_file`), or a file with its own
            `lock_file`.
        command: what the holder is doing, for the message of a refused
            writer (e.g. ``"keras-transformer train"``).
        lock_file: the lock's path, default ``<folder>/writer.lock``.
        remove_when_released: delete the lock file when the last holder
            releases it (a lock file outside the folder, which would
            otherwise stay behind in the user's folder). A writer that
            opened the file before it was deleted finds it gone once it
            holds the lock, and takes the lock again on a new file.
        another: what the refusal suggests instead (``"another folder"``).

    Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with FolderLock(folder, "an example"):
    ...     pass

    Raises:
        FolderLockedError: (on entering) naming the holder and what to do.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        command: str,
        lock_file: str | os.PathLike[str] | None = None,
        remove_when_released: bool = False,
        another: str = "another folder",
    ) -> None:
        self.folder = Path(folder)
        self.command = command
        self.path = Path(lock_file) if lock_file else self.folder / LOCK_FILE
        self.remove_when_released = remove_when_released
        self.another = another

    def __repr__(self) -> str:
        return f"FolderLock({str(self.folder)!r}, {self.command!r})"

    def _key(self) -> str:
        return os.path.realpath(self.path)

    def holder(self) -> dict[str, object]:
        """What the lock file says of its holder (empty when unreadable)."""
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return holder if isinstance(holder, dict) else {}

    def running_holder(self) -> dict[str, object] | None:
        """The holder the lock file names while that process runs on this
        host; None when the file names none (released), or a process that
        has exited (killed) or runs on another host (not known here)."""
        holder = self.holder()
        pid = holder.get("pid")
        if not isinstance(pid, int) or holder.get("host") != socket.gethostname():
            return None
        try:
            os.kill(pid, 0)  # signal 0: whether the process exists
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # it exists, under another user
        return holder

    def _refusal(self) -> FolderLockedError:
        holder = self.holder()
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        command = holder.get("command", "another command")
        since = holder.get("started", "an unknown time")
        return FolderLockedError(
            f"{self.folder} is being written by {command} (PID {pid} on host "
            f"{host}, since {since}): one writer at a time. Wait for it to end "
            f"or stop it, or use {self.another}. The lock is released when that "
            "process exits; only if it runs on a machine that crashed (a shared "
            f"file system), delete {self.path} by hand."
        )

    def acquire(self) -> FolderLock:
        """Takes the lock (re-entrant); raises `FolderLockedError` if held."""
        key = self._key()
        if key in _HELD:
            _HELD[key][1] += 1
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = self._locked_descriptor()
        while self.remove_when_released and not _is_file_of(descriptor, self.path):
            # Its last holder deleted the file we locked: lock the new one.
            os.close(descriptor)
            descriptor = self._locked_descriptor()
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        with contextlib.suppress(OSError):
            # Who holds it is information only; the flock is the lock.
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, (json.dumps(holder) + "\n").encode(), 0)
        _HELD[key] = [descriptor, 1]
        return self

    def _locked_descriptor(self) -> int:
        """Opens (creates) the lock file and takes its flock."""
        import fcntl

        try:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise write_error(
                    self.path, e, kept=f"nothing in {self.folder} was changed"
                ) from e
            if self.path.is_dir():
                raise IsADirectoryError(
                    f"{self.path} is a folder, but it must be the writer lock "
                    f"of {self.folder}: a file that the commands writing the "
                    "folder create (it tells who writes it). Remove or rename "
                    "that folder (nothing of the run is in it unless you put "
                    "it there), then run the command again."
                ) from None
            raise
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(descriptor)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise self._refusal() from None
            raise
        return descriptor

    def release(self) -> None:
        """Releases one level of the lock; the last one frees the file."""
        key = self._key()
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1]:
            return
        del _HELD[key]
        with contextlib.suppress(OSError):
            if self.remove_when_released:
                self.path.unlink()  # while held: a waiting writer sees it gone
            else:
                os.ftruncate(held[0], 0)
        os.close(held[0])  # closing the descriptor releases the flock

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def check_export_tokenizer(
    fingerprint: str, record: Mapping[str, Any], record_file: Path, format_name: str
) -> None:
    """Refuses an export's tokenizer whose `fingerprint` (the SHA-256 of its
    SentencePiece model, `SubwordTokenizer.fingerprint`) is not the one the
    export's `record` (read from `record_file`) says it was written with: a
    tokenizer copied in from another export, whose ids would mean other
    pieces, so that every translation came out wrong without a word. A record
    without one (written by hand) is not checked."""
    expected = record.get("tokenizer_fingerprint")
    if not isinstance(expected, str) or not expected or expected == fingerprint:
        return
    raise ValueError(
        f"The tokenizer of {record_file.parent} is not the one the export was "
        f"written with (its fingerprint {fingerprint[:12]}... differs from "
        f"{expected[:12]}... in {record_file.name}): its ids would mean other "
        "pieces. Restore the export from a copy, or write it again with "
        f"keras-transformer export --format {format_name}."
    )


def short_error(error: BaseException) -> str:
    """The first line of an error message (TensorFlow's are long), squeezed
    to 200 characters."""
    text = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(text.strip().splitlines()[0].split())[:200]


def file_problem(path: Path) -> str | None:
    """What keeps the file `path` from being read (missing, unreadable,
    empty), in words; None when nothing does."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return f"{path} is missing"
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or short_error(e)})"
    if not os.access(path, os.R_OK):
        return f"{path} cannot be read (permission denied)"
    if size == 0:
        return f"{path} is empty (0 bytes)"
    return None


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, as hex."""
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def file_checksums(
    folder: str | os.PathLike[str], names: Iterable[str]
) -> dict[str, str]:
    """``{name: SHA-256}`` of the files `names` of `folder`: what an export
    records of the files its engine loads, for `check_export_files`."""
    return {name: file_sha256(Path(folder) / name) for name in names}


def check_export_files(
    folder: str | os.PathLike[str],
    record: Mapping[str, Any],
    record_file: Path,
    format_name: str,
) -> None:
    """Refuses a file of an export whose SHA-256 is not the one the export's
    `record` (read from `record_file`, its ``file_sha256`` written by
    `file_checksums`) holds: a model copied in from another export of the
    same vocabulary size loads and serves, every translation another
    model's, without a word. A record without checksums (written by hand)
    is not checked; a missing file is the reader's to name."""
    expected = record.get("file_sha256")
    if not isinstance(expected, Mapping):
        return
    for name, digest in expected.items():
        path = Path(folder) / str(name)
        if not isinstance(digest, str) or not path.is_file():
            continue
        found = file_sha256(path)
        if found != digest:
            raise ValueError(
                f"{path} is not the file the export was written with (its "
                f"SHA-256 {found[:12]}... differs from {digest[:12]}... in "
                f"{record_file.name}): it was replaced, by a file of another "
                "export or a damaged copy. Restore the export from a copy, or "
                f"write it again with keras-transformer export --format {format_name}."
            )
