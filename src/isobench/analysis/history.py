"""Results over time: each comparison of a study followed run after run, its change points, and
what differed between the runs on either side of each.

A **series** is one comparison followed across runs: the study, the workload, the platform entry
as the study names it (its label), the metric and the host's hardware (CPU model, cores,
architecture). Its **points** are each run's ratio to the baseline and 95% interval, ordered by
the run's start. The entry's knobs and the workload's parameters are *not* part of the key: they
are facts recorded with each point, beside the kernel, the runtimes' versions, torch and
isobench, so that changing a knob shows up as a change point attributed to that knob instead of
starting a new series. Only where one run holds several comparisons of one key (a knob or
parameter swept, a cluster's nodes) do the values that tell them apart join the key, as its
``variant``.

**Change points** come from Apache Otava (E-divisive means, then a t-test between the segments
either side; see :data:`MAX_PVALUE` and :func:`min_magnitude` for why its settings suit series of
5 to 10 runs). **Attribution** names every recorded fact whose value differs between the last run
before a change and the first run after it; a fact that is also constant on each side is marked
steady, the likelier cause.

Pure functions over :class:`Run` and :class:`Point` data where possible, so synthetic series test
them; :func:`run_from_store` and :func:`load_runs` are where stores and history files come in.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isobench.analysis.verdict import DEFAULT_MARGIN
from isobench.errors import UserError
from isobench.runtime_versions import HOST_TOOLS
from isobench.store import history_db

if TYPE_CHECKING:
    from isobench.analysis.compare import Comparison
    from isobench.store import Store

#: the Otava release isobench.sh installs (``pip install --no-deps``: its wheel pins an older numpy)
OTAVA_VERSION = "0.8.0"
#: Otava's sliding window, in runs. A study is re-run per upgrade, so a history rarely holds more
#: than a few dozen runs: one window then covers it whole, and past 30 runs a window still holds
#: enough runs on each side of a change for the t-test while an old level no longer masks a new one.
WINDOW_LEN = 30
#: the t-test's threshold between the segments either side of a change (Otava's own default is
#: 0.001). A point is a whole run, and 5-10 runs leave a t-test 3 to 8 degrees of freedom. On
#: synthetic series with 2% run-to-run noise and a 20% step made by the newest run, 0.001 found it
#: in 38% of 5-run and 75% of 6-run series, 0.005 in 79% and 85% (87-91% at 8-10 runs); false
#: alarms on steady 5-10-run series stayed at 1-3% (under 1% where min_magnitude, below, is three
#: times the run-to-run noise).
MAX_PVALUE = 0.005
#: a t-test needs at least three runs (two on one side)
MIN_POINTS = 3
#: a fact a run did not record
ABSENT = "-"
KEY_FIELDS = ("study", "workload", "entry", "metric", "host", "variant")


@dataclass(frozen=True)
class SeriesKey:
    study: str
    workload: str
    #: the platform entry's key: its label, or its name when it has none
    entry: str
    metric: str
    #: the host's hardware (host_identity): results from other hardware are another series
    host: str
    #: what tells apart several comparisons of one key in one run ("cpus=2"); "" for most series
    variant: str = ""

    def as_list(self) -> list[str]:
        return [getattr(self, name) for name in KEY_FIELDS]

    def words(self) -> str:
        return f"{self.workload} {self.entry}" + (f" [{self.variant}]" if self.variant else "") + f" {self.metric}"


@dataclass
class Point:
    """One run's comparison of a series."""

    key: SeriesKey
    ratio: float
    ci_low: float | None
    ci_high: float | None
    n: int
    verdict: str
    is_aa: bool
    #: how far from 1 this run's A/A interval reached for the workload and metric (None: no A/A)
    noise_floor: float | None
    margin: float
    #: the platform as the run's cells named it ("docker/runc")
    display: str
    #: fact -> value (both text): what the run ran with, compared at each change point
    facts: dict[str, str]
    run_id: str = ""
    started_at: float = 0.0
    directory: str = ""

    def record(self) -> dict[str, Any]:
        """The point as the history database keeps it (its run's fields are the run's row)."""
        return {"series": self.key.as_list(), "ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "n": self.n, "verdict": self.verdict, "is_aa": self.is_aa, "noise_floor": self.noise_floor,
                "margin": self.margin, "display": self.display, "facts": self.facts}

    @classmethod
    def from_record(cls, record: dict[str, Any], run: Run) -> Point:
        return cls(SeriesKey(*(str(v) for v in record["series"])), float(record["ratio"]),
                   _number(record.get("ci_low")), _number(record.get("ci_high")), int(record.get("n") or 0),
                   str(record.get("verdict") or ""), bool(record.get("is_aa")), _number(record.get("noise_floor")),
                   float(record.get("margin") or DEFAULT_MARGIN), str(record.get("display") or ""),
                   {str(k): str(v) for k, v in (record.get("facts") or {}).items()},
                   run.run_id, run.started_at, run.directory)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class Run:
    """One study run: a result directory, or its record in a history database."""

    run_id: str
    study: str
    directory: str
    started_at: float
    points: list[Point] = field(default_factory=list)

    def started(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.started_at))


@dataclass
class FactChange:
    fact: str
    before: str
    after: str
    #: the fact holds one value throughout the segment before and another throughout the one after
    steady: bool


@dataclass
class ChangePoint:
    #: the first point of the new level, in the series' points
    index: int
    run_id: str
    #: the mean ratio of the segment before and of the one after
    before: float
    after: float
    pvalue: float
    attribution: list[FactChange]

    @property
    def change(self) -> float:
        return self.after / self.before - 1 if self.before else math.nan


@dataclass
class Series:
    key: SeriesKey
    points: list[Point]
    #: the smallest relative change called a change (min_magnitude); set by detect()
    min_magnitude: float = DEFAULT_MARGIN
    change_points: list[ChangePoint] = field(default_factory=list)


# -- runs from result directories -----------------------------------------------------------

def host_identity(fingerprint: dict[str, Any]) -> str:
    """The hardware part of a host fingerprint, the series key's host: what makes ratios from two
    machines incomparable. The kernel, the versions and the hostname are facts, not the key, so an
    upgrade is a change point in one series rather than a new series."""
    return f"{fingerprint.get('cpu_model') or '?'}, {fingerprint.get('cores') or '?'} cores, " \
           f"{fingerprint.get('machine') or '?'}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def host_facts(fingerprint: dict[str, Any]) -> dict[str, str]:
    """The facts a run's host fingerprint gives every point (fingerprint.py)."""
    facts = {name: _text(fingerprint[name]) for name in ("kernel", "os", "python", "torch", "torchvision",
                                                          "isobench", "gpu", "governor", "turbo", "hostname")
             if fingerprint.get(name) is not None}
    if isinstance(fingerprint.get("memory_bytes"), int | float):
        facts["memory"] = f"{fingerprint['memory_bytes'] / 2**30:.1f} GiB"
    tools = fingerprint.get("versions")
    for tool, version in (tools.items() if isinstance(tools, dict) else []):
        facts[f"host {tool}"] = str(version)  # installed on the host; an entry's own versions come first
    return facts


def comparison_facts(c: Comparison, baseline_versions: dict[str, str]) -> dict[str, str]:
    """What the comparison's own cells ran with: the entry's knobs, the workload's parameters, the
    platform and baseline as named, and the engine and runtime versions their cells recorded."""
    facts = {f"knob {k}": _text(v) for k, v in c.knobs.items()}
    facts.update({f"param {k}": _text(v) for k, v in c.params.items()})
    facts["platform"] = c.platform
    facts.update({tool: str(version) for tool, version in c.versions.items()})
    facts["baseline"] = c.baseline
    facts.update({f"baseline {tool}": str(version) for tool, version in baseline_versions.items()})
    return facts


def _versions_by_display(store: Store) -> dict[str, dict[str, str]]:
    """Each platform display's engine and runtime versions, from its cells (the baseline's too)."""
    from isobench.analysis.groups import versions_of

    found: dict[str, dict[str, str]] = {}
    for row in store.conn.execute("SELECT display, platform_info FROM cells WHERE warmup = 0 AND status = 'ok'"):
        found.setdefault(row[0], {}).update(versions_of(row[1]))
    return found


def _node_fingerprints(store: Store) -> dict[str, dict[str, Any]]:
    """A cluster study's per-node fingerprints (the runner's ``hosts`` meta), by host key."""
    try:
        hosts = json.loads(store.meta("hosts") or "{}")
    except ValueError:
        return {}
    return {str(k): v["fingerprint"] for k, v in hosts.items()
            if isinstance(v, dict) and isinstance(v.get("fingerprint"), dict)} if isinstance(hosts, dict) else {}


def run_started_at(store: Store) -> float:
    """When the run started: its first cell's start, else when its store was created."""
    row = store.conn.execute("SELECT MIN(started_at) FROM cells").fetchone()
    if row and row[0] is not None:
        return float(row[0])
    try:
        return float(store.meta("created_at") or 0)
    except ValueError:
        return 0.0


def run_from_store(store: Store) -> Run:
    """A result directory as a run of its study: one point per comparison (as ``isobench summary``
    shows them: none against emulated cells, none across devices, whose ratio is no platform's cost)."""
    from isobench.analysis.compare import compare

    study = store.meta("study_name") or ""
    directory = str(Path(store.directory).resolve())  # the history outlives the shell it was run from
    run = Run(f"{study}@{store.meta('created_at') or directory}", study, directory, run_started_at(store))
    comparisons = [c for c in compare(store) if not c.emulated and not c.incomparable]
    fingerprint, nodes = store.host(), _node_fingerprints(store)
    try:
        schedule = json.loads(store.meta("design") or "{}").get("schedule")
    except (ValueError, AttributeError):
        schedule = None
    baselines = _versions_by_display(store)
    base_keys: dict[SeriesKey, list[tuple[Comparison, dict[str, str]]]] = {}
    for c in comparisons:
        node = nodes.get(c.host, fingerprint)
        facts = {**comparison_facts(c, baselines.get(c.baseline, {})), **host_facts(node)}
        for tool in c.versions:  # the entry's own version of a tool says it; the host's copy would repeat it
            facts.pop(f"host {tool}", None)
        if schedule:
            facts["schedule"] = str(schedule)
        if len(nodes) > 1:
            facts["node"] = c.host
        key = SeriesKey(study, c.workload, c.label, c.metric, host_identity(node))
        base_keys.setdefault(key, []).append((c, facts))
    for key, members in base_keys.items():
        varying = _varying_facts([facts for _, facts in members]) if len(members) > 1 else []
        for c, facts in members:
            variant = ", ".join(f"{name.removeprefix('knob ').removeprefix('param ')}={facts.get(name, ABSENT)}"
                                for name in varying)
            kept = {k: v for k, v in facts.items() if k not in varying}
            run.points.append(Point(SeriesKey(*key.as_list()[:-1], variant), c.ratio, c.ci_low, c.ci_high, c.n,
                                    c.verdict, c.is_aa, c.noise_floor, c.margin, c.platform, kept,
                                    run.run_id, run.started_at, run.directory))
    return run


def _varying_facts(members: list[dict[str, str]]) -> list[str]:
    """The knobs, parameters and node that differ among one run's comparisons of one key (a sweep)."""
    names = sorted({name for facts in members for name in facts
                    if name.startswith(("knob ", "param ")) or name == "node"})
    return [name for name in names if len({facts.get(name, ABSENT) for facts in members}) > 1]


def runs_from_history(path: Path) -> list[Run]:
    """The runs a history database holds (store/history_db.py)."""
    runs = []
    for raw in history_db.load_runs(path):
        run = Run(str(raw["run_id"]), str(raw["study"]), str(raw["directory"]), float(raw["started_at"]))
        try:
            run.points = [Point.from_record(record, run) for record in raw["points"]]
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"run {run.run_id!r} has a damaged point ({err!r})", file=str(path),
                            fix="give the file `isobench run --history FILE` wrote") from None
        runs.append(run)
    return runs


def load_runs(directories: Iterable[Path], history: Path | None) -> list[Run]:
    """The runs of a history database and of result directories, oldest first. A run in both (the
    same study started at the same moment) counts once, as its directory has it now."""
    from isobench.store import Store

    runs: dict[str, Run] = {}
    if history is not None:
        runs.update((run.run_id, run) for run in runs_from_history(history))
    for directory in directories:
        if not directory.is_dir() and history_db.is_history_file(directory):
            raise UserError("a history database given as a result directory", file=str(directory),
                            fix=f"give it as `--history {directory}`")
        store = Store.open(directory)
        try:
            run = run_from_store(store)
        finally:
            store.close()
        runs[run.run_id] = run
    return sorted(runs.values(), key=lambda run: (run.started_at, run.run_id))


def append_to_history(path: Path, directory: Path) -> str:
    """``isobench run --history FILE``: append the finished study's comparisons; returns the note."""
    from isobench.store import Store

    store = Store.open(directory)
    try:
        run = run_from_store(store)
    finally:
        store.close()
    history_db.append_run(path, {"run_id": run.run_id, "study": run.study, "directory": run.directory,
                                 "started_at": run.started_at}, [p.record() for p in run.points])
    return f"history: {len(run.points)} comparison(s) of this run appended to {path} (isobench history --history {path})"


# -- series and change points ---------------------------------------------------------------

def default_metrics() -> set[str]:
    """The metrics a history follows unless told: e2e and the workloads' declared headline metrics
    (those the summary leads with); the others are noisier and many, so they are asked for."""
    from isobench.analysis.metric_sense import declared_metrics

    return {"e2e", *declared_metrics()}


def build_series(runs: list[Run], metrics: set[str] | None = None) -> list[Series]:
    """One series per key, its points in the runs' order; ``metrics``: only these (None: all)."""
    series: dict[SeriesKey, Series] = {}
    for run in sorted(runs, key=lambda r: (r.started_at, r.run_id)):
        for point in run.points:
            if metrics is None or point.key.metric in metrics:
                series.setdefault(point.key, Series(point.key, [])).points.append(point)
    return list(series.values())


def min_magnitude(points: list[Point]) -> float:
    """The smallest relative change between segments called a change: the A/A noise floor the runs
    themselves measured (the median over the series' runs: one noisy run does not set it), and never
    less than the study's equivalence margin (±2%), below which isobench calls a difference none.
    A change no single run could tell from noise is not reported, however many runs repeat it."""
    margin = max((p.margin for p in points), default=DEFAULT_MARGIN)
    floors = [p.noise_floor for p in points if p.noise_floor is not None and math.isfinite(p.noise_floor)]
    return max(margin, statistics.median(floors)) if floors else margin


def _otava() -> Callable[..., Any]:
    try:
        from otava.analysis import compute_change_points
    except ImportError:
        raise UserError("Apache Otava, the change-point detector of `isobench history`, is not installed",
                        field="isobench history",
                        fix=f"run ./isobench.sh setup, or .venv/bin/pip install --no-deps "
                            f"apache-otava=={OTAVA_VERSION}") from None
    return compute_change_points  # type: ignore[no-any-return]


def detect(series: Series) -> Series:
    """Find the series' change points with Otava and attribute each; returns the series."""
    series.min_magnitude = min_magnitude(series.points)
    series.change_points = []
    if len(series.points) < MIN_POINTS:
        return series
    compute = _otava()
    # A list, not a numpy array: Otava 0.8.0 slices a list to each window but reads an array whole,
    # so a second window's indexes ran past the series (a ValueError on series longer than 15 runs).
    values = [float(p.ratio) for p in series.points]
    found, _weak = compute(values, window_len=WINDOW_LEN, max_pvalue=MAX_PVALUE, min_magnitude=series.min_magnitude)
    indexes = sorted({int(cp.index) for cp in found
                      if 0 < int(cp.index) < len(values) and math.isfinite(float(cp.stats.pvalue))})
    stats = {int(cp.index): cp.stats for cp in found}
    for position, index in enumerate(indexes):
        start = indexes[position - 1] if position else 0
        end = indexes[position + 1] if position + 1 < len(indexes) else len(values)
        series.change_points.append(ChangePoint(
            index, series.points[index].run_id, statistics.fmean(values[start:index]),
            statistics.fmean(values[index:end]), float(stats[index].pvalue),
            attribute(series.points, index, start, end)))
    return series


def _fact_rank(fact: str) -> tuple[int, str]:
    """Attribution order: what the study set (knobs, parameters), the platform and its builds,
    then the host's software, then the host itself."""
    if fact.startswith("knob "):
        return 0, fact
    if fact.startswith("param "):
        return 1, fact
    if fact == "platform" or fact in HOST_TOOLS:
        return 2, fact
    if fact.startswith("baseline"):
        return 3, fact
    if fact in ("kernel", "torch", "torchvision", "isobench", "python", "os", "schedule"):
        return 4, fact
    return 5, fact


def attribute(points: list[Point], index: int, start: int = 0, end: int | None = None) -> list[FactChange]:
    """What differed between the last run before a change (``index - 1``) and the first after it
    (``index``). A fact is steady when it also holds one value over the segment before
    (``start:index``) and one over the segment after (``index:end``): steady facts come first."""
    end = len(points) if end is None else end
    before, after = points[index - 1].facts, points[index].facts
    changes = []
    for fact in sorted(set(before) | set(after), key=_fact_rank):
        old, new = before.get(fact, ABSENT), after.get(fact, ABSENT)
        if old == new:
            continue
        steady = all(p.facts.get(fact, ABSENT) == old for p in points[start:index]) and \
            all(p.facts.get(fact, ABSENT) == new for p in points[index:end])
        changes.append(FactChange(fact, old, new, steady))
    return sorted(changes, key=lambda c: not c.steady)  # stable: the rank holds within each kind


def analyse_history(runs: list[Run], metrics: set[str] | None = None) -> list[Series]:
    return [detect(s) for s in build_series(runs, metrics)]


def newest_run(runs: list[Run]) -> Run | None:
    return max(runs, key=lambda r: (r.started_at, r.run_id)) if runs else None


def starts_change(series: Series, run: Run | None) -> ChangePoint | None:
    """The change point the run starts in this series, if it starts one."""
    return next((cp for cp in series.change_points if run is not None and cp.run_id == run.run_id), None)


# -- the JSON record ---------------------------------------------------------------------------

PARAMETERS = {"detector": f"apache-otava {OTAVA_VERSION}: otava.analysis.compute_change_points "
                          "(E-divisive means, t-test between segments)",
              "window_len": WINDOW_LEN, "max_pvalue": MAX_PVALUE, "min_points": MIN_POINTS,
              "min_magnitude": "per series: max(equivalence margin, median A/A noise floor of its runs)"}


def history_document(runs: list[Run], series: list[Series]) -> dict[str, Any]:
    """``isobench history --json``: the runs, then each series with its points and change points."""
    numbers = {run.run_id: i + 1 for i, run in enumerate(runs)}
    newest = newest_run(runs)
    return {
        "parameters": PARAMETERS,
        "runs": [{"run": numbers[r.run_id], "run_id": r.run_id, "study": r.study, "directory": r.directory,
                  "started_at": r.started_at, "started": r.started()} for r in runs],
        "series": [{
            **dict(zip(KEY_FIELDS, s.key.as_list(), strict=True)), "min_magnitude": s.min_magnitude,
            "newest_run_starts_change": starts_change(s, newest) is not None,
            "points": [{"run": numbers.get(p.run_id), "run_id": p.run_id, "started_at": p.started_at,
                        "ratio": p.ratio, "ci_low": p.ci_low, "ci_high": p.ci_high, "n": p.n, "verdict": p.verdict,
                        "is_aa": p.is_aa, "noise_floor": p.noise_floor, "platform": p.display, "facts": p.facts}
                       for p in s.points],
            "change_points": [{"run": numbers.get(cp.run_id), "run_id": cp.run_id, "index": cp.index,
                               "before": cp.before, "after": cp.after, "change": cp.change, "pvalue": cp.pvalue,
                               "attribution": [{"fact": c.fact, "before": c.before, "after": c.after,
                                                "steady": c.steady} for c in cp.attribution]}
                              for cp in s.change_points],
        } for s in series],
    }
