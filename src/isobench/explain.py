"""`isobench explain DIR`: run the experiments that test a study's suspected causes.

A root-cause hint with an intervention (the same entry with its data set copied in, without the
seccomp filter, without an injected cause, with ``malloc: tuned``, or with one of its own fields
changed: gVisor on the other runsc platform, a container on the host's network; see
analysis/interventions.py) stays "suspected" until that entry has run beside the one it explains;
one that no follow-up can test is listed with why. A resolved overhead that the "why" model
(analysis/attribution.py) cannot price yet, because the study lacks a mechanism's microbenchmark
or the probe that counts its events, needs evidence first. ``explain`` writes one follow-up study with the baseline, the study's A/A
entries, each entry under suspicion, that entry with each intervention, the microbenchmarks
(``syscall-loop``, ``fault-loop``) and counting probes the model lacked, for the workloads
concerned; it keeps the study's own design (the resolving one, as stored), runs it, and reads the
hints again: each is then confirmed (the intervention removed the cost, with its numbers) or
refuted, and each overhead gets its "why" table.

More cores for a sandbox's own threads (a ``sandbox-cores`` hint) cannot be tested within the
study's design: the cores per cell are the same for every entry. It gets a study of its own
(``DIR/explain-cores``, beside the follow-up): the baseline, the A/A entries and each entry under
suspicion as written, for the workloads concerned, with ``schedule: sequential`` and
``cell_cores: all``; analysis/more_cores.py then compares each entry's overhead there with its
overhead in the study.

The follow-ups are ordinary study directories (``DIR/explain`` unless ``--out``): their reports,
summaries and resume work as for any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from isobench.analysis.attribution import MECHANISMS, Attribution
from isobench.analysis.compare import Comparison
from isobench.analysis.hint_base import Hint
from isobench.analysis.interventions import (
    already_has,
    cores_per_cell,
    describe_fields,
    field_problem,
    label_parts,
    with_fields,
)
from isobench.errors import UserError
from isobench.store import Store
from isobench.study.aa import is_aa_entry
from isobench.study.model import Study, parse_duration
from isobench.studyfile import load_study_text, parse_study_yaml


def interventions_of(hints: list[Hint], study: Study) -> tuple[list[dict[str, Any]], list[str]]:
    """The interventions the hints name, each once (workload key, entry key, knobs to add, entry
    fields to change), and why any cannot run: the entry's platform does not take the knob or the
    field, the entry has the change already, or the hint's intervention is untestable by design."""
    from isobench.platforms import PLATFORMS
    from isobench.platforms.base import PLACEMENT_AND_HOST_KNOBS

    found: list[dict[str, Any]] = []
    skipped: list[str] = []
    entries = {entry.key: entry for entry in study.platforms}
    for hint in hints:
        if hint.status == "suspected" and hint.untestable and hint.untestable not in skipped:
            skipped.append(hint.untestable)
        test = hint.test
        if hint.status != "suspected" or test is None or test in found:
            continue
        entry, fields = entries.get(test["entry"]), test.get("fields") or {}
        where = f"{test['workload']} on {test['entry']}"
        taken = set(PLATFORMS.get(entry.name).knobs) | PLACEMENT_AND_HOST_KNOBS if entry else set()
        missing = sorted(set(test["knobs"]) - taken) if entry else ["the entry"]
        if missing:
            skipped.append(f"{where}: its platform has no {', '.join(missing)}")
            continue
        assert entry is not None
        problem = field_problem(entry, fields) if fields else None
        if problem:
            skipped.append(f"{where}: its platform {problem}")
        elif fields and already_has(entry, fields):
            skipped.append(f"{where}: the entry has {describe_fields(fields, written=True)} already")
        else:
            found.append(test)
    return found, skipped


@dataclass
class Evidence:
    """What a follow-up adds so that the "why" model can price each resolved overhead: the
    microbenchmarks (unit costs) and counting probes the study lacked, for the workloads and
    entries whose overhead they explain."""

    workloads: set[str] = field(default_factory=set)
    entries: set[str] = field(default_factory=set)
    unit_workloads: set[str] = field(default_factory=set)
    probes: set[str] = field(default_factory=set)


def evidence_needed(attributions: list[Attribution]) -> Evidence:
    """The microbenchmarks and probes each resolved overhead's mechanisms still lack."""
    needed = Evidence()
    for a in attributions:
        lacking = [row for row in a.rows if row.explained is None]
        for row in lacking:
            if row.n_baseline is None and row.mechanism.count_probe:
                needed.probes.add(row.mechanism.count_probe)
            if row.mechanism.unit_workload and (row.c_baseline is None or row.c_platform is None):
                needed.unit_workloads.add(row.mechanism.unit_workload)
        lacking = [row for row in lacking if row.mechanism.unit_workload or row.mechanism.count_probe]
        if lacking:
            needed.workloads.add(a.comparison.workload)
            needed.entries.add(a.comparison.label)
    return needed


def intervention_label(entry: str, knobs: dict[str, Any], fields: dict[str, Any] | None = None) -> str:
    """The follow-up entry's label: the entry's, then each field change and each knob
    ("gvisor-platform-ptrace", "docker-data-mount-copy")."""
    knob_parts = [f"{k.replace('_', '-')}-{v}" for k, v in sorted(knobs.items())]
    return "-".join([entry, *label_parts(fields or {}), *knob_parts])[:64]


def _kept_entries(study: Study, raw: dict[str, Any], entries: set[str]) -> list[dict[str, Any]]:
    """The written platform entries a follow-up keeps: the baseline, the A/A entries and ``entries``."""
    baseline = study.baseline or study.platforms[0].key
    return [written for entry, written in zip(study.platforms, raw["platforms"], strict=True)
            if entry.key == baseline or entry.key in entries or is_aa_entry(study, entry)]


def follow_up_study(text: str, study: Study, file: str, tests: list[dict[str, Any]],
                    evidence: Evidence | None = None) -> tuple[str, str]:
    """(the follow-up study's text, its name): the stored study (``text``, loaded as ``study``
    from ``file``) with only the workloads and the platform entries the tests and the evidence
    need, plus one entry per intervention, the microbenchmarks that price each mechanism and the
    probes that count them."""
    evidence = evidence or Evidence()
    raw = parse_study_yaml(text, file)
    wanted_workloads = {t["workload"] for t in tests} | evidence.workloads
    platforms = _kept_entries(study, raw, {t["entry"] for t in tests} | evidence.entries)
    for test in tests:
        index = next(i for i, e in enumerate(study.platforms) if e.key == test["entry"])
        fields = test.get("fields") or {}
        written = with_fields(dict(raw["platforms"][index]), fields)
        written["label"] = intervention_label(test["entry"], test["knobs"], fields)
        merged = {**(written.get("knobs") or {}), **test["knobs"]}
        written["knobs"] = {k: v for k, v in merged.items() if v is not None}  # None: the entry without it
        if written not in platforms:
            platforms.append(written)
    units = {m.unit_workload for m in MECHANISMS}
    raw["workloads"] = [w for entry, w in zip(study.workloads, raw["workloads"], strict=True)
                        if entry.key in wanted_workloads or (evidence.unit_workloads or tests) and entry.name in units]
    present = {w.get("name") for w in raw["workloads"] if isinstance(w, dict)}
    raw["workloads"] += [{"name": name} for name in sorted(evidence.unit_workloads - present)]
    if evidence.probes:
        from isobench.probes.session import default_probe_config

        probes = dict(raw["probes"]) if isinstance(raw.get("probes"), dict) else default_probe_config()
        raw["probes"] = {**probes, **{name: probes.get(name) or {} for name in sorted(evidence.probes)}}
    raw["platforms"] = platforms
    raw["name"] = f"{study.name}-explain"[:64]
    raw["description"] = f"isobench explain: the interventions that test the hints of {study.name}"
    follow_up = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120)
    load_study_text(follow_up, f"{raw['name']} (follow-up study)")  # the host can run it: checked before anything runs
    return follow_up, raw["name"]


#: the hint rule whose intervention runs as a study of its own (analysis/field_hints.py)
CORES_RULE = "sandbox-cores"
#: the design fields that only a duet reads: dropped from the cores study
DUET_ONLY_FIELDS = ("duet_swap_s",)


def cores_suspects(hints: list[Hint], comparisons: list[Comparison]) -> list[tuple[str, str]]:
    """The (workload key, entry key) of each suspected ``sandbox-cores`` hint, each once: the
    comparisons whose "why" table the hint points at."""
    from isobench.analysis.views.why import why_table_id

    figures = {h.figure for h in hints if h.rule == CORES_RULE and h.status == "suspected"}
    found: list[tuple[str, str]] = []
    for c in comparisons:
        pair = (c.workload, c.label)
        if c.metric == "e2e" and not c.is_aa and why_table_id(c.workload, c.label, c.knobs) in figures \
                and pair not in found:
            found.append(pair)
    return found


def cores_study(text: str, study: Study, file: str, suspects: list[tuple[str, str]],
                threads: int | None = None) -> tuple[str, str]:
    """(the cores study's text, its name): the stored study (``text``, loaded as ``study`` from
    ``file``) with only the workloads and entries of ``suspects`` (workload key, entry key), the
    baseline and the A/A entries, as written, run one cell at a time on every core the harness
    does not keep (``schedule: sequential``, ``cell_cores: all``); the rest of its design kept.
    ``threads``, the cores each of the study's cells had, holds the workload's compute threads
    where they were (unless the study sets them): the extra cores are the sandbox's, not torch's."""
    raw = parse_study_yaml(text, file)
    workloads = {w for w, _ in suspects}
    raw["platforms"] = _kept_entries(study, raw, {e for _, e in suspects})
    raw["workloads"] = [w for entry, w in zip(study.workloads, raw["workloads"], strict=True) if entry.key in workloads]
    for name in DUET_ONLY_FIELDS:
        raw.pop(name, None)
    raw["schedule"], raw["cell_cores"] = "sequential", "all"
    knobs = dict(raw.get("knobs") or {})
    if threads is not None and "threads" not in knobs:
        # torch's threads follow the cell's cores: without this the workload itself would take the
        # new core, and the comparison would measure its scaling on each platform instead
        raw["knobs"] = {**knobs, "threads": threads}
    raw["name"] = f"{study.name}-cores"[:64]
    raw["description"] = f"isobench explain: more cores for the sandbox's own threads, for {study.name}"
    written = yaml.safe_dump(raw, sort_keys=False, allow_unicode=True, width=120)
    load_study_text(written, f"{raw['name']} (cores study)")  # the host can run it: checked before anything runs
    return written, raw["name"]


def cores_obstacle(study: Study, cores: int | None) -> str | None:
    """Why the cores study would give the cells no more cores than the study did (None: it would):
    ``cores`` is how many each of the study's cells had."""
    from isobench.hostinfo import host_cpus

    if study.schedule == "sequential" and study.cell_cores == "all":
        return "its cells had every core already (schedule: sequential, cell_cores: all)"
    here = len(host_cpus())
    if cores is not None and here <= cores:
        return f"this host has {here} core(s), no more than each of the study's cells had"
    return None


def budget_each(budget: str | None, studies: int) -> str | None:
    """``--budget`` shared by the follow-up studies that run: an equal part each."""
    if budget is None or studies <= 1:
        return budget
    try:
        seconds = parse_duration(budget)
    except ValueError:
        return budget  # with_budget_text refuses it, in one line with its fix
    return f"{seconds / studies:g}s"


@dataclass
class Planned:
    """A follow-up study to run: its text, name and directory."""

    text: str
    name: str
    target: Path


@dataclass
class ExplainPlan:
    """What ``isobench explain`` runs for a study, and what it cannot test."""

    #: the follow-up with the interventions and the evidence (None: nothing to run there)
    follow_up: Planned | None = None
    #: the cores study (None: no sandbox-cores hint, or one it cannot test: in ``skipped``)
    cores: Planned | None = None
    #: the (workload key, entry key) pairs the cores study tests
    cores_suspects: list[tuple[str, str]] = field(default_factory=list)
    #: the untestable hints the cores study tests instead (``Hint.untestable``)
    own_study: list[str] = field(default_factory=list)
    #: the interventions that cannot run, with why
    skipped: list[str] = field(default_factory=list)


def _refuse_results(target: Path, what: str) -> None:
    if target.exists() and any(target.iterdir()):
        raise UserError(f"the {what}'s directory already holds results", file=str(target),
                        fix="give another --out, or read it with `isobench summary`")


def explain_directory(directory: Path, out: Path | None) -> ExplainPlan:
    """The follow-up studies to run for ``directory``: the one with the interventions and the
    evidence (None when no hint there has an intervention left to run and every overhead is
    priced), the cores study (``<target>-cores``, where a sandbox-cores hint is suspected), and
    the interventions that cannot run, with why. A target that holds results is refused before
    anything runs."""
    from isobench.analysis.summary import analyse

    store = Store.open(directory)
    text, file = store.meta("study_yaml") or "", f"{directory} (stored study)"
    study = load_study_text(text, file, check_host=False)
    analysis = analyse(store, with_views=False)
    tests, skipped = interventions_of(analysis.hints, study)
    from isobench.analysis.attribution import attribute

    evidence = evidence_needed(attribute(store, analysis.shown, study.baseline or study.platforms[0].key))
    target = out if out is not None else directory / "explain"
    plan = ExplainPlan(skipped=skipped)
    suspects = cores_suspects(analysis.hints, analysis.shown)
    untestable = list(dict.fromkeys(h.untestable for h in analysis.hints if h.rule == CORES_RULE and h.untestable))
    obstacle = cores_obstacle(study, cores_per_cell(store)) if suspects else None
    if suspects and obstacle is None:
        base = target if target.name else target.resolve()  # --out . names no directory of its own
        cores_target = base.with_name(base.name + "-cores")
        _refuse_results(cores_target, "cores study")
        plan.cores = Planned(*cores_study(text, study, file, suspects, cores_per_cell(store)), cores_target)
        plan.cores_suspects, plan.own_study = suspects, untestable
        plan.skipped = [line for line in skipped if line not in untestable]
    elif obstacle is not None:
        plan.skipped = [f"{line} (nor a study of its own here: {obstacle})" if line in untestable else line
                        for line in skipped]
    if tests or evidence.workloads:
        _refuse_results(target, "follow-up study")
        plan.follow_up = Planned(*follow_up_study(text, study, file, tests, evidence), target)
    return plan
