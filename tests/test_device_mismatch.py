"""A comparison whose two sides ran on different devices is "not comparable", never a ratio verdict.

``device: auto`` runs on cuda where the process sees a GPU, else on cpu: bare metal on a GPU host
runs on cuda, an oci container without ``options: {gpus: all}`` on cpu, and their ratio (7.74x in
the study that found it) measures CPU against GPU, not the container. No GPU is used here: cells
whose platform_info says which device they ran on stand in for it, as the runner records them.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from isobench.analysis.compare import Comparison, compare
from isobench.analysis.crossstudy import cross_compare
from isobench.analysis.summary import analyse
from isobench.analysis.verdict import DIRECTIONS, NOT_COMPARABLE, VERDICTS
from isobench.plan import expand
from isobench.plan.cells import Cell, group_key
from isobench.report.adaptive_table import stop_words
from isobench.report.html import verdict_text
from isobench.report.terminal import noise_floor_lines, sentence
from isobench.runner.adaptive import decide
from isobench.runner.execute import CellOutcome
from isobench.store import Store
from isobench.study.model import Study
from isobench.studyfile import load_study_text
from tests.conftest import run_cli

#: the study that found it: bare metal on cuda, oci/vanilla (no GPU passed in) on cpu, oci/gpu with it
STUDY = """
name: devices
workloads: [{name: lenet-train, params: {steps: 10, batch_size: 8}}]
platforms:
  - {name: baremetal}
  - {name: baremetal, label: aa}
  - {name: oci, label: vanilla}
  - {name: oci, label: gpu, options: {gpus: all}}
baseline: baremetal
repetitions: 6
warmup: 0
"""
#: the device each entry's cells report (platform_info.workload.device)
DEVICE = {"baremetal": "cuda", "aa": "cuda", "vanilla": "cpu", "gpu": "cuda"}
#: time per item relative to bare metal: the CPU run is 7.74x, the GPU container costs nothing
FACTOR = {"baremetal": 1.0, "aa": 1.0, "vanilla": 7.74, "gpu": 1.0}

EXPECTED_REASON = ("oci/vanilla ran on cpu and baremetal on cuda (device: auto follows what each platform can see); "
                   "set the workload's device (device: cpu), or pass the GPU into the container "
                   "(options: {gpus: all})")


def _outcome(cell: Cell, per_item: float, device: str | None) -> CellOutcome:
    items = [{"i": i, "e2e": per_item, "phases": {"compute": per_item}} for i in range(3)]
    info: dict[str, Any] = {"workload": {"device": device, "torch_threads": 2}} if device else {}
    return CellOutcome(cell=cell, status="ok", exit_code=0, error=None, stderr_tail="", started_at=0.0, wall_s=1.0,
                       startup_s=0.1, items=items, done={"type": "done", "items": 3, "run_s": per_item * 3},
                       platform_info=info)


def _store(path: Path, text: str, device: dict[str, str | None], factor: dict[str, float],
           noise: float = 0.002, seed: int = 1) -> tuple[Store, Study]:
    study = load_study_text(text, "devices.yaml", check_host=False)
    store = Store.create(path, text, study.name, "devices.yaml", {})
    rng = random.Random(seed)
    for cell in expand(study):
        value = 0.01 * factor[cell.platform_key] * math.exp(rng.gauss(0, noise))
        # the display the runner records: name/label (platforms/base.py)
        display = cell.platform + (f"/{cell.platform_key}" if cell.platform_key != cell.platform else "")
        assert store.record(_outcome(cell, value, device[cell.platform_key]), display)
    return store, study


def _e2e(store: Store) -> dict[str, Comparison]:
    return {c.label: c for c in compare(store) if c.metric == "e2e"}


def test_the_verdict_is_in_the_vocabulary_and_is_neither_a_direction_nor_equivalence() -> None:
    assert NOT_COMPARABLE == "not comparable" and NOT_COMPARABLE in VERDICTS
    assert NOT_COMPARABLE not in DIRECTIONS and NOT_COMPARABLE != "equivalent"


def test_a_cpu_run_against_a_gpu_baseline_is_not_comparable(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, STUDY, DEVICE, FACTOR)
    e2e = _e2e(store)
    vanilla, gpu, aa = e2e["vanilla"], e2e["gpu"], e2e["aa"]
    # the ratio alone would be a resolved 7.74x slowdown: the verdict refuses it
    assert vanilla.ratio > 7 and vanilla.ci_low is not None and vanilla.ci_low > 7
    assert vanilla.verdict == NOT_COMPARABLE
    assert vanilla.verdict_reason == EXPECTED_REASON
    assert (vanilla.devices, vanilla.baseline_devices) == (["cpu"], ["cuda"])
    # finished: no repetitions advice, no place in the Holm family, no effect claimed
    assert vanilla.repetitions_needed is None and vanilla.p_holm is None and not vanilla.significant
    # the comparisons whose sides match keep their normal verdicts in the same store
    assert gpu.verdict == "equivalent" and gpu.verdict_reason == "" and gpu.devices == ["cuda"]
    assert aa.is_aa and aa.verdict == "equivalent" and gpu.noise_floor is not None
    # every metric of the group is across devices, not only e2e
    assert {c.verdict for c in compare(store) if c.label == "vanilla"} == {NOT_COMPARABLE}
    store.close()


def test_every_printed_place_says_not_comparable_and_why(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, STUDY, DEVICE, FACTOR)
    e2e = _e2e(store)
    comparisons = list(e2e.values())
    vanilla = e2e["vanilla"]
    line = sentence(vanilla, comparisons)
    assert line == f"oci/vanilla: lenet-train e2e: not comparable: {EXPECTED_REASON}"
    assert "7.7" not in line and "slower" not in line and "repetition" not in line
    assert verdict_text(vanilla) == f"not comparable: {EXPECTED_REASON}"  # the HTML and Markdown column
    assert sentence(e2e["gpu"], comparisons).startswith("oci/gpu: lenet-train e2e is equivalent to baremetal")
    analysis = analyse(store)
    device_warnings = [w.text for w in analysis.warnings if w.kind == "device"]
    assert len(device_warnings) == 1 and "oci/vanilla: not comparable: oci/vanilla ran on cpu" in device_warnings[0]
    assert not any("vanilla" in w.text for w in analysis.warnings if w.kind in ("floor", "holm"))
    assert sorted(a.platform for a in analysis.advice) == ["baremetal/aa", "oci/gpu"]  # no repetitions advice for it
    store.close()
    # the terminal summary: the table's verdict column and the sentence, no ratio for it
    out = run_cli("summary", str(tmp_path), check=True).stdout
    assert "not comparable (cpu vs cuda)" in " ".join(out.split())
    assert "7.74" not in out
    flat = " ".join(out.split())
    assert "oci/vanilla: lenet-train e2e: not comparable: oci/vanilla ran on cpu and baremetal on cuda" in flat
    assert "options: {gpus: all}" in flat
    # summary --json carries the verdict and the reason
    records = json.loads(run_cli("summary", str(tmp_path), "--json", check=True).stdout)
    by_label = {r["label"]: r for r in records if r.get("metric") == "e2e"}
    assert by_label["vanilla"]["verdict"] == NOT_COMPARABLE
    assert by_label["vanilla"]["verdict_reason"] == EXPECTED_REASON
    assert by_label["vanilla"]["repetitions_needed"] is None
    assert by_label["gpu"]["verdict"] == "equivalent"
    # and the published schema of that record admits the verdict (`isobench schema summary`)
    schema = json.loads(run_cli("schema", "summary", check=True).stdout)
    Draft202012Validator(schema).validate(records)


def test_workloads_that_report_no_device_are_judged_as_before(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, STUDY, {"baremetal": "cuda", "aa": None, "vanilla": None, "gpu": None}, FACTOR)
    e2e = _e2e(store)
    assert e2e["vanilla"].verdict == "slower" and e2e["vanilla"].verdict_reason == ""
    assert e2e["gpu"].verdict == "equivalent"
    store.close()


def test_an_aa_on_another_device_is_not_comparable_and_states_no_floor(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, STUDY, {**DEVICE, "aa": "cpu"}, {**FACTOR, "aa": 7.74})
    e2e = _e2e(store)
    aa = e2e["aa"]
    assert aa.is_aa and aa.verdict == NOT_COMPARABLE
    assert "ran on cpu and baremetal on cuda" in aa.verdict_reason
    # its 7.74x gap is no noise floor: the other comparisons are judged without one
    assert e2e["gpu"].noise_floor is None and e2e["gpu"].verdict == "equivalent"
    lines = noise_floor_lines(list(e2e.values()))
    assert lines == [f"A/A entry for lenet-train: not comparable, so no noise floor: {aa.verdict_reason}"]
    store.close()


ADAPTIVE = """
name: devices-auto
workloads: [{name: lenet-train, params: {steps: 10, batch_size: 8}}]
platforms:
  - {name: baremetal}
  - {name: oci, label: vanilla}
baseline: baremetal
repetitions: auto
adaptive: {min_repetitions: 5, max_repetitions: 12}
warmup: 0
"""


def test_adaptive_repetitions_stop_on_a_comparison_across_devices(tmp_path: Path) -> None:
    # noisy enough that, judged as a ratio, the comparison would run on for more rounds
    factor = {"baremetal": 1.0, "vanilla": 1.03}
    same, _ = _store(tmp_path / "same", ADAPTIVE, {"baremetal": "cuda", "vanilla": "cuda"}, factor, noise=0.05)
    study = load_study_text(ADAPTIVE, "a.yaml", check_host=False)
    running = decide(same, study, 5)
    same.close()
    assert [s.status for s in running.comparisons] == ["running"] and not running.stop
    # the same values with the sides on different devices: finished at this look
    store, _ = _store(tmp_path / "mixed", ADAPTIVE, {"baremetal": "cuda", "vanilla": "cpu"}, factor, noise=0.05)
    decision = decide(store, study, 5)
    store.close()
    (state,) = decision.comparisons
    assert (state.status, state.verdict, state.reached_at, state.alpha) == ("verdict", NOT_COMPARABLE, 5, None)
    assert decision.stop and not decision.active_groups
    assert group_key("lenet-train", state.params, "vanilla", state.knobs) not in decision.active_groups
    assert "every comparison has a verdict (1 not comparable)" in decision.reason
    meta = decision.as_meta(0.01, "e2e")
    assert stop_words(meta["comparisons"][0], meta).startswith("stopped at round 5: not comparable")


def test_two_studies_on_different_devices_are_not_comparable(tmp_path: Path) -> None:
    one = {"baremetal": "cuda", "aa": "cuda", "vanilla": "cpu", "gpu": "cuda"}
    store_a, _ = _store(tmp_path / "a", STUDY, one, FACTOR, seed=1)
    store_b, _ = _store(tmp_path / "b", STUDY, {**one, "gpu": "cpu"}, {**FACTOR, "gpu": 7.74}, seed=2)
    result = cross_compare(store_a, store_b, "A", "B")
    by_label = {c.label: c for c in result.comparisons}
    assert by_label["gpu"].verdict == NOT_COMPARABLE
    assert by_label["gpu"].verdict_reason.startswith("oci/gpu (B) ran on cpu and oci/gpu (A) on cuda")
    assert by_label["baremetal"].verdict == "equivalent" and by_label["vanilla"].verdict == "equivalent"
    store_a.close()
    store_b.close()
    # a CI gate cannot vouch for a group that lost its GPU: it trips, saying why
    gate = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--fail-if", "slower:1.05")
    assert gate.returncode == 1, gate.stderr
    assert "lenet-train oci/gpu (B) e2e: not comparable: oci/gpu (B) ran on cpu" in " ".join(gate.stderr.split())
    comment = run_cli("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "md", check=True).stdout
    row = next(line for line in comment.splitlines() if line.startswith("| lenet-train | gpu |"))
    assert "not comparable: oci/gpu (B) ran on cpu" in row and "7.7" not in row
