"""Root-cause hints: rules that read the evidence and say why, in one sentence with numbers.

Every rule fires only on evidence in the store (a probe metric, a phase, a series) and names
the figure or table that shows it. No evidence, no hint.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from typing import Any

from isobench.analysis import evidence as ev
from isobench.analysis.attribution import Mechanism, reads_per_item
from isobench.analysis.compare import Comparison, phase_attribution
from isobench.analysis.field_hints import FIELD_RULES
from isobench.analysis.hint_base import (
    PHASE_GROWTH,
    STREAM_PHASES,
    Hint,
    HintStatus,
    e2e_comparisons,
    entry_key,
    intervention_result,
)
from isobench.analysis.interventions import (
    describe_fields,
    field_problem,
    intervention,
    serving_network,
    stored_entries,
)
from isobench.analysis.views import Context
from isobench.analysis.views.faults import fault_table_id, shared_library_share
from isobench.analysis.views.why import why_table_id
from isobench.analysis.views.writeback import writeback_series


def throttling(ctx: Context) -> list[Hint]:
    hints = []
    for g in ctx.groups:
        throttled = ev.find_metric(g.metrics, r"^probe\.cgroup\..*(nr_)?throttled(_periods)?$")
        periods = ev.find_metric(g.metrics, r"^probe\.cgroup\..*(nr_)?periods$")
        if not throttled or not periods or throttled == periods:
            continue
        t, p = ev.mean_of(g, throttled) or 0.0, ev.mean_of(g, periods) or 0.0
        if p <= 0 or t / p < 0.05:
            continue
        threads = g.knobs.get("threads")
        hints.append(Hint("cfs-throttling",
                          f"{g.workload} on {ev.group_label(g)}{ctx.on_host(g)}: {t / p:.0%} of CFS periods were throttled "
                          f"({t:,.0f} of {p:,.0f} per cell): the CPU quota (cpus={g.knobs.get('cpus', '?')}) is too "
                          f"tight for {threads or 'its'} threads; raise `cpus` or lower `threads`.",
                          "tab-probe-metrics"))
    return hints


PLAIN = {"ctx_involuntary": "involuntary context switches", "ctx_voluntary": "voluntary context switches",
         "cpu-migrations": "CPU migrations", "cpu_migrations": "CPU migrations", "migrations": "CPU migrations",
         "context-switches": "context switches", "context_switches": "context switches", "cs": "context switches"}


def pinning(ctx: Context) -> list[Hint]:
    hints = []
    for c in ctx.comparisons:
        if c.is_aa or ev.is_pinned(c.knobs) or not c.metric.startswith("probe.") or not c.significant:
            continue
        if not re.search(r"migration|ctx|context.?switch|(^|\.)cs$", c.metric):
            continue
        if c.ratio < 1.5:
            continue
        plugin = {g.platform_key: g.platform for g in ctx.groups}  # entries may carry labels of their own
        pinned = [p for p in ctx.comparisons if p.metric == c.metric and plugin.get(p.label) == plugin.get(c.label) and
                  p.workload == c.workload and ev.is_pinned(p.knobs)]
        if not pinned or min(p.ratio for p in pinned) > 1.2:
            continue
        best = min(pinned, key=lambda p: p.ratio)
        name = PLAIN.get(c.metric.split(".")[-1], c.metric.split(".")[-1].replace("_", " ").replace("-", " "))
        hints.append(Hint("pin", f"{c.workload} on {c.platform}{ctx.on_host(c)}: {c.ratio:.1f}× the {name} of {c.baseline} without "
                                 f"pinning ({c.mean:,.0f} vs {c.baseline_mean:,.0f} per cell) but {best.ratio:.2f}× "
                                 f"when pinned ({_knobs(best.knobs)}): pin the cell with `cpuset`.",
                          "tab-probe-metrics"))
    return hints


def optimizer(ctx: Context) -> list[Hint]:
    hints = []
    for c in e2e_comparisons(ctx):
        if not c.significant or c.ratio <= 1:
            continue
        top = phase_attribution(ctx.comparisons, c)
        if top is None or top[0] not in ("optimizer", "optimizer_step") or top[1] < 0.5:
            continue
        phase = next(p for p in ctx.comparisons if p.metric == f"phase.{top[0]}" and p.label == c.label
                     and p.workload == c.workload and p.knobs == c.knobs and p.host == c.host)
        hints.append(Hint("optimizer", f"{c.workload} on {c.platform}{ctx.on_host(c)}: the optimizer step holds {top[1]:.0%} of the "
                                       f"extra time ({phase.baseline_mean * 1e3:.2f} → {phase.mean * 1e3:.2f} ms per "
                                       f"minibatch, {phase.ratio:.2f}×): the parameter update is where the platform "
                                       "bites (many small CPU-side ops); look at its threads and memory allocator.",
                          f"fig-compute-{c.workload}"))
    return hints


#: file reads per item below which the data path cannot hold a phase's extra time: under a page and
#: under one read call every other item (resnet-infer reads one ~3 KB JPEG per item in 2 calls: in play)
FEW_BYTES_READ = 4096
FEW_READ_CALLS = 0.5
#: ``data_mount`` values that put the data set inside the platform: the data-path intervention
DATA_INSIDE = {"copy": "copied in", "volume": "on a volume"}


def fetch_stall(ctx: Context) -> list[Hint]:
    """A data phase that holds the extra time. The data path is the suspect; an entry of the same
    platform with its data inside it (``data_mount: copy`` or ``volume``) is the test: the hint
    is confirmed when that entry's phase grows clearly less (its interval below the other's), refuted
    when it still grows and under half the phase's extra time is gone; otherwise it stays suspected. An
    entry that already has its data inside is never told to copy it in, nor one whose workload reads
    (almost) no file data per item by its own count (resnet-infer decodes JPEGs held in memory)."""
    hints = []
    reads: dict[tuple[str, str, str, str], tuple[float, float]] | None = None  # read once, where needed
    for c in e2e_comparisons(ctx):
        if not c.significant or c.ratio <= 1:
            continue
        stall = next((p for p in ctx.comparisons if p.metric in ("phase.fetch_stall", "phase.preprocess")
                      and p.label == c.label and p.workload == c.workload and p.knobs == c.knobs and p.host == c.host
                      and p.significant and p.ratio > 1.1), None)
        if stall is None:
            continue
        delta = c.mean - c.baseline_mean
        share = (stall.mean - stall.baseline_mean) / delta if delta > 0 else 0
        if share < 0.3:
            continue
        figure = f"fig-minibatch-{c.workload}" if stall.metric == "phase.fetch_stall" else f"fig-phases-{c.workload}"
        phase = stall.metric.removeprefix("phase.")
        grows = (f"{c.workload} on {c.platform}{ctx.on_host(c)}: {phase} grows {stall.ratio:.2f}× "
                 f"({stall.baseline_mean * 1e3:.2f} → {stall.mean * 1e3:.2f} ms) and holds {share:.0%} of the extra time")
        inside = DATA_INSIDE.get(str(c.knobs.get("data_mount")))
        if inside is not None:
            hints.append(Hint("data-path", f"{grows}, with the data already {inside}: not the data path; the phase's "
                                           "own work (memory management, system calls) costs more on this platform "
                                           "(not tested).", figure))
            continue
        reads = reads if reads is not None else reads_per_item(ctx.store)
        read = reads.get((c.workload, c.label, json.dumps(c.knobs, sort_keys=True), c.host))
        if read is not None and read[0] < FEW_BYTES_READ and read[1] < FEW_READ_CALLS:
            hints.append(Hint("data-path", f"{grows}, yet it reads {read[0]:,.0f} bytes of files in {read[1]:.2f} "
                                           "read calls per item (counted by the workload itself): not the data path; "
                                           "the phase's own work (memory management, system calls) costs more on "
                                           "this platform (not tested).", figure))
            continue
        tested = [p for p in ctx.comparisons if p.metric == stall.metric and p.workload == c.workload
                  and p.host == c.host and ctx.same_engine(p.label, c.label) and not p.is_aa
                  and str(p.knobs.get("data_mount")) in DATA_INSIDE
                  and {k: v for k, v in p.knobs.items() if k != "data_mount"}
                  == {k: v for k, v in c.knobs.items() if k != "data_mount"}]
        if not tested:
            hints.append(Hint("data-path", f"{grows}: the data path (storage, overlay or bind mount) may be slower on "
                                           "this platform (not tested; to test it, add the same entry with "
                                           "`knobs: {data_mount: copy}`, or run `isobench explain`).", figure,
                              test=intervention(c.workload, c.label, {"data_mount": "copy"})))
            continue
        test = tested[0]
        how = DATA_INSIDE[str(test.knobs["data_mount"])]
        extra = stall.mean - stall.baseline_mean
        removed = (stall.mean - test.mean) / extra if extra > 0 else 0.0
        clearly_less = test.ci_high is not None and stall.ci_low is not None and test.ci_high < stall.ci_low
        if clearly_less:
            hints.append(Hint("data-path", f"{grows}; with the data {how} ({test.label}) it grows {test.ratio:.2f}×: "
                                           f"the data path is the cause, and moving the data inside removes "
                                           f"{removed:.0%} of the phase's extra time.", figure,
                              status="confirmed"))
        elif test.significant and test.ratio > 1 and removed < 0.5:
            hints.append(Hint("data-path", f"{grows}; with the data {how} ({test.label}) it still grows "
                                           f"{test.ratio:.2f}× ({removed:.0%} of the phase's extra time gone, within "
                                           "the noise): not the data path; the phase's own work "
                                           "(memory management, system calls) costs more on this platform.", figure,
                              status="refuted"))
        else:
            hints.append(Hint("data-path", f"{grows}: the data path may be slower on this platform (the "
                                           f"test with the data {how}, {test.label}, did not resolve its {phase}: "
                                           f"{test.ratio:.2f}×, add repetitions).", figure))
    return hints


def sync_writebacks(ctx: Context) -> list[Hint]:
    found = writeback_series(ctx)
    if found is None:
        return []
    tables, roles = found
    edge: dict[tuple[str, str], list[int]] = {}
    for cell_id, table in tables.items():
        info = ctx.cells.get(cell_id)
        if info is None or table.num_rows == 0:
            continue
        times = table.column(roles["time"]).to_pylist()
        reasons = ev.reason_names(table.column(roles["reason"]).to_pylist())
        t0, t1 = min(times), max(times)
        span = (t1 - t0) or 1.0
        syncs = [t for t, r in zip(times, reasons, strict=True) if r == "sync"]
        at_edges = sum(1 for t in syncs if (t - t0) / span < 0.1 or (t1 - t) / span < 0.1)
        counts = edge.setdefault((info.workload, info.platform_key), [0, 0, 0])
        counts[0] += len(syncs)
        counts[1] += at_edges
        counts[2] += 1
    hints = []
    for (workload, key), (syncs, at_edges, cells) in sorted(edge.items()):
        if key == ctx.baseline_key or syncs == 0 or at_edges / syncs < 0.5:
            continue
        base = edge.get((workload, ctx.baseline_key), [0, 0, 1])
        base_rate = base[0] / max(1, base[2])
        rate = syncs / cells
        if rate <= 1.5 * base_rate:
            continue
        display = next(g.display for g in ctx.groups if g.platform_key == key)
        hints.append(Hint("sync-writeback", f"{workload} on {display}: {rate:.0f} sync write-backs per cell vs "
                                            f"{base_rate:.0f} on the baseline, {at_edges / syncs:.0%} of them in the "
                                            "first or last tenth of the cell: the platform flushes at container "
                                            "start/stop (layer commits, syncfs); keep scratch data on a volume or "
                                            "tmpfs.", "tab-writeback-reasons"))
    return hints


def shared_library_faults(ctx: Context) -> list[Hint]:
    hints = []
    seen: set[str] = set()
    for c in sorted(ctx.comparisons, key=lambda c: ("perf.cell" not in c.metric, c.metric)):
        if c.is_aa or not c.significant or c.ratio < 1.1:
            continue
        if not (c.metric.startswith("probe.") and re.search(r"fault|pgfault", c.metric)
                and not re.search(r"major|majflt", c.metric)):
            continue
        share = shared_library_share(ctx, c.workload, c.label)
        if share is None or share[0] < 0.2:
            continue
        table_id = fault_table_id(c.workload, c.label)
        key = json.dumps([c.workload, c.label, c.knobs, c.params], sort_keys=True)
        if key in seen:  # one hint per platform entry, however many probes counted faults
            continue
        seen.add(key)
        knobs = f" [{_knobs(c.knobs)}]" if _knobs(c.knobs) else ""
        hints.append(Hint("shared-library-faults",
                          f"{c.workload} on {c.platform}{ctx.on_host(c)}{knobs}: {c.ratio:.2f}× the page faults of {c.baseline} "
                          f"({c.mean:,.0f} vs {c.baseline_mean:,.0f}), {share[0]:.0%} of them in shared libraries: "
                          "mapping libraries through the container's filesystem costs faults; a warm page cache or "
                          "preloading (e.g. importing once before the timed work) reduces them.", table_id))
    return hints


def _intervention(c: Comparison, mechanism: Mechanism) -> tuple[dict[str, Any], str] | None:
    """The knobs that remove or cut the mechanism on this entry, and why; None when the entry has
    them already (a hint never suggests what its entry already does). Injected events are removed
    by setting their knob to 0."""
    if c.knobs.get(mechanism.inject_knob):
        return {mechanism.inject_knob: 0}, f"the entry injects its {mechanism.name}"
    for knobs, why in mechanism.interventions:
        if any(c.knobs.get(k) != v for k, v in knobs.items()):
            return knobs, why
    return None





def _change(knobs: dict[str, Any], written: bool = False) -> str:
    """An intervention in words: "without cpus", "with seccomp=unconfined" (or as a study writes it)."""
    removed = [k for k, v in knobs.items() if v is None]
    added = {k: v for k, v in knobs.items() if v is not None}
    parts = [f"without `{k}`" if written else f"without {k}" for k in removed]
    if added:
        parts.append(f"with `knobs: {{{', '.join(f'{k}: {v}' for k, v in added.items())}}}`" if written
                     else f"with {_knobs(added)}")
    return " and ".join(parts)





def judge(ctx: Context, c: Comparison, knobs: dict[str, Any],
          fields: dict[str, Any] | None = None) -> tuple[HintStatus, str] | None:
    """How the entry with ``knobs`` added and ``fields`` changed (the intervention) fares against
    ``c``, when the study ran it: confirmed when its overhead's interval lies below c's, refuted when
    it keeps over half of c's added time, else still suspected; None when the study has no such entry."""
    test = intervention_result(ctx, c, knobs, fields)
    if test is None:
        return None
    extra = c.mean - c.baseline_mean
    removed = (c.mean - test.mean) / extra if extra > 0 else 0.0
    change = " and ".join(filter(None, [_change(knobs), f"on {describe_fields(fields)}" if fields else ""]))
    said = f"{change} ({test.label}) the overhead is {test.ratio:.3f}×, {removed:.0%} of it gone"
    if test.ci_high is not None and c.ci_low is not None and test.ci_high < c.ci_low:
        return "confirmed", said
    if removed < 0.5:
        return "refuted", said + ": the cause is elsewhere"
    return "suspected", said + ", not resolved (add repetitions)"


def mechanisms(ctx: Context) -> list[Hint]:
    """A mechanism that explains a clear part of a resolved overhead (its added time's interval
    above 0, a fifth of the added time or more), from counts per item × unit costs: suspected from
    that evidence; confirmed or refuted where the study ran the entry with the intervention that
    removes it (otherwise the hint names that test, for ``isobench explain``)."""
    found = []
    for a in ctx.attributions():
        c = a.comparison
        for row in a.measured:
            assert row.explained is not None and row.n_baseline is not None and row.n_platform is not None
            low, high = row.explained.interval()
            if low <= 0 or row.share is None or row.share[0] < 0.2:
                continue
            mech = row.mechanism
            assert row.c_baseline is not None and row.c_platform is not None
            if mech.fixed_cost is not None:
                detail = (f"{row.n_baseline.mean * mech.count_scale:.3f} → {row.n_platform.mean * mech.count_scale:.3f} "
                          f"{mech.count_unit} {mech.event} per item")
            elif row.assumed:
                detail = (f"{row.n_baseline.mean:,.0f} {mech.event}s per item (counted on {c.baseline}) at "
                          f"{(row.c_platform.mean - row.c_baseline.mean) * 1e6:.3f} µs more each")
            else:
                detail = (f"{row.n_baseline.mean:,.0f} → {row.n_platform.mean:,.0f} {mech.event}s per item at "
                          f"{row.c_baseline.mean * 1e6:.3f} → {row.c_platform.mean * 1e6:.3f} µs each")
            point, share_low, share_high = row.share
            text = (f"{c.workload} on {c.platform}{ctx.on_host(c)}: {mech.name} explain{'' if mech.plural else 's'} "
                    f"{row.explained.mean * 1e3:.3f} ms ({low * 1e3:.3f}–{high * 1e3:.3f}) of the {a.added * 1e3:.3f} ms "
                    f"added per item ({point:.0%}, {max(share_low, 0):.0%}–{share_high:.0%}): {detail}")
            figure = why_table_id(c.workload, c.label, c.knobs)
            intervention = _intervention(c, mech)
            if intervention is None:
                found.append(Hint(f"mechanism-{mech.key}", f"{text} (not tested: no intervention left to try).", figure))
                continue
            knobs, why = intervention
            verdict = judge(ctx, c, knobs)
            if verdict is None:
                found.append(Hint(f"mechanism-{mech.key}", f"{text} (not tested; to test it, add the same entry "
                                                           f"{_change(knobs, written=True)} ({why}), or run "
                                                           "`isobench explain`).", figure,
                                  test=intervention(c.workload, c.label, knobs)))
            else:
                status, said = verdict
                found.append(Hint(f"mechanism-{mech.key}", f"{text}; {said}.", figure, status=status))
    return found








def decode_or_stream(ctx: Context) -> list[Hint]:
    """Where a generated or served request's extra time sits, when one kind of phase holds it.
    Decode slower while prefill is not: a decode step reads all the weights and the KV cache for one
    token per prompt, so it is bound by memory bandwidth and page faults where prefill, a whole prompt
    at once, is bound by compute. Only the stream slower (connect and transport, the client's e2e
    outside the server's own phases) while no server phase is: the network path between the client
    and the server."""
    hints = []
    by_entry: dict[tuple[str, ...], dict[str, Comparison]] = defaultdict(dict)  # one pass, not one per entry
    for p in ctx.comparisons:
        if p.metric.startswith("phase.") or p.metric == "process.run.page_faults_minor":
            by_entry[entry_key(p)][p.metric] = p
    for c in e2e_comparisons(ctx):
        extra = c.mean - c.baseline_mean
        if not c.significant or c.ratio <= 1 or extra <= 0:
            continue
        own = by_entry.get(entry_key(c), {})
        phases = {m.removeprefix("phase."): p for m, p in own.items() if m.startswith("phase.")}
        grew = {name for name, p in phases.items() if p.significant and p.ratio >= PHASE_GROWTH}
        where = f"{c.workload} on {c.platform}{ctx.on_host(c)}"
        if {"prefill", "decode"} <= phases.keys() and "decode" in grew:
            decode, prefill = phases["decode"], phases["prefill"]
            held = "prefill" not in grew or prefill.ratio - 1 < (decode.ratio - 1) / 4
            share = (decode.mean - decode.baseline_mean) / extra
            if held and share >= 0.3:
                faults = own.get("process.run.page_faults_minor")
                seen = (f" Its minor page faults over the measured requests: {faults.ratio:.2f}× the baseline's."
                        if faults is not None else "")
                hints.append(Hint("decode-bound", f"{where}: decode grows {decode.ratio:.2f}× ({decode.baseline_mean * 1e3:.2f} "
                                                  f"→ {decode.mean * 1e3:.2f} ms per request, {share:.0%} of the extra time) "
                                                  f"while prefill holds at {prefill.ratio:.2f}×: a decode step reads all the "
                                                  "weights and the KV cache for one token, so it is bound by memory bandwidth "
                                                  "and page faults where prefill is bound by compute; look at the platform's "
                                                  "memory path (page faults, transparent huge pages, a memory limit, NUMA "
                                                  f"placement).{seen}", f"fig-phases-{c.workload}"))
        stream = [phases[name] for name in STREAM_PHASES if name in phases]
        if "transport" in phases and grew and grew <= set(STREAM_PHASES):
            added = sum(p.mean - p.baseline_mean for p in stream)
            share = added / extra
            if share >= 0.5:
                said = ", ".join(f"{p.metric.removeprefix('phase.')} {p.ratio:.2f}× ({p.baseline_mean * 1e3:.2f} → "
                                 f"{p.mean * 1e3:.2f} ms)" for p in stream)
                hints.append(stream_hint(ctx, c, f"{where}: only the stream slowed, {said} per request, {share:.0%} "
                                                 "of the extra time, while the server's own phases held: the network "
                                                 "path between the client and the server costs it"))
    return hints


#: the entry field change that puts a serving cell on the host's network
HOST_NETWORK = {"options": {"network": "host"}}


def stream_hint(ctx: Context, c: Comparison, text: str) -> Hint:
    """The stream-path hint: tested by the same entry on the host's network where its platform takes
    it, confirmed or refuted where the study ran that entry; an entry on the host's network already
    is never told to move there."""
    figure, entry = f"fig-phases-{c.workload}", stored_entries(ctx.store).get(c.label)
    if entry is None:
        return Hint("stream-path", f"{text} (a bridge or a sandbox's network stack; not tested).", figure)
    if serving_network(entry) == "host":
        return Hint("stream-path", f"{text}, on the host's network already (no bridge): the platform's own path "
                                   "to it (its network stack or passthrough) is what remains (not tested).", figure)
    problem = field_problem(entry, HOST_NETWORK)
    if problem:
        return Hint("stream-path", f"{text} (a bridge's veth pair or a sandbox's network stack; not tested: its "
                                   "platform has no host network to compare with).", figure,
                    untestable=f"{c.workload} on {c.label}: the host's network: its platform {problem}")
    verdict = judge(ctx, c, {}, HOST_NETWORK)
    if verdict is not None:
        return Hint("stream-path", f"{text}; {verdict[1]}.", figure, status=verdict[0])
    return Hint("stream-path", f"{text} (a bridge's veth pair and Linux bridge; not tested; to test it, add the "
                               "same entry with `options: {network: host}`, or run `isobench explain`).", figure,
                test=intervention(c.workload, c.label, fields=HOST_NETWORK))


RULES = (throttling, pinning, optimizer, fetch_stall, sync_writebacks, shared_library_faults, mechanisms,
         decode_or_stream)


def hints(ctx: Context) -> list[Hint]:

    found: list[Hint] = []
    for rule in (*RULES, *FIELD_RULES):  # FIELD_RULES: field_hints.py, built on hint_base.py
        for hint in rule(ctx):
            if all(hint.text != seen.text for seen in found):
                found.append(hint)
    return found


def _knobs(knobs: dict) -> str:  # type: ignore[type-arg]
    return ", ".join(f"{k}={v}" for k, v in sorted(knobs.items()) if k != "threads")

