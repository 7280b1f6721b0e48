"""The processes a workload runs in, measured: peak resident memory of a process tree
(``PeakRSS``), Spark's driver JVM (``jvm_process``) and CPU seconds (``cpu_seconds``), by
psutil. Used by the reliability workloads here and by the benchmarks (bench/common.py)."""

from __future__ import annotations

import os
import sys
import threading
import time

import psutil


def log(msg: str) -> None:
    """A workload's progress line on stderr, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class PeakRSS:
    """Peak RSS of a process tree, sampled every ``interval_s`` by a daemon thread.

    ``peaks`` maps a label to the peak RSS in bytes: ``root`` (the process itself, by default
    this Python process), ``jvm`` (the largest child named ``java``: Spark's driver JVM),
    ``tree`` (the sum over the whole tree at one instant) and any labels given to ``label(pid, name)``
    (e.g. a client worker process). Use as a context manager.
    """

    def __init__(self, pid: int | None = None, interval_s: float = 0.05):
        self.root = psutil.Process(pid or os.getpid())
        self.interval_s = interval_s
        self.peaks: dict[str, int] = {}
        self._labels: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples = 0

    def label(self, pid: int, name: str) -> None:
        self._labels[pid] = name

    def _bump(self, key: str, value: int) -> None:
        if value > self.peaks.get(key, 0):
            self.peaks[key] = value

    def sample(self) -> None:
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:
            return
        total = 0
        for proc in procs:
            try:
                rss = proc.memory_info().rss
                name = proc.name()
            except psutil.Error:
                continue
            total += rss
            if proc.pid == self.root.pid:
                self._bump("root", rss)
            elif proc.pid in self._labels:
                self._bump(self._labels[proc.pid], rss)
            elif name == "java":
                self._bump("jvm", rss)
        self._bump("tree", total)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def start(self) -> PeakRSS:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="peak-rss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        return dict(self.peaks)

    def __enter__(self) -> PeakRSS:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def jvm_process(pid: int | None = None) -> psutil.Process | None:
    """Spark's driver JVM: the child process named ``java`` of this process."""
    try:
        for proc in psutil.Process(pid or os.getpid()).children(recursive=True):
            if proc.name() == "java":
                return proc
    except psutil.Error:
        pass
    return None


def cpu_seconds(procs) -> float:
    total = 0.0
    for proc in procs:
        if proc is None:
            continue
        try:
            t = proc.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total
