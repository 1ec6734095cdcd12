"""When each rule was written, whether it changed after its data, and what ran under it.

For every evaluated finding this fills in its rule's date and hash (analysis/finding_rules.py)
and compares the hash with the one recorded in the stores of the studies it reads:

* no record in any of them (a store from before rules were recorded): nothing is claimed;
* the same hash: the rule was written before the data;
* another hash: "changed after seeing data", with the reason from the finding's latest
  ``revisions`` entry, and the verdict the recorded rule gives on the same stores beside the new;
* a record without this finding: it was written after the data, with no earlier verdict.

A finding citing a figure for one runsc platform (``runsc_platform``) also says which platform
this host's gVisor cells ran on (``platform_info["runsc_platform"]``, platforms/runsc.py): read
from the cells of the entries each check compares, so that where a study runs gVisor on two
platforms each check names its own.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from isobench.analysis.finding_power import UNTESTABLE
from isobench.analysis.finding_result import CheckResult, FindingResult
from isobench.analysis.finding_rules import recorded_rules, rule_hash
from isobench.analysis.finding_spec import Check, Finding, PaperFindings
from isobench.store import Store

NO_REASON = "no reason written"


def studies_of(finding: Finding, paper: PaperFindings) -> list[str]:
    """The studies whose stores the finding reads, in the paper's order. A check that reads no
    store (only ``needs``: a setting this replication does not measure) names none: counted as
    the paper's first study, it marked a finding whose data lay in another study as written
    after the data whenever that first study's record was older."""
    default = paper.studies[0] if paper.studies else ""
    reading = [c for c in finding.checks if c.workload or c.kind == "nvmsim"]
    named = {c.study or default for c in reading} | {c.other.study or default for c in reading
                                                     if c.other is not None}
    return [s for s in paper.studies if s in named] or [default]


def _recorded(finding: Finding, paper: PaperFindings, directories: dict[str, Path],
              records: dict[Path, dict | None]) -> tuple[bool, dict | None]:
    """(whether any of the finding's stores holds a record, the finding's entry in the first that
    does); ``records`` caches each store's record."""
    for study in studies_of(finding, paper):
        directory = directories.get(study)
        if directory is not None and directory not in records:
            records[directory] = recorded_rules(directory)
        record = records[directory] if directory is not None else None
        if record is not None:
            entry = record["findings"].get(finding.id)
            return True, entry if isinstance(entry, dict) else None
    return False, None


def _latest_reason(finding: Finding) -> str:
    if not finding.revisions:
        return ""
    return max(finding.revisions, key=lambda r: r.date).reason


def annotate(paper: PaperFindings, results: list[FindingResult], directories: dict[str, Path],
             reevaluate: Callable[[Finding], FindingResult]) -> list[FindingResult]:
    """Fill each result's rule date, hash and provenance; ``reevaluate`` gives a recorded rule's
    verdict on the same stores."""
    records: dict[Path, dict | None] = {}
    for finding, result in zip(paper.findings, results, strict=True):
        result.rule_written = finding.written.isoformat() if finding.written else ""
        result.rule_hash = rule_hash(finding)
        any_record, entry = _recorded(finding, paper, directories, records)
        if not any_record:
            pass
        elif entry is None:
            result.changed_after_data = True
            result.change_reason = _latest_reason(finding) or "written after the data: no rule for it was recorded with them"
        elif entry.get("hash") != result.rule_hash:
            result.changed_after_data = True
            result.change_reason = _latest_reason(finding) or NO_REASON
            result.rule_hash_before = str(entry.get("hash") or "")
            result.verdict_before = _verdict_before(entry, reevaluate)
        _note_runsc(finding, paper, result, directories)
    return results


def _verdict_before(entry: dict[str, Any], reevaluate: Callable[[Finding], FindingResult]) -> str:
    from pydantic import ValidationError

    try:
        old = Finding.model_validate(entry.get("spec"))
    except ValidationError as exc:
        return f"cannot be re-evaluated: the recorded rule no longer parses ({exc.errors()[0]['msg']})"
    try:
        return reevaluate(old).verdict_words
    except ValueError as exc:  # a recorded rule the current evaluator rejects
        return f"cannot be re-evaluated: {exc}"


def runsc_platforms(directories: list[Path], platform_keys: set[str] | None = None) -> list[str]:
    """The runsc platforms the stores' cells recorded (only those of ``platform_keys``, the
    entries' labels, when given), in first-seen order."""
    seen: dict[str, None] = {}
    for directory in directories:
        if not Store.exists(directory):
            continue
        store = Store.open(directory)
        try:
            rows = store.conn.execute("SELECT platform_key, platform_info FROM cells "
                                      "WHERE platform_info LIKE '%runsc_platform%'")
            for row in rows:
                if platform_keys is not None and row["platform_key"] not in platform_keys:
                    continue
                info = json.loads(row["platform_info"])
                if isinstance(info, dict) and info.get("runsc_platform"):
                    seen[str(info["runsc_platform"])] = None
        finally:
            store.close()
    return list(seen)


def _entries(check: Check) -> set[str]:
    """The platform entries (labels) a check's comparison reads, its ``other`` side's included."""
    keys = {check.platform, check.against or ""}
    if check.other is not None:
        keys |= {check.other.platform, check.other.against or ""}
    return keys - {""}


def _runsc_note(cited: str | None, ran: list[str]) -> str:
    if not ran:
        return f"runsc's platform was not recorded with these cells (the cited figure is for {cited})" if cited else ""
    if cited is None:
        return ""
    if ran == [cited]:
        return f"runsc ran on {cited} here, the cited figure's platform"
    return f"the cited figure is for {cited}; this host ran {' and '.join(ran)}"


def _note_runsc(finding: Finding, paper: PaperFindings, result: FindingResult, directories: dict[str, Path]) -> None:
    """Name the runsc platform each check's gVisor cells ran on (read from the cells of the
    entries it compares, so a study with gVisor on two platforms names each check's own), and
    say where it differs from the platform of the cited figure (``runsc_platform``)."""
    if result.verdict == UNTESTABLE:
        return
    stores = [directories[s] for s in studies_of(finding, paper) if s in directories]
    default = paper.studies[0] if paper.studies else ""
    per_check: list[tuple[CheckResult, str | None, list[str]]] = []
    for check, outcome in zip(finding.checks, result.checks, strict=True):
        if not check.workload or outcome.verdict == UNTESTABLE and not outcome.shown:
            continue
        mine = [directories[s] for s in {check.study or default} | ({check.other.study or default}
                                                                     if check.other is not None else set())
                if s in directories]
        cited = None if check.no_figure else finding.runsc_platform
        per_check.append((outcome, cited, runsc_platforms(mine, _entries(check))))
    ran_any = [p for _, _, ran in per_check for p in ran]
    if finding.runsc_platform is None and not ran_any:
        return
    if not per_check:  # no check read a store: the finding's stores as a whole
        per_check = [(CheckResult("", result.verdict), finding.runsc_platform, runsc_platforms(stores))]
    if len({(cited, tuple(ran)) for _, cited, ran in per_check}) == 1:
        _, cited, ran = per_check[0]
        note = _runsc_note(cited, ran)
        if note:
            result.reason = f"{result.reason}; {note}" if result.reason else note
        if ran:
            result.here = f"{result.here} (runsc platform: {' and '.join(ran)})"
        return
    # checks on different runsc platforms: each check names its own
    notes = []
    for outcome, cited, ran in per_check:
        if ran:
            outcome.shown = f"{outcome.shown} (runsc platform: {' and '.join(ran)})"
        note = _runsc_note(cited, ran)
        if note:
            outcome.reason = f"{outcome.reason}; {note}" if outcome.reason else note
            if ran != [cited]:  # the finding's reason names only the checks that differ
                notes.append(f"{outcome.what}: {note}")
    result.here = "; ".join(f"{r.what}: {r.shown}" for r in result.checks if r.shown) or result.here
    if notes:
        joined = "; ".join(notes)
        result.reason = f"{result.reason}; {joined}" if result.reason else joined
