"""`isobench baseload`: the idle host's power, and the idle host's plus an idle container's.

The energy probe subtracts these from a cell's energy (baseload) to leave what the
workload itself costs (incremental), as Prashanthi et al. split it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from isobench.probes.energy import baseload_file, find_meters, measure_power


class NoMeter(RuntimeError):
    """No energy meter on this host: nothing can be measured."""


@contextlib.contextmanager
def idle_container(seconds: float) -> Iterator[str]:
    """A host-mirror container that only sleeps, removed on every exit path."""
    from isobench.liveness import runner_tag
    from isobench.platforms.docker import LABEL_RUNNER, Docker
    from isobench.platforms.dockercli import docker
    from isobench.study.model import PlatformEntry

    platform = Docker(PlatformEntry(name="docker"))
    platform.prepare()
    name = f"isobench-{runner_tag()}-baseload"
    docker("run", "-d", "--name", name, "--label", f"{LABEL_RUNNER}={runner_tag()}", "--network", "none",
           "-v", "/usr:/usr:ro", platform.image(), "/usr/bin/sleep", str(int(seconds) + 60))
    try:
        yield name
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            docker("rm", "-f", name, check=False)


def measure_baseload(seconds: float, container: bool, say: Any = print) -> dict[str, Any]:
    meters, why = find_meters()
    if not meters:
        raise NoMeter(why)
    names = [m.name for m in meters]
    say(f"meters: {', '.join(names)}; measuring the idle host for {seconds:g} s")
    result: dict[str, Any] = {"measured_at": time.time(), "seconds": seconds, "meters": names,
                              "host_idle_w": measure_power(meters, seconds)}
    if container:
        with idle_container(seconds):
            time.sleep(1.0)  # let the start-up settle: the baseload is the idle container's
            say(f"measuring an idle container for {seconds:g} s")
            result["container_idle_w"] = measure_power(meters, seconds)
    path = baseload_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    result["saved_to"] = str(path)
    return result
