"""Interventions that change an entry's own fields, not only its knobs (issue 25): gVisor on the other
runsc platform, a serving entry on the host's network, more cores for a sandbox (untestable within a
study's design, said so), and glibc allocator settings (``malloc: tuned``) for page faults. Synthetic
stores and hints, no cells, except one run of the worker itself."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from isobench.analysis.attribution import MECHANISMS
from isobench.analysis.hint_base import Hint
from isobench.analysis.hints import _intervention, stream_hint
from isobench.analysis.interventions import intervention
from isobench.analysis.summary import analyse
from isobench.errors import UserError
from isobench.explain import follow_up_study, intervention_label, interventions_of
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests import report_store

GVISOR = report_store.STUDY.replace(
    "  - {name: docker, knobs: {cpus: 1.0}}\n  - {name: docker, label: docker-pinned, knobs: {cpuset: \"0\"}}\n"
    "  - {name: docker, label: vm}\n", "{entries}")
#: CPU time per item: the baseline's, and each entry's as a multiple of it
CPU_PER_ITEM = 0.010


def _gvisor_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entries: dict[str, tuple[str, float, float]],
                  cores: dict[str, object] | None = None) -> tuple[Path, str]:
    """A store with gVisor entries (label -> (entry as written, forward-phase factor, CPU time
    factor)): a slower forward phase with more CPU time per item is the sandbox's own work."""
    text = GVISOR.replace("{entries}", "".join(f"  - {written}\n" for written, _, _ in entries.values()))
    cpu = {"baremetal": 1.0, "aa": 1.0, **{key: factor for key, (_, _, factor) in entries.items()}}
    for key, (_, forward, _) in entries.items():
        monkeypatch.setitem(report_store.EFFECT, key, {"forward": forward} if forward != 1 else {})
    known = report_store.build(tmp_path / "known", study_text=text)
    with sqlite3.connect(known / "isobench.sqlite") as db:
        for cell_id, key, rep in db.execute("SELECT cell_id, platform_key, rep FROM cells").fetchall():
            value = CPU_PER_ITEM * cpu[key] * report_store.NOISE[(rep + len(key)) % len(report_store.NOISE)]
            db.execute("INSERT INTO metrics VALUES (?, 'cpu.per_item', ?, 's')", (cell_id, value))
        if cores is not None:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('cores', ?)", (json.dumps(cores),))
    return known, text


def _hints(known: Path, rule: str) -> list[Hint]:
    store = Store.open(known)
    try:
        return [h for h in analyse(store, with_views=False).hints if h.rule == rule]
    finally:
        store.close()


def test_a_systrap_entry_is_told_to_try_ptrace_and_a_ptrace_entry_never_is(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known, text = _gvisor_store(tmp_path, monkeypatch, {
        "gvisor": ("{name: gvisor}", 1.5, 1.3),
        "gvisor-ptrace": ("{name: gvisor, label: gvisor-ptrace, platform: ptrace, knobs: {cpus: 1.0}}", 1.5, 1.3)})
    found = {h.test["entry"]: h for h in _hints(known, "runsc-platform") if h.test}
    # each is told to try the platform it is not on, and the study has no such entry: both suspected
    assert found["gvisor"].test == intervention("lenet-train", "gvisor", fields={"platform": "ptrace"})
    assert found["gvisor-ptrace"].test == intervention("lenet-train", "gvisor-ptrace", fields={"platform": "systrap"})
    assert "`platform: ptrace`" not in found["gvisor-ptrace"].text and "(ptrace)" in found["gvisor-ptrace"].text
    assert all(h.status == "suspected" and "CPU time per item 1.3" in h.text for h in found.values())
    # explain writes each entry again on the other platform, its knobs kept, its label saying so
    study = load_study_text(text, "known", check_host=False)
    tests, skipped = interventions_of([found["gvisor-ptrace"]], study)
    assert tests == [found["gvisor-ptrace"].test] and not skipped
    follow_up = yaml.safe_load(follow_up_study(text, study, "known", tests)[0])
    written = {p.get("label", p["name"]): p for p in follow_up["platforms"]}
    assert list(written) == ["baremetal", "aa", "gvisor-ptrace", "gvisor-ptrace-platform-systrap"]
    assert written["gvisor-ptrace-platform-systrap"]["platform"] == "systrap"
    assert written["gvisor-ptrace-platform-systrap"]["knobs"] == {"cpus": 1.0}


@pytest.mark.parametrize(("ptrace_forward", "status"), [(1.0, "confirmed"), (1.5, "refuted")])
def test_the_other_runsc_platform_in_the_study_judges_the_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ptrace_forward: float, status: str) -> None:
    """gVisor's default platform (no ``platform:`` written) is tested by a ptrace entry beside it."""
    known, _ = _gvisor_store(tmp_path, monkeypatch, {
        "gvisor": ("{name: gvisor}", 1.5, 1.3),
        "gvisor-ptrace": ("{name: gvisor, label: gvisor-ptrace, platform: ptrace}", ptrace_forward,
                          1.3 if ptrace_forward > 1 else 1.0)})
    on_systrap = [h for h in _hints(known, "runsc-platform") if "on gvisor (systrap)" in h.text]
    assert [h.status for h in on_systrap] == [status], [h.text for h in on_systrap]
    assert on_systrap[0].test is None and "on platform=ptrace (gvisor-ptrace) the overhead is" in on_systrap[0].text
    # and the other way round: the entry that writes no platform runs systrap, gVisor's default
    on_ptrace = [h for h in _hints(known, "runsc-platform") if "on gvisor-ptrace (ptrace)" in h.text]
    assert [(h.status, h.test) for h in on_ptrace] == ([] if status == "confirmed" else [("refuted", None)])


def test_an_other_platform_that_costs_more_confirms_the_suspect_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ptrace costing more than systrap still shows that how calls are taken sets the cost: both
    hints are confirmed (one with the cost removed, one with it added), neither says "elsewhere"."""
    known, _ = _gvisor_store(tmp_path, monkeypatch, {
        "gvisor": ("{name: gvisor}", 1.3, 1.2),
        "gvisor-ptrace": ("{name: gvisor, label: gvisor-ptrace, platform: ptrace}", 2.0, 1.6)})
    found = {h.text.split(" on ", 1)[1].split(":", 1)[0]: h for h in _hints(known, "runsc-platform")}
    systrap, ptrace = found["gvisor (systrap)"], found["gvisor-ptrace (ptrace)"]
    assert (systrap.status, ptrace.status) == ("confirmed", "confirmed"), (systrap.text, ptrace.text)
    assert "more added: how the sandbox takes system calls sets this cost" in systrap.text
    assert "of it gone: how the sandbox takes system calls sets this cost" in ptrace.text
    assert "elsewhere" not in systrap.text + ptrace.text


def test_unit_cost_microbenchmarks_get_no_field_hints() -> None:
    from isobench.analysis.field_hints import _priced_workloads

    comparisons = [SimpleNamespace(workload=w, metric="e2e", is_aa=False, emulated=False)
                   for w in ("syscall-loop", "fault-loop", "resnet-infer")]
    assert [c.workload for c in _priced_workloads(SimpleNamespace(comparisons=comparisons))] == ["resnet-infer"]


def test_no_runsc_hint_without_evidence_of_the_sandboxs_own_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slower, but with the same CPU time per item: nothing points at system calls."""
    known, _ = _gvisor_store(tmp_path, monkeypatch, {"gvisor": ("{name: gvisor}", 1.5, 1.0)})
    assert _hints(known, "runsc-platform") == []


@pytest.mark.parametrize(("schedule", "reason"), [("duet", "would be its partner's"),
                                                  ("sequential", "would be the harness's")])
def test_more_cores_for_a_one_core_sandbox_is_an_untestable_intervention_with_its_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, schedule: str, reason: str) -> None:
    monkeypatch.setattr(sys.modules[__name__], "GVISOR", GVISOR + f"schedule: {schedule}\n")
    sides = {"layout": "disjoint", "harness": "shared", "sides": ["0", "1"]} if schedule == "duet" else \
        {"layout": "disjoint", "harness": "0", "sides": ["1"]}
    known, text = _gvisor_store(tmp_path, monkeypatch, {
        "gvisor": ("{name: gvisor}", 1.5, 1.3),
        "gvisor-ptrace": ("{name: gvisor, label: gvisor-ptrace, platform: ptrace}", 1.5, 1.3)}, cores=sides)
    found = _hints(known, "sandbox-cores")
    # systrap on one core: the platform's design caveat; ptrace is not held back by one core
    assert len(found) == 1 and found[0].test is None and found[0].status == "suspected"
    assert "untestable here" in found[0].text and reason in found[0].untestable
    assert found[0].untestable.startswith("lenet-train on gvisor: more cores for the sandbox's own threads")
    _, skipped = interventions_of(found, load_study_text(text, "known", check_host=False))
    assert skipped == [found[0].untestable]
    # two cores per cell: no caveat, no hint
    with sqlite3.connect(known / "isobench.sqlite") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'cores'", (json.dumps({"sides": ["0-1"]}),))
    assert _hints(known, "sandbox-cores") == []


def _serving_ctx(tmp_path: Path, platforms: str) -> SimpleNamespace:
    text = report_store.STUDY.replace("  - {name: docker, label: vm}\n", platforms)
    store = Store.create(tmp_path / "s", text, "known", "known.yaml", {"cores": 2})
    return SimpleNamespace(store=store, comparisons=[], same_engine=lambda a, b: False)


@pytest.mark.parametrize(("written", "label", "expect"), [
    ("  - {name: docker, label: web}\n", "web", "test"),
    ("  - {name: docker, label: web, options: {network: host}}\n", "web", "already"),
    ("  - {name: baremetal, label: web}\n", "web", "already"),
    ("  - {name: oci, label: web}\n", "web", "already"),
])
def test_the_stream_hint_names_the_host_network_only_for_an_entry_not_on_it(
        tmp_path: Path, written: str, label: str, expect: str) -> None:
    ctx = _serving_ctx(tmp_path, written)
    c = SimpleNamespace(workload="llm-serve", label=label, knobs={}, metric="e2e")
    hint = stream_hint(ctx, c, "llm-serve on it: only the stream slowed")  # type: ignore[arg-type]
    ctx.store.close()
    if expect == "test":
        assert hint.test == intervention("llm-serve", "web", fields={"options": {"network": "host"}})
        assert "`options: {network: host}`" in hint.text
    else:
        assert hint.test is None and "on the host's network already" in hint.text and "network: host" not in hint.text


def test_a_field_the_platform_does_not_take_or_the_entry_has_is_refused_with_why() -> None:
    text = report_store.STUDY.replace(
        "  - {name: docker, label: vm}\n",
        "  - {name: oci, label: crun, runtime: crun}\n  - {name: gvisor, label: gp, platform: ptrace}\n"
        "  - {name: docker, label: web, options: {shm_size: 1g}}\n  - {name: gvisor, label: gd}\n")
    study = load_study_text(text, "known", check_host=False)
    hints = [Hint("r", "t", "f", test=intervention("lenet-train", entry, fields=fields)) for entry, fields in (
        ("docker", {"platform": "ptrace"}), ("crun", {"options": {"network": "host"}}),
        ("gp", {"platform": "ptrace"}), ("gd", {"platform": "systrap"}), ("web", {"options": {"network": "host"}}))]
    tests, skipped = interventions_of(hints, study)
    assert skipped == ["lenet-train on docker: its platform takes no runsc platform (`platform: ptrace`)",
                       "lenet-train on crun: its platform refuses `options: {network: host}` (options: oci takes no "
                       "option 'network')",
                       "lenet-train on gp: the entry has `platform: ptrace` already",
                       "lenet-train on gd: the entry has `platform: systrap` already"]  # gVisor's default
    assert tests == [hints[4].test]
    follow_up = yaml.safe_load(follow_up_study(text, study, "known", tests)[0])
    web = next(p for p in follow_up["platforms"] if p.get("label") == "web-network-host")
    assert web["options"] == {"shm_size": "1g", "network": "host"}  # merged, not replaced
    assert intervention_label("gvisor", {"malloc": "tuned"}, {"platform": "ptrace"}) == \
        "gvisor-platform-ptrace-malloc-tuned"


def test_page_faults_are_tested_with_the_allocator_tuned_unless_the_entry_has_it() -> None:
    faults = next(m for m in MECHANISMS if m.key == "page_faults")
    suggested = _intervention(SimpleNamespace(knobs={"cpus": 1.0}), faults)  # type: ignore[arg-type]
    assert suggested is not None and suggested[0] == {"malloc": "tuned"}
    assert _intervention(SimpleNamespace(knobs={"malloc": "tuned"}), faults) is None  # type: ignore[arg-type]
    # an injected cause is removed first
    injected = _intervention(SimpleNamespace(knobs={"extra_faults": 100}), faults)  # type: ignore[arg-type]
    assert injected is not None and injected[0] == {"extra_faults": 0}


def test_a_bad_malloc_value_is_one_line_naming_the_knob() -> None:
    text = report_store.STUDY.replace("{name: docker, label: vm}", "{name: docker, label: vm, knobs: {malloc: fast}}")
    with pytest.raises(UserError) as err:
        load_study_text(text, "known.yaml", check_host=False)
    assert "knobs.malloc" in str(err.value) and "tuned" in str(err.value) and "\n" not in str(err.value)
    # every platform takes it: the worker applies it
    assert load_study_text(report_store.STUDY.replace("{name: baremetal, label: aa}",
                                                      "{name: baremetal, label: aa, knobs: {malloc: tuned}}"),
                           "known.yaml", check_host=False)


MMAPPED = """
import ctypes, sys
from isobench.workloads.allocator import apply_malloc
if sys.argv[1] == "tuned":
    apply_malloc("tuned")
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
before = libc.mallinfo2().hblks
block = libc.malloc(4 << 20)
print(libc.mallinfo2().hblks - before)
"""


def test_malloc_tuned_serves_a_large_block_from_the_heap_not_a_fresh_mapping() -> None:
    """The knob's effect, in a process of its own: glibc maps a fresh 4 MiB block (one mmapped chunk)
    unless ``malloc: tuned`` raised its threshold, and the worker applies it from the cell's knobs."""
    counts = {how: subprocess.run([sys.executable, "-c", MMAPPED, how], capture_output=True, text=True,
                                  check=True).stdout.strip() for how in ("plain", "tuned")}
    assert counts == {"plain": "1", "tuned": "0"}
    cell = {"cell_id": "c", "workload": "cpu-spin", "params": {"iterations": 3, "work": 1000},
            "knobs": {"malloc": "tuned"}, "seed": 0, "data_dir": None, "artifacts_dir": None, "platform_key": "b",
            "cores": None, "warmup_items": 0}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)], capture_output=True,
                         text=True, timeout=60)
    done = [json.loads(line) for line in out.stdout.splitlines() if '"done"' in line]
    assert out.returncode == 0 and done, out.stdout[-2000:] + out.stderr[-2000:]
    assert done[0]["malloc"] == "tuned" and done[0]["malloc_env"]["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20)


def test_the_why_table_shows_each_tested_intervention_as_a_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The why table of the systrap entry gets a 'tested' row for the ptrace entry beside it (its
    label after the suspect's, as explain writes it): the time it removed and the share of the added."""
    from isobench.analysis.views.base import Table

    known, _ = _gvisor_store(tmp_path, monkeypatch, {
        "gvisor": ("{name: gvisor}", 1.5, 1.3),
        "gvisor-platform-ptrace": ("{name: gvisor, label: gvisor-platform-ptrace, platform: ptrace}", 1.1, 1.05)})
    store = Store.open(known)
    try:
        views = analyse(store).views
    finally:
        store.close()
    tables = {v.id: v for v in views if isinstance(v, Table) and v.id.startswith("tab-why-")}
    systrap = next(t for tid, t in tables.items() if "-gvisor-" in tid and "ptrace" not in tid)
    tested = [row for row in systrap.rows if row[0].startswith("tested:")]
    assert [row[0] for row in tested] == ["tested: platform=ptrace"], systrap.rows
    removed_ms, share = -float(tested[0][3]), tested[0][4]
    assert removed_ms > 0 and share.endswith("% removed") and 50 <= int(share.split("%")[0]) <= 100
    assert "the entry as gvisor-platform-ptrace" in tested[0][5]
    # the ptrace entry's own table has no such row: the systrap entry is not labelled after it
    ptrace = next(t for tid, t in tables.items() if "-gvisor-platform-ptrace" in tid)
    assert not any(row[0].startswith("tested:") for row in ptrace.rows)
