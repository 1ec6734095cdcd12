"""The probe interface: system evidence collected around one cell.

A probe is attached by the runner around each cell: ``start`` right after the
platform launched the cell (before the workload's first phase), ``stop`` after the
cell's process ended (after its last phase), ``abort`` on every exit path. It runs
on the host, in the runner's process (threads or child processes of its own), and
watches the cell through a :class:`ProbeTarget`: host pids and host cgroups, which
every platform can name, so nothing inside the cell changes.

What a probe returns lands in the store under the cell, in the same transaction as
the cell itself: summary metrics (``probe.<probe>.<metric>``, usable by the
analysis like any other metric) and raw series (Arrow tables, one per name).
"""

from __future__ import annotations

import io
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from isobench.target import ProbeTarget


class ProbeSettings(BaseModel):
    """Base for each probe's settings: unknown keys are errors, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class ProbeCheck:
    ok: bool
    reason: str = ""
    #: parts that work only partly here (e.g. perf hardware events), and why
    partial: dict[str, str] = field(default_factory=dict)


@dataclass
class ProbeResult:
    #: (metric, value, unit); stored as ``probe.<probe>.<metric>``
    metrics: list[tuple[str, float, str]] = field(default_factory=list)
    #: name -> columns (equal-length sequences); stored as an Arrow IPC blob
    series: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: facts worth keeping that are not numbers (what was unsupported, lost events, ...);
    #: ``child_cpu_s``: CPU seconds the probe's own child processes used (its cost, beside its threads')
    info: dict[str, Any] = field(default_factory=dict)


class Probe(ABC):
    name: ClassVar[str]
    description: ClassVar[str] = ""
    Settings: ClassVar[type[ProbeSettings]] = ProbeSettings
    #: in the default probe set (cheap enough to run around every cell)
    default: ClassVar[bool] = False

    def __init__(self, settings: ProbeSettings) -> None:
        self.settings = settings

    @classmethod
    @abstractmethod
    def check(cls) -> ProbeCheck:
        """Can this probe run on this host? Cheap; no side effects."""

    @abstractmethod
    def start(self, target: ProbeTarget) -> None:
        """Begin observing ``target``. Must return quickly (start threads, not loops)."""

    @abstractmethod
    def stop(self) -> ProbeResult:
        """Stop observing and return what was seen. Called once, after the cell's process ended."""

    def mark(self, event: str) -> None:
        """The workload reached ``event`` while running (``"done"``: its last record arrived, the
        process still exists). Optional; called from the runner's channel-reader thread, between
        ``start`` and ``stop``. Probes that read counters a container engine removes on exit
        (its cgroup) read them here."""

    def abort(self) -> None:
        """Release everything the probe holds (threads, children, tracefs instances). Idempotent;
        called on every exit path, after ``stop`` too."""

    @classmethod
    def sweep_stale(cls) -> list[str]:
        """Remove leftovers of runners that died (kill -9); return what was removed."""
        return []


def series_to_ipc(columns: dict[str, Any]) -> bytes:
    """Columns -> an Arrow IPC stream (compact, typed, readable by pyarrow/pandas/polars). Not
    compressed: a series is a few KB, and zstd's set-up per stream made reading 40,000 of them
    (a report at 10,000 cells) take 4 s instead of 0.5 s, to save ~8 KB a cell."""
    import pyarrow as pa

    table = pa.table({name: pa.array(values) if not isinstance(values, pa.Array) else values
                      for name, values in columns.items()})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def ipc_to_table(blob: bytes) -> Any:
    import pyarrow as pa

    return pa.ipc.open_stream(blob).read_all()
