"""More cores for a sandbox's own threads, tested in a study of its own (``isobench explain``).

A ``sandbox-cores`` hint (analysis/field_hints.py) cannot be tested inside its study: the cores per
cell are the design's, the same for every entry. ``isobench explain`` runs the suspect entries
again beside the baseline in a second study, ``schedule: sequential`` with ``cell_cores: all``, so
that every cell gets every core the harness does not keep. The two studies differ in design, so
their raw times are not compared: each entry's overhead ratio against its own study's baseline is.

The verdict, per entry: **confirmed** when the two ratio intervals do not overlap (the overhead
went down, or up: the cores set this cost either way); **refuted** when they overlap and the
overhead moved by less than a quarter (the cause is elsewhere); otherwise still **suspected**.
"""

from __future__ import annotations

import json

from isobench.analysis.compare import Comparison, compare
from isobench.analysis.hint_base import HintStatus
from isobench.analysis.interventions import cores_per_cell, stored_study
from isobench.store import Store

#: what every verdict line starts with: the intervention, and the design it ran under
INTERVENTION = "more cores for the sandbox (sequential, cell_cores: all)"
#: the overhead moved by less than this share of itself, the intervals overlapping: refuted
MOVED = 0.25
_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four"}


def cells_words(schedule: str, cores: int | None) -> str:
    """How a study's cells ran, for a verdict line: "one-core duet cells"."""
    if cores is None:
        return f"{schedule} cells"
    return f"{_NUMBERS.get(cores, str(cores))}-core {schedule} cells"


def _ratio(c: Comparison) -> str:
    interval = f" ({c.ci_low:.3f}–{c.ci_high:.3f})" if c.ci_low is not None and c.ci_high is not None else ""
    return f"{c.ratio:.3f}×{interval}"


def _apart(a: Comparison, b: Comparison) -> bool:
    if a.ci_low is None or a.ci_high is None or b.ci_low is None or b.ci_high is None:
        return False
    return a.ci_high < b.ci_low or a.ci_low > b.ci_high


def cores_verdict(parent: Comparison, cores: Comparison, parent_cells: str = "one-core duet cells",
                  cores_cells: str = "all cores") -> tuple[HintStatus, str]:
    """(status, one line): the entry's overhead ratio on the parent study's cells (``parent``,
    against that study's baseline) against its ratio in the cores study (``cores``, against the
    cores study's own baseline). ``parent_cells`` and ``cores_cells`` say how each study's cells
    ran ("one-core duet cells", "2 cores")."""
    extra = parent.ratio - 1
    removed = (parent.ratio - cores.ratio) / extra if extra > 0 else 0.0
    moved = f"{removed:.0%} of the overhead gone" if removed >= 0 else f"{-removed:.0%} more overhead"
    line = (f"{INTERVENTION}: {parent.workload} on {parent.label} {_ratio(parent)} on {parent_cells} → "
            f"{_ratio(cores)} with {cores_cells}: {moved}")
    if _apart(parent, cores):
        return "confirmed", f"{line}: confirmed"
    if abs(removed) < MOVED:
        return "refuted", f"{line}: refuted (the cores the sandbox's threads get are not what costs here)"
    return "suspected", f"{line}: suspected, not resolved (add repetitions)"


def pairing_key(c: Comparison) -> tuple[str, str, str, str]:
    """What pairs a parent comparison with its cores-study twin: the workload, entry, parameters and
    knobs, but not ``threads``, which the cores study sets to the cores the parent's cells had (the
    parent's torch threads followed its cells' cores without it)."""
    knobs = {k: v for k, v in c.knobs.items() if k != "threads"}
    return (c.workload, c.label, json.dumps(c.params, sort_keys=True, default=str),
            json.dumps(knobs, sort_keys=True, default=str))


def cores_verdicts(parent: Store, cores: Store, suspects: list[tuple[str, str]]) -> list[tuple[HintStatus, str]]:
    """One verdict per e2e comparison of each suspect (workload key, entry key) of the parent
    study, each study read with its own comparisons (``compare``); a suspect the cores study has
    no result for is said so, still suspected."""
    study = stored_study(parent)
    parent_cells = cells_words(study.schedule if study else "?", cores_per_cell(parent))
    count = cores_per_cell(cores)
    cores_cells = f"{count} cores" if count is not None else "all cores"
    wanted = set(suspects)
    theirs = [c for c in compare(cores) if c.metric == "e2e" and not c.is_aa]
    out: list[tuple[HintStatus, str]] = []
    for c in compare(parent):
        if c.metric != "e2e" or c.is_aa or c.emulated or (c.workload, c.label) not in wanted:
            continue
        matches = [t for t in theirs if pairing_key(t) == pairing_key(c)]
        match = next((t for t in matches if t.host == c.host), matches[0] if matches else None)
        if match is None:
            out.append(("suspected", f"{INTERVENTION}: {c.workload} on {c.label}: no result in the cores study"))
            continue
        out.append(cores_verdict(c, match, parent_cells, cores_cells))
    return out
