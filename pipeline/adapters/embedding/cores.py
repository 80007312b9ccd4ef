"""The cores of one prefork worker, lent between its processes for the local model.

`memq worker` gives each of its processes a share of the cores (``EmbedderConfig.threads``).
A batch's model call is then held to that share even when the sibling processes are idle,
which they are whenever one batch is all there is to do: a backfill of 20 sessions, a burst on
a quiet stack. The worker therefore also names a file of one byte per core
(``EmbedderConfig.cores_file``). A call takes, as POSIX record locks on those bytes, the cores
no sibling holds, runs its runs of texts on that many threads, and gives them back when it ends.
A process that dies gives its locks back with it, so a killed worker strands no core.

A file of record locks rather than a counter in shared memory: a counter is not given back by a
process killed in the middle of a call.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("memq.embedding")


def cores_file(cores: int) -> Path:
    """A new file of ``cores`` bytes for one worker's processes, removed when the process that
    made it (the worker's main process) exits."""
    handle, name = tempfile.mkstemp(prefix="memq-cores-")
    os.write(handle, b"\0" * cores)
    os.close(handle)
    path = Path(name)
    atexit.register(path.unlink, missing_ok=True)
    return path


class LentCores:
    """Cores taken call by call through one file's record locks (see the module's text)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.total = 1  # the file's size, once opened
        self._fd: int | None = None  # opened on first use: after the fork, one per process
        self._lost = False  # the file could not be opened: this process keeps to its share
        self._held: set[int] = set()  # record locks do not keep a process's threads apart
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def taken(self, most: int) -> Iterator[int]:
        """Up to ``most`` cores that no other process holds, for the length of the block; the
        block is given how many (0 when the siblings hold them all)."""
        held = self._take(most)
        try:
            yield len(held)
        finally:
            self._give_back(held)

    def _take(self, most: int) -> list[int]:
        held: list[int] = []
        with self._lock:
            fd = self._opened()
            if fd is None:
                return held
            for core in range(self.total):
                if len(held) >= most:
                    break
                if core in self._held:
                    continue
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, core)
                except OSError:  # a sibling holds it
                    continue
                self._held.add(core)
                held.append(core)
        return held

    def _opened(self) -> int | None:
        """The file, opened once per process; None if it is gone (a process forked after a
        cleaner removed it from the temporary folder), and then no core is ever lent."""
        if self._fd is None and not self._lost:
            try:
                self._fd = os.open(self.path, os.O_RDWR)
                self.total = max(1, os.fstat(self._fd).st_size)
            except OSError as exc:
                self._lost = True
                log.warning(
                    "cores file %s: %s; the model keeps to this process's share", self.path, exc
                )
        return self._fd

    def _give_back(self, held: list[int]) -> None:
        with self._lock:
            for core in held:
                assert self._fd is not None
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, core)
                self._held.discard(core)
