"""pagefaults probe: where the cell's user page faults come from (Park & Bahn, Table 8).

Faulting addresses come from ``exceptions:page_fault_user`` in a tracefs instance filtered to
the cell's tasks, read as binary ring-buffer pages. Each process's memory map
(``/proc/PID/maps``) is snapshotted while the cell runs; a fault is charged to the mapping that
held its address, and for ELF files to the function whose symbol covers it (the symbol table,
else the dynamic one, read in-process by ``elf_symbols``). The
ranking (task, file, function, share) is a series, its top entries are in the info. As in
Table 8, file and function are those of the faulting instruction (``ip``: e.g. ``memset`` in
libc faulting on fresh heap pages); ``touched`` says what the faulting address itself was
(a file, ``[heap]``, ``[anon]``, ``[stack]``).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from pydantic import Field

from isobench.probes import PROBES, elf_symbols
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.ftrace import cell_tasks
from isobench.probes.ftrace_parse import CODE
from isobench.probes.tracefs import CellTrace, missing_events, tracefs_problem

Mapping = tuple[int, int, int, str]  # start, end, file offset, path ("" when anonymous)


class PageFaultSettings(ProbeSettings):
    buffer_kb: int = Field(8192, ge=64, le=1 << 20, description="ring buffer per CPU, KiB")
    maps_every_s: float = Field(1.0, gt=0, le=60, description="how often each process's memory map is read")
    symbol_files: int = Field(10, ge=0, le=100, description="resolve functions in this many top files")
    top: int = Field(10, ge=1, le=200, description="ranking entries kept in the info")


@PROBES.register("pagefaults")
class PageFaultProbe(Probe):
    description = "page-fault sources: task, file and function of the cell's user page faults (Table 8)"
    Settings = PageFaultSettings

    def __init__(self, settings: ProbeSettings) -> None:
        super().__init__(settings)
        self.settings: PageFaultSettings = settings  # type: ignore[assignment]
        self.trace: CellTrace | None = None
        self.maps: dict[int, set[Mapping]] = {}
        self.comm: dict[int, str] = {}

    @classmethod
    def check(cls) -> ProbeCheck:
        problem = tracefs_problem() or (", ".join(missing_events(["exceptions/page_fault_user"])) or None)
        if problem:
            return ProbeCheck(False, problem)
        return ProbeCheck(True)

    def start(self, target: ProbeTarget) -> None:
        self.trace = CellTrace("pf", [], ["exceptions/page_fault_user", "task/task_newtask"],
                               self.settings.buffer_kb, 0.2, on_process=self._snapshot, raw_cell=True)
        self.trace.start(target)

    def _snapshot(self, pid: int) -> None:
        try:
            text = Path(f"/proc/{pid}/maps").read_text()
            self.comm.setdefault(pid, Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            return
        found = self.maps.setdefault(pid, set())
        for line in text.splitlines():
            fields = line.split(maxsplit=5)
            start, _, end = fields[0].partition("-")
            found.add((int(start, 16), int(end, 16), int(fields[2], 16), fields[5] if len(fields) > 5 else ""))

    def stop(self) -> ProbeResult:
        assert self.trace is not None and self.trace.cell is not None and self.trace.sampler is not None
        try:
            began = time.perf_counter()
            self.trace.stop()
            steps = {"stop_trace": time.perf_counter() - began}
            events = self.trace.cell.read_events()
            steps["parse"] = time.perf_counter() - began - sum(steps.values())
            _, tgid = cell_tasks(None, events, self.trace.sampler.tgid)
            faults = events.event == CODE["page_fault_user"]
            result = rank(events.pid[faults], events.fault_ip[faults], events.fault_address[faults], tgid,
                          self.maps, self.comm, self.settings.symbol_files, self.settings.top)
            steps["rank"] = time.perf_counter() - began - sum(steps.values())
            lost = self.trace.lost()
            unseen = lost.get("overrun", 0) + lost.get("dropped", 0) + lost.get("unread", 0)
            result.metrics.append(("lost_events", max(events.lost(), unseen), "events"))
            result.info["lost"] = {**lost, "lost_lines": events.lost()}
            result.info["stop_steps_s"] = {name: round(value, 3) for name, value in steps.items()}
            result.info["thread_cpu_s"] = round(self.trace.thread_cpu_s(), 3)
            return result
        finally:
            self.abort()

    def abort(self) -> None:
        if self.trace is not None:
            self.trace.abort()


def rank(tids: np.ndarray, ips: np.ndarray, addresses: np.ndarray, tgid: dict[int, int], maps: dict[int, set[Mapping]],
         comm: dict[int, str], symbol_files: int, top: int) -> ProbeResult:
    """The ranking by (task, code file, function, touched), in arrays: a fault costs no Python step
    (a cell's start makes ~85,000), only each distinct (file, offset) does."""
    paths = Interned(["[unmapped]"])
    utids, by_tid = np.unique(tids, return_inverse=True)
    pids = np.array([tgid.get(t, t) for t in utids.tolist()], dtype=np.int64)[by_tid]
    code = np.zeros(len(tids), dtype=np.int64)  # path id of the faulting instruction's mapping
    offset = np.full(len(tids), -1, dtype=np.int64)  # its offset in that file (-1: not a file)
    touched = np.zeros(len(tids), dtype=np.int64)  # path id of the faulting address's mapping
    for pid in np.unique(pids).tolist():
        if pid not in maps:
            continue  # never snapshotted: [unmapped]
        rows = np.flatnonzero(pids == pid)
        table = _table(maps[pid], paths)
        code[rows], offset[rows] = _locate(table, ips[rows])
        touched[rows] = _locate(table, addresses[rows])[0]
    files, first, counts_by_file = np.unique(code, return_index=True, return_counts=True)
    resolvable = [paths.names[f] for f in files[np.lexsort((first, -counts_by_file))].tolist()
                  if paths.names[f].startswith("/")][:symbol_files]
    functions = Interned([""])
    function = np.zeros(len(tids), dtype=np.int64)
    with_offset = offset >= 0
    for path_id in np.unique(code[with_offset]).tolist():
        rows = np.flatnonzero(with_offset & (code == path_id))
        offsets, by_offset = np.unique(offset[rows], return_inverse=True)
        found = elf_symbols.symbols(paths.names[path_id]) if paths.names[path_id] in resolvable else None
        names = found.functions(offsets) if found is not None else [""] * len(offsets)
        function[rows] = np.array([functions.id(name or hex(o)) for name, o in zip(names, offsets.tolist(), strict=True)],
                                  dtype=np.int64)[by_offset]
    tasks = Interned([])
    task = np.array([tasks.id(comm.get(p, str(p))) for p in np.unique(pids).tolist()], dtype=np.int64)[
        np.unique(pids, return_inverse=True)[1]]
    # one integer per (task, file, function, touched): a 1-D unique sorts ten times faster than rows
    columns = np.stack([task, code, function, touched], axis=1)
    radix = [len(tasks.names), len(paths.names), len(functions.names), len(paths.names)]
    if math.prod(radix) < 1 << 62:
        key = np.zeros(len(tids), dtype=np.int64)
        for column, size in zip(columns.T, radix, strict=True):
            key = key * size + column
        _, first, counts = np.unique(key, return_index=True, return_counts=True)
    else:
        _, first, counts = np.unique(columns, axis=0, return_index=True, return_counts=True)
    order = np.lexsort((first, -counts))  # most faults first; ties in order of appearance
    keys = columns[first[order]]
    counts = counts[order]
    total = max(1, len(tids))
    ranked = [((tasks.names[k[0]], paths.names[k[1]], functions.names[k[2]], paths.names[k[3]]), int(c))
              for k, c in zip(keys.tolist(), counts.tolist(), strict=True)]
    result = ProbeResult()
    result.metrics.append(("page_faults", len(tids), "faults"))
    result.metrics.append(("files", len(files), "files"))
    # Table 8's "a small number of specific files": the five code files with the most faults
    result.metrics.append(("top5_files_share", float(np.sort(counts_by_file)[::-1][:5].sum()) / total, "share"))
    result.series["ranking"] = {"task": [k[0] for k, _ in ranked], "file": [k[1] for k, _ in ranked],
                                "function": [k[2] for k, _ in ranked], "touched": [k[3] for k, _ in ranked],
                                "faults": np.array([c for _, c in ranked], dtype=np.int64),
                                "share": np.array([c / total for _, c in ranked])}
    result.info["top"] = [{"rank": n + 1, "task": k[0], "file": k[1], "function": k[2], "touched": k[3],
                           "percent": 100 * c / total}
                          for n, (k, c) in enumerate(ranked[:top])]
    return result


class Interned:
    """Strings by small integer id, so the ranking's keys are arrays."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._ids = {name: n for n, name in enumerate(self.names)}

    def id(self, name: str) -> int:
        if name not in self._ids:
            self._ids[name] = len(self.names)
            self.names.append(name)
        return self._ids[name]


Table = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _table(found: set[Mapping], paths: Interned) -> Table:
    """One process's mappings sorted by start: starts, ends, file offsets, path ids, whether each is a
    file, and the largest end up to each row (so an address no mapping holds is known at once)."""
    rows = sorted(found)
    ends = np.array([r[1] for r in rows], dtype=np.uint64)
    return (np.array([r[0] for r in rows], dtype=np.uint64), ends, np.array([r[2] for r in rows], dtype=np.uint64),
            np.array([paths.id(r[3] or "[anon]") for r in rows], dtype=np.int64),
            np.array([r[3].startswith("/") for r in rows], dtype=bool), np.maximum.accumulate(ends))


def _locate(table: Table, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(path id, file offset or -1) of each address. Snapshots may hold overlapping mappings: of
    those holding an address, the one starting last wins."""
    starts, ends, offsets, path_ids, is_file, reach = table
    address = values.astype(np.uint64)  # the kernel's unsigned long
    at = np.searchsorted(starts, address, side="right") - 1
    held = np.zeros(len(address), dtype=np.int64) - 1  # row of the mapping holding each address
    candidate = np.maximum(at, 0)
    direct = (at >= 0) & (address < ends[candidate])
    held[direct] = at[direct]
    for k in np.flatnonzero((at >= 0) & ~direct & (address < reach[candidate])).tolist():
        i = int(at[k]) - 1  # an earlier, longer mapping holds it: walk back to it
        while address[k] >= ends[i]:
            i -= 1
        held[k] = i
    row = np.maximum(held, 0)
    path = np.where(held >= 0, path_ids[row], 0)
    file_offset = np.where((held >= 0) & is_file[row],
                           (address - starts[row] + offsets[row]).astype(np.int64), -1)
    return path, file_offset
