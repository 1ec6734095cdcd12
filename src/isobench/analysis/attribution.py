"""Why a platform costs what it costs: counts per item × unit costs, against the time it added.

For a resolved overhead (a platform entry's e2e time per item above the baseline's, its interval
clear of 1), each mechanism below predicts how much of the added time it explains:

    explained = n_platform × c_platform − n_baseline × c_baseline      (seconds per item)

where ``n`` is how many events (system calls, page faults) one item of the workload makes, counted
in the cell's measured window and divided by the items measured there, and ``c`` is what one
event costs on that entry, measured on the same host in the same study by the mechanism's
microbenchmark (``syscall-loop``, ``fault-loop``): its own phase per item over the events it
makes per item (its ``injected`` phase, if any, is left out, so an entry with injected work still
has a clean unit cost). The interval is the delta method's from the per-cell spread of every
term (95%, Student's t on the fewest cells of any term); the share divides it by the added time's
own interval, so it is wide when either is. What the mechanisms do not explain is the rest, shown as such, never spread over them.

Where the platform runs its own kernel (gVisor's Sentry, a VM's guest), host-side counts are that
kernel's work, not the workload's: the workload's own counts are taken from the baseline (the same
interpreter and code make the same calls), and the row says so. A mechanism whose microbenchmark
is not in the study is listed as not measured, with what to add.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from isobench.analysis.compare import Comparison
from isobench.analysis.groups import host_of
from isobench.analysis.tdist import t_ppf
from isobench.store import Store

#: two-sided 95% normal quantile, for an interval with unlimited degrees of freedom; the intervals
#: here are delta-method approximations with Student's t on the fewest degrees of freedom involved
Z95 = 1.959964


@dataclass(frozen=True)
class Mechanism:
    key: str
    #: plural noun for sentences ("system calls")
    name: str
    #: one event, for "per ..." ("call")
    event: str
    #: per-cell count over the measured window (``per_item``: already per measured item)
    count_metric: str
    #: the microbenchmark that prices one event, and its own phase metric (None: ``fixed_cost``)
    unit_workload: str | None
    unit_phase: str | None
    #: the knob that injects this mechanism's events (ground truth; removing it is its intervention)
    inject_knob: str | None
    #: the probe that counts the events (None: the worker or the runner counts them itself)
    count_probe: str | None
    #: why the platform's own count may be missing, for the row's note
    hidden_note: str = ""
    #: knobs that remove or cut this mechanism where the entry's platform takes them, and why
    #: (a knob set to None: the entry without it)
    interventions: tuple[tuple[dict[str, Any], str], ...] = ()
    per_item: bool = False
    #: seconds per event, the same on every platform (a throttled second is a second of wall time)
    fixed_cost: float | None = None
    #: a platform with a kernel of its own (gVisor, a VM) hides the workload's own events from the host
    hidden_by_own_kernel: bool = True
    #: how counts are shown: times this, in this unit ("" for plain counts)
    count_scale: float = 1.0
    count_unit: str = ""
    #: the name takes a plural verb ("system calls explain", "CFS throttling explains")
    plural: bool = True


MECHANISMS: tuple[Mechanism, ...] = (
    Mechanism("syscalls", "system calls", "call", "probe.syscalls.window_calls", "syscall-loop", "phase.syscalls",
              "extra_syscalls", "syscalls",
              "counted on the baseline: the platform's own kernel serves them out of the host's sight",
              (({"seccomp": "unconfined"}, "without the seccomp filter each call skips its check"),)),
    Mechanism("page_faults", "page faults", "fault", "process.run.page_faults_minor", "fault-loop", "phase.faults",
              "extra_faults", None, "counted on the baseline: the platform's kernel reports no fault counts",
              (({"malloc": "tuned"}, "glibc then keeps freed memory instead of unmapping it, so the same pages are "
                                     "not faulted in again each item"),)),
    # the runner reads the cell's CFS throttled time at both ends of the measured window
    # (runner/interference.py): a throttled second is a second the item waits, on any platform
    Mechanism("throttling", "CFS throttling", "throttled", "cpu.throttled_per_item", None, None, None, None,
              interventions=(({"cpus": None}, "without the CPU quota the cell is never throttled"),),
              per_item=True, fixed_cost=1.0, hidden_by_own_kernel=False, count_scale=1e3, count_unit="ms", plural=False),
    # evidence only: every thread of the cell's cgroup (a sandbox's own threads too), counted by the
    # runner over the window; no microbenchmark prices a switch yet (its cost is mostly the caches
    # it cools, which a tight loop cannot see), so the row shows the counts and prices nothing
    Mechanism("switches", "host context switches", "switch", "cpu.switches_per_item", None, None, None, None,
              per_item=True, hidden_by_own_kernel=False),
)

#: knobs that only inject work (ground truth), never part of what an entry is
INJECTION_KNOBS = frozenset({m.inject_knob for m in MECHANISMS if m.inject_knob} | {"slowdown", "slowdown_phases", "extra_writebacks"})


@dataclass
class Estimate:
    mean: float
    se: float
    #: degrees of freedom behind ``se`` (cells less one; a combination takes its terms' fewest):
    #: a handful of cells needs Student's t, not the normal quantile
    df: float = math.inf

    def interval(self) -> tuple[float, float]:
        if self.se == 0:
            return self.mean, self.mean
        if self.df < 1 or math.isinf(self.se):
            return -math.inf, math.inf
        q = t_ppf(0.975, self.df) if math.isfinite(self.df) else Z95
        return self.mean - q * self.se, self.mean + q * self.se


@dataclass
class Row:
    mechanism: Mechanism
    #: events per item on the baseline and on the platform (None: not counted)
    n_baseline: Estimate | None = None
    n_platform: Estimate | None = None
    #: the platform's count was taken from the baseline (its own kernel hides it)
    assumed: bool = False
    #: seconds per event on each side (None: the microbenchmark did not run there)
    c_baseline: Estimate | None = None
    c_platform: Estimate | None = None
    #: seconds per item this mechanism adds (None: not measured, see ``missing``)
    explained: Estimate | None = None
    share: tuple[float, float, float] | None = None
    missing: str = ""


@dataclass
class Attribution:
    comparison: Comparison
    #: the added seconds per item and its interval
    added: float
    added_low: float
    added_high: float
    rows: list[Row] = field(default_factory=list)
    #: the rest no measured mechanism explains, with its interval (None: nothing measured)
    rest: Estimate | None = None

    @property
    def measured(self) -> list[Row]:
        return [r for r in self.rows if r.explained is not None]


def _estimate(values: list[float]) -> Estimate | None:
    if not values:
        return None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return Estimate(mean, math.inf, 0)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return Estimate(mean, math.sqrt(var / len(values)), len(values) - 1)


#: (workload plugin or key, platform key, knobs JSON, params JSON, host) -> metric -> per-cell values
CellKey = tuple[str, str, str, str, str]


def _per_cell(store: Store) -> tuple[dict[CellKey, dict[str, list[float]]], set[str]]:
    """Per group of cells, the per-cell values the model needs: the count metrics per measured item,
    and the microbenchmarks' seconds per event; and the workload keys that are microbenchmarks."""
    wanted = {"e2e", "workload.events_per_item", *(m.count_metric for m in MECHANISMS),
              *(m.unit_phase for m in MECHANISMS if m.unit_phase)}
    values: dict[str, dict[str, float]] = defaultdict(dict)
    marks = ",".join("?" * len(wanted))
    for cell_id, metric, value in store.conn.execute(
            f"SELECT cell_id, metric, value FROM metrics WHERE metric IN ({marks})", tuple(sorted(wanted))):
        values[cell_id][metric] = value
    items = _items_per_cell(store)
    unit_of = {m.unit_workload: m for m in MECHANISMS if m.unit_workload}
    out: dict[CellKey, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    pricing: set[str] = set()
    for cell in store.cells():
        if cell["workload"] in unit_of:
            pricing.add(cell["workload_key"])
        own = values.get(cell["cell_id"])
        if cell["status"] != "ok" or not own or "e2e" not in own:
            continue
        rest = (cell["platform_key"], json.dumps(cell["knobs"], sort_keys=True),
                json.dumps(cell["params"], sort_keys=True), host_of(cell["platform_info"]))
        key = (cell["workload_key"], *rest)
        count = items.get(cell["cell_id"]) or 0
        own_kernel = bool((cell["platform_info"] or {}).get("own_kernel"))
        for mech in MECHANISMS:
            if mech.count_metric not in own or (own_kernel and mech.hidden_by_own_kernel):
                continue
            if mech.per_item:
                out[key][mech.count_metric].append(own[mech.count_metric])
            elif count:
                out[key][mech.count_metric].append(own[mech.count_metric] / count)
        unit = unit_of.get(cell["workload"])
        events = own.get("workload.events_per_item")
        if unit is not None and unit.unit_phase and events and unit.unit_phase in own:
            out[(f"unit:{unit.key}", cell["platform_key"], rest[1], "", rest[3])]["cost"].append(
                own[unit.unit_phase] / events)
    return out, pricing


def _items_per_cell(store: Store) -> dict[str, int]:
    return store.item_counts()


def reads_per_item(store: Store) -> dict[tuple[str, str, str, str], tuple[float, float]]:
    """(workload key, platform key, knobs JSON, host) -> the bytes of files and the read calls the
    worker itself made per measured item (``process.run.read_*``), means over its cells: what the
    data path carries."""
    items = _items_per_cell(store)
    found: dict[tuple[str, str, str, str], list[tuple[float, float]]] = defaultdict(list)
    values: dict[str, dict[str, float]] = defaultdict(dict)
    for cell_id, metric, value in store.conn.execute(
            "SELECT cell_id, metric, value FROM metrics WHERE metric IN "
            "('process.run.read_bytes', 'process.run.read_calls')"):
        values[cell_id][metric] = value
    for cell in store.cells():
        count, own = items.get(cell["cell_id"]), values.get(cell["cell_id"], {})
        if cell["status"] == "ok" and count and len(own) == 2:
            found[(cell["workload_key"], cell["platform_key"], json.dumps(cell["knobs"], sort_keys=True),
                   host_of(cell["platform_info"]))].append(
                (own["process.run.read_bytes"] / count, own["process.run.read_calls"] / count))
    return {key: (sum(b for b, _ in v) / len(v), sum(c for _, c in v) / len(v)) for key, v in found.items()}


def _unit_cost(data: dict[CellKey, dict[str, list[float]]], mech: Mechanism, platform_key: str,
               knobs: dict[str, Any] | None, host: str) -> Estimate | None:
    """The entry's seconds per event: its microbenchmark with the same knobs (None: any of the
    entry's), injection knobs aside: the unit phase excludes injected work, so any of the entry's
    variants prices it alike. A mechanism with a fixed cost needs no microbenchmark."""
    if mech.fixed_cost is not None:
        return Estimate(mech.fixed_cost, 0.0)
    plain = None if knobs is None else {k: v for k, v in knobs.items() if k not in INJECTION_KNOBS}
    found: list[float] = []
    for (workload, key, knob_text, _, cell_host), metrics in data.items():
        if workload != f"unit:{mech.key}" or key != platform_key or cell_host != host:
            continue
        other = {k: v for k, v in json.loads(knob_text).items() if k not in INJECTION_KNOBS}
        if plain is None or other == plain:
            found += metrics.get("cost", [])
    return _estimate(found)


def _product(n: Estimate, c: Estimate) -> Estimate:
    return Estimate(n.mean * c.mean, math.sqrt((c.mean * n.se) ** 2 + (n.mean * c.se) ** 2), min(n.df, c.df))


def attribute(store: Store, comparisons: list[Comparison], baseline_key: str) -> list[Attribution]:
    """One attribution per resolved e2e overhead (slower, interval clear of 1, not an A/A, not emulated,
    not one of the microbenchmarks that price the mechanisms: those measure the mechanism itself)."""
    data, pricing = _per_cell(store)
    found = []
    for c in comparisons:
        if (c.metric != "e2e" or c.is_aa or c.workload in pricing or c.emulated or not c.significant or c.ratio <= 1
                or c.ci_low is None or c.ci_high is None or c.ci_low <= 1):
            continue
        params = json.dumps(c.params, sort_keys=True)
        platform = data.get((c.workload, c.label, json.dumps(c.knobs, sort_keys=True), params, c.host), {})
        base = next((m for (w, key, _, p, h), m in data.items()
                     if w == c.workload and key == baseline_key and p == params and h == c.host), {})
        added = c.mean - c.baseline_mean
        result = Attribution(c, added, (c.ci_low - 1) * c.baseline_mean, (c.ci_high - 1) * c.baseline_mean)
        for mech in MECHANISMS:
            row = Row(mech, _estimate(base.get(mech.count_metric, [])), _estimate(platform.get(mech.count_metric, [])))
            row.c_baseline = _unit_cost(data, mech, baseline_key, None, c.host)
            row.c_platform = _unit_cost(data, mech, c.label, c.knobs, c.host)
            if mech.fixed_cost is not None and row.n_baseline is None and row.n_platform is not None:
                row.n_baseline = Estimate(0.0, 0.0)  # a baseline the runner could not read is never throttled
            if row.n_platform is None and row.n_baseline is not None:
                row.n_platform, row.assumed = row.n_baseline, True
            if row.n_baseline is None:
                row.missing = (f"{mech.name} not counted (add the {mech.count_probe} probe)" if mech.count_probe
                               else f"{mech.name} not counted here")
            elif mech.unit_workload is None and mech.fixed_cost is None:
                row.missing = "evidence only: nothing prices one yet"
            elif row.c_baseline is None or row.c_platform is None:
                row.missing = f"unit cost not measured (add workload {mech.unit_workload} to the study)"
            else:
                assert row.n_platform is not None
                if row.assumed:  # one count on both sides: only the unit cost differs
                    diff = Estimate(row.c_platform.mean - row.c_baseline.mean,
                                    math.hypot(row.c_platform.se, row.c_baseline.se),
                                    min(row.c_platform.df, row.c_baseline.df))
                    row.explained = _product(row.n_baseline, diff)
                else:
                    one, other = _product(row.n_platform, row.c_platform), _product(row.n_baseline, row.c_baseline)
                    row.explained = Estimate(one.mean - other.mean, math.hypot(one.se, other.se), min(one.df, other.df))
                low, high = row.explained.interval()
                if added > 0 and result.added_low > 0:
                    row.share = (row.explained.mean / added, low / result.added_high, high / result.added_low)
            result.rows.append(row)
        if result.measured:
            added_se = (result.added_high - result.added_low) / (2 * Z95)
            explained = [r.explained for r in result.measured if r.explained is not None]
            result.rest = Estimate(added - sum(e.mean for e in explained),
                                   math.sqrt(added_se ** 2 + sum(e.se ** 2 for e in explained)),
                                   min([c.n - 1, *(e.df for e in explained)]))
        found.append(result)
    return found
