"""Bad study files: one clear line naming file, field and fix; exit 2; nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import run_cli, write_study

GOOD = {
    "name": "v",
    "workloads": [{"name": "cpu-spin", "params": {"iterations": 2}}],
    "platforms": [{"name": "baremetal"}],
}


def _with(**changes: object) -> dict:
    study = {**GOOD, **changes}
    return study


CASES = {
    "unknown_workload": (_with(workloads=[{"name": "resnet-9000"}]), "workloads[0].name", "unknown workload"),
    "cpus_zero": (_with(knobs={"cpus": 0}), "knobs.cpus", "greater than 0"),
    "cpuset_missing_core": (_with(platforms=[{"name": "baremetal", "knobs": {"cpuset": str(os.cpu_count() + 7)}}]),
                            "platforms[0].knobs.cpuset", "lacks"),
    "unknown_platform": (_with(platforms=[{"name": "kubernetes"}]), "platforms[0].name", "unknown platform"),
    "bad_param": (_with(workloads=[{"name": "cpu-spin", "params": {"iterations": -1}}]),
                  "workloads[0].params.iterations", "greater than or equal"),
    "unknown_param": (_with(workloads=[{"name": "cpu-spin", "params": {"speed": 3}}]),
                      "workloads[0].params.speed", "not permitted"),
    "bad_baseline": (_with(baseline="docker"), "baseline", "names no platform"),
    "duplicate_platform": (_with(platforms=[{"name": "baremetal"}, {"name": "baremetal"}]), "platforms",
                           "label"),
    "bad_memory": (_with(knobs={"memory": "lots"}), "knobs.memory", "not a size"),
    "unknown_knob": (_with(knobs={"turbo": True}), "knobs.turbo", "not permitted"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_study_is_one_line_exit_2_and_writes_nothing(case: str, tmp_path: Path) -> None:
    study, field, words = CASES[case]
    path = write_study(tmp_path / "study.yaml", study)
    out_dir = tmp_path / "out"
    result = run_cli("run", str(path), "--out", str(out_dir), timeout=120)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and field in lines[0] and words in lines[0]
    assert "(fix: " in lines[0]
    assert not out_dir.exists()
    assert "Traceback" not in result.stderr


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nworkloads: [\n  - {name: cpu-spin\nplatforms: :\n")
    result = run_cli("plan", str(path), timeout=60)
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "\n" not in line and str(path) in line and "malformed YAML at line" in line


def test_missing_file(tmp_path: Path) -> None:
    result = run_cli("plan", str(tmp_path / "nope.yaml"), timeout=60)
    assert result.returncode == 2 and "no such file" in result.stderr


def test_plan_expands_product_interleaved(tmp_path: Path) -> None:
    from isobench.plan import expand
    from isobench.studyfile import load_study_text

    text = """
name: p
workloads: [{name: cpu-spin, sweep: {work: [1000, 2000]}}]
platforms: [{name: baremetal}, {name: baremetal, label: aa, knobs: {cpus: [0.5, 1]}}]
repetitions: 3
warmup: 1
seed: 7
"""
    study = load_study_text(text, "p.yaml")
    cells = expand(study)
    groups = {c.group for c in cells}
    # 2 param values × (1 + 2 knob values) = 6 groups; 4 rounds each
    assert len(groups) == 6 and len(cells) == 24
    assert len({c.cell_id for c in cells}) == 24
    assert all(c.warmup for c in cells[:6]) and not any(c.warmup for c in cells[6:])
    orders = [[c.group for c in cells[i * 6:(i + 1) * 6]] for i in range(4)]
    assert all(sorted(o) == sorted(groups) for o in orders)  # every round has every group once
    assert len({tuple(o) for o in orders}) > 1  # and the order is shuffled between rounds
    assert [c.cell_id for c in expand(study)] == [c.cell_id for c in cells]  # seeded: reproducible
