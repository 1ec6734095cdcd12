"""`isobench explain DIR`: run the experiments that test a study's suspected causes.

A root-cause hint with an intervention (the same entry with its data set copied in, without the
seccomp filter, without an injected cause, with ``malloc: tuned``, or with one of its own fields
changed: gVisor on the other runsc platform, a container on the host's network; see
analysis/interventions.py) stays "suspected" until that entry has run beside the one it explains;
one that no follow-up can test (more cores for a sandbox's own threads) is listed with why. A resolved overhead that the "why" model (analysis/attribution.py) cannot price
yet, because the study lacks a mechanism's microbenchmark or the probe that counts its events,
needs evidence first. ``explain`` writes one follow-up study with the baseline, the study's A/A
entries, each entry under suspicion, that entry with each intervention, the microbenchmarks
(``syscall-loop``, ``fault-loop``) and counting probes the model lacked, for the workloads
concerned; it keeps the study's own design (the resolving one, as stored), runs it, and reads the
hints again: each is then confirmed (the intervention removed the cost, with its numbers) or
refuted, and each overhead gets its "why" table.

The follow-up is an ordinary study directory (``DIR/explain`` unless ``--out``): its report,
summary and resume work as for any other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from isobench.analysis.attribution import MECHANISMS, Attribution
from isobench.analysis.hint_base import Hint
from isobench.analysis.interventions import (
    already_has,
    describe_fields,
    field_problem,
    label_parts,
    with_fields,
)
from isobench.errors import UserError
from isobench.store import Store
from isobench.study.aa import is_aa_entry
from isobench.study.model import Study
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


def follow_up_study(text: str, study: Study, file: str, tests: list[dict[str, Any]],
                    evidence: Evidence | None = None) -> tuple[str, str]:
    """(the follow-up study's text, its name): the stored study (``text``, loaded as ``study``
    from ``file``) with only the workloads and the platform entries the tests and the evidence
    need, plus one entry per intervention, the microbenchmarks that price each mechanism and the
    probes that count them."""
    evidence = evidence or Evidence()
    raw = parse_study_yaml(text, file)
    baseline = study.baseline or study.platforms[0].key
    wanted_workloads = {t["workload"] for t in tests} | evidence.workloads
    wanted_entries = {t["entry"] for t in tests} | evidence.entries
    platforms: list[dict[str, Any]] = []
    for entry, written in zip(study.platforms, raw["platforms"], strict=True):
        if entry.key == baseline or entry.key in wanted_entries or is_aa_entry(study, entry):
            platforms.append(written)
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


def explain_directory(directory: Path, out: Path | None) -> tuple[tuple[str, str, Path] | None, list[str]]:
    """The follow-up study to run for ``directory`` (text, name, where to write it; None when no
    hint there has an intervention left to run), and the interventions that cannot run, with why."""
    from isobench.analysis.summary import analyse

    store = Store.open(directory)
    text, file = store.meta("study_yaml") or "", f"{directory} (stored study)"
    study = load_study_text(text, file, check_host=False)
    analysis = analyse(store, with_views=False)
    tests, skipped = interventions_of(analysis.hints, study)
    from isobench.analysis.attribution import attribute

    evidence = evidence_needed(attribute(store, analysis.shown, study.baseline or study.platforms[0].key))
    if not tests and not evidence.workloads:
        return None, skipped
    target = out if out is not None else directory / "explain"
    if target.exists() and any(target.iterdir()):
        raise UserError("the follow-up study's directory already holds results", file=str(target),
                        fix="give another --out, or read it with `isobench summary`")
    text, name = follow_up_study(text, study, file, tests, evidence)
    return (text, name, target), skipped
