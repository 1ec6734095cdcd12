"""The docker CLI, run with its output captured: one helper for every module that calls it
(the Docker platforms, their data path, the base load), below all of them in the import graph."""

from __future__ import annotations

import subprocess


def docker(*args: str, timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check)
