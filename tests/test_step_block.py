"""`isobench.step()` works as a call and as `with step():`: the block is one item, time between
blocks is in no item, and outside isobench both forms are a no-op that allocates nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from isobench import api
from isobench.plan import expand
from isobench.runner.execute import platform_for, run_cell
from isobench.studyfile import load_study_text
from tests.conftest import json_lines, need_root

BLOCKS = """
import time
from isobench import phase, step

time.sleep(0.02)                     # startup: before the first block
for i in range(4):
    with step():
        with phase("work"):
            sum(range(30000))
        time.sleep(0.002)
    time.sleep(0.03)                 # between blocks: in no item
    with phase("between"):           # not recorded either
        time.sleep(0.001)
try:                                 # a block that raises still closes its item
    with step():
        with phase("fails"):
            raise ValueError("in the block")
except ValueError:
    pass
step()                               # the plain form still works after blocks: opens an item
with phase("tail"):
    pass
time.sleep(0.02)
"""


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "userdir" / "blocks.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return path


def test_with_step_blocks_are_the_items_in_the_worker(tmp_path: Path) -> None:
    cell = {"cell_id": "t", "workload": "script", "params": {"path": str(_script(tmp_path, BLOCKS))},
            "knobs": {}, "seed": 0}
    out = subprocess.run([sys.executable, "-m", "isobench.workloads.worker", json.dumps(cell)],
                         capture_output=True, text=True, timeout=120)
    records = json_lines(out.stdout)
    assert out.returncode == 0, out.stderr[-2000:]
    items = [r for r in records if r["type"] == "item"]
    assert [set(r["phases"]) for r in items] == [{"work"}] * 4 + [{"fails"}, {"tail"}]
    for item in items[:4]:  # the block's own time: the 30 ms after it is in no item
        assert item["phases"]["work"] + 0.002 <= item["e2e"] < 0.025, item
    setup = {r["name"]: r["dur"] for r in records if r["type"] == "setup"}
    assert 0.02 <= setup["startup"] < 0.5 and "teardown" not in setup  # the tail item ran to the end
    assert records[-1]["type"] == "done" and records[-1]["items_marked"] == 6


def test_with_step_on_baremetal_with_a_slowdown(tmp_path: Path) -> None:
    need_root()
    body = "from isobench import phase, step\nfor _ in range(10):\n    with step():\n" \
           "        with phase('work'):\n            sum(i * i for i in range(100000))\n"
    study = {"name": "s", "workloads": [{"name": "script", "params": {"path": str(_script(tmp_path, body))}}],
             "platforms": [{"name": "baremetal", "knobs": {"slowdown": 0.2}}], "repetitions": 1, "warmup": 0,
             "probes": {}}
    cell = expand(load_study_text(json.dumps(study), "s.yaml"))[0]
    platform = platform_for(cell)
    platform.prepare()
    outcome = run_cell(cell, platform)
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail)
    assert len(outcome.items) == 10 and outcome.done["items_marked"] == 10
    injected, work = (sum(item["phases"][name] for item in outcome.items) for name in ("injected", "work"))
    assert 0.14 < injected / work < 0.3, (injected, work)


def test_step_is_a_noop_context_manager_outside_isobench() -> None:
    from isobench import phase, step

    assert api._recorder is None
    with step() as value:
        assert value is None
    assert step() is step() is phase("x")  # one shared object for every call: nothing allocated
    blocks_before = sys.getallocatedblocks()
    for _ in range(10_000):
        step()
        with step():
            pass
    assert sys.getallocatedblocks() - blocks_before < 50
    code = "from isobench import step\nwith step():\n    pass\nstep()\nprint('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "ok\n" and out.stderr == "", out.stderr
