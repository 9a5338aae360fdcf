"""Open files under a descriptor budget: a run with thousands of datasets must work under ``ulimit -n 1024``.

FilePool        a small LRU of open files shared by every dataset (prompt readers, result
                appends); the least recently used one is closed when the pool is full
limit_error()   "too many open files" (EMFILE/ENFILE) as a one-line error about ``ulimit -n``,
                so the limit is not blamed on whichever input file happened to hit it

and the two ways a file is opened at all, so that no hostile file can hang a run or redirect its writes:

open_output()   a file of an output folder (results, errors, partial turns, settings, locks, logs):
                never through a symbolic link (O_NOFOLLOW), and only a regular file; a link or a
                FIFO/device there is refused with one line (exit 2) before anything is read or written
open_input()    an input file (prompts, chat template, budget): links are followed, but what they
                lead to must be a regular file; a FIFO never blocks the open (O_NONBLOCK), a device
                such as /dev/zero is refused instead of read forever
bounded_lines() the lines of a file, each read with a bound: a line over it is passed over in chunks
                and reported by its length, never held in memory whole
create_new()    a temporary file for an atomic rewrite, made fresh (a stale one, or a link planted
                under its name, is removed first, never written through)
"""

from __future__ import annotations

import errno
import os
import resource
import stat
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, Generic, TypeVar, cast

from synthgen.errors import UsageError

T = TypeVar("T")


def soft_limit() -> int:
    """The process's open-file limit (``ulimit -n``)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def pool_size(share: int) -> int:
    """A pool's capacity: 1/``share`` of the open-file limit, between 4 and 256 files."""
    limit = soft_limit()
    if limit == resource.RLIM_INFINITY:
        return 256
    return max(4, min(256, limit // share))


def limit_error(exc: OSError, path: object) -> UsageError | None:
    """The one-line error for an open that failed on the open-file limit; None for any other failure."""
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return None
    which = "this process" if exc.errno == errno.EMFILE else "the system"
    return UsageError(
        f"{path}: cannot open: too many open files ({which}; ulimit -n is {soft_limit()}); "
        "raise the limit (e.g. ulimit -n 65536) and rerun to resume"
    )


class FilePool(Generic[T]):
    """Up to ``capacity`` open files by key; ``use`` opens on a miss and closes the least recently used.

    A file is used under the pool's lock, so a reader thread never sees its file closed by another."""

    def __init__(self, capacity: int, close: Callable[[T], None]):
        self.capacity = capacity
        self._close = close
        self._files: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.RLock()

    @contextmanager
    def use(self, key: Hashable, opener: Callable[[], T]) -> Iterator[T]:
        with self._lock:
            handle = self._files.get(key)
            if handle is None:
                while len(self._files) >= self.capacity:
                    _, oldest = self._files.popitem(last=False)
                    self._close(oldest)
                handle = self._files[key] = opener()
            else:
                self._files.move_to_end(key)
            yield handle

    def release(self, key: Hashable) -> None:
        """Close the file of ``key`` if it is open."""
        with self._lock:
            handle = self._files.pop(key, None)
            if handle is not None:
                self._close(handle)

    def __len__(self) -> int:
        return len(self._files)


# --- opening files ------------------------------------------------------------------------------------
_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def link_error(path: str | os.PathLike[str]) -> UsageError:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return UsageError(
        f"{path}: is a symbolic link{target}; files of an output folder are never written through a link: "
        f"replace it with the file itself (or remove it) and rerun"
    )


def not_regular_error(path: str | os.PathLike[str], mode: int, what: str) -> UsageError:
    return UsageError(f"{path}: is {_kind(mode)}, not a regular file; {what}")


def open_output(path: str | os.PathLike[str], flags: int, mode: int = 0o644) -> int:
    """``os.open`` of a file of an output folder: not through a symbolic link, only a regular file.

    A folder raises IsADirectoryError (the callers name it), a link or any other non-regular file a
    one-line UsageError; every other failure is the OSError of the open."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        # ELOOP: the last component is a link; ENXIO: a FIFO without a reader, opened for writing.
        try:
            st = os.lstat(path)
        except OSError:
            raise exc from None
        if stat.S_ISLNK(st.st_mode):
            raise link_error(path) from None
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            raise not_regular_error(path, st.st_mode, "move it aside and rerun") from None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise not_regular_error(path, st.st_mode, "move it aside and rerun")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_output_file(path: str | os.PathLike[str], flags: int, fmode: str) -> BinaryIO:
    """``open_output`` as a binary file object (``fmode`` "rb", "ab" or "wb", to match ``flags``)."""
    return cast(BinaryIO, os.fdopen(open_output(path, flags), fmode))


def create_new(path: str | os.PathLike[str]) -> BinaryIO:
    """A fresh file at ``path`` for writing (the temporary file of an atomic rewrite): whatever is
    there (a stale one from a killed run, a link) is removed first, and the file is created new."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        pass  # the create below names it
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return cast(BinaryIO, os.fdopen(fd, "wb"))


def open_input(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """An input file for reading: links are followed, but only to a regular file. A FIFO does not
    block the open and is refused like a device; ``what`` completes the one-line error (the fix)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(st.st_mode):
            raise not_regular_error(path, st.st_mode, what)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return cast(BinaryIO, os.fdopen(fd, "rb"))


def read_input(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """The whole of a small input file (a chat template, a budget file), at most ``limit`` bytes."""
    with open_input(path, what) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{path}: is over {limit >> 20} MiB; {what}")
    return data


@dataclass(frozen=True, slots=True)
class Oversize:
    """A line longer than the bound of ``bounded_lines``: only its length (newline included) is kept."""

    size: int


def bounded_lines(fh: BinaryIO, limit: int, chunk: int = 1 << 20) -> Iterator[bytes | Oversize]:
    """The lines of ``fh`` as ``iter(fh)`` gives them, except that a line longer than ``limit`` bytes
    is read past in ``chunk``-sized pieces and given as its ``Oversize``: memory stays bounded on a
    file without newlines (a sparse file, a disk image)."""
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit:
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n"):
            line = fh.readline(chunk)
            if not line:
                break
            size += len(line)
        yield Oversize(size)
