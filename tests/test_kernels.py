"""Kernel microbenchmarks: every kernel at a tiny size on bare metal and in Docker yields one
phase per shape and a positive FLOP/s (or bandwidth) that reaches the store; all-reduce ranks
run inside the container; CUDA-only parts say `unavailable` here, never a number."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.store.sqlite import Store, cell_metrics
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from isobench.workloads.channel import CellContext
from isobench.workloads.kernels import describe
from tests.conftest import json_lines, need_docker, need_root

TINY = {
    "kernel-gemm": {"shapes": "list", "shape_list": ["64x8x32:NN", "16x48x24:TN", "8x8x8:NT"],
                    "iterations": 2, "calls": 3, "warmup_calls": 1},
    "kernel-conv": {"shapes": "list", "shape_list": ["1x3x12x12:4x3x3:1x1:1x1", "2x2x9x16:3x2x5:0x1:2x1"],
                    "iterations": 2, "calls": 2, "warmup_calls": 1, "mode": "train"},
    "kernel-rnn": {"shapes": "list", "shape_list": ["vanilla:16x2x3", "lstm:16x2x3", "gru:16x2x3"],
                   "iterations": 2, "calls": 2, "warmup_calls": 1},
    "kernel-allreduce": {"shapes": "list", "shape_list": ["1000", "40000"], "ranks": 2,
                         "iterations": 2, "calls": 3, "warmup_calls": 1},
}


def _cell(name: str, platform: str, params: dict):
    study = {"name": "k", "workloads": [{"name": name, "params": params}], "platforms": [{"name": platform}],
             "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0, "probes": {}}
    return expand(load_study_text(json.dumps(study), "k.yaml"))[0]


def _run(name: str, platform: str, params: dict | None = None):
    cell = _cell(name, platform, TINY[name] if params is None else params)
    platform_obj = platform_for(cell)
    platform_obj.prepare()
    return run_cell(cell, platform_obj)


def _check_kernel_outcome(name: str, outcome) -> None:
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    workload = WORKLOADS.get(name)
    params = workload.Params(**TINY[name])
    labels = workload.item_phases(params)
    assert len(outcome.items) == params.iterations
    for item in outcome.items:
        assert set(item["phases"]) == set(labels)
        assert all(v > 0 for v in item["phases"].values())
        assert sum(item["phases"].values()) <= item["e2e"] * 1.001 + 1e-6
    metrics = {m: (v, u) for m, v, u in cell_metrics(outcome)}
    rate = {"kernel-allreduce": ("busbw", "B/s")}.get(name, ("flop_per_s", "FLOP/s"))
    for label in labels:
        value, unit = metrics[f"workload.{label}.{rate[0]}"]
        assert value > 0 and unit == rate[1], label
        assert metrics[f"workload.{label}.per_call"][0] > 0
        assert f"phase.{label}" in metrics
        base = label.removesuffix(":fwd").removesuffix(":bwd")
        assert describe(label)["shape"] in base  # the shape is recoverable from the label


#: every kernel on bare metal; in Docker, all-reduce (its ranks are spawned inside the container)
#: and one single-process kernel: gemm, conv and rnn run the same code in a container, and the
#: other two there took ~7 s for no path the third does not take
ON_A_PLATFORM = [(name, "baremetal") for name in sorted(TINY)] + [("kernel-allreduce", "docker"),
                                                                   ("kernel-rnn", "docker")]


@pytest.mark.parametrize(("name", "platform"), ON_A_PLATFORM)
def test_kernel_on_a_platform(name: str, platform: str, tmp_path: Path) -> None:
    need_docker() if platform == "docker" else need_root()
    outcome = _run(name, platform)
    _check_kernel_outcome(name, outcome)
    # the rates and the per-shape phases reach the store
    store = Store.create(tmp_path, "name: k", "k", "k.yaml", {})
    assert store.record(outcome, platform)
    rows = {r["metric"]: (r["value"], r["unit"]) for r in store.metric_rows()}
    labels = WORKLOADS.get(name).item_phases(WORKLOADS.get(name).Params(**TINY[name]))
    rate = "busbw" if name == "kernel-allreduce" else "flop_per_s"
    assert all(rows[f"workload.{label}.{rate}"][0] > 0 for label in labels)
    phases = {name for table in store.items().values() for name in table.column_names}
    assert phases == {*labels, "e2e", "item"}
    if name == "kernel-allreduce":
        assert outcome.done["ranks"] == 2 and outcome.done["backend"] == "gloo"
        assert {"spawn", "init"} <= set(outcome.setup)
        metrics = {m: v for m, v, _ in cell_metrics(outcome)}
        # bus bandwidth = algorithm bandwidth x 2(n-1)/n, which is 1 for two ranks
        assert metrics["workload.allreduce:40000.busbw"] == pytest.approx(metrics["workload.allreduce:40000.algbw"])


def _in_process(name: str, params: dict) -> list[dict]:
    """Run a workload here, on a channel in memory (torch is already imported by the test)."""
    stream = io.StringIO()
    ctx = CellContext(stream, {"cell_id": "t", "seed": 0})
    workload = WORKLOADS.get(name)
    workload().run(workload.Params(**params), ctx)
    ctx.finish()
    return json_lines(stream.getvalue())


@pytest.mark.parametrize(("name", "params"), [
    ("kernel-memcpy", {}), ("kernel-launch", {}), ("kernel-gemm", {"device": "cuda"}),
    ("kernel-allreduce", {"device": "cuda"})])
def test_cuda_parts_say_unavailable_without_a_gpu(name: str, params: dict) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device: the kernels run instead")
    records = _in_process(name, params)
    done = records[-1]
    assert done["type"] == "done" and done["items"] == 0
    assert "CUDA" in done["unavailable"] or "cuda" in done["unavailable"].lower()
    assert "metrics" not in done and not [r for r in records if r["type"] == "item"]


def test_unavailable_is_a_cell_status_in_a_container() -> None:
    need_docker()
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    outcome = _run("kernel-launch", "docker", {})
    assert outcome.status == "unavailable" and "no CUDA device visible in this cell" in outcome.error
    assert not [m for m, _, _ in cell_metrics(outcome) if m.startswith("workload.")]


def test_shape_sets_and_validation() -> None:
    gemm = WORKLOADS.get("kernel-gemm")
    small, full = gemm.Params(), gemm.Params(shapes="deepbench")
    assert len(gemm.item_phases(small)) >= 10 and "gemm:1760x16x1760:NN" in gemm.item_phases(full)
    flop = [sum(s.flop for s in params.shape_specs()) for params in (small, full)]
    assert flop[0] * 200 < flop[1]  # small really is small
    assert {s.trans for s in full.shape_specs()} >= {"NN", "TN", "NT"}
    assert describe("gemm:35x8457x2560:TN") == {"kernel": "gemm", "shape": "35x8457x2560:TN", "m": 35,
                                                "n": 8457, "k": 2560, "a_t": True, "b_t": False}
    assert describe("conv:1x3x8x8:4x3x3:p1x1:s2x2:bwd")["step"] == "bwd"
    assert WORKLOADS.get("kernel-rnn").Params(shapes="deepbench").shape_specs()[0].cell == "vanilla"
    for name, bad in [("kernel-gemm", ["12x3"]), ("kernel-gemm", ["1x2x3:XN"]), ("kernel-conv", ["1x1x2x2:1x5x5"]),
                      ("kernel-rnn", ["relu:4x4x4"]), ("kernel-allreduce", ["-5"])]:
        with pytest.raises(ValidationError, match="shape_list"):
            WORKLOADS.get(name).Params(shapes="list", shape_list=bad)
    with pytest.raises(ValidationError, match="set shapes: list"):
        gemm.Params(shape_list=["4x4x4"])
    with pytest.raises(ValidationError, match="empty"):
        gemm.Params(shapes="list")

