"""pagefaults probe: where the cell's user page faults come from (Park & Bahn, Table 8).

Faulting addresses come from ``exceptions:page_fault_user`` in a tracefs instance filtered to
the cell's tasks. Each process's memory map (``/proc/PID/maps``) is snapshotted while the cell
runs; a fault is charged to the mapping that held its address, and for ELF files to the
function whose symbol covers it (``nm``: the symbol table, else the dynamic one). The
ranking (task, file, function, share) is a series, its top entries are in the info. As in
Table 8, file and function are those of the faulting instruction (``ip``: e.g. ``memset`` in
libc faulting on fresh heap pages); ``touched`` says what the faulting address itself was
(a file, ``[heap]``, ``[anon]``, ``[stack]``).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.ftrace import cell_tasks
from isobench.probes.ftrace_parse import CODE, parse_file
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
        return ProbeCheck(True, partial={} if shutil.which("nm") else {"symbols": "nm (binutils) missing: "
                                                                                  "files and offsets only"})

    def start(self, target: ProbeTarget) -> None:
        self.trace = CellTrace("pf", [], ["exceptions/page_fault_user", "task/task_newtask"],
                               self.settings.buffer_kb, 0.2, on_process=self._snapshot)
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
            self.trace.stop()
            events = parse_file(str(self.trace.cell.trace_file))
            _, tgid = cell_tasks(None, events, self.trace.sampler.tgid)
            faults = events.event == CODE["page_fault_user"]
            result = rank(events.pid[faults], events.fault_ip[faults], events.fault_address[faults], tgid,
                          self.maps, self.comm, self.settings.symbol_files, self.settings.top)
            result.info["lost"] = self.trace.lost()
            return result
        finally:
            self.abort()

    def abort(self) -> None:
        if self.trace is not None:
            self.trace.abort()


def rank(tids: np.ndarray, ips: np.ndarray, addresses: np.ndarray, tgid: dict[int, int], maps: dict[int, set[Mapping]],
         comm: dict[int, str], symbol_files: int, top: int) -> ProbeResult:
    where: list[tuple[int, str, int, str]] = []  # (tgid, code file, file offset or -1, touched)
    tables = {pid: _table(found) for pid, found in maps.items()}
    for tid, ip, address in zip(tids.tolist(), ips.tolist(), addresses.tolist(), strict=True):
        pid = tgid.get(tid, tid)
        table = tables.get(pid)
        if table is None:
            where.append((pid, "[unmapped]", -1, "[unmapped]"))
            continue
        where.append((pid, *_locate(table, ip), _locate(table, address)[0]))
    per_file = Counter(path for _, path, _, _ in where)
    resolvable = [path for path, _ in per_file.most_common() if path.startswith("/")][:symbol_files]
    symbols = {path: _symbols(path) for path in resolvable}
    counts: Counter[tuple[str, str, str, str]] = Counter()
    for pid, path, offset, touched in where:
        function = _function(symbols[path], offset) if path in symbols and offset >= 0 else ""
        if not function and offset >= 0 and path.startswith("/"):
            function = hex(offset)
        counts[(comm.get(pid, str(pid)), path, function, touched)] += 1
    total = max(1, len(where))
    ranked = counts.most_common()
    result = ProbeResult()
    result.metrics.append(("page_faults", len(where), "faults"))
    result.metrics.append(("files", len(per_file), "files"))
    result.series["ranking"] = {"task": [k[0] for k, _ in ranked], "file": [k[1] for k, _ in ranked],
                                "function": [k[2] for k, _ in ranked], "touched": [k[3] for k, _ in ranked],
                                "faults": np.array([c for _, c in ranked], dtype=np.int64),
                                "share": np.array([c / total for _, c in ranked])}
    result.info["top"] = [{"rank": n + 1, "task": k[0], "file": k[1], "function": k[2], "touched": k[3],
                           "percent": 100 * c / total}
                          for n, (k, c) in enumerate(ranked[:top])]
    return result


def _table(found: set[Mapping]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    rows = sorted(found)
    return (np.array([r[0] for r in rows], dtype=np.uint64), np.array([r[1] for r in rows], dtype=np.uint64),
            np.array([r[2] for r in rows], dtype=np.int64), [r[3] for r in rows])


def _locate(table: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]], address: int) -> tuple[str, int]:
    starts, ends, offsets, paths = table
    address &= 0xFFFFFFFFFFFFFFFF
    i = int(np.searchsorted(starts, np.uint64(address), side="right")) - 1
    while i >= 0 and starts[i] <= address:  # several snapshots may hold overlapping mappings: latest start wins
        if address < ends[i]:
            path = paths[i] or "[anon]"
            return path, (address - int(starts[i]) + int(offsets[i])) if path.startswith("/") else -1
        i -= 1
    return "[unmapped]", -1


@lru_cache(maxsize=1024)
def _symbols(path: str) -> tuple[np.ndarray, np.ndarray, list[str], list[tuple[int, int, int]]]:
    """(sorted symbol addresses, sizes, names, PT_LOAD segments (offset, vaddr, filesz)) of an ELF file."""
    empty: tuple[np.ndarray, np.ndarray, list[str], list[tuple[int, int, int]]] = (
        np.zeros(0, np.uint64), np.zeros(0, np.uint64), [], [])
    segments = _load_segments(path)
    if not segments or shutil.which("nm") is None:
        return empty
    rows: list[tuple[int, int, str]] = []
    debug = _debug_file(path)  # stripped libraries (libc) keep their full symbols in a -dbg package
    for args in ([["nm", "-S", "--defined-only", debug]] if debug else []) + [
            ["nm", "-S", "--defined-only", path], ["nm", "-D", "-S", "--defined-only", path]]:
        try:
            out = subprocess.run(args, capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 4 and fields[2] in "tTwWiI":
                rows.append((int(fields[0], 16), int(fields[1], 16), fields[3]))
        if rows:
            break
    rows.sort()
    return (np.array([r[0] for r in rows], dtype=np.uint64), np.array([r[1] for r in rows], dtype=np.uint64),
            [r[2] for r in rows], segments)


def _debug_file(path: str) -> str | None:
    """The separate debug-symbol file of ``path`` (``/usr/lib/debug/.build-id/xx/rest.debug``), if installed."""
    import re

    try:
        notes = subprocess.run(["readelf", "-n", path], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"Build ID: ([0-9a-f]{3,})", notes)
    if not found:
        return None
    debug = Path("/usr/lib/debug/.build-id") / found.group(1)[:2] / f"{found.group(1)[2:]}.debug"
    return str(debug) if debug.exists() else None


def _load_segments(path: str) -> list[tuple[int, int, int]]:
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            if header[:4] != b"\x7fELF" or header[4] != 2:
                return []
            phoff, = struct.unpack_from("<Q", header, 32)
            phentsize, phnum = struct.unpack_from("<HH", header, 54)
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
    except OSError:
        return []
    segments = []
    for n in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", table, n * phentsize)
        if p_type == 1:  # PT_LOAD
            segments.append((p_offset, p_vaddr, p_filesz))
    return segments


def _function(symbols: tuple[np.ndarray, np.ndarray, list[str], list[tuple[int, int, int]]], offset: int) -> str:
    addresses, sizes, names, segments = symbols
    if not names:
        return ""
    for p_offset, p_vaddr, filesz in segments:
        if p_offset <= offset < p_offset + filesz:
            vaddr = offset - p_offset + p_vaddr
            break
    else:
        return ""
    i = int(np.searchsorted(addresses, np.uint64(vaddr), side="right")) - 1
    if i >= 0 and (vaddr < int(addresses[i]) + max(int(sizes[i]), 1)):
        return names[i]
    return ""
