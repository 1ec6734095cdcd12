"""gpu: NVIDIA GPUs through NVML (nvidia-ml-py): utilisation, memory, clocks, power, energy.

Sampled on the runner's side for every visible device; the cell's own share of device
memory is read from NVML's per-process list (host pids). On a host without an NVIDIA
driver the probe is ``unavailable`` with NVML's own reason.
"""

from __future__ import annotations

import functools
import time
from typing import Any

from pydantic import Field

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeCheck, ProbeResult, ProbeSettings, ProbeTarget
from isobench.probes.sampling import Sampler

FIELDS = ("util_pct", "mem_util_pct", "mem_used_bytes", "sm_clock_mhz", "mem_clock_mhz", "power_w",
          "energy_j", "temperature_c", "cell_mem_bytes")
#: sampled field -> mean metric
MEANS = (("util_pct", "util_mean_pct", "%"), ("mem_util_pct", "mem_util_mean_pct", "%"),
         ("sm_clock_mhz", "sm_clock_mean_mhz", "MHz"), ("power_w", "power_mean_w", "W"),
         ("temperature_c", "temperature_mean_c", "C"))


@functools.cache
def nvml() -> tuple[Any, str]:
    """(the initialised pynvml module, "") or (None, why not). NVML stays initialised for the process."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return None, f"NVML cannot start: {exc} (no NVIDIA driver on this host)"
    if count == 0:
        return None, "NVML found no GPU"
    return pynvml, ""


def device_handles(indices: list[int] | None = None) -> list[tuple[int, Any]]:
    lib, _ = nvml()
    if lib is None:
        return []
    wanted = indices if indices is not None else range(lib.nvmlDeviceGetCount())
    return [(i, lib.nvmlDeviceGetHandleByIndex(i)) for i in wanted]


def energy_mj(handle: Any) -> float | None:
    """The device's energy counter (mJ since the driver loaded), or None where it has none (pre-Volta)."""
    lib, _ = nvml()
    try:
        return float(lib.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:
        return None


def _read(lib: Any, call: str, *args: Any) -> Any:
    try:
        return getattr(lib, call)(*args)
    except Exception:  # a field this device or driver does not support
        return None


def read_device(handle: Any, cell_pids: set[int]) -> dict[str, float | None]:
    lib, _ = nvml()
    util = _read(lib, "nvmlDeviceGetUtilizationRates", handle)
    memory = _read(lib, "nvmlDeviceGetMemoryInfo", handle)
    power = _read(lib, "nvmlDeviceGetPowerUsage", handle)
    energy = energy_mj(handle)
    processes = _read(lib, "nvmlDeviceGetComputeRunningProcesses", handle) or []
    cell_mem = sum((p.usedGpuMemory or 0) for p in processes if p.pid in cell_pids)
    return {
        "util_pct": util.gpu if util else None,
        "mem_util_pct": util.memory if util else None,
        "mem_used_bytes": memory.used if memory else None,
        "sm_clock_mhz": _read(lib, "nvmlDeviceGetClockInfo", handle, lib.NVML_CLOCK_SM),
        "mem_clock_mhz": _read(lib, "nvmlDeviceGetClockInfo", handle, lib.NVML_CLOCK_MEM),
        "power_w": power / 1000 if power is not None else None,
        "energy_j": energy / 1000 if energy is not None else None,
        "temperature_c": _read(lib, "nvmlDeviceGetTemperature", handle, lib.NVML_TEMPERATURE_GPU),
        "cell_mem_bytes": cell_mem,
    }


class GpuSettings(ProbeSettings):
    interval_s: float = Field(0.5, ge=0.02, le=60, description="seconds between samples")
    devices: list[int] | None = Field(None, description="device indices to watch (default: all)")


@PROBES.register("gpu")
class GpuProbe(Probe):
    description = ("NVIDIA GPUs (NVML): utilisation, memory (device and the cell's processes), SM/memory "
                   "clocks, power, energy counter, temperature; sampled")
    Settings = GpuSettings

    @classmethod
    def check(cls) -> ProbeCheck:
        lib, why = nvml()
        return ProbeCheck(lib is not None, why)

    def start(self, target: ProbeTarget) -> None:
        settings: GpuSettings = self.settings  # type: ignore[assignment]
        self.target = target
        self.handles = device_handles(settings.devices)
        self.t0 = time.monotonic()
        self.rows: dict[str, list[Any]] = {"t": [], "device": [], **{k: [] for k in FIELDS}}
        self.sampler = Sampler(self._sample, settings.interval_s, target.root_pid, "isobench-gpu")
        self.sampler.start()

    def _sample(self) -> None:
        now = time.monotonic() - self.t0
        pids = set(self.target.pids())
        for index, handle in self.handles:
            values = read_device(handle, pids)
            self.rows["t"].append(now)
            self.rows["device"].append(index)
            for name in FIELDS:
                self.rows[name].append(values[name])

    def stop(self) -> ProbeResult:
        self.sampler.stop()
        metrics: list[tuple[str, float, str]] = []
        total_energy = 0.0
        have_energy = False
        for index, _ in self.handles:
            picked = [i for i, d in enumerate(self.rows["device"]) if d == index]

            def column(name: str, picked: list[int] = picked) -> list[float]:
                return [self.rows[name][i] for i in picked if self.rows[name][i] is not None]

            prefix = f"gpu{index}."
            for name, metric, unit in MEANS:
                values = column(name)
                if values:
                    metrics.append((prefix + metric, sum(values) / len(values), unit))
            for name in ("mem_used_bytes", "cell_mem_bytes"):
                values = column(name)
                if values:
                    metrics.append((f"{prefix}{name.removesuffix('_bytes')}_max_bytes", max(values), "B"))
            energy = column("energy_j")
            if len(energy) >= 2:
                metrics.append((f"{prefix}energy_j", energy[-1] - energy[0], "J"))
                total_energy += energy[-1] - energy[0]
                have_energy = True
        if have_energy:
            metrics.append(("energy_j", total_energy, "J"))
        info: dict[str, Any] = {"devices": [i for i, _ in self.handles], "interval_s": self.sampler.interval_s}
        if self.sampler.errors:
            info["sample_errors"] = self.sampler.errors
            info["first_error"] = self.sampler.first_error
        return ProbeResult(metrics=metrics, series={"samples": self.rows}, info=info)

    def abort(self) -> None:
        sampler = getattr(self, "sampler", None)
        if sampler is not None:
            sampler.stop(final_sample=False)
