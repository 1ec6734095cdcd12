"""The probes around one cell: chosen from the cell's config, started, stopped, always released."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from isobench.probes import PROBES
from isobench.probes.base import Probe, ProbeTarget, series_to_ipc


def default_probe_config() -> dict[str, dict[str, Any]]:
    """The probes every cell gets when a study names none: those marked ``default``."""
    return {name: {} for name, cls in PROBES if cls.default}


def validate_probe_config(config: dict[str, dict[str, Any]]) -> None:
    """Raise ValueError("probes.<name>...: problem; fix: ...") for unknown probes or settings."""
    from pydantic import ValidationError

    for name, settings in config.items():
        if name not in PROBES:
            raise ValueError(f"probes.{name}: no such probe; fix: use one of {', '.join(PROBES.names())}")
        try:
            PROBES.get(name).Settings(**(settings or {}))
        except ValidationError as err:
            first = err.errors()[0]
            where = "".join(f".{p}" for p in first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            fix = "" if "; fix: " in message else "; fix: see `isobench probes`"  # a validator's own fix
            raise ValueError(f"probes.{name}{where}: {message}{fix}") from None


@dataclass
class ProbeOutcome:
    metrics: list[tuple[str, float, str]] = field(default_factory=list)
    #: (probe, series name) -> Arrow IPC bytes
    series: dict[tuple[str, str], bytes] = field(default_factory=dict)
    #: probe -> {"status": ok|unavailable|failed, "reason": ..., "info": ..., "overhead_s": ...}
    status: dict[str, dict[str, Any]] = field(default_factory=dict)


class ProbeSession:
    """Instantiate the available probes of a cell's config; a probe that cannot run is noted, not fatal."""

    def __init__(self, config: dict[str, dict[str, Any]]) -> None:
        self.probes: list[Probe] = []
        self.outcome = ProbeOutcome()
        for name in sorted(config):
            cls = PROBES.get(name)
            check = cls.check()
            if not check.ok:
                self.outcome.status[name] = {"status": "unavailable", "reason": check.reason}
                continue
            self.probes.append(cls(cls.Settings(**(config[name] or {}))))
            self.outcome.status[name] = {"status": "ok", **({"partial": check.partial} if check.partial else {})}
        self._started: list[Probe] = []

    def start(self, target: ProbeTarget) -> None:
        for probe in self.probes:
            begun = time.perf_counter()
            try:
                probe.start(target)
                self._started.append(probe)
            except Exception as exc:  # one broken probe must not lose the cell
                self._fail(probe, "start", exc)
            self.outcome.status[probe.name]["start_s"] = time.perf_counter() - begun

    def stop(self) -> ProbeOutcome:
        for probe in self._started:
            begun = time.perf_counter()
            try:
                result = probe.stop()
            except Exception as exc:
                self._fail(probe, "stop", exc)
                continue
            self.outcome.metrics.extend((f"probe.{probe.name}.{metric}", float(value), unit)
                                        for metric, value, unit in result.metrics)
            for series_name, columns in result.series.items():
                self.outcome.series[(probe.name, series_name)] = series_to_ipc(columns)
            status = self.outcome.status[probe.name]
            status["stop_s"] = time.perf_counter() - begun
            if result.info:
                status["info"] = result.info
        self._started = []
        return self.outcome

    def mark(self, event: str) -> None:
        """Tell the started probes the workload reached ``event`` (see Probe.mark); never raises."""
        for probe in list(self._started):
            try:
                probe.mark(event)
            except Exception:  # a probe's bookkeeping must not break the record channel
                pass

    def abort(self) -> None:
        for probe in self.probes:
            try:
                probe.abort()
            except Exception:
                pass

    def _fail(self, probe: Probe, when: str, exc: Exception) -> None:
        self.outcome.status[probe.name] = {"status": "failed",
                                           "reason": f"{when}: {type(exc).__name__}: {exc}"}
