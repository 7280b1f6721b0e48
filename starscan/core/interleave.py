"""Work items read on a few threads at once, their results handed to one consumer through one
bounded queue: the BE's and a direct reader's row groups decoded side by side
(starscan.arrow.read), and the client's tablets read from several BEs and files at once
(starscan.client.reader).

What both need, written once:

- **Bounded memory.** At most ``threads x ahead`` results wait in the queue; a thread with
  a result waits while the queue is full, so a slow consumer slows the reads, never grows
  them.
- **Order where it matters.** Items are taken in the order given, each when a thread is
  free (opening a file or a scanner happens then, not all at once); one item's results stay
  in order, those of different items interleave as they come.
- **The first error wins.** An item's error (or the items' own, when taking the next one
  fails) is raised to the consumer before any further result, and stops the other items.
- **Nothing left running.** ``stop()`` (the consumer is done, failed or dropped the
  results) ends every item at its next result, and the item's iterator is closed (its
  scanner, its file). The threads are daemons, so an unfinished read never keeps a program
  from exiting; at exit, the reads still running are stopped and given ``EXIT_WAIT_S`` to
  leave, because a daemon thread still inside pyarrow's C++ code when the interpreter
  finalizes is ended there by force and the process aborts ("terminate called without an
  active exception").
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: How long the program's exit waits for the threads of reads still running.
EXIT_WAIT_S = 2.0

#: How often a waiting thread or consumer looks whether the read was stopped.
_POLL_S = 0.1

_LIVE: weakref.WeakSet[Interleaved[Any, Any]] = weakref.WeakSet()


class Interleaved(Generic[T, R]):
    """``read(item)`` for each of ``items`` on up to ``threads`` daemon threads named
    ``name``-0, -1, ...; the results come out of ``next()``, or of iterating, as they come."""

    def __init__(self, items: Iterator[T], read: Callable[[T], Iterator[R]], threads: int, ahead: int = 2,
                 name: str = "starscan-read"):
        self._items, self._read, self._name = items, read, name
        self._threads_wanted = max(1, threads)
        self._queue: queue.Queue[R] = queue.Queue(maxsize=self._threads_wanted * max(1, ahead))
        self._take = threading.Lock()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._finished = threading.Event()  # every thread has left
        self._running = 0
        self.error: BaseException | None = None
        self.threads: list[threading.Thread] = []

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> None:
        if self.threads:
            return
        self.threads = [threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
                        for i in range(self._threads_wanted)]
        self._running = len(self.threads)
        _LIVE.add(self)
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        """End every item at its next result (idempotent; also when the consumer fails)."""
        self._stopped.set()

    def next(self) -> R | None:
        """The next result, None when every item is read; the first error of any item is
        raised (and stops the others)."""
        self.start()
        while True:
            if self.error is not None:
                self.stop()
                raise self.error
            try:
                return self._queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
            if self._finished.is_set() and self._queue.empty():
                if self.error is not None:
                    self.stop()
                    raise self.error
                return None

    def __iter__(self) -> Iterator[R]:
        try:
            while (result := self.next()) is not None:
                yield result
        finally:
            self.stop()

    def _work(self) -> None:
        try:
            while not self._stopped.is_set():
                with self._take:
                    item = next(self._items, _NONE)
                if item is _NONE or self._stopped.is_set():
                    break
                results = self._read(item)
                try:
                    for result in results:
                        if not self._put(result):
                            return
                finally:
                    close = getattr(results, "close", None)
                    if close is not None:
                        close()  # the item's scanner or file, when it stopped early
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, who raises it
            with self._lock:
                if self.error is None:
                    self.error = exc
            self.stop()
        finally:
            with self._lock:
                self._running -= 1
                if self._running == 0:
                    self._finished.set()

    def _put(self, result: R) -> bool:
        """Queue a result, waiting while the queue is full; False once the read is stopped."""
        while not self._stopped.is_set():
            try:
                self._queue.put(result, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False


_NONE: Any = object()


@atexit.register
def _stop_at_exit() -> None:
    """Stop the reads still running when the program ends and give their threads a moment
    to leave (see the module's docstring); a thread that does not within ``EXIT_WAIT_S`` is
    left."""
    reads = list(_LIVE)
    for read in reads:
        read.stop()
    deadline = time.monotonic() + EXIT_WAIT_S
    for read in reads:
        for thread in read.threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
