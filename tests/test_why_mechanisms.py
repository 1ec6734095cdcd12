"""The "why" model against injected causes whose mechanism is known.

One real bare-metal study: a CPU-bound workload on the baseline, an A/A entry, one entry that
makes 5,000 extra system calls per item and one that touches 3,000 fresh pages per item, with
the two microbenchmarks that price a call and a fault on each entry and the syscalls probe; and
one entry under a CPU quota (0.6 of a core), whose added time is the time it spends throttled. The
model must put each entry's added time on its own mechanism (share near 100%, the other near 0),
and the hint that says so must be confirmed by the intervention the study holds (the same entry
without the injection: the A/A entry)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from isobench.analysis.summary import analyse
from isobench.analysis.views.why import why_table_id
from isobench.store import Store
from tests.conftest import need_root, run_cli
from tests.test_ftrace import need_tracefs

STUDY = """\
name: why-ground-truth
description: injected causes with known mechanisms
schedule: sequential
repetitions: 5
aa: false
warmup_items: 2
min_seconds: null
workloads:
  - {name: cpu-spin, params: {iterations: 12, work: 150000, min_seconds: 0.5}}
  - {name: syscall-loop, params: {iterations: 12, calls: 5000}}
  - {name: fault-loop, params: {iterations: 12, pages: 3000}}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: baremetal, label: calls, knobs: {extra_syscalls: 5000}}
  - {name: baremetal, label: faults, knobs: {extra_faults: 3000}}
  - {name: baremetal, label: quota, knobs: {cpus: 0.6}}
baseline: baremetal
probes: {syscalls: {method: ftrace, buffer_kb: 32768}}
"""


@pytest.fixture(scope="module")
def ground_truth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_root()
    need_tracefs()
    base = tmp_path_factory.mktemp("why")
    (base / "study.yaml").write_text(STUDY)
    done = run_cli("run", str(base / "study.yaml"), "--out", str(base / "out"), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return base / "out"


def _rows(out: Path, label: str) -> dict[str, object]:
    store = Store.open(out)
    analysis = analyse(store)
    from isobench.analysis.attribution import attribute

    found = [a for a in attribute(store, analysis.comparisons, "baremetal")
             if a.comparison.label == label and a.comparison.workload == "cpu-spin"]
    assert len(found) == 1, f"{label}: no resolved overhead to attribute"
    return {row.mechanism.key: row for row in found[0].rows} | {"hints": analysis.hints, "views": analysis.views}


def test_injected_system_calls_are_put_on_system_calls(ground_truth: Path) -> None:
    rows = _rows(ground_truth, "calls")
    calls, faults = rows["syscalls"], rows["page_faults"]
    # syscall-loop prices a call warm (the same call in a tight loop); inside another workload a
    # call costs more (cold caches), so the model explains most of the injected cost, not all: 0.71-0.91
    # of it over repeated runs here, with the tracer's reader off the traced CPU; and on a busy CI
    # host the added time itself is noisy (once 1.50, 95% CI 1.06-2.40). So the share's interval must
    # reach into 0.6-1.3: a count or a price that went wrong (none of it, or several times it) fails.
    assert calls.share is not None and calls.share[1] < 1.3 and calls.share[2] > 0.6, calls.share  # type: ignore[attr-defined]
    assert calls.n_platform.mean - calls.n_baseline.mean > 4_500  # type: ignore[attr-defined]
    assert faults.share is None or abs(faults.share[0]) < 0.15, faults.share  # type: ignore[attr-defined]
    figure = why_table_id("cpu-spin", "calls", {"extra_syscalls": 5000})
    hint = next(h for h in rows["hints"] if h.rule == "mechanism-syscalls" and h.figure == figure)  # type: ignore[attr-defined]
    assert hint.status == "confirmed", hint.text


def test_injected_page_faults_are_put_on_page_faults(ground_truth: Path) -> None:
    rows = _rows(ground_truth, "faults")
    calls, faults = rows["syscalls"], rows["page_faults"]
    # The fault-loop microbenchmark prices a fault warm (the same pages freed and taken again): inside
    # another workload a fault costs more, and the model leaves that part honestly unexplained.
    assert faults.share is not None and faults.share[1] < 1.4 and faults.share[2] > 0.5, faults.share  # type: ignore[attr-defined]
    assert 2_700 < faults.n_platform.mean - faults.n_baseline.mean < 3_600  # type: ignore[attr-defined]
    assert calls.share is None or abs(calls.share[0]) < 0.15, calls.share  # type: ignore[attr-defined]
    table = next(v for v in rows["views"] if getattr(v, "id", "").startswith("tab-why-cpu-spin-faults"))  # type: ignore[attr-defined]
    assert table.rows[-1][0] == "not explained by these"


def test_the_markdown_report_has_a_why_section_with_each_overhead(ground_truth: Path) -> None:
    from isobench.report.markdown import render_markdown

    text = render_markdown(analyse(Store.open(ground_truth)))
    section = text.split("## Why, in numbers", 1)[1].split("\n## ", 1)[0]
    assert "`tab-why-cpu-spin-calls-extra_syscalls-5000`" in section
    assert "`tab-why-cpu-spin-faults-extra_faults-3000`" in section
    assert "tab-why-syscall-loop" not in text  # the microbenchmarks price the mechanisms; they are not explained


def test_a_cpu_quota_is_put_on_throttling_and_removing_it_confirms_it(ground_truth: Path) -> None:
    rows = _rows(ground_truth, "quota")
    throttled, calls = rows["throttling"], rows["syscalls"]
    assert throttled.share is not None and 0.8 < throttled.share[0] < 1.2, throttled.share  # type: ignore[attr-defined]
    assert calls.share is None or abs(calls.share[0]) < 0.1  # type: ignore[attr-defined]
    figure = why_table_id("cpu-spin", "quota", {"cpus": 0.6})
    hint = next(h for h in rows["hints"] if h.rule == "mechanism-throttling" and h.figure == figure)  # type: ignore[attr-defined]
    assert hint.status == "confirmed" and "without cpus" in hint.text, hint.text
    # the runner counts the host context switches of the cell's threads over the window: a throttled
    # cell is switched out at every period it runs out of quota (evidence only: not priced). At
    # cpus 0.6 that is about ten a second, some 0.1 more per item of this size: resolved, not doubled
    # (the baseline's own switches, timer ticks and the harness, read 0.05-0.11 per item here)
    switches = rows["switches"]
    assert switches.explained is None and switches.missing.startswith("evidence only")  # type: ignore[attr-defined]
    base, quota = switches.n_baseline, switches.n_platform  # type: ignore[attr-defined]
    more = quota.mean - base.mean
    assert more > 0.04 and more > 2 * math.hypot(base.se, quota.se), (base, quota)


def test_the_summary_says_in_one_line_what_each_mechanism_explains(ground_truth: Path) -> None:
    from tests.conftest import run_cli

    done = run_cli("summary", str(ground_truth))
    lines = " ".join(done.stdout.split())  # the console folds long lines
    assert done.returncode == 0, done.stderr
    assert "why, in numbers: cpu-spin on baremetal/calls adds" in lines
    calls = lines.split("why, in numbers: cpu-spin on baremetal/calls adds", 1)[1].split("why", 1)[0]
    assert "system calls" in calls and "not explained" in calls and "CFS throttling" not in calls  # zero: left out
