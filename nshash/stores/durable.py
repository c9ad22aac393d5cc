"""The file half of the file stores: one opener per path, snapshots a crash cannot tear, and
:class:`JournaledFile`, which keeps tables in memory durable (the memory store of every
method)."""

from __future__ import annotations

import binascii
import ctypes
import errno
import fcntl
import gc
import json
import logging
import os
import pickle
import re
import signal
import threading
import weakref
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, BinaryIO, Protocol

from ..errors import (
    StoreCorruptError,
    StoreError,
    StoreLockedError,
    StoreNotFoundError,
    StoreReadOnlyError,
)

__all__ = [
    "JournaledFile",
    "Journal",
    "State",
    "lock_path",
    "probe_writable",
    "replace_snapshot",
    "start_flusher",
    "store_files",
]

#: A journaled store at ``PATH`` keeps its snapshot at ``PATH``, its journal at ``PATH`` and
#: this, and the journal a background snapshot covers at ``PATH`` and :data:`OLD_JOURNAL`.
JOURNAL = ".journal"
OLD_JOURNAL = ".journal.old"


def store_files(path: str) -> tuple[str, str, str]:
    """The files a journaled store at *path* keeps: its snapshot, its journal and the
    journal a background snapshot covers (any of them may be absent)."""
    return path, path + JOURNAL, path + OLD_JOURNAL

#: The system calls a journal append makes, looked up at call time so tests can make them
#: fail or come up short (a full disk) without filling one.
_write = os.write
_fsync = os.fsync


class _Truncatable(Protocol):
    def truncate(self, size: int) -> int: ...
    def fileno(self) -> int: ...


class Journal:
    """An append-only file whose every record lands whole or not at all.

    A full disk makes ``write`` come up short or fail with ENOSPC. Then the half record is cut
    off again (``ftruncate`` to the end of the last whole record, which needs no free space),
    so the next record never follows a torn fragment, and the append raises
    :class:`~nshash.StoreError`. Should the cut fail too, the journal refuses every later
    append until it is reopened: the fragment is then its last line, which opening drops.

    Args:
        path: the journal file, created when missing.
        url: the store URL shown in errors.
        what: with *store*, hold the file locked (:func:`hold_file`) for as long as the
            journal is open: what the store is, for messages.
        store: the store's path, for messages.
        mode: ``ab``, or ``wb`` to begin the file empty.

    Raises:
        OSError: the file cannot be opened (unlocked).
        StoreLockedError, StoreError: the file cannot be opened or locked (locked).
    """

    def __init__(
        self,
        path: str,
        url: str,
        what: str | None = None,
        store: str | None = None,
        mode: str = "ab",
    ) -> None:
        self.path = path
        self.url = url
        self._fh: IO[bytes] | LockedFile
        if what is not None and store is not None:
            self._fh = hold_file(path, what, url, store, mode)
        else:
            self._fh = open(path, mode, buffering=0)
        #: The file's descriptor (read once: every append writes to it).
        self._fd = self._fh.fileno()
        #: The length of the file up to the end of its last whole record.
        self.end = os.fstat(self._fd).st_size
        #: Why appends are refused until the journal is reopened, or None.
        self.broken: str | None = None

    def fileno(self) -> int:
        return self._fh.fileno()

    def append(self, record: bytes, sync: bool) -> None:
        """Append *record* (and fsync it when *sync*); on failure leave the file as it was.

        Raises:
            StoreError: the disk refused the record (full, read-only, I/O error); nothing of
                it stays in the file.
        """
        if self.broken is not None:
            raise StoreError(
                f"The journal refuses writes until the store is reopened: {self.broken}",
                url=self.url,
            )
        fd = self._fd
        try:
            # One write takes a whole line but on a full disk; only a short one needs a view.
            n = _write(fd, record)
            if n != len(record):
                view = memoryview(record)
                done = n
                while done < len(view):
                    if n <= 0:
                        raise OSError(errno.ENOSPC, "No space left on device (a short write)")
                    n = _write(fd, view[done:])
                    done += n
            if sync:
                _fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, self.end)
            except OSError as cut:
                self.broken = f"a torn record could not be cut off ({cut})"
            else:
                if sync:
                    try:
                        _fsync(fd)
                    except OSError:
                        pass  # the cut is in the page cache; a power cut may undo it
            raise StoreError(f"Cannot write the journal: {exc}", url=self.url) from exc
        self.end += len(record)

    def sync(self) -> None:
        """fsync the journal (raises OSError)."""
        _fsync(self._fh.fileno())

    def truncate(self, size: int) -> int:
        """Cut the journal to *size* bytes (after a snapshot made its records redundant)."""
        os.ftruncate(self._fh.fileno(), size)
        self.end = size
        return size

    def close(self) -> None:
        self._fd = -1  # a later append fails (EBADF), never writes to a reused descriptor
        self._fh.close()


#: The (device, inode) of every file this process holds a store lock on. A second open of
#: such a file is refused before the file is opened: closing a descriptor of a file drops
#: every POSIX lock the process holds on it, and SQLite keeps its own locks that way.
_HELD: set[tuple[int, int]] = set()
_HELD_LOCK = threading.Lock()


class LockedFile:
    """A file this process holds an exclusive ``flock`` on, for as long as it stays open.

    Made by :func:`hold_file`; :meth:`close` lets go of the lock (so does the process
    exiting, however it exits).
    """

    def __init__(self, fh: IO[bytes], key: tuple[int, int]) -> None:
        self._fh = fh
        self._key = key

    def fileno(self) -> int:
        return self._fh.fileno()

    def close(self) -> None:
        if self._fh.closed:
            return
        with _HELD_LOCK:
            _HELD.discard(self._key)
        self._fh.close()


def hold_file(path: str, what: str, url: str, store: str, mode: str = "ab") -> LockedFile:
    """Open *path* (in *mode*, creating it) and hold an exclusive ``flock`` on it.

    Args:
        path: the file to lock.
        what: what the store is, for messages (``"memory store"``).
        url: the store URL, for errors.
        store: the store's path, for messages.
        mode: how the file is opened (unbuffered; ``ab`` or ``wb``).

    Raises:
        StoreLockedError: another process (or another open in this one) holds it.
        StoreError: the file cannot be opened or created.
    """

    def locked() -> StoreLockedError:
        return StoreLockedError(
            f"{what.capitalize()} {store!r} is open in another process", url=url
        )

    try:
        st = os.stat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise StoreError(f"Cannot open {what} {store!r}: {exc}", url=url) from exc
    else:
        if (st.st_dev, st.st_ino) in _HELD:
            raise locked()
    try:
        fh = open(path, mode, buffering=0)
    except OSError as exc:
        raise StoreError(f"Cannot open {what} {store!r}: {exc}", url=url) from exc
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        st = os.fstat(fh.fileno())
    except OSError as exc:
        fh.close()
        raise locked() from exc
    key = (st.st_dev, st.st_ino)
    with _HELD_LOCK:
        _HELD.add(key)
    return LockedFile(fh, key)


class StoreLock:
    """The locks of a store open for writing: ``PATH.lock``, and a file of the store itself.

    ``PATH.lock`` alone can be stolen: a temp-file cleaner that deletes it lets a second
    writer make a new one and lock that. So a store also locks a file it cannot lose without
    losing its data (SQLite: the database file; the file stores: the journal, see
    :class:`JournaledFile`); a second writer finds that one held too.
    """

    def __init__(self, files: list[LockedFile]) -> None:
        self.files = files

    def fds(self) -> list[int]:
        """The locked files' descriptors (a forked child keeps them to hold the locks)."""
        return [f.fileno() for f in self.files]

    def close(self) -> None:
        """Let go of every lock."""
        while self.files:
            self.files.pop().close()


def lock_path(path: str, what: str, url: str, *, also: str | None = None) -> StoreLock:
    """Create *path*'s directory and hold ``path + ".lock"`` (flock) for this process, and
    the file *also* (a file of the store that cannot be deleted without losing it; see
    :class:`StoreLock`).

    The caller keeps the returned lock for as long as it uses *path*; closing it releases
    the locks (so does the process exiting, however it exits).

    Raises:
        StoreLockedError: another process holds one of the locks.
        StoreError: the directory or a file cannot be created.
    """
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except OSError as exc:
        raise StoreError(f"Cannot open {what} {path!r}: {exc}", url=url) from exc
    files = [hold_file(path + ".lock", what, url, path)]
    if also is not None:
        try:
            files.append(hold_file(also, what, url, path))
        except BaseException:
            files[0].close()
            raise
    return StoreLock(files)


class _Flushable(Protocol):
    def flush_pending(self) -> None: ...


def _flush_loop(ref: weakref.ref[_Flushable], stop: threading.Event) -> None:
    while not stop.wait(1.0):
        owner = ref()
        if owner is None:
            return
        owner.flush_pending()
        del owner


def start_flusher(owner: _Flushable, stop: threading.Event, name: str) -> threading.Thread:
    """Start the thread of an ``everysec`` policy: ``owner.flush_pending()`` about once a
    second until *stop* is set. The thread holds only a weak reference, so an owner dropped
    without closing is still collected (and its ``__del__`` releases the files)."""
    thread = threading.Thread(
        target=_flush_loop, args=(weakref.ref(owner), stop), name=name, daemon=True
    )
    thread.start()
    return thread


#: How much a writability probe writes: about what one large journal record needs.
PROBE_BYTES = 64 * 1024


def probe_writable(path: str, failure: str, url: str) -> None:
    """Check that the disk under *path* takes writes again, after *failure*.

    Writes :data:`PROBE_BYTES` to ``path + ".probe"``, fsyncs and removes it.

    Raises:
        StoreError: the probe failed too; the message says so and repeats *failure*.
    """
    probe = path + ".probe"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            data = memoryview(bytes(PROBE_BYTES))
            done = 0
            while done < len(data):
                n = _write(fd, data[done:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, "No space left on device (a short write)")
                done += n
            _fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreError(f"The store cannot write ({failure}; still: {exc})", url=url) from exc
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass


#: The errors of ``os.link`` on a file system without hard links.
_NO_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.EXDEV)


def _unlink_if_there(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _same_file(a: str, b: str) -> bool:
    """Whether the paths *a* and *b* both exist and name one file."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def fsync_dir(path: str) -> None:
    """fsync the directory of *path*, so a rename or a new file in it survives a power cut."""
    dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def replace_snapshot(
    path: str,
    write: Callable[[BinaryIO], None],
    journal: _Truncatable | None,
    url: str,
    *,
    keep_journal: bool = False,
) -> None:
    """Write a snapshot to *path* atomically, then empty the journal it makes redundant.

    The content goes to ``path + ".tmp"``, is fsynced and renamed over *path*, and the directory
    is fsynced, so a crash leaves either the old snapshot or the new one, never a mix. Only then
    is the journal (the open handle, or ``path + ".journal"``) truncated and fsynced, unless
    *keep_journal* (a repair moves the damaged journal aside itself).

    Raises:
        StoreError: the disk refused (full, read-only, permissions).
    """
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_dir(path)
        if keep_journal:
            pass
        elif journal is not None:
            journal.truncate(0)
            os.fsync(journal.fileno())
        else:
            with open(path + JOURNAL, "wb") as jf:
                os.fsync(jf.fileno())
    except OSError as exc:
        # A half-written temp file only takes space a full disk needs back.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise StoreError(f"Cannot write snapshot {path!r}: {exc}", url=url) from exc


# -- tables in memory, made durable by a journal and a snapshot ---------------------------
class State(Protocol):
    """**Protocol**: tables in memory that a :class:`JournaledFile` keeps durable.

    Every write is recorded in :attr:`log` as a JSON-able *op* (which :meth:`apply` replays)
    and, while :attr:`undo` is a list, how to take it back (:meth:`rollback`).
    """

    #: Ops applied since the last journal line; None when nothing journals them.
    log: list[Any] | None
    #: While a change is in progress, how to take back each of its writes.
    undo: list[Any] | None

    def apply(self, op: Any) -> None:
        """Replay one journaled op; ValueError (or another of :data:`DAMAGE`) if malformed."""
        ...

    def rollback(self) -> None:
        """Take back every write since :attr:`undo` was set."""
        ...

    def dump(self) -> dict[str, Any]:
        """Everything, as plain containers (what a snapshot pickles)."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """What a snapshot file writes: :meth:`dump`, or a dump whose tables follow in parts
        (see :data:`PARTS`), which :meth:`load` is given merged."""
        ...

    def load(self, data: Any) -> None:
        """Load what :meth:`dump` (or :meth:`snapshot`, its parts merged) gave, checking it
        (ValueError or StoreCorruptError). It may empty *data* as it goes (so that a table's
        plain copy is freed once it is converted)."""
        ...


#: The snapshot is rewritten when the journal has grown past this share of it... (a snapshot
#: costs about as much to write as the journal it replaces costs to replay: a 100,000-document
#: store writes its 16.6 MB snapshot in 1.9 s, on a busy 2-core machine).
JOURNAL_SHARE = 1.0

#: ... and past this size, so a small store is not rewritten every few writes.
JOURNAL_MIN_BYTES = 16 << 20

#: A close that follows writes folds the journal into the snapshot when the journal has grown
#: past this share of it (and past :data:`CLOSE_MIN_BYTES`): the next open then reads the
#: snapshot alone instead of replaying the journal line by line, which costs about ten times
#: more a byte than loading the snapshot (a 200,000-document store: 1.6 s to reopen after
#: such a close, 4.9 s with the journal left in place). 0: whenever it is past the minimum.
CLOSE_SHARE = 0.0

#: ... and past this size: a journal of up to 16 MiB left for the next open added about a
#: second to it at 200,000 documents, where a fold at close costs the close about as much.
CLOSE_MIN_BYTES = 1 << 20

#: Attempts of a read-only open to read a snapshot and journal that a writer is not
#: replacing at that very moment.
READ_ATTEMPTS = 20

#: Whether a compaction that a write makes due writes the snapshot in a child process (fork:
#: the child has the tables as they were, copy-on-write, while this process goes on writing a
#: new journal), so no write waits for it. Off, or where there is no fork, the write that
#: makes it due writes it (about a second per 100,000 documents).
BACKGROUND = hasattr(os, "fork")

#: Linux's prctl option that has a process killed when the thread that forked it ends.
_PR_SET_PDEATHSIG = 1

#: How every journal line starts (``[seq,``); a torn last line must too.
_JOURNAL_LINE = re.compile(rb"\[(?:\d|\Z)")

#: What a damaged journal line or snapshot may raise while it is read or applied; each
#: becomes a StoreCorruptError naming the file (and the line).
DAMAGE = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    OverflowError,
    StoreCorruptError,
)

logger = logging.getLogger("nshash")


def reason(exc: BaseException) -> str:
    """A short reason for a damaged file: the exception's text, or its type."""
    if isinstance(exc, KeyError):
        return f"missing {exc}"
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc) or type(exc).__name__


def _read_or_empty(path: str) -> bytes:
    """The bytes of *path*, or none when it does not exist."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return b""


def _close_fds_except(*keep: int) -> None:
    """In a forked child: close every file descriptor past stderr but *keep*."""
    top = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1 << 16
    low = 3
    for fd in sorted(keep):
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, max(low, top))


def _die_with_parent(parent: int) -> None:
    """In a forked child: be killed when the thread that forked it ends (Linux: the
    :class:`_Snapshotter`'s, which lives as long as the store is open), so a crashed writer's
    child does not go on holding the store's lock; leave at once when the parent is gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # elsewhere the child holds the store's lock until it is done
    if os.getppid() != parent:
        os._exit(1)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number this store writes")


def _refuse_float(text: str) -> Any:
    raise ValueError(f"{text} is not an integer")


#: What ends a journal line after its JSON: a tab and the CRC32 of the JSON's bytes, in eight
#: lowercase hex digits. A byte changed anywhere in the line fails the check (or the JSON).
_LINE_CRC = b"\t%08x"
_LINE_CRC_LEN = len(_LINE_CRC % 0)


#: A maker of a whole journal line, ``encode(seq, ops)`` (see :func:`journal_line`).
LineEncoder = Callable[[int, list[Any]], bytes | None]


def journal_line(seq: int, ops: list[Any]) -> bytes:
    """The journal line of change *seq*: ``[seq,ops]``, its checksum, a line break.

    A :data:`LineEncoder` (the compiled ``journal_line``) must make these same bytes; it
    returns None for what it leaves to this (see :meth:`JournaledFile._write_journal`).
    """
    body = json.dumps([seq, ops], separators=(",", ":"), default=_base64).encode()
    return body + _LINE_CRC % zlib.crc32(body) + b"\n"


def _base64(value: Any) -> Any:
    """What json.dumps writes of a value it does not know: packed values (bytes, as an op
    holds a run of sketch values or anchors) as the str of their base64, as the compiled
    ``journal_line`` writes them."""
    if not isinstance(value, (bytes, bytearray)):
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
    return binascii.b2a_base64(value, newline=False).decode("ascii")


def parse_line(line: bytes, unchecked: bool = True) -> tuple[int, list[Any], bool]:
    """One journal line (without its line break): ``[seq, ops]`` and its checksum.

    NaN, infinities and floats are refused. A line without a checksum is one written before
    lines had them: read unchecked while *unchecked* (the caller clears it once a line of the
    file had a checksum: an older journal's lines may only come before the newer ones).

    Returns:
        The sequence number, the ops, and whether the line had a checksum.

    Raises:
        ValueError: the line fails its checksum, or is not one this store writes.
    """
    checked = len(line) > _LINE_CRC_LEN and line[-_LINE_CRC_LEN] == 0x09  # a tab
    if checked:
        body = line[:-_LINE_CRC_LEN]
        if line[-_LINE_CRC_LEN:] != _LINE_CRC % zlib.crc32(body):
            raise ValueError("it fails its checksum (a byte of it changed)")
        line = body
    elif not unchecked:
        raise ValueError("it has no checksum, though the lines before it have one")
    value = json.loads(line, parse_constant=_refuse_constant, parse_float=_refuse_float)
    if not isinstance(value, list) or len(value) != 2 or not isinstance(value[1], list):
        raise ValueError("not a [sequence number, operations] pair")
    seq, ops = value
    if type(seq) is not int or seq < 1:
        raise ValueError(f"{seq!r:.40} is not a sequence number")
    return seq, ops, checked


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that refuses every global: only dicts, lists, sets, tuples, numbers, str,
    bytes."""

    def find_class(self, module: str, name: str) -> Any:
        raise StoreCorruptError(
            f"Snapshot refers to {module}.{name}; only plain containers are allowed"
        )


def count(value: Any, what: str) -> int:
    """*value* if it is a count (an int >= 0), else ValueError."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{what} {value!r:.40} is not a count")
    return int(value)


#: What follows the pickle in a snapshot: the CRC32 of the pickle's bytes (a snapshot written
#: before the trailer existed has none and is read unchecked).
_TRAILER = b"\nnshash-crc32:%08x\n"
_TRAILER_LEN = len(_TRAILER % 0)


class _Checksummed:
    """A file to write through that keeps the CRC32 of what was written."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.crc = 0

    def write(self, data: bytes) -> int:
        self.crc = zlib.crc32(data, self.crc)
        return self.fh.write(data)


#: A snapshot whose tables come a part at a time: what :meth:`State.snapshot` puts under this
#: key is an iterable of parts, each a dict {table name: {key: value}} of entries for tables
#: the dump holds as dicts (empty, or part-filled). The file then holds the dump (this key
#: True), a pickle of each part, and a pickle of None; reading merges each part into its
#: tables. A part is copied out of the state only while it is written, so a snapshot never
#: holds a copy of the whole state at once.
PARTS = "parts"

#: How much of a snapshot its checksum pass reads at a time.
_CRC_CHUNK = 1 << 20


def _crc_of(fh: BinaryIO, end: int) -> int:
    """The CRC32 of the first *end* bytes of *fh*, read a chunk at a time (a snapshot is as
    large as the tables it holds: it is never read whole into memory)."""
    fh.seek(0)
    crc, left = 0, end
    while left:
        chunk = fh.read(min(_CRC_CHUNK, left))
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    return crc


def _check_trailer(fh: BinaryIO, size: int, end: int, crc: int | None) -> None:
    """Check what follows the pickle that ends at byte *end* of the snapshot *fh* of *size*
    bytes: nothing (a snapshot from before the trailer), or the trailer of the CRC32 *crc*
    of the bytes before it (None: not taken yet, so taken now)."""
    if end == size:
        return
    fh.seek(end)
    tail = fh.read(_TRAILER_LEN + 1)
    if len(tail) != _TRAILER_LEN:
        raise ValueError("it fails its checksum (the file is damaged)")
    if tail != _TRAILER % (_crc_of(fh, end) if crc is None else crc):
        raise ValueError("it fails its checksum (the file is damaged)")


def _merge_parts(data: dict[str, Any], fh: BinaryIO) -> None:
    """Read the parts that follow the snapshot *data* in *fh* (see :data:`PARTS`) into its
    tables, up to the None that ends them; ValueError when one is not what a dump writes."""
    del data[PARTS]
    while (part := PlainUnpickler(fh).load()) is not None:
        if type(part) is not dict:
            raise ValueError(f"a part of the snapshot is a {type(part).__name__}, not a dict")
        for name, entries in part.items():
            table = data.get(name) if type(name) is str else None
            if type(table) is not dict or type(entries) is not dict:
                what = f"{name!r:.40}"
                raise ValueError(f"a part of the snapshot holds {what}, not a table's entries")
            before = len(table)
            table.update(entries)
            if len(table) != before + len(entries):
                raise ValueError(f"two parts of the snapshot hold one key of {name!r}")


def read_snapshot(path: str) -> tuple[Any, int]:
    """The object a snapshot file holds, its parts merged in (see :data:`PARTS`), and the
    file's size; checked against its checksum when it has one (a snapshot written before the
    checksum has none).

    The file is read as the unpickler goes, never whole: it is about as large as the tables,
    which the unpickled snapshot then holds once more.

    Raises:
        FileNotFoundError: there is no snapshot.
        OSError: it cannot be read.
        ValueError, pickle.UnpicklingError, EOFError, ...: it is damaged.
    """
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        # A trailer is checked before the pickle is read, so a damaged byte is named as such
        # rather than as whatever the unpickler makes of it.
        end, crc = size - _TRAILER_LEN, None
        fh.seek(max(end, 0))
        if end >= 0 and fh.read().startswith(_TRAILER[: _TRAILER.index(b"%")]):
            crc = _crc_of(fh, end)
            _check_trailer(fh, size, end, crc)
        fh.seek(0)
        # Not kept: an unpickler's memo holds every object it made.
        data = PlainUnpickler(fh).load()
        if isinstance(data, dict) and data.get(PARTS) is True:
            _merge_parts(data, fh)
        _check_trailer(fh, size, fh.tell(), crc if fh.tell() == end else None)
    return data, size


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cycle collector off while a snapshot or journal is read: loading makes
    millions of containers, none of them garbage, and the collector would walk them over and
    over (a quarter of the load time of a 200,000-document snapshot)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def identity(path: str) -> tuple[int, int, int, int] | None:
    """Return what tells one version of a file from the next (None when it is missing)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class _Snapshotter:
    """The background snapshots of one :class:`JournaledFile`, forked by a thread of their own.

    The child is killed when the thread that forked it ends (see :func:`_die_with_parent`), so
    that thread must live as long as the store: a server's worker thread may end at any time.
    A write that makes a compaction due moves the journal aside and calls :meth:`request`;
    the thread then takes the store's lock (so no change is half made), forks, lets go of the
    lock and waits for the child, whose end it reports through :meth:`JournaledFile.snapshot_done`.
    One snapshot at a time: ``IDLE`` -> ``REQUESTED`` -> ``FORKED`` -> ``IDLE``.
    """

    IDLE, REQUESTED, FORKED = 0, 1, 2

    def __init__(self, owner: JournaledFile) -> None:
        self._owner = weakref.ref(owner)
        self._lock = owner._lock
        self._cv = threading.Condition()
        self._state = self.IDLE
        self._stopping = False
        self._killed = False
        #: The running child's pid (0 when none).
        self.pid = 0
        self._thread = threading.Thread(target=self._run, name="nshash-snapshot", daemon=True)
        self._thread.start()

    def busy(self) -> bool:
        with self._cv:
            return self._state != self.IDLE

    def request(self) -> None:
        with self._cv:
            self._state = self.REQUESTED
            self._cv.notify_all()

    def settle(self, cancel: bool = True) -> None:
        """Wait for a running child; a snapshot requested but not begun is dropped (with
        *cancel*: the caller holds the store's lock, which the thread needs to begin one)."""
        with self._cv:
            if cancel and self._state == self.REQUESTED:
                self._state = self.IDLE
            while self._state != self.IDLE:
                self._cv.wait()

    def stop(self) -> None:
        """Kill a running child (as a crash would) and let the thread end."""
        with self._cv:
            self._stopping = True
            if self._state == self.FORKED and self.pid:
                self._killed = True
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except OSError:
                    pass
            self._cv.notify_all()
        self.settle()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._state != self.REQUESTED and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
            owner = self._owner()
            if owner is None:
                return
            with self._lock, self._cv:
                if self._state != self.REQUESTED or self._stopping:
                    continue
                try:
                    self.pid, pipe = owner.fork_snapshot()
                except OSError as exc:
                    self._state = self.IDLE
                    self._cv.notify_all()
                    logger.warning("Cannot begin a background snapshot: %s", exc)
                    continue
                self._state = self.FORKED
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped by someone else: its outcome is unknown
                status = -1
            os.set_blocking(pipe, False)  # the child wrote before it ended
            try:
                why = os.read(pipe, 4096).decode("utf-8", "replace")
            except BlockingIOError:
                why = ""
            finally:
                os.close(pipe)
            if not self._killed:
                owner.snapshot_done(status == 0, why or f"wait status {status}")
            del owner
            with self._cv:
                self._state, self.pid, self._killed = self.IDLE, 0, False
                self._cv.notify_all()


class JournaledFile:
    """A :class:`State` made durable at *path*: every change journaled before it is answered.

    * ``PATH.journal`` gets one JSON line per change: a sequence number and the ops it made
      (JSON cannot run code when read back), then a tab and the line's CRC32 (8 hex digits).
      A line whose bytes changed (a disk, a hand edit) fails its checksum: the open raises
      :class:`~nshash.StoreCorruptError` naming the line, and ``repair`` keeps every line
      before it. Journals written before lines had checksums still open: a line without one
      is read unchecked, as long as no line before it in the file had one (the first line
      this version appends to an older journal starts the checked part). This version's
      journals do not open in a version before the checksums.
      The *fsync* policy decides when the line reaches
      the disk itself: ``always`` (before returning), ``everysec`` (a background flush about
      once a second) or ``no`` (when the OS decides). Every policy survives a killed process:
      each line is handed to the OS before the change returns.
    * ``PATH`` is a snapshot of the state, written on :meth:`save`, when a change finds the
      journal grown past :data:`JOURNAL_SHARE` times the snapshot, and when a close after
      writes finds it past :data:`CLOSE_SHARE` of it (past :data:`JOURNAL_MIN_BYTES`, and
      :data:`CLOSE_MIN_BYTES` on close): pickled to ``PATH.tmp``, fsynced, renamed over
      ``PATH``.
      It is read back with :class:`PlainUnpickler`, so a tampered snapshot cannot run code.
      The snapshot records the last sequence number it includes, so a crash between the
      rename and the journal truncation replays nothing twice.
    * A compaction that a write makes due runs in the background (:data:`BACKGROUND`): the
      journal is renamed ``PATH.journal.old`` and a new one begun, and a forked child writes
      the snapshot of the tables as they were while this process goes on writing. Once the
      child is done, ``PATH.journal.old`` is deleted (every line of it is in the snapshot).
      Until then an open replays ``PATH.journal.old`` before ``PATH.journal``; a writer that
      finds one on open (a crash during a background snapshot) folds both into a snapshot.
      A child that fails leaves both journals, and the next compaction is written in the
      foreground. The child holds the lock with this process and dies with the thread that
      forked it.
    * ``PATH.lock`` and ``PATH.journal`` are held with ``flock`` while open: a second
      opener gets :class:`~nshash.StoreLockedError`, even when ``PATH.lock`` was deleted
      meanwhile (the journal is moved aside only by linking it, so ``PATH.journal`` always
      names a file the writer holds; see :meth:`_swap_journal`).

    A read-only file (*readonly*) takes no lock and writes nothing: it loads the snapshot and
    every complete journal line, retrying when a writer replaced the snapshot meanwhile.

    Args:
        path: the snapshot file.
        make_state: a new, empty state.
        url: the store URL, for messages.
        what: what the files hold, for messages (``"memory store"``, ``"keyed store"``).
        fsync: ``always``, ``everysec`` or ``no``.
        repair: open a damaged journal by keeping every line before the damage (the rest
            moved to ``PATH.journal.damaged``); :attr:`repaired` says what was dropped.
        readonly: read only.
        lock: the lock the owner holds around every change (the flusher takes it too).
        encode: a faster maker of a journal line (see :func:`journal_line`).
    """

    def __init__(
        self,
        path: str,
        make_state: Callable[[], State],
        *,
        url: str,
        what: str,
        fsync: str = "everysec",
        repair: bool = False,
        readonly: bool = False,
        lock: threading.RLock | None = None,
        encode: LineEncoder | None = None,
    ) -> None:
        self.path = path
        #: A faster maker of a whole journal line (the bytes :func:`journal_line` makes with
        #: ``json.dumps``), which returns None where json.dumps must make it; None:
        #: json.dumps always.
        self._encode = encode
        self.url = url
        self.what = what
        self.state = make_state()
        self._make_state = make_state
        self._fsync = fsync
        #: Whether every journal line is fsynced before its change returns (``always``).
        self._always = fsync == "always"
        self._repair = repair
        self.readonly = readonly
        self._lock = lock if lock is not None else threading.RLock()
        self.journal: Journal | None = None
        self._lockfile: StoreLock | None = None
        self.seq = 0
        self._dirty = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        #: What opening with ``repair=True`` dropped (None: the files were whole).
        self.repaired: str | None = None
        #: Why the last write to disk failed, until one succeeds again (see :meth:`check`).
        self.write_error: str | None = None
        self._snapshot_bytes = 0
        #: The journal a background snapshot covers, and what writes those snapshots.
        self._old = path + OLD_JOURNAL
        self._snapshots: _Snapshotter | None = None
        if readonly:
            self._read_consistent()
        else:
            self._open_files()
        #: The sequence number the files held on open: a close compacts only after writes.
        self._opened_seq = self.seq

    # -- opening -------------------------------------------------------------------------
    def _open_files(self) -> None:
        path = self.path
        self._lockfile = lock_path(path, self.what, self.url)
        try:
            journal, old = path + JOURNAL, self._old
            # The journal is the store's own lock: a second writer that got PATH.lock (its
            # file deleted meanwhile) finds this one held (see StoreLock). It is taken before
            # anything is cleaned up: a live writer's swap shows for a moment the very files a
            # swap cut short by a crash leaves, which are only that once no writer holds it.
            self.journal = Journal(journal, self.url, self.what, path)
            _unlink_if_there(journal + ".new")  # a swap cut short: never written to
            if _same_file(old, journal):  # a swap cut short after it linked the old journal
                os.unlink(old)
            had_old = os.path.exists(old)
            with gc_paused():
                snapshot_seq = self._load_snapshot()
                # A background snapshot that had not replaced the snapshot yet: its journal
                # first, then the one begun after it.
                _, _, damage = self._replay(old, snapshot_seq)
                good_end, damaged = None, old
                if damage is None:
                    _, good_end, damage = self._replay(journal, snapshot_seq)
                    damaged = journal
                elif self.journal.end:  # every line after the damage goes with it
                    rest = _read_or_empty(journal)
                    with open(old, "ab") as fh:
                        fh.write(rest)
                    self.journal.truncate(0)
                    lines = rest.count(b"\n")
                    damage += f", and the {lines} line(s) of {journal!r}"
            if damage is not None:
                # repair: keep what was before the damage, move the damaged journal aside
                # (and the old journal, whole, is in the snapshot now).
                self._write_snapshot(keep_journal=True)
                if damaged == journal:
                    self._swap_journal(journal + ".damaged")
                else:
                    os.replace(damaged, journal + ".damaged")
                if os.path.exists(old):
                    os.unlink(old)
                self.repaired = damage
                logger.warning("%s; the damaged journal is kept as %s.damaged", damage, journal)
            elif good_end is not None:
                self.journal.truncate(good_end)
            # A plain open rewrites nothing: the journal is folded into the snapshot only once
            # it has outgrown it (see maybe_compact), or when a background snapshot was cut
            # short by a crash.
            if had_old and damage is None:
                try:
                    self._write_snapshot()
                except StoreError as exc:  # both journals still hold everything
                    logger.warning("Cannot fold the journals into a snapshot: %s", exc)
        except OSError as exc:
            self.release()
            raise StoreError(f"Cannot open {self.what} {path!r}: {exc}", url=self.url) from exc
        except BaseException:
            self.release()
            raise
        self.state.log = []
        if self._fsync == "everysec":
            self._flusher = threading.Thread(
                target=self._flush_loop, name="nshash-journal-fsync", daemon=True
            )
            self._flusher.start()

    def _load_snapshot(self) -> int:
        path = self.path
        try:
            data, self._snapshot_bytes = read_snapshot(path)
        except FileNotFoundError:
            return 0
        except StoreCorruptError as exc:
            raise StoreCorruptError(f"Snapshot {path!r}: {exc}", url=self.url) from exc
        except Exception as exc:
            raise StoreCorruptError(
                f"Cannot read snapshot {path!r}: {reason(exc)}", url=self.url
            ) from exc
        try:
            if not isinstance(data, dict):
                raise ValueError(f"a {type(data).__name__}, not a snapshot")
            seq = count(data.get("seq", 0), "seq")
            self.state.load(data)  # may take the tables out of data as it converts them
        except DAMAGE as exc:
            raise StoreCorruptError(f"Snapshot {path!r}: {reason(exc)}", url=self.url) from exc
        self.seq = seq
        return seq

    def _replay(self, journal: str, after: int) -> tuple[int, int | None, str | None]:
        """Apply the journal's lines past sequence number *after*.

        Returns:
            How many lines were applied; the length to cut the file to when its last line is
            torn (else None); with ``repair``, what was dropped at the first damaged line.

        Raises:
            StoreCorruptError: a line other than the last is damaged (and not ``repair``).
        """
        return self._replay_lines(journal, _read_or_empty(journal), after)

    def _replay_lines(
        self, journal: str, data: bytes, after: int
    ) -> tuple[int, int | None, str | None]:
        """:meth:`_replay` of the journal's bytes *data*."""
        lines = data.split(b"\n")
        t = self.state
        replayed = good_end = 0
        unchecked = True  # until a line has a checksum (see parse_line)
        # The last element is b"" after a complete final line; anything else there is a line
        # cut short by a crash before its write returned: it was never acknowledged.
        for lineno, line in enumerate(lines[:-1], 1):
            t.undo = []
            try:
                seq, ops, checked = parse_line(line, unchecked)
                unchecked = unchecked and not checked
                if seq > after:
                    if seq <= self.seq:
                        raise ValueError(f"sequence number {seq} does not follow {self.seq}")
                    if seq != self.seq + 1:  # every write that returned has its line
                        raise ValueError(
                            f"sequence number {seq} follows {self.seq}: the line(s) of"
                            f" {seq - self.seq - 1} write(s) between them are missing"
                        )
                    for op in ops:
                        t.apply(op)
            except DAMAGE as exc:
                t.rollback()
                where = f"Journal {journal!r} line {lineno} is damaged ({reason(exc):.200})"
                if not self._repair:
                    raise StoreCorruptError(
                        f"{where}; 'nshash repair --store URL' keeps every line before it",
                        url=self.url,
                    ) from exc
                dropped = len(lines) - lineno - (0 if lines[-1] else 1)
                return replayed, None, f"{where}: dropped it and the {dropped} line(s) after it"
            finally:
                t.undo = None
            good_end += len(line) + 1
            if seq > after:
                self.seq = seq
                replayed += 1
        if lines[-1]:
            if not _JOURNAL_LINE.match(lines[-1]):  # not the start of one of our lines
                raise StoreCorruptError(f"{journal!r} is not a {self.what} journal", url=self.url)
            logger.warning(
                "Journal %r ends in a torn line (%d bytes, a write cut short by a crash or a"
                " full disk, never acknowledged): dropped",
                journal,
                len(lines[-1]),
            )
            return replayed, good_end, None
        return replayed, None, None

    def _read_consistent(self) -> None:
        """Load the snapshot and the journal's complete lines, as of one moment (read-only).

        A writer compacts by renaming a new snapshot over the old one and then emptying the
        journal. Reading the old snapshot and then the emptied journal would lose the lines
        in between, so the snapshot's identity is checked after the journal was read, and
        the read starts over when it changed.
        """
        with gc_paused():
            self._read_attempts()

    def _read_attempts(self) -> None:
        path, old = self.path, self._old
        journal = path + JOURNAL
        for _attempt in range(READ_ATTEMPTS):
            self.state = self._make_state()
            self.seq = 0
            before, old_before = identity(path), identity(old)
            if before is None and old_before is None and identity(journal) is None:
                raise StoreNotFoundError(
                    f"There is no {self.what} at {path!r} (reading never creates one)",
                    url=self.url,
                )
            try:
                after = self._load_snapshot() if before is not None else 0
            except StoreCorruptError:
                if identity(path) != before:
                    continue  # replaced while being read
                raise
            older, data = _read_or_empty(old), _read_or_empty(journal)
            # A background snapshot begun meanwhile renamed the journal after it was read.
            if identity(path) != before or identity(old) != old_before:
                continue
            # Lines past the snapshot only; a torn last line was never acknowledged. The old
            # journal is linked as the journal itself while a writer swaps them (or after a
            # crash in the middle of that): its lines are the journal's then.
            if not _same_file(old, journal):
                self._replay_lines(old, older, after)
            self._replay_lines(journal, data, after)
            return
        raise StoreError(
            f"Cannot read {path!r}: its snapshot kept being replaced while it was read",
            url=self.url,
        )

    # -- changes -------------------------------------------------------------------------
    @contextmanager
    def change(self) -> Iterator[State]:
        """Make one change to the state: journaled when the block ends, or taken back.

        The caller holds the owner's lock. The state changes first (it reads its own writes),
        then its ops go to the journal as one line; if the block raises or the journal
        refuses the line (a full disk), every write of the block is taken back: no trace.
        """
        t = self.begin()
        try:
            yield t
        except BaseException:
            self.abort()
            raise
        self.commit()

    def begin(self) -> State:
        """Begin a change: :meth:`change` without its generator, for a store's hot path.

        The caller holds the owner's lock, writes to the state returned, and ends the change
        with :meth:`commit`, or with :meth:`abort` when its own step raised.

        Raises:
            StoreReadOnlyError: the file is open read-only.
        """
        if self.readonly:
            raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
        t = self.state
        t.undo = []
        return t

    def commit(self) -> None:
        """Journal the change :meth:`begin` began, its logged ops as one line handed to the OS
        before this returns; if that fails (a full disk), take back every write of it.

        Raises:
            StoreError: the journal refused the line; the state is as before :meth:`begin`.
        """
        t = self.state
        try:
            self._write_journal()
        except BaseException:
            self.abort()
            raise
        t.undo = None
        journal = self.journal  # maybe_compact's first test, here to spare a call an add
        if journal is not None and journal.end > JOURNAL_MIN_BYTES:
            self.maybe_compact()

    def _write_journal(self) -> None:
        """Append the state's logged ops as one line; raises StoreError (the caller rolls back)."""
        log = self.state.log
        journal = self.journal
        if journal is None or not log:
            return
        seq = self.seq + 1
        encode = self._encode  # the compiled line where it is built, else journal_line
        line = encode(seq, log) if encode is not None else None
        if line is None:
            line = journal_line(seq, log)
        try:
            journal.append(line, self._always)
        except StoreError as exc:
            self.write_error = str(exc)
            raise
        self.seq = seq
        self.state.log = []
        self.write_error = None
        if not self._always:
            self._dirty = True

    def abort(self) -> None:
        """Take back every write of the change :meth:`begin` began (nothing was journaled)."""
        t = self.state
        try:
            t.rollback()
        finally:
            t.undo = None

    def maybe_compact(self) -> None:
        """Fold the journal into a new snapshot once it has grown past its share: in the
        background where it can (see :meth:`_start_background`), else now."""
        journal = self.journal
        if journal is None:
            return
        size = journal.end
        if size > JOURNAL_MIN_BYTES and size > JOURNAL_SHARE * self._snapshot_bytes:
            if self._snapshots is not None and self._snapshots.busy():
                return  # the running one is the compaction; the next write checks again
            try:
                if BACKGROUND and not os.path.exists(self._old):
                    self._start_background()
                else:
                    self._write_snapshot()
            except StoreError as exc:
                # The journal still holds everything: compaction can wait for space.
                logger.warning("Cannot compact the journal: %s", exc)

    def _start_background(self) -> None:
        """Move the journal aside as ``PATH.journal.old``, begin a new one, and have the
        snapshot written by a child (see :class:`_Snapshotter`).

        Raises:
            StoreError: the journal could not be synced or moved (nothing changed then).
        """
        journal = self.journal
        assert journal is not None
        try:
            journal.sync()  # the old journal is whole on disk before anything depends on it
            self._swap_journal(self._old)
        except OSError as exc:
            raise StoreError(
                f"Cannot begin a snapshot of {self.path!r}: {exc}", url=self.url
            ) from exc
        self._dirty = False
        try:
            fsync_dir(self.path)  # the rename and the new journal, through a power cut
        except OSError as exc:
            logger.warning("Cannot sync the directory of %r: %s", self.path, exc)
        if self._snapshots is None:
            self._snapshots = _Snapshotter(self)
        self._snapshots.request()

    def _swap_journal(self, move_to: str) -> None:
        """Move ``PATH.journal`` to *move_to* and go on in a new, empty journal, holding the
        store's lock on whatever file ``PATH.journal`` names at every moment: the new file is
        made and locked as ``PATH.journal.new``, the old one linked as *move_to* too, and the
        new one renamed over it. (Where the file system has no hard links, the old one is
        renamed: then for a moment there is no journal, and no lock to find.) An open finds
        what a crash midway leaves: a ``.new`` file nothing was written to, or *move_to*
        and ``PATH.journal`` one file (see :meth:`_open_files`).

        Raises:
            OSError, StoreError: the swap failed; the journal is where it was, still in use.
        """
        journal = self.journal
        assert journal is not None
        path = journal.path
        fresh = Journal(path + ".new", self.url, self.what, self.path, mode="wb")
        try:
            _unlink_if_there(move_to)
            try:
                os.link(path, move_to)
                linked = True
            except OSError as exc:
                if exc.errno not in _NO_LINKS:
                    raise
                os.replace(path, move_to)
                linked = False
            try:
                os.replace(fresh.path, path)
            except OSError:
                if linked:
                    os.unlink(move_to)
                else:
                    os.replace(move_to, path)
                raise
        except BaseException:
            fresh.close()
            _unlink_if_there(fresh.path)
            raise
        fresh.path = path
        journal.close()
        self.journal = fresh

    def fork_snapshot(self) -> tuple[int, int]:
        """Fork a child that writes the snapshot of the state as it is now and exits (0 when
        it is in place; else 1, its reason written to the pipe). The caller holds the lock,
        so no change is half made. Returns the child's pid and the pipe's read end.

        Raises:
            OSError: no pipe or no process could be made.
        """
        seq, parent = self.seq, os.getpid()
        keep = [] if self._lockfile is None else self._lockfile.fds()
        if self.journal is not None:  # the store's own lock (see StoreLock)
            keep.append(self.journal.fileno())
        reader, writer = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(reader)
            os.close(writer)
            raise
        if pid == 0:  # the child: write the snapshot, report, and leave without cleanup
            code = 1
            try:
                # Only the store's lock (held until the snapshot is in place) and the pipe:
                # other stores' locks and the process's sockets stay the parent's alone.
                _close_fds_except(writer, *keep)
                _die_with_parent(parent)
                gc.disable()  # the collector would touch (and copy) every page of the tables
                self._write_snapshot_file(seq)
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                try:
                    os.write(writer, reason(exc).encode("utf-8", "replace")[:2000])
                except OSError:
                    pass
            finally:
                os._exit(code)
        os.close(writer)
        return pid, reader

    def snapshot_done(self, ok: bool, why: str) -> None:
        """What a background snapshot's end leaves: done, ``PATH.journal.old`` is deleted
        (every line of it is in the snapshot); failed, both journals stay (logged)."""
        if ok:
            self._snapshot_landed(old_covered=True)
            return
        logger.warning(
            "A background snapshot of %r failed (%s); both journals keep everything, and the"
            " next compaction is written by the write that makes it due",
            self.path,
            why,
        )

    def _flush_loop(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                if self._dirty and self.journal is not None:
                    try:
                        self.journal.sync()
                    except OSError as exc:
                        self.write_error = f"Cannot fsync the journal: {exc}"
                        continue
                    self._dirty = False

    def _write_snapshot_file(self, seq: int, journal: Journal | None = None,
                             keep_journal: bool = True) -> None:  # fmt: skip
        """Write the snapshot of the state as of sequence number *seq* (then empty *journal*,
        unless *keep_journal*; see :func:`replace_snapshot`)."""
        data = self.state.snapshot()
        data["seq"] = seq
        parts = data.pop(PARTS, None)
        if parts is not None:
            data[PARTS] = True

        def write(fh: BinaryIO) -> None:
            # Streamed to the file in the pickler's frames, the CRC taken as they pass: the
            # pickle is never whole in memory (it is about as large as the tables it holds).
            # Each part has a pickler of its own, whose memo goes with it.
            out = _Checksummed(fh)
            pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(data)
            if parts is not None:
                for part in parts:
                    pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(part)
                pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(None)
            fh.write(_TRAILER % out.crc)

        replace_snapshot(self.path, write, journal, self.url, keep_journal=keep_journal)

    def _write_snapshot(self, keep_journal: bool = False) -> None:
        """Write the snapshot now (after a background one still running; one not begun yet
        is not begun), then empty the journal and delete ``PATH.journal.old``: both are in it."""
        if self._snapshots is not None:
            self._snapshots.settle()
        self._write_snapshot_file(self.seq, self.journal, keep_journal)
        self._snapshot_landed(old_covered=not keep_journal)

    def _snapshot_landed(self, old_covered: bool) -> None:
        """After a snapshot is in place: note its size, and delete ``PATH.journal.old`` when
        every line of it is in the snapshot (*old_covered*)."""
        try:
            if old_covered and os.path.exists(self._old):
                os.unlink(self._old)
            self._snapshot_bytes = os.path.getsize(self.path)
        except OSError:
            pass

    def save(self) -> None:
        """Write a snapshot now and empty the journal (the caller holds the lock)."""
        if self.readonly:
            raise StoreReadOnlyError(f"{self.url} is open read-only", url=self.url)
        self._write_snapshot()

    def check(self) -> None:
        """Raise StoreError while the last write to disk failed and the disk still refuses."""
        if self.write_error is None:
            return
        if self.journal is not None and self.journal.broken is not None:
            raise StoreError(self.journal.broken, url=self.url)
        probe_writable(self.path, self.write_error, self.url)
        self.write_error = None

    def release(self) -> None:
        """Let go of the files without syncing (what a crash does; close() for a clean end):
        a background snapshot is stopped, as a crash would stop it."""
        self._stop.set()
        if self._snapshots is not None:
            self._snapshots.stop()
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self._lockfile is not None:
            self._lockfile.close()
            self._lockfile = None

    def close(self) -> None:
        """Sync the journal and release the files (the caller holds the lock).

        After writes, a journal grown past :data:`CLOSE_SHARE` of the snapshot (and past
        :data:`CLOSE_MIN_BYTES`) is folded into a new snapshot first, so the next open reads
        the snapshot alone; otherwise the journal stays as it is and the next open replays
        it. Opening and closing without a write rewrite nothing.

        Raises:
            StoreError: the journal could not be synced (the files are released anyway).
        """
        try:
            if self._snapshots is not None:
                self._snapshots.settle()
            journal = self.journal
            if (
                journal is not None
                and self.seq > self._opened_seq
                and self.write_error is None
                and (
                    os.path.exists(self._old)  # a background snapshot left undone
                    or journal.end > CLOSE_MIN_BYTES
                    and journal.end > CLOSE_SHARE * self._snapshot_bytes
                )
            ):
                try:
                    self._write_snapshot()
                    self._dirty = False  # the snapshot holds it all, fsynced
                except StoreError as exc:  # the journal still holds everything
                    logger.warning("Cannot compact the journal on close: %s", exc)
            if self._dirty and self.journal is not None:
                self.journal.sync()
                self._dirty = False
        except OSError as exc:
            raise StoreError(f"Cannot sync the journal: {exc}", url=self.url) from exc
        finally:
            self.release()

    def join(self) -> None:
        """Wait for the flusher thread to end (after :meth:`close`, without the lock)."""
        if self._flusher is not None and self._flusher is not threading.current_thread():
            self._flusher.join(timeout=2)
