"""The simulated systems, as a plain Python loop: the reference every fast path must match.

Baseline: every write-back goes to the slow device; every read comes from it.

NVM-added system (a buffer of ``capacity`` pages in front of the slow device):
- a write-back of a resident page is rewritten in place in NVM (a hit);
- a write-back of another page is written into NVM; when the buffer is full a victim
  chosen by the policy leaves it, and a dirty victim must first be destaged to the slow
  device, which the writer waits for (a synchronous destage);
- with ``high_watermark`` < 1, whenever more than ``high_watermark × capacity`` pages are
  dirty, the policy's coldest dirty pages are destaged in the background (no foreground
  latency) until at most ``low_watermark × capacity`` are; they stay resident, clean;
- a read of a resident page is served by NVM; other reads go to the slow device and are
  not cached (the trace holds write-backs; reads only check what the buffer holds);
- when the trace ends, the pages still dirty in NVM are owed to the slow device: the result
  counts them (``dirty_at_end``, the drain) so a comparison can charge the write-through that
  the NVM system has only postponed (run.compare: ``improvement_drained``).

Devices have no queue: each access costs its device latency. That keeps the model
exact for one-pass LRU capacity sweeps (Mattson stack distances).

Policies:
- ``lru``: the victim is the page written least recently;
- ``clock``: second chance; a hit sets the page's reference bit, the hand clears bits
  until it finds a page without one (an approximation of LRU with O(1) hits);
- ``hot``: hotness-aware; the victim is the page with the fewest write-backs so far
  (ties: the least recently written), so pages rewritten all the time (Park & Bahn's
  hot dirty pages) stay in NVM even when a scan of cold pages passes through.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from isobench.nvmsim.devices import Device
from isobench.nvmsim.trace import READ, Trace

Policy = Literal["lru", "clock", "hot"]


@dataclass(frozen=True)
class SimConfig:
    capacity: int  # pages
    policy: Policy = "lru"
    high_watermark: float = 1.0  # 1.0: destage only when a dirty victim must leave
    low_watermark: float = 0.8

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError("capacity must be at least one page")
        if not 0 < self.low_watermark <= self.high_watermark <= 1:
            raise ValueError("need 0 < low_watermark <= high_watermark <= 1")

    @property
    def background(self) -> bool:
        return self.high_watermark < 1.0


@dataclass
class SimResult:
    latency_s: np.ndarray  # per event
    hits: int
    misses: int
    sync_destages: int
    background_destages: int
    slow_reads: int
    #: dirty pages still in NVM when the trace ends: the write-through a real system owes the slow
    #: device (the drain), which the per-event latencies leave out
    dirty_at_end: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def slow_writes(self) -> int:
        return self.sync_destages + self.background_destages

    def same_as(self, other: SimResult) -> bool:
        return (np.array_equal(self.latency_s, other.latency_s) and self.hits == other.hits
                and self.misses == other.misses and self.sync_destages == other.sync_destages
                and self.background_destages == other.background_destages
                and self.slow_reads == other.slow_reads and self.dirty_at_end == other.dirty_at_end)


def baseline_latency(trace: Trace, slow: Device) -> np.ndarray:
    return np.where(trace.op == READ, slow.page_read_s, slow.page_write_s).astype(np.float64)


class _Buffer:
    """Resident pages with their dirty bit, ordered for the policy."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.pages: OrderedDict[int, bool] = OrderedDict()  # page -> dirty; order: least recent first
        self.refbit: dict[int, bool] = {}
        self.count: dict[int, int] = {}
        self.clock: list[int] = []
        self.hand = 0
        self.dirty = 0

    def touch(self, page: int) -> None:
        self.count[page] = self.count.get(page, 0) + 1
        if self.config.policy == "clock":
            self.refbit[page] = True
        else:
            self.pages.move_to_end(page)

    def victim(self) -> int:
        policy = self.config.policy
        if policy == "lru":
            return next(iter(self.pages))
        if policy == "hot":
            # fewest write-backs; ties: least recently written (order of self.pages)
            return min(self.pages, key=lambda p: self.count[p])
        while True:
            page = self.clock[self.hand]
            if self.refbit[page]:
                self.refbit[page] = False
                self.hand = (self.hand + 1) % len(self.clock)
            else:
                return page

    def insert(self, page: int, slot: int | None) -> None:
        self.pages[page] = True
        self.dirty += 1
        self.count[page] = self.count.get(page, 0) + 1
        if self.config.policy == "clock":
            self.refbit[page] = False
            if slot is None:  # not full yet: frames fill in order, the hand stays
                self.clock.append(page)
            else:
                self.clock[slot] = page
                self.hand = (slot + 1) % len(self.clock)

    def remove(self, page: int) -> int | None:
        if self.pages.pop(page):
            self.dirty -= 1
        if self.config.policy == "clock":
            self.refbit.pop(page)
            return self.clock.index(page)
        return None

    def background_order(self) -> list[int]:
        """Dirty pages, coldest first, for background destaging."""
        if self.config.policy == "hot":
            return sorted((p for p, d in self.pages.items() if d), key=lambda p: self.count[p])
        if self.config.policy == "clock":
            n = len(self.clock)
            ring = [self.clock[(self.hand + i) % n] for i in range(n)]
            return [p for p in ring if self.pages[p] and not self.refbit[p]] + \
                   [p for p in ring if self.pages[p] and self.refbit[p]]
        return [p for p, d in self.pages.items() if d]


def simulate_reference(trace: Trace, config: SimConfig, nvm: Device, slow: Device) -> SimResult:
    buffer = _Buffer(config)
    latency = np.empty(len(trace), dtype=np.float64)
    hits = misses = sync = background = slow_reads = 0
    max_resident = 0
    high = config.high_watermark * config.capacity
    low = config.low_watermark * config.capacity
    for i, (page, op) in enumerate(zip(trace.page.tolist(), trace.op.tolist(), strict=True)):
        if op == READ:
            if page in buffer.pages:
                latency[i] = nvm.page_read_s
            else:
                latency[i] = slow.page_read_s
                slow_reads += 1
            continue
        if page in buffer.pages:
            hits += 1
            if not buffer.pages[page]:
                buffer.pages[page] = True
                buffer.dirty += 1
            buffer.touch(page)
            latency[i] = nvm.page_write_s
        else:
            misses += 1
            cost = nvm.page_write_s
            slot = None
            if len(buffer.pages) >= config.capacity:
                victim = buffer.victim()
                if buffer.pages[victim]:
                    cost += slow.page_write_s
                    sync += 1
                slot = buffer.remove(victim)
            buffer.insert(page, slot)
            max_resident = max(max_resident, len(buffer.pages))
            latency[i] = cost
        if config.background and buffer.dirty > high:
            for victim in buffer.background_order():
                if buffer.dirty <= low:
                    break
                buffer.pages[victim] = False
                buffer.dirty -= 1
                background += 1
    return SimResult(latency, hits, misses, sync, background, slow_reads, buffer.dirty,
                     {"max_resident": max_resident})


def summarize(latency: np.ndarray) -> dict[str, float]:
    """Mean and nearest-rank percentiles (p50, p99) of per-event latencies."""
    values, counts = np.unique(latency, return_counts=True)
    return summarize_counts(values, counts)


def summarize_counts(values: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """The same, for a distribution given as distinct values with their counts (the sweep's form)."""
    total = int(counts.sum())
    if total == 0:
        return {"mean_s": 0.0, "p50_s": 0.0, "p99_s": 0.0}
    order = np.argsort(values)
    values, counts = values[order], counts[order]
    cumulative = np.cumsum(counts)

    def quantile(q: float) -> float:  # the value at rank ceil(q*n)
        rank = max(1, int(np.ceil(q * total)))
        return float(values[np.searchsorted(cumulative, rank, side="left")])

    return {"mean_s": float((values * counts).sum() / total), "p50_s": quantile(0.50), "p99_s": quantile(0.99)}
