"""`--power` for Park & Bahn F6 (replicate/writeback_power.py): the device write-back checks get an
extra writer of the paper's size (the ``extra_writebacks`` knob, workloads/file_writer.py) on the
baseline, sized on the baseline's own calls in the paper's run. No probe runs here."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
import yaml

from isobench.analysis.finding_spec import load_findings
from isobench.errors import UserError
from isobench.replicate import power, writeback_power
from isobench.replicate.study_text import study_text
from isobench.studyfile import load_study_text
from isobench.workloads.channel import CellContext
from isobench.workloads.file_writer import FileWriter, FileWriterParams
from tests import report_store

COUNT = "device write-back calls, container / host"
SPREAD = "device write-back interval s.d., container / host"


def _f6() -> dict[str, power.PowerPlan]:
    return {p.what: p for p in power.plan_power(load_findings("park-bahn-2023"), {"F6"})}


def test_f6_gets_an_extra_writer_of_the_papers_size_and_other_counts_do_not() -> None:
    plans = _f6()
    count, spread = plans[COUNT], plans[SPREAD]
    assert count.injected and count.inject == "writer" and count.effect == 1.33 and count.effect_from == "effect"
    # the spread has no figure of its own: it gets the count's writer, and says so
    assert spread.injected and spread.inject == "writer" and spread.effect == 1.33
    assert "no `effect:`" in spread.effect_from and "count check" in spread.effect_from
    count.rate = 0.25
    assert count.knobs() == {"extra_writebacks": 0.25}
    assert "1.33× the device write-back calls" in power.injected_words(count)
    # F4's counts (faults, cycles) still have no injection, and say what it would need
    f4 = [p for p in power.plan_power(load_findings("park-bahn-2023"), {"F4"}) if p.what.startswith("page faults")]
    assert f4 and not f4[0].injected and "extra process" in f4[0].reason


def test_a_writeback_check_without_any_effect_or_with_fewer_calls_is_not_injected() -> None:
    from isobench.analysis.finding_spec import Check

    bare = Check(what="x", workload="checkpoints", platform="docker", metric=writeback_power.COUNT_METRIC,
                 expect="> 1.0")
    assert "nothing to size" in power.plan_check("T", bare, "s", "baremetal").reason
    fewer = Check(what="x", workload="checkpoints", platform="docker", metric=writeback_power.COUNT_METRIC,
                  expect="< 1.0", effect=0.8)
    assert "only add calls" in power.plan_check("T", fewer, "s", "baremetal").reason


@pytest.mark.parametrize("quick", [True, False])
def test_the_f6_arm_is_the_baseline_plus_the_writer_and_nothing_else(quick: bool) -> None:
    paper = load_findings("park-bahn-2023")
    plan = _f6()[COUNT]
    plan.rate = 0.5
    check = next(c for f in paper.findings for c in f.checks if c.what == COUNT)
    data = yaml.safe_load(study_text(paper, plan.study, quick, None))
    study = power.power_study(data, plan, check, quick)
    assert [w.get("label") or w["name"] for w in study["workloads"]] == ["checkpoints"]
    base, injected = study["platforms"]
    assert base["name"] == injected["name"] == "baremetal" and "label" not in base and injected["label"] == "docker"
    assert injected["knobs"] == {**(base.get("knobs") or {}), "extra_writebacks": 0.5}
    # the probe and its sysctl (dirty_background_bytes, restored by the runner) stay the study's
    assert study["probes"]["ftrace"] == data["probes"]["ftrace"]
    parsed = load_study_text(yaml.safe_dump(study), "power", check_host=False)
    assert parsed.platforms[1].knobs["extra_writebacks"] == 0.5


@pytest.mark.parametrize("value", [0, -1, 21, "often"])
def test_the_knob_refuses_a_rate_it_cannot_inject_naming_the_field(value: object) -> None:
    study = {"name": "t", "workloads": [{"name": "file-writer"}],
             "platforms": [{"name": "baremetal", "knobs": {"extra_writebacks": value}}]}
    with pytest.raises(UserError) as err:
        load_study_text(yaml.safe_dump(study), "t.yaml", check_host=False)
    said = str(err.value)
    assert "extra_writebacks" in said and "\n" not in said.strip()


def test_the_rate_is_sized_on_the_baselines_calls_in_the_papers_run(tmp_path: Path) -> None:
    directory = report_store.build(tmp_path / "store")  # every cell ran 1.0 s of wall time
    assert writeback_power.baseline_calls_per_s(directory, "lenet-train", "baremetal") is None  # no calls recorded
    from isobench.store import Store

    store = Store.open(directory)
    try:
        ids = [r["cell_id"] for r in store.conn.execute("SELECT cell_id FROM cells WHERE platform_key = 'baremetal'")]
        store.conn.executemany("INSERT INTO metrics VALUES (?, ?, ?, 'calls')",
                               [(i, writeback_power.COUNT_METRIC, 4.0) for i in ids])
        store.conn.commit()
    finally:
        store.close()
    assert writeback_power.baseline_calls_per_s(directory, "lenet-train", "baremetal") == pytest.approx(4.0)
    rate, said = writeback_power.writer_rate(1.33, directory, "lenet-train", "baremetal")
    assert rate == pytest.approx(0.33 * 4.0) and "in the paper's run" in said
    assert writeback_power.expected_ratio(rate, 4.0) == pytest.approx(1.33)
    # no store: one periodic call per flusher period
    rate, said = writeback_power.writer_rate(1.5, tmp_path / "absent", "lenet-train", "baremetal")
    assert rate == pytest.approx(0.5 / writeback_power.flusher_period_s()) and "periodic" in said


def test_the_flusher_period_is_read_from_the_sysctl(tmp_path: Path) -> None:
    sysctl = tmp_path / "dirty_writeback_centisecs"
    sysctl.write_text("250\n")
    assert writeback_power.flusher_period_s(sysctl) == 2.5
    sysctl.write_text("0\n")  # periodic write-back off: the kernel's default period is assumed
    assert writeback_power.flusher_period_s(sysctl) == 5.0
    assert writeback_power.flusher_period_s(tmp_path / "absent") == 5.0


def _run_writer(tmp_path: Path, knobs: dict[str, object]) -> dict[str, object]:
    stream = io.StringIO()
    ctx = CellContext(stream, {"knobs": knobs, "seed": 7})
    params = FileWriterParams(rounds=4, file_kb=8, fsync=False, interval_s=0.1, dir=str(tmp_path))
    FileWriter().run(params, ctx)
    ctx.finish()
    assert list(tmp_path.iterdir()) == []  # checkpoint, log and side file removed
    return next(r for r in map(json.loads, stream.getvalue().splitlines()) if r.get("type") == "done")


def test_the_file_writer_runs_the_side_writer_only_with_the_knob(tmp_path: Path) -> None:
    done = _run_writer(tmp_path, {"extra_writebacks": 20.0})  # ~0.4 s at 20 a second
    notes = done.get("notes") or done
    assert notes["extra_writebacks"] == 20.0 and int(notes["extra_writeback_syncs"]) >= 1
    plain = _run_writer(tmp_path, {})
    assert "extra_writebacks" not in json.dumps(plain)


def test_the_side_writer_makes_its_rate_of_syncfs_calls(tmp_path: Path) -> None:
    from isobench.workloads.file_writer import ExtraWriter

    writer = ExtraWriter(tmp_path / "side", 20.0, seed=1)
    writer.start()
    time.sleep(0.5)  # ten 50-ms slots, one call at a random moment of each
    writer.stop()
    assert not writer.error and 5 <= writer.calls <= 11, writer.calls
    assert (tmp_path / "side").stat().st_size == 4096 * writer.calls


def test_each_injected_syncfs_is_a_device_write_back_call_of_the_flusher(tmp_path: Path) -> None:
    """One real cell (bare metal, ftrace): the writer's calls are the probe's ``sync`` calls on the
    checkpoint's device, so the injected arm's count is the baseline's plus the writer's."""
    from tests.conftest import need_root, run_cli, write_study

    need_root()
    from isobench.probes.tracefs import tracefs_problem

    if tracefs_problem():
        pytest.skip(f"host lacks tracefs instances: {tracefs_problem()}")
    study = write_study(tmp_path / "study.yaml", {
        "name": "extra-writer",
        "workloads": [{"name": "file-writer", "label": "checkpoints",
                       "params": {"rounds": 8, "file_kb": 64, "fsync": False, "interval_s": 0.25, "delay_s": 0.5}}],
        "platforms": [{"name": "baremetal", "knobs": {"extra_writebacks": 4.0}}],
        "repetitions": 1, "warmup": 0, "timeout_s": 120,
        "probes": {"ftrace": {"block": False, "page_faults": False, "syscalls": False}}})
    run_cli("run", str(study), "--out", str(tmp_path / "out"), check=True, timeout=120)
    from isobench.store import Store

    store = Store.open(tmp_path / "out")
    try:
        (cell,) = store.cells()
        found = {r["metric"]: r["value"] for r in store.metric_rows()}
    finally:
        store.close()
    syncs = cell["platform_info"]["workload"]["extra_writeback_syncs"]
    assert syncs >= 4, cell["platform_info"]["workload"]  # ~2 s at 4 a second
    # every syncfs started a flusher call on the device; others' syncs on the host may add more
    assert found["probe.ftrace.device_writebacks.sync"] >= syncs, found
    assert found["probe.ftrace.device_writebacks"] >= syncs


def test_a_workload_that_would_ignore_the_injected_writer_is_refused_at_load() -> None:
    from isobench.errors import UserError
    from isobench.studyfile import load_study_text

    text = ("name: k\nworkloads: [{name: cpu-spin}]\nplatforms: [{name: baremetal}, "
            "{name: baremetal, label: w, knobs: {extra_writebacks: 1}}]\n")
    with pytest.raises(UserError, match=r"platforms\[1\]\.knobs\.extra_writebacks: .*cpu-spin would run without it"):
        load_study_text(text, "k.yaml", check_host=False)


def test_the_two_f6_checks_read_one_power_run_of_the_same_cells(tmp_path: Path) -> None:
    """F6's count and its interval spread inject the same writer into the same cells: one run serves
    both (each used to run its own copy: at full size six more minutes of checkpoint cells)."""
    from rich.console import Console

    from tests.conftest import need_root
    from tests.test_ftrace import need_tracefs

    need_root()
    need_tracefs()
    said = io.StringIO()
    results = power.run_power(load_findings("park-bahn-2023"), tmp_path, False, True, None, {},
                              Console(file=said, width=200), {"F6"})
    assert {r.what for r in results} == {COUNT, SPREAD}
    runs = [p for p in (tmp_path / "park-bahn-2023" / "power").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    assert {r.directory for r in results} == {str(runs[0])}
    assert "the same cells as" in said.getvalue()
