"""The findings the papers state and the page used to leave out (issue 24): Prashanthi's seccomp
(F11) and inference-against-training (F12), Samani & Salehi's container at a core ratio of 1
(F13), Siddaramanna & John's vanilla RNN (F14) and LSTM (F15) parity. Each loads with a rule
dated before its data, names cells and metrics its study plans, evaluates on synthetic stores
as its rule says, and is listed on the replication page, which now has at least 20 findings."""

from __future__ import annotations

import datetime
import functools
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from isobench.analysis.finding_power import HOLDS, NOT_IN_SETTING, UNTESTABLE
from isobench.analysis.finding_rules import rule_hash
from isobench.analysis.finding_spec import PAPERS, Check, Finding, PaperFindings, Side, load_findings
from isobench.analysis.findings import Untestable, _group, evaluate
from isobench.plan import expand
from isobench.replicate.run import PaperRun, study_text
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from tests.planned import planned_groups

NEW = {"prashanthi-2023": ["F11", "F12"], "samani-salehi": ["F13"], "siddaramanna-john": ["F14", "F15"]}
WRITTEN = datetime.date(2026, 11, 27)
NO_GPU = {"gpu": "no GPU on this host"}


@functools.cache
def _new(paper: str) -> list[Finding]:
    found = {f.id: f for f in load_findings(paper).findings}
    return [found[i] for i in NEW[paper]]


def _sides(check: Check) -> list[Side]:
    return [check, *([check.other] if check.other is not None else [])]


def test_the_new_findings_load_with_rules_dated_before_their_data() -> None:
    total = sum(len(load_findings(p).findings) for p in PAPERS)
    assert total >= 20
    ids = [f.id for p in PAPERS for f in load_findings(p).findings]
    for paper in NEW:
        for finding in _new(paper):
            assert finding.written == WRITTEN and not finding.revisions  # a first rule, not a revision
            assert finding.rule and finding.source and finding.paper and len(rule_hash(finding)) == 12
            assert ids.count(finding.id) == 1, f"{finding.id} is used by another paper's finding too"
            measured = [c for c in finding.checks if c.workload]
            assert measured, f"{finding.id} measures nothing here"
            for check in measured:
                if check.expectation.op == "within":  # an equivalence states its bound in the rule
                    assert f"±{check.expectation.value:.0%}" in " ".join(finding.rule.split())


def _planned(paper: PaperFindings, study: str, quick: bool,
             monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], str, dict[str, set[str]]]:
    """The study's cell groups as planned on a 2-core host, its baseline, and each workload's phases."""
    monkeypatch.setattr("isobench.plan.placement.host_cpus", lambda: [0, 1])
    text = study_text(paper, study, True, None) if quick else \
        resources.files("isobench.studies").joinpath(f"{study}.yaml").read_text()
    parsed = load_study_text(text, study, check_host=False)
    phases = {}
    for entry in parsed.workloads:
        cls = WORKLOADS.get(entry.name)
        phases[entry.key] = {f"phase.{p}" for p in cls.item_phases(cls.Params(**entry.params))}
    return planned_groups(parsed), str(parsed.baseline), phases


@pytest.mark.parametrize("paper", sorted(NEW))
def test_each_new_check_reads_cells_and_metrics_its_study_plans(paper: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = load_findings(paper)
    groups, baseline, phases = _planned(spec, spec.studies[0], False, monkeypatch)
    for finding in _new(paper):
        for check in (c for c in finding.checks if c.workload):
            assert (check.study or spec.studies[0]) == spec.studies[0]
            for side in _sides(check):
                sample = _group(groups, side.workload, side.platform, side.knobs)
                reference = _group(groups, side.against_workload or side.workload, side.against or baseline,
                                   side.knobs)
                assert sample.platform_key == side.platform and reference.platform_key == baseline
                metrics = [side.metric] if isinstance(side.metric, str) else side.metric
                for metric in metrics:
                    assert metric == "e2e" or metric in phases[side.workload], (finding.id, metric)
                if "chr" in side.knobs:  # the same core ratio on both sides of the comparison
                    assert sample.knobs["chr"] == reference.knobs["chr"] == side.knobs["chr"]


def test_the_seccomp_entry_is_the_default_container_less_its_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    text = resources.files("isobench.studies").joinpath("prashanthi-2023.yaml").read_text()
    study = load_study_text(text, "prashanthi-2023", check_host=False)
    entries = {p.key: p for p in study.platforms}
    assert entries["docker-noseccomp"].name == entries["docker"].name == "docker"
    assert entries["docker-noseccomp"].knobs == {"seccomp": "unconfined"} and not entries["docker"].knobs


def test_the_rnn_findings_read_their_own_cells_and_not_the_gru_ones() -> None:
    f14, f15 = _new("siddaramanna-john")
    vanilla, lstm = (set(f.checks[0].metric) for f in (f14, f15))
    assert all(m.startswith("phase.vanilla:") for m in vanilla) and all(m.startswith("phase.lstm:") for m in lstm)
    cls = WORKLOADS.get("kernel-rnn")
    labels = {f"phase.{p}" for p in cls.item_phases(cls.Params(shapes="small"))}
    # every vanilla and LSTM shape of the study, and no GRU one
    assert vanilla == {m for m in labels if m.startswith("phase.vanilla:")}
    assert lstm == {m for m in labels if m.startswith("phase.lstm:")}


@pytest.mark.parametrize("paper", sorted(NEW))
def test_the_quick_runs_plan_none_of_the_new_cells_and_the_new_findings_say_why(
        paper: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick runs (CI) have no seccomp-off entry, no inference, no CHR 1.0 and no RNN cells:
    the new findings add no cell there, and each reads "cannot be tested here" with a reason."""
    spec = load_findings(paper)
    groups, baseline, _ = _planned(spec, spec.studies[0], True, monkeypatch)
    for finding in _new(paper):
        for check in (c for c in finding.checks if c.workload):
            with pytest.raises(Untestable, match="no cells of"):
                for side in _sides(check):
                    _group(groups, side.workload, side.platform, side.knobs)
                    _group(groups, side.against_workload or side.workload, side.against or baseline, side.knobs)
    subset = spec.model_copy(update={"findings": _new(paper)})
    for result in evaluate(subset, {s: tmp_path / "none" for s in spec.studies}, NO_GPU):
        assert result.verdict == UNTESTABLE and result.reason


# --- synthetic stores ------------------------------------------------------------------------

#: per-round multiplicative noise, rotated per group so that no two groups move in lockstep
NOISE = [1.000, 1.004, 0.997, 1.002, 0.998, 1.001]


def _store(directory: Path, text: str, phases: dict[str, dict[str, float]],
           effect: dict[tuple[str, str], dict[str, float]]) -> Path:
    """A sequential store: each workload's ``phases`` per item, times ``effect[(workload,
    platform)]`` per phase, times a round's noise."""
    study = load_study_text(text, "synthetic.yaml", check_host=False)
    store = Store.create(directory, text, study.name, "synthetic.yaml", {"cores": 2, "cpu_model": "test CPU"})
    keys = [p.key for p in study.platforms] + [w.key for w in study.workloads]
    for cell in expand(study):
        offset = keys.index(cell.platform_key) + 3 * keys.index(cell.workload_key)
        noise = NOISE[(cell.rep + offset) % len(NOISE)]
        scale = effect.get((cell.workload_key, cell.platform_key), {})
        item = {k: v * scale.get(k, 1.0) * noise for k, v in phases[cell.workload_key].items()}
        items = [{"i": i, "e2e": sum(item.values()), "phases": item} for i in range(3)]
        outcome = CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0,
                              wall_s=1.0, startup_s=0.3, items=items, done={"type": "done", "run_s": 0.5})
        assert store.record(outcome, cell.platform_key)
    store.close()
    return directory


PRASHANTHI = """
name: prashanthi-2023
description: synthetic cells of the Prashanthi study's shape
workloads:
  - {name: lenet-train, params: {steps: 4}}
  - {name: image-train, label: mobilenet-train, params: {model: mobilenet_v3_small, steps: 2}}
  - {name: image-infer, label: resnet-infer, params: {model: resnet18, requests: 4}}
platforms:
  - {name: baremetal}
  - {name: docker}
  - {name: docker, label: docker-noseccomp, knobs: {seccomp: unconfined}}
baseline: baremetal
schedule: sequential
repetitions: 6
warmup: 0
"""
TRAIN = {"fetch_stall": 0.002, "forward": 0.003, "backward": 0.004, "optimizer": 0.001, "logging": 0.0002}
INFER = {"preprocess": 0.004, "inference": 0.010, "postprocess": 0.001}
#: the container: LeNet's compute +50%, MobileNet's +20%, ResNet-18 inference unchanged
CONTAINER = {"lenet-train": {"forward": 1.5, "backward": 1.5, "optimizer": 1.5},
             "mobilenet-train": {"forward": 1.2, "backward": 1.2, "optimizer": 1.2}, "resnet-infer": {}}


def _prashanthi(directory: Path, seccomp_cost: float) -> dict[str, Path]:
    """Seccomp off runs as the default container, with every phase of its cells times
    1 / ``seccomp_cost`` (the filter's cost, taken away)."""
    effect: dict[tuple[str, str], dict[str, float]] = {}
    for workload, scale in CONTAINER.items():
        phases = TRAIN if workload.endswith("train") else INFER
        full = {p: scale.get(p, 1.0) for p in phases}
        effect[(workload, "docker")] = full
        effect[(workload, "docker-noseccomp")] = {p: v / seccomp_cost for p, v in full.items()}
    phases = {"lenet-train": TRAIN, "mobilenet-train": TRAIN, "resnet-infer": INFER}
    return {"prashanthi-2023": _store(directory, PRASHANTHI, phases, effect)}


def _evaluated(paper: str, directories: dict[str, Path]) -> dict[str, Any]:
    spec = load_findings(paper)
    subset = spec.model_copy(update={"findings": _new(paper)})
    return {r.id: r for r in evaluate(subset, directories, NO_GPU)}


def test_seccomp_off_at_no_cost_holds_and_inference_below_training_holds(tmp_path: Path) -> None:
    results = _evaluated("prashanthi-2023", _prashanthi(tmp_path / "same", 1.0))
    f11, f12 = results["F11"], results["F12"]
    assert f11.verdict == HOLDS, f11.reason
    for check in f11.checks[:2]:
        assert check.ci_low is not None and check.ci_high is not None
        assert 1 / 1.05 <= check.ci_low <= 1.0 <= check.ci_high <= 1.05
    assert f11.checks[2].verdict == UNTESTABLE and "not tested here" in f11.reason  # the GPU part
    assert f12.verdict == HOLDS, f12.reason
    lenet, mobilenet = f12.checks[0].estimate, f12.checks[1].estimate
    assert lenet == pytest.approx(1.5, rel=0.02) and mobilenet == pytest.approx(1.2, rel=0.02)


def test_a_filter_that_costs_a_fifth_is_not_reproduced_on_the_cpu(tmp_path: Path) -> None:
    f11 = _evaluated("prashanthi-2023", _prashanthi(tmp_path / "costly", 1.2))["F11"]
    # wholly outside ±5%: evidence against the claim, worded for the CPU the cells ran on
    assert f11.verdict == NOT_IN_SETTING and "CPU" in f11.verdict_words, f11.reason
    assert all(c.ci_high is not None and c.ci_high < 1 / 1.05 for c in f11.checks[:2])


SIDDARAMANNA = """
name: siddaramanna-john
description: synthetic RNN kernel cells
workloads:
  - {name: kernel-rnn, params: {shapes: small, iterations: 1}}
platforms:
  - {name: baremetal}
  - {name: docker}
baseline: baremetal
schedule: sequential
repetitions: 6
warmup: 0
"""


def test_rnn_and_lstm_parity_holds_while_the_gru_shapes_are_slower(tmp_path: Path) -> None:
    cls = WORKLOADS.get("kernel-rnn")
    labels = cls.item_phases(cls.Params(shapes="small"))
    phases = {"kernel-rnn": {label: 0.001 * (1 + i % 4) for i, label in enumerate(labels)}}
    # the container: GRU shapes 40% slower (the paper's launch-bound exception), the others on par
    slower = {label: 1.4 for label in labels if label.startswith("gru:")}
    store = _store(tmp_path / "rnn", SIDDARAMANNA, phases, {("kernel-rnn", "docker"): slower})
    results = _evaluated("siddaramanna-john", {"siddaramanna-john": store})
    for fid in ("F14", "F15"):
        assert results[fid].verdict == HOLDS, results[fid].reason
        check = results[fid].checks[0]
        assert check.estimate == pytest.approx(1.0, abs=0.01)
    # the family as a whole, GRU included, is no longer on par: F9's reading, not these findings'
    f9 = next(f for f in load_findings("siddaramanna-john").findings if f.id == "F9")
    rnn = next(c for c in f9.checks if c.workload == "kernel-rnn")
    whole = evaluate(PaperFindings(paper="t", title="t", studies=["siddaramanna-john"],
                                   findings=[f9.model_copy(update={"checks": [rnn]})]),
                     {"siddaramanna-john": store}, NO_GPU)[0]
    assert whole.checks[0].estimate is not None and whole.checks[0].estimate > 1.1


def test_the_page_lists_every_new_finding_and_at_least_20(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from isobench.replicate import document

    monkeypatch.setattr(document, "host_fingerprint", lambda: {"cpu_model": "test CPU", "cores": 2})
    runs = []
    for paper in PAPERS:
        spec = load_findings(paper)
        results = evaluate(spec, {s: tmp_path / "none" for s in spec.studies}, NO_GPU)
        runs.append(PaperRun(paper=paper, title=spec.title, results=results, seconds=0.0))
    page = document.write_markdown(runs, tmp_path / "replication.md", ["isobench replicate all"], (0, 0),
                                   "0.0 0.0 0.0").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| F") or line.startswith("| L")]
    assert len(rows) >= 20
    for paper, ids in NEW.items():
        for fid in ids:
            finding = next(f for f in load_findings(paper).findings if f.id == fid)
            assert any(line.startswith(f"| {fid} |") and rule_hash(finding) in line for line in rows)
            assert f"### {fid}: " in page and "2026-11-27" in page
