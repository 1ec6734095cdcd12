"""The cell's entry point: ``python -m isobench.workloads.worker CELL_JSON``.

The same module runs on every platform. It writes, on the record channel:
``hello`` (what the cell really got), ``setup`` phases, one ``item`` per timed
item, then ``done`` or ``error``.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def place_on_cores(cores: str | None) -> None:
    """Run on the cores the plan gave the cell, or on every core the cell's cgroup allows.

    The worker inherits the runner's affinity (the harness's core) until its platform moves
    it into a cpuset cgroup; platforms that apply no cpuset (a layer rung, a guest) rely on
    this. The kernel keeps the result within the cgroup's cpuset, and a core the cell cannot
    have (a guest's numbering) leaves the affinity as it is."""
    wanted: set[int] = set(range(os.cpu_count() or 1))
    if cores:
        from isobench.hostinfo import parse_cpu_list

        wanted = set(parse_cpu_list(cores))
    try:
        os.sched_setaffinity(0, wanted)
    except OSError:
        try:
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
        except OSError:
            pass


#: how long a worker waits for the runner's acknowledgement of its done record before exiting
ACK_TIMEOUT_S = 10.0


def end_process(code: int, records: object, normal_exit: bool, await_ack: bool = False) -> int:
    """Exit at once once the records are out, unless something needs the interpreter's teardown.

    A process that has imported torch spends 0.8-1.1 s unloading modules at exit (measured on
    this 2-core VM), after the cell's last record: a second of every cell's wall time, and of
    every duet pair's. Child processes (a DataLoader's workers) are joined by that teardown, so
    a worker that has any keeps it, as does a user's script (its atexit handlers).

    The runner takes its closing snapshots (the cell's cgroup CPU time) when it reads the done
    record; a container's cgroup goes when its last process does. So the fast exit waits for the
    runner's acknowledgement on stdin (``await_ack``, given only where the platform carries
    stdin); a worker without one keeps the teardown, whose second covers the snapshot."""
    import multiprocessing

    for stream in (records, sys.stdout, sys.stderr):
        stream.flush()  # type: ignore[attr-defined]
    if normal_exit or not await_ack or multiprocessing.active_children():
        return code
    from isobench.workloads.channel import wait_for_go

    wait_for_go(ACK_TIMEOUT_S)
    os._exit(code)


def main(argv: list[str]) -> int:
    stream_started = time.time()
    from isobench.workloads.channel import RECORD_VERSION, CellContext, claim_stdout_for_records

    records = claim_stdout_for_records()
    cell = json.loads(argv[0])
    place_on_cores(cell.get("cores"))
    threads = cell.get("knobs", {}).get("threads")
    if threads:
        # Before torch is imported, so OpenMP sizes its pool from it as well.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ["MKL_NUM_THREADS"] = str(threads)
    from isobench.workloads.inspect_cell import inspect_cell

    ctx = CellContext(records, cell)
    ctx.emit({"type": "hello", "version": RECORD_VERSION, "wall_time": stream_started,
              "cell_id": cell.get("cell_id"), "inside": inspect_cell(),
              "python": sys.executable})
    try:
        malloc = cell.get("knobs", {}).get("malloc")
        if malloc:  # before the workload's modules load, so the whole run has it
            from isobench.workloads.allocator import apply_malloc

            ctx.note(malloc=malloc, malloc_env=apply_malloc(str(malloc)))
        from isobench.workloads import WORKLOADS

        workload_cls = WORKLOADS.get(cell["workload"])
        params = workload_cls.Params(**cell.get("params", {}))
        with ctx.setup("import"):
            for module in workload_cls.import_modules(params):
                importlib.import_module(module)
            if threads and "torch" in workload_cls.imports:
                import torch

                torch.set_num_threads(int(threads))
        slowdown = cell.get("knobs", {}).get("slowdown")
        if slowdown:
            from isobench.workloads.timing import inject_slowdown

            phases = cell.get("knobs", {}).get("slowdown_phases")
            inject_slowdown(float(slowdown), phases)
            ctx.note(slowdown=slowdown, **({"slowdown_phases": phases} if phases else {}))
        extra_syscalls = int(cell.get("knobs", {}).get("extra_syscalls") or 0)
        extra_faults = int(cell.get("knobs", {}).get("extra_faults") or 0)
        if extra_syscalls or extra_faults:
            from isobench.workloads.timing import inject_mechanisms

            inject_mechanisms(extra_syscalls, extra_faults)  # counted events at each item's end
            ctx.note(extra_syscalls=extra_syscalls, extra_faults=extra_faults)
        workload_cls().run(params, ctx)
        extra = {}
        if "torch" in workload_cls.imports:
            import torch

            extra["torch_threads"] = torch.get_num_threads()
        ctx.finish(**extra)
        return end_process(0, records, workload_cls.needs_interpreter_exit, bool(cell.get("ack_done")))
    except Exception as exc:  # reported on the channel, then a non-zero exit
        ctx.emit({"type": "error", "message": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()[-4000:]})
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
