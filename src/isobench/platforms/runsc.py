"""Which runsc platform (ptrace, systrap, kvm) a gVisor sandbox ran on.

How the sentry intercepts a system call sets gVisor's cost per call: the literature's figures
are mostly for ptrace, while runsc releases since mid-2023 default to systrap. runsc takes the
platform from ``--platform``, which reaches it through the engine's runtime args (daemon.json)
or, for the oci platform, isobench's own command line; without one it uses its built-in
default, which ``runsc flags`` prints. Cells record the answer as ``platform_info["runsc_platform"]``.
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Any

#: runsc's default when its flags say nothing readable (the default of releases since mid-2023)
FALLBACK = "systrap"
_DEFAULT = re.compile(r"-platform string\s*\n[^\n]*\(default \"(\w+)\"\)")


def platform_from_args(args: list[str]) -> str | None:
    """The value of ``--platform`` (``--platform=X``, ``--platform X``, or with one dash), if given."""
    for index, arg in enumerate(args):
        name, equals, value = arg.lstrip("-").partition("=")
        if name != "platform" or not arg.startswith("-"):
            continue
        if equals:
            return value or None
        return args[index + 1] if index + 1 < len(args) else None
    return None


@functools.lru_cache(maxsize=8)
def default_platform(runsc: str) -> str:
    """The binary's built-in default platform, as its flag listing states it."""
    for command in ([runsc, "flags"], [runsc, "--help"]):
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        match = _DEFAULT.search(out.stdout + out.stderr)
        if match:
            return match.group(1)
    return FALLBACK


def runsc_platform(args: list[str], runsc: str = "runsc") -> str:
    """The platform runsc runs on when started with ``args``."""
    return platform_from_args(args) or default_platform(runsc)


def engine_runsc_platform(runtimes: dict[str, Any]) -> str | None:
    """The platform of the engine's ``runsc`` runtime (``docker info``'s Runtimes); None when
    the engine has no such runtime."""
    entry = runtimes.get("runsc")
    if not isinstance(entry, dict):
        return None
    args = [str(a) for a in entry.get("runtimeArgs") or []]
    return runsc_platform(args, str(entry.get("path") or "runsc"))
