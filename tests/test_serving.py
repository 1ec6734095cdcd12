"""Serving and train-then-deploy on real platforms: a model trained in a cell is saved to the
host, a deploy cell and an HTTP server cell load it; the load comes from the runner, outside
the platform, over the documented network path (host on bare metal, isobench's bridge on Docker)."""

from __future__ import annotations

import dataclasses
import io
import json
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

from isobench.plan import expand
from isobench.platforms import PLATFORMS
from isobench.runner.drivers import percentile
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.setup import prepare_data
from isobench.runner.study import run_study
from isobench.store import Store
from isobench.study.model import PlatformEntry
from isobench.studyfile import load_study_text
from isobench.workloads.serving import parse_server_timing, server_timing_header
from tests.conftest import need_docker, need_root

IMAGES = {"image_size": 32, "n_images": 8, "source_size": 40, "n_classes": 4, "top_k": 2}
SERVE = {**IMAGES, "requests": 24, "concurrency": 3, "warmup_requests": 3}


def _study(name: str, workloads: list[dict], platforms: list[dict]) -> str:
    return json.dumps({"name": name, "workloads": workloads, "platforms": platforms, "knobs": {"threads": 1},
                       "repetitions": 1, "warmup": 0, "probes": {}, "timeout_s": 300, "schedule": "sequential",
                       "warmup_items": 0, "min_seconds": None, "aa": False})


def _metrics(db: sqlite3.Connection, cell_id: str) -> dict[str, float]:
    return {m: v for m, v in db.execute("SELECT metric, value FROM metrics WHERE cell_id = ?", (cell_id,))}


def test_train_then_deploy_and_serve_on_bare_metal_and_docker(tmp_path: Path) -> None:
    need_docker()
    workloads = [{"name": "train-save", "params": {**IMAGES, "steps": 3, "batch_size": 4, "artifact": "tiny"}},
                 {"name": "deploy-infer", "params": {**{k: v for k, v in IMAGES.items() if k in
                                                        ("n_images", "source_size", "n_classes", "top_k")},
                                                     "requests": 4, "load_from": "tiny"}},
                 {"name": "serve", "params": {**SERVE, "load_from": "tiny"}}]
    text = _study("ttd", workloads, [{"name": "baremetal"}, {"name": "docker"}])
    out = run_study(text, "ttd.yaml", tmp_path / "out", False, Console(file=io.StringIO()))
    db = sqlite3.connect(out / "isobench.sqlite")
    db.row_factory = sqlite3.Row
    cells = {(r["workload"], r["platform"]): dict(r) for r in db.execute("SELECT * FROM cells ORDER BY seq")}
    assert all(c["status"] == "ok" for c in cells.values()), {k: (c["error"], c["stderr_tail"][-800:])
                                                             for k, c in cells.items() if c["status"] != "ok"}
    order = [r["workload"] for r in db.execute("SELECT workload FROM cells ORDER BY seq")]
    assert max(order.index("train-save"), len(order) - 1 - order[::-1].index("train-save")) < min(
        order.index("deploy-infer"), order.index("serve"))  # producers first in the round

    for platform in ("baremetal", "docker"):
        train, deploy, serve = (cells[(w, platform)] for w in ("train-save", "deploy-infer", "serve"))
        # The model is a file on the host, outside any container, with a manifest naming its producer.
        model = out / "artifacts" / "tiny" / platform / "model.pt"
        manifest = json.loads(model.with_name("manifest.json").read_text())
        assert model.is_file() and manifest["producer_cell"] == train["cell_id"]
        assert manifest["bytes"] == model.stat().st_size > 10_000
        for consumer in (deploy, serve):
            loaded = json.loads(consumer["platform_info"])["workload"]["artifact"]
            assert loaded["producer_cell"] == train["cell_id"] and loaded["sha256"] == manifest["sha256"]
        assert deploy["items"] == 4
        # Serving: client-side items with the server's own phases, percentiles and throughput stored.
        info = json.loads(serve["platform_info"])
        assert info["driver"]["network"] == ("host" if platform == "baremetal" else "bridge:isobench-net")
        if platform == "docker":
            assert info["network"] == "isobench-net" and not info["driver"]["address"].startswith("127.")
        metrics = _metrics(db, serve["cell_id"])
        assert serve["items"] == 24 and metrics["workload.client.requests"] == 24
        assert metrics["workload.client.errors"] == 0 and metrics["workload.server.requests"] == 27
        assert 0 < metrics["workload.client.latency_p50"] <= metrics["workload.client.latency_p99"]
        assert metrics["workload.client.throughput"] > 0 and metrics["workload.client.concurrency"] == 3
        for phase in ("connect", "inference", "transport", "preprocess"):
            assert metrics[f"phase.{phase}"] > 0
        # The CPU window is the driver's 24 measured requests, not the server's life (model load, warm-up)
        window = info["interference"]
        assert abs(window["window_s"] - info["driver"]["wall_s"]) < 0.25
        assert metrics["cpu.per_item"] == pytest.approx(window["cell_cpu_s"] / 24)
        store = Store.open(out)
        (table,) = store.items(serve["cell_id"]).values()
        store.close()
        by_item = {row.pop("item"): {k: v for k, v in row.items() if v is not None} for row in table.to_pylist()}
        assert len(by_item) == 24
        for phases in by_item.values():  # connect + server phases + transport is the client's e2e
            assert sum(v for k, v in phases.items() if k != "e2e") == pytest.approx(phases["e2e"], rel=1e-6)
    from isobench.liveness import runner_tag
    from isobench.platforms.docker import LABEL_RUNNER
    from isobench.platforms.dockercli import docker

    left = docker("ps", "-aq", "--filter", f"label={LABEL_RUNNER}={runner_tag()}").stdout.strip()
    assert left == ""  # no container of this runner outlives its cell


def test_missing_artifact_is_a_clear_error(tmp_path: Path) -> None:
    need_root()
    text = _study("miss", [{"name": "deploy-infer", "params": {"n_images": 8, "source_size": 40, "n_classes": 4,
                                                                "top_k": 2, "requests": 2, "load_from": "never"}}],
                  [{"name": "baremetal"}])
    cell = expand(load_study_text(text, "miss.yaml"))[0]
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key], artifacts_dir=str(artifacts))
    outcome = run_cell(cell, platform_for(cell))
    assert outcome.status == "failed"
    assert "artifact 'never' from platform 'baremetal' not found" in outcome.error
    assert "no training cell saved it" in outcome.error


def test_a_driver_that_cannot_reach_the_server_ends_the_cell(tmp_path: Path) -> None:
    """Fault injection (a real platform cannot be made to lose its address): the driver fails,
    the cell is killed at once rather than idling until its timeout, and the error says why."""
    need_root()
    from isobench.platforms.baremetal import BareMetal

    class Unreachable(BareMetal):
        def service_host(self, launched: object) -> str:
            raise RuntimeError("injected: no route to the cell")

    text = _study("fault", [{"name": "serve", "params": {**SERVE, "idle_timeout_s": 600}}], [{"name": "baremetal"}])
    cell = expand(load_study_text(text, "fault.yaml"))[0]
    cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])
    outcome = run_cell(cell, Unreachable(PlatformEntry(name="baremetal")))
    assert outcome.status == "failed" and "injected: no route to the cell" in outcome.error
    assert outcome.wall_s < 250  # killed by the driver, not by the 300 s cell timeout (that would be "timeout")


def test_producers_run_before_consumers_in_every_round() -> None:
    text = json.dumps({"name": "o", "workloads": [{"name": "serve", "params": {"load_from": "m"}},
                                                  {"name": "deploy-infer"}, {"name": "train-save",
                                                                             "params": {"artifact": "m"}}],
                       "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
                       "repetitions": 4, "warmup": 1, "seed": 3})
    cells = expand(load_study_text(text, "o.yaml", check_host=False))
    for tag in {c.cell_id.rsplit("/", 1)[1] for c in cells}:
        kinds = [c.workload for c in cells if c.cell_id.endswith("/" + tag)]
        assert kinds[:2] == ["train-save", "train-save"] and set(kinds[2:]) == {"serve", "deploy-infer"}
    assert all(c.network == (c.workload == "serve") for c in cells)


def test_gvisor_serving_cells_get_network_passthrough_and_others_none() -> None:
    from isobench.platforms.oci import runtime_argv

    cells = expand(load_study_text(_study("g", [{"name": "serve"}, {"name": "lenet-train"}], [{"name": "baremetal"}]),
                                   "g.yaml", check_host=False))
    serving, plain = (next(c for c in cells if c.network == flag) for flag in (True, False))
    gvisor = PLATFORMS.get("gvisor")(PlatformEntry(name="gvisor"))
    assert gvisor.network_mode(serving) == "bridge:isobench-net" and gvisor.network_mode(plain) == "none"
    assert (gvisor.cell_runtime(serving), gvisor.cell_runtime(plain)) == ("runsc-systrap-net", "runsc-systrap")
    assert "--network=host" in gvisor.runtime_args(serving=True) and "--network=none" in gvisor.runtime_args()
    assert "--network=host" in runtime_argv("runsc", "run", serving=True)
    assert "--network=none" in runtime_argv("runsc", "state", "x")
    assert PLATFORMS.get("oci")(PlatformEntry(name="oci", runtime="runsc")).network_mode(serving) == "host"
    assert PLATFORMS.get("docker")(PlatformEntry(name="docker")).network_mode(serving) == "bridge:isobench-net"
    # A runsc runtime isobench did not register (a docker entry naming it) has no serving twin: refused.
    with pytest.raises(RuntimeError, match="not one isobench registers"):
        PLATFORMS.get("docker")(PlatformEntry(name="docker", runtime="runsc")).network_mode(serving)


def test_a_gvisor_sandbox_serves_over_dockers_bridge(tmp_path: Path) -> None:
    need_docker()
    if not PLATFORMS.get("gvisor").check().ok:
        pytest.skip(f"gVisor cannot run here: {PLATFORMS.get('gvisor').check().reason}")
    text = _study("gs", [{"name": "serve", "params": {**SERVE, "requests": 12}}], [{"name": "gvisor"}])
    out = run_study(text, "gs.yaml", tmp_path / "out", False, Console(file=io.StringIO()))
    db = sqlite3.connect(out / "isobench.sqlite")
    cell_id, status, error, items, info = db.execute(
        "SELECT cell_id, status, error, items, platform_info FROM cells").fetchone()
    assert status == "ok", error
    info = json.loads(info)
    assert (info["runtime"], info["runsc_network"], info["network"]) == ("runsc-systrap-net", "passthrough",
                                                                           "isobench-net")
    assert info["driver"]["network"] == "bridge:isobench-net" and not info["driver"]["address"].startswith("127.")
    metrics = _metrics(db, cell_id)
    assert items == metrics["workload.client.requests"] == 12 and metrics["workload.client.errors"] == 0


def test_server_timing_header_round_trip_and_percentiles() -> None:
    phases = {"preprocess": 0.0012, "inference": 0.0345, "postprocess": 0.0001}
    parsed = parse_server_timing(server_timing_header(phases, 0.036))
    assert parsed == pytest.approx({**phases, "total": 0.036}, abs=1e-7)
    assert parse_server_timing('cache;desc="x", db;dur=2.5') == {"db": 0.0025}
    values = sorted(float(v) for v in range(1, 101))
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
