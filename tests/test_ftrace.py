"""Kernel-trace probes on real kernels and real processes: write-back reasons, block events and
their attribution, restoring the host on Ctrl-C and after kill -9, the columnar parser against
a regex reference on a real trace, and nvmsim replaying a captured trace end to end."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ISOBENCH, default_interrupts, need_root, run_cli, wait_perf_attached, write_study

VM = Path("/proc/sys/vm")


def need_tracefs() -> None:
    need_root()
    from isobench.probes.tracefs import tracefs_problem

    problem = tracefs_problem()
    if problem:
        pytest.skip(f"host lacks tracefs instances: {problem}")


def need_knob_free() -> None:
    """Restoring dirty_background_* can be checked only while no other run lowers it too."""
    from isobench.probes.tracefs import _holders

    if _holders():
        pytest.skip("another run on this host holds vm.dirty_background_bytes lowered right now")


def instances() -> set[str]:
    from isobench.probes.tracefs import TRACEFS

    return set(os.listdir(TRACEFS / "instances"))


def metrics(out: Path) -> dict[str, dict[str, float]]:
    from isobench.store import Store

    store = Store.open(out)
    found: dict[str, dict[str, float]] = {}
    for row in store.metric_rows():
        found.setdefault(row["workload_key"], {})[row["metric"]] = row["value"]
    return found


def series(out: Path, probe: str, name: str) -> dict[str, dict]:
    from isobench.store import Store

    store = Store.open(out)
    by_workload = {row["cell_id"]: row["workload_key"] for row in store.cells()}
    return {by_workload[cell]: table.to_pydict() for cell, table in store.series(probe, name).items()}


#: another process on the cells' device (files under /var/tmp, as file-writer's), for as long
#: as the study runs: every 0.2 s it rewrites 16 KiB of one file and fsyncs it, and 16 KiB of
#: another it leaves to the flusher, as an engine's own metadata and log writes would
NEIGHBOUR = ("import os, sys, time\n"
             "with open(sys.argv[1] + '.sync', 'wb') as f, open(sys.argv[1] + '.dirty', 'wb') as g:\n"
             "    while True:\n"
             "        f.seek(0); f.write(os.urandom(16384)); f.flush(); os.fsync(f.fileno())\n"
             "        g.seek(0); g.write(os.urandom(16384)); g.flush(); time.sleep(0.2)\n")


@pytest.fixture(scope="module")
def writer_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fsync'ed checkpoints, and dirty pages left for the flusher past dirty_expire, lowered to 2 s
    for the study (the flusher wakes every 5 s, so they go out within 7 s, not the default 30-35;
    the 15-s cell spans three wake-ups, the neighbour's dirty file written at each);
    a neighbour process writes to the same device all along (its pid in ``neighbour.pid`` beside
    the results)."""
    need_tracefs()
    tmp = tmp_path_factory.mktemp("ftrace")
    study = write_study(tmp / "study.yaml", {
        "name": "ftrace-writer",
        "workloads": [{"name": "file-writer", "label": "fsync", "params": {"rounds": 6, "file_kb": 512, "delay_s": 1}},
                      {"name": "file-writer", "label": "nofsync",
                       "params": {"rounds": 1, "file_kb": 64, "fsync": False, "wait_s": 14, "delay_s": 1}}],
        "platforms": [{"name": "baremetal"}],
        "repetitions": 1, "warmup": 0, "timeout_s": 120,
        "probes": {"ftrace": {"dirty_expire_s": 2}, "syscalls": {}, "pagefaults": {}}})
    scratch = Path(f"/var/tmp/isobench-test-neighbour-{os.getpid()}")
    neighbour = subprocess.Popen([sys.executable, "-I", "-S", "-c", NEIGHBOUR, str(scratch)])
    (tmp / "neighbour.pid").write_text(str(neighbour.pid))
    try:
        run_cli("run", str(study), "--out", str(tmp / "out"), check=True, timeout=300)
        assert neighbour.poll() is None, "the neighbour stopped writing before the study ended"
    finally:
        neighbour.kill()
        neighbour.wait()
        for suffix in (".sync", ".dirty"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    return tmp / "out"


def _by_label(values: dict[str, dict], label: str) -> dict:
    return values[label]


def test_fsync_gives_sync_writebacks_and_block_events_of_the_cell(writer_study: Path) -> None:
    found = _by_label(metrics(writer_study), "fsync")
    assert found["probe.ftrace.writebacks.sync"] >= 6  # one per fsync'ed round at least
    assert found["probe.ftrace.block_write_bytes"] >= 6 * 512 * 1024
    assert found["probe.ftrace.block_requests"] >= 6
    assert found["probe.ftrace.lost_events"] == 0
    assert found["probe.ftrace.syscalls"] > 0 and found["probe.ftrace.page_faults"] > 0
    blocks = _by_label(series(writer_study, "ftrace", "block"), "fsync")
    from isobench.probes.ftrace_parse import CODE, RWBS_BITS

    sync_writes = [r for e, r in zip(blocks["event"], blocks["rwbs"], strict=True)
                   if e == CODE["block_rq_insert"] and r & RWBS_BITS["W"] and r & RWBS_BITS["S"]]
    assert sync_writes, "no WS block request attributed to the fsync'ing cell"
    pages = _by_label(series(writer_study, "ftrace", "writeback"), "fsync")
    # fsync'ed folios go out as sync: 12 of 19 folios on a fresh clone in CI, one checkpoint folio
    # and one log folio per round; the other 7 were single pages the cell dirtied elsewhere (its
    # interpreter writing a module's .pyc), left to the flusher. Weighed by pages, sync dominates.
    sync_pages = sum(n for n, reason in zip(pages["pages"], pages["reason"], strict=True) if reason == 2)
    assert sync_pages >= 0.9 * sum(pages["pages"]), pages
    assert sum(pages["pages"]) >= 6 * 128  # 512 KiB rewritten six times
    histogram = _by_label(series(writer_study, "syscalls", "histogram"), "fsync")
    calls = dict(zip(histogram["syscall"], histogram["calls"], strict=True))
    assert calls.get("fsync", 0) >= 12  # checkpoint and log, each round
    ranking = _by_label(series(writer_study, "pagefaults", "ranking"), "fsync")
    assert abs(sum(ranking["share"]) - 1) < 1e-9 and any(f.startswith("/") for f in ranking["file"])
    # Table 8's concentration: the five code files with the most faults, from the same ranking
    by_file: dict[str, int] = {}
    for file, faults in zip(ranking["file"], ranking["faults"], strict=True):
        by_file[file] = by_file.get(file, 0) + int(faults)
    top5 = sum(sorted(by_file.values(), reverse=True)[:5]) / sum(by_file.values())
    assert found["probe.pagefaults.top5_files_share"] == pytest.approx(top5)
    # fsync writes in the cell's own context: its inserts are not the flusher's
    assert found["probe.ftrace.block_requests_flusher"] < found["probe.ftrace.block_requests"] / 2, found
    # the probe's own end, step by step: what it cost the run after the cell
    from isobench.store import Store

    for cell in Store.open(writer_study).cells():
        steps = cell["platform_info"]["probes"]["ftrace"]["info"]["stop_steps_s"]
        assert set(steps) == {"stop_trace", "restore_knobs", "parse", "analyse"} and min(steps.values()) >= 0


def test_unsynced_pages_go_out_periodic_from_a_flusher(writer_study: Path) -> None:
    found = _by_label(metrics(writer_study), "nofsync")
    assert found["probe.ftrace.writebacks.periodic"] >= 1
    # left to the flusher: its block request inserts are made in the flusher's write-back path
    assert found["probe.ftrace.block_requests_flusher"] >= 1, found
    pages = _by_label(series(writer_study, "ftrace", "writeback"), "nofsync")
    assert 3 in pages["reason"]  # periodic
    flushed = [f for f, p in zip(pages["flusher_pid"], pages["pid"], strict=True) if f != p]
    assert flushed, "the flusher's write-back was not joined to the dirtying process"


def test_a_neighbours_writes_count_device_wide_and_never_as_the_cells(writer_study: Path) -> None:
    from isobench.store import Store

    neighbour = int((writer_study.parent / "neighbour.pid").read_text())
    found = _by_label(metrics(writer_study), "nofsync")
    # the flusher wakes three times in the 15-s cell: once for the cell's file (and the
    # neighbour's), and at the others for the neighbour's dirty file alone (with the file
    # system's metadata, which the cell's own count takes for its own: it dirtied some too)
    assert found["probe.ftrace.device_other_writebacks"] >= 1, found
    assert found["probe.ftrace.device_writebacks"] - found["probe.ftrace.device_other_writebacks"] >= 1
    assert found["probe.ftrace.device_writeback_interval_mean_s"] > 0
    assert "probe.ftrace.device_writeback_interval_std_s" in found
    # ~15 s of the neighbour's fsyncs, one every 0.2 s or so: on the device, started by no flusher
    assert found["probe.ftrace.device_fsyncs"] >= 20, found
    for label in ("fsync", "nofsync"):
        calls = _by_label(series(writer_study, "ftrace", "writeback_calls"), label)
        assert neighbour not in calls["pid"], f"the neighbour's fsyncs were counted as the {label} cell's own"
    for cell in Store.open(writer_study).cells():
        assert cell["platform_info"]["probes"]["ftrace"]["info"]["devices"]


def _line(pid: int, t: float, event: str, body: str, comm: str = "task") -> str:
    return f"{comm:>16}-{pid:<7} [000] ..... {t:12.6f}: {event}: {body}\n"


def test_device_writebacks_count_every_call_on_the_cells_devices_only() -> None:
    """A synthetic trace: the cell (pid 100) and a neighbour (200) dirty inodes on 254:0; the
    flushers (50, 51) write them, and an inode on 8:0; the neighbour and the cell fsync."""
    from isobench.probes.ftrace import analyse
    from isobench.probes.ftrace_parse import REASONS, parse

    def call(pid: int, t: float, reason: str, inodes: list[tuple[str, int]]) -> str:
        head = f"bdi {inodes[0][0] if inodes else '254:0'}: sb_dev 0:0 nr_pages=1024 sync_mode=0 kupdate=1 " \
               f"range_cyclic=1 background=0 reason={reason} cgroup_ino=1"
        lines = _line(pid, t, "writeback_start", head, "kworker/u8:1")
        for k, (dev, ino) in enumerate(inodes):
            lines += _line(pid, t + 0.001 * (k + 1), "writeback_single_inode", inode(dev, ino), "kworker/u8:1")
        return lines + _line(pid, t + 0.01, "writeback_written", head, "kworker/u8:1")

    def inode(dev: str, ino: int) -> str:
        return (f"bdi {dev}: ino={ino} state=I_DIRTY_PAGES dirtied_when=4294 age=3 index=0 to_write=1024 wrote=1 "
                "cgroup_ino=1")

    bdev = 254 << 20  # the block device's own inode (file-system metadata): its number is the device's
    trace = (_line(100, 1.0, "writeback_dirty_folio", "bdi 254:0: ino=12 index=0")
             + _line(100, 1.5, "writeback_dirty_folio", f"bdi 254:0: ino={bdev} index=7")
             + _line(200, 2.0, "writeback_dirty_folio", "bdi 254:0: ino=34 index=0")
             + call(50, 3.0, "periodic", [("254:0", 12), ("254:0", 34)])  # the cell's and the neighbour's
             + call(50, 3.1, "periodic", [])                                # the loop's empty end: no device
             + _line(200, 4.0, "writeback_single_inode", inode("254:0", 34))  # the neighbour's fsync
             + call(51, 5.0, "background", [("8:0", 56)])                   # another device
             + call(50, 6.0, "periodic", [("254:0", 34), ("254:0", bdev)])  # the neighbour's, and metadata
             + _line(100, 7.0, "writeback_single_inode", inode("254:0", 12))  # the cell's fsync
             + call(50, 8.5, "background", [("254:0", 34)]))                # the neighbour's only
    result = analyse(parse(trace.encode()), None, {100: 100}, {})
    found = {name: value for name, value, _ in result.metrics}
    # the cell's own count takes the metadata call for its own (it dirtied the device's inode too)
    assert (found["writebacks"], found["writebacks.periodic"], found["writebacks.sync"]) == (3, 2, 1)
    # the flusher's calls on 254:0 (at 3, 6 and 8.5 s), whoever dirtied the pages; the fsyncs apart
    assert found["device_writebacks"] == 3 and found["device_other_writebacks"] == 2
    assert (found["device_writebacks.periodic"], found["device_writebacks.sync"],
            found["device_writebacks.background"]) == (2, 0, 1)
    assert found["device_fsyncs"] == 2
    assert found["device_writeback_interval_mean_s"] == pytest.approx(2.75)
    assert found["device_writeback_interval_std_s"] == pytest.approx(np.std([3.0, 2.5], ddof=1))
    assert result.info["devices"] == ["254:0"]
    assert REASONS[int(result.series["writeback_calls"]["reason"][0])] == "periodic"
    # a cell that wrote nothing has no device, so no device-wide counts
    quiet = analyse(parse(trace.encode()), None, {999: 999}, {})
    assert not any(name.startswith("device_") for name, _, _ in quiet.metrics)
    assert quiet.info["devices"] == []


def test_low_dirty_background_bytes_gives_background_writebacks(tmp_path: Path) -> None:
    need_tracefs()
    need_knob_free()
    before = {name: (VM / name).read_text() for name in ("dirty_background_bytes", "dirty_background_ratio")}
    study = write_study(tmp_path / "study.yaml", {
        "name": "ftrace-background",
        "workloads": [{"name": "file-writer", "params": {"rounds": 4, "file_kb": 8192, "fsync": False,
                                                          "interval_s": 0.3, "wait_s": 1, "delay_s": 1}}],
        "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0,
        "probes": {"ftrace": {"dirty_background_bytes": 1 << 20, "syscalls": False, "page_faults": False}}})
    run_cli("run", str(study), "--out", str(tmp_path / "out"), check=True, timeout=300)
    found = next(iter(metrics(tmp_path / "out").values()))
    assert found["probe.ftrace.writebacks.background"] >= 1
    # the flusher's block writes are joined to the cell through its inodes: about the pages written back
    written = found["probe.ftrace.written_back_pages"] * 4096
    assert 0.5 * written <= found["probe.ftrace.block_write_bytes"] <= 1.5 * written + (1 << 20)
    assert {name: (VM / name).read_text() for name in before} == before


def test_nvmsim_replays_a_captured_trace(writer_study: Path, tmp_path: Path) -> None:
    out = run_cli("nvmsim", str(writer_study), "--capacity", "256", "--json", "--export-csv", str(tmp_path),
                  check=True)
    result = json.loads(out.stdout[out.stdout.index("{"):])
    cells = {c["cell"]: c for c in result["cells"]}
    fsync = next(c for name, c in cells.items() if "nofsync" not in name)
    assert fsync["write_backs"] >= 6 * 128 and fsync["pages"] >= 128
    assert 0 < fsync["improvement"] <= 1 and fsync["hit_ratio"] > 0.5  # the checkpoint's pages are rewritten
    csv = next(p for p in tmp_path.glob("*.csv") if "nofsync" not in p.name)
    replayed = json.loads(run_cli("nvmsim", str(csv), "--capacity", "256", "--json", check=True).stdout)
    assert replayed["write_backs"] == fsync["write_backs"]
    assert replayed["improvement"] == pytest.approx(fsync["improvement"])
    # a sweep over a study: one row per capacity, one value per cell, the file's own sweep among them
    swept = run_cli("nvmsim", str(writer_study), "--sweep", "12", "--json", check=True)
    rows = json.loads(swept.stdout[swept.stdout.index("{"):])["sweep"]
    index = list(cells).index(fsync["cell"])
    own = json.loads(run_cli("nvmsim", str(csv), "--sweep", "12", "--json", check=True).stdout)["sweep"]
    by_capacity = {row["capacity"]: row["improvement"] for row in own}
    shared = [row for row in rows if row["capacity"] in by_capacity]
    assert len(rows) >= 6 and shared
    assert all(row["improvement"][index] == pytest.approx(by_capacity[row["capacity"]]) for row in shared)
    refused = run_cli("nvmsim", str(writer_study), "--plot", str(tmp_path / "p.svg"))
    assert refused.returncode == 2 and "--export-csv" in refused.stderr


def test_parser_matches_the_regex_reference_on_a_real_trace() -> None:
    need_tracefs()
    from isobench.probes import ftrace, ftrace_parse
    from isobench.probes.tracefs import TraceInstance
    from tests.ftrace_reference import parse_reference

    # The child waits for a line on stdin, so the instance can be filtered to it (with its forks)
    # before it writes: a host-wide trace also held every other task's system calls, and on a busy
    # CI host the slow regex reference took 45 s over them. Every event kind asserted below happens
    # in the writer's own context (dirtying, the fsync's block insert, its calls and faults).
    code = ("import os, sys\nsys.stdin.readline()\n"
            "for _ in range(2000):\n    os.getppid()\n"
            "with open('/var/tmp/isobench-parsetest-%d' % os.getpid(), 'wb') as f:\n"
            "    f.write(os.urandom(1 << 20)); f.flush(); os.fsync(f.fileno())\n"
            "os.unlink(f.name)\n")
    instance = TraceInstance("parsetest", ftrace.WRITEBACK_EVENTS + ftrace.BLOCK_EVENTS + ftrace.BUFFER_EVENTS
                             + ftrace.PAGE_FAULT_EVENTS + ftrace.SYSCALL_EVENTS, 4096, pid_filter=True)
    # -I -S: no site packages, a quick start
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", code], stdin=subprocess.PIPE, text=True)
    try:
        instance.start([child.pid])
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
        instance.stop()
        raw = instance.trace_file.read_bytes()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        instance.discard()
    events = ftrace_parse.parse(raw)
    reference = parse_reference(raw)
    assert len(events) == len(reference) > 2000
    for column in ftrace_parse.COLUMNS:
        assert np.array_equal(getattr(events, column), np.array([r[column] for r in reference])), column
    kinds = {ftrace_parse.EVENTS[c] for c in np.unique(events.event)}
    assert {"writeback_dirty_folio", "block_rq_insert", "sys_enter", "page_fault_user"} <= kinds
    assert set(events.pid.tolist()) == {child.pid}  # the filter held: no other task's events


def test_ctrl_c_mid_trace_leaves_tracing_and_sysctls_as_they_were(tmp_path: Path) -> None:
    need_tracefs()
    need_knob_free()
    before = instances()
    sysctl = ((VM / "dirty_background_bytes").read_text(), (VM / "dirty_background_ratio").read_text(),
              (VM / "dirty_expire_centisecs").read_text(), (VM / "dirty_writeback_centisecs").read_text())
    study = write_study(tmp_path / "study.yaml", {
        "name": "ftrace-interrupt",
        # its files in tmp_path: the interrupted writer never reaches its own clean-up
        "workloads": [{"name": "file-writer", "params": {"rounds": 1, "wait_s": 60, "dir": str(tmp_path)}}],
        "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0,
        "probes": {"ftrace": {"dirty_background_bytes": 64 << 20, "dirty_expire_s": 3,
                              "dirty_writeback_s": 0.5}, "syscalls": {}}})
    runner = subprocess.Popen([*ISOBENCH, "run", str(study), "--out", str(tmp_path / "out")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=default_interrupts)
    mine = f"isobench-{runner.pid}-"
    try:
        deadline = time.monotonic() + 120
        while not any(name.startswith(mine) for name in instances()):
            assert runner.poll() is None and time.monotonic() < deadline, "the trace never started"
            time.sleep(0.2)
        assert (VM / "dirty_background_bytes").read_text().strip() == str(64 << 20)
        assert (VM / "dirty_expire_centisecs").read_text().strip() == "300"
        assert (VM / "dirty_writeback_centisecs").read_text().strip() == "50"
        time.sleep(1)
        runner.send_signal(signal.SIGINT)
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert not any(name.startswith(mine) for name in instances())
    assert not {name for name in instances() - before if name.startswith(mine)}
    assert ((VM / "dirty_background_bytes").read_text(), (VM / "dirty_background_ratio").read_text(),
            (VM / "dirty_expire_centisecs").read_text(), (VM / "dirty_writeback_centisecs").read_text()) == sysctl
    assert not list(Path("/dev/shm").glob(f"{mine}*"))


def test_a_killed_runners_instance_reader_and_sysctl_are_swept() -> None:
    need_tracefs()
    need_knob_free()
    sysctl = ((VM / "dirty_background_bytes").read_text(), (VM / "dirty_background_ratio").read_text(),
              (VM / "dirty_expire_centisecs").read_text(), (VM / "dirty_writeback_centisecs").read_text())
    code = ("import time\nfrom isobench.probes.tracefs import TraceInstance, DirtyBackgroundKnob, DirtyExpireKnob, "
            "DirtyWritebackKnob\n"
            "DirtyBackgroundKnob(32 << 20).apply(); DirtyExpireKnob(4).apply(); DirtyWritebackKnob(0.7).apply()\n"
            "i = TraceInstance('stale', ['writeback/writeback_start'], 256); i.start()\n"
            "print(i.name, i.trace_file, flush=True); time.sleep(600)\n")
    victim = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    name, trace_file = victim.stdout.readline().split()  # type: ignore[union-attr]
    victim.kill()  # kill -9: nothing of its own runs (its reader, a thread, died with it)
    victim.wait()
    from isobench.probes.tracefs import sweep_stale

    assert name in instances() and Path(trace_file).exists()
    assert (VM / "dirty_expire_centisecs").read_text().strip() == "400"  # the dead runner's, until swept
    assert (VM / "dirty_writeback_centisecs").read_text().strip() == "70"
    removed = sweep_stale()
    assert any(name in entry for entry in removed)
    assert name not in instances()
    assert not Path(trace_file).exists()
    assert ((VM / "dirty_background_bytes").read_text(), (VM / "dirty_background_ratio").read_text(),
            (VM / "dirty_expire_centisecs").read_text(), (VM / "dirty_writeback_centisecs").read_text()) == sysctl


def _waiting_child(code: str) -> subprocess.Popen[str]:
    """A process that does ``code`` once told to on stdin, so probes can attach first."""
    return subprocess.Popen([sys.executable, "-c", f"import sys\nsys.stdin.readline()\n{code}"],
                            stdin=subprocess.PIPE, text=True)


def test_page_faults_agree_with_perf_stat_for_the_same_process() -> None:
    need_tracefs()
    if not shutil.which("perf"):
        pytest.skip("host lacks perf")
    from isobench.probes.ftrace import FtraceProbe, FtraceSettings
    from isobench.target import ProbeTarget

    child = _waiting_child("x = bytearray(96 << 20)\nx[::4096] = b'1' * len(x[::4096])\n")
    probe = FtraceProbe(FtraceSettings(syscalls=False, block=False, buffers=False))
    try:
        probe.start(ProbeTarget("baremetal", child.pid))
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", "page-faults", "-p", str(child.pid)],
                                stderr=subprocess.PIPE, text=True)
        wait_perf_attached(perf.pid)
        time.sleep(0.2)  # and enabled
        child.communicate("\n", timeout=60)
        _, report = perf.communicate(timeout=60)
        result = probe.stop()
    finally:
        probe.abort()
        child.kill()
    counted = next(int(line.split(",")[0]) for line in report.splitlines() if "page-faults" in line)
    traced = dict((m, v) for m, v, _ in result.metrics)["page_faults"]
    assert counted > 20_000  # 96 MiB of fresh pages
    assert abs(traced - counted) <= 0.05 * counted, (traced, counted)


def test_strace_fallback_counts_the_same_syscalls() -> None:
    need_root()
    if not shutil.which("strace"):
        pytest.skip("host lacks strace")
    from isobench.probes.syscalls import SyscallProbe, SyscallSettings
    from isobench.target import ProbeTarget

    code = "import os\nfor _ in range(500):\n    os.getppid()\n"
    histograms = []
    for method in ("strace", "ftrace"):
        if method == "ftrace":
            need_tracefs()
        child = _waiting_child(code)
        probe = SyscallProbe(SyscallSettings(method=method))
        try:
            probe.start(ProbeTarget("baremetal", child.pid))
            time.sleep(0.5)
            child.communicate("\n", timeout=60)
            result = probe.stop()
        finally:
            probe.abort()
        assert result.info["method"] == method
        histograms.append(dict(zip(result.series["histogram"]["syscall"], result.series["histogram"]["calls"],
                                   strict=True)))
    assert histograms[0]["getppid"] == histograms[1]["getppid"] == 500


def test_tenants_of_a_cell_merge_in_time_order_and_stay_apart() -> None:
    import pyarrow as pa

    from isobench.nvmsim.from_store import _merge, pages_from_series

    def tenant(times: list[float], tgid: int) -> dict:
        n = len(times)
        return pages_from_series(pa.table({"time_s": times, "dev": [1] * n, "ino": [7] * n, "index": list(range(n)),
                                           "pages": [2] * n, "reason": [3] * n, "tgid": [tgid] * n}))

    merged = _merge([tenant([0.0, 2.0], 100), tenant([1.0, 3.0], 100)])
    assert merged["time_s"].tolist() == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0]  # folios of 2 pages
    assert merged["tenant"].tolist() == [0, 0, 1, 1, 0, 0, 1, 1]
    assert merged["index"].tolist() == [0, 1, 0, 1, 1, 2, 1, 2]


def test_overlapping_cells_restore_dirty_background_only_when_the_last_leaves() -> None:
    need_root()
    need_knob_free()
    from isobench.probes.tracefs import DirtyBackgroundKnob

    before = [(VM / name).read_text() for name in ("dirty_background_bytes", "dirty_background_ratio")]
    first, second = DirtyBackgroundKnob(8 << 20), DirtyBackgroundKnob(16 << 20)
    try:
        first.apply()
        second.apply()  # a second tenant starts while the first still runs
        first.restore()
        assert (VM / "dirty_background_bytes").read_text().strip() == str(16 << 20)
        second.restore()
        assert [(VM / name).read_text() for name in ("dirty_background_bytes", "dirty_background_ratio")] == before
    finally:
        first.restore()
        second.restore()


def test_tenants_starting_together_mount_tracefs_once(tmp_path: Path) -> None:
    """Four tenants' probes ask for tracefs at once where it is not mounted: all get it.
    Runs in a private mount namespace, so the host's tracefs mount is never touched."""
    need_root()
    if shutil.which("unshare") is None:
        pytest.skip("host lacks unshare (util-linux)")
    script = (
        "import subprocess, threading\n"
        "subprocess.run(['umount', '/sys/kernel/tracing'], check=False)\n"
        "from isobench.probes.tracefs import tracefs_problem\n"
        "results = []\n"
        "threads = [threading.Thread(target=lambda: results.append(tracefs_problem())) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(results)\n"
        "print(sum(line.split()[1] == '/sys/kernel/tracing' for line in open('/proc/self/mounts')))\n")
    out = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    results, mounts = out.stdout.splitlines()[-2:]
    assert results == "[None, None, None, None]" and mounts == "1", out.stdout


def test_a_trace_file_stops_at_its_cap_and_the_probe_says_so() -> None:
    need_tracefs()
    from isobench.probes.ftrace import FtraceProbe, FtraceSettings
    from isobench.target import ProbeTarget

    # 4 x 64 MiB of fresh pages: ~65,000 page-fault events, 2.3 MB as raw pages (36 bytes each)
    child = _waiting_child("for _ in range(4):\n    x = bytearray(64 << 20)\n    x[::4096] = b'1' * len(x[::4096])\n"
                           "    del x\n")
    probe = FtraceProbe(FtraceSettings(syscalls=False, block=False, buffers=False, max_trace_mb=1))
    try:
        probe.start(ProbeTarget("baremetal", child.pid))
        child.communicate("\n", timeout=60)
        instances = len(probe.trace.instances())
        result = probe.stop()
    finally:
        probe.abort()
        child.kill()
    # each file (write-back and the cell's page faults) stops at the cap in /dev/shm; one reached it
    assert 1 << 20 <= result.info["trace_bytes"] <= instances << 20, result.info["trace_bytes"]
    assert "probes.ftrace.max_trace_mb" in result.info["truncated"]
    found = dict((m, v) for m, v, _ in result.metrics)
    assert found["page_faults"] > 0  # what fits is still parsed
    assert found["lost_events"] > 0  # and what did not is counted as lost
