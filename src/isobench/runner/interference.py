"""Interference accounting: what else ran on a cell's cores while it measured.

Two snapshots bracket the cell's measured window (the worker's ``run_start`` record and its
``done`` record). Between them, on the cell's cores:

- ``steal``: time the hypervisor gave those vCPUs to someone else (``/proc/stat``);
- ``other``: CPU time spent on those cores by anything but the cell: the cores' busy time
  (``/proc/stat``) less the cell's own CPU time on them (its cgroup's ``cpuacct.usage_percpu``);
- ``runq``: the mean number of runnable tasks per core, running or waiting: from
  ``/proc/schedstat`` (the cell's cores' run queues: CPU time plus wait time, over the
  window) where the kernel has schedstats; otherwise (as on these VMs) host-wide, from
  ``procs_running`` in ``/proc/stat`` sampled every 50 ms over the window, per core.

The cell's own CPU time over the window (``cpuacct.usage``; on pure cgroup v2, ``usage_usec`` of
``cpu.stat``) divided by its items is the
``cpu.per_item`` metric: CPU seconds per item, beside wall seconds per item. A cell whose
cores lost more than the study's ``contamination_threshold`` of their time to steal or to
other tasks is flagged contaminated; the runner may re-run it (runner/study.py), unless both
members of a pair that trades cores lost comparable time (``shared_disturbance``): the pairing
cancels what lands on both alike, and a re-run would meet the same neighbour again.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USER_HZ = os.sysconf("SC_CLK_TCK")
PROC_STAT = Path("/proc/stat")
PROC_SCHEDSTAT = Path("/proc/schedstat")
#: windows shorter than this are never flagged: tick-granular counters cannot judge them
MIN_JUDGED_WINDOW_S = 0.5


@dataclass
class Snapshot:
    at: float
    #: cpu -> (busy jiffies: user+nice+system+irq+softirq, steal jiffies)
    stat: dict[int, tuple[int, int]]
    #: cpu -> (run-queue CPU time ns, run-queue wait ns)
    sched: dict[int, tuple[int, int]]
    #: the cell's cgroup: total CPU ns and CPU ns per core (None: no cgroup to read)
    cell_ns: int | None = None
    cell_percpu_ns: list[int] = field(default_factory=list)
    #: the CPU ns per core of the cells that share these cores by design (a duet's partner, when the
    #: pair trades cores): their time is not "other" either
    peer_percpu_ns: list[int] = field(default_factory=list)
    #: the cell's CFS throttled time so far, ns (cpu.stat; None: no cpu controller to read)
    throttled_ns: int | None = None
    #: thread id -> its context switches so far (voluntary and not), every thread of the cell's
    #: cgroup: a sandbox's own threads (gVisor's Sentry) included; None: no cgroup to list
    switches: dict[int, int] | None = None


def read_stat(text: str | None = None) -> dict[int, tuple[int, int]]:
    text = PROC_STAT.read_text() if text is None else text
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        values = [int(v) for v in rest.split()]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
        found[int(name[3:])] = (user + nice + system + irq + softirq, steal)
    return found


def read_schedstat(text: str | None = None) -> dict[int, tuple[int, int]]:
    try:
        text = PROC_SCHEDSTAT.read_text() if text is None else text
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and len(parts) >= 9:
            # cpu<N> yld_count legacy sched_count sched_goidle ttwu_count ttwu_local rq_cpu_time run_delay pcount
            found[int(parts[0][3:])] = (int(parts[7]), int(parts[8]))
    return found


#: each cell group's last CPU reading, by its cpuacct directory. A duet member whose window ends after
#: its partner's reads the partner's group when the partner has ended and its group may be gone: it then
#: gets the reading the partner's own end of window just took (its final CPU time, but for its exit),
#: instead of none, which had judged that member on steal alone while the other was judged in full,
#: so a neighbour both met read as one-sided and the pair was re-run.
_LAST_READ: OrderedDict[Path, tuple[int, list[int]]] = OrderedDict()
_LAST_READ_KEPT = 64
_LAST_READ_LOCK = threading.Lock()


def _cell_cpu(cgroups: dict[str, Path]) -> tuple[int | None, list[int]]:
    directory = cgroups.get("cpuacct")
    if directory is None:
        return _cell_cpu_v2(cgroups.get("unified")), []
    try:
        total = int((directory / "cpuacct.usage").read_text())
        percpu = [int(v) for v in (directory / "cpuacct.usage_percpu").read_text().split()]
    except (OSError, ValueError):
        with _LAST_READ_LOCK:
            last = _LAST_READ.get(directory)
        return last if last is not None else (None, [])
    with _LAST_READ_LOCK:
        _LAST_READ[directory] = (total, percpu)
        _LAST_READ.move_to_end(directory)
        while len(_LAST_READ) > _LAST_READ_KEPT:
            _LAST_READ.popitem(last=False)
    return total, percpu


def _cell_cpu_v2(directory: Path | None) -> int | None:
    """The cell's CPU ns so far from a cgroup v2 group of its own (``cpu.stat``'s ``usage_usec``,
    kept by every v2 group, controllers or not), where there is no v1 ``cpuacct``: a host on pure
    cgroup v2 (the lent GPU machines) then has ``cpu.per_item`` too. v2 keeps no per-core split,
    so such a cell has no ``other`` CPU time. The hierarchy's root (no ``cgroup.type``) is the
    whole host's, never a cell's."""
    if directory is None or not (directory / "cgroup.type").exists():
        return None
    try:
        fields = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines() if " " in line)
        return int(fields["usage_usec"]) * 1000
    except (OSError, ValueError, KeyError):
        return None


def _throttled_ns(cgroups: dict[str, Path]) -> int | None:
    """CFS throttled time of the cell's group so far: v1 ``throttled_time`` (ns), v2 ``throttled_usec``."""
    directory = cgroups.get("cpu") or cgroups.get("unified")
    if directory is None:
        return None
    try:
        fields = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines() if " " in line)
    except (OSError, ValueError):
        return None
    if "throttled_time" in fields:
        return int(fields["throttled_time"])
    return int(fields["throttled_usec"]) * 1000 if "throttled_usec" in fields else None


def _switches(cgroups: dict[str, Path]) -> dict[int, int] | None:
    """Context switches so far of each thread in the cell's cgroup (``tasks`` in v1,
    ``cgroup.threads`` in v2); a thread that ends before it is read is left out."""
    directory = cgroups.get("cpuacct") or cgroups.get("cpu") or cgroups.get("unified")
    if directory is None:
        return None
    listing = directory / ("tasks" if (directory / "tasks").exists() else "cgroup.threads")
    try:
        tids = [int(t) for t in listing.read_text().split()]
    except (OSError, ValueError):
        return None
    found = {}
    for tid in tids:
        try:
            text = Path(f"/proc/{tid}/status").read_text()
        except OSError:
            continue
        found[tid] = sum(int(line.split()[1]) for line in text.splitlines() if "ctxt_switches:" in line)
    return found


def snapshot(cgroups: dict[str, Path] | None, peers: list[dict[str, Path]] | None = None) -> Snapshot:
    total, percpu = _cell_cpu(cgroups or {})
    peer: list[int] = []
    for groups in peers or []:
        _, theirs = _cell_cpu(groups)
        if not peer:
            peer = theirs
        elif len(theirs) == len(peer):
            peer = [a + b for a, b in zip(peer, theirs, strict=True)]
    return Snapshot(time.monotonic(), read_stat(), read_schedstat(), total, percpu, peer,
                    _throttled_ns(cgroups or {}), _switches(cgroups or {}))


def account(start: Snapshot, end: Snapshot, cores: list[int], items: int,
            threshold: float, sampled_runq: float | None = None, co_tenants: int = 0) -> dict[str, Any]:
    """What happened on ``cores`` between two snapshots, and whether it contaminates the cell.

    A tenant of a group shares its cores with ``co_tenants`` cells started beside it on purpose:
    their CPU time is what the study measures, not contamination, so only steal counts then."""
    window = end.at - start.at
    if window <= 0:
        return {}
    jiffy = 1.0 / USER_HZ
    busy = sum(end.stat.get(c, (0, 0))[0] - start.stat.get(c, (0, 0))[0] for c in cores) * jiffy
    steal = sum(end.stat.get(c, (0, 0))[1] - start.stat.get(c, (0, 0))[1] for c in cores) * jiffy
    result: dict[str, Any] = {"window_s": window, "cores": len(cores), "steal_s": steal}
    if start.cell_ns is not None and end.cell_ns is not None:
        cell_cpu = (end.cell_ns - start.cell_ns) / 1e9
        result["cell_cpu_s"] = cell_cpu
        if items:
            result["cpu_per_item_s"] = cell_cpu / items
        if start.cell_percpu_ns and len(start.cell_percpu_ns) == len(end.cell_percpu_ns):
            on_cores = sum(end.cell_percpu_ns[c] - start.cell_percpu_ns[c]
                           for c in cores if c < len(end.cell_percpu_ns)) / 1e9
            if start.peer_percpu_ns and len(start.peer_percpu_ns) == len(end.peer_percpu_ns):
                on_cores += sum(end.peer_percpu_ns[c] - start.peer_percpu_ns[c]
                                for c in cores if c < len(end.peer_percpu_ns)) / 1e9
                co_tenants = 0  # the co-tenants' time is known and taken out: judge the rest in full
            # /proc/stat counts in ticks: small negative differences are rounding, not work
            result["other_cpu_s"] = max(0.0, busy - on_cores)
    if start.throttled_ns is not None and end.throttled_ns is not None and items:
        result["throttled_per_item_s"] = max(0, end.throttled_ns - start.throttled_ns) / 1e9 / items
    if start.switches is not None and end.switches and items:  # a thread born in the window counts from 0
        switched = sum(count - start.switches.get(tid, 0) for tid, count in end.switches.items())
        result["switches_per_item"] = max(0, switched) / items
    if sampled_runq is not None:
        result["runq"] = sampled_runq
        result["runq_source"] = "procs_running, host-wide"
    if start.sched and end.sched:
        running = sum(end.sched.get(c, (0, 0))[0] - start.sched.get(c, (0, 0))[0] for c in cores)
        waiting = sum(end.sched.get(c, (0, 0))[1] - start.sched.get(c, (0, 0))[1] for c in cores)
        result["runq"] = (running + waiting) / 1e9 / (window * len(cores))
        result["runq_wait_s"] = waiting / 1e9
        result["runq_source"] = "schedstat, the cell's cores"
    lost = (steal + result.get("other_cpu_s", 0.0)) / (window * len(cores))
    result["lost_share"] = lost
    if co_tenants:
        lost = steal / (window * len(cores))
        result["judged_on"] = f"steal only: {co_tenants} co-tenant(s) share these cores by design"
    result["judged_share"] = lost  # what the threshold was applied to (a pair's members are compared on it)
    # /proc/stat counts in ticks (10 ms): a shorter window cannot tell a neighbour from rounding
    result["contaminated"] = lost > threshold and window >= MIN_JUDGED_WINDOW_S
    result["kind"] = "steal" if co_tenants or steal > result.get("other_cpu_s", 0.0) else "other tasks"
    if window < MIN_JUDGED_WINDOW_S:
        result["note"] = f"window under {MIN_JUDGED_WINDOW_S:g} s: too short to judge contamination"
    if result["contaminated"]:
        result["reason"] = (f"{lost:.0%} of the cell's core time went elsewhere (steal {steal:.2f} s, other "
                            f"tasks {result.get('other_cpu_s', 0.0):.2f} s over {window:.2f} s), above the "
                            f"{threshold:.0%} threshold")
    return result


#: a trading pair's members must have measured at once for at least this share of the longer window
#: (runner/duet.py ``overlap``): else each saw other moments, and a passing disturbance may have hit one
MIN_SHARED_OVERLAP = 0.5
SHARED_REASON = "shared by both members of a trading pair: cancelled by the pairing"


def _traded(duet: dict[str, Any]) -> bool:
    trade = duet.get("trade")
    return isinstance(trade, dict) and bool(trade.get("trades")) and not trade.get("problem")


def shared_disturbance(accounts: list[dict[str, Any]], duets: list[dict[str, Any]], threshold: float) -> str | None:
    """Why a flagged duet pair's disturbance is one that both members met alike, so that the pair's
    ratio cancels it; None when it is not (a fixed-sides pair, a lone cell, or one member hit).

    Shared means: the pair traded cores while it ran (then each member spends a like share of the
    time on each of the pair's cores, and a neighbour on either core lands on both), its members
    measured at once for most of their windows, and the shares of core time they lost differ by no
    more than ``threshold``. That difference is the part of the disturbance that hit one member
    only, which the ratio does not cancel; judging it by the threshold a lone cell is judged by
    re-runs a pair exactly when its one-sided part alone would have flagged a cell."""
    if len(accounts) != 2 or len(duets) != 2 or not any(a.get("contaminated") for a in accounts):
        return None
    shares = [a.get("judged_share", a.get("lost_share")) for a in accounts]
    if not all(isinstance(s, int | float) for s in shares) or not all(_traded(d) for d in duets):
        return None
    together = duets[0].get("overlap")
    if not isinstance(together, int | float) or together < MIN_SHARED_OVERLAP:
        return None
    low, high = sorted(shares)  # type: ignore[type-var]
    if high - low > threshold:
        return None
    return (f"{SHARED_REASON} (they lost {shares[0]:.0%} and {shares[1]:.0%} of their cores' time, "
            f"within {threshold:.0%} of each other)")


def metrics(accounting: dict[str, Any]) -> list[tuple[str, float, str]]:
    """The accounting as stored metrics."""
    rows = []
    if "cpu_per_item_s" in accounting:
        rows.append(("cpu.per_item", accounting["cpu_per_item_s"], "s"))
    if "throttled_per_item_s" in accounting:
        rows.append(("cpu.throttled_per_item", accounting["throttled_per_item_s"], "s"))
    if "switches_per_item" in accounting:
        rows.append(("cpu.switches_per_item", accounting["switches_per_item"], "switches"))
    for key, unit in (("steal_s", "s"), ("other_cpu_s", "s"), ("runq", "tasks"), ("lost_share", "")):
        if key in accounting:
            rows.append((f"interference.{key.removesuffix('_s')}", float(accounting[key]), unit))
    return rows


def procs_running() -> int:
    with PROC_STAT.open() as handle:
        for line in handle:
            if line.startswith("procs_running"):
                return int(line.split()[1])
    return 0


class _RunqSampler(threading.Thread):
    """Samples ``procs_running`` while the window is open (kernels without schedstats)."""

    PERIOD_S = 0.05

    def __init__(self) -> None:
        super().__init__(daemon=True, name="runq-sampler")
        self.stopping = threading.Event()
        self.samples: list[int] = []

    def run(self) -> None:
        while not self.stopping.wait(self.PERIOD_S):
            try:
                self.samples.append(procs_running())
            except (OSError, ValueError):
                return


class Window:
    """The measured window of one cell: snapshots taken when the worker says so."""

    def __init__(self, cores: list[int], threshold: float, co_tenants: int = 0) -> None:
        self.cores = cores
        self.threshold = threshold
        self.co_tenants = co_tenants
        self.cgroups: dict[str, Path] | None = None
        #: the cgroups of cells sharing these cores by design (a duet partner trading cores with it)
        self.peers: Callable[[], list[dict[str, Path]]] | None = None
        self.start: Snapshot | None = None
        self.end: Snapshot | None = None
        #: the measured window on the runner's monotonic clock (a duet's members are compared on it)
        self.opened_at: float | None = None
        self.closed_at: float | None = None
        self._sampler: _RunqSampler | None = None

    def mark(self, kind: str) -> None:
        """Called from the record reader on ``run_start`` and ``done``; never raises."""
        try:
            if kind == "run_start" and self.start is None:
                self.opened_at = time.monotonic()
                self.start = snapshot(self.cgroups, self.peers() if self.peers else None)
                if not self.start.sched:
                    self._sampler = _RunqSampler()
                    self._sampler.start()
            elif kind == "done" and self.start is not None and self.end is None:
                self.closed_at = time.monotonic()
                self.end = snapshot(self.cgroups, self.peers() if self.peers else None)
                self.close()
        except Exception:  # accounting must never break the record channel
            pass

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.stopping.set()

    def result(self, items: int) -> dict[str, Any]:
        self.close()
        if self.start is None or self.end is None:
            return {}
        samples = self._sampler.samples if self._sampler is not None else []
        host_cores = len(self.start.stat) or 1
        runq = sum(samples) / len(samples) / host_cores if samples else None
        return account(self.start, self.end, self.cores, items, self.threshold, runq, self.co_tenants)
