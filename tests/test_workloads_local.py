"""What tests/test_workloads.py leaves out, on the host only: the other code paths of the two
torch workloads (adam, DataLoader worker processes, a device that is missing), the data set
cache and the layouts it accepts, and that listing workloads does not import torch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from isobench.workloads import WORKLOADS
from isobench.workloads.datasets import (
    IDX_IMAGES,
    IDX_LABELS,
    list_jpeg_folder,
    read_mnist_idx,
    write_jpeg_folder,
    write_mnist_idx,
)
from tests.conftest import json_lines


def _worker(name: str, params: dict, data_dir: Path) -> tuple[int, list[dict]]:
    cell = {"cell_id": "t", "workload": name, "params": params, "knobs": {"threads": 1}, "seed": 0,
            "data_dir": str(data_dir)}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=300)
    return out.returncode, json_lines(out.stdout)  # json_lines raises on anything but JSON lines


def _prepared(name: str, params: dict, root: Path) -> Path:
    workload = WORKLOADS.get(name)
    parsed = workload.Params(**params)
    target = root / workload.data_key(parsed)
    workload.prepare_data(parsed, target)
    return target


def test_listing_workloads_does_not_import_torch() -> None:
    # The CLI lists and validates workloads often; a torch import there would cost seconds.
    code = ("import sys; from isobench.workloads import WORKLOADS; names = WORKLOADS.names(); "
            "[w.Params() for _, w in WORKLOADS]; "
            "heavy = [m for m in ('torch', 'torchvision', 'PIL') if m in sys.modules]; "
            "assert not heavy, heavy; print(names)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "lenet-train" in out.stdout and "resnet-infer" in out.stdout


def test_lenet_adam_with_dataloader_workers(tmp_path: Path) -> None:
    # Worker processes fork from the cell: they must not write on the record channel either.
    params = {"steps": 10, "batch_size": 8, "n_train": 32, "log_every": 3, "optimizer": "adam", "workers": 1}
    code, records = _worker("lenet-train", params, _prepared("lenet-train", params, tmp_path))
    assert code == 0, records[-1]
    items = [r for r in records if r["type"] == "item"]
    assert len(items) == 10 and records[-1]["type"] == "done" and records[-1]["items"] == 10
    for item in items:  # 32 images / 8 per batch: epochs cycle every 4 steps
        assert sum(item["phases"].values()) == pytest.approx(item["e2e"], rel=1e-6, abs=1e-7)
    note = next(r for r in records if r["type"] == "note")
    assert note["final_loss"] is not None and 0 <= note["final_accuracy"] <= 1


def test_lenet_missing_cuda_is_a_clear_error(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the error path cannot be reached")
    params = {"steps": 2, "n_train": 16, "device": "cuda"}
    code, records = _worker("lenet-train", params, _prepared("lenet-train", params, tmp_path))
    assert code == 1 and records[-1]["type"] == "error"
    assert records[-1]["message"].startswith("RuntimeError") and "cuda" in records[-1]["message"]
    assert not any(r["type"] == "item" for r in records)


def test_data_keys_follow_only_the_data_params() -> None:
    lenet, resnet = WORKLOADS.get("lenet-train"), WORKLOADS.get("resnet-infer")
    assert lenet.data_key(lenet.Params(steps=5)) == lenet.data_key(lenet.Params(steps=500))
    assert lenet.data_key(lenet.Params(n_train=64)) != lenet.data_key(lenet.Params(n_train=128))
    assert resnet.data_key(resnet.Params(requests=3, image_size=32)) == resnet.data_key(resnet.Params())
    assert resnet.data_key(resnet.Params(source_size=40)) != resnet.data_key(resnet.Params())


def test_params_reject_bad_values() -> None:
    lenet, resnet = WORKLOADS.get("lenet-train").Params, WORKLOADS.get("resnet-infer").Params
    for bad in ({"optimizer": "rmsprop"}, {"device": "tpu"}, {"steps": 0}, {"lr": 0}, {"batch": 8}):
        with pytest.raises(ValidationError):
            lenet(**bad)
    for bad in ({"model": "vgg16"}, {"image_size": 8}, {"top_k": 0}):
        with pytest.raises(ValidationError):
            resnet(**bad)
    assert resnet(top_k=10, n_classes=10).top_k == 10  # the bound itself is allowed


def test_idx_in_torchvision_layout(tmp_path: Path) -> None:
    write_mnist_idx(tmp_path / "flat", 20, seed=1)
    raw = tmp_path / "tv" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (IDX_IMAGES, IDX_LABELS):
        shutil.copy(tmp_path / "flat" / name, raw / name)
    flat_images, flat_labels = read_mnist_idx(tmp_path / "flat")
    tv_images, tv_labels = read_mnist_idx(tmp_path / "tv")
    assert (flat_images == tv_images).all() and (flat_labels == tv_labels).all()


@pytest.mark.parametrize("damage", ["truncate", "label-magic", "count"])
def test_damaged_idx_is_a_value_error(tmp_path: Path, damage: str) -> None:
    write_mnist_idx(tmp_path / "d", 10, seed=0)
    images, labels = tmp_path / "d" / IDX_IMAGES, tmp_path / "d" / IDX_LABELS
    if damage == "truncate":
        images.write_bytes(images.read_bytes()[:-5])
    elif damage == "label-magic":
        labels.write_bytes(b"\x00\x00\x08\x03" + labels.read_bytes()[4:])
    else:  # the label file promises more labels than it holds
        labels.write_bytes(labels.read_bytes()[:4] + (11).to_bytes(4, "big") + labels.read_bytes()[8:])
    with pytest.raises(ValueError, match=r"idx|magic"):
        read_mnist_idx(tmp_path / "d")


def test_jpeg_generation_is_deterministic_and_labelled(tmp_path: Path) -> None:
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        write_jpeg_folder(tmp_path / name, 6, 32, 2, seed=seed)
    files_a, classes = list_jpeg_folder(tmp_path / "a")
    files_b, _ = list_jpeg_folder(tmp_path / "b")
    files_c, _ = list_jpeg_folder(tmp_path / "c")
    assert (tmp_path / "a" / "labels.txt").read_text().split() == classes == ["class_000", "class_001"]
    assert [label for _, label in files_a] == [0, 0, 0, 1, 1, 1]
    assert [p.read_bytes() for p, _ in files_a] == [p.read_bytes() for p, _ in files_b]
    assert [p.read_bytes() for p, _ in files_a] != [p.read_bytes() for p, _ in files_c]


def test_generation_is_a_cache_and_leaves_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "mnist"
    write_mnist_idx(target, 16, seed=0)
    first = (target / IDX_IMAGES).stat().st_mtime_ns
    write_mnist_idx(target, 16, seed=99)  # an existing target is a finished generation: kept as is
    assert (target / IDX_IMAGES).stat().st_mtime_ns == first
    write_jpeg_folder(tmp_path / "jpeg", 3, 24, 1, seed=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jpeg", "mnist"]
