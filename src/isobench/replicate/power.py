"""`isobench replicate --power`: can each check's design see an effect of the paper's size?

For every check whose effect can be injected, the check's study (its ``--quick`` variant under
``--quick``) runs again with two platforms only: the study's baseline entry, and a copy of it
under the compared entry's label carrying the injected effect (the ``slowdown`` knob, with
``slowdown_phases`` where the check reads named phases). The two arms differ only by the
injection, so the check's own analysis, run on that store, should read "holds": "seen". Anything
else is "missed", and a "does not hold" of that check in the real run is no evidence: it reads
"not testable by this design" (:func:`apply_power`).

What can be injected here: a ratio check of timed phases (``phase.*``) or of the item's ``e2e``,
on a platform other than the baseline, whose effect slows the compared arm (a ratio above 1);
and a ratio check of the device's write-back calls (``probe.ftrace.device_*``), whose injected
arm carries an extra writer on the same device instead (the ``extra_writebacks`` knob, sized
in replicate/writeback_power.py). Other counts (faults, cycles: ``probe.*``) would need an
injected process, which is not built; ratios of ratios, largest-phase, value and difference
checks would need an injection per workload or a known amount; each says so instead of a result.

The injected size is the check's ``effect:`` (the paper's figure on the check's scale). A check
without one gets an effect derived from its ``expect: "> x"`` (twice the threshold's distance
from 1, in log units, as the threshold is what the rule asks for, not the paper's size), and the
result says it was derived.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table
from rich.text import Text

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, FAILS, HOLDS, UNTESTABLE, combine
from isobench.analysis.finding_result import FindingResult
from isobench.analysis.finding_spec import Check, PaperFindings
from isobench.design import ADAPTIVE
from isobench.errors import UserError
from isobench.replicate import writeback_power
from isobench.report.plaintext import markup
from isobench.store import Store

#: the ``slowdown`` knob's ceiling (study/model.py): an effect beyond 1 + this cannot be injected
MAX_SLOWDOWN = 10.0
#: repetitions of a power run at toy size (``--quick``): enough for an interval
QUICK_REPETITIONS = 3
SEEN, MISSED, NOT_INJECTED, NOT_RUN = "seen", "missed", "not injected", "not run"


@dataclass
class PowerPlan:
    """One check's injection, or why it has none (``reason``)."""

    finding: str
    what: str
    study: str
    effect: float | None = None
    #: "effect" (the check's paper figure) or the words saying how it was derived from ``expect``
    effect_from: str = ""
    #: the phases the injection goes into (empty: the whole item, for ``e2e``)
    phases: tuple[str, ...] = ()
    reason: str = ""
    #: "slowdown" (time) or "writer" (an extra writer's device write-back calls)
    inject: str = "slowdown"
    #: with "writer": its syncfs calls a second, set from the paper's run before the power run
    #: (writeback_power.writer_rate), and what they were sized on
    rate: float | None = None
    rate_from: str = ""

    @property
    def injected(self) -> bool:
        return not self.reason

    @property
    def slug(self) -> str:
        index = "".join(ch if ch.isalnum() else "-" for ch in self.what.lower()).strip("-")
        return f"{self.finding}-{index}"[:80]

    def knobs(self) -> dict[str, Any]:
        """The knobs the injected arm adds to the baseline entry's."""
        if self.inject == "writer":  # unsized (no paper's run read yet): the periodic calls' rate
            rate = self.rate or (float(self.effect or 1.0) - 1.0) / writeback_power.flusher_period_s()
            return {"extra_writebacks": round(min(max(rate, 1e-3), writeback_power.MAX_RATE), 4)}
        knobs: dict[str, Any] = {"slowdown": round(float(self.effect or 1.0) - 1.0, 6)}
        if self.phases:
            knobs["slowdown_phases"] = ",".join(self.phases)
        return knobs


@dataclass
class PowerResult:
    finding: str
    what: str
    #: seen, missed, not injected (reason), not run (reason)
    status: str
    effect: float | None = None
    effect_from: str = ""
    injected: str = ""
    shown: str = ""
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    #: the check's own verdict on the injected store
    verdict: str = ""
    reason: str = ""
    directory: str = ""

    def as_record(self) -> dict[str, Any]:
        return asdict(self)


def _metric_names(metric: str | list[str]) -> list[str]:
    return [metric] if isinstance(metric, str) else list(metric)


def derived_effect(check: Check) -> tuple[float | None, str]:
    """The effect to inject when the check names none: from ``expect: "> x"`` on a ratio."""
    expect = check.expectation
    if expect.op != ">" or expect.value <= 1.0:
        return None, f"no `effect:`, and expect {expect.describe()} gives no slowdown to inject"
    return expect.value ** 2, f"derived from expect {expect.describe()} (no `effect:`): twice its distance from 1"


def _plan_writer(plan: PowerPlan, check: Check, count_effect: float | None) -> PowerPlan:
    """An extra writer for a device write-back check: its own effect, else its finding's count's."""
    plan.inject = "writer"
    if check.effect is not None:
        plan.effect, plan.effect_from = check.effect, "effect"
    elif count_effect is not None:
        plan.effect = count_effect
        plan.effect_from = "no `effect:` (the paper gives no figure for it): the writer of its finding's count check"
    else:
        plan.reason = "no `effect:` on it or its finding's write-back count: nothing to size an extra writer by"
    if plan.effect is not None and plan.effect <= 1.0:
        plan.reason = f"the effect {plan.effect:g} is fewer calls: an extra writer can only add calls"
    return plan


def plan_check(finding: str, check: Check, default_study: str, baseline: str | None = None,
               count_effect: float | None = None) -> PowerPlan:
    """The injection for one check, or the reason it has none. ``baseline`` is the study's (None:
    not known here, e.g. a check of another study); ``count_effect`` its finding's effect on the
    device write-back count (writeback_power.count_effect), for a write-back check without one."""
    plan = PowerPlan(finding, check.what, check.study or default_study)
    names = _metric_names(check.metric)
    if check.kind != "ratio":
        plan.reason = f"a {check.kind.replace('_', ' ')} check: only a ratio of timed phases is injected"
    elif check.against_workload or check.knobs or check.against_knobs is not None:
        plan.reason = "a comparison across workloads or within a knob sweep: no single entry to substitute"
    elif baseline is not None and (check.against or baseline) == check.platform:
        plan.reason = "the compared entry is the baseline itself"
    elif writeback_power.is_writeback_check(check):
        _plan_writer(plan, check, count_effect)
    elif check.per or not all(n == "e2e" or n.startswith("phase.") for n in names):
        other = next((n for n in names if not (n == "e2e" or n.startswith("phase."))), check.per or "")
        counted = other.startswith(("probe.", "process.")) or check.per
        plan.reason = (f"{other} is a count or probe reading: injecting it needs an extra process, which is "
                       "not built (only device write-backs get an extra writer)" if counted
                       else f"{other} is not a timed item phase, the only time the slowdown knob lengthens")
    else:
        effect, said = (check.effect, "effect") if check.effect is not None else derived_effect(check)
        if effect is None:
            plan.reason = said
        elif effect <= 1.0:
            plan.reason = f"the effect {effect:g} is a speed-up: added work can only slow an arm down"
        elif effect - 1.0 > MAX_SLOWDOWN:
            plan.reason = f"the effect {effect:g} is beyond the slowdown knob's 1 + {MAX_SLOWDOWN:g}"
        elif "e2e" in names and len(names) > 1:
            plan.reason = "e2e summed with phases: no single place to inject"
        else:
            plan.effect, plan.effect_from = effect, said
            plan.phases = tuple(n.removeprefix("phase.") for n in names if n != "e2e")
    return plan


def plan_power(paper: PaperFindings, only: set[str] | None = None,
               baselines: dict[str, str] | None = None) -> list[PowerPlan]:
    """A plan for every check that compares cells (checks with only ``needs`` are left out), of
    the findings in ``only`` when given."""
    default_study = paper.studies[0] if paper.studies else ""
    baselines = baselines or {}
    return [plan_check(f.id, c, default_study, baselines.get(c.study or default_study),
                       writeback_power.count_effect(f.checks))
            for f in paper.findings if only is None or f.id in only
            for c in f.checks if c.workload]


def _key(entry: dict[str, Any]) -> str:
    return str(entry.get("label") or entry.get("name"))


def power_study(data: dict[str, Any], plan: PowerPlan, check: Check, quick: bool) -> dict[str, Any]:
    """The study ``data`` (as the replication runs it) cut to the check's workload, its baseline
    entry and that entry again under the compared label with the injection added: nothing else
    differs between the two arms."""
    out = copy.deepcopy(data)
    workloads = [w for w in out.get("workloads", []) if _key(w) == check.workload]
    if not workloads:
        raise UserError(f"{plan.finding} {check.what!r}: study {plan.study} has no workload {check.workload!r}")
    platforms = out.get("platforms", [])
    baseline = check.against or out.get("baseline") or (_key(platforms[0]) if platforms else "")
    base = next((p for p in platforms if _key(p) == baseline), None)
    if base is None:
        raise UserError(f"{plan.finding} {check.what!r}: study {plan.study} has no platform {baseline!r}")
    injected = copy.deepcopy(base)
    injected["label"] = check.platform
    injected["knobs"] = {**(base.get("knobs") or {}), **plan.knobs()}
    out.update(workloads=workloads, platforms=[base, injected], baseline=baseline, aa=False)
    metrics = _metric_names(check.metric)
    if out.get("repetitions", "auto") == "auto" and len(metrics) == 1 and metrics[0] != "e2e":
        # Rounds go on until the metric the check reads has its verdict, not the item's e2e: an
        # injected 4% in a phase that is 6% of the item moved e2e by 0.2%, so a power run that
        # stopped on e2e "equivalent" at 6 pairs read the phase inside its noise (F22, 2026-11-28).
        written = out.get("adaptive")
        out["adaptive"] = {**(written if isinstance(written, dict) else ADAPTIVE), "metric": metrics[0]}
    if quick and isinstance(out.get("repetitions"), int) and out["repetitions"] < QUICK_REPETITIONS:
        out["repetitions"] = QUICK_REPETITIONS
    return out


def _check_of(paper: PaperFindings, plan: PowerPlan) -> Check:
    finding = next(f for f in paper.findings if f.id == plan.finding)
    return next(c for c in finding.checks if c.what == plan.what)


def injected_words(plan: PowerPlan) -> str:
    if plan.inject == "writer" and plan.effect is not None:
        sized = f": {plan.rate_from}" if plan.rate_from else ""
        return f"an extra writer for {plan.effect:.4g}× the device write-back calls{sized}"
    where = ", ".join(plan.phases) if plan.phases else "the whole item"
    return f"{plan.effect:.4g}× in {where}" if plan.effect is not None else ""


def read_power(paper: PaperFindings, plan: PowerPlan, directory: Path, missing: dict[str, str]) -> PowerResult:
    """The check's own analysis on the injected store: seen when it reads "holds"."""
    from isobench.analysis.findings import Sources, evaluate_check

    check = _check_of(paper, plan)
    result = evaluate_check(Sources({plan.study: directory}), check, plan.study, missing)
    base = PowerResult(plan.finding, plan.what, MISSED, plan.effect, plan.effect_from, injected_words(plan),
                       result.shown, result.estimate, result.ci_low, result.ci_high, result.verdict,
                       result.reason, str(directory))
    if result.verdict == UNTESTABLE:
        base.status = NOT_RUN
    elif result.verdict == HOLDS:
        base.status = SEEN
    return base


def not_injected(plan: PowerPlan) -> PowerResult:
    return PowerResult(plan.finding, plan.what, NOT_INJECTED, reason=plan.reason)


def _baselines(paper: PaperFindings, texts: dict[str, str]) -> dict[str, str]:
    found = {}
    for study, text in texts.items():
        data = yaml.safe_load(text)
        platforms = data.get("platforms") or []
        found[study] = data.get("baseline") or (_key(platforms[0]) if platforms else "")
    return found


def run_power(paper: PaperFindings, out: Path, resume: bool, quick: bool, max_minutes: float | None,
              missing: dict[str, str], console: Console, only: set[str] | None = None) -> list[PowerResult]:
    """Each injectable check's power run, under ``out/<paper>/power/<finding>-<check>/``, read by
    the check's analysis; checks that cannot be injected say why."""
    from isobench.replicate.study_text import study_text
    from isobench.runner.study import run_study

    texts = {s: study_text(paper, s, quick, max_minutes) for s in paper.studies}
    results = []
    #: a power study already run, by its text: checks that inject the same thing into the same cells
    #: (F6's count and its intervals) read one store instead of running the same cells twice
    ran: dict[str, Path] = {}
    for plan in plan_power(paper, only, _baselines(paper, texts)):
        if not plan.injected:
            results.append(not_injected(plan))
            continue
        check = _check_of(paper, plan)
        absent = [missing[n] for n in check.needs if n in missing]
        if absent or plan.study not in texts:
            results.append(PowerResult(plan.finding, plan.what, NOT_RUN, plan.effect, plan.effect_from,
                                       injected_words(plan), reason=absent[0] if absent else
                                       f"study {plan.study} is not one of the paper's"))
            continue
        directory = out / paper.paper / "power" / plan.slug
        if plan.inject == "writer" and plan.effect is not None:
            baseline = check.against or _baselines(paper, {plan.study: texts[plan.study]})[plan.study]
            plan.rate, plan.rate_from = writeback_power.writer_rate(plan.effect, out / paper.paper / plan.study,
                                                                    check.workload or "", baseline)
        wanted = yaml.safe_dump(power_study(yaml.safe_load(texts[plan.study]), plan, check, quick), sort_keys=False)
        if wanted in ran:
            console.print(markup("[bold]{}[/]: power run for {} {}: the same cells as {}", paper.paper,
                                 plan.finding, plan.what, ran[wanted].name))
            results.append(read_power(paper, plan, ran[wanted], missing))
            continue
        again = resume and Store.exists(directory)
        if Store.exists(directory) and not again:
            raise UserError("results already there", file=str(directory),
                            fix="add --resume to finish them, or choose another --out")
        console.print(markup("[bold]{}[/]: power run for {} {}: {}", paper.paper, plan.finding, plan.what,
                             injected_words(plan)))
        directory.parent.mkdir(parents=True, exist_ok=True)
        run_study(None if again else wanted, None if again else plan.study, directory, again, console)
        ran[wanted] = directory
        results.append(read_power(paper, plan, directory, missing))
    return results


def power_words(result: PowerResult) -> str:
    """One line: "seen: 1.54× (1.48–1.60) for an injected 1.537× in forward, backward, optimizer"."""
    if result.status in (NOT_INJECTED, NOT_RUN):
        return f"{result.status}: {result.reason}"
    said = f"{result.status}: {result.shown or 'no estimate'} for an injected {result.injected}"
    if result.effect_from != "effect":
        said += f" ({result.effect_from})"
    return said if result.status == SEEN else f"{said}; the check read {result.verdict}"


def apply_power(paper: PaperFindings, results: list[FindingResult], power: list[PowerResult]) -> None:
    """A check that reads "does not hold" while its power run missed an injected effect of the
    paper's size reads "not testable by this design", and its finding's verdict is combined again."""
    missed = {(p.finding, p.what): p for p in power if p.status == MISSED}
    findings = {f.id: f for f in paper.findings}
    for result in results:
        changed = False
        for check in result.checks:
            miss = missed.get((result.id, check.what))
            if miss is not None and check.verdict == FAILS:
                check.verdict, check.repetitions_needed = DESIGN_UNTESTABLE, None
                check.reason = f"the design missed an injected effect of the paper's size ({power_words(miss)})"
                changed = True
        finding = findings.get(result.id)
        if changed and finding is not None:
            combined = combine(finding, finding.checks, result.checks, None)
            result.verdict, result.reason = combined.verdict, combined.reason
            result.repetitions_needed, result.words = combined.repetitions_needed, combined.words


def power_rows(power: list[PowerResult]) -> list[tuple[str, str, str, str, str]]:
    """(finding, check, injected, estimate, outcome) per result, for the terminal and the page."""
    rows = []
    for p in power:
        effect = "" if p.effect is None or math.isnan(p.effect) else (
            p.injected + ("" if p.effect_from == "effect" else " (derived)"))
        outcome = p.status if p.status in (SEEN, MISSED) else f"{p.status}: {p.reason}"
        if p.status == MISSED:
            outcome += f" (read {p.verdict})"
        rows.append((p.finding, p.what, effect, p.shown, outcome))
    return rows


POWER_COLUMNS = ("finding", "check", "injected", "estimate on the injected store", "outcome")


def print_power(power: list[PowerResult], console: Console, title: str) -> None:
    table = Table(title=title, show_lines=True)
    for column in POWER_COLUMNS:
        table.add_column(column, overflow="fold")
    for cells in power_rows(power):
        table.add_row(*(Text(c) for c in cells), style={SEEN: "green", MISSED: "red"}.get(cells[4].split(" (")[0], "dim"))
    console.print(table)


def markdown_power(power: list[PowerResult]) -> list[str]:
    from isobench.report.plaintext import md

    lines = ["| " + " | ".join(POWER_COLUMNS) + " |", "|" + "---|" * len(POWER_COLUMNS)]
    lines += ["| " + " | ".join(md(v).replace("|", "\\|") for v in cells) + " |" for cells in power_rows(power)]
    return lines
