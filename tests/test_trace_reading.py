"""How the trace probes read and resolve what the kernel recorded, at a cost a cell can bear: binary
ring-buffer pages decode to the same columns as the text stream, a burst is kept whole or its losses
counted, the page-fault ranking in arrays charges each fault as the per-fault walk did, ELF symbols
read in-process name what nm names, and `isobench probes` shows the measured cost of each probe."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.test_ftrace import _waiting_child, need_tracefs


def test_raw_pages_decode_to_the_columns_of_the_text_stream() -> None:
    """Two instances filtered to the same child, one read as binary pages and one as text: the same
    events with the same fields (each instance stamps its own time, so times agree to microseconds)."""
    need_tracefs()
    from isobench.probes import ftrace_parse
    from isobench.probes.tracefs import TraceInstance

    events = ["exceptions/page_fault_user", "raw_syscalls/sys_enter", "task/task_newtask"]
    child = _waiting_child("import os, threading\nx = bytearray(8 << 20)\nx[::4096] = b'1' * len(x[::4096])\n"
                           "t = threading.Thread(target=os.getppid); t.start(); t.join()\n"
                           "for _ in range(3000):\n    os.getppid()\nos.system('true')\n")
    raw = TraceInstance("rawtest", events, 1024, pid_filter=True, raw=True)
    text = TraceInstance("texttest", events, 1024, pid_filter=True)
    try:
        raw.start([child.pid])
        text.start([child.pid])
        assert raw.layout is not None and text.layout is None
        child.communicate("\n", timeout=60)
        raw.stop()
        text.stop()
        decoded, parsed = raw.read_events(), text.read_events()
    finally:
        raw.discard()
        text.discard()
    assert raw.stats["overrun"] == text.stats["overrun"] == 0
    counts = {ftrace_parse.EVENTS[c]: int((decoded.event == c).sum()) for c in np.unique(decoded.event)}
    assert counts == {ftrace_parse.EVENTS[c]: int((parsed.event == c).sum()) for c in np.unique(parsed.event)}
    assert counts["sys_enter"] > 3000 and counts["page_fault_user"] > 2000 and counts["task_newtask"] >= 2

    def rows(found: ftrace_parse.Events) -> np.ndarray:
        table = np.stack([found.pid, found.event, found.a0, found.a1, found.a2, found.a3], axis=1)
        return table[np.lexsort(table.T[::-1])]

    assert np.array_equal(rows(decoded), rows(parsed))
    assert np.all(np.diff(decoded.time_s) >= 0)  # the CPUs' pages merged in time order
    assert abs(decoded.time_s[0] - parsed.time_s[0]) < 0.01
    assert not raw.trace_file.exists() and not raw.path.exists()  # discard leaves nothing behind


def test_a_burst_is_kept_whole_or_its_losses_are_counted() -> None:
    """300,000 calls as fast as the child can make them: with the default buffer every one is counted;
    with the smallest, what the kernel overwrote is lost_events, and the two add up to the calls."""
    need_tracefs()
    from isobench.probes.ftrace import FtraceProbe, FtraceSettings
    from isobench.target import ProbeTarget

    calls = 300_000
    for buffer_kb in (8192, 64):
        child = _waiting_child(f"import os\nfor _ in range({calls}):\n    os.getppid()\n")
        probe = FtraceProbe(FtraceSettings(buffer_kb=buffer_kb, page_faults=False, block=False))
        try:
            probe.start(ProbeTarget("baremetal", child.pid))
            child.communicate("\n", timeout=60)
            found = {metric: value for metric, value, _ in probe.stop().metrics}
        finally:
            probe.abort()
        assert found["syscalls"] + found["lost_events"] >= calls, (buffer_kb, found)
        if buffer_kb == 64:
            assert found["lost_events"] > 0 and found["syscalls"] < calls
        else:
            assert found["syscalls"] >= calls, found  # on a host busy enough to lose some, say how many


def test_the_ranking_charges_each_fault_as_the_walk_over_mappings_did() -> None:
    """Overlapping snapshots (a heap that grew, a library mapped over an earlier anonymous range), an
    address no snapshot holds, a thread of a process and a task never snapshotted."""
    from isobench.probes.pagefaults import rank

    maps = {100: {(0x1000, 0x2000, 0, "[heap]"), (0x1000, 0x8000, 0, "[heap]"),  # grew between snapshots
                  (0x9000, 0xA000, 0x3000, "/lib/a.so"), (0x9800, 0x9900, 0, ""),  # anon inside a.so's range
                  (0xB000, 0xC000, 0x5000, "/lib/b.so")}}
    tids = np.array([100, 101, 100, 100, 100, 100, 300], dtype=np.int32)
    ips = np.array([0x9010, 0x9010, 0x9850, 0xB010, 0x9020, 0xF000, 0x9010], dtype=np.int64)
    addresses = np.array([0x7000, 0x1500, 0x9850, 0xD000, 0x9950, 0x1000, 0x9010], dtype=np.int64)
    result = rank(tids, ips, addresses, {101: 100}, maps, {100: "python"}, symbol_files=0, top=3)
    ranked = result.series["ranking"]
    rows = list(zip(ranked["task"], ranked["file"], ranked["function"], ranked["touched"],
                    ranked["faults"].tolist(), strict=True))
    assert rows[0] == ("python", "/lib/a.so", hex(0x3010), "[heap]", 2)  # the longer heap holds 0x7000
    assert set(rows[1:]) == {("python", "[anon]", "", "[anon]", 1), ("python", "/lib/b.so", hex(0x5010), "[unmapped]", 1),
                             ("python", "/lib/a.so", hex(0x3020), "/lib/a.so", 1),
                             ("python", "[unmapped]", "", "[heap]", 1), ("300", "[unmapped]", "", "[unmapped]", 1)}
    assert [r[4] for r in rows] == sorted((r[4] for r in rows), reverse=True)
    assert dict((m, v) for m, v, _ in result.metrics)["page_faults"] == 7 and abs(sum(ranked["share"]) - 1) < 1e-12
    assert len(result.info["top"]) == 3
    empty = rank(np.zeros(0, np.int32), np.zeros(0, np.int64), np.zeros(0, np.int64), {}, {}, {}, 10, 10)
    assert empty.series["ranking"]["task"] == [] and empty.metrics[0] == ("page_faults", 0, "faults")


def test_symbols_read_in_process_name_what_nm_names() -> None:
    """At addresses inside a sample of the functions nm lists for libc (from its debug file where
    one is installed), the name found is the one nm's sorted listing gives: the last symbol starting
    at or before the address, if it covers it; of aliases (same address and size), the greatest."""
    if shutil.which("nm") is None:
        pytest.skip("host lacks nm (binutils)")
    from isobench.probes import elf_symbols

    libc = next((p for p in ("/usr/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6")
                 if Path(p).exists()), None)
    if libc is None:
        pytest.skip("no x86-64 libc at the usual path")
    found = elf_symbols.symbols(libc)
    assert found is not None and len(found.addresses) > 1000
    listed = ""
    for args in (["nm", "-S", "--defined-only", found.path], ["nm", "-D", "-S", "--defined-only", libc]):
        listed = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
        if listed.strip():
            break
    rows = []  # (address, size, name); nm prints no size column for a symbol of size 0
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "tTwWiI":
            rows.append((int(fields[0], 16), int(fields[1], 16), fields[3]))
        elif len(fields) == 3 and fields[1] in "tTwWiI":
            rows.append((int(fields[0], 16), 0, fields[2]))
    rows.sort()
    starts = np.array([r[0] for r in rows], dtype=np.uint64)
    sample = [r for r in rows[::max(1, len(rows) // 400)] if r[1] > 0]
    inside = [address + size // 2 for address, size, _ in sample]
    offsets = []
    for vaddr in inside:
        p_offset, p_vaddr, _ = next(s for s in found.segments if s[1] <= vaddr < s[1] + s[2])
        offsets.append(vaddr - p_vaddr + p_offset)
    got = found.functions(np.array(offsets, dtype=np.int64))
    for vaddr, name in zip(inside, got, strict=True):
        address, size, expected = rows[int(np.searchsorted(starts, np.uint64(vaddr), side="right")) - 1]
        assert name == (expected if vaddr < address + max(size, 1) else ""), (hex(vaddr), name, expected)


def test_probes_lists_each_measured_cost_with_its_conditions() -> None:
    from isobench.listings import _cost_text

    out = json.loads(run_cli("probes", "--json", check=True).stdout)
    costs = {record["name"]: record["cost"] for record in out}
    for name in ("ftrace", "pagefaults"):
        cost = costs[name]
        assert cost is not None, f"{name}: no stored measurement (benchmarks/bench_probes.py --write-costs)"
        assert cost["start_stop_s"] <= 1.0 and cost["harness_cpu_pct"] <= 10.0, cost  # the targets they met
        assert {"date", "host", "load_avg", "steal_pct", "cell", "rounds"} <= set(cost["measured"])
    text = run_cli("probes", check=True).stdout
    assert "cost per cell" in text and "costs.json" in " ".join(text.split())
    over = _cost_text({"start_stop_s": 2.5, "harness_cpu_pct": 4.0, "harness_cpu_s": 0.3, "cell_wall_s": 7.0,
                       "measured": {"date": "2026-01-01", "load_avg": [0.5, 0.7], "steal_pct": 0.1}},
                      {"start_stop_s": 1.0, "harness_cpu_pct": 10.0})
    assert "over its target: start+stop" in over and "load 0.5-0.7" in over and "CPU" not in over.split("target:")[1]
    assert _cost_text(None, {}) == "-" and _cost_text({"start_stop_s": "x"}, {}) == "unreadable entry in costs.json"
