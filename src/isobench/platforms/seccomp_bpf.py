"""Docker's own default seccomp filter, read from a live container and applied to a host process.

Docker compiles its default profile into a BPF program inside the engine; neither the
profile nor the program ships as a file. So isobench starts a throw-away container of
the host-mirror image, reads the BPF program the kernel holds for it
(``PTRACE_SECCOMP_GET_FILTER``, root only) and caches it per engine version. The
``layer-seccomp`` platform installs exactly that program on a host process before it
execs the worker: the same instructions, the same per-syscall cost, the same kernel
side effects (seccomp also turns on the speculative-store-bypass mitigation), and no
other isolation mechanism.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from pathlib import Path

from isobench.hostinfo import cache_root

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_DETACH = 17
PTRACE_SECCOMP_GET_FILTER = 0x420C
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
WALL = 0x40000000
INSN_BYTES = 8  # struct sock_filter

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def read_filters(pid: int) -> list[bytes]:
    """The seccomp BPF programs attached to ``pid``, newest first (needs CAP_SYS_ADMIN)."""
    if _libc.ptrace(PTRACE_SEIZE, pid, None, None) != 0:
        raise OSError(ctypes.get_errno(), f"cannot attach to pid {pid} to read its seccomp filter")
    try:
        _libc.ptrace(PTRACE_INTERRUPT, pid, None, None)
        os.waitpid(pid, WALL)
        programs = []
        for index in range(64):
            count = _libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(index), None)
            if count <= 0:
                break
            buffer = (ctypes.c_uint64 * count)()
            _libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(index), buffer)
            programs.append(bytes(buffer))
        return programs
    finally:
        _libc.ptrace(PTRACE_DETACH, pid, None, None)


def docker_default_filter(image: str, runner_label: tuple[str, str]) -> Path:
    """Path of the cached BPF program of Docker's default profile (dumped once per engine version)."""
    from isobench.platforms.dockercli import docker

    version = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    target = cache_root() / "seccomp" / f"docker-{version}-{platform.machine()}.bpf"
    if target.exists():
        return target
    name = f"isobench-{runner_label[1]}-seccomp-dump"
    docker("rm", "-f", name, check=False)
    docker("run", "-d", "--name", name, "--label", f"{runner_label[0]}={runner_label[1]}", "--network", "none",
           "-v", "/usr:/usr:ro", image, "/usr/bin/sleep", "120")
    try:
        pid = 0
        deadline = time.monotonic() + 20
        while not pid and time.monotonic() < deadline:
            pid = int(docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip() or 0)
            if not pid:
                time.sleep(0.05)
        programs = read_filters(pid)
    finally:
        docker("rm", "-f", name, check=False)
    if len(programs) != 1:
        raise RuntimeError(f"expected one seccomp filter on a default Docker container, found {len(programs)}")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.write_bytes(programs[0])
    tmp.rename(target)
    return target


class FilterInstaller:
    """Holds a BPF program in memory so a forked child can install it before exec."""

    def __init__(self, program: bytes) -> None:
        if not program or len(program) % INSN_BYTES:
            raise ValueError("not a BPF program (length is not a multiple of 8)")
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._prog = _SockFprog(len(program) // INSN_BYTES, ctypes.addressof(self._buffer))

    def install(self) -> None:
        """Attach the filter to the calling process (root: no no_new_privs needed, as with runc)."""
        if _libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._prog), 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_SECCOMP) failed: {os.strerror(err)}")

