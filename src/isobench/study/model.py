"""The study file's schema (pydantic). Host-dependent checks live in the loader."""

from __future__ import annotations

import itertools
import json
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from isobench.hostinfo import parse_cpu_list

_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_MEMORY_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
MIN_MEMORY = 32 * 2**20
#: cells a study may expand to unless its `max_cells` says otherwise (the loader checks it)
DEFAULT_MAX_CELLS = 100_000


def parse_memory(value: str | int) -> int:
    """``512m``, ``2g``, ``1.5GiB`` or a byte count -> bytes."""
    if isinstance(value, int):
        return value
    match = _MEMORY_RE.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a size; fix: write e.g. 512m or 2g")
    return int(float(match.group(1)) * _MEMORY_UNITS[match.group(2).lower()])


_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}


def parse_duration(value: str | float) -> float:
    """``8m``, ``90s``, ``1.5h`` or a number of seconds -> seconds (positive)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; fix: write e.g. 8m, 90s or 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _DURATION_RE.match(str(value))
        if not match:
            raise ValueError(f"{str(value)[:40]!r} is not a duration; fix: write e.g. 8m, 90s or 1h")
        seconds = float(match.group(1)) * _DURATION_UNITS[(match.group(2) or "").lower()]
    if not 0 < seconds <= 7 * 86400:
        raise ValueError(f"{value!r} is not between 1 s and 7 days; fix: write e.g. 8m, 90s or 1h")
    return seconds


def knob_combinations(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Expand list-valued knobs into their product, in a stable order."""
    keys = sorted(values)
    axes = [values[k] if isinstance(values[k], list) else [values[k]] for k in keys]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes)]


class Knobs(BaseModel):
    """Resource and runtime knobs. Every platform applies them, bare metal included."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpus: float | None = Field(None, gt=0, le=1024, description="CFS quota in cores (fractional)")
    cpuset: str | None = Field(None, description="cores to pin to, e.g. '0' or '0-1'")
    memory: str | None = Field(None, description="memory limit, e.g. 512m, 2g")
    seccomp: Literal["default", "unconfined"] | None = Field(
        None, description="'default': the platform's usual filter; 'unconfined': none")
    threads: int | None = Field(None, ge=1, le=1024, description="torch intra-op threads")
    # Placement, resolved to cpus/cpuset at plan time and kept in the cell as asked (plan/placement.py).
    placement: Literal["pinned", "vanilla"] | None = Field(
        None, description="pinned: a cpuset of N cores; vanilla: a CFS quota of N cores")
    chr: float | None = Field(None, gt=0, le=1, description="container-to-host core ratio: N = chr × host cores")
    reserve_idle_cores: int | None = Field(None, ge=0, le=1024, description="host cores kept free of the cell")
    numa_node: int | None = Field(None, ge=0, le=1024, description="bind the cell's CPUs and memory to a node")
    # Host power state around the cell, restored after it (runner/hostknobs.py).
    governor: str | None = Field(None, description="cpufreq scaling governor, e.g. performance")
    max_freq: str | None = Field(None, description="cpufreq maximum, e.g. 1.8GHz, 1800MHz or kHz")
    power_mode: int | None = Field(None, ge=0, le=64, description="Jetson nvpmodel mode (nvpmodel -m)")
    jetson_clocks: bool | None = Field(None, description="Jetson: clocks locked at their maximum")
    #: an injected effect, to check on any host that a cost of this size is seen (workloads/timing.py)
    slowdown: float | None = Field(None, ge=0, le=10, description="make each timed item this fraction longer "
                                   "(0.03: 3% slower) with extra work on its thread: the inference and "
                                   "training loops sized in seconds run their own work again, other loops "
                                   "spin; any platform")
    slowdown_phases: str | None = Field(None, description="with slowdown: put it inside these phases "
                                        "(comma-separated, e.g. 'optimizer'), each this fraction longer, "
                                        "instead of at the item's end; the host clock only")
    #: injected causes of a known mechanism and count (workloads/mechanisms.py), at each item's end
    extra_syscalls: int | None = Field(None, ge=0, le=10**8, strict=True,
                                       description="add this many getppid() system calls to the end of each "
                                       "timed item, in its `injected` phase; any platform")
    extra_faults: int | None = Field(None, ge=0, le=10**7, strict=True,
                                     description="add this many minor page faults (fresh pages touched once) to "
                                     "the end of each timed item, in its `injected` phase; any platform")
    #: glibc allocator settings, applied by the worker on every platform (workloads/allocator.py)
    malloc: Literal["tuned"] | None = Field(
        None, description="tuned: glibc keeps freed memory (mmap threshold 32 MiB, trim threshold 256 MiB, "
        "top pad 64 MiB) instead of mapping and unmapping it each time; any platform")
    #: an injected extra writer on the device (workloads/file_writer.py): write-back calls, not time
    extra_writebacks: float | None = Field(None, gt=0, le=20, description="file-writer: a side thread dirties a "
                                           "second file beside the checkpoint and has the kernel's flusher write "
                                           "it back (syncfs) this many times a second, at random moments; any "
                                           "platform")
    data_mount: Literal["bind", "copy", "volume"] | None = Field(
        None, description="docker: data set bind-mounted, copied into the writable layer, or a named volume")

    @field_validator("max_freq", mode="before")
    @classmethod
    def _max_freq(cls, value: Any) -> Any:
        from isobench.hostinfo import parse_frequency_khz

        if value is not None:
            parse_frequency_khz(value)
            return str(value)
        return None

    @field_validator("cpuset", mode="before")
    @classmethod
    def _cpuset(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, int):
            value = str(value)
        if isinstance(value, list):
            value = ",".join(str(v) for v in value)
        try:
            parse_cpu_list(str(value))
        except ValueError as err:
            raise ValueError(f"{value!r} is not a CPU list ({err}); fix: write cores like '0', '0-1' or '0,2'") \
                from None
        return str(value)

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        if value is None:
            return None
        size = parse_memory(value)
        if size < MIN_MEMORY:
            raise ValueError(f"{value!r} is below the 32m a Python process needs; fix: use 32m or more")
        return str(value)

    def memory_bytes(self) -> int | None:
        return parse_memory(self.memory) if self.memory is not None else None

    def cpuset_list(self) -> list[int] | None:
        return parse_cpu_list(self.cpuset) if self.cpuset is not None else None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


#: knob values in a study may be lists: each list is swept (one cell group per value)
KnobValues = dict[str, Any]


class WorkloadEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    #: parameter -> list of values; each value gives its own cell group
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return self.label or self.name


class PlatformEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    label: str | None = None
    runtime: str | None = None
    image: str | None = Field(None, description="user image with Python, torch and isobench inside")
    knobs: KnobValues = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    #: gvisor only: how runsc intercepts system calls (its cost per call differs by orders of magnitude)
    platform: Literal["systrap", "ptrace", "kvm"] | None = Field(
        None, description="gvisor: the runsc platform, systrap (gVisor's default), ptrace or kvm")
    #: oci and gvisor: another build of the runtime binary, so two versions run as two entries
    runtime_path: str | None = Field(None, description="oci, gvisor: the runtime binary to run instead of "
                                     "the one on PATH")
    #: N cells at once behind a barrier, or a list of workload keys (mixed tenants); see plan/tenants.py
    tenants: int | list[str] | None = Field(None, description="cells run at once: a count or workload keys")

    @property
    def key(self) -> str:
        return self.label or self.name

    #: the fields that say which sandbox runs a cell: two entries alike in all of them run the same
    #: engine whatever their labels, knobs or tenants (the A/A rule, interference, density use this)
    ENGINE_FIELDS: ClassVar[tuple[str, ...]] = ("name", "runtime", "image", "options", "platform", "runtime_path")

    def engine_key(self) -> tuple[str, ...]:
        """The engine as a comparable value: every field of ENGINE_FIELDS, as JSON."""
        return tuple(json.dumps(getattr(self, field), sort_keys=True) for field in self.ENGINE_FIELDS)

    @property
    def engine_name(self) -> str:
        """``oci/runc``, ``gvisor/ptrace``, ``gvisor (/opt/.../runsc)``: the engine as people name it."""
        name = "/".join(part for part in (self.name, self.runtime, self.platform) if part)
        return f"{name} ({self.runtime_path})" if self.runtime_path else name


class Adaptive(BaseModel):
    """`repetitions: auto`: add interleaved rounds until every comparison is this precise, or a budget ends."""

    model_config = ConfigDict(extra="forbid")

    target: float = Field(0.01, gt=0, lt=1, description="95% CI half-width to reach, relative (0.01: ±1%)")
    metric: str = Field("e2e", description="the metric whose comparisons must reach the target")
    min_repetitions: int = Field(3, ge=2, le=10_000, description="rounds run before the first check")
    max_repetitions: int = Field(30, ge=2, le=10_000, description="budget: rounds at most")
    #: the cells that run at once (a duet pair, a tenant group) count once, as long as their longest
    max_time_s: float | None = Field(None, gt=0, description="budget: seconds of running cells at most")

    @model_validator(mode="after")
    def _order(self) -> Adaptive:
        if self.max_repetitions < self.min_repetitions:
            raise ValueError("max_repetitions is below min_repetitions; fix: raise max_repetitions")
        return self


class Hosts(BaseModel):
    """Which nodes of a Ray cluster run the study (`isobench run --ray`), and how cells spread over them."""

    model_config = ConfigDict(extra="forbid")

    #: node label -> wanted value (or any of a list): Ray labels from `ray start --labels`, and the
    #: labels isobench detects on every node (gpu, arch, cpu_model, docker, kvm; see `doctor --ray`)
    labels: dict[str, str | list[str]] = Field(default_factory=dict)
    #: spread: each measured round runs whole on one host (same-host baselines), rounds spread over
    #: the hosts; each: every host runs the whole study (a fleet characterisation)
    mode: Literal["spread", "each"] = "spread"
    #: cells a node runs at once; above 1 they measure each other: only for co-location experiments
    cells_per_node: int = Field(1, ge=1, le=64)


class Study(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: how the design was resolved (isobench.design.Design), set by the loader that filled it in
    _design: Any = PrivateAttr(None)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    workloads: list[WorkloadEntry] = Field(min_length=1)
    platforms: list[PlatformEntry] = Field(min_length=1)
    baseline: str | None = None
    knobs: KnobValues = Field(default_factory=dict)
    repetitions: Annotated[int, Field(ge=1, le=10_000)] | Literal["auto"] = 5
    #: settings for `repetitions: auto` (see isobench.runner.adaptive)
    adaptive: Adaptive | None = None
    warmup: int = Field(1, ge=0, le=100)
    seed: int = 0
    timeout_s: float = Field(600.0, gt=0, le=7 * 24 * 3600, description="per-cell timeout")
    #: VM platforms may run under TCG emulation where KVM does not work (results labelled emulated)
    allow_emulation: bool = False
    #: probe name -> settings; absent: the default probe set; {} : no probes
    probes: dict[str, dict[str, Any] | None] | None = None
    #: cluster runs only (`--ray`): node selection and how cells spread; ignored by a local run
    hosts: Hosts | None = None
    #: the most cells the study may expand to: a typo in a sweep must not plan a billion cells
    max_cells: int = Field(DEFAULT_MAX_CELLS, ge=1, le=10**9, description="cells the study may expand to")
    #: disjoint: the cell's cores and the harness's (runner, probe samplers, container engine) do not
    #: overlap, and torch threads follow the cell's cores; all: the cell may use every core
    cell_cores: Literal["disjoint", "all"] = "disjoint"
    #: sequential: one cell at a time, rounds interleaved and shuffled; duet: the baseline and each
    #: compared entry run at the same time on disjoint cores, sides swapped every round (plan/duet.py)
    schedule: Literal["sequential", "duet"] = "sequential"
    #: a duet's two cells trade cores every this many seconds from their start line on (0: never), so
    #: that a core running slow for a while slows both alike (plan/duet.py)
    duet_swap_s: float = Field(0.02, ge=0, le=60, description="seconds between a duet's core trades")
    #: TOST margin: a ratio whose 90% CI lies within [1/(1+m), 1+m] is "equivalent"
    equivalence_margin: float = Field(0.02, gt=0, lt=1, description="equivalence margin (0.02: ±2%)")
    #: untimed items at the start of every cell: a process's first items pay for lazy set-up
    warmup_items: int = Field(0, ge=0, le=100_000, description="untimed items first in every cell")
    #: every workload that can runs at least this long per cell (its `min_seconds`), whatever its item count
    min_seconds: float | None = Field(None, ge=0, le=7 * 86400, description="cell length in seconds")
    #: a cell whose cores were busy with other work beyond this share of its measured window is contaminated
    contamination_threshold: float = Field(0.10, gt=0, le=1, description="share of the cell's core time "
                                           "taken by steal or other tasks that flags the cell")
    #: `repetitions: auto`'s time budget (8m, 90s, 1h, or seconds): seconds of running cells, a duet
    #: pair or tenant group counted once; the same as `adaptive.max_time_s`
    budget: float | None = Field(None, description="time budget of repetitions: auto, e.g. 8m")
    #: add an A/A entry (the baseline again, label `aa`) when the study has none (design.py)
    aa: bool = Field(True, description="add an A/A entry when the study has none")
    #: contaminated cells re-run at most this many times each (each re-run is recorded as one)
    reruns: int = Field(1, ge=0, le=10, description="re-runs of a contaminated cell")

    @field_validator("budget", mode="before")
    @classmethod
    def _budget(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("probes")
    @classmethod
    def _probes(cls, value: dict[str, dict[str, Any] | None] | None) -> dict[str, dict[str, Any]] | None:
        if value is None:
            return None
        # each probe's own settings are checked by the loader, which knows the probes
        return {name: dict(settings or {}) for name, settings in value.items()}

    #: default `tenants` of every platform entry that sets none
    tenants: int | None = Field(None, ge=1, le=64, description="cells run at once on every platform entry")

    @model_validator(mode="after")
    def _unique_keys(self) -> Study:
        for what, entries in (("platforms", self.platforms), ("workloads", self.workloads)):
            seen: dict[str, int] = {}
            for index, entry in enumerate(entries):
                if entry.key in seen:
                    raise ValueError(
                        f"{what}[{index}] repeats {entry.key!r} of {what}[{seen[entry.key]}]; "
                        "fix: give one of them a distinct `label`")
                seen[entry.key] = index
        if self.baseline is None:
            self.baseline = self.platforms[0].key
        if self.repetitions == "auto" and self.adaptive is None:
            self.adaptive = Adaptive()
        elif self.repetitions != "auto" and self.adaptive is not None:
            raise ValueError("adaptive: is set but repetitions is a number; fix: write `repetitions: auto`")
        if self.budget is not None:
            if self.repetitions != "auto":
                raise ValueError("budget: is set but repetitions is a number; fix: write `repetitions: auto`, "
                                 "or drop `budget`")
            assert self.adaptive is not None
            if self.adaptive.max_time_s is not None and self.adaptive.max_time_s != self.budget:
                raise ValueError("budget: and adaptive.max_time_s both set the time budget; fix: keep one")
            self.adaptive.max_time_s = self.budget
        return self

    @property
    def initial_repetitions(self) -> int:
        """Measured rounds planned up front (adaptive studies add more as they go)."""
        if self.repetitions == "auto":
            return self.adaptive.min_repetitions if self.adaptive else 3
        return self.repetitions

    def baseline_entry(self) -> PlatformEntry:
        return next(p for p in self.platforms if p.key == self.baseline)
