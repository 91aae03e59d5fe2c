"""Fixed-size segment files and the two backends that hold them: a directory on disk or memory.

Every on-disk structure of the store (commitlog, consume queues, index, checkpoint) reaches its
bytes through a :class:`Backend`, so the whole engine runs unchanged in memory for tests and an
embedded broker. Paths given to a backend are relative to the store root.

Segments on disk are preallocated with ``posix_fallocate`` and mapped with ``mmap``: a full disk
fails when a segment is created (a clear ``StoreFullError``), never as a SIGBUS in the middle of a
write, and reads are zero-copy ``memoryview`` slices of the mapping.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import queue
import sys
import threading
from pathlib import Path, PurePosixPath

from pocketmq.store.errors import StoreFullError

__all__ = ["Backend", "DiskBackend", "MemoryBackend", "Segment"]


_ZERO_CHUNK = 1 << 20  # Segment.zero compares and writes this much at a time
_ZEROS = bytes(_ZERO_CHUNK)


class Segment:
    """One fixed-size file: ``view`` covers all of it; ``write`` copies bytes in; ``flush`` syncs."""

    __slots__ = ("name", "size", "view", "_dirty_from", "_dirty_to")

    def __init__(self, name: str, size: int, view: memoryview) -> None:
        assert size > 0
        assert len(view) == size
        self.name = name
        self.size = size
        self.view = view
        self._dirty_from = size
        self._dirty_to = 0

    def write(self, position: int, data: bytes | bytearray | memoryview) -> None:
        end = position + len(data)
        assert 0 <= position <= end <= self.size, (position, len(data), self.size)
        self.view[position:end] = data
        if position < self._dirty_from:
            self._dirty_from = position
        if end > self._dirty_to:
            self._dirty_to = end

    def zero(self, start: int, end: int) -> None:
        """Make bytes [start, end) zero, writing only the chunks that are not zero already.
        Recovery zeroes the tail of the newest segment at every start: written whole, the
        mostly empty 64 MiB tail became resident and dirty (and was synced) each time."""
        assert 0 <= start <= end <= self.size, (start, end, self.size)
        for at in range(start, end, _ZERO_CHUNK):
            size = min(_ZERO_CHUNK, end - at)
            if not self._is_zero(at, size):
                self.write(at, _ZEROS[:size])

    def _is_zero(self, start: int, size: int) -> bool:
        return self.view[start : start + size] == _ZEROS[:size]

    def read(self, start: int, size: int) -> bytes:
        """A copy of bytes [start, start + size), for a look that should not map the file's
        pages into the process (on disk: read from the file; loading a consume queue probes a
        few entries spread over megabytes, and each probe through the mapping made 64 KiB
        around it resident)."""
        assert start >= 0 and start + size <= self.size, (start, size, self.size)
        return bytes(self.view[start : start + size])

    def prefault(self, start: int, end: int) -> None:
        """Ask for bytes [start, end) (and the chunk after them) to be made writable without
        page faults, ahead of the writes. On disk a worker thread does it and this returns at
        once: a write that catches up with the worker takes the page faults itself, as without
        any prefault (populating only faults pages in, it never changes a byte). Only a mapped
        file has faults to save; in memory there is nothing to do."""

    def settle(self) -> None:
        """Wait until every prefault asked for so far is done (tests, benchmarks)."""

    def allocate(self, start: int, end: int) -> None:
        """Reserve disk blocks for bytes [start, end) of a segment created with ``allocate``
        (sparse beyond it): a full disk raises ``StoreFullError`` here, before anything is
        written, instead of a SIGBUS on the write. Nothing to do in memory."""

    def flush(self) -> None:
        """Make every byte written so far durable (a no-op in memory)."""
        self._dirty_from = self.size
        self._dirty_to = 0

    def flush_range(self, start: int, end: int) -> None:
        """Make bytes [start, end) durable. Touches no shared state, so another thread may call it."""
        assert 0 <= start <= end <= self.size

    def close(self) -> None:
        self.view.release()


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
# madvise(MADV_POPULATE_WRITE), Linux 5.14+: write-faults a range in one call. Appending through
# a fresh mapping otherwise takes a page fault (allocate, zero, ext4's page_mkwrite) every 4 KiB,
# inside the event loop. Turned off for the process by the first refusal (older kernels).
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
_populate_works = sys.platform == "linux"
_PAGE = mmap.PAGESIZE
# The worker keeps this far ahead of what the commitlog asks for: it asks a chunk (1 MiB) at a
# time as its writes reach the end of the last one, so the next chunk is already being faulted in.
_AHEAD = 1 << 20
# The worker faults in this much per madvise (each return from ctypes takes the GIL again, so
# not less), holding the segment's lock for each piece only: a segment closed meanwhile
# (deleted, truncated away) waits for one piece at most.
_PIECE = 1 << 20


class _Populater:
    """One daemon thread, started at the first prefault, that write-faults segment ranges in.

    CPython's ``mmap.madvise`` keeps the GIL for the whole call (0.3-0.5 ms per MiB, the event
    loop frozen meanwhile, even from another thread), so the worker calls libc's ``madvise``
    through ctypes, which lets the GIL go. ctypes is imported here, at the first write to a
    store on disk, not at start (idle memory)."""

    def __init__(self) -> None:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        self._madvise = libc.madvise
        self._madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._madvise.restype = ctypes.c_int
        self._get_errno = ctypes.get_errno
        self._address_of = lambda buffer: ctypes.addressof(ctypes.c_char.from_buffer(buffer))
        # Requests, and the events settle() waits for: no lock the loop could wait for.
        self._requests: queue.SimpleQueue[tuple[_DiskSegment, int, int] | threading.Event] = (
            queue.SimpleQueue()
        )
        self.calls = 0  # madvise calls made (benchmarks count them)
        threading.Thread(target=self._run, name="pocketmq-prefault", daemon=True).start()

    def address(self, mapping: mmap.mmap) -> int:
        # The ctypes object exports the buffer only for this call: the mapping stays closable.
        return int(self._address_of(mapping))

    def submit(self, segment: _DiskSegment, start: int, end: int) -> None:
        self._requests.put((segment, start, end))

    def settle(self) -> None:
        done = threading.Event()
        self._requests.put(done)  # served in order: set once the requests before it are done
        done.wait()

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            if isinstance(request, threading.Event):
                request.set()
                continue
            segment, start, end = request
            try:
                for at in range(start, end, _PIECE):
                    if not self._populate(segment, at, min(end, at + _PIECE)):
                        break
            except Exception:  # a hint only: never let the thread die (settle() waits on it)
                global _populate_works
                _populate_works = False

    def _populate(self, segment: _DiskSegment, start: int, end: int) -> bool:
        global _populate_works
        with segment._populate_lock:
            if segment._address == 0:  # closed
                return False
            self.calls += 1
            if self._madvise(segment._address + start, end - start, _MADV_POPULATE_WRITE) == 0:
                return True
            failure = self._get_errno()
        if failure == errno.EINVAL:
            _populate_works = False  # before Linux 5.14: the writes take the faults one by one
        # ENOMEM/EFAULT and the like: only a hint was lost, the writes fault the pages in.
        return False


_populater: _Populater | None = None
_populater_lock = threading.Lock()


def _forget_populater() -> None:
    global _populater, _populater_lock
    _populater = None  # a forked child has the object, not its thread: it makes its own
    _populater_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_populater)


def _the_populater() -> _Populater | None:
    global _populater, _populate_works
    if _populater is None:
        with _populater_lock:
            if _populater is None:
                try:
                    _populater = _Populater()
                except (ImportError, OSError, AttributeError):  # no ctypes or no libc madvise
                    _populate_works = False
    return _populater


class _DiskSegment(Segment):
    __slots__ = ("_fd", "_map", "path", "_address", "_populate_lock", "_requested_to")

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self._fd = fd
        self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.path = path
        self._address = 0  # where the mapping starts, once a prefault needs it; 0 once closed
        self._populate_lock = threading.Lock()  # held by the worker while it faults pages in
        self._requested_to = 0  # prefaults were asked for up to here
        super().__init__(path.name, size, memoryview(self._map))

    # Durability through fdatasync on the file, not mmap.flush: on Linux msync(MS_SYNC) is a
    # vfs_fsync_range of the same file, so the pages written through the mapping are covered,
    # but CPython's mmap.flush holds the GIL for the whole msync (it froze the event loop for
    # 15-43 ms per flush under load) while os.fdatasync releases it.
    def flush(self) -> None:
        if self._dirty_to > self._dirty_from:
            _datasync(self._fd)
        super().flush()

    def flush_range(self, start: int, end: int) -> None:
        assert 0 <= start <= end <= self.size
        if end > start:
            _datasync(self._fd)

    def allocate(self, start: int, end: int) -> None:
        assert 0 <= start <= end <= self.size
        if end > start:
            _fallocate(self._fd, start, end - start, self.path)

    def _is_zero(self, start: int, size: int) -> bool:
        # Read from the file, not the mapping: the pages compared stay out of the process.
        return self.read(start, size) == _ZEROS[:size]

    def read(self, start: int, size: int) -> bytes:
        assert start >= 0 and start + size <= self.size, (start, size, self.size)
        return os.pread(self._fd, size, start)

    def prefault(self, start: int, end: int) -> None:
        # Called on the event loop: only notes the range and hands it to the worker.
        if not _populate_works:
            return
        end = min(end + _AHEAD, self.size)
        start = max(start, self._requested_to)  # nothing asked for twice
        start -= start % _PAGE  # madvise takes whole pages
        if end <= start:
            return
        populater = _the_populater()
        if populater is None:
            return
        if self._address == 0:
            self._address = populater.address(self._map)
        self._requested_to = end
        populater.submit(self, start, end)

    def settle(self) -> None:
        if _populater is not None:
            _populater.settle()

    def close(self) -> None:
        with self._populate_lock:  # the worker is not inside this mapping, and will not enter it
            self._address = 0
            self._requested_to = self.size  # and no prefault is asked for any more
        super().close()
        with contextlib.suppress(BufferError):
            self._map.close()
        os.close(self._fd)


def _fallocate(fd: int, offset: int, length: int, path: Path) -> None:
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise StoreFullError(
                errno.ENOSPC, f"no space left to allocate {length} bytes of a segment", str(path)
            ) from error
        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise


class Backend:
    """Where a store keeps its files. Paths are relative to the store root."""

    root: Path | None = None

    def create_segment(
        self, rel: PurePosixPath, size: int, *, allocate: int | None = None
    ) -> Segment:
        """A new segment of ``size`` bytes. With ``allocate``, only its first ``allocate`` bytes
        get disk blocks now (the rest is sparse until :meth:`Segment.allocate`)."""
        raise NotImplementedError

    def open_segment(self, rel: PurePosixPath) -> Segment:
        raise NotImplementedError

    def list_names(self, rel: PurePosixPath) -> list[str]:
        """Names directly under ``rel`` (files and folders), sorted; empty if it does not exist."""
        raise NotImplementedError

    def exists(self, rel: PurePosixPath) -> bool:
        raise NotImplementedError

    def remove(self, rel: PurePosixPath) -> None:
        raise NotImplementedError

    def read_bytes(self, rel: PurePosixPath) -> bytes | None:
        raise NotImplementedError

    def write_bytes(self, rel: PurePosixPath, data: bytes, *, durable: bool = True) -> None:
        """Replace a small file whole (atomically on disk: temp file, fsync, rename)."""
        raise NotImplementedError

    def size_of(self, rel: PurePosixPath) -> int:
        raise NotImplementedError


class DiskBackend(Backend):
    root: Path  # a disk backend always has one

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    @classmethod
    def read_only(cls, root: Path) -> DiskBackend:
        """A backend for reading small files only: creates nothing, not even the root."""
        backend = cls.__new__(cls)
        backend.root = Path(root)
        return backend

    def _abs(self, rel: PurePosixPath) -> Path:
        return self.root / rel

    def create_segment(
        self, rel: PurePosixPath, size: int, *, allocate: int | None = None
    ) -> Segment:
        path = self._abs(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if allocate is not None:
                os.ftruncate(fd, size)
                _fallocate(fd, 0, min(allocate, size), path)
                return _DiskSegment(path, fd, size)
            try:
                os.posix_fallocate(fd, 0, size)
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    raise StoreFullError(
                        errno.ENOSPC, f"no space left to create {size}-byte segment", str(path)
                    ) from error
                if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.ftruncate(fd, size)
            return _DiskSegment(path, fd, size)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise

    def open_segment(self, rel: PurePosixPath) -> Segment:
        path = self._abs(rel)
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise ValueError(f"{path}: empty file is not a segment")
            return _DiskSegment(path, fd, size)
        except BaseException:
            os.close(fd)
            raise

    def list_names(self, rel: PurePosixPath) -> list[str]:
        path = self._abs(rel)
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def exists(self, rel: PurePosixPath) -> bool:
        return self._abs(rel).exists()

    def remove(self, rel: PurePosixPath) -> None:
        path = self._abs(rel)
        if path.is_dir():
            for name in os.listdir(path):
                self.remove(rel / name)
            path.rmdir()
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def read_bytes(self, rel: PurePosixPath) -> bytes | None:
        try:
            return self._abs(rel).read_bytes()
        except FileNotFoundError:
            return None

    def write_bytes(self, rel: PurePosixPath, data: bytes, *, durable: bool = True) -> None:
        path = self._abs(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(path.name + ".tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)

    def size_of(self, rel: PurePosixPath) -> int:
        return self._abs(rel).stat().st_size


class MemoryBackend(Backend):
    """Keeps every file in a dict: same behaviour, nothing on disk, gone when the process ends."""

    def __init__(self) -> None:
        self._segments: dict[PurePosixPath, bytearray] = {}
        self._files: dict[PurePosixPath, bytes] = {}

    def create_segment(
        self, rel: PurePosixPath, size: int, *, allocate: int | None = None
    ) -> Segment:
        buffer = bytearray(size)
        self._segments[PurePosixPath(rel)] = buffer
        return Segment(PurePosixPath(rel).name, size, memoryview(buffer))

    def open_segment(self, rel: PurePosixPath) -> Segment:
        buffer = self._segments[PurePosixPath(rel)]
        return Segment(PurePosixPath(rel).name, len(buffer), memoryview(buffer))

    def _all(self) -> list[PurePosixPath]:
        return [*self._segments, *self._files]

    def list_names(self, rel: PurePosixPath) -> list[str]:
        rel = PurePosixPath(rel)
        depth = len(rel.parts)
        names = {
            p.parts[depth]
            for p in self._all()
            if p.parts[:depth] == rel.parts and len(p.parts) > depth
        }
        return sorted(names)

    def exists(self, rel: PurePosixPath) -> bool:
        rel = PurePosixPath(rel)
        return any(p == rel or p.parts[: len(rel.parts)] == rel.parts for p in self._all())

    def remove(self, rel: PurePosixPath) -> None:
        rel = PurePosixPath(rel)
        for table in (self._segments, self._files):
            for path in [p for p in table if p == rel or p.parts[: len(rel.parts)] == rel.parts]:
                del table[path]

    def read_bytes(self, rel: PurePosixPath) -> bytes | None:
        return self._files.get(PurePosixPath(rel))

    def write_bytes(self, rel: PurePosixPath, data: bytes, *, durable: bool = True) -> None:
        self._files[PurePosixPath(rel)] = bytes(data)

    def size_of(self, rel: PurePosixPath) -> int:
        rel = PurePosixPath(rel)
        if rel in self._segments:
            return len(self._segments[rel])
        return len(self._files[rel])
