"""podman: a rootful Podman container (no daemon), running the same host-mirror image.

Podman is the docker platform with another engine command (``DockerBase.engine``)
(``docker run`` and ``podman run`` agree on every flag isobench uses) with two
differences this host needs: the open-file and process limits are passed explicitly
(Podman's defaults raise RLIMIT_NOFILE and RLIMIT_NPROC above what the runtime may set
here, and the container would not start), and the OCI runtime defaults to
runc, because crun refuses hosts with a hybrid cgroup layout.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
from typing import Any

from isobench.hostinfo import cgroup_layout, tool_version
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import ALL_KNOBS, Availability, Launched
from isobench.platforms.docker import DockerBase
from isobench.runtime_versions import tool_short_version
from isobench.study.model import PlatformEntry


def podman(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=check)


def podman_problem() -> str | None:
    """None when rootful Podman can run containers here, else why not."""
    if shutil.which("podman") is None:
        return "podman is not installed (apt-get install podman)"
    try:
        out = podman("info", "--format", "{{.Host.CgroupsVersion}}", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "`podman info` did not answer in 30 s"
    if out.returncode != 0:
        return f"`podman info` failed: {out.stderr.strip()[:200]}"
    return None


#: conmon, which starts the runtime, holds RLIMIT_NPROC at this on the hosts seen so far
CONMON_NPROC = 32768


def runner_ulimits() -> list[str]:
    """Open-file and process limits the runtime may set: Podman's defaults exceed them here."""
    args = []
    for name, limit, cap in (("nofile", resource.RLIMIT_NOFILE, None),
                             ("nproc", resource.RLIMIT_NPROC, CONMON_NPROC)):
        soft, hard = resource.getrlimit(limit)
        values = [v if v != resource.RLIM_INFINITY else (cap or -1) for v in (soft, hard)]
        if cap:
            values = [min(v, cap) if v >= 0 else cap for v in values]
        args += ["--ulimit", f"{name}={values[0]}:{values[1]}"]
    return args


@PLATFORMS.register("podman")
class Podman(DockerBase):
    description = "a rootful Podman container (runc by default), host-mirror image, no network"
    engine = "podman"
    mirror_repository = "localhost/isobench-hostmirror"
    label_template = '{{{{index .Labels "{}"}}}}'
    remove_args = ("rm", "-f", "-t", "0")
    container_noun = "podman container"
    knobs = ALL_KNOBS
    startup_estimate_s = 0.8

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        super().validate_entry(entry)
        if entry.image is not None:
            raise ValueError("image: podman runs the host mirror only here (fix: remove `image`)")
        if entry.runtime not in (None, "runc", "crun"):
            raise ValueError(f"runtime: {entry.runtime!r} (fix: use runc or crun)")

    @classmethod
    def check(cls) -> Availability:
        problem = podman_problem()
        return Availability(problem is None, problem or "",
                            notes=[] if problem else ["rootful; open-file and process limits passed explicitly"])

    def availability(self) -> Availability:
        base = self.check()
        if base.ok and self.runtime() == "crun" and cgroup_layout()["mode"] == "hybrid":
            return Availability(False, "crun refuses hybrid cgroup hosts under Podman (use runtime: runc)")
        return base

    @classmethod
    def engine_problem(cls) -> str | None:
        return podman_problem()

    def fingerprint(self) -> dict[str, Any]:
        return {"runtime": self.runtime(), "image": self.image(), "podman": tool_version(["podman", "--version"])}

    def find_versions(self) -> dict[str, str]:
        found = {"podman": tool_short_version("podman"), self.runtime(): tool_short_version(self.runtime())}
        return {name: version for name, version in found.items() if version}

    def engine_run_options(self) -> list[str]:
        return runner_ulimits()

    def engine_pids(self, container_id: str) -> list[int]:
        return []  # no daemon: conmon is not counted as engine

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        if cell.network:
            raise RuntimeError("serving cells need a network; isobench runs podman cells without one")
        return super().launch(cell, argv, stderr)
