"""The resolving design: what a study gets for the design fields it does not write.

The design that measured best on shared 2-core VMs (docs/statistics.md) is the tool's default,
not the demo's: a study that writes no design field gets

* a **duet** whose two members trade cores every 20 ms, wherever every entry can be placed on
  the layout's cores and wait at a start line (``schedule: duet``);
* cells **sized in seconds** (``min_seconds: 4``) after 10 untimed warm-up items, no warm-up
  rounds (the warm-up items pay a process's lazy set-up);
* ``repetitions: auto``: 6 rounds, then rounds only for the comparisons without a verdict, until
  the time **budget** (``budget:`` in the study or ``--budget 8m``; 8 min by default) or 24 rounds.
  The budget is the horizon: alpha is spent by the larger of the rounds' and the time's share
  (runner/adaptive.py), so a quiet host whose rounds are cheap may use more of them, and a busy one
  spends its alpha by the time its budget ends;
* an **A/A entry** (the baseline again, label ``aa``) when the study has none, so every study
  states its noise floor (``aa: false`` opts out).

A field the study writes always wins. Where the duet cannot apply (tenant groups, VMs, an entry
that chooses its own cores, ``cell_cores: all``, nothing to compare, a one-core host) the study
falls back to ``schedule: sequential`` and the reason is kept: ``isobench plan`` prints it, and the
store keeps it (meta ``design``) for the summary.

Resolution works on the study's text: the filled-in fields are written into the text the runner
stores, with a comment naming them, so a stored study reads the same on any host and a resumed
run plans the same cells. Resolving a resolved text changes nothing.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from isobench.errors import UserError
from isobench.plan.cores import CORE_KNOBS
from isobench.study.aa import is_aa_entry
from isobench.study.model import Study, knob_combinations, parse_duration

#: the budget a study without one gets: seconds of running cells (a duet pair or a tenant group
#: counts once), about the study's own time on a 2-core host
DEFAULT_BUDGET_S = 480.0
#: the resolving design's fields, as they are filled in
RESOLVING_FIELDS: dict[str, Any] = {
    # 4 s, not 2: beside a neighbour an item's time depends on whether the neighbour held its core
    # (resnet-infer's items varied 17-28% beside a half-core busy loop, 4-5% quiet), and a cell's
    # mean averages that over its length. The minimal study beside that loop took 3.6-4.2 min at
    # 4 s (verdicts at 6-9 rounds, A/A ±0.5-1.5%) against 3.8-5.0 min at 2 s (10-18 rounds); a
    # quiet host pays 3.4-3.5 min instead of 2.2 (docs/studies.md)
    "min_seconds": 4,
    "warmup_items": 10,
    "warmup": 0,
    "repetitions": "auto",
}
#: 24 rounds: a cap the time budget, not the count, normally reaches first (12 stopped a quiet
#: study's resnet-infer A/A at ±2.1%, after 3.2 of its 8 minutes, with Docker still inconclusive)
ADAPTIVE = {"min_repetitions": 6, "max_repetitions": 24}
#: the fields that make up a study's design (what `plan` and the summary describe)
DESIGN_FIELDS = ("schedule", "duet_swap_s", "min_seconds", "warmup_items", "warmup", "repetitions", "adaptive",
                 "budget", "cell_cores")
AA_LABEL = "aa"


@dataclass
class Design:
    """What a study's design is and where each part came from."""

    schedule: str
    #: fields the tool filled in (name -> value), in the order they were filled
    filled: dict[str, Any] = field(default_factory=dict)
    #: design fields the study wrote itself
    written: list[str] = field(default_factory=list)
    #: why the duet does not apply (None: it does, or the study chose its schedule)
    fallback: str | None = None
    #: the label of the A/A entry the tool added (None: the study has its own, or opted out)
    aa_added: str | None = None
    #: why no A/A entry was added when the study has none
    aa_missing: str | None = None
    budget_s: float | None = None
    swap_s: float = 0.0

    def sentence(self) -> str:
        """One line a person can read: the design, and why where it is not the resolving one."""
        if self.schedule == "duet":
            trades = f", trading cores every {self.swap_s * 1000:g} ms" if self.swap_s else ", on fixed sides"
            head = f"duet: each entry runs beside a baseline cell of its own{trades}"
        else:
            head = "sequential: one cell at a time, rounds interleaved"
        if self.fallback:
            head += f" (a duet cannot apply: {self.fallback})"
        elif self.schedule != "duet" and "schedule" in self.written:
            head += " (the study's choice)"
        parts = [head]
        if self.budget_s is not None:
            parts.append(f"rounds until each comparison has its verdict, within {_minutes(self.budget_s)}")
        if self.aa_added:
            parts.append(f"A/A entry '{self.aa_added}' added")
        elif self.aa_missing:
            parts.append(f"no A/A entry ({self.aa_missing})")
        return "; ".join(parts)

    def as_meta(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_meta(cls, text: str | None) -> Design | None:
        if not text:
            return None
        try:
            return cls(**json.loads(text))
        except (TypeError, ValueError):
            return None


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min" if seconds >= 60 else f"{seconds:g} s"


def duet_obstacle(study: Study, cores: list[int] | None) -> str | None:
    """Why ``study`` cannot run as a duet on a host with ``cores`` (None: any host), or None."""
    from isobench.platforms import PLATFORMS

    if all(p.key == study.baseline for p in study.platforms):
        return "there is no entry to compare with the baseline"
    if study.tenants or any(p.tenants for p in study.platforms):
        return "the study runs tenant groups, which already run several cells at once"
    if study.cell_cores == "all":
        return "cell_cores: all gives every cell every core"
    for entry in study.platforms:
        platform = PLATFORMS.get(entry.name) if entry.name in PLATFORMS else None
        if platform is not None and not getattr(platform, "start_line", False):
            return f"'{entry.key}' ({entry.name}) cannot hold its cell at a duet's start line"
        for combo in knob_combinations({**study.knobs, **entry.knobs}):
            chosen = [k for k in CORE_KNOBS if combo.get(k) is not None]
            if chosen:
                return f"'{entry.key}' chooses its own cores ({chosen[0]}), which a trading pair cannot share"
            if combo.get("cpus") is not None and cores is not None and combo["cpus"] > max(1, (len(cores) - 1) // 2):
                return (f"'{entry.key}' asks for {combo['cpus']:g} cores, more than one side of a duet has "
                        f"on this host ({len(cores)} cores)")
    if cores is not None and len(cores) < 2:
        return "this host has one core, and a duet needs one for each member"
    return None


def resolve(raw: dict[str, Any], study: Study, cores: list[int] | None) -> tuple[dict[str, Any], Design]:
    """The study's raw mapping with the resolving design filled in where it writes nothing, and the
    design. ``study`` is ``raw`` validated; ``cores``: the host's (None: decide for any host)."""
    written = [name for name in DESIGN_FIELDS if name in raw]
    filled: dict[str, Any] = {}
    out = dict(raw)
    aa_added = aa_missing = None
    platforms = [dict(p) for p in raw.get("platforms") or []]
    baseline = next((p for p in platforms if (p.get("label") or p.get("name")) == study.baseline), None)
    # One rule for the plan and the analysis (study/aa.py): the baseline again but for its label.
    has_aa = any(p.key != study.baseline and is_aa_entry(study, p) for p in study.platforms)
    if not has_aa and study.aa and baseline is not None:
        taken = {p.get("label") or p.get("name") for p in platforms}
        label = next(name for name in (AA_LABEL, *(f"{AA_LABEL}-{i}" for i in range(2, 100))) if name not in taken)
        entry = {k: v for k, v in baseline.items() if k != "label"}
        platforms.append({**entry, "label": label})
        out["platforms"] = platforms
        aa_added = label
    elif not has_aa:
        aa_missing = "aa: false" if not study.aa else "no baseline entry"

    for name, value in RESOLVING_FIELDS.items():
        if name not in raw:
            out[name] = filled[name] = value
    if out.get("repetitions") == "auto" and "adaptive" not in raw:
        out["adaptive"] = filled["adaptive"] = dict(ADAPTIVE)
    # Decide the duet on the study with the A/A entry in: it is one more entry to pair.
    fallback = None
    if "schedule" in raw:
        schedule = str(raw["schedule"])
    else:
        probe = Study(**{**out, "schedule": "sequential"})
        fallback = duet_obstacle(probe, cores)
        schedule = "sequential" if fallback else "duet"
        out["schedule"] = filled["schedule"] = schedule
    budget = None
    if out.get("repetitions") == "auto":
        adaptive = out.get("adaptive") or {}
        written_budget = out.get("budget")
        if written_budget is not None:
            budget = parse_duration(written_budget)
        elif isinstance(adaptive, dict) and adaptive.get("max_time_s") is not None:
            budget = float(adaptive["max_time_s"])
        else:
            out["budget"] = filled["budget"] = f"{DEFAULT_BUDGET_S / 60:g}m"
            budget = DEFAULT_BUDGET_S
    design = Design(schedule=schedule, filled=filled, written=written, fallback=fallback, aa_added=aa_added,
                    aa_missing=aa_missing, budget_s=budget,
                    swap_s=float(out.get("duet_swap_s", Study.model_fields["duet_swap_s"].default))
                    if schedule == "duet" else 0.0)
    return out, design


def with_budget(raw: dict[str, Any], budget: str, file: str) -> dict[str, Any]:
    """``raw`` with the command line's ``--budget`` in force (over the study's own)."""
    try:
        seconds = parse_duration(budget)
    except ValueError as err:
        message, _, fix = str(err).partition("; fix: ")
        raise UserError(message, file=file, field="--budget", fix=fix or None) from None
    out = dict(raw)
    out.setdefault("repetitions", "auto")  # what the resolving design gives a study that writes none
    adaptive = out.get("adaptive")
    if isinstance(adaptive, dict) and adaptive.get("max_time_s") is not None:
        out["adaptive"] = {**adaptive, "max_time_s": seconds}
    else:
        out["budget"] = budget
    if out["repetitions"] != "auto":
        raise UserError(f"--budget sets the time of `repetitions: auto`, but the study fixes "
                        f"repetitions: {out['repetitions']}", file=file, field="repetitions",
                        fix="remove `repetitions` from the study (or write `repetitions: auto`), or drop --budget")
    return out


def resolved_text(raw: dict[str, Any], resolved: dict[str, Any], design: Design, original: str) -> str:
    """The study text to store and run: the original where resolving changed nothing (its comments
    kept), else the resolved mapping under a comment that names what was filled in."""
    if resolved == raw:
        return original
    lines = ["# isobench filled in the resolving design (see docs/studies.md#the-default-design):"]
    lines += [f"#   {name}: {json.dumps(value)}" for name, value in design.filled.items()]
    if design.aa_added:
        lines.append(f"#   an A/A entry '{design.aa_added}' (the baseline again: the noise floor; aa: false opts out)")
    if design.fallback:
        lines.append(f"#   schedule: sequential, as a duet cannot apply: {design.fallback}")
    body = yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True, width=120)
    return "\n".join(lines) + "\n" + body
