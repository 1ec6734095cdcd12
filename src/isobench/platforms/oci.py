"""oci: an OCI runtime (runc, crun, runsc) driven directly with a generated bundle, no daemon."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isobench.hostinfo import cgroup_layout, tool_version
from isobench.liveness import runner_tag, tag_is_stale
from isobench.plan.cells import Cell
from isobench.platforms import PLATFORMS
from isobench.platforms.base import (
    Availability,
    Launched,
    Platform,
    kill_process_group,
)
from isobench.platforms.cgroups import CGROUP_ROOT, CellCgroup, prune_empty
from isobench.platforms.gpus import LD_SO_CACHE, GpuPassthrough, gpu_passthrough, gpu_selection
from isobench.platforms.hostmirror import build_skeleton, cell_mounts, container_env, data_root
from isobench.platforms.runsc import runsc_platform, runtime_path_problem
from isobench.platforms.seccomp import default_profile
from isobench.runtime_versions import tool_short_version
from isobench.study.model import Knobs, PlatformEntry
from isobench.target import ProbeTarget, cgroups_of_pid, launcher_pids, poll

RUNTIMES = ("runc", "crun", "runsc")
STATE_ROOT = Path("/run/isobench/oci")
CFS_PERIOD_US = 100_000
CAPABILITIES = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]
#: the options an oci entry takes
OPTIONS = frozenset({"gpus"})


def _needs_private_cgroup_view(runtime: str) -> bool:
    # crun refuses hybrid hosts (a controller-free cgroup2 mount beside v1): run it in a
    # private mount namespace where that mount is gone, leaving the host untouched.
    return runtime == "crun" and cgroup_layout()["mode"] == "hybrid"


def state_key(runtime: str, binary: str | None = None) -> str:
    """The runtime's state directory under STATE_ROOT: its name, or for another build (``runtime_path``)
    the name and a hash of the path, since two builds must not read each other's container state."""
    if binary is None:
        return runtime
    return f"{runtime}-{hashlib.sha256(os.path.abspath(binary).encode()).hexdigest()[:10]}"


def runtime_argv(runtime: str, *args: str, binary: str | None = None, serving: bool = False) -> list[str]:
    """The runtime's command line (``binary``: another build than the one on PATH). runsc gets no
    network, or for a serving cell its network passthrough: its own stack refuses the host's namespace."""
    root = str(STATE_ROOT / state_key(runtime, binary))
    if runtime == "runsc":
        return [binary or "runsc", f"--root={root}", f"--network={'host' if serving else 'none'}", *args]
    base = [binary or runtime, "--root", root, *args]
    if _needs_private_cgroup_view(runtime):
        unified = cgroup_layout()["cgroup2_mount"]
        quoted = " ".join(f"'{a}'" for a in base)
        return ["unshare", "-m", "sh", "-c", f"umount '{unified}' && exec {quoted}"]
    return base


def bundle_config(cell: Cell, argv: list[str], rootfs: Path, cgroups_path: str,
                  runtime: str, gpu: GpuPassthrough | None = None) -> dict[str, Any]:
    knobs = Knobs(**cell.effective_knobs())
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    ]
    for path in cell_mounts(cell.mounts):
        mounts.append({"destination": path, "type": "bind", "source": path,
                       "options": ["rbind", "ro", "nosuid", "nodev"]})
    if cell.artifacts_dir:  # trained models leave the container as host files (a consumer's: read-only)
        from isobench.platforms.artifact_dirs import artifacts_mode

        mounts.append({"destination": cell.artifacts_dir, "type": "bind", "source": cell.artifacts_dir,
                       "options": ["rbind", artifacts_mode(cell), "nosuid", "nodev"]})
    resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    env = container_env()
    if gpu is not None:  # as `docker run --gpus`: the driver's nodes, allowed, and its libraries found
        for directory in gpu.library_mounts:
            mounts.append({"destination": directory, "type": "bind", "source": directory,
                           "options": ["rbind", "ro", "nosuid", "nodev"]})
        if gpu.ld_so_cache:
            mounts.append({"destination": LD_SO_CACHE, "type": "bind", "source": LD_SO_CACHE,
                           "options": ["bind", "ro", "nosuid", "nodev"]})
        resources["devices"] += [{"allow": True, "type": "c", "major": d["major"], "minor": d["minor"],
                                  "access": "rwm"} for d in gpu.devices]
        if gpu.library_path:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(gpu.library_path)
        env.update(gpu.env)
    if knobs.cpus is not None or knobs.cpuset is not None:
        cpu: dict[str, Any] = {}
        if knobs.cpus is not None:
            cpu.update(quota=int(knobs.cpus * CFS_PERIOD_US), period=CFS_PERIOD_US)
        if knobs.cpuset is not None:
            cpu["cpus"] = knobs.cpuset
            if knobs.numa_node is not None:
                cpu["mems"] = str(knobs.numa_node)
        resources["cpu"] = cpu
    if knobs.memory is not None:
        resources["memory"] = {"limit": knobs.memory_bytes(), "swap": knobs.memory_bytes()}
    linux: dict[str, Any] = {
        "resources": resources,
        "cgroupsPath": cgroups_path,
        # A serving cell shares the host's network (no bridge without a daemon); others get none.
        "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")
                       if not (t == "network" and cell.network)],
        "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                        "/proc/scsi"],
        "readonlyPaths": ["/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                          "/proc/sysrq-trigger"],
    }
    if gpu is not None:
        linux["devices"] = gpu.devices
    if knobs.seccomp != "unconfined":
        linux["seccomp"] = default_profile()
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": argv,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/tmp",
            "capabilities": {k: CAPABILITIES for k in ("bounding", "effective", "permitted")},
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "hostname": "isobench",
        "mounts": mounts,
        "annotations": {"isobench.runner": runner_tag(), "isobench.cell": cell.cell_id,
                        "isobench.runtime": runtime},
        "linux": linux,
    }


@dataclass
class OciLaunched(Launched):
    """A container the runtime runs in the foreground, and the bundle made for it."""

    bundle: Path
    runtime: str
    #: another build of the runtime (the entry's ``runtime_path``), None for the one on PATH
    binary: str | None = None
    #: a serving cell: runsc ran it with network passthrough
    serving: bool = False


@PLATFORMS.register("oci")
class Oci(Platform):
    description = ("an OCI runtime run directly on a generated bundle (runtime: runc, crun or runsc; "
                   "runtime_path: another build of it)")
    start_line = True
    takes_runtime_path = True

    @classmethod
    def validate_entry(cls, entry: PlatformEntry) -> None:
        if entry.runtime not in (None, *RUNTIMES):
            raise ValueError(f"runtime: {entry.runtime!r} is not an OCI runtime isobench drives "
                             f"(fix: use one of {', '.join(RUNTIMES)})")
        if entry.image is not None:
            raise ValueError("image: oci runs the host mirror only (fix: use the docker platform for images)")
        unknown = set(entry.options) - OPTIONS
        if unknown:
            raise ValueError(f"options: oci takes no option {sorted(unknown)[0]!r} "
                             f"(fix: use {', '.join(sorted(OPTIONS))})")
        if "gpus" in entry.options:
            gpu_selection(entry.options["gpus"])
            if entry.runtime == "runsc":
                raise ValueError("options.gpus: isobench passes GPUs to runc and crun only, not to runsc "
                                 "(fix: use runtime: runc or crun, or drop `gpus`)")

    @classmethod
    def validate_workload(cls, entry: PlatformEntry, params: dict[str, Any]) -> None:
        if params.get("device") == "cuda" and "gpus" not in entry.options:
            raise ValueError("options.gpus: the workload asks for `device: cuda`, and this oci entry passes no GPU in "
                             "(fix: add `options: {gpus: all}` to the entry, or use `device: cpu`)")

    def runtime(self) -> str:
        return self.entry.runtime or "runc"

    def runs_own_kernel(self) -> bool:
        return self.runtime() == "runsc"

    def binary(self) -> str | None:
        """Another build of the runtime (``runtime_path``), or None for the one on PATH."""
        return self.entry.runtime_path

    def _argv(self, *args: str) -> list[str]:
        return runtime_argv(self.runtime(), *args, binary=self.binary())

    def gpus(self) -> str | list[int] | None:
        """``options.gpus``: the GPUs passed in (``all`` or indices), or None."""
        return gpu_selection(self.entry.options["gpus"]) if "gpus" in self.entry.options else None

    def default_display(self) -> str:
        return f"oci/{self.runtime()}"

    @classmethod
    def check(cls) -> Availability:
        found = [r for r in RUNTIMES if shutil.which(r)]
        if not found:
            return Availability(False, "no OCI runtime found (apt-get install runc crun runsc)")
        return Availability(True, f"runtimes here: {', '.join(found)}")

    def availability(self) -> Availability:
        runtime = self.runtime()
        binary = self.binary()
        if binary is not None:
            problem = runtime_path_problem(binary)
            if problem is None and runtime not in (tool_version([binary, "--version"]) or ""):
                problem = f"does not answer `--version` as {runtime} does"
            if problem:
                return Availability(False, f"runtime_path {binary} {problem}")
        elif shutil.which(runtime) is None:
            return Availability(False, f"{runtime} is not installed (apt-get install {runtime})")
        if _needs_private_cgroup_view(runtime) and shutil.which("unshare") is None:
            return Availability(False, "crun needs `unshare` (util-linux) on this hybrid-cgroup host")
        notes = []
        selection = self.gpus()
        if selection is not None:
            try:
                gpu = gpu_passthrough(selection)
            except ValueError as err:
                return Availability(False, str(err))
            notes.append("GPU passthrough: " + ", ".join(d["path"] for d in gpu.devices))
        if _needs_private_cgroup_view(runtime):
            notes.append("hybrid cgroups: crun runs in a private mount namespace without the cgroup2 mount")
        if runtime == "runsc":
            notes.append("knobs apply to the sandbox's cgroup on the host; gVisor's own /proc does not show them")
        return Availability(True, "", notes=notes)

    def fingerprint(self) -> dict[str, Any]:
        runtime = self.runtime()
        info: dict[str, Any] = {"runtime": runtime, "version": tool_version([self.binary() or runtime, "--version"]),
                                "binary": self.binary() or shutil.which(runtime),
                                "cgroup_workaround": "private mount namespace without the cgroup2 mount"
                                if _needs_private_cgroup_view(runtime) else None}
        if self.gpus() is not None:
            info["gpus"] = self.gpus()
        return info

    def find_versions(self) -> dict[str, str]:
        runtime = self.runtime()
        version = tool_short_version(runtime, self.binary())
        if version and runtime == "runsc":  # "2022-12-19 ptrace": the build and how it ran
            version += f" {runsc_platform(self._argv()[1:], self.binary() or 'runsc')}"
        return {runtime: version} if version else {}

    def _gpu(self) -> GpuPassthrough | None:
        """The entry's GPU passthrough on this host (found once), or None without ``options.gpus``."""
        selection = self.gpus()
        if selection is None:
            return None
        if getattr(self, "_gpu_passthrough", None) is None:
            self._gpu_passthrough = gpu_passthrough(selection)
        return self._gpu_passthrough

    def _skeleton(self, extra: tuple[str, ...] = ()) -> Path:
        gpu = self._gpu()
        files = (LD_SO_CACHE,) if gpu is not None and gpu.ld_so_cache else ()
        return build_skeleton((str(data_root()), *extra, *(gpu.library_mounts if gpu else ())), files)

    def prepare(self) -> None:
        self.rootfs = self._skeleton()
        key = state_key(self.runtime(), self.binary())
        (STATE_ROOT / key).mkdir(parents=True, exist_ok=True)
        if self.binary() is not None:  # sweep_stale needs the build that made a dead runner's containers
            (STATE_ROOT / f"{key}.binary").write_text(self.binary() or "")

    def launch(self, cell: Cell, argv: list[str], stderr: Any) -> Launched:
        runtime = self.runtime()
        digest = hashlib.sha1(cell.cell_id.encode()).hexdigest()[:8]
        container_id = f"isobench-{runner_tag()}-{cell.seq}-{digest}"
        bundle = STATE_ROOT / "bundles" / container_id
        bundle.mkdir(parents=True, exist_ok=True)
        cgroups_path = f"/isobench/{runner_tag()}/{container_id}"
        rootfs = getattr(self, "rootfs", None) or self._skeleton()
        if runtime == "runsc":
            # runsc, unlike runc, does not fill an empty v1 cpuset parent: do it for it.
            ensure_cpuset_parent(Path(cgroups_path).parent)
        if cell.mounts:  # the root is read-only: the script directory's mount point must exist in it
            rootfs = self._skeleton(tuple(cell.mounts))
        if cell.artifacts_dir:  # likewise the artifacts directory's
            rootfs = self._skeleton((*cell.mounts, cell.artifacts_dir))
        self.network_mode(cell)  # refuses what cannot work before anything starts
        config = bundle_config(cell, argv, rootfs, cgroups_path, runtime, self._gpu())
        (bundle / "config.json").write_text(json.dumps(config, indent=1))
        cmd = runtime_argv(runtime, "run", "--bundle", str(bundle), container_id, binary=self.binary(),
                           serving=cell.network)
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=self.cell_stdin(cell), stdout=subprocess.PIPE, stderr=stderr,
                                start_new_session=True, cwd=bundle)
        return OciLaunched(proc=proc, name=container_id, started=started, bundle=bundle, runtime=runtime,
                           binary=self.binary(), serving=cell.network)

    def probe_target(self, launched: OciLaunched) -> ProbeTarget:  # type: ignore[override]
        """The container's init pid (from the runtime's state, polled briefly) and its cgroups; the
        runtime's own foreground processes are the engine."""
        def running() -> int | None:
            out = subprocess.run(runtime_argv(launched.runtime, "state", launched.name, binary=launched.binary),
                                 capture_output=True, text=True, timeout=30)
            try:
                pid = int(json.loads(out.stdout).get("pid") or 0) if out.returncode == 0 else 0
            except (ValueError, AttributeError):
                pid = 0
            return pid or None

        pid = poll(running, lambda: launched.proc.poll() is None)
        if pid is None:
            return ProbeTarget(platform=self.name, root_pid=None, container_id=launched.name)
        target = ProbeTarget(platform=self.name, root_pid=pid, cgroups=cgroups_of_pid(pid),
                             container_id=launched.name)
        target.engine_pids = launcher_pids(launched.proc.pid, set(target.pids()))
        return target

    def collect(self, launched: OciLaunched) -> dict[str, Any]:  # type: ignore[override]
        info: dict[str, Any] = {"container_id": launched.name, "runtime": launched.runtime}
        if launched.runtime == "runsc":
            argv = runtime_argv("runsc", binary=launched.binary)
            info["runsc_platform"] = runsc_platform(argv[1:], argv[0])
            if launched.serving:
                info["runsc_network"] = "passthrough"
        return info

    def network_mode(self, cell: Cell) -> str:
        # A serving cell shares the host's network namespace (no bridge without a daemon); runsc's
        # sandbox reaches it through network passthrough (runtime_argv), recorded as runsc_network.
        return "host" if cell.network else "none"

    def cleanup_cell(self, launched: OciLaunched) -> None:  # type: ignore[override]
        runtime = launched.runtime
        if launched.proc.poll() is None:
            subprocess.run(runtime_argv(runtime, "kill", launched.name, "KILL", binary=launched.binary),
                           capture_output=True, timeout=30)
            try:
                launched.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_process_group(launched.proc)
        remove_container(runtime, launched.name, launched.binary)
        shutil.rmtree(launched.bundle, ignore_errors=True)
        prune_empty(runner_tag())

    @classmethod
    def sweep_stale(cls) -> list[str]:
        removed = []
        for runtime, binary, state in _state_dirs():
            for entry in state.iterdir():
                tag = _tag_of(entry.name)
                if tag and tag_is_stale(tag):
                    remove_container(runtime, entry.name, binary)
                    removed.append(f"{runtime} container {entry.name}")
        bundles = STATE_ROOT / "bundles"
        if bundles.is_dir():
            for bundle in bundles.iterdir():
                tag = _tag_of(bundle.name)
                if tag and tag_is_stale(tag):
                    shutil.rmtree(bundle, ignore_errors=True)
        return removed


def _state_dirs() -> list[tuple[str, str | None, Path]]:
    """(runtime, build or None, state directory) of every runtime build that left state here and
    can still be run to remove it."""
    found: list[tuple[str, str | None, Path]] = []
    for state in sorted(STATE_ROOT.iterdir()) if STATE_ROOT.is_dir() else []:
        runtime = state.name.split("-", 1)[0]
        if not state.is_dir() or runtime not in RUNTIMES:
            continue
        if state.name == runtime:
            binary = None
            usable = shutil.which(runtime) is not None
        else:  # another build's: its path was written beside the directory by ``prepare``
            try:
                binary = (STATE_ROOT / f"{state.name}.binary").read_text().strip()
            except OSError:
                continue
            usable = runtime_path_problem(binary) is None
        if usable:
            found.append((runtime, binary, state))
    return found


def ensure_cpuset_parent(relpath: Path) -> None:
    path = CGROUP_ROOT / "cpuset" / str(relpath).lstrip("/")
    if (CGROUP_ROOT / "cpuset").is_dir():
        path.mkdir(parents=True, exist_ok=True)
        CellCgroup._inherit_cpuset(path)


def _tag_of(container_id: str) -> str | None:
    parts = container_id.split("-")
    return f"{parts[1]}-{parts[2]}" if len(parts) >= 4 and parts[0] == "isobench" else None


def remove_container(runtime: str, container_id: str, binary: str | None = None) -> None:
    """Kill and delete a container and its state, whatever state it is in (``binary``: the build
    that runs it, when not the one on PATH)."""
    subprocess.run(runtime_argv(runtime, "kill", container_id, "KILL", binary=binary), capture_output=True,
                   timeout=30)
    for _ in range(50):
        out = subprocess.run(runtime_argv(runtime, "delete", "--force", container_id, binary=binary),
                             capture_output=True, text=True, timeout=30)
        gone = subprocess.run(runtime_argv(runtime, "state", container_id, binary=binary), capture_output=True,
                              timeout=30).returncode != 0
        if gone:
            return
        time.sleep(0.1)
    raise RuntimeError(f"{runtime} could not delete container {container_id}: {out.stderr.strip()}")
