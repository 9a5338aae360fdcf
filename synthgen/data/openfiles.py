"""Open files under a descriptor budget: a run with thousands of datasets must work under ``ulimit -n 1024``.

FilePool        a small LRU of open files shared by every dataset (prompt readers, result
                appends); the least recently used one is closed when the pool is full
limit_error()   "too many open files" (EMFILE/ENFILE) as a one-line error about ``ulimit -n``,
                so the limit is not blamed on whichever input file happened to hit it
"""

from __future__ import annotations

import errno
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

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
