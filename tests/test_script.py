"""Bring your own workload: a user's script marks phases and items with isobench.phase/step
and runs as a cell on bare metal, in Docker and under an OCI runtime (its directory mounted
read-only); outside isobench the API is a no-op; a missing script is a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from isobench import api
from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.store.sqlite import cell_metrics
from isobench.studyfile import load_study_text
from tests.conftest import json_lines, need_docker, need_root, need_tool, run_cli

TRAIN = """
import os
import sys
import time

import isobench
from isobench import phase, step

steps = int(sys.argv[1])
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data.txt")) as f:
    assert f.read() == "beside the script"   # a file next to the script is visible in the cell
open("scratch.txt", "w").write("the working directory is writable")
step()                                        # the timed part starts here
for i in range(steps):
    with phase("fetch"):
        time.sleep(0.002)
    with phase("train"):
        with phase("forward"):
            sum(range(20000))
        with phase("backward"):
            sum(range(40000))
    step()
if hasattr(os, "fork"):                       # a forked child must not write on the channel
    pid = os.fork()
    if pid == 0:
        step()
        os._exit(0)
    os.waitpid(pid, 0)
isobench.metric("accuracy", 0.75)
print("stdout of the script goes to stderr, not to the channel")
"""


def _script(tmp_path: Path, body: str = TRAIN, name: str = "my_train.py") -> Path:
    directory = tmp_path / "userdir"
    directory.mkdir(exist_ok=True)
    (directory / "data.txt").write_text("beside the script")
    path = directory / name
    path.write_text(textwrap.dedent(body))
    return path


def _outcome(path: Path, platform: dict, args: list[str]):
    study = {"name": "s", "workloads": [{"name": "script", "params": {"path": str(path), "args": args}}],
             "platforms": [platform], "repetitions": 1, "warmup": 0, "probes": {}}
    cell = expand(load_study_text(json.dumps(study), "s.yaml"))[0]
    assert str(path.parent) in cell.mounts
    platform_obj = platform_for(cell)
    platform_obj.prepare()
    return run_cell(cell, platform_obj)


@pytest.mark.parametrize("platform", [{"name": "baremetal"}, {"name": "docker"},
                                      {"name": "oci", "runtime": "runc"}], ids=lambda p: p["name"])
def test_script_phases_and_steps_on_a_platform(platform: dict, tmp_path: Path) -> None:
    {"baremetal": need_root, "docker": need_docker, "oci": lambda: need_tool("runc")}[platform["name"]]()
    outcome = _outcome(_script(tmp_path), platform, ["4"])
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert len(outcome.items) == 4  # the forked child's step() wrote nothing
    for item in outcome.items:
        assert set(item["phases"]) == {"fetch", "train", "train/forward", "train/backward"}
        top = item["phases"]["fetch"] + item["phases"]["train"]
        assert top <= item["e2e"] * 1.001 + 1e-6
        nested = item["phases"]["train/forward"] + item["phases"]["train/backward"]
        assert nested <= item["phases"]["train"] * 1.001 + 1e-6
    assert {"startup", "teardown"} <= set(outcome.setup)
    metrics = {m: v for m, v, _ in cell_metrics(outcome)}
    assert metrics["workload.accuracy"] == 0.75 and metrics["phase.train/forward"] > 0
    assert outcome.done["items_marked"] == 4 and outcome.done["args"] == ["4"]


def _worker(path: Path, args: list[str] | None = None) -> tuple[int, list[dict], str]:
    cell = {"cell_id": "t", "workload": "script", "params": {"path": str(path), "args": args or []},
            "knobs": {}, "seed": 0}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=120)
    return out.returncode, json_lines(out.stdout), out.stderr


def test_unmarked_script_is_one_item_and_a_failing_one_fails(tmp_path: Path) -> None:
    code, records, _ = _worker(_script(tmp_path, "import time\ntime.sleep(0.01)\n", "plain.py"))
    items = [r for r in records if r["type"] == "item"]
    assert code == 0 and len(items) == 1 and items[0]["e2e"] >= 0.01 and items[0]["phases"] == {}
    code, records, _ = _worker(_script(tmp_path, "import sys\nsys.exit(3)\n", "fails.py"))
    assert code == 1 and records[-1]["type"] == "error" and "status 3" in records[-1]["message"]
    code, records, _ = _worker(_script(tmp_path, "import sys\nsys.exit(0)\n", "quits.py"))
    assert code == 0 and records[-1]["type"] == "done"
    # phases after the last step() close one more item at the end
    tail = "from isobench import phase, step\nwith phase('a'): pass\nstep()\nwith phase('b'): pass\n"
    code, records, _ = _worker(_script(tmp_path, tail, "tail.py"))
    assert [set(r["phases"]) for r in records if r["type"] == "item"] == [{"a"}, {"b"}]


def test_api_is_a_noop_outside_isobench() -> None:
    from isobench import metric, phase, step

    assert api._recorder is None
    first, second = phase("forward"), phase("backward")
    assert first is second  # one shared object: nothing allocated per call
    with phase("forward") as value:
        assert value is None
    assert step() is first and metric("x", 1.0) is None  # step() returns the same shared object
    # importing the API in a fresh interpreter pulls in no heavy module and prints nothing
    code = ("import sys; from isobench import phase, step\nwith phase('x'):\n    step()\n"
            "assert not [m for m in ('torch', 'numpy', 'pydantic') if m in sys.modules]")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stderr


def test_cli_script_run_and_bad_path(tmp_path: Path) -> None:
    need_root()
    out_dir = tmp_path / "res"
    missing = run_cli("run", "--script", str(tmp_path / "nope.py"), "--out", str(out_dir))
    assert missing.returncode == 2 and "no such file" in missing.stderr and "--script" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and not out_dir.exists()
    study = tmp_path / "study.yaml"
    study.write_text(f"name: s\nworkloads: [{{name: script, params: {{path: {tmp_path}/nope.py}}}}]\n"
                     "platforms: [{name: baremetal}]\n")
    bad = run_cli("plan", str(study))
    assert bad.returncode == 2 and "workloads[0].params.path" in bad.stderr and "no such file" in bad.stderr
    script = _script(tmp_path)
    done = run_cli("run", "--script", str(script), "--platforms", "baremetal", "--repetitions", "1",
                   "--warmup-steps", "0", "--out", str(out_dir), "--", "3", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    from isobench.store import Store

    store = Store.open(out_dir)
    cells = [c for c in store.cells(include_warmup=True) if "+rerun" not in c["cell_id"]]  # a busy test host
    # The resolving design adds an A/A entry and pairs it with the baseline: a warm-up and a measured pair.
    assert len(cells) == 4 and {c["status"] for c in cells} == {"ok"} and {c["items"] for c in cells} == {3}
    assert {c["platform_key"] for c in cells} == {"baremetal", "aa"}
    assert cells[0]["params"]["args"] == ["3"] and cells[0]["params"]["path"] == str(script)
