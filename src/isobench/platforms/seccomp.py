"""isobench's default seccomp filter for OCI cells run without Docker.

Docker's own default profile is an allow-list inside the engine; with no engine we
apply a filter of the same kind of effect, written here: everything is allowed except
the administrative system calls a container is normally denied (they fail with EPERM).
The per-syscall cost of a BPF filter is what a workload pays, and that is present
either way. Docker cells keep Docker's own profile.

Namespaces are denied as Docker denies them to a container without CAP_SYS_ADMIN (as
isobench's OCI cells are): ``unshare`` and ``setns`` fail with EPERM, ``clone`` with any
namespace flag (a new user namespace above all, the usual first step of a kernel exploit)
fails with EPERM, and ``clone3``, whose flags sit in memory a filter cannot read, fails with
ENOSYS, so the C library falls back to ``clone`` for threads and processes.
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


EPERM, ENOSYS = 1, 38
#: CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (Docker's mask 0x7E020000)
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


def default_profile() -> dict[str, Any]:
    # One rule per flag, as rules are ORed and a rule's argument tests ANDed: clone is denied
    # when any namespace bit is set in its flags (argument 0 on x86-64 and arm64).
    clone_rules = [{"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM,
                    "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]}
                   for flag in NAMESPACE_FLAGS]
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": _ARCHES.get(platform.machine(), []),
        "syscalls": [{"names": DENIED, "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM}, *clone_rules,
                     {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS}],
    }
