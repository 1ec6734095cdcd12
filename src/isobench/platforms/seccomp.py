"""isobench's default seccomp filter for OCI cells run without Docker.

Docker's own default profile is an allow-list inside the engine; with no engine we
apply a filter of the same kind of effect, written here: everything is allowed except
the administrative system calls a container is normally denied (they fail with EPERM).
The per-syscall cost of a BPF filter is what a workload pays, and that is present
either way. Docker cells keep Docker's own profile.
"""

from __future__ import annotations

import platform
from typing import Any

_ARCHES = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
           "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]}

DENIED = [
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "delete_module", "finit_module",
    "init_module", "ioperm", "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl",
    "lookup_dcookie", "mount", "move_mount", "name_to_handle_at", "open_by_handle_at", "open_tree",
    "perf_event_open", "pivot_root", "process_vm_readv", "process_vm_writev", "ptrace", "quotactl",
    "reboot", "request_key", "setns", "settimeofday", "swapoff", "swapon", "syslog", "umount2",
    "unshare", "userfaultfd", "fsopen", "fsmount", "fsconfig", "fspick",
]


def default_profile() -> dict[str, Any]:
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": _ARCHES.get(platform.machine(), []),
        "syscalls": [{"names": DENIED, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    }
