"""docker (runc through dockerd) and gvisor (runsc through dockerd).

Cells run from the host-mirror image unless the entry names a user image that has
Python, torch and isobench inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, ClassVar

from isobench.hostinfo import tool_version
from isobench.liveness import runner_tag, tag_is_stale
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import (
    ALL_KNOBS,
    Availability,
    Launched,
    Platform,
    kill_process_group,
)
from isobench.platforms.datapath import copy_into, mount_args
from isobench.platforms.dockercli import docker
from isobench.platforms.engineconfig import daemon_json_path, merge_runtime, reload_engines
from isobench.platforms.hostmirror import (
    cell_mounts,
    container_env,
    data_root,
    skeleton_digest,
    skeleton_tar,
)
from isobench.platforms.runsc import (
    DEFAULT_PLATFORM,
    docker_runtime_name,
    engine_runtime,
    platform_problem,
    runsc_platform,
    runtime_path_problem,
)
from isobench.runtime_versions import tool_short_version
from isobench.study.model import Knobs, PlatformEntry
from isobench.target import ProbeTarget, cgroups_of_pid, docker_engine_pids, poll

LABEL_RUNNER = "isobench.runner"
#: the user-defined bridge serving cells join (dockerd here runs with --bridge=none: no docker0)
SERVE_NETWORK = "isobench-net"
#: the suffix of the Docker runtime name that runs a gvisor entry's serving cells (network passthrough)
SERVING_SUFFIX = "-net"
NETWORK_OPTIONS = ("bridge", "host")
ENGINE_HINT = "start one with `./isobench.sh setup` or `dockerd --iptables=false --bridge=none &`"


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed (apt-get install docker.io)"
    try:
        out = docker("version", "--format", "{{.Server.Version}}", timeout=10, check=False)
    except subprocess.TimeoutExpired:
        return f"the Docker engine did not answer in 10 s; {ENGINE_HINT}"
    if out.returncode != 0:
        return f"no Docker engine answers; {ENGINE_HINT}"
    return None


def engine_runtimes() -> dict[str, Any]:
    out = docker("info", "--format", "{{json .Runtimes}}", timeout=20, check=False)
    try:
        return json.loads(out.stdout) if out.returncode == 0 else {}
    except json.JSONDecodeError:
        return {}


def _engine_has(runtimes: dict[str, Any], name: str, path: str, args: list[str]) -> bool:
    """The engine runs ``name`` as asked: the same binary with the same args (a name the engine
    knows with another path would run another build than the one the results name)."""
    return engine_runtime(runtimes, name) == (path, args)


def register_runtime(name: str, path: str, args: list[str]) -> None:
    """Merge a runtime into daemon.json (see :mod:`.engineconfig`) and have the engine that
    reads that file reload it (SIGHUP, no restart); say on stderr what changed."""
    config = daemon_json_path()
    change = merge_runtime(config, name, path, args)
    if change:
        sys.stderr.write(f"isobench: {change}\n")
    if _engine_has(engine_runtimes(), name, path, args):
        return
    pids = reload_engines(config)
    if not pids:
        raise RuntimeError(f"no running dockerd reads {config} (its --config-file differs): add the {name} "
                           "runtime to that engine's configuration, or restart dockerd")
    sys.stderr.write(f"isobench: sent SIGHUP to dockerd {', '.join(map(str, pids))} to reload {config}\n")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _engine_has(engine_runtimes(), name, path, args):
            return
        time.sleep(0.2)
    raise RuntimeError(f"dockerd did not pick up the {name} runtime from {config}; restart dockerd")


class DockerBase(Platform):
    """A container engine with Docker's command line (docker, podman): subclasses name the engine."""
    start_line = True

    #: the engine's command: every call to the engine goes through it (see ``engine_cmd``)
    engine: ClassVar[str] = "docker"
    #: the repository the host-mirror image is imported as
    mirror_repository: ClassVar[str] = "isobench-hostmirror"
    #: ``ps --format`` template of a container's runner label ({} is the label)
    label_template: ClassVar[str] = '{{{{.Label "{}"}}}}'
    #: the arguments that remove a cell's container at once
    remove_args: ClassVar[tuple[str, ...]] = ("rm", "-f")
    #: what ``sweep_stale`` calls what it removed
    container_noun: ClassVar[str] = "container"
    uses_engine = True
    runtime_default = "runc"
    knobs = ALL_KNOBS | {"data_mount"}
    startup_estimate_s = 0.6

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        unknown = set(entry.options) - {"python", "shm_size", "network"}
        if unknown:
            raise ValueError(f"options: unknown option(s) {sorted(unknown)} "
                             "(fix: use `python` (interpreter in a user image), `shm_size` or `network`)")
        if entry.options.get("network", "bridge") not in NETWORK_OPTIONS:
            raise ValueError(f"options.network: {entry.options['network']!r} is not one of {NETWORK_OPTIONS} "
                             "(fix: `bridge`, isobench's own bridge network, or `host`)")

    @classmethod
    def engine_cmd(cls, *args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([cls.engine, *args], capture_output=True, text=True, timeout=timeout, check=check)

    @classmethod
    def engine_problem(cls) -> str | None:
        """None when the engine can run containers here, else why not."""
        return engine_problem()

    def runtime(self) -> str:
        return self.entry.runtime or self.runtime_default

    def runs_own_kernel(self) -> bool:
        return self.runtime().startswith("runsc")

    def default_display(self) -> str:
        return f"{self.name}/{self.runtime()}"

    @classmethod
    def check(cls) -> Availability:
        problem = cls.engine_problem()
        return Availability(problem is None, problem or "")

    def image(self) -> str:
        return self.entry.image or f"{self.mirror_repository}:{skeleton_digest((str(data_root()),))}"

    def engine_server(self) -> dict[str, Any]:
        """The engine's ``version`` answer for its server side ({} when it gives none): asked once,
        as the fingerprint and the versions both read it (an engine that gave none is asked again)."""
        if not self.__dict__.get("_server"):
            out = docker("version", "--format", "{{json .}}", check=False)
            try:
                server = json.loads(out.stdout).get("Server") or {}
            except (json.JSONDecodeError, AttributeError):
                server = {}
            self.__dict__["_server"] = server if isinstance(server, dict) else {}
        return self.__dict__["_server"]

    def fingerprint(self) -> dict[str, Any]:
        server = self.engine_server()
        info: dict[str, Any] = {"runtime": self.runtime(), "image": self.image()}
        if server:
            info["engine"] = server.get("Version")
            info["components"] = {c.get("Name"): c.get("Version") for c in server.get("Components") or []}
        return info

    def find_versions(self) -> dict[str, str]:
        server = self.engine_server()
        components = {str(c.get("Name")).lower(): str(c.get("Version")) for c in server.get("Components") or []}
        found = {"docker": server.get("Version"), "containerd": components.get("containerd"),
                 **self.runtime_versions(components)}
        return {name: str(version) for name, version in found.items() if version}

    def runtime_versions(self, components: dict[str, str]) -> dict[str, str | None]:
        """The OCI runtime's own entry in ``versions`` (``components``: what the engine names)."""
        runtime = self.runtime()
        # The engine names the runc it ships with; any other registered runtime answers for itself.
        return {runtime: components.get("runc") if runtime == "runc" else tool_short_version(runtime)}

    def prepare(self) -> None:
        if self.entry.image:
            if self.engine_cmd("image", "inspect", self.entry.image, check=False).returncode != 0:
                raise RuntimeError(f"image {self.entry.image!r} is not in the engine; build or load it first")
            return
        image = self.image()
        if self.engine_cmd("image", "inspect", image, check=False).returncode != 0:
            self.engine_cmd("import", str(skeleton_tar((str(data_root()),))), image, timeout=300)

    def engine_run_options(self) -> list[str]:
        """Options this engine needs on every ``run`` besides the cell's own."""
        return []

    def engine_pids(self, container_id: str) -> list[int]:
        """The engine's processes serving a container, for the probes' engine column."""
        return docker_engine_pids(container_id)

    def _run_args(self, cell: Cell, name: str) -> list[str]:
        knobs = Knobs(**cell.effective_knobs())
        args = ["run", *self.engine_run_options(), "--name", name, "--label", f"{LABEL_RUNNER}={runner_tag()}",
                "--label", f"isobench.cell={cell.cell_id}", "--network", self._docker_network(cell),
                "--runtime", self.cell_runtime(cell), "--workdir", "/tmp"]
        if self.holds_at_start_line(cell):
            args.append("--interactive")  # the start line's go arrives on stdin
        mounts = [str(data_root()), *cell.mounts] if self.entry.image else cell_mounts(cell.mounts)
        mounts, data_args = mount_args(knobs.data_mount, cell.data_dir, mounts, self.image())
        for path in mounts:
            args += ["-v", f"{path}:{path}:ro"]
        args += data_args
        if cell.artifacts_dir:  # trained models leave the container as host files (a consumer's: read-only)
            from isobench.platforms.artifact_dirs import artifacts_mode

            args += ["-v", f"{cell.artifacts_dir}:{cell.artifacts_dir}:{artifacts_mode(cell)}"]
        env = {"PYTHONUNBUFFERED": "1"} if self.entry.image else container_env()
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        if knobs.cpus is not None:
            args += ["--cpus", str(knobs.cpus)]
        if knobs.cpuset is not None:
            args += ["--cpuset-cpus", knobs.cpuset]
        if knobs.numa_node is not None:
            args += ["--cpuset-mems", str(knobs.numa_node)]
        if knobs.memory is not None:
            # Same limit on swap as the bare-metal cgroup gets: no swap beyond the limit.
            args += ["--memory", str(knobs.memory_bytes()), "--memory-swap", str(knobs.memory_bytes())]
        if knobs.seccomp == "unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        if "shm_size" in self.entry.options:
            args += ["--shm-size", str(self.entry.options["shm_size"])]
        return args

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        name = f"isobench-{runner_tag()}-{cell.seq}"
        if self.entry.image:
            argv = [self.entry.options.get("python", "python3"), *argv[1:]]
        cmd = [self.engine, *self._run_args(cell, name), self.image(), *argv]
        if cell.knobs.get("data_mount") == "copy" and cell.data_dir:
            cmd = copy_into(cmd, name, cell.data_dir)  # before the clock: only reads pay for the layer
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=self.cell_stdin(cell), stdout=subprocess.PIPE, stderr=stderr,
                                start_new_session=True)
        return Launched(proc=proc, name=name, started=started)

    def probe_target(self, launched: Launched) -> ProbeTarget:
        """The container's host pid and cgroups, once the engine has started it (polled briefly)."""
        def running() -> tuple[str, int] | None:
            out = self.engine_cmd("inspect", "--format", "{{.Id}} {{.State.Pid}}", launched.name, check=False)
            container_id, _, pid = out.stdout.strip().partition(" ")
            return (container_id, int(pid)) if out.returncode == 0 and pid not in ("", "0") else None

        found = poll(running, lambda: launched.proc.poll() is None)
        if found is None:  # the cell ended (or failed) before it was ever seen running
            return ProbeTarget(platform=self.name, root_pid=None)
        container_id, pid = found
        return ProbeTarget(platform=self.name, root_pid=pid, cgroups=cgroups_of_pid(pid),
                           container_id=container_id, engine_pids=self.engine_pids(container_id))

    def network_mode(self, cell: Cell) -> str:
        if not cell.network:
            return "none"
        if self.runtime().startswith("runsc") and self.cell_runtime(cell) == self.runtime():
            raise RuntimeError("a serving cell needs a network, and this runsc runtime is not one isobench "
                               "registers (a gvisor entry serves through runsc's network passthrough); "
                               "serve on a gvisor entry, docker/runc, oci or baremetal")
        return "host" if self.entry.options.get("network") == "host" else f"bridge:{SERVE_NETWORK}"

    def cell_runtime(self, cell: Cell) -> str:
        """The engine's runtime name for this cell: the entry's, unless a platform needs another
        registration for some cells (gVisor's serving cells)."""
        return self.runtime()

    def _docker_network(self, cell: Cell) -> str:
        mode = self.network_mode(cell)
        if mode.startswith("bridge:") and docker("network", "inspect", SERVE_NETWORK, check=False).returncode:
            # Kept between studies like the host-mirror image; with --iptables=false nothing is
            # NATed: the host reaches the container's bridge address directly, nothing else does.
            created = docker("network", "create", "--driver", "bridge", "--label", "isobench.network=serve",
                             SERVE_NETWORK, check=False)
            if created.returncode and "already exists" not in created.stderr:
                raise RuntimeError(f"cannot create the docker network {SERVE_NETWORK}: {created.stderr.strip()}")
        return mode.removeprefix("bridge:")

    def service_host(self, launched: Launched) -> str:
        if self.entry.options.get("network") == "host":
            return "127.0.0.1"
        out = docker("inspect", "--format", f'{{{{(index .NetworkSettings.Networks "{SERVE_NETWORK}").IPAddress}}}}',
                     launched.name, check=False)
        address = out.stdout.strip()
        if out.returncode or not address:
            raise RuntimeError(f"container {launched.name} has no address on {SERVE_NETWORK}: {out.stderr.strip()}")
        return address

    def collect(self, launched: Launched) -> dict[str, Any]:
        out = self.engine_cmd("inspect", "--format", "{{json .}}", launched.name, check=False)
        if out.returncode != 0:
            return {}
        data = json.loads(out.stdout)
        if isinstance(data, list):  # podman answers a list of one
            data = (data or [{}])[0]
        state = data.get("State", {})
        host = data.get("HostConfig", {})
        # What the engine applied, for platforms whose /proc inside cannot show it (gVisor).
        # Podman names the OCI runtime at the top level (its HostConfig.Runtime is always "oci").
        return {"container_id": data.get("Id"), "oom_killed": state.get("OOMKilled"),
                "container_exit_code": state.get("ExitCode"), "runtime": data.get("OCIRuntime") or host.get("Runtime"),
                "network": host.get("NetworkMode"),
                "applied": {"nano_cpus": host.get("NanoCpus"), "cpuset_cpus": host.get("CpusetCpus"),
                            "memory": host.get("Memory"), "security_opt": host.get("SecurityOpt")}}

    def cleanup_cell(self, launched: Launched) -> None:
        self.engine_cmd(*self.remove_args, launched.name, check=False)
        kill_process_group(launched.proc)

    @classmethod
    def sweep_stale(cls) -> list[str]:
        if cls.engine_problem():
            return []
        out = cls.engine_cmd("ps", "-a", "--filter", f"label={LABEL_RUNNER}",
                             "--format", "{{.Names}} " + cls.label_template.format(LABEL_RUNNER), check=False)
        removed = []
        for line in out.stdout.splitlines():
            name, _, tag = line.partition(" ")
            if tag and tag_is_stale(tag):
                with contextlib.suppress(subprocess.SubprocessError):
                    cls.engine_cmd(*cls.remove_args, name, check=False)
                removed.append(f"{cls.container_noun} {name}")
        return removed


@PLATFORMS.register("docker")
class Docker(DockerBase):
    description = "a Docker container (runc by default; `runtime:` names another registered one)"


@PLATFORMS.register("gvisor")
class GVisor(DockerBase):
    description = ("a gVisor sandbox: runsc as a Docker runtime, one per runsc platform (`platform:`, systrap "
                   "by default) and build (`runtime_path:`); serving cells use runsc's network passthrough")
    runtime_default = "runsc"
    startup_estimate_s = 1.6
    takes_runsc_platform = True
    takes_runtime_path = True
    #: the runsc platform the engine starts this entry's sandboxes on, read once (``_engine_platform``)
    _runsc_platform: str | None = None

    @classmethod
    def design_caveat(cls, entry: PlatformEntry, cores_per_cell: int) -> str | None:
        # systrap hands each trapped system call from the sandbox's stub to its Sentry, and the two spin
        # waiting for each other: on one core they cannot both run. ptrace does not spin, so its cost
        # barely moves with the cores. The measured figures are in docs/platforms.md, not here: they
        # belong to one host and one runsc build.
        if (entry.platform or "systrap") != "systrap" or cores_per_cell >= 2:
            return None
        return (f"each {entry.key} cell has {cores_per_cell} core, and gVisor's systrap needs two to hand a "
                "system call to its Sentry without waiting (a system call costs several times more on one core "
                "than on two: docs/platforms.md): its result is gVisor on a one-core sandbox; for gVisor on a "
                "larger host use schedule: sequential with cell_cores: all")

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        super().validate_entry(entry)
        if entry.runtime not in (None, "runsc"):
            raise ValueError("runtime: gvisor always runs runsc (fix: remove `runtime`, or use docker)")

    def runsc_platform(self) -> str:
        """The runsc platform this entry asks for: gVisor's own default unless it names one."""
        return self.entry.platform or DEFAULT_PLATFORM

    def runsc_binary(self) -> str:
        return self.entry.runtime_path or shutil.which("runsc") or "/usr/bin/runsc"

    def runtime_args(self, serving: bool = False) -> list[str]:
        # The platform is always passed, so the binary's built-in default (ptrace in 2022's builds)
        # never decides. runsc's own network stack (--network=sandbox) refuses the namespace Docker
        # gives it here ("cannot run with network enabled in root network namespace"): a cell with
        # no network gets none, and a serving cell gets runsc's network passthrough (--network=host),
        # its sandbox reaching the network namespace Docker made through the host kernel's stack.
        network = "--network=host" if serving else "--network=none"
        return [network, f"--platform={self.runsc_platform()}"]

    def runtime(self) -> str:
        """The Docker runtime name: one per (build, platform), see platforms/runsc.py."""
        return docker_runtime_name(self.runsc_platform(), self.entry.runtime_path)

    def cell_runtime(self, cell: Cell) -> str:
        # A serving cell's sandbox needs a network: the same build and platform, registered with
        # network passthrough under its own name (cells' results record it as runsc_network).
        return self.runtime() + SERVING_SUFFIX if cell.network else self.runtime()

    def default_display(self) -> str:
        return "gvisor/runsc"  # the build and its platform are in every result's versions

    @classmethod
    def check(cls) -> Availability:
        if shutil.which("runsc") is None:
            return Availability(False, "runsc is not installed (apt-get install runsc)")
        problem = engine_problem()
        return Availability(problem is None, problem or "")

    def availability(self) -> Availability:
        runsc = self.runsc_binary()
        if self.entry.runtime_path is None and shutil.which("runsc") is None:
            return Availability(False, "runsc is not installed (./isobench.sh setup, or apt-get install runsc)")
        if self.entry.runtime_path is not None:
            problem = runtime_path_problem(runsc)
            if problem is None and "runsc" not in (tool_version([runsc, "--version"]) or ""):
                problem = "does not answer `--version` as runsc does"
            if problem:
                return Availability(False, f"runtime_path {runsc} {problem}")
        problem = engine_problem() or platform_problem(runsc, self.runsc_platform())
        if problem:
            if self.runsc_platform() == "systrap" and "no systrap" in problem:
                problem += ("; ./isobench.sh setup installs the backports runsc that has it, or write "
                            "`platform: ptrace` for this build")
            elif self.runsc_platform() == "kvm" and problem.startswith("KVM"):
                problem += "; use `platform: systrap` (gVisor's default) here"
            return Availability(False, problem)
        config = daemon_json_path()
        if not _engine_has(engine_runtimes(), self.runtime(), runsc, self.runtime_args()) \
                and not os.access(config.parent, os.W_OK) and config.parent.exists():
            return Availability(False, f"{self.runtime()} is not a Docker runtime and {config} is not writable")
        return Availability(True, "", notes=[
            "knobs apply to the sandbox's cgroup on the host; gVisor's own /proc does not show them",
            f"runsc platform {self.runsc_platform()} (Docker runtime {self.runtime()}, {runsc})"])

    def fingerprint(self) -> dict[str, Any]:
        return {**super().fingerprint(), "runsc": tool_version([self.runsc_binary(), "--version"]),
                "runsc_binary": self.runsc_binary(), "runsc_platform": self._engine_platform()}

    def _engine_platform(self) -> str:
        """The platform the engine starts this entry's sandboxes on, as its registration says (read
        once); what the entry asked for while the engine does not know the runtime yet."""
        if self._runsc_platform is None:
            found = engine_runtime(engine_runtimes(), self.runtime())
            if found is None:
                return runsc_platform(self.runtime_args(), self.runsc_binary())
            self._runsc_platform = runsc_platform(found[1], found[0])
        return self._runsc_platform

    def runtime_versions(self, components: dict[str, str]) -> dict[str, str | None]:
        # The build the engine runs for this name, and the platform: "2024-07-29 systrap".
        found = engine_runtime(engine_runtimes(), self.runtime())
        version = tool_short_version("runsc", found[0] if found else self.runsc_binary())
        return {"runsc": f"{version} {self._engine_platform()}" if version else None}

    def prepare(self) -> None:
        register_runtime(self.runtime(), self.runsc_binary(), self.runtime_args())
        register_runtime(self.runtime() + SERVING_SUFFIX, self.runsc_binary(), self.runtime_args(serving=True))
        super().prepare()

    def collect(self, launched: Launched) -> dict[str, Any]:
        info = super().collect(launched)
        info["runsc_platform"] = self._engine_platform()  # after the cell, outside its measured window
        if str(info.get("runtime") or "").endswith(SERVING_SUFFIX):
            info["runsc_network"] = "passthrough"  # the host kernel's network stack, not gVisor's netstack
        return info
