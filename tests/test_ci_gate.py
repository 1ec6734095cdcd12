"""`isobench compare A B --fail-if slower[:RATIO]` as a CI gate: exit 1 when B is resolved slower
than A (beyond RATIO), 0 otherwise, 2 for bad input; on known stores and on two small real studies."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import report_store
from tests.conftest import need_root, run_cli, write_study


@pytest.fixture(scope="module")
def known_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("gate")
    return report_store.build(tmp / "a"), report_store.build(tmp / "b", scale=1.10)  # B: 10% slower


def test_a_resolved_slowdown_fails_the_gate(known_pair: tuple[Path, Path]) -> None:
    a, b = known_pair
    plain = run_cli("compare", str(a), str(b))
    assert plain.returncode == 0, plain.stderr  # no gate: a slowdown is a finding, not a failure
    for spec in ("slower", "slower:1.05", "slower:1.1"):
        gated = run_cli("compare", str(a), str(b), "--fail-if", spec)
        assert gated.returncode == 1, (spec, gated.stdout, gated.stderr)
        assert "10.0% slower" in gated.stdout  # the table still goes to stdout
        assert f"fail-if {spec}:" in gated.stderr and "resolved slower" in gated.stderr
    as_json = run_cli("compare", str(a), str(b), "--json", "--fail-if", "slower:1.05")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)  # stdout stays valid JSON


def test_below_the_threshold_or_faster_passes(known_pair: tuple[Path, Path]) -> None:
    a, b = known_pair
    above = run_cli("compare", str(a), str(b), "--fail-if", "slower:1.2")
    assert above.returncode == 0, above.stdout + above.stderr
    assert "no group of B tripped it" in above.stderr
    reverse = run_cli("compare", str(b), str(a), "--fail-if", "slower")  # B faster than A
    assert reverse.returncode == 0, reverse.stdout + reverse.stderr
    assert run_cli("compare", str(b), str(a), "--fail-if", "faster").returncode == 1
    assert run_cli("compare", str(b), str(a), "--fail-if", "faster:0.85").returncode == 0
    assert run_cli("compare", str(a), str(a), "--fail-if", "slower").returncode == 0


@pytest.mark.parametrize("spec", ["slowr", "slower:", "slower:abc", "slower:0.95", "faster:1.1", "slower:nan", ""])
def test_a_bad_condition_is_bad_input(known_pair: tuple[Path, Path], spec: str) -> None:
    a, b = known_pair
    result = run_cli("compare", str(a), str(b), "--fail-if", spec)
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --fail-if:") and "slower:1.05" in lines[0], lines


def test_help_documents_the_gate() -> None:
    text = run_cli("compare", "--help", check=True).stdout
    assert "--fail-if" in text and "slower:1.05" in " ".join(text.split())


def test_two_real_studies_gate_on_a_real_slowdown(tmp_path: Path) -> None:
    """The same tiny study twice on bare metal; B while three busy loops share the cell's core, so
    each of B's items waits two or three times as long as it computes (well beyond what a busy
    test host does to A): B is resolved slower, A is not."""
    need_root()
    spin = {"name": "cpu-spin", "params": {"iterations": 6, "work": 300_000}}
    # A small design written out: cells on one core, where the busy loops go (the default duet
    # would trade both cores and add an A/A entry, which this gate does not need).
    study = write_study(tmp_path / "s.yaml", {"name": "gate", "workloads": [spin],
                                              "platforms": [{"name": "baremetal"}], "repetitions": 6,
                                              "schedule": "sequential", "aa": False, "min_seconds": 0,
                                              "warmup_items": 0, "warmup": 0, "seed": 5, "probes": {}})
    cores = {c["cores"] for c in json.loads(run_cli("plan", str(study), "--json", check=True).stdout)["cells"]}
    assert len(cores) == 1 and cores != {None}, cores
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("run", str(study), "--out", str(a), timeout=600, check=True)
    code = f"import os, time\nos.sched_setaffinity(0, {{{int(cores.pop().split(',')[0].split('-')[0])}}})\n" \
           "end = time.time() + 300\nwhile time.time() < end: pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(3)]
    try:
        time.sleep(0.3)
        run_cli("run", str(study), "--out", str(b), timeout=600, check=True)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    slower = run_cli("compare", str(a), str(b), "--fail-if", "slower:1.2")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "resolved slower" in slower.stderr
    faster = run_cli("compare", str(b), str(a), "--fail-if", "slower")  # A against B: not slower
    assert faster.returncode == 0, faster.stdout + faster.stderr
    assert run_cli("compare", str(a), str(a), "--fail-if", "slower").returncode == 0
