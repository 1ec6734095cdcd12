"""pyperf-style warnings: what makes a result untrustworthy, and what to do about it."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis import hostload
from isobench.analysis.blocked import estimate
from isobench.analysis.compare import Comparison
from isobench.analysis.contamination import contamination_text
from isobench.analysis.groups import Group
from isobench.analysis.stats import CROSSOVER_METHOD, DUET_METHOD, PAIRED_METHOD, fmt_floor, log_sd
from isobench.analysis.verdict import MAX_NEEDED, NOT_COMPARABLE, fmt_margin
from isobench.plan.cells import closest_by_knobs

#: robust z (0.6745·|x − median| / MAD) above which a repetition is an outlier (Iglewicz–Hoaglin)
OUTLIER_Z = 3.5
#: ... and at least this far from the median (log scale, about 3%), so tight groups are not flagged for 1%
OUTLIER_MIN_LOG = 0.03
#: relative standard deviation per side above which results are called unstable (pyperf: 10%), of the
#: noise the comparison's own method sees: a paired one's per-pair log ratios (over √2, per side),
#: an unpaired one's groups between repetitions
UNSTABLE_SD = 0.10
#: a paired method's words, for saying which noise a warning measured
PAIRED_WORDS = {PAIRED_METHOD: "round-paired", DUET_METHOD: "duet-paired", CROSSOVER_METHOD: "duet crossover"}
#: below this median share of a duet pair's windows measured at once, the pairs are no duet
MIN_DUET_OVERLAP = 0.5


@dataclass
class Warning_:
    kind: str
    text: str
    #: what it is about, for collapsing many warnings of one kind into one line
    subject: str = ""

    def __str__(self) -> str:
        return self.text


def outlier_reps(pairs: list[tuple[int, float]]) -> list[tuple[int, float, float]]:
    """(rep, value, robust z) of repetitions whose log value is far from the others'."""
    if len(pairs) < 4 or min(v for _, v in pairs) <= 0:
        return []
    logs = [math.log(v) for _, v in pairs]
    median = statistics.median(logs)
    mad = statistics.median(abs(x - median) for x in logs)
    if mad == 0:
        mad = statistics.fmean(abs(x - median) for x in logs) * 1.2533 or 0.0
        if mad == 0:
            return []
    found = []
    for (rep, value), x in zip(pairs, logs, strict=True):
        z = 0.6745 * abs(x - median) / mad
        # and far in absolute terms too: with tight repetitions a 1% step has a huge robust z
        if z > OUTLIER_Z and abs(x - median) > OUTLIER_MIN_LOG:
            found.append((rep, value, z))
    return found


def study_warnings(host: dict[str, Any], groups: list[Group], comparisons: list[Comparison],
                   failed_cells: int, baseline_key: str, target: float = 0.01, at_once: int = 1) -> list[Warning_]:
    """``at_once``: cells the schedule runs at the same time (2 in a duet), so their own load is
    not taken for a neighbour's."""
    found: list[Warning_] = []
    # -- the host --
    governor = host.get("governor")
    if governor not in (None, "performance"):
        found.append(Warning_("host", f"CPU governor is {governor!r}, not 'performance': frequency scaling adds "
                                      "noise. Run `cpupower frequency-set -g performance` before the study."))
    if host.get("turbo"):
        found.append(Warning_("host", "turbo boost is on: clock speed depends on temperature and on how many cores "
                                      "are busy. Turn it off (intel_pstate/no_turbo=1 or cpufreq/boost=0) for "
                                      "stable numbers."))
    cores = host.get("cores") or 1
    before = host.get("load_before_setup") if isinstance(host.get("load_before_setup"), dict) else None
    # Judged on a CPU-busy sample from before the runner's set-up (analysis/hostload.py); a store
    # without one falls back to a load average that only a saturated host exceeds.
    text = (hostload.before_setup_warning(before, cores) if before
            else hostload.legacy_load_warning(host.get("loadavg_at_start"), cores))
    if text:
        found.append(Warning_("host", text))
    names = {m for g in groups for m in g.metrics}
    start_load = [v for g in groups for v in g.metrics.get("probe.environment.loadavg_1m_start", [])]
    # the cells' own tasks (one, or a duet's two) and the D-state tasks an idle host holds are no neighbour
    if start_load and hostload.cell_start_excess(statistics.fmean(start_load), before, at_once) > 0.5 * cores:
        found.append(Warning_("host", f"the 1-minute load average was {statistics.fmean(start_load):.1f} on average "
                                      f"when cells started ({cores} cores; environment probe), more than the "
                                      f"study's own {at_once} cell(s) and the idle host's D-state tasks account "
                                      "for: other work shared the CPU during the study. Re-run on a quiet host; "
                                      "interleaving spreads the harm but widens the intervals."))
    host_busy = ev.find_metric(names, r"^probe\.\w+\.host_cpu(_percent|_util)?$", r"^probe\.\w+\.host.*cpu.*(pct|percent|util)")
    own = ev.find_metric(names, r"^probe\.proc\.cpu_percent$", r"^probe\.proc\.cpu.*(mean|avg)")
    if host_busy:
        values = [v for g in groups for v in g.metrics.get(host_busy, [])]
        own_values = [v for g in groups for v in g.metrics.get(own, [])] if own else []
        busy = statistics.fmean(values) if values else 0.0
        mine = statistics.fmean(own_values) / cores if own_values else 0.0
        if busy - mine * at_once > 25:
            found.append(Warning_("host", f"the host was {busy:.0f}% busy on average during cells ({host_busy}), "
                                          f"well above what the cells themselves used: other load ran during the "
                                          "study. Re-run on a quiet host."))
    # -- the design --
    if comparisons and not any(c.is_aa for c in comparisons):
        found.append(Warning_("design", "no A/A entry, so the study's noise floor is unknown: add a second "
                                        "baseline entry with a label (e.g. `- {name: baremetal, label: aa}`)."))
    contaminated = contamination_text(groups, comparisons, at_once)  # its advice agrees with the A/A
    if contaminated:
        found.append(Warning_("contaminated", contaminated))
    if failed_cells:
        found.append(Warning_("cells", f"{failed_cells} cell(s) did not finish: their groups have fewer "
                                       "repetitions; `isobench summary DIR` lists why."))
    # -- the results --
    # A study over several hosts: each warning names the host it is about.
    multi = len({g.host for g in groups}) > 1
    where = (lambda item: f" on host {item.host}") if multi else (lambda item: "")  # noqa: E731
    # A group that only paired comparisons read is judged by its pairs' ratios instead: a round that
    # ran slow or fast on both sides of a pair is what the pairing cancels.
    paired_only = paired_only_groups(groups, comparisons, baseline_key)
    found += pair_outlier_warnings(groups, comparisons, baseline_key, where)
    for g in groups:
        pairs = [] if g.key in paired_only else g.reps.get("e2e", [])
        for rep, value, z in outlier_reps(pairs):
            median = statistics.median(v for _, v in pairs)
            found.append(Warning_("outlier", f"{g.workload} on {ev.group_label(g)}{where(g)}: repetition {rep} is an outlier "
                                             f"(e2e {value * 1e3:.2f} ms vs median {median * 1e3:.2f} ms, robust "
                                             f"z={z:.1f}): something else ran then. Check the host, re-run, or add "
                                             "repetitions."))
        if g.platform_key != baseline_key and g.duet_overlaps \
                and statistics.median(g.duet_overlaps) < MIN_DUET_OVERLAP:
            found.append(Warning_("overlap", f"{g.workload} on {ev.group_label(g)}{where(g)}: its duet pairs measured "
                                             f"at the same time for only {statistics.median(g.duet_overlaps):.0%} of "
                                             "their windows (median): each pair compares different moments, so "
                                             "the host's drift is not cancelled. Add a warm-up round (`warmup: 1`), "
                                             "from which the runner learns how much later to start the sooner-ready "
                                             "member."))
    found += spread_warnings(groups, comparisons, baseline_key, where)
    for c in comparisons:
        if c.metric != "e2e" or c.emulated:
            continue
        if c.verdict == NOT_COMPARABLE:
            found.append(Warning_("device", f"{c.workload} on {c.platform}{where(c)}: {NOT_COMPARABLE}: "
                                            f"{c.verdict_reason}. Its ratio to {c.baseline} measures the devices, "
                                            "not the platform; more repetitions cannot change that.",
                                  f"{c.workload} on {c.platform}{where(c)}"))
        if c.verdict == "inconclusive" and not c.is_aa and c.ci_low is not None:
            if c.repetitions_needed is None:
                advice = ""
            elif c.repetitions_needed >= MAX_NEEDED:
                advice = f" More than {MAX_NEEDED} repetitions per group would be needed at this noise."
            else:
                advice = f" About {c.repetitions_needed} repetitions per group would settle it at this noise."
            floor = "" if c.noise_floor is None else f"; A/A noise floor {fmt_floor(c.noise_floor)}"
            found.append(Warning_("floor", f"{c.workload} on {c.platform}{where(c)}: {c.ratio - 1:+.1%} is neither a "
                                           f"resolved difference nor shown equivalent within {fmt_margin(c.margin)} "
                                           f"(inconclusive{floor}).{advice}",
                                  f"{c.workload} on {c.platform}{where(c)} {c.ratio - 1:+.1%}"))
        if c.significant and c.p_holm is not None and c.p_holm >= 0.05:
            found.append(Warning_("holm", f"{c.workload} on {c.platform}{where(c)}: the interval excludes 1 but not after "
                                          f"Holm's correction for the study's comparisons (adjusted p={c.p_holm:.3f}); "
                                          "treat it as a lead, not a finding, or add repetitions."))
    found = _collapse(found, "unstable", "the noise that each comparison's own method sees exceeds 10% per side "
                                         "in {n} places ({items}): results are unstable. Tune the host, lengthen "
                                         "each cell, or add repetitions.")
    found = _collapse(found, "floor", "{n} comparisons are inconclusive ({items}): neither a difference nor "
                                      "equivalence is resolved. Add repetitions (see the sample-size advisor) or "
                                      "quiet the host.")
    for display in sorted({c.platform for c in comparisons if c.emulated}):
        found.append(Warning_("emulated", f"{display} ran under emulation (no hardware virtualisation): its times "
                                          "measure the emulator, not the platform; its comparisons are left out. "
                                          "Pass --force to show them."))
    return found


def paired_noise(c: Comparison) -> float | None:
    """The SD of a paired comparison's per-pair log ratios (its standard error × √n); None for an
    unpaired (Welch) one or one without a standard error."""
    if c.method not in PAIRED_WORDS or c.se is None or c.n < 2:
        return None
    return c.se * math.sqrt(c.n)


def _groups_of(c: Comparison, groups: list[Group], baseline_key: str) -> list[Group]:
    """The compared group and its baseline group, as compare() matched them."""
    mine = [g for g in groups if (g.workload, g.params, g.platform_key, g.knobs, g.host)
            == (c.workload, c.params, c.label, c.knobs, c.host)]
    base = closest_by_knobs(c.knobs, [g for g in groups if g.platform_key == baseline_key and g.host == c.host
                                      and g.workload == c.workload and g.params == c.params])
    return mine + ([base] if base is not None else [])


def pair_outlier_warnings(groups: list[Group], comparisons: list[Comparison], baseline_key: str,
                          where: Any) -> list[Warning_]:
    """A pair of a paired e2e comparison whose ratio is far from its other pairs' (robust z, as
    for repetitions): one side met something the other did not, which the pairing cannot cancel."""
    found: list[Warning_] = []
    for c in comparisons:
        if c.metric != "e2e" or c.emulated or paired_noise(c) is None:
            continue
        members = _groups_of(c, groups, baseline_key)
        if len(members) != 2 or "e2e" not in members[0].points or "e2e" not in members[1].points:
            continue
        paired = estimate(members[0].points["e2e"], members[1].points["e2e"], members[0].platform_key)
        if not paired.pair_reps or min(paired.reference, default=0.0) <= 0:
            continue
        ratios = [(k, a / b) for k, (a, b) in enumerate(zip(paired.sample, paired.reference, strict=True))]
        median = statistics.median(r for _, r in ratios)
        for k, ratio, z in outlier_reps(ratios):
            rep = paired.pair_reps[k]
            found.append(Warning_("outlier", f"{c.workload} on {ev.group_label(members[0])}{where(c)}: the pair in round {rep} is an "
                                             f"outlier (e2e ratio {ratio:.3f} vs median {median:.3f}, robust z={z:.1f}): "
                                             "one side met something the other did not, which the pairing cannot "
                                             "cancel. Check the host, re-run, or add repetitions."))
    return found


def _readers(groups: list[Group], comparisons: list[Comparison],
             baseline_key: str) -> tuple[set[tuple[str, ...]], dict[tuple[str, ...], str]]:
    """The groups some paired e2e comparison reads, and those an unpaired one reads (each with
    the words for the comparison that sees its raw spread)."""
    paired: set[tuple[str, ...]] = set()
    unpaired: dict[tuple[str, ...], str] = {}
    for c in comparisons:
        if c.metric != "e2e" or c.emulated:
            continue
        members = _groups_of(c, groups, baseline_key)
        if paired_noise(c) is None:
            for g in members:
                unpaired.setdefault(g.key, "its unpaired (Welch) comparison")
        else:
            paired.update(g.key for g in members)
    return paired, unpaired


def paired_only_groups(groups: list[Group], comparisons: list[Comparison], baseline_key: str) -> set[tuple[str, ...]]:
    """Groups that only paired comparisons read: their spread between repetitions is no noise to
    any comparison, so neither it nor one repetition far from the others is warned about."""
    paired, unpaired = _readers(groups, comparisons, baseline_key)
    return paired - set(unpaired)


def spread_warnings(groups: list[Group], comparisons: list[Comparison], baseline_key: str,
                    where: Any) -> list[Warning_]:
    """Unstable results, judged by the noise each comparison's own method sees. A paired
    comparison (by round, duet or crossover) cancels what both sides of a pair shared, however
    far the rounds moved together: its noise is the spread of its per-pair log ratios. An
    unpaired one sees each group's own spread between repetitions, and so does a group that no
    comparison reads."""
    found: list[Warning_] = []
    paired_groups, unpaired = _readers(groups, comparisons, baseline_key)
    for c in comparisons:
        pair_sd = paired_noise(c)
        if c.metric != "e2e" or c.emulated or pair_sd is None:
            continue
        per_side = pair_sd / math.sqrt(2)
        if per_side > UNSTABLE_SD:
            label = f"{c.workload} on {c.platform}{where(c)}"
            found.append(Warning_("unstable", f"{label}: the noise its {PAIRED_WORDS[c.method]} comparison sees is "
                                              f"{per_side:.0%} per side (SD of its {c.n} per-pair log ratios "
                                              f"{pair_sd:.0%}, over √2): the result is unstable. Tune the host, "
                                              "lengthen each cell, or add repetitions.",
                                  f"{label} {per_side:.0%} per side, {PAIRED_WORDS[c.method]}"))
    for g in groups:
        if g.key in paired_groups and g.key not in unpaired:
            continue  # only paired comparisons read it: the rounds' common drift is no noise to them
        spread = log_sd(g.metrics.get("e2e", []))
        if spread is None or spread <= UNSTABLE_SD:
            continue
        label = f"{g.workload} on {ev.group_label(g)}{where(g)}"
        seen_by = unpaired.get(g.key, "the group (no comparison pairs it)")
        found.append(Warning_("unstable", f"{label}: the standard deviation is {spread:.0%} of the mean between "
                                          f"repetitions, the noise {seen_by} sees: the result is unstable. Tune "
                                          "the host, lengthen each cell, or add repetitions.",
                              f"{label} {spread:.0%} between repetitions"))
    return found


def _collapse(found: list[Warning_], kind: str, template: str, limit: int = 3) -> list[Warning_]:
    """More than ``limit`` warnings of one kind become one line naming the groups."""
    same = [w for w in found if w.kind == kind]
    if len(same) <= limit:
        return found
    items = "; ".join(w.subject for w in same)
    merged = Warning_(kind, template.format(n=len(same), items=items))
    first = found.index(same[0])
    rest = [w for w in found if w.kind != kind]
    return rest[:first] + [merged] + rest[first:]


def core_sharing_warning(cores_meta: str | None, cells: list[dict[str, Any]]) -> Warning_ | None:
    """When a study gave its cells every core (``cell_cores: all``), what that cost: the share of
    the cells' core time that other tasks (the harness, the engine, the probes) took while they
    measured, from each cell's interference accounting (runner/interference.py)."""
    import json

    try:
        layout = json.loads(cores_meta or "null")
    except ValueError:
        return None
    if not isinstance(layout, dict) or layout.get("layout") != "all":
        return None
    shares = [c["platform_info"]["interference"]["lost_share"] for c in cells
              if isinstance((c.get("platform_info") or {}).get("interference"), dict)
              and "lost_share" in c["platform_info"]["interference"]]
    cost = (f": other tasks (the runner, probes, engine) took a median {statistics.median(shares):.1%} of the "
            f"cells' core time while they measured (max {max(shares):.1%})") if shares else ""
    return Warning_("cores", f"cells had every core (cell_cores: all){cost}. That contention is measured "
                             "with the platform and widens the A/A floor; the default, cell_cores: disjoint, keeps "
                             "the harness on a core of its own.")

