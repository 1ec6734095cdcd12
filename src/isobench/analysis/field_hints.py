"""Root-cause hints whose intervention changes the entry itself, not its knobs.

- **The runsc platform** (``runsc-platform``): an overhead on an entry whose platform takes a runsc
  platform (``takes_runsc_platform``), where the evidence points at system calls (the "why" model's
  system calls explain a clear part of the added time) or at the sandbox's own work in a compute
  phase (a phase slowed while the CPU time per item grew): the same entry on the other runsc
  platform (systrap against ptrace) is the test.
- **Cores for the sandbox's own threads** (``sandbox-cores``): where the platform's ``design_caveat``
  says the cells had too few cores for its own threads (gVisor's systrap on one core). No follow-up
  of the study can test it: its cores per cell are the design's, the same for the baseline and for
  every entry; a second core for one entry would be its duet partner's or the harness's. The hint
  says so (``Hint.untestable``) and names the study that would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from isobench.analysis.compare import Comparison
from isobench.analysis.hint_base import (
    PHASE_GROWTH,
    STREAM_PHASES,
    Hint,
    HintStatus,
    e2e_comparisons,
    entry_key,
    intervention_result,
)
from isobench.analysis.interventions import cores_per_cell, intervention, stored_entries, stored_study
from isobench.analysis.views import Context
from isobench.analysis.views.why import why_table_id
from isobench.study.model import PlatformEntry

if TYPE_CHECKING:
    from isobench.platforms.base import Platform

#: each runsc platform's counterpart: how the other one takes a system call
OTHER_RUNSC_PLATFORM = {"systrap": "ptrace", "ptrace": "systrap", "kvm": "systrap"}
#: phases that move data rather than compute (the data-path and stream-path hints read those)
NOT_COMPUTE = frozenset({"fetch_stall", "injected", "queue", *STREAM_PHASES})
#: CPU time per item grown at least this much: the sandbox's own work, with a compute phase slowed
CPU_GROWTH = 1.05
#: the least share of the added time the system calls must explain, its interval above 0
SYSCALL_SHARE = 0.2


def _platform_of(entry: PlatformEntry) -> type[Platform] | None:
    from isobench.platforms import PLATFORMS

    return PLATFORMS.get(entry.name) if entry.name in PLATFORMS else None


def _syscall_evidence(ctx: Context, c: Comparison) -> str | None:
    for a in ctx.attributions():
        if a.comparison is not c and entry_key(a.comparison) != entry_key(c):
            continue
        for row in a.measured:
            if row.mechanism.key != "syscalls" or row.explained is None or row.share is None:
                continue
            low, high = row.explained.interval()
            if low > 0 and row.share[0] >= SYSCALL_SHARE:
                return (f"system calls explain {row.explained.mean * 1e3:.3f} ms ({low * 1e3:.3f}–{high * 1e3:.3f}) of "
                        f"the {a.added * 1e3:.3f} ms added per item ({row.share[0]:.0%})")
    return None


def _cpu_evidence(ctx: Context, c: Comparison) -> str | None:
    own = [p for p in ctx.comparisons if entry_key(p) == entry_key(c)]
    cpu = next((p for p in own if p.metric == "cpu.per_item" and p.significant and p.ratio >= CPU_GROWTH), None)
    phases = sorted((p for p in own if p.metric.startswith("phase.") and p.significant and p.ratio >= PHASE_GROWTH
                     and p.metric.removeprefix("phase.") not in NOT_COMPUTE), key=lambda p: -p.ratio)
    if cpu is None or not phases:
        return None
    grown = ", ".join(f"{p.metric.removeprefix('phase.')} {p.ratio:.2f}×" for p in phases[:3])
    return f"{grown} with the CPU time per item {cpu.ratio:.2f}× the baseline's"


def _priced_workloads(ctx: Context) -> list[Comparison]:
    """Resolved e2e comparisons of real workloads: a unit-cost microbenchmark (syscall-loop,
    fault-loop) is the evidence that prices a mechanism, not an overhead to explain."""
    from isobench.workloads import WORKLOADS

    return [c for c in e2e_comparisons(ctx) if c.workload not in WORKLOADS or WORKLOADS.get(c.workload).unit_cost_of is None]


def judge_either_way(ctx: Context, c: Comparison, fields: dict[str, str]) -> tuple[HintStatus, str] | None:
    """Where the study ran the entry on the other runsc platform: confirmed when its overhead's
    interval is clear of ``c``'s on either side (how the calls are taken sets the cost, whichever
    platform takes them more cheaply), refuted when it moves by under a quarter of the added time
    with the intervals overlapping, else still suspected; None when the study has no such entry."""
    test = intervention_result(ctx, c, {}, fields)
    if test is None:
        return None
    extra = c.mean - c.baseline_mean
    removed = (c.mean - test.mean) / extra if extra > 0 else 0.0
    moved = f"{removed:.0%} of it gone" if removed >= 0 else f"{-removed:.0%} more added"
    said = f"on platform={fields['platform']} ({test.label}) the overhead is {test.ratio:.3f}×, {moved}"
    apart = test.ci_high is not None and test.ci_low is not None and c.ci_low is not None and c.ci_high is not None \
        and (test.ci_high < c.ci_low or test.ci_low > c.ci_high)
    if apart:
        return "confirmed", said + ": how the sandbox takes system calls sets this cost"
    if abs(removed) < 0.25:
        return "refuted", said + ": the cause is elsewhere"
    return "suspected", said + ", not resolved (add repetitions)"


def runsc_platform(ctx: Context) -> list[Hint]:
    """The same entry on the other runsc platform, where system calls or the sandbox's own CPU work
    hold the overhead. Never suggested to an entry already on that platform: each entry is told to
    try the platform it is not on, and an entry beside it on that platform judges the hint."""
    hints = []
    entries = stored_entries(ctx.store)
    for c in _priced_workloads(ctx):
        entry = entries.get(c.label)
        platform = _platform_of(entry) if entry is not None else None
        if entry is None or platform is None or not platform.takes_runsc_platform:
            continue
        if not c.significant or c.ratio <= 1:
            continue
        evidence = _syscall_evidence(ctx, c) or _cpu_evidence(ctx, c)
        if evidence is None:
            continue
        from isobench.platforms.runsc import DEFAULT_PLATFORM

        now = entry.platform or DEFAULT_PLATFORM
        other = OTHER_RUNSC_PLATFORM.get(now)
        if other is None:
            continue
        fields = {"platform": other}
        text = (f"{c.workload} on {c.platform} ({now}){ctx.on_host(c)}: {c.ratio:.3f}× the baseline, {evidence}: "
                f"how the sandbox takes each system call is the suspect, and runsc's platforms take them "
                f"differently (systrap: a seccomp trap and a stub that hands the call to the Sentry; ptrace: the "
                "Sentry traces the workload's threads)")
        figure = why_table_id(c.workload, c.label, c.knobs)
        verdict = judge_either_way(ctx, c, fields)
        if verdict is not None:
            hints.append(Hint("runsc-platform", f"{text}; {verdict[1]}.", figure, status=verdict[0]))
            continue
        hints.append(Hint("runsc-platform", f"{text} (not tested; to test it, add the same entry with `platform: "
                                            f"{other}`, or run `isobench explain`).", figure,
                          test=intervention(c.workload, c.label, fields=fields)))
    return hints


def _why_untestable(schedule: str, cores: int) -> str:
    if schedule == "duet":
        return (f"a duet splits the cell cores into one side per member of a pair, {cores} each here: a second core "
                "for this entry would be its partner's, so the pair would no longer run side by side on cores of "
                "their own")
    return (f"each cell has the {cores} core(s) the harness does not keep: one more would be the harness's, whose "
            "work would then be measured with the platform")


def sandbox_cores(ctx: Context) -> list[Hint]:
    """Too few cores for the sandbox's own threads, as the platform's ``design_caveat`` says: an
    intervention that no follow-up of the study can run (untestable, with why and what would)."""
    entries, study, cores = stored_entries(ctx.store), stored_study(ctx.store), cores_per_cell(ctx.store)
    if study is None or cores is None:
        return []
    hints = []
    for c in _priced_workloads(ctx):
        entry = entries.get(c.label)
        platform = _platform_of(entry) if entry is not None else None
        if entry is None or platform is None or not c.significant or c.ratio <= 1:
            continue
        caveat = platform.design_caveat(entry, cores)
        if caveat is None:
            continue
        why = _why_untestable(study.schedule, cores)
        hints.append(Hint("sandbox-cores", f"{c.workload} on {c.platform}{ctx.on_host(c)}: {c.ratio:.3f}× the baseline, "
                                           f"and {caveat}. More cores for the sandbox's own threads may remove part of "
                                           f"it, but this study cannot test that (untestable here: {why}); a study of "
                                           "its own can: `isobench explain DIR` runs it (schedule: sequential with "
                                           "cell_cores: all), or run on a host with two cores per cell (5 cores "
                                           "for a duet).",
                          why_table_id(c.workload, c.label, c.knobs),
                          untestable=f"{c.workload} on {c.label}: more cores for the sandbox's own threads: {why}"))
    return hints


FIELD_RULES: tuple[Callable[[Context], list[Hint]], ...] = (runsc_platform, sandbox_cores)
