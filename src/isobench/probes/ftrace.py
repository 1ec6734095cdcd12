"""ftrace probe: write-backs with their reasons, dirty pages, block requests, page faults and
syscalls of one cell, from private tracefs instances (see ``tracefs.py``).

Attribution. Events carry the kernel task id. The cell's tasks are the ones sampled during
the cell (``ProbeTarget.pids()`` and their threads) plus every task they spawned
(``task_newtask``). Flusher threads (kworkers) write back on behalf of everybody: a
write-back call (``writeback_start`` .. ``writeback_written`` on one kworker) belongs to the
cell when it writes an inode the cell dirtied, and so do the block requests that kworker
issued inside that call. A page's write-back is the first ``writeback_single_inode`` of its
inode after the page was dirtied: in a kworker it has the call's reason, in the cell's own
context (fsync) the reason is ``sync``.

Device-wide. The flusher's calls counted without the cell's filter, on the devices the cell
wrote to (``device_writebacks``, their reasons and intervals): whoever dirtied the pages, the
engine's own writes included (a container's json-file log, overlay and containerd metadata),
which the cell's own counts never see.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.ftrace_parse import CODE, REASONS, RWBS_BITS, Events
from isobench.probes.tracefs import (
    DEFAULT_TRACE_BYTES,
    CellTrace,
    DirtyBackgroundKnob,
    DirtyExpireKnob,
    DirtyWritebackKnob,
    missing_events,
    sweep_stale,
    tracefs_problem,
)

WRITEBACK_EVENTS = ["writeback/writeback_start", "writeback/writeback_written", "writeback/writeback_dirty_folio",
                    "writeback/writeback_single_inode_start", "writeback/writeback_single_inode", "task/task_newtask",
                    "filemap/mm_filemap_add_to_page_cache"]
BLOCK_EVENTS = ["block/block_rq_insert", "block/block_rq_issue", "block/block_rq_complete",
                "block/block_bio_backmerge", "block/block_bio_frontmerge", "block/block_bio_queue"]
BUFFER_EVENTS = ["block/block_touch_buffer", "block/block_dirty_buffer"]
PAGE_FAULT_EVENTS = ["exceptions/page_fault_user"]
SYSCALL_EVENTS = ["raw_syscalls/sys_enter"]
SYNC = REASONS.index("sync")
#: ring buffer per CPU above which a study must say `large_buffer: true`: it is pinned kernel
#: memory, times every CPU of the host
BUFFER_KB_CAP = 64 * 1024


class FtraceSettings(ProbeSettings):
    buffer_kb: int = Field(8192, ge=64, le=1 << 20, description="ring buffer per CPU, KiB")
    block: bool = Field(True, description="block request insert/issue/complete and bio merges")
    buffers: bool = Field(False, description="metadata buffer touch/dirty events (metrics buffers_touched, "
                                             "buffers_dirtied); off: most of the host-wide events")
    page_faults: bool = Field(True, description="user page faults of the cell's tasks")
    syscalls: bool = Field(True, description="syscall entries of the cell's tasks")
    dirty_background_bytes: int | None = Field(
        None, ge=4096, description="lower vm.dirty_background_bytes for the cell (restored afterwards), "
                                   "so background write-backs happen on a large-memory host")
    dirty_expire_s: float | None = Field(
        None, ge=0.01, le=3600, description="lower vm.dirty_expire_centisecs for the cell (restored afterwards): "
                                            "dirty pages this old go out as periodic write-backs (default 30 s)")
    dirty_writeback_s: float | None = Field(
        None, ge=0.01, le=3600, description="lower vm.dirty_writeback_centisecs for the cell (restored afterwards): "
                                            "the flusher's periodic wake-up (default 5 s)")
    sample_interval_s: float = Field(0.2, gt=0, le=10, description="how often the cell's tasks are listed")
    large_buffer: bool = Field(False, description=f"allow buffer_kb above {BUFFER_KB_CAP} KiB per CPU")
    max_trace_mb: int = Field(DEFAULT_TRACE_BYTES >> 20, ge=1, le=1 << 20,
                              description="each trace file in /dev/shm (memory) is cut at this size, MiB")

    @model_validator(mode="after")
    def _buffer_cap(self) -> FtraceSettings:
        if self.buffer_kb > BUFFER_KB_CAP and not self.large_buffer:
            raise ValueError(f"buffer_kb {self.buffer_kb} KiB per CPU is above the {BUFFER_KB_CAP} KiB cap (kernel "
                             "memory on every CPU); fix: lower buffer_kb, or set probes.ftrace.large_buffer: true")
        return self


@PROBES.register("ftrace")
class FtraceProbe(Probe):
    description = ("kernel trace: write-backs by reason and interval, dirty pages, block requests, "
                   "page faults, syscalls (private tracefs instance)")
    Settings = FtraceSettings

    def __init__(self, settings: ProbeSettings) -> None:
        super().__init__(settings)
        self.settings: FtraceSettings = settings  # type: ignore[assignment]
        self.trace: CellTrace | None = None
        self.knobs: list[DirtyBackgroundKnob] = []

    @classmethod
    def check(cls) -> ProbeCheck:
        problem = tracefs_problem()
        if problem:
            return ProbeCheck(False, problem)
        wanted = WRITEBACK_EVENTS + BLOCK_EVENTS + BUFFER_EVENTS + PAGE_FAULT_EVENTS + SYSCALL_EVENTS
        missing = missing_events(wanted)
        return ProbeCheck(True, partial={event: "event not in this kernel" for event in missing})

    def start(self, target: ProbeTarget) -> None:
        s = self.settings
        host = WRITEBACK_EVENTS + (BLOCK_EVENTS if s.block else []) + (BUFFER_EVENTS if s.buffers else [])
        cell = (PAGE_FAULT_EVENTS if s.page_faults else []) + (SYSCALL_EVENTS if s.syscalls else [])
        missing = set(missing_events(host + cell))
        # the cell's page faults and syscalls, nearly all of the volume, are read as binary pages
        self.trace = CellTrace("ft", [e for e in host if e not in missing], [e for e in cell if e not in missing],
                               s.buffer_kb, s.sample_interval_s, max_bytes=s.max_trace_mb << 20, raw_cell=True)
        if s.dirty_background_bytes:
            self.knobs.append(DirtyBackgroundKnob(s.dirty_background_bytes))
        if s.dirty_expire_s:
            self.knobs.append(DirtyExpireKnob(s.dirty_expire_s))
        if s.dirty_writeback_s:
            self.knobs.append(DirtyWritebackKnob(s.dirty_writeback_s))
        try:
            for knob in self.knobs:
                knob.apply()
        except BaseException:
            self.abort()
            raise
        try:
            self.trace.start(target)
        except BaseException:
            self.abort()
            raise

    def stop(self) -> ProbeResult:
        assert self.trace is not None
        trace = self.trace
        steps: dict[str, float] = {}  # what the probe's own end cost, step by step (its overhead)
        began = time.perf_counter()
        trace.stop()
        steps["stop_trace"] = time.perf_counter() - began
        for knob in self.knobs:
            knob.restore()
        steps["restore_knobs"] = time.perf_counter() - began - sum(steps.values())
        try:
            host = trace.host.read_events() if trace.host else None
            cell = trace.cell.read_events() if trace.cell else None
            steps["parse"] = time.perf_counter() - began - sum(steps.values())
            assert trace.sampler is not None
            result = analyse(host, cell, trace.sampler.tgid, trace.lost(), buffers=self.settings.buffers)
            steps["analyse"] = time.perf_counter() - began - sum(steps.values())
            result.info["stop_steps_s"] = {name: round(value, 3) for name, value in steps.items()}
            result.info["thread_cpu_s"] = round(trace.thread_cpu_s(), 3)
            result.info["instances"] = [i.name for i in trace.instances()]
            result.info["trace_bytes"] = sum(i.trace_file.stat().st_size for i in trace.instances()
                                             if i.trace_file.exists())
            result.info["clock"] = "CLOCK_MONOTONIC seconds (time_s columns)"
            if trace.lost().get("truncated"):
                result.info["truncated"] = (f"a trace file reached {self.settings.max_trace_mb} MiB and was cut there: "
                                            "later events are missing; raise probes.ftrace.max_trace_mb")
            result.info["window_s"] = [trace.host.started_mono if trace.host else 0.0, trace.stopped_mono]
            return result
        finally:
            self.abort()

    def abort(self) -> None:
        if self.trace is not None:
            self.trace.abort()
        for knob in self.knobs:
            knob.restore()

    @classmethod
    def sweep_stale(cls) -> list[str]:
        return sweep_stale()


def cell_tasks(host: Events | None, cell: Events | None, sampled: dict[int, int]) -> tuple[set[int], dict[int, int]]:
    """The cell's task ids and their thread-group ids: sampled tasks, every task the
    pid-filtered instance saw, and (transitively, in time order) every task they spawned."""
    tids = set(sampled)
    tgid = dict(sampled)
    for events in (cell, host):
        if events is None:
            continue
        if events is cell:
            tids.update(int(p) for p in np.unique(events.pid) if p > 0)
        born = events.event == CODE["task_newtask"]
        for parent, child, flags in zip(events.pid[born].tolist(), events.child_pid[born].tolist(),
                                        events.clone_flags[born].tolist(), strict=True):
            if parent in tids:
                tids.add(child)
                tgid.setdefault(child, tgid.get(parent, parent) if flags & 0x10000 else child)  # CLONE_THREAD
    return tids, tgid


def _calls(host: Events) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Write-back calls (writeback_start .. _written on one task) and, for each
    writeback_single_inode event (in order), the index of the call it ran in (-1: none)."""
    wb = host.of("writeback_start", "writeback_written", "writeback_single_inode")
    idx = np.flatnonzero(wb)
    calls: list[dict[str, Any]] = []
    current: dict[int, int] = {}
    inode_call: list[int] = []
    for i, code, pid, t in zip(idx.tolist(), host.event[idx].tolist(), host.pid[idx].tolist(),
                               host.time_s[idx].tolist(), strict=True):
        if code == CODE["writeback_start"]:
            current[pid] = len(calls)
            calls.append({"time_s": t, "end_s": t, "pid": pid, "reason": int(host.wb_reason[i]),
                          "nr_pages": int(host.wb_nr_pages[i]), "sb_dev": int(host.wb_sb_dev[i]), "cell_inodes": 0})
        elif code == CODE["writeback_written"]:
            if pid in current:
                calls[current.pop(pid)]["end_s"] = t
        else:
            inode_call.append(current.get(pid, -1))
    return calls, np.asarray(inode_call, dtype=np.int64)


def analyse(host: Events | None, cell: Events | None, sampled: dict[int, int],
            lost_stats: dict[str, int], buffers: bool = False) -> ProbeResult:
    tids, tgid = cell_tasks(host, cell, sampled)
    result = ProbeResult()
    metrics = result.metrics
    lost_lines = (host.lost() if host is not None else 0) + (cell.lost() if cell is not None else 0)
    # overwritten, dropped, or left in the buffer past the trace file's cap: events the analysis never saw
    lost = max(lost_lines, lost_stats.get("overrun", 0) + lost_stats.get("dropped", 0) + lost_stats.get("unread", 0))
    metrics.append(("lost_events", lost, "events"))
    result.info["lost"] = {**lost_stats, "lost_lines": lost_lines}
    result.info["cell_tasks"] = len(tids)
    if cell is not None:
        metrics.append(("page_faults", int((cell.event == CODE["page_fault_user"]).sum()), "faults"))
        metrics.append(("syscalls", int((cell.event == CODE["sys_enter"]).sum()), "calls"))
    if host is None:
        return result
    if len(host) > 1 and np.any(np.diff(host.time_s) < 0):  # trace_pipe merges CPUs in time order, nearly always
        host = host.select(np.argsort(host.time_s, kind="stable"))
    tid_list = np.fromiter(tids, dtype=np.int64, count=len(tids))
    in_cell = np.isin(host.pid, tid_list)
    if buffers:
        metrics.append(("buffers_touched", int((host.of("block_touch_buffer") & in_cell).sum()), "buffers"))
        metrics.append(("buffers_dirtied", int((host.of("block_dirty_buffer") & in_cell).sum()), "buffers"))

    # pages the cell dirtied, and the calls that wrote its inodes
    dirty = host.of("writeback_dirty_folio") & in_cell
    cell_inodes = {(int(d), int(i)) for d, i in zip(host.inode_dev[dirty], host.ino[dirty], strict=True)}
    calls, inode_call = _calls(host)
    si = np.flatnonzero(host.event == CODE["writeback_single_inode"])
    si_cell = np.array([(int(d), int(i)) in cell_inodes for d, i in zip(host.inode_dev[si], host.ino[si], strict=True)],
                       dtype=bool) | in_cell[si]
    si_reason = np.array([calls[c]["reason"] if c >= 0 else (SYNC if in_cell[k] else -1)
                          for c, k in zip(inode_call.tolist(), si.tolist(), strict=True)], dtype=np.int8)
    for c in inode_call[si_cell & (inode_call >= 0)].tolist():
        calls[c]["cell_inodes"] += 1
    cell_calls = [c for c in calls if c["cell_inodes"]]
    # a write-back the cell asked for itself (fsync, sync_file_range) runs outside any call
    own = si[si_cell & (inode_call < 0) & in_cell[si]]
    cell_calls += [{"time_s": float(host.time_s[k]), "end_s": float(host.time_s[k]), "pid": int(host.pid[k]),
                    "reason": SYNC, "nr_pages": int(host.page_index[k]), "sb_dev": int(host.inode_dev[k]), "cell_inodes": 1}
                   for k in own.tolist()]
    cell_calls.sort(key=lambda c: c["time_s"])
    by_reason = {name: 0 for name in ("background", "periodic", "sync")}
    for call in cell_calls:
        name = REASONS[call["reason"]] if 0 <= call["reason"] < len(REASONS) else "unknown"
        by_reason[name] = by_reason.get(name, 0) + 1
    metrics.append(("writebacks", len(cell_calls), "calls"))
    metrics.extend((f"writebacks.{name}", count, "calls") for name, count in sorted(by_reason.items()))
    starts = np.array([c["time_s"] for c in cell_calls])
    if len(starts) >= 2:
        gaps = np.diff(starts)
        metrics.append(("writeback_interval_mean_s", float(gaps.mean()), "s"))
        metrics.append(("writeback_interval_std_s", float(gaps.std(ddof=1)) if len(gaps) > 1 else 0.0, "s"))
    host_reasons: dict[str, int] = {}
    for call in calls:
        name = REASONS[call["reason"]] if 0 <= call["reason"] < len(REASONS) else "unknown"
        host_reasons[name] = host_reasons.get(name, 0) + 1
    result.info["host_writebacks_by_reason"] = host_reasons
    result.info["reasons"] = dict(enumerate(REASONS))
    result.series["writeback_calls"] = {
        "time_s": starts, "end_s": np.array([c["end_s"] for c in cell_calls]),
        "reason": np.array([c["reason"] for c in cell_calls], dtype=np.int8),
        "pid": np.array([c["pid"] for c in cell_calls], dtype=np.int32),
        "nr_pages": np.array([c["nr_pages"] for c in cell_calls], dtype=np.int64),
        "cell_inodes": np.array([c["cell_inodes"] for c in cell_calls], dtype=np.int32)}

    _device_writebacks(host, calls, inode_call, si, dirty, si_cell, result)
    _page_writebacks(host, dirty, si[si_cell], si_reason[si_cell], tgid, result)
    _block(host, in_cell, _flusher_windows(host, in_cell, cell_inodes), result)
    return result


def _device_writebacks(host: Events, calls: list[dict[str, Any]], inode_call: np.ndarray, si: np.ndarray,
                       dirty: np.ndarray, si_cell: np.ndarray, result: ProbeResult) -> None:
    """Every flusher write-back call on the devices the cell wrote to during the cell, whoever
    dirtied the pages: the engine's own writes (a container's json-file log, overlay and
    containerd metadata), the host's, other tenants' (so each tenant of a group counts the
    others' too). These are the kernel's write-back calls (``writeback_start`` with its reason),
    the ones Park & Bahn count by reason, not the cell's filtered ``writebacks``:
    ``device_other_writebacks`` are the calls that wrote none of the cell's files. (The cell's
    ``writebacks`` count a call that wrote only the block device's inode: the cell dirtied
    metadata there too, so on a file system shared with others nearly every call is the cell's.)

    A device is the bdi of the cell's dirtied folios and written inodes. A call is on a device
    when it wrote an inode there (a call that wrote no inode, as the flusher's loop ends with,
    belongs to no device). An inode a task writes itself outside any call (fsync, by anyone:
    the host's other processes fsync often) starts no write-back call: those are counted apart,
    as ``device_fsyncs``."""
    devices = set(host.inode_dev[dirty].tolist()) | set(host.inode_dev[si[si_cell]].tolist())
    result.info["devices"] = sorted(f"{d >> 20}:{d & 0xFFFFF}" if d >= 0 else "unnamed bdi" for d in devices)
    if not devices:
        result.info["device_writebacks"] = "none: the cell wrote to no device"
        return
    on_device = np.isin(host.inode_dev[si], np.fromiter(devices, dtype=np.int64, count=len(devices)))
    in_call = inode_call[on_device]
    chosen = sorted(set(in_call[in_call >= 0].tolist()))
    device_calls = [calls[c] for c in chosen]  # in time order, as _calls made them
    by_reason = {name: 0 for name in ("background", "periodic", "sync")}
    for call in device_calls:
        name = REASONS[call["reason"]] if 0 <= call["reason"] < len(REASONS) else "unknown"
        by_reason[name] = by_reason.get(name, 0) + 1
    metrics = result.metrics
    metrics.append(("device_writebacks", len(device_calls), "calls"))
    metrics.extend((f"device_writebacks.{name}", count, "calls") for name, count in sorted(by_reason.items()))
    # the cell's files: not the block device's own inode (its i_ino is the device number), whose
    # pages are every writer's file-system metadata (bitmaps, inode tables, directories)
    files = si_cell & (host.ino[si] != host.inode_dev[si]) & (inode_call >= 0)
    with_files = set(inode_call[files].tolist())
    metrics.append(("device_other_writebacks", sum(1 for c in chosen if c not in with_files), "calls"))
    metrics.append(("device_fsyncs", int((in_call < 0).sum()), "inodes"))
    starts = np.array([c["time_s"] for c in device_calls])
    if len(starts) >= 2:
        gaps = np.diff(starts)
        metrics.append(("device_writeback_interval_mean_s", float(gaps.mean()), "s"))
        metrics.append(("device_writeback_interval_std_s", float(gaps.std(ddof=1)) if len(gaps) > 1 else 0.0, "s"))


def _page_writebacks(host: Events, dirty: np.ndarray, si: np.ndarray, si_reason: np.ndarray,
                     tgid: dict[int, int], result: ProbeResult) -> None:
    """One row per dirtied folio that was written back during the trace: the nvmsim input."""
    d = np.flatnonzero(dirty)
    order: dict[tuple[int, int], int] = {}  # folio sizes, for the inodes the cell dirtied only
    added = (host.event == CODE["mm_filemap_add_to_page_cache"]) & np.isin(host.ino, np.unique(host.ino[d]))
    for ino, index, folio_order in zip(host.ino[added].tolist(), host.page_index[added].tolist(), host.folio_order[added].tolist(),
                                       strict=True):
        order[(ino, index)] = folio_order
    flush_at = np.full(len(d), -1, dtype=np.int64)
    # group dirty folios and inode write-backs by (dev, inode) once, instead of a scan per inode
    d_key = host.inode_dev[d] * 1_000_003 + host.ino[d]
    si_key = host.inode_dev[si] * 1_000_003 + host.ino[si]
    d_sorted = np.argsort(d_key, kind="stable")
    si_sorted = np.argsort(si_key, kind="stable")
    keys, d_start = np.unique(d_key[d_sorted], return_index=True)
    d_end = np.append(d_start[1:], len(d_sorted))
    si_lo = np.searchsorted(si_key[si_sorted], keys, side="left")
    si_hi = np.searchsorted(si_key[si_sorted], keys, side="right")
    for g in range(len(keys)):
        if si_lo[g] == si_hi[g]:
            continue
        writes = si[si_sorted[si_lo[g]:si_hi[g]]]  # in time order: si and the sorts are stable
        mine = d_sorted[d_start[g]:d_end[g]]
        pos = np.searchsorted(host.time_s[writes], host.time_s[d[mine]], side="left")
        ok = pos < len(writes)
        flush_at[mine[ok]] = writes[pos[ok]]
    done = flush_at >= 0
    d, flush = d[done], flush_at[done]
    reason_of = dict(zip(si.tolist(), si_reason.tolist(), strict=True))
    pages = np.array([1 << order.get((ino, index), 0) for ino, index in
                      zip(host.ino[d].tolist(), host.page_index[d].tolist(), strict=True)], dtype=np.int32)
    result.series["writeback"] = {
        "time_s": host.time_s[flush], "dirtied_s": host.time_s[d], "dev": host.inode_dev[d], "ino": host.ino[d],
        "index": host.page_index[d], "pages": pages,
        "reason": np.array([reason_of[k] for k in flush.tolist()], dtype=np.int8),
        "pid": host.pid[d], "tgid": np.array([tgid.get(int(p), int(p)) for p in host.pid[d]], dtype=np.int32),
        "flusher_pid": host.pid[flush]}
    result.metrics.append(("dirtied_folios", int(dirty.sum()), "folios"))
    result.metrics.append(("written_back_pages", int(pages.sum()), "pages"))
    result.info["dirty_not_written_back"] = int((~done).sum())


def _flusher_windows(host: Events, in_cell: np.ndarray, cell_inodes: set[tuple[int, int]]) -> list[tuple[int, float, float]]:
    """(flusher pid, from, to): a flusher writing one of the cell's inodes
    (``writeback_single_inode_start`` .. ``writeback_single_inode`` on one task)."""
    idx = np.flatnonzero(host.of("writeback_single_inode_start", "writeback_single_inode") & ~in_cell)
    windows = []
    open_at: dict[int, tuple[int, int, float]] = {}
    for i, code, pid in zip(idx.tolist(), host.event[idx].tolist(), host.pid[idx].tolist(), strict=True):
        key = (int(host.inode_dev[i]), int(host.ino[i]))
        if code == CODE["writeback_single_inode_start"]:
            open_at[pid] = (*key, float(host.time_s[i]))
        elif open_at.get(pid, (None, None))[:2] == key:
            if key in cell_inodes:
                windows.append((pid, open_at[pid][2], float(host.time_s[i])))
            del open_at[pid]
    return windows


def _block(host: Events, in_cell: np.ndarray, windows: list[tuple[int, float, float]], result: ProbeResult) -> None:
    """The cell's block I/O: bios submitted in its own context or by a flusher while writing one
    of its inodes, and the requests those bios became (matched on device and sector, since a
    flusher's plugged requests reach the queue later, and completions run in any context)."""
    kinds = host.of("block_rq_insert", "block_rq_issue", "block_rq_complete", "block_bio_backmerge",
                    "block_bio_frontmerge", "block_bio_queue")
    bios = host.of("block_bio_queue")
    mine_bio = bios & in_cell
    bio_at = np.flatnonzero(bios)
    bio_time = host.time_s[bio_at]
    for pid, begin, end in windows:
        lo = int(np.searchsorted(bio_time, begin, side="left"))
        hi = int(np.searchsorted(bio_time, end, side="right"))
        window = bio_at[lo:hi]
        mine_bio[window[host.pid[window] == pid]] = True
    key = host.sector * 1_000_003 + host.block_dev
    submitted = kinds & ~host.of("block_rq_complete")
    mine = submitted & (in_cell | np.isin(key, key[mine_bio]))
    # completions run in whatever context the interrupt hit: match them to the cell's requests
    issued = mine & host.of("block_rq_insert", "block_rq_issue")
    complete = host.of("block_rq_complete") & np.isin(key, key[issued])
    mine |= complete
    idx = np.flatnonzero(mine)
    result.series["block"] = {"time_s": host.time_s[idx], "event": host.event[idx], "dev": host.block_dev[idx],
                              "sector": host.sector[idx], "nr_sector": host.nr_sector[idx], "rwbs": host.rwbs[idx],
                              "pid": host.pid[idx]}
    inserts = mine & (host.event == CODE["block_rq_insert"])
    if not inserts.any():
        inserts = mine & (host.event == CODE["block_rq_issue"])
    writes = inserts & (host.rwbs & RWBS_BITS["W"] > 0)
    reads = inserts & (host.rwbs & RWBS_BITS["R"] > 0)
    result.metrics.append(("block_requests", int(inserts.sum()), "requests"))
    # Table 6: the inserts made in the flusher's write-back path, not in the cell's own tasks
    result.metrics.append(("block_requests_flusher", int((inserts & ~in_cell).sum()), "requests"))
    result.metrics.append(("block_write_bytes", int(host.nr_sector[writes].sum()) * 512, "bytes"))
    result.metrics.append(("block_read_bytes", int(host.nr_sector[reads].sum()) * 512, "bytes"))
    result.metrics.append(("block_merges", int((mine & host.of("block_bio_backmerge", "block_bio_frontmerge")).sum()),
                           "merges"))
    result.metrics.append(("block_completions", int(complete.sum()), "requests"))

