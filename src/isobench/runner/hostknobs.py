"""Host power-state knobs, set around a cell (or a tenant group) and always restored after it.

- ``governor`` / ``max_freq``: every CPU's ``scaling_governor`` / ``scaling_max_freq``
  under ``/sys/devices/system/cpu/cpu*/cpufreq`` (all CPUs: an unpinned cell may run on
  any of them);
- ``power_mode``: ``nvpmodel -m N`` on NVIDIA Jetson hosts (the mode before is read with
  ``nvpmodel -q`` and set back);
- ``jetson_clocks``: ``jetson_clocks`` (or ``--restore``) with the previous state saved by
  ``jetson_clocks --store`` and restored after.

Each change goes through :mod:`isobench.hoststate`, which journals the value before
it is changed, so a runner killed with ``kill -9`` leaves the next run (or ``isobench doctor
--repair``) what it needs to put the host back.

Whether the host has these is checked at plan time (:mod:`isobench.plan.placement`), so
a study that asks for one this host lacks fails before it starts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from isobench.hostinfo import parse_frequency_khz
from isobench.hoststate import changed
from isobench.plan.placement import cpufreq_files


@contextmanager
def applied_host_knobs(knobs: dict[str, Any]) -> Iterator[None]:
    with ExitStack() as stack:
        if knobs.get("governor") is not None:
            for path in cpufreq_files("scaling_governor"):
                stack.enter_context(changed("sysfs", str(path), str(knobs["governor"])))
        if knobs.get("max_freq") is not None:
            khz = str(parse_frequency_khz(knobs["max_freq"]))
            for path in cpufreq_files("scaling_max_freq"):
                stack.enter_context(changed("sysfs", str(path), khz))
        if knobs.get("power_mode") is not None:
            stack.enter_context(changed("nvpmodel", "nvpmodel", int(knobs["power_mode"])))
        if knobs.get("jetson_clocks") is not None:
            stack.enter_context(changed("jetson_clocks", "jetson_clocks",
                                        "locked" if knobs["jetson_clocks"] else "unlocked"))
        yield
