"""The versions a result was measured with: each runtime's own short version string.

A cell records its platform's ``versions()`` (engine, containerd, OCI runtime, runsc and its
platform, podman, QEMU) in ``platform_info["versions"]``, and every comparison line names them,
because "gvisor: 1.05×" means nothing without saying which gVisor. Here: turning each tool's
``--version`` line into the short form people quote ("1.1.5", runsc's release date "2022-12-19"),
and the host-wide listing the fingerprint keeps.
"""

from __future__ import annotations

import re

from isobench.hostinfo import tool_version

#: runsc names its releases by date: "runsc version 0.0~20221219.0", "release-20240729.0"
_RUNSC_DATE = re.compile(r"(20\d{2})(\d{2})(\d{2})")
_VERSION = re.compile(r"version\s+v?(\d[^\s,]*)", re.IGNORECASE)
#: the runtimes and engines the host-wide listing asks, with the argv that prints each version
HOST_TOOLS = {"docker": ["docker", "version", "--format", "{{.Server.Version}}"],  # the engine, not the client
              "podman": ["podman", "--version"], "containerd": ["containerd", "--version"],
              "runc": ["runc", "--version"], "crun": ["crun", "--version"], "runsc": ["runsc", "--version"],
              "qemu": ["qemu-system-x86_64", "--version"]}


def short_version(tool: str, line: str | None) -> str | None:
    """The version in ``tool``'s version ``line``: "1.1.5" from "runc version 1.1.5", runsc's release
    date "2022-12-19" from "runsc version 0.0~20221219.0"; None when the line names none."""
    if not line:
        return None
    if tool == "runsc":
        date = _RUNSC_DATE.search(line)
        if date:
            return "-".join(date.groups())
    found = _VERSION.search(line)
    if found:
        return found.group(1)
    words = line.split()
    if tool == "containerd" and len(words) >= 3:  # "containerd github.com/containerd/containerd 1.6.20~ds1 ..."
        return words[2]
    return words[0] if words and words[0][0].isdigit() else None  # a bare "20.10.24+dfsg1"


def tool_short_version(tool: str, binary: str | None = None) -> str | None:
    """``tool``'s short version from its own ``--version`` (``binary``: another build's path)."""
    argv = HOST_TOOLS.get(tool, [tool, "--version"])
    return short_version(tool, tool_version([binary or argv[0], *argv[1:]]))


def host_versions() -> dict[str, str]:
    """Every engine and runtime installed here, by short version (the host fingerprint's list)."""
    found = {tool: tool_short_version(tool) for tool in HOST_TOOLS}
    return {tool: version for tool, version in found.items() if version}


def version_words(versions: dict[str, str] | None) -> str:
    """"docker 20.10.24, containerd 1.6.20, runc 1.1.5" ("" for none): what a comparison line shows,
    outermost layer first (stores keep the mapping with sorted keys, so the order is set here)."""
    order = {name: i for i, name in enumerate(HOST_TOOLS)}
    names = sorted(versions or {}, key=lambda name: (order.get(name, len(order)), name))
    return ", ".join(f"{name} {versions[name]}" for name in names)  # type: ignore[index]
