"""Which runsc platform (systrap, ptrace, kvm) a gVisor sandbox runs on, and which build runs it.

How the sentry intercepts a system call sets gVisor's cost per call: the literature's figures
are mostly for ptrace, while runsc releases since mid-2023 default to systrap, one to two orders
of magnitude cheaper per call (a getppid() loop here: host 262 ns, systrap 761 ns, ptrace 50 µs).
runsc takes the platform from ``--platform``, which reaches it through the engine's runtime args
(daemon.json) or, for the oci platform, isobench's own command line; without one it uses its
built-in default, which ``runsc flags`` prints. Cells record the answer as
``platform_info["runsc_platform"]``.

A ``gvisor`` entry names its platform (``platform:``, systrap unless it says otherwise) and may
name another build (``runtime_path:``); each (build, platform) is its own Docker runtime name,
so entries that differ in either run side by side in one study.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: the platforms a gvisor entry may name
RUNSC_PLATFORMS = ("systrap", "ptrace", "kvm")
#: a gvisor entry's platform when it names none: gVisor's own default since mid-2023, what users deploy
DEFAULT_PLATFORM = "systrap"
#: runsc's default when its flags say nothing readable (the default of releases since mid-2023)
FALLBACK = "systrap"
#: where ./isobench.sh setup keeps Debian 12's runsc once the backports build replaces /usr/bin/runsc
KEPT_BOOKWORM_RUNSC = Path("/opt/isobench/runsc-20221219/usr/bin/runsc")
#: seconds a `runsc do true` may take before `isobench doctor` calls the platform hung
PROBE_TIMEOUT_S = 20.0
_DEFAULT = re.compile(r"-platform string\s*\n[^\n]*\(default \"(\w+)\"\)")
_LISTED = re.compile(r"-platform string\s*\n\s*specifies which platform to use: ([^\n]*)")


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
def _flags_text(runsc: str) -> str:
    for command in ([runsc, "flags"], [runsc, "--help"]):
        try:
            out = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        if "-platform string" in out.stdout + out.stderr:
            return out.stdout + out.stderr
    return ""


def default_platform(runsc: str) -> str:
    """The binary's built-in default platform, as its flag listing states it."""
    match = _DEFAULT.search(_flags_text(runsc))
    return match.group(1) if match else FALLBACK


def build_platforms(runsc: str) -> tuple[str, ...] | None:
    """The platforms this build of runsc names in its flag listing ("ptrace (default), kvm." in
    Debian 12's 2022 build, which predates systrap); None when the listing says nothing readable."""
    match = _LISTED.search(_flags_text(runsc))
    if not match:
        return None
    listed = match.group(1).split("(default \"")[0]
    found = tuple(word for word in re.findall(r"[a-z][a-z0-9_]*", listed) if word != "default")
    return found or None


def runsc_platform(args: list[str], runsc: str = "runsc") -> str:
    """The platform runsc runs on when started with ``args``."""
    return platform_from_args(args) or default_platform(runsc)


def engine_runtime(runtimes: dict[str, Any], name: str = "runsc") -> tuple[str, list[str]] | None:
    """(binary, runtime args) of the engine's runtime ``name`` (``docker info``'s Runtimes), or None."""
    entry = runtimes.get(name)
    if not isinstance(entry, dict):
        return None
    return str(entry.get("path") or "runsc"), [str(a) for a in entry.get("runtimeArgs") or []]


def engine_runsc_platform(runtimes: dict[str, Any], name: str = "runsc") -> str | None:
    """The platform of the engine's runsc runtime ``name``; None when the engine has no such runtime."""
    found = engine_runtime(runtimes, name)
    return runsc_platform(found[1], found[0]) if found else None


def docker_runtime_name(platform: str, runtime_path: str | None = None) -> str:
    """The Docker runtime name of runsc on ``platform``: ``runsc-systrap`` for the host's runsc,
    ``runsc-ptrace-<hash>`` for another build, so two builds never share a name (nor an entry in
    daemon.json that the second would overwrite)."""
    if runtime_path is None:
        return f"runsc-{platform}"
    digest = hashlib.sha256(f"{os.path.abspath(runtime_path)}\0{platform}".encode()).hexdigest()[:10]
    return f"runsc-{platform}-{digest}"


def runtime_path_problem(path: str) -> str | None:
    """Why ``path`` cannot be a runtime binary here, or None."""
    if not os.path.isabs(path):
        return "is not an absolute path"
    if not os.path.exists(path):
        return "does not exist"
    if not os.path.isfile(path):
        return "is not a file"
    if not os.access(path, os.X_OK):
        return "is not executable"
    return None


def kvm_problem() -> str | None:
    """Why runsc's kvm platform cannot run here (it hangs where KVM runs no guest), or None. The
    VM platforms' own verdict decides: a guest booted under KVM, cached per boot (platforms/kvm.py)."""
    from isobench.platforms.kvm import kvm_verdict

    verdict = kvm_verdict()
    if verdict.works:
        return None
    return f"KVM cannot run a guest here ({verdict.reason}), and runsc --platform=kvm hangs there"


def platform_problem(runsc: str, platform: str) -> str | None:
    """Why this build of runsc cannot run sandboxes on ``platform`` here, or None (checked without
    starting one: the build's flag listing, and KVM's verdict for kvm)."""
    listed = build_platforms(runsc)
    if listed is not None and platform not in listed:
        return f"{runsc} has no {platform} platform (it knows {', '.join(listed)})"
    return kvm_problem() if platform == "kvm" else None


def probe_platform(runsc: str, platform: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``true`` in a sandbox on ``platform`` (``runsc do``): (it ran, how long or why not)."""
    problem = platform_problem(runsc, platform)
    if problem:
        return False, problem
    with tempfile.TemporaryDirectory(prefix="isobench-runsc-probe-") as root:
        argv = [runsc, f"--root={root}", "--network=none", "--ignore-cgroups", f"--platform={platform}", "do", "true"]
        started = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        except OSError as err:
            return False, f"{runsc} cannot start: {err.strerror}"
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return False, f"a sandbox made no progress in {timeout_s:g} s"
        took = time.monotonic() - started
    if proc.returncode != 0:
        lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
        return False, f"runsc do exited {proc.returncode}: {lines[-1][:160] if lines else 'no message'}"
    return True, f"a sandbox ran `true` in {took:.2f} s"


def doctor_lines() -> list[str]:
    """What `isobench doctor` says about runsc's platforms: for the host's runsc and the kept
    Debian 12 build, each platform tried with a real sandbox (kvm only where KVM runs guests)."""
    import shutil

    from rich.markup import escape as term  # host text in a rich-markup line

    from isobench.runtime_versions import tool_short_version

    builds = [path for path in (shutil.which("runsc"), str(KEPT_BOOKWORM_RUNSC)) if path and os.access(path, os.X_OK)]
    if not builds:
        return ["gVisor platforms: runsc is not installed (./isobench.sh setup installs it)"]
    lines = []
    for runsc in builds:
        parts = []
        for platform in RUNSC_PLATFORMS:
            ok, how = probe_platform(runsc, platform)
            if how.startswith("KVM cannot run a guest here"):  # the KVM line above gives the verdict's why
                how = "KVM cannot run a guest here, as the KVM line says; runsc --platform=kvm hangs there"
            parts.append(f"{platform} [green]works[/] ({term(how)})" if ok else f"{platform} [red]no[/] ({term(how)})")
        version = tool_short_version("runsc", runsc) or "?"
        lines.append(f"gVisor platforms of {term(runsc)} (runsc {term(version)}, built-in default "
                     f"{term(default_platform(runsc))}): " + "; ".join(parts))
    return lines
