"""energy: joules from the host's meters (RAPL through powercap, NVML's GPU energy counter).

Energy is split as Prashanthi et al. do: ``baseload`` (what the idle host, or the idle
host plus an idle container, draws over the cell's duration) and ``incremental`` (the
rest: what the workload costs). ``isobench baseload`` measures the idle powers and saves
them; the probe uses them when the same meters are present, or a ``baseload_w`` setting.
Without any meter the probe is ``unavailable`` and says why; it never invents numbers.

RAPL domains: ``package-N`` and ``dram`` count towards the total; ``core``/``uncore`` are
parts of a package and ``psys`` overlaps the packages, so they are reported but not summed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.gpu import device_handles, energy_mj, nvml
from isobench.probes.sampling import Sampler

POWERCAP = Path("/sys/class/powercap")


def baseload_file() -> Path:
    from isobench.hostinfo import cache_root

    return cache_root() / "baseload.json"


@dataclass
class Meter:
    name: str  # "rapl:package-0", "nvml:gpu0"
    read_j: Callable[[], float]
    #: the counter wraps to 0 after this many joules (RAPL); None: it does not
    wrap_j: float | None
    #: counts towards the total (not a part of, or overlapping, another meter)
    in_total: bool


def _rapl_meters(root: Path) -> list[Meter]:
    meters = []
    for domain in sorted(root.glob("intel-rapl:*")):
        energy = domain / "energy_uj"
        try:
            name = (domain / "name").read_text().strip()
            energy.read_text()
        except OSError:
            continue  # unreadable (energy_uj is root-only on current kernels)
        try:
            wrap = int((domain / "max_energy_range_uj").read_text()) / 1e6
        except (OSError, ValueError):
            wrap = None
        label = name if name not in {m.name.split(":", 1)[1] for m in meters} else f"{name}.{domain.name}"
        meters.append(Meter(f"rapl:{label}", lambda e=energy: int(e.read_text()) / 1e6, wrap,
                            in_total=name.startswith("package") or name == "dram"))
    return meters


def find_meters(powercap: Path = POWERCAP) -> tuple[list[Meter], str]:
    """The energy meters on this host, and (when there are none) why not."""
    meters = _rapl_meters(powercap) if powercap.is_dir() else []
    for index, handle in device_handles():
        if energy_mj(handle) is not None:
            meters.append(Meter(f"nvml:gpu{index}", lambda h=handle: energy_mj(h) / 1000, None, in_total=True))
    if meters:
        return meters, ""
    rapl = ("no RAPL domains under /sys/class/powercap" if not powercap.is_dir() or not any(powercap.iterdir())
            else "RAPL domains present but unreadable")
    _, gpu_why = nvml()
    return [], f"{rapl} (usual inside a VM); no GPU energy counter ({gpu_why or 'the GPU has none'})"


class EnergyReader:
    """Accumulates each meter's joules across wrap-arounds; sample often enough to see every wrap."""

    def __init__(self, meters: list[Meter]) -> None:
        self.meters = meters
        self.last = {m.name: m.read_j() for m in meters}
        self.total = dict.fromkeys(self.last, 0.0)

    def sample(self) -> dict[str, float]:
        for meter in self.meters:
            now = meter.read_j()
            delta = now - self.last[meter.name]
            if delta < 0 and meter.wrap_j:
                delta += meter.wrap_j
            self.total[meter.name] += max(delta, 0.0)
            self.last[meter.name] = now
        return dict(self.total)

    def sum_total(self, values: dict[str, float]) -> float:
        return sum(values[m.name] for m in self.meters if m.in_total)


def measure_power(meters: list[Meter], seconds: float, interval_s: float = 1.0) -> dict[str, float]:
    """Mean watts per meter (and ``total``) over ``seconds`` of whatever the host is doing now."""
    reader = EnergyReader(meters)
    begun = time.monotonic()
    while (left := seconds - (time.monotonic() - begun)) > 0:
        time.sleep(min(interval_s, left))
        reader.sample()
    values = reader.sample()
    elapsed = time.monotonic() - begun
    watts = {name: joules / elapsed for name, joules in values.items()}
    watts["total"] = reader.sum_total(values) / elapsed
    return watts


def load_baseload(meters: list[Meter]) -> dict[str, Any] | None:
    """The saved idle powers, if they were measured with the meters this host has now."""
    try:
        saved = json.loads(baseload_file().read_text())
    except (OSError, ValueError):
        return None
    names = sorted(m.name for m in meters)
    return saved if sorted(saved.get("meters", [])) == names else None


class EnergySettings(ProbeSettings):
    interval_s: float = Field(1.0, ge=0.05, le=60, description="seconds between meter reads (catches wrap-arounds)")
    baseload_w: float | None = Field(None, ge=0, description="idle power to subtract (default: the one "
                                     "`isobench baseload` saved, host or container as fits the cell)")


@PROBES.register("energy")
class EnergyProbe(Probe):
    description = ("energy from RAPL (powercap) and NVML counters, split into baseload (idle host or idle "
                   "container, from `isobench baseload`) and incremental")
    Settings = EnergySettings

    @classmethod
    def check(cls) -> ProbeCheck:
        meters, why = find_meters()
        return ProbeCheck(bool(meters), why)

    def start(self, target: ProbeTarget) -> None:
        settings: EnergySettings = self.settings  # type: ignore[assignment]
        meters, _ = find_meters()
        self.container = target.container_id is not None
        self.reader = EnergyReader(meters)
        self.t0 = time.monotonic()
        self.rows: dict[str, list[float]] = {"t": [], **{m.name: [] for m in meters}}
        self.sampler = Sampler(self._sample, settings.interval_s, None, "isobench-energy")
        self.sampler.start()

    def _sample(self) -> None:
        values = self.reader.sample()
        self.rows["t"].append(time.monotonic() - self.t0)
        for name, joules in values.items():
            self.rows[name].append(joules)

    def stop(self) -> ProbeResult:
        self.sampler.stop()
        settings: EnergySettings = self.settings  # type: ignore[assignment]
        duration = self.rows["t"][-1]
        final = {m.name: self.rows[m.name][-1] for m in self.reader.meters}
        total = self.reader.sum_total(final)
        metrics: list[tuple[str, float, str]] = [(f"{name}.energy_j", joules, "J") for name, joules in final.items()]
        metrics += [("energy_j", total, "J"), ("power_mean_w", total / duration if duration > 0 else 0.0, "W")]
        info: dict[str, Any] = {"meters": {m.name: {"in_total": m.in_total} for m in self.reader.meters},
                                "duration_s": duration}
        baseload_w, source = settings.baseload_w, "setting baseload_w"
        if baseload_w is None:
            saved = load_baseload(self.reader.meters)
            if saved is not None:
                key = "container_idle_w" if self.container and saved.get("container_idle_w") else "host_idle_w"
                baseload_w, source = saved[key]["total"], f"{baseload_file()} ({key})"
        if baseload_w is not None:
            baseload_j = baseload_w * duration
            metrics += [("baseload_j", baseload_j, "J"), ("incremental_j", total - baseload_j, "J")]
            info["baseload"] = {"watts": baseload_w, "from": source}
        else:
            info["baseload"] = "not measured: run `isobench baseload` or set baseload_w"
        return ProbeResult(metrics=metrics, series={"joules": self.rows}, info=info)

    def abort(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None:
            sampler.stop(final_sample=False)
