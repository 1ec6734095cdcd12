"""podman: a rootful Podman container (no daemon), running the same host-mirror image.

Podman builds its own command line from the same arguments as the docker platform
(``docker run`` and ``podman run`` agree on every flag isobench uses) with two
differences this host needs: the open-file and process limits are passed explicitly
(Podman's defaults raise RLIMIT_NOFILE and RLIMIT_NPROC above what the runtime may set
here, and the container would not start), and the OCI runtime defaults to
runc, because crun refuses hosts with a hybrid cgroup layout.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import subprocess
import time
from typing import Any

from isobench.hostinfo import cgroup_layout, tool_version
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import (
    ALL_KNOBS,
    Availability,
    Launched,
    kill_process_group,
    runner_tag,
    tag_is_stale,
)
from isobench.platforms.docker import LABEL_RUNNER, DockerBase
from isobench.platforms.hostmirror import data_root, skeleton_digest, skeleton_tar
from isobench.probes.base import ProbeTarget
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

    def image(self) -> str:
        return f"localhost/isobench-hostmirror:{skeleton_digest((str(data_root()),))}"

    def fingerprint(self) -> dict[str, Any]:
        return {"runtime": self.runtime(), "image": self.image(), "podman": tool_version(["podman", "--version"])}

    def prepare(self) -> None:
        if podman("image", "exists", self.image(), check=False).returncode != 0:
            podman("import", str(skeleton_tar((str(data_root()),))), self.image(), timeout=300)

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        if cell.network:
            raise RuntimeError("serving cells need a network; isobench runs podman cells without one")
        name = f"isobench-{runner_tag()}-{cell.seq}"
        args = self._run_args(cell, name)
        cmd = ["podman", args[0], *runner_ulimits(), *args[1:], self.image(), *argv]
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                start_new_session=True)
        return Launched(proc=proc, name=name, started=started)

    def probe_target(self, launched: Launched) -> ProbeTarget:
        from isobench.probes.target import cgroups_of_pid, poll

        def running() -> tuple[str, int] | None:
            out = podman("inspect", "--format", "{{.Id}} {{.State.Pid}}", launched.name, check=False)
            container_id, _, pid = out.stdout.strip().partition(" ")
            return (container_id, int(pid)) if out.returncode == 0 and pid not in ("", "0") else None

        found = poll(running, lambda: launched.proc.poll() is None)
        if found is None:
            return ProbeTarget(platform=self.name, root_pid=None)
        container_id, pid = found
        return ProbeTarget(platform=self.name, root_pid=pid, cgroups=cgroups_of_pid(pid), container_id=container_id)

    def collect(self, launched: Launched) -> dict[str, Any]:
        out = podman("inspect", "--format", "json", launched.name, check=False)
        if out.returncode != 0:
            return {}
        data = (json.loads(out.stdout) or [{}])[0]
        state, host = data.get("State", {}), data.get("HostConfig", {})
        return {"container_id": data.get("Id"), "oom_killed": state.get("OOMKilled"),
                "container_exit_code": state.get("ExitCode"), "runtime": data.get("OCIRuntime"),
                "applied": {"nano_cpus": host.get("NanoCpus"), "cpuset_cpus": host.get("CpusetCpus"),
                            "memory": host.get("Memory")}}

    def cleanup_cell(self, launched: Launched) -> None:
        podman("rm", "-f", "-t", "0", launched.name, check=False)
        kill_process_group(launched.proc)

    @classmethod
    def sweep_stale(cls) -> list[str]:
        if podman_problem():
            return []
        out = podman("ps", "-a", "--filter", f"label={LABEL_RUNNER}",
                     "--format", f'{{{{.Names}}}} {{{{index .Labels "{LABEL_RUNNER}"}}}}', check=False)
        removed = []
        for line in out.stdout.splitlines():
            name, _, tag = line.partition(" ")
            if tag and tag_is_stale(tag):
                with contextlib.suppress(subprocess.SubprocessError):
                    podman("rm", "-f", "-t", "0", name, check=False)
                removed.append(f"podman container {name}")
        return removed
