"""A sampling thread shared by the probes that poll counters (proc, cgroup, gpu, energy, vmstat).

It samples at start, every ``interval_s``, at once when the cell's root process exits
(through a pidfd) and at stop. The exit wake-up matters for containers: the engine
removes a container's cgroup right after its init exits, so a sample taken then is
the last one that can still see the cell's counters.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable


class Sampler:
    def __init__(self, sample: Callable[[], None], interval_s: float, watch_pid: int | None = None,
                 name: str = "isobench-probe") -> None:
        self._sample = sample
        self.interval_s = interval_s
        self._watch_pid = watch_pid
        self._name = name
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1
        self._lock = threading.Lock()
        self.samples = 0
        self.errors = 0
        self.first_error: str | None = None
        #: monotonic time the watched process was seen to exit (None: not seen)
        self.exit_seen_at: float | None = None
        #: CPU seconds the sampling itself took (this thread's own time)
        self.cpu_s = 0.0

    def start(self, sample_first: bool = True) -> None:
        if sample_first:
            self.sample_now()
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def sample_now(self) -> None:
        with self._lock:
            begun = time.thread_time()
            try:
                self._sample()
                self.samples += 1
            except Exception as exc:  # a vanished process or cgroup must not end the series
                self.errors += 1
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"
            self.cpu_s += time.thread_time() - begun

    def stop(self, final_sample: bool = True) -> None:
        """End the thread (idempotent); take one last sample unless the caller does not want it."""
        thread, self._thread = self._thread, None
        if thread is not None:
            os.write(self._wake_w, b"x")
            thread.join(timeout=10)
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_r = self._wake_w = -1
            if final_sample:
                self.sample_now()

    def _open_pidfd(self) -> int | None:
        if self._watch_pid is None or not hasattr(os, "pidfd_open"):
            return None
        try:
            return os.pidfd_open(self._watch_pid)
        except OSError:
            return None

    def _loop(self) -> None:
        pidfd = self._open_pidfd()
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        next_at = time.monotonic() + self.interval_s
        try:
            while True:
                wait_ms = max(0, int((next_at - time.monotonic()) * 1000))
                ready = {fd for fd, _ in poller.poll(wait_ms)}
                if self._wake_r in ready:
                    return
                if pidfd is not None and pidfd in ready:
                    self.exit_seen_at = time.monotonic()
                    poller.unregister(pidfd)
                    os.close(pidfd)
                    pidfd = None
                    self.sample_now()
                    continue
                self.sample_now()
                next_at = max(next_at + self.interval_s, time.monotonic())
        finally:
            if pidfd is not None:
                os.close(pidfd)
