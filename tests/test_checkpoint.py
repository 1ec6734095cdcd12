"""Checkpointing in the training workloads: periodic torch.save of model and optimizer into
the cell's own scratch directory, timed as the ``checkpoint`` phase, removed at the end; and
the training log file. These are what give the ftrace probe (and nvmsim) write-backs from
training, as in Park & Bahn."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from isobench.workloads import WORKLOADS
from isobench.workloads.training import TRAIN_PHASES
from tests.conftest import json_lines, run_cli, write_study
from tests.test_workloads_local import _prepared


def _watched_run(name: str, params: dict, data_dir: Path, scratch: Path) -> tuple[int, list[dict], dict[str, int]]:
    """Run a cell on the host and watch ``scratch`` meanwhile: the largest size seen of each file."""
    cell = {"cell_id": "t", "workload": name, "params": params, "knobs": {"threads": 1}, "seed": 0,
            "data_dir": str(data_dir)}
    seen: dict[str, int] = {}
    proc = subprocess.Popen([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def watch() -> None:
        while proc.poll() is None:
            for path in scratch.glob("isobench-train-*/*"):
                try:
                    seen[path.name] = max(seen.get(path.name, 0), path.stat().st_size)
                except FileNotFoundError:  # removed between glob and stat
                    pass
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, _ = proc.communicate(timeout=300)
    watcher.join()
    return proc.returncode, json_lines(out), seen


def test_checkpoints_are_written_timed_and_removed(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    params = {"steps": 24, "batch_size": 8, "n_train": 32, "checkpoint_every": 5, "log_every": 4,
              "log_file": True, "checkpoint_dir": str(scratch)}
    code, records, seen = _watched_run("lenet-train", params, _prepared("lenet-train", params, tmp_path), scratch)
    assert code == 0, records[-1]
    items = [r for r in records if r["type"] == "item"]
    assert len(items) == 24
    for item in items:  # every minibatch has the phase; they still add up to end-to-end
        assert tuple(item["phases"]) == (*TRAIN_PHASES, "checkpoint")
        assert sum(item["phases"].values()) == pytest.approx(item["e2e"], rel=1e-6, abs=1e-7)
    done = records[-1]
    assert done["type"] == "done" and done["checkpoints"] == 4  # after steps 5, 10, 15, 20
    # LeNet-5's weights plus SGD momentum: tens of KiB of float32 in the real torch.save file
    assert done["checkpoint_bytes"] > 100_000
    assert seen.get("checkpoint.pt", 0) > 0 and seen.get("train.log", 0) > 0
    assert list(scratch.iterdir()) == []  # the cell's directory is gone
    saving = sum(items[i]["phases"]["checkpoint"] for i in (4, 9, 14, 19))
    others = sum(item["phases"]["checkpoint"] for i, item in enumerate(items) if (i + 1) % 5)
    assert saving > others  # 4 real saves outweigh 20 empty laps


def test_text_train_checkpoints_and_cleans_up_on_failure(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    params = {"model": "lstm", "steps": 6, "batch_size": 4, "n_samples": 64, "checkpoint_every": 2,
              "checkpoint_dir": str(scratch)}
    code, records, seen = _watched_run("text-train", params, _prepared("text-train", params, tmp_path), scratch)
    assert code == 0, records[-1]
    assert records[-1]["checkpoints"] == 3 and seen.get("checkpoint.pt", 0) > 0 and "train.log" not in seen
    assert list(scratch.iterdir()) == []
    # A directory the cell cannot write: a clear error record, no items half-timed.
    params["checkpoint_dir"] = str(tmp_path / "missing")
    code, records, _ = _watched_run("text-train", params, _prepared("text-train", params, tmp_path), scratch)
    assert code == 1 and records[-1]["type"] == "error"
    assert "checkpoint_dir" in records[-1]["message"] and "fix:" in records[-1]["message"]


def test_checkpoint_params_are_validated() -> None:
    image, text = WORKLOADS.get("image-train"), WORKLOADS.get("text-train")
    for bad in ({"checkpoint_every": -1}, {"checkpoint_dir": "var/tmp"}, {"log_file": "often"}):
        with pytest.raises(ValidationError):
            image.Params(**bad)
        with pytest.raises(ValidationError):
            text.Params(**bad)
    assert image.item_phases(image.Params()) == TRAIN_PHASES  # off by default: phases unchanged
    assert text.item_phases(text.Params(checkpoint_every=3))[-1] == "checkpoint"


def test_bad_checkpoint_value_in_a_study_is_one_line(tmp_path: Path) -> None:
    path = write_study(tmp_path / "study.yaml", {
        "name": "c", "platforms": [{"name": "baremetal"}],
        "workloads": [{"name": "image-train", "params": {"model": "squeezenet1_1", "checkpoint_every": -5}}]})
    result = run_cli("plan", str(path), timeout=60)
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and str(path) in line and "workloads[0].params.checkpoint_every" in line
