"""The layer ladder: a bare-metal process plus exactly ONE isolation mechanism.

Each ``layer-*`` platform starts the worker as a host process in a cgroup of its own,
exactly as ``baremetal`` does (so the baseline and every layer share the cgroup
accounting), and adds one mechanism a container is made of:

- ``layer-namespaces``: new pid, mount, uts, ipc and net namespaces (``unshare``, with
  its own ``/proc``), nothing else;
- ``layer-cpu-quota`` / ``layer-cpuset`` / ``layer-memory``: the cell's cgroup carries
  that one limit (the entry must give the ``cpus``, ``cpuset`` or ``memory`` knob, and
  no other resource knob);
- ``layer-seccomp``: Docker's own default seccomp BPF program (read from a live
  container, see :mod:`isobench.platforms.seccomp_bpf`) installed on the process;
- ``layer-overlay``: every directory a host-mirror container sees (``/usr``, the
  Python prefixes, the project, the data sets) is read through an overlay mount of
  itself (lower = the host directory, upper = a tmpfs). The mounts live in a private
  mount namespace, the one mechanism this layer cannot avoid without changing the
  host's own view; the namespaces layer includes that namespace as well.

Comparing each layer with ``baremetal`` and with a full runtime (docker, oci) gives the
waterfall of :mod:`isobench.analysis.layer_ladder`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from isobench.plan.cells import Cell
from isobench.plan.placement import PLACEMENT_KNOBS
from isobench.platforms import PLATFORMS
from isobench.platforms.baremetal import BareMetal, CgroupLaunched, cgroups_writable
from isobench.platforms.base import Availability
from isobench.platforms.hostmirror import cell_mounts
from isobench.study.model import Knobs, PlatformEntry

RESOURCE_KNOBS = ("cpus", "cpuset", "memory")
NAMESPACE_FLAGS = ("--pid", "--mount", "--uts", "--ipc", "--net", "--mount-proc")
OVERLAY_SCRATCH = Path("/run/isobench/layers/overlay")

# Mounts an overlay of every listed directory over itself, then execs the worker.
_OVERLAY_SCRIPT = """set -e
scratch=$1; shift
count=$1; shift
mount -t tmpfs -o mode=0700 isobench-overlay "$scratch"
i=0
while [ "$i" -lt "$count" ]; do
  lower=$1; shift
  mkdir -p "$scratch/$i/upper" "$scratch/$i/work"
  mount -t overlay isobench-overlay -o "lowerdir=$lower,upperdir=$scratch/$i/upper,workdir=$scratch/$i/work" "$lower"
  i=$((i + 1))
done
exec "$@"
"""


class LayerPlatform(BareMetal):
    """A bare-metal cell (own cgroup) with one mechanism added; subclasses name which."""

    mechanism: ClassVar[str]
    #: the resource knob this layer is about (cgroup layers), else None
    resource_knob: ClassVar[str | None] = None
    startup_estimate_s = 0.3

    def default_display(self) -> str:
        return self.name

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        super().validate_entry(entry)
        if entry.options:
            raise ValueError(f"options: {cls.name} takes no options (fix: remove `options`)")
        # Study-level knobs are checked per cell combination by validate_knobs.
        if cls.resource_knob and cls.resource_knob not in entry.knobs:
            raise ValueError(f"knobs.{cls.resource_knob}: {cls.name} needs the {cls.resource_knob} knob it "
                             f"applies (fix: add knobs: {{{cls.resource_knob}: ...}} to this entry)")

    @classmethod
    def validate_knobs(cls, knobs: dict[str, Any]) -> None:
        """Exactly one mechanism: refuse resource knobs other than this layer's own."""
        for knob in PLACEMENT_KNOBS:
            if knobs.get(knob) is not None:
                raise ValueError(f"knobs.{knob}: {cls.name} takes its one mechanism's knob directly "
                                 "(fix: give cpus or cpuset instead of placement knobs)")
        for knob in RESOURCE_KNOBS:
            if knobs.get(knob) is not None and knob != cls.resource_knob:
                raise ValueError(f"knobs.{knob}: {cls.name} adds only its own mechanism ({cls.mechanism}) "
                                 f"(fix: remove {knob} for this entry, or use baremetal/docker for combinations)")
        if cls.resource_knob and knobs.get(cls.resource_knob) is None:
            raise ValueError(f"knobs.{cls.resource_knob}: {cls.name} needs it (fix: set it on the entry)")
        if cls.mechanism == "seccomp" and knobs.get("seccomp") == "unconfined":
            raise ValueError("knobs.seccomp: layer-seccomp with seccomp 'unconfined' applies nothing "
                             "(fix: drop the knob, or use baremetal)")
        super().validate_knobs(knobs)

    @classmethod
    def check(cls) -> Availability:
        why = cgroups_writable()
        if why:
            return Availability(False, f"needs a cgroup of its own: {why}")
        return Availability(True, "")

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "mechanism": self.mechanism}

    # -- what each layer changes: BareMetal's hooks (wrap, installer) -------------------
    def cell_knobs(self, cell: Cell) -> Knobs:
        """The study's knobs as given (no layout cpuset): exactly this layer's one mechanism."""
        self.validate_knobs(cell.knobs)
        return Knobs(**cell.knobs)

    def collect(self, launched: CgroupLaunched) -> dict[str, Any]:  # type: ignore[override]
        return {**super().collect(launched), "layer": self.mechanism}


@PLATFORMS.register("layer-namespaces")
class NamespacesLayer(LayerPlatform):
    description = "layer ladder: a host process in new pid, mount, uts, ipc and net namespaces only"
    mechanism = "namespaces"
    knobs = frozenset({"threads", "seccomp"})

    @classmethod
    def check(cls) -> Availability:
        if shutil.which("unshare") is None:
            return Availability(False, "unshare (util-linux) is not installed")
        return super().check()

    def wrap(self, argv: list[str]) -> list[str]:
        return ["unshare", "--fork", "--kill-child", *NAMESPACE_FLAGS, "--", *argv]


@PLATFORMS.register("layer-cpu-quota")
class CpuQuotaLayer(LayerPlatform):
    description = "layer ladder: a host process under a CFS CPU quota only (knob cpus)"
    mechanism = "cpu-quota"
    resource_knob = "cpus"
    knobs = frozenset({"threads", "cpus", "seccomp"})


@PLATFORMS.register("layer-cpuset")
class CpusetLayer(LayerPlatform):
    description = "layer ladder: a host process pinned by a cpuset cgroup only (knob cpuset)"
    mechanism = "cpuset"
    resource_knob = "cpuset"
    knobs = frozenset({"threads", "cpuset", "seccomp"})


@PLATFORMS.register("layer-memory")
class MemoryLayer(LayerPlatform):
    description = "layer ladder: a host process under a memory-cgroup limit only (knob memory)"
    mechanism = "memory"
    resource_knob = "memory"
    knobs = frozenset({"threads", "memory", "seccomp"})


@PLATFORMS.register("layer-seccomp")
class SeccompLayer(LayerPlatform):
    description = "layer ladder: a host process under Docker's own default seccomp filter only"
    mechanism = "seccomp"
    knobs = frozenset({"threads", "seccomp"})
    startup_estimate_s = 0.3

    @classmethod
    def check(cls) -> Availability:
        from isobench.platforms.docker import engine_problem

        problem = engine_problem()
        if problem:
            return Availability(False, f"Docker's default filter is read from a Docker container: {problem}")
        if os.geteuid() != 0:
            return Availability(False, "reading a container's seccomp filter needs root")
        base = super().check()
        if base.ok:
            base.notes.append("the BPF program Docker's engine applies, read from a live container")
        return base

    def prepare(self) -> None:
        from isobench.liveness import runner_tag
        from isobench.platforms.docker import LABEL_RUNNER, Docker
        from isobench.platforms.seccomp_bpf import docker_default_filter

        docker_platform = Docker(PlatformEntry(name="docker"))
        docker_platform.prepare()
        self.filter_path = docker_default_filter(docker_platform.image(), (LABEL_RUNNER, runner_tag()))

    def installer(self) -> Any:
        from isobench.platforms.seccomp_bpf import FilterInstaller

        if not hasattr(self, "filter_path"):
            self.prepare()
        return FilterInstaller(self.filter_path.read_bytes())

    def fingerprint(self) -> dict[str, Any]:
        path = getattr(self, "filter_path", None)
        return {**super().fingerprint(), "filter": str(path) if path else None}


@PLATFORMS.register("layer-overlay")
class OverlayLayer(LayerPlatform):
    description = "layer ladder: a host process reading its files through overlay mounts of themselves"
    mechanism = "overlay"
    knobs = frozenset({"threads", "seccomp"})

    @classmethod
    def check(cls) -> Availability:
        if shutil.which("unshare") is None:
            return Availability(False, "unshare (util-linux) is not installed")
        if "overlay" not in Path("/proc/filesystems").read_text() and \
                subprocess.run(["modprobe", "overlay"], capture_output=True).returncode != 0:
            return Availability(False, "the kernel has no overlay filesystem")
        base = super().check()
        if base.ok:
            base.notes.append("the overlay mounts live in a private mount namespace (no other namespace)")
        return base

    def wrap(self, argv: list[str]) -> list[str]:
        OVERLAY_SCRATCH.mkdir(parents=True, exist_ok=True)
        lowers = cell_mounts()
        return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _OVERLAY_SCRIPT,
                "isobench-overlay", str(OVERLAY_SCRATCH), str(len(lowers)), *lowers, *argv]

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "overlay_lowers": cell_mounts(), "overlay_upper": "tmpfs"}
