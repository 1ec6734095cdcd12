"""`isobench explain` tests more cores for a sandbox's own threads in a study of its own (issue 25):
the cores study's text (sequential, every core, the suspects only), where it goes and when it is
refused, and the verdict that compares each entry's overhead there with its overhead in the study.
Synthetic stores and comparisons: no cell runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from isobench.analysis.compare import Comparison
from isobench.analysis.hint_base import Hint
from isobench.analysis.more_cores import cells_words, cores_verdict, cores_verdicts
from isobench.analysis.summary import analyse
from isobench.analysis.views.why import why_table_id
from isobench.errors import UserError
from isobench.explain import (
    Evidence,
    budget_each,
    cores_study,
    cores_suspects,
    explain_directory,
    interventions_of,
)
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests import report_store
from tests.conftest import run_cli

#: the known store's study with two gVisor entries (systrap, gVisor's default, and ptrace) in a duet
PARENT = report_store.STUDY.replace(
    "  - {name: docker, knobs: {cpus: 1.0}}\n  - {name: docker, label: docker-pinned, knobs: {cpuset: \"0\"}}\n"
    "  - {name: docker, label: vm}\n",
    "  - {name: gvisor}\n  - {name: gvisor, label: gvisor-ptrace, platform: ptrace}\n") + \
    "schedule: duet\nduet_swap_s: 0.05\n"
#: one core per side of a duet on a 2-core host, as the runner records its layout
ONE_CORE_DUET = {"layout": "disjoint", "harness": "shared", "sides": ["0", "1"]}


def _store(directory: Path, monkeypatch: pytest.MonkeyPatch, text: str, gvisor: float,
           cores: dict[str, object]) -> Path:
    """A store of ``text`` whose gVisor entries' forward phase is ``gvisor`` times the baseline's."""
    for key in ("gvisor", "gvisor-ptrace"):
        monkeypatch.setitem(report_store.EFFECT, key, {"forward": gvisor})
    known = report_store.build(directory, study_text=text)
    with sqlite3.connect(known / "isobench.sqlite") as db:
        db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('cores', ?)", (json.dumps(cores),))
    return known


def _parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str = PARENT,
            cores: dict[str, object] | None = None) -> Path:
    return _store(tmp_path / "known", monkeypatch, text, 1.5, cores or ONE_CORE_DUET)


def _comparison(ratio: float, low: float | None, high: float | None) -> Comparison:
    return Comparison(workload="resnet-infer", platform="gvisor/runsc", label="gvisor", knobs={}, metric="e2e",
                      baseline="baremetal", ratio=ratio, ci_low=low, ci_high=high, n=6, significant=True,
                      n_baseline=6, p_value=0.001, mean=ratio * 0.01, baseline_mean=0.01, unit="s",
                      method="welch", is_aa=False)


def test_the_cores_study_is_sequential_on_every_core_with_the_suspects_only() -> None:
    text = """
name: two
workloads:
  - {name: lenet-train, params: {steps: 4, batch_size: 8}}
  - {name: syscall-loop}
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: gvisor}
  - {name: gvisor, label: gvisor-ptrace, platform: ptrace}
  - {name: docker, knobs: {cpus: 1.0}}
baseline: baremetal
schedule: duet
duet_swap_s: 0.02
repetitions: auto
budget: 8m
min_seconds: 2
warmup_items: 10
"""
    study = load_study_text(text, "two", check_host=False)
    written, name = cores_study(text, study, "two", [("lenet-train", "gvisor")], threads=1)
    raw = yaml.safe_load(written)
    # the workload keeps the one compute thread it had: the new core is for the sandbox's threads
    assert raw["knobs"] == {"threads": 1}
    study_threads = text.replace("schedule: duet", "knobs: {threads: 3}\nschedule: duet")
    kept = yaml.safe_load(cores_study(study_threads, load_study_text(study_threads, "two", check_host=False),
                                      "two", [("lenet-train", "gvisor")], threads=1)[0])
    assert kept["knobs"] == {"threads": 3}  # a study that sets its threads keeps them
    assert name == "two-cores" == raw["name"]
    assert raw["schedule"] == "sequential" and raw["cell_cores"] == "all"
    assert "duet_swap_s" not in raw  # a duet's field: a sequential study has no core trades
    # the baseline, the A/A entry and the suspect as written; not the other entries
    assert raw["platforms"] == [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}, {"name": "gvisor"}]
    assert raw["workloads"] == [{"name": "lenet-train", "params": {"steps": 4, "batch_size": 8}}]
    # the rest of the study's design is kept
    assert (raw["repetitions"], raw["budget"], raw["min_seconds"], raw["warmup_items"], raw["baseline"]) == (
        "auto", "8m", 2, 10, "baremetal")
    loaded = load_study_text(written, "two-cores", check_host=False)
    assert loaded.schedule == "sequential" and loaded.cell_cores == "all"
    assert [p.key for p in loaded.platforms] == ["baremetal", "aa", "gvisor"]


def test_explain_plans_the_cores_study_beside_the_follow_up_for_a_sandbox_cores_hint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = _parent(tmp_path, monkeypatch)
    plan = explain_directory(known, None)
    assert plan.cores is not None and plan.cores.target == known / "explain-cores"
    assert plan.cores.name == "known-cores"
    # systrap on one core: the suspect; ptrace is not held back by one core
    assert plan.cores_suspects == [("lenet-train", "gvisor")]
    raw = yaml.safe_load(plan.cores.text)
    assert [p.get("label", p["name"]) for p in raw["platforms"]] == ["baremetal", "aa", "gvisor"]
    assert raw["schedule"] == "sequential" and raw["cell_cores"] == "all" and "duet_swap_s" not in raw
    # the hint is no longer "cannot test": it runs as a study of its own
    assert len(plan.own_study) == 1 and plan.own_study[0].startswith(
        "lenet-train on gvisor: more cores for the sandbox's own threads")
    assert plan.own_study[0] not in plan.skipped
    # with --out, the cores study goes beside it
    elsewhere = explain_directory(known, tmp_path / "out")
    assert elsewhere.cores is not None and elsewhere.cores.target == tmp_path / "out-cores"


def test_the_hint_names_explain_and_stays_untestable_within_the_study(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = _parent(tmp_path, monkeypatch)
    store = Store.open(known)
    try:
        found = [h for h in analyse(store, with_views=False).hints if h.rule == "sandbox-cores"]
    finally:
        store.close()
    assert len(found) == 1 and found[0].test is None and found[0].untestable
    assert "untestable here" in found[0].text and "`isobench explain DIR` runs it" in found[0].text
    # never an in-study intervention: interventions_of lists it, runs nothing for it
    tests, skipped = interventions_of(found, load_study_text(PARENT, "known", check_host=False))
    assert tests == [] and skipped == [found[0].untestable]


def test_with_nothing_else_to_explain_the_cores_study_runs_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = _parent(tmp_path, monkeypatch)
    monkeypatch.setattr("isobench.explain.evidence_needed", lambda attributions: Evidence())
    plan = explain_directory(known, None)
    assert plan.follow_up is None and plan.cores is not None


def test_an_existing_cores_directory_with_results_is_refused_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = _parent(tmp_path, monkeypatch)
    (known / "explain-cores").mkdir()
    (known / "explain-cores" / "isobench.sqlite").write_text("")
    with pytest.raises(UserError, match="cores study's directory already holds results"):
        explain_directory(known, None)
    done = run_cli("explain", str(known))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "explain-cores" in lines[0] and "fix:" in lines[0], done.stderr
    assert not (known / "explain").exists()  # the first follow-up did not run either


@pytest.mark.parametrize(("study_text", "cpus", "reason"), [
    (PARENT.replace("schedule: duet\nduet_swap_s: 0.05\n", "schedule: sequential\ncell_cores: all\n"), None,
     "its cells had every core already"),
    (PARENT, [0], "this host has 1 core(s), no more than each of the study's cells had"),
])
def test_no_cores_study_where_it_would_give_no_more_cores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, study_text: str, cpus: list[int] | None, reason: str) -> None:
    cores = ONE_CORE_DUET if "duet" in study_text else {"layout": "all", "harness": "", "sides": ["0"]}
    known = _parent(tmp_path, monkeypatch, study_text, cores)
    if cpus is not None:
        monkeypatch.setattr("isobench.hostinfo.host_cpus", lambda: cpus)
    plan = explain_directory(known, None)
    assert plan.cores is None and not plan.own_study
    said = [line for line in plan.skipped if "more cores for the sandbox's own threads" in line]
    assert len(said) == 1 and f"nor a study of its own here: {reason}" in said[0], plan.skipped


@pytest.mark.parametrize(("parent", "cores", "status", "words"), [
    ((1.714, 1.65, 1.78), (1.20, 1.17, 1.23), "confirmed", "72% of the overhead gone: confirmed"),
    ((1.20, 1.17, 1.23), (1.50, 1.45, 1.55), "confirmed", "150% more overhead: confirmed"),
    ((1.40, 1.30, 1.50), (1.38, 1.28, 1.48), "refuted", "5% of the overhead gone: refuted"),
    ((1.40, 1.20, 1.60), (1.20, 1.05, 1.35), "suspected", "50% of the overhead gone: suspected, not resolved"),
    ((1.40, None, None), (1.10, None, None), "suspected", "75% of the overhead gone: suspected"),  # no intervals
])
def test_the_verdict_compares_each_studys_own_ratio(
        parent: tuple[float, float | None, float | None], cores: tuple[float, float | None, float | None],
        status: str, words: str) -> None:
    got, line = cores_verdict(_comparison(*parent), _comparison(*cores), "one-core duet cells", "2 cores")
    assert got == status and words in line, line
    assert line.startswith("more cores for the sandbox (sequential, cell_cores: all): resnet-infer on gvisor ")
    assert f"{parent[0]:.3f}×" in line and " on one-core duet cells → " in line and f"{cores[0]:.3f}× " in line
    assert "with 2 cores: " in line


def test_the_verdict_line_reads_as_the_brief_shows() -> None:
    _, line = cores_verdict(_comparison(1.714, 1.65, 1.78), _comparison(1.20, 1.17, 1.23),
                            cells_words("duet", 1), "2 cores")
    assert line == ("more cores for the sandbox (sequential, cell_cores: all): resnet-infer on gvisor 1.714× "
                    "(1.650–1.780) on one-core duet cells → 1.200× (1.170–1.230) with 2 cores: 72% of the "
                    "overhead gone: confirmed")


def test_the_verdicts_read_both_stores_each_against_its_own_baseline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    known = _parent(tmp_path, monkeypatch)
    plan = explain_directory(known, None)
    assert plan.cores is not None
    # the cores study as it would store: gVisor barely slower with every core (2 here)
    cores = _store(plan.cores.target, monkeypatch, plan.cores.text, 1.02, {"layout": "all", "harness": "", "sides": ["0-1"]})
    verdicts = cores_verdicts(Store.open(known), Store.open(cores), plan.cores_suspects)
    assert len(verdicts) == 1, verdicts
    status, line = verdicts[0]
    assert status == "confirmed" and "lenet-train on gvisor" in line and "of the overhead gone: confirmed" in line
    assert "on one-core duet cells → " in line and "with 2 cores" in line
    # a suspect the cores study has no result for says so
    missing = cores_verdicts(Store.open(known), Store.open(cores), [("lenet-train", "gvisor-ptrace")])
    assert missing == [("suspected", "more cores for the sandbox (sequential, cell_cores: all): lenet-train on "
                                     "gvisor-ptrace: no result in the cores study")]


def test_the_budget_is_shared_by_the_studies_that_run() -> None:
    assert budget_each("8m", 2) == "240s" and budget_each("90s", 2) == "45s"
    assert budget_each("8m", 1) == "8m" and budget_each(None, 2) is None
    assert budget_each("soon", 2) == "soon"  # with_budget_text refuses it, in one line


def test_explain_is_still_a_command_with_its_options() -> None:
    from isobench.cli import app
    from isobench.explain_command import explain

    assert explain in [c.callback for c in app.registered_commands]
    done = CliRunner().invoke(app, ["explain", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    assert "--out" in done.output and "--budget" in done.output and "half" in done.output
    assert "DIRECTORY" in done.output


def test_only_a_sandbox_cores_hint_makes_a_cores_suspect_each_once() -> None:
    c = _comparison(1.5, 1.4, 1.6)
    figure = why_table_id(c.workload, c.label, c.knobs)
    other = Hint("runsc-platform", "…", figure)
    assert cores_suspects([other], [c]) == []
    assert cores_suspects([Hint("sandbox-cores", "…", figure, untestable="x")], [c, c]) == [("resnet-infer", "gvisor")]


def test_a_parent_without_threads_pairs_with_the_cores_study_that_holds_them() -> None:
    from types import SimpleNamespace

    from isobench.analysis.more_cores import pairing_key

    parent = SimpleNamespace(workload="resnet-infer", label="gvisor", params={"requests": 20}, knobs={})
    held = SimpleNamespace(workload="resnet-infer", label="gvisor", params={"requests": 20}, knobs={"threads": 1})
    quota = SimpleNamespace(workload="resnet-infer", label="gvisor", params={"requests": 20}, knobs={"cpus": 1.0})
    assert pairing_key(held) == pairing_key(parent) != pairing_key(quota)
