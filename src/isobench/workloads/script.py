"""script: the user's own Python script as a workload, on every platform.

The worker runs the script in its own process (``runpy``, as ``__main__``, with
``sys.argv`` = [path, *args]) after routing :mod:`isobench.api` to the cell's channel, so
``with phase(...)`` and ``step()`` in the script become the cell's phases and items. The
script's directory is mounted read-only at the same path in containers (the host mirror
already holds the project, the interpreter and the virtual environment).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload, WorkloadParams

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext


class ScriptParams(WorkloadParams):
    path: str = Field("", description="the Python script (relative: to the current directory)")
    args: list[str] = Field(default_factory=list, description="its command-line arguments")
    cwd: Literal["scratch", "script"] = Field(
        "scratch", description="scratch: a fresh writable directory on every platform; script: the "
                               "script's directory (read-only inside containers)")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # Containers start elsewhere (/tmp): the cell must name the script by its full path.
        return str(Path(value).expanduser().absolute()) if value else value

    @field_validator("args", mode="before")
    @classmethod
    def _strings(cls, value: object) -> object:
        return [str(v) for v in value] if isinstance(value, list) else value


@WORKLOADS.register("script")
class Script(Workload):
    description = ("your own Python script; mark phases with `with isobench.phase(name):` and items with "
                   "`isobench.step()` (no-ops outside isobench)")
    item = "step"
    phases = ("<the names your script gives isobench.phase()>",)
    setup_phases = ("startup", "teardown")
    Params = ScriptParams
    needs_interpreter_exit = True  # the script's atexit handlers and buffered files

    @classmethod
    def item_phases(cls, params: WorkloadParams) -> tuple[str, ...]:
        return ()  # whatever the script marks: not known before it runs

    @classmethod
    def host_paths(cls, params: WorkloadParams) -> tuple[str, ...]:
        assert isinstance(params, ScriptParams)
        return (str(Path(params.path).parent),) if params.path else ()

    @classmethod
    def check_host(cls, params: WorkloadParams) -> None:
        assert isinstance(params, ScriptParams)
        if not params.path:
            raise ValueError("path: no script given; fix: set params.path to your script")
        path = Path(params.path)
        if not path.is_file():
            raise ValueError(f"path: no such file {params.path}; fix: give the path of an existing Python script")
        if path.parent == Path(path.anchor):
            raise ValueError(f"path: {params.path} lies in the root directory, which cannot be mounted "
                             "into containers; fix: move the script into a directory of its own")

    @classmethod
    def estimate_s(cls, params: WorkloadParams) -> float:
        return 30.0  # unknown: the user's script decides

    def run(self, params: ScriptParams, ctx: CellContext) -> None:  # type: ignore[override]
        from isobench import api
        from isobench.workloads.timing import item_end_injection

        script = Path(params.path)
        scratch = tempfile.mkdtemp(prefix="isobench-script-")
        saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
        sys.argv = [str(script), *params.args]
        sys.path.insert(0, str(script.parent))  # as `python script.py` does
        os.chdir(script.parent if params.cwd == "script" else scratch)
        # the `slowdown`, `extra_syscalls` and `extra_faults` knobs: at each step's end
        recorder = api.activate(ctx, *item_end_injection())
        try:
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as stop:  # sys.exit() in the script: only a failure status is an error
                if stop.code not in (None, 0):
                    raise RuntimeError(f"the script exited with status {stop.code}") from None
            recorder.close()
        finally:
            api.deactivate()
            sys.argv, sys.path[:] = saved_argv, saved_path
            os.chdir(saved_cwd)
            shutil.rmtree(scratch, ignore_errors=True)
        warmed, measured = ctx.counts
        if measured == 0 and warmed > 0:  # every step went to warm-up: nothing would be compared
            raise RuntimeError(f"the script marked {warmed} step(s), all of them untimed warm-up items "
                               f"(warmup_items: {warmed}); fix: run more steps, or set warmup_items lower")
        ctx.note(script=str(script), args=params.args, items_marked=recorder.items)


def script_study(script: Path, args: list[str], platforms: list[str],
                 repetitions: int | None = None, warmup_steps: int | None = None) -> tuple[str, str]:
    """The one-workload study ``isobench run --script`` runs: (its YAML text, the name shown for it).
    Without ``repetitions`` it writes no design field, so it gets the resolving design (design.py):
    a duet with the baseline, the first steps as warm-up, an A/A entry, rounds until each verdict."""
    import re

    import yaml

    from isobench.errors import UserError

    if not script.is_file():
        raise UserError("no such file", file=str(script), field="--script", fix="give the path of your Python script")
    path = script.expanduser().absolute()
    stem = re.sub(r"[^A-Za-z0-9_.-]", "-", path.stem)[:40] or "script"
    study = {"name": f"script-{stem}",
             "workloads": [{"name": "script", "params": {"path": str(path), "args": list(args)}}],
             "platforms": [{"name": name.strip()} for name in platforms if name.strip()]}
    if repetitions is not None:  # a fixed count, as before the resolving design: one warm-up round
        study.update(repetitions=repetitions, warmup=1)
    if warmup_steps is not None:
        study["warmup_items"] = warmup_steps
    return yaml.safe_dump(study, sort_keys=False), f"<--script {path}>"
