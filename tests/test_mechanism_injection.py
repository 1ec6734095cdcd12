"""Causes whose mechanism and count are known: the ``extra_syscalls`` and ``extra_faults`` knobs add
that many ``getppid()`` calls and minor page faults to the end of each timed item (its ``injected``
phase), with the same helpers (workloads/mechanisms.py) that the ``syscall-loop`` and ``fault-loop``
unit-cost workloads time. What is checked here is what the kernel itself counts: the worker's own
measured-window fault count (``run_faults.minor``, getrusage) grows by the injected number per item."""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from isobench.errors import UserError
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS, timing
from isobench.workloads.mechanisms import make_syscalls, touch_fresh_pages
from isobench.workloads.timing import (
    CLOCK,
    INJECTED,
    InjectingPhaseClock,
    PhaseClock,
    inject_mechanisms,
    inject_slowdown,
    phase_clock,
)
from tests.conftest import json_lines

ITEMS = 20


@pytest.fixture(autouse=True)
def nothing_injected_after() -> Iterator[None]:
    yield
    timing._slowdown.update(fraction=0.0, owed=0.0, phases=frozenset())
    timing._mechanisms.update(syscalls=0, faults=0)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _worker(workload: str, params: dict, knobs: dict) -> tuple[list[dict], dict]:
    """The cell's worker for real, on this host (bare metal): (its item records, its done record)."""
    cell = {"cell_id": "t", "workload": workload, "params": params, "knobs": knobs, "seed": 0}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=120)
    records = json_lines(out.stdout)
    assert out.returncode == 0 and records[-1]["type"] == "done", (out.stderr[-2000:], records[-1:])
    return [r for r in records if r["type"] == "item"], records[-1]


def _faults_per_item(items: list[dict], done: dict) -> float:
    assert "run_faults" in done, done  # a kernel that counts no faults (gVisor's) has none to compare
    return done["run_faults"]["minor"] / len(items)


def test_the_helpers_make_exactly_their_count_of_faults() -> None:
    touch_fresh_pages(8)  # numpy's import and the first mapping's own faults, outside the count
    for pages in (1, 300, 3000):
        before = _minor_faults()
        touch_fresh_pages(pages)
        # one fault per page, even with transparent huge pages "always" (one fault per 2 MiB then)
        assert pages <= _minor_faults() - before <= pages + 5, pages
    before = _minor_faults()
    make_syscalls(20_000)
    assert _minor_faults() - before <= 5


def test_extra_faults_add_their_count_to_each_items_measured_faults() -> None:
    params = {"iterations": ITEMS, "calls": 200}
    plain_items, plain = _worker("syscall-loop", params, {})
    items, done = _worker("syscall-loop", params, {"extra_faults": 500})
    assert len(items) == len(plain_items) == ITEMS
    added = _faults_per_item(items, done) - _faults_per_item(plain_items, plain)
    assert 450 < added < 700, (added, done["run_faults"], plain["run_faults"])
    assert all(set(item["phases"]) == {"syscalls", INJECTED} for item in items)
    assert all(set(item["phases"]) == {"syscalls"} for item in plain_items)
    assert done["extra_faults"] == 500 and done["extra_syscalls"] == 0 and "extra_faults" not in plain
    assert done["metrics"]["events_per_item"] == [200.0, "calls"]


def test_extra_syscalls_take_the_workloads_own_time_per_call_in_the_injected_phase() -> None:
    params = {"iterations": ITEMS, "calls": 500}
    plain_items, _ = _worker("syscall-loop", params, {"extra_syscalls": 0})
    items, done = _worker("syscall-loop", params, {"extra_syscalls": 5000})
    assert all(INJECTED not in item["phases"] for item in plain_items)  # 0 injects nothing
    assert all(INJECTED in item["phases"] for item in items) and done["extra_syscalls"] == 5000
    for item in items:
        assert item["e2e"] == pytest.approx(sum(item["phases"].values()), rel=1e-6)
    median_e2e = statistics.median(item["e2e"] for item in items)
    assert median_e2e > 3 * statistics.median(item["e2e"] for item in plain_items)
    # ground truth: the injected calls cost what the workload's own calls cost, one by one
    per_injected = statistics.median(item["phases"][INJECTED] for item in items) / 5000
    per_own = statistics.median(item["phases"]["syscalls"] for item in items) / 500
    assert 0.5 < per_injected / per_own < 2.0, (per_injected, per_own)


def test_fault_loop_makes_one_fault_per_page_and_says_so() -> None:
    pages = 1000
    items, done = _worker("fault-loop", {"iterations": ITEMS, "pages": pages}, {})
    assert len(items) == ITEMS and all(set(item["phases"]) == {"faults"} for item in items)
    assert done["metrics"]["events_per_item"] == [float(pages), "faults"]
    per_item = _faults_per_item(items, done)
    assert 0.95 * pages <= per_item <= 1.2 * pages, (per_item, done["run_faults"])
    assert WORKLOADS.get("fault-loop").unit_cost_of == "page_faults"
    assert WORKLOADS.get("syscall-loop").unit_cost_of == "syscalls"
    assert WORKLOADS.get("cpu-spin").unit_cost_of is None


def test_the_injected_phase_makes_the_events_first_then_spins_for_the_slowdown() -> None:
    assert type(phase_clock(CLOCK)) is PhaseClock
    inject_mechanisms(0, 2000)
    clock = phase_clock(CLOCK)
    assert isinstance(clock, InjectingPhaseClock)
    clock.start()
    sum(i * i for i in range(20_000))
    clock.lap("work")
    before = _minor_faults()
    phases, e2e = clock.stop()
    assert 2000 <= _minor_faults() - before <= 2010  # the faults happen in stop(), in the injected phase
    assert set(phases) == {"work", INJECTED} and e2e == pytest.approx(phases["work"] + phases[INJECTED])

    # with a slowdown too, its spin follows the events and is sized on the item's own time
    started = time.perf_counter()
    make_syscalls(20_000)
    calls_s = time.perf_counter() - started
    inject_slowdown(0.5)
    inject_mechanisms(20_000, 0)
    clock = phase_clock(CLOCK)
    for _ in range(5):
        clock.start()
        sum(i * i for i in range(100_000))
        clock.lap("work")
        phases, _ = clock.stop()
        assert phases[INJECTED] >= 0.5 * phases["work"] + 0.3 * calls_s, (phases, calls_s)


def test_a_scripts_steps_get_the_events_too(tmp_path: Path) -> None:
    script = tmp_path / "userdir" / "steps.py"
    script.parent.mkdir()
    script.write_text(textwrap.dedent("""
        from isobench import phase, step
        for _ in range(10):
            with step():
                with phase("work"):
                    sum(i * i for i in range(10_000))
    """))
    params = {"path": str(script)}
    plain_items, plain = _worker("script", params, {})
    items, done = _worker("script", params, {"extra_faults": 400})
    assert len(items) == len(plain_items) == 10 and all(set(i["phases"]) == {"work", INJECTED} for i in items)
    added = _faults_per_item(items, done) - _faults_per_item(plain_items, plain)
    assert 360 < added < 600, (added, done["run_faults"], plain["run_faults"])


@pytest.mark.parametrize("knob", ["extra_syscalls", "extra_faults"])
@pytest.mark.parametrize("value", [-1, "many", "10", 2.5, True])
def test_a_bad_count_is_refused_naming_the_field(knob: str, value: object) -> None:
    study = {"name": "m", "workloads": [{"name": "syscall-loop"}],
             "platforms": [{"name": "baremetal", "knobs": {knob: value}}]}
    with pytest.raises(UserError) as caught:
        load_study_text(json.dumps(study), "m.yaml", check_host=False)
    assert caught.value.field == f"platforms[0].knobs.{knob}" and caught.value.file == "m.yaml"
    assert caught.value.fix, str(caught.value)
    with pytest.raises(ValueError, match=knob):
        inject_mechanisms(**{"syscalls": 0, "faults": 0, knob.removeprefix("extra_"): value})  # type: ignore[arg-type]


def test_a_good_count_is_taken_by_every_platform() -> None:
    from isobench.platforms import PLATFORMS

    study = {"name": "m", "workloads": [{"name": "syscall-loop"}], "knobs": {"extra_faults": [0, 100]},
             "platforms": [{"name": "baremetal", "knobs": {"extra_syscalls": 1000}}]}
    loaded = load_study_text(json.dumps(study), "m.yaml", check_host=False)
    assert loaded.platforms[0].knobs["extra_syscalls"] == 1000
    for name, platform in PLATFORMS:
        for knobs in ({}, {"cpus": 1.0}, {"cpuset": "0"}, {"memory": "512m"}):  # a layer rung needs its own
            try:
                platform.validate_knobs(knobs)
            except ValueError:
                continue
            platform.validate_knobs({**knobs, "extra_syscalls": 1000, "extra_faults": 100})
            break
        else:
            pytest.fail(f"{name}: no knob set to check the injection knobs beside")
