"""Everything the report says about one study, computed once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.advisor import repetitions_for_halfwidth, repetitions_for_power
from isobench.analysis.attribution import Attribution
from isobench.analysis.compare import Comparison, compare, hosts_of
from isobench.analysis.fleet import FleetRow, fleet_rows, fleet_views
from isobench.analysis.groups import Group, load_groups
from isobench.analysis.hint_base import Hint
from isobench.analysis.hints import hints
from isobench.analysis.stats import log_sd
from isobench.analysis.verdict import NOT_COMPARABLE
from isobench.analysis.views import Context, View, build_views
from isobench.analysis.warnings import Warning_, core_sharing_warning, study_warnings
from isobench.store import Store
from isobench.study.model import Study
from isobench.studyfile import load_study_text


@dataclass
class Advice:
    workload: str
    platform: str
    knobs: dict[str, Any]
    noise: float  # relative sd between repetitions, the larger of the two groups
    n_now: int
    n_halfwidth: int  # per group, for a 95% CI of ±target
    n_power: int  # per group, to detect +target with 80% power
    target: float
    host: str = ""
    #: the comparison's method (paired by round or duet, or Welch): its standard error gives ``noise``
    method: str = ""


@dataclass
class Analysis:
    study: Study
    study_text: str
    host: dict[str, Any]
    groups: list[Group]
    comparisons: list[Comparison]
    views: list[View]
    warnings: list[Warning_]
    hints: list[Hint]
    advice: list[Advice]
    failures: list[str]
    adaptive: dict[str, Any] | None = None
    forced: bool = False
    shown: list[Comparison] = field(default_factory=list)
    #: the hosts the shown comparisons ran on, in first-seen order (one for a single-host study)
    hosts: list[str] = field(default_factory=list)
    #: each comparison spread over the hosts; empty unless the study ran on two or more hosts
    fleet: list[FleetRow] = field(default_factory=list)
    #: store meta ``hosts``: host key -> {"labels": ..., "fingerprint": ...} (empty in older stores)
    hosts_meta: dict[str, Any] = field(default_factory=dict)
    #: the study's results directory (None: an analysis not read from a store on disk)
    directory: Path | None = None
    #: each resolved overhead's mechanisms (analysis/attribution.py)
    attributions: list[Attribution] = field(default_factory=list)


#: how the advisor's noise is read, printed above its table
ADVISOR_NOTE = ("Noise is the per-side spread that each comparison's own method sees (paired by round or duet, "
                "it leaves out what both sides shared); the repetitions assume it stays as it is.")


def advise(groups: list[Group], comparisons: list[Comparison], baseline_key: str, target: float) -> list[Advice]:
    advice = []
    for c in comparisons:
        if c.metric != "e2e" or c.verdict == NOT_COMPARABLE:  # repetitions cannot bridge two devices
            continue
        other = next((g for g in groups if g.workload == c.workload and g.platform_key == c.label
                      and g.knobs == c.knobs and g.host == c.host), None)
        bases = [g for g in groups if g.workload == c.workload and g.platform_key == baseline_key
                 and g.host == c.host]
        base = next((g for g in bases if g.knobs == c.knobs), bases[0] if bases else None)
        if other is None or base is None:
            continue
        sd_a, sd_b = log_sd(other.metrics.get("e2e", [])), log_sd(base.metrics.get("e2e", []))
        if c.se is not None and c.se > 0 and c.n >= 2:
            # The noise the comparison's own method sees: a round- or duet-paired estimate cancels
            # what both sides shared, so its standard error (not the groups' spread) is what more
            # repetitions shrink. Per side: SE = sqrt(2 s² / n).
            sd_a = sd_b = c.se * math.sqrt(c.n / 2)
        if sd_a is None or sd_b is None:
            continue
        advice.append(Advice(c.workload, c.platform, c.knobs, max(sd_a, sd_b), c.n,
                             repetitions_for_halfwidth(sd_a, sd_b, target),
                             repetitions_for_power(sd_a, sd_b, target), target, c.host, c.method))
    return advice


def analyse(store: Store, force: bool = False, target: float = 0.01, with_views: bool = True) -> Analysis:
    text = store.meta("study_yaml") or ""
    study = load_study_text(text, store.meta("study_file") or "store", check_host=False)
    groups = load_groups(store)
    comparisons = compare(store)
    baseline_key = study.baseline or study.platforms[0].key
    adaptive_meta = store.meta("adaptive")
    if study.adaptive is not None:
        target = study.adaptive.target
    ctx = Context(store, groups, comparisons, baseline_key, [p.key for p in study.platforms], ev.cell_index(store),
                  {p.key: p.engine_key() for p in study.platforms})
    shown = [c for c in comparisons if force or not c.emulated]
    if not force:
        ctx.comparisons = shown
    # A ratio across devices (cpu vs cuda) measures the devices: the views and hints leave it out; the
    # comparison table, its sentence and a warning say why.
    ctx.comparisons = [c for c in ctx.comparisons if c.verdict != NOT_COMPARABLE]
    failures = [f"{row['status']}: {row['cell_id']} on {row['display']}: {row['error']}"
                for row in store.cells(include_warmup=True) if row["status"] != "ok"]
    import json

    hosts_meta = load_hosts_meta(store)
    # The fleet views lead: with several hosts, how a platform spreads over them is the first question.
    views = [*fleet_views(shown, hosts_meta), *build_views(ctx)] if with_views else []
    return Analysis(study=study, study_text=text, host=store.host(), groups=groups, comparisons=comparisons,
                    views=views, hosts=hosts_of(shown), fleet=fleet_rows(shown), hosts_meta=hosts_meta,
                    warnings=[*study_warnings(store.host(), groups, comparisons, len(failures), baseline_key, target,
                                             at_once=2 if study.schedule == "duet" else 1),
                              *filter(None, [core_sharing_warning(store.meta("cores"), store.cells())])],
                    hints=hints(ctx), advice=advise(groups, shown, baseline_key, target), failures=failures,
                    attributions=ctx.attributions(),
                    adaptive=json.loads(adaptive_meta) if adaptive_meta else None, forced=force, shown=shown,
                    directory=store.directory)


def load_hosts_meta(store: Store) -> dict[str, Any]:
    """The runner's ``hosts`` meta; a malformed one is ignored (it only labels hosts, never changes numbers)."""
    import json

    raw = store.meta("hosts")
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
