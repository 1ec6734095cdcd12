"""The study's comparisons in the Bencher Metric Format (BMF), for tracking a platform's cost over runs.

BMF is a JSON object keyed by benchmark name; each benchmark holds measures keyed by measure
name, each with a ``value`` and optional ``lower_value``/``upper_value``. Here a benchmark is one
comparison group (workload, platform entry against the baseline, knobs), a measure is a compared
metric, the value is the ratio to the baseline and the bounds are its 95% interval: the same
comparisons, ratios and bounds as ``isobench summary --json``.

Names must stay the same from run to run (Bencher tracks a benchmark by its name), so they hold
the study's own labels and knobs, never a run's numbers; the parameters and the host join a name
only where the store needs them to tell groups apart (a sweep, a cluster).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from typing import Any

from isobench.analysis.compare import Comparison, compare
from isobench.report.terminal import fmt_knobs
from isobench.store import Store

#: Bencher's longest benchmark name and measure name
BENCHMARK_NAME_LIMIT, MEASURE_NAME_LIMIT = 1024, 64


def _fit(name: str, limit: int) -> str:
    """``name`` within Bencher's ``limit``: a longer one keeps its start and a digest of the whole,
    so it stays unique and the same in every run."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:limit - len(digest) - 1]}~{digest}"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def benchmark_names(comparisons: list[Comparison]) -> list[str]:
    """One readable name per comparison: "workload / entry vs baseline / knobs"."""
    variants: dict[str, set[str]] = defaultdict(set)
    for c in comparisons:
        variants[c.workload].add(_canonical(c.params))
    several_hosts = len({c.host for c in comparisons}) > 1
    names = []
    for c in comparisons:
        workload = c.workload
        if len(variants[c.workload]) > 1:  # a sweep: the parameters tell its groups apart
            workload += " " + ", ".join(f"{k}={v}" for k, v in sorted(c.params.items()))
        parts = [workload, f"{c.label} vs {c.baseline}"]
        if c.knobs:
            parts.append(fmt_knobs(c.knobs))
        if several_hosts:
            parts.append(f"on {c.host}")
        names.append(" / ".join(parts))
    # Knobs that print alike ({cpus: 1} and {cpus: "1"}) must not merge two groups into one benchmark.
    uses: dict[tuple[str, str], int] = defaultdict(int)
    for name, c in zip(names, comparisons, strict=True):
        uses[name, c.metric] += 1
    for index, c in enumerate(comparisons):
        if uses[names[index], c.metric] > 1:
            group = _canonical([c.workload, c.params, c.label, c.knobs, c.host])
            names[index] += " ~" + hashlib.sha256(group.encode()).hexdigest()[:8]
    return [_fit(name, BENCHMARK_NAME_LIMIT) for name in names]


def _number(value: float | None) -> float | None:
    """JSON has no infinity or NaN: such a bound is left out (a BMF reader would refuse the file)."""
    return value if value is not None and math.isfinite(value) else None


def bmf_document(store: Store) -> dict[str, dict[str, dict[str, float]]]:
    """The BMF object of the comparisons ``summary --json`` prints (emulated cells left out)."""
    comparisons = [c for c in compare(store) if not c.emulated]
    document: dict[str, dict[str, dict[str, float]]] = {}
    for name, c in zip(benchmark_names(comparisons), comparisons, strict=True):
        value = _number(c.ratio)
        if value is None:
            continue
        metric: dict[str, float] = {"value": value}
        low, high = _number(c.ci_low), _number(c.ci_high)
        if low is not None and high is not None:
            metric |= {"lower_value": low, "upper_value": high}
        document.setdefault(name, {})[_fit(c.metric, MEASURE_NAME_LIMIT)] = metric
    return document
