"""Host power-state knobs, set around a cell (or a tenant group) and always restored after it.

- ``governor`` / ``max_freq``: every CPU's ``scaling_governor`` / ``scaling_max_freq``
  under ``/sys/devices/system/cpu/cpu*/cpufreq`` (all CPUs: an unpinned cell may run on
  any of them);
- ``power_mode``: ``nvpmodel -m N`` on NVIDIA Jetson hosts (the mode before is read with
  ``nvpmodel -q`` and set back);
- ``jetson_clocks``: ``jetson_clocks`` (or ``--restore``) with the previous state saved by
  ``jetson_clocks --store`` and restored after.

Whether the host has these is checked at plan time (:mod:`isobench.plan.placement`), so
a study that asks for one this host lacks fails before it starts.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from isobench.plan.placement import cpufreq_files, parse_frequency_khz


@contextmanager
def _sysfs_values(files: list[Path], value: str) -> Iterator[None]:
    previous = {path: path.read_text().strip() for path in files}
    try:
        for path in files:
            path.write_text(value)
        yield
    finally:
        for path, old in previous.items():
            try:
                path.write_text(old)
            except OSError:
                pass


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=True)


@contextmanager
def _nvpmodel(mode: int) -> Iterator[None]:
    match = re.search(r"^\s*(\d+)\s*$", _run("nvpmodel", "-q").stdout, re.MULTILINE)
    before = match.group(1) if match else None
    _run("nvpmodel", "-m", str(mode))
    try:
        yield
    finally:
        if before is not None:
            subprocess.run(["nvpmodel", "-m", before], capture_output=True, timeout=120)


@contextmanager
def _jetson_clocks(locked: bool) -> Iterator[None]:
    with tempfile.TemporaryDirectory(prefix="isobench-clocks-") as tmp:
        state = str(Path(tmp) / "state")
        _run("jetson_clocks", "--store", state)
        _run(*(["jetson_clocks"] if locked else ["jetson_clocks", "--restore", state]))
        try:
            yield
        finally:
            subprocess.run(["jetson_clocks", "--restore", state], capture_output=True, timeout=120)


@contextmanager
def applied_host_knobs(knobs: dict[str, Any]) -> Iterator[None]:
    with ExitStack() as stack:
        if knobs.get("governor") is not None:
            stack.enter_context(_sysfs_values(cpufreq_files("scaling_governor"), str(knobs["governor"])))
        if knobs.get("max_freq") is not None:
            khz = str(parse_frequency_khz(knobs["max_freq"]))
            stack.enter_context(_sysfs_values(cpufreq_files("scaling_max_freq"), khz))
        if knobs.get("power_mode") is not None:
            stack.enter_context(_nvpmodel(int(knobs["power_mode"])))
        if knobs.get("jetson_clocks") is not None:
            stack.enter_context(_jetson_clocks(bool(knobs["jetson_clocks"])))
        yield
