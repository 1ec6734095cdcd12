"""The platform interface.

A platform turns a cell into a running process whose stdout is the record channel
(see :mod:`isobench.workloads.channel`). It must not assume a shared filesystem
or host pids: the runner only reads that stream and the exit status.
"""

from __future__ import annotations

import os
import signal
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from isobench.plan.cells import Cell
    from isobench.study.model import PlatformEntry
    from isobench.target import ProbeTarget

ALL_KNOBS = frozenset({"cpus", "cpuset", "memory", "seccomp", "threads"})
#: knobs every platform takes, applied by isobench itself: resolved to cpus/cpuset at plan time
#: (plan/placement.py), host state the runner sets around the cell (runner/hostknobs.py), or
#: injected inside the worker (slowdown, extra_syscalls, extra_faults: workloads/timing.py), or set by
#: the worker before the workload loads (malloc: workloads/allocator.py)
PLACEMENT_AND_HOST_KNOBS = frozenset({"slowdown", "slowdown_phases", "extra_syscalls", "extra_faults", "malloc",
                                      "extra_writebacks",  # the file-writer's injected writer (file_writer.py)
                                      "placement", "chr", "reserve_idle_cores",
                                      "numa_node", "governor", "max_freq", "power_mode", "jetson_clocks"})


@dataclass
class Availability:
    ok: bool
    reason: str = ""
    #: knob -> why it cannot be applied here (absent: it can)
    knobs_unavailable: dict[str, str] = field(default_factory=dict)
    #: things a user should know that do not stop anything
    notes: list[str] = field(default_factory=list)


@dataclass
class Launched:
    """A started cell: the process whose stdout carries records. A platform with more to clean up
    subclasses it with typed fields (baremetal's cgroup, oci's bundle, vm's guest run)."""

    proc: subprocess.Popen[bytes]
    name: str
    started: float


class Platform(ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    #: cells go through a container engine's daemons (dockerd, containerd): the harness pins them
    uses_engine: ClassVar[bool] = False
    #: the worker sees the host's core numbers (not a guest's), so it can keep to the cell's cores
    host_cores_inside: ClassVar[bool] = True
    knobs: ClassVar[frozenset[str]] = ALL_KNOBS
    #: rough seconds from launch to the worker's first record, for `isobench plan`
    startup_estimate_s: ClassVar[float] = 0.3
    #: the launcher's stdin reaches the worker, so a duet member can wait at the start line
    #: (runner/duet.py) until its partner is ready too
    start_line: ClassVar[bool] = False
    #: the entry may name a runsc platform (``platform:``): gvisor only
    takes_runsc_platform: ClassVar[bool] = False
    #: the entry may name another build of its runtime (``runtime_path:``): oci and gvisor
    takes_runtime_path: ClassVar[bool] = False

    def __init__(self, entry: PlatformEntry) -> None:
        self.entry = entry

    # -- static checks ----------------------------------------------------------------
    @classmethod
    def design_caveat(cls, entry: PlatformEntry, cores_per_cell: int) -> str | None:
        """What the study's design does to this entry's result that a reader must know (None: nothing):
        ``cores_per_cell`` is how many cores each of its cells gets (plan/cores.py)."""
        return None

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        """Raise ValueError("field: problem (fix: ...)") for options this platform rejects."""
        if entry.runtime is not None:
            raise ValueError(f"runtime: {cls.name} takes no runtime (fix: remove `runtime`)")
        if entry.image is not None:
            raise ValueError(f"image: {cls.name} takes no image (fix: remove `image`)")

    @classmethod
    def validate_workload(cls, entry: PlatformEntry, params: dict[str, Any]) -> None:
        """Raise ValueError("field: problem (fix: ...)") when this entry cannot run a workload with
        these parameters (e.g. ``device: cuda`` on an entry that passes no GPU in). Default: any."""

    @classmethod
    def validate_knobs(cls, knobs: dict[str, Any]) -> None:
        """Raise ValueError("knobs.<knob>: problem (fix: ...)") for a cell's knob set this platform rejects."""
        foreign = {k for k, v in knobs.items() if v is not None} - cls.knobs - PLACEMENT_AND_HOST_KNOBS
        if foreign:
            knob = sorted(foreign)[0]
            raise ValueError(f"knobs.{knob}: {cls.name} does not take {knob} (fix: drop it for this entry; "
                             "`isobench platforms` lists each platform's knobs)")

    @classmethod
    @abstractmethod
    def check(cls) -> Availability:
        """Can this platform run here? Cheap; no side effects beyond reading the host."""

    def availability(self) -> Availability:
        """Availability for this entry (a runtime option may change the answer)."""
        return self.check()

    def display(self) -> str:
        """How results name this entry: ``name/label``, or the platform's own default."""
        return f"{self.name}/{self.entry.label}" if self.entry.label else self.default_display()

    def default_display(self) -> str:
        return self.name

    # -- lifecycle --------------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """Versions of everything this platform is made of."""
        return {}

    def versions(self) -> dict[str, str]:
        """The engine and runtime versions this entry runs on, by short name ("docker": "20.10.24",
        "runc": "1.1.5"; {} for the host itself): every cell records them and every comparison line
        names them. Asked once per platform object (the runner asks before the first cell)."""
        found = self.__dict__.get("_versions")
        if found is None:
            found = self.__dict__["_versions"] = self.find_versions()
        return dict(found)

    def find_versions(self) -> dict[str, str]:
        """What ``versions`` reports, asked of the tools themselves (a platform overrides it)."""
        return {}

    def runs_own_kernel(self) -> bool:
        """The workload's system calls and page faults are served by a kernel of the platform's own
        (gVisor's Sentry, a VM's guest): host-side counts of the cell's tasks are that kernel's work,
        not the workload's (the "why" model then counts the workload on the baseline)."""
        return False

    def prepare(self) -> None:
        """Idempotent host-side set-up (images, root filesystems); called before the first cell."""

    @abstractmethod
    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        """Start ``argv`` (the worker command) as the cell; stdout must be a pipe, and stdin
        ``self.cell_stdin(cell)``."""

    def holds_at_start_line(self, cell: Cell) -> bool:
        """The cell waits for the runner's go before its measured window: a duet member, or a
        member of a tenant group that waits for all (density), on a platform that carries stdin."""
        waits = cell.duet is not None or (cell.tenant is not None and cell.tenant.start_line)
        return waits and self.start_line

    def cell_stdin(self, cell: Cell) -> int:
        """A pipe for a cell at the start line (the runner writes its go there), else nothing."""
        return subprocess.PIPE if self.holds_at_start_line(cell) else subprocess.DEVNULL

    def probe_target(self, launched: Launched) -> ProbeTarget:
        """Where the cell runs as the host sees it, for probes: host pids and host cgroups.

        May wait briefly for the cell to exist (a container is created after ``launch``
        returns). The default names the launcher process alone."""
        from isobench.target import ProbeTarget

        return ProbeTarget(platform=self.name, root_pid=launched.proc.pid)

    def collect(self, launched: Launched) -> dict[str, Any]:
        """After the process ended: platform facts about the cell (OOM kill, container id)."""
        return {}

    def network_mode(self, cell: Cell) -> str:
        """The network a cell gets: "none", or how the host reaches a serving cell."""
        return "host"

    def service_host(self, launched: Launched) -> str:
        """The address the host reaches a serving cell's port on (see ``network_mode``)."""
        return "127.0.0.1"

    @abstractmethod
    def cleanup_cell(self, launched: Launched) -> None:
        """Kill and remove everything the cell started. Idempotent; called on every exit path."""

    def cleanup(self) -> None:
        """Release what ``prepare`` made that must not outlive the study."""

    @classmethod
    def sweep_stale(cls) -> list[str]:
        """Remove leftovers of runners that died (kill -9); return what was removed."""
        return []


def kill_process_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Signal the launcher's whole session (it was started with start_new_session=True)."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
