"""MLPerf LoadGen scenarios through the real mlperf_loadgen, on bare metal and in Docker: each
cell keeps LoadGen's verdict and key numbers, stored as metrics and in platform_info."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from isobench.runner.study import run_study
from isobench.workloads.loadgen import parse_logs
from tests.conftest import need_docker

TINY = {"image_size": 32, "n_images": 8, "source_size": 40, "n_classes": 4, "top_k": 2,
        "min_duration_s": 0.5, "min_query_count": 8}
SCENARIOS = {
    "SingleStream": ({}, "loadgen.latency_p90"),
    "Offline": ({"target_qps": 20}, "loadgen.samples_per_s"),
    # A loose bound: the verdict may still be INVALID (too few queries for early stopping).
    "Server": ({"target_qps": 15, "latency_bound_ms": 2000}, "loadgen.latency_p99"),
}


def test_scenarios_store_the_verdict_on_bare_metal_and_docker(tmp_path: Path) -> None:
    need_docker()
    workloads = [{"name": "loadgen", "label": f"lg-{name}", "params": {**TINY, "scenario": name, **extra}}
                 for name, (extra, _) in SCENARIOS.items()]
    text = json.dumps({"name": "lg", "workloads": workloads, "platforms": [{"name": "baremetal"}, {"name": "docker"}],
                       "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0, "probes": {}, "timeout_s": 300,
                       "reruns": 0, "schedule": "sequential", "warmup_items": 0, "min_seconds": None,
                       "aa": False})
    out = run_study(text, "lg.yaml", tmp_path / "out", False, Console(file=io.StringIO()))
    db = sqlite3.connect(out / "isobench.sqlite")
    db.row_factory = sqlite3.Row
    cells = list(db.execute("SELECT * FROM cells"))
    assert len(cells) == 6
    for cell in cells:
        assert cell["status"] == "ok", (cell["error"], cell["stderr_tail"][-1000:])
        scenario = json.loads(cell["params"])["scenario"]
        metrics = {r["metric"]: r["value"] for r in db.execute("SELECT * FROM metrics WHERE cell_id = ?",
                                                                 (cell["cell_id"],))}
        loadgen = json.loads(cell["platform_info"])["workload"]["loadgen"]
        assert loadgen["scenario"] == scenario and loadgen["verdict"] in ("VALID", "INVALID")
        assert f"Result is : {loadgen['verdict']}" in loadgen["summary"]
        assert metrics["workload.loadgen.valid"] == (loadgen["verdict"] == "VALID")
        assert loadgen["min_queries_met"] is True and loadgen["effective_min_query_count"] >= 1
        assert metrics[f"workload.{SCENARIOS[scenario][1]}"] > 0
        # One item per sample LoadGen issued, each with the E2E request's phases.
        assert cell["items"] >= (8 if scenario != "Offline" else 1)
        assert metrics["phase.inference"] > 0 and metrics["phase.preprocess"] > 0
        if scenario == "SingleStream":
            assert cell["items"] == metrics["workload.loadgen.query_count"]
        if scenario == "Server":
            assert loadgen["effective_target_qps"] == 15 and "perf_constraints_met" in loadgen


def test_an_invalid_run_says_why(tmp_path: Path) -> None:
    summary = ("Scenario : Offline\nSamples per second: 462.5\nResult is : INVALID\n"
               "  Min duration satisfied : NO\n")
    detail = "\n".join(":::MLLOG " + json.dumps({"key": k, "value": v}) for k, v in (
        ("result_validity", "INVALID"), ("result_min_duration_met", False),
        ("result_invalid_reason", "Increase expected QPS"), ("result_samples_per_second", 462.5)))
    (tmp_path / "mlperf_log_summary.txt").write_text(summary)
    (tmp_path / "mlperf_log_detail.txt").write_text(detail)
    metrics, info = parse_logs(tmp_path, "Offline")
    assert metrics["loadgen.valid"] == 0 and metrics["loadgen.samples_per_s"] == (462.5, "1/s")
    assert info["min_duration_met"] is False and info["invalid_reason"] == "Increase expected QPS"
    (tmp_path / "mlperf_log_detail.txt").write_text(detail.replace('"INVALID"', '"VALID"'))
    with pytest.raises(RuntimeError, match="disagree"):
        parse_logs(tmp_path, "Offline")
