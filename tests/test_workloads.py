"""Each workload runs through the real worker, on bare metal and in a container, and yields
the phase records its docs promise; data sets are real formats, deterministic by seed."""

from __future__ import annotations

import json
import statistics
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.setup import prepare_data
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from isobench.workloads.datasets import (
    IDX_IMAGES,
    list_jpeg_folder,
    read_mnist_idx,
    write_jpeg_folder,
    write_mnist_idx,
)
from tests.conftest import json_lines, need_docker, need_root

TINY = {
    "cpu-spin": {"iterations": 4, "work": 1000},
    "lenet-train": {"steps": 12, "batch_size": 8, "n_train": 64, "log_every": 4},
    "resnet-infer": {"requests": 6, "image_size": 32, "n_images": 8, "source_size": 40},
}


def _run_worker(name: str, data_dir: Path | None) -> list[dict]:
    cell = {"cell_id": "t", "workload": name, "params": TINY[name], "knobs": {"threads": 1}, "seed": 0,
            "data_dir": str(data_dir) if data_dir else None}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json_lines(out.stdout)  # raises if anything but JSON lines reached the channel


def _check_records(name: str, records: list[dict], logging_phase: bool) -> None:
    workload = WORKLOADS.get(name)
    kinds = [r["type"] for r in records]
    assert kinds[0] == "hello" and kinds[-1] == "done"
    setup = {r["name"] for r in records if r["type"] == "setup"}
    assert set(workload.setup_phases) <= setup | {"import"}
    items = [r for r in records if r["type"] == "item"]
    expected = next(v for k, v in TINY[name].items() if k in ("steps", "requests", "iterations"))
    assert len(items) == expected and records[-1]["items"] == expected
    for item in items:
        assert set(item["phases"]) == set(workload.phases)
        assert all(v >= 0 for v in item["phases"].values())
        total = sum(item["phases"].values())
        assert total <= item["e2e"] * 1.001 + 1e-6
        if logging_phase:  # logging is defined as the rest of the iteration: the sum is the whole
            assert total == pytest.approx(item["e2e"], rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("name", sorted(TINY))
def test_worker_yields_the_promised_phases(name: str, tmp_path: Path) -> None:
    workload = WORKLOADS.get(name)
    params = workload.Params(**TINY[name])
    data_dir = None
    if workload.data_key(params):
        data_dir = tmp_path / "data"
        workload.prepare_data(params, data_dir)
    _check_records(name, _run_worker(name, data_dir), logging_phase="logging" in workload.phases)


@pytest.mark.parametrize("platform", ["baremetal", "docker"])
@pytest.mark.parametrize("name", ["lenet-train", "resnet-infer"])
def test_workload_on_a_platform(platform: str, name: str) -> None:
    need_docker() if platform == "docker" else need_root()
    study = {"name": "wl", "workloads": [{"name": name, "params": TINY[name]}],
             "platforms": [{"name": platform}], "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0}
    cell = expand(load_study_text(json.dumps(study), "wl.yaml"))[0]
    import dataclasses

    cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])
    platform_obj = platform_for(cell)
    platform_obj.prepare()
    outcome = run_cell(cell, platform_obj)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert len(outcome.items) == next(v for k, v in TINY[name].items() if k in ("steps", "requests"))
    assert {"import", "model_load", "data_load"} <= set(outcome.setup)
    assert outcome.done["torch_threads"] == 1


def test_mnist_idx_round_trip_and_determinism(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "a", 100, seed=5)
    write_mnist_idx(tmp_path / "b", 100, seed=5)
    write_mnist_idx(tmp_path / "c", 100, seed=6)
    images, labels = read_mnist_idx(tmp_path / "a")
    assert images.shape == (100, 28, 28) and images.dtype.name == "uint8"
    assert labels.shape == (100,) and labels.min() >= 0 and labels.max() <= 9
    header = (tmp_path / "a" / IDX_IMAGES).read_bytes()[:16]
    assert struct.unpack(">IIII", header) == (0x803, 100, 28, 28)
    assert (tmp_path / "a" / IDX_IMAGES).read_bytes() == (tmp_path / "b" / IDX_IMAGES).read_bytes()
    assert (tmp_path / "a" / IDX_IMAGES).read_bytes() != (tmp_path / "c" / IDX_IMAGES).read_bytes()


def test_corrupt_or_missing_idx_is_a_clear_error(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "d", 10, seed=0)
    path = tmp_path / "d" / IDX_IMAGES
    path.write_bytes(b"\x00\x00\x09\x99" + path.read_bytes()[4:])
    with pytest.raises(ValueError, match="bad magic"):
        read_mnist_idx(tmp_path / "d")
    with pytest.raises(ValueError, match="no train-images"):
        read_mnist_idx(tmp_path / "empty")


def test_jpeg_folder_is_real_jpegs(tmp_path: Path) -> None:
    from PIL import Image

    write_jpeg_folder(tmp_path / "j", 12, 40, 3, seed=0)
    files, classes = list_jpeg_folder(tmp_path / "j")
    assert len(files) == 12 and classes == ["class_000", "class_001", "class_002"]
    for path, label in files:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.size == (40, 40)
        assert path.parent.name == classes[label]
    with pytest.raises(ValueError):
        list_jpeg_folder(tmp_path / "nothing")


def test_parameter_validation() -> None:
    params = WORKLOADS.get("resnet-infer").Params
    with pytest.raises(ValidationError, match="top_k"):
        params(top_k=20, n_classes=10)
    with pytest.raises(ValidationError):
        params(colour=True)


def _slowed_items(name: str, params: dict, tmp_path: Path) -> tuple[list[float], list[float]]:
    """(injected phase, the rest of the item) of each measured item of a real worker run with
    ``slowdown: 0.2``."""
    workload = WORKLOADS.get(name)
    data_dir = tmp_path / "data"
    workload.prepare_data(workload.Params(**params), data_dir)
    cell = {"cell_id": "t", "workload": name, "params": params, "knobs": {"threads": 1, "slowdown": 0.2},
            "seed": 0, "data_dir": str(data_dir)}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    items = [r for r in json_lines(out.stdout) if r["type"] == "item"]
    injected = [item["phases"]["injected"] for item in items]
    return injected, [item["e2e"] - phase for item, phase in zip(items, injected, strict=True)]


@pytest.mark.parametrize(("name", "count"), [("resnet-infer", "requests"), ("lenet-train", "steps")])
def test_a_slowdown_repeats_the_loops_own_items_in_cells_sized_in_seconds(name: str, count: str,
                                                                           tmp_path: Path) -> None:
    # The inference and training loops repeat whole requests (steps: forward, backward, optimizer)
    # for a slowdown (workloads/timing.InjectingPhaseClock): most items inject nothing, about a
    # fifth of them one item's worth, in all a fifth of their time.
    injected, own = _slowed_items(name, {**TINY[name], count: 10, "min_seconds": 0.5}, tmp_path)
    repeats = [phase for phase in injected if phase > 0.2 * statistics.median(own)]
    n = len(injected)
    # a repeated step leaves out the fetch and the logging: shorter than an item, so more of them
    assert n >= 40 and 0.1 * n <= len(repeats) <= 0.4 * n, (n, injected)
    assert sum(1 for phase in injected if phase < 1e-4) == n - len(repeats), injected
    assert 0.5 < statistics.median(repeats) / statistics.median(own) < 2.0
    assert sum(injected) / sum(own) == pytest.approx(0.2, abs=0.05)


def test_a_cell_of_a_fixed_few_items_spins_in_every_item(tmp_path: Path) -> None:
    # 12 steps cannot hold a fifth of themselves in whole repeats: each item spins its fifth
    injected, own = _slowed_items("lenet-train", TINY["lenet-train"], tmp_path)
    assert len(injected) == 12
    for phase, rest in zip(injected, own, strict=True):
        assert 0.15 * rest < phase < 0.5 * rest, (injected, own)
