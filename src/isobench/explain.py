"""`isobench explain DIR`: run the experiments that test a study's suspected causes.

A root-cause hint with an intervention (today the data path: the same entry with its data set
copied into the platform) stays "suspected" until that entry has run beside the one it explains.
``explain`` writes one follow-up study with the baseline, the study's A/A entries, each entry
under suspicion and that entry with the intervention, for the workloads concerned; it keeps the
study's own design (the resolving one, as stored), runs it, and reads the hints again: each is
then confirmed (the intervention removed the cost, with its numbers) or refuted.

The follow-up is an ordinary study directory (``DIR/explain`` unless ``--out``): its report,
summary and resume work as for any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from isobench.analysis.hints import Hint
from isobench.errors import UserError
from isobench.store import Store
from isobench.study.aa import is_aa_entry
from isobench.study.model import Study
from isobench.studyfile import load_study_text, parse_study_yaml


def interventions_of(hints: list[Hint], study: Study) -> tuple[list[dict[str, Any]], list[str]]:
    """The interventions the hints name, each once (workload key, entry key, knobs to add), and
    why any cannot run: the entry's platform does not take the knob."""
    from isobench.platforms import PLATFORMS

    found: list[dict[str, Any]] = []
    skipped: list[str] = []
    plugins = {entry.key: entry.name for entry in study.platforms}
    for hint in hints:
        test = hint.test
        if hint.status != "suspected" or test is None or test in found:
            continue
        plugin = plugins.get(test["entry"])
        missing = sorted(set(test["knobs"]) - set(PLATFORMS.get(plugin).knobs)) if plugin else ["the entry"]
        if missing:
            skipped.append(f"{test['workload']} on {test['entry']}: its platform has no {', '.join(missing)}")
            continue
        found.append(test)
    return found, skipped


def intervention_label(entry: str, knobs: dict[str, Any]) -> str:
    return "-".join([entry, *(f"{k.replace('_', '-')}-{v}" for k, v in sorted(knobs.items()))])[:64]


def follow_up_study(text: str, study: Study, file: str, tests: list[dict[str, Any]]) -> tuple[str, str]:
    """(the follow-up study's text, its name): the stored study (``text``, loaded as ``study``
    from ``file``) with only the workloads and the platform entries the tests need, plus one
    entry per intervention."""
    raw = parse_study_yaml(text, file)
    baseline = study.baseline or study.platforms[0].key
    wanted_workloads = {t["workload"] for t in tests}
    wanted_entries = {t["entry"] for t in tests}
    platforms: list[dict[str, Any]] = []
    for entry, written in zip(study.platforms, raw["platforms"], strict=True):
        if entry.key == baseline or entry.key in wanted_entries or is_aa_entry(study, entry):
            platforms.append(written)
    for test in tests:
        index = next(i for i, e in enumerate(study.platforms) if e.key == test["entry"])
        written = dict(raw["platforms"][index])
        written["label"] = intervention_label(test["entry"], test["knobs"])
        written["knobs"] = {**(written.get("knobs") or {}), **test["knobs"]}
        if written not in platforms:
            platforms.append(written)
    raw["workloads"] = [w for entry, w in zip(study.workloads, raw["workloads"], strict=True)
                        if entry.key in wanted_workloads]
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
    tests, skipped = interventions_of(analyse(store, with_views=False).hints, study)
    if not tests:
        return None, skipped
    target = out if out is not None else directory / "explain"
    if target.exists() and any(target.iterdir()):
        raise UserError("the follow-up study's directory already holds results", file=str(target),
                        fix="give another --out, or read it with `isobench summary`")
    text, name = follow_up_study(text, study, file, tests)
    return (text, name, target), skipped
