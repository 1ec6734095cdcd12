"""`isobench explain`: a suspected data-path hint names its intervention (the same entry with its
data copied in); explain writes the follow-up study of exactly what tests it, runs it on real
platforms, and the follow-up's hint is then confirmed or refuted."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from isobench.analysis.summary import analyse
from isobench.explain import explain_directory, follow_up_study, interventions_of
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests import report_store
from tests.conftest import need_docker, need_root, run_cli

#: the known store's study with the small design a test run needs: two sequential rounds, no A/A
SMALL = report_store.STUDY.replace("repetitions: 6\n", "repetitions: 2\nschedule: sequential\naa: false\n"
                                                       "min_seconds: null\nwarmup_items: 0\n").replace(
    "params: {steps: 10, batch_size: 8}", "params: {steps: 4, batch_size: 8}")


def _stalled_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(report_store.EFFECT, "docker", {"fetch_stall": 2.5})


def test_the_follow_up_holds_the_baseline_the_aa_the_suspect_and_the_suspect_with_its_data_copied_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stalled_docker(monkeypatch)
    store = Store.open(report_store.build(tmp_path / "known"))
    stored = store.meta("study_yaml") or ""
    study = load_study_text(stored, "known", check_host=False)
    tests, skipped = interventions_of(analyse(store, with_views=False).hints, study)
    assert tests == [{"workload": "lenet-train", "entry": "docker", "knobs": {"data_mount": "copy"}, "fields": {}}]
    assert not skipped
    text, name = follow_up_study(stored, study, "known", tests)
    follow_up = yaml.safe_load(text)
    assert name == "known-explain" == follow_up["name"]
    assert [p.get("label", p["name"]) for p in follow_up["platforms"]] == [
        "baremetal", "aa", "docker", "docker-data-mount-copy"]  # not docker-pinned, not vm
    assert follow_up["platforms"][-1]["knobs"] == {"cpus": 1.0, "data_mount": "copy"}
    assert [w["name"] for w in follow_up["workloads"]] == ["lenet-train"]
    assert follow_up["repetitions"] == 6 and follow_up["baseline"] == "baremetal"  # the study's own design


def test_an_entry_whose_platform_takes_no_data_mount_is_named_and_not_planned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = report_store.STUDY.replace("  - {name: docker, label: vm}\n", "  - {name: baremetal, label: slowdisk, knobs: {cpus: 1.0}}\n")
    monkeypatch.setitem(report_store.EFFECT, "slowdisk", {"fetch_stall": 2.5})
    store = Store.open(report_store.build(tmp_path / "known", study_text=text))
    study = load_study_text(text, "known", check_host=False)
    tests, skipped = interventions_of(analyse(store, with_views=False).hints, study)
    assert tests == [] and skipped == ["lenet-train on slowdisk: its platform has no data_mount"]


def test_an_overhead_without_unit_costs_gets_the_microbenchmarks_and_the_probe_that_price_it(
        tmp_path: Path) -> None:
    known = report_store.build(tmp_path / "known")  # docker and vm are slower; no counts, no unit costs
    plan = explain_directory(known, None)
    assert plan.follow_up is not None and not plan.skipped and plan.cores is None  # docker: no sandbox-cores
    text, name, target = plan.follow_up.text, plan.follow_up.name, plan.follow_up.target
    follow_up = yaml.safe_load(text)
    assert target == known / "explain" and name == "known-explain"
    assert [w["name"] for w in follow_up["workloads"]] == ["lenet-train", "fault-loop", "syscall-loop"]
    assert [p.get("label", p["name"]) for p in follow_up["platforms"]] == ["baremetal", "aa", "docker"]  # vm: emulated
    assert "syscalls" in follow_up["probes"] and "proc" in follow_up["probes"]  # the default set is kept


def test_nothing_to_explain_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("docker", "docker-pinned", "vm"):
        monkeypatch.setitem(report_store.EFFECT, key, {})  # no entry is slower: no overhead to explain
    known = report_store.build(tmp_path / "known")
    done = run_cli("explain", str(known))
    assert done.returncode == 0 and "nothing to explain" in done.stdout, done.stderr
    assert not (known / "explain").exists()


def test_explain_on_a_directory_without_results_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_cli("explain", str(tmp_path / "nothing"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "fix:" in lines[0] and done.stdout == ""


def test_explain_runs_the_intervention_on_real_platforms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_root()
    need_docker()
    _stalled_docker(monkeypatch)
    known = report_store.build(tmp_path / "known", study_text=SMALL)
    done = run_cli("explain", str(known), timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "follow-up results:" in done.stdout
    with sqlite3.connect(known / "explain" / "isobench.sqlite") as db:
        rows = db.execute("SELECT platform_key, knobs, status, inside FROM cells WHERE warmup = 0").fetchall()
    keys = sorted({r[0] for r in rows})
    assert keys == ["aa", "baremetal", "docker", "docker-data-mount-copy"] and all(r[2] == "ok" for r in rows), rows
    with sqlite3.connect(known / "explain" / "isobench.sqlite") as db:
        workloads = {r[0] for r in db.execute("SELECT workload FROM cells WHERE warmup = 0")}
        on_data = db.execute("SELECT platform_key, inside FROM cells WHERE warmup = 0 AND workload = 'lenet-train'")
        mounts = {r[0]: json.loads(r[1])["data_mount"] for r in on_data}
    # the explained overhead had no unit costs: the microbenchmarks that price them ran beside it
    assert workloads == {"lenet-train", "syscall-loop", "fault-loop"}
    copied = [json.loads(r[1]) for r in rows if r[0] == "docker-data-mount-copy"]
    assert all(k.get("data_mount") == "copy" for k in copied)
    # the copied-in entry read its data from inside the container, the other through the bind mount
    assert mounts["docker-data-mount-copy"] != mounts["docker"], mounts
    # a second explain would overwrite results: refused, nothing lost
    again = run_cli("explain", str(known))
    assert again.returncode == 2 and "--out" in again.stderr


def test_an_intervention_is_the_same_engine_with_the_knob_added_not_another_runsc_platform(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gVisor on ptrace is not tested by gVisor on systrap with its data copied in (a real run
    had called ptrace's data path confirmed that way): the hint stays suspected and names the
    ptrace entry with the data copied in."""
    text = report_store.STUDY.replace(
        "  - {name: docker, knobs: {cpus: 1.0}}\n  - {name: docker, label: docker-pinned, knobs: {cpuset: \"0\"}}\n"
        "  - {name: docker, label: vm}\n",
        "  - {name: gvisor, label: gvisor-copy, knobs: {data_mount: copy}}\n"
        "  - {name: gvisor, label: gvisor-ptrace, platform: ptrace}\n")
    monkeypatch.setitem(report_store.EFFECT, "gvisor-copy", {})
    monkeypatch.setitem(report_store.EFFECT, "gvisor-ptrace", {"fetch_stall": 2.5})
    store = Store.open(report_store.build(tmp_path / "known", study_text=text))
    found = [h for h in analyse(store, with_views=False).hints if h.rule == "data-path"]
    assert [h.status for h in found] == ["suspected"], [h.text for h in found]
    assert found[0].test == {"workload": "lenet-train", "entry": "gvisor-ptrace", "knobs": {"data_mount": "copy"},
                             "fields": {}}
