"""Rules written before the data: each finding's rule hash, and the rules a study was run under.

A finding's verdict is decided by its checks (comparisons, metrics, expectations, needs, and
any other field that steers the verdict) and explained by its rule text. The rule hash is a
sha256 over a canonical JSON of those, shortened to 12 hex characters. The finding's name,
citation, dates and labels are left out, and so is every field left at its default, so that a
field added to the spec later does not change the hash of a rule that does not use it; the rule
text counts with its whitespace folded, so reflowing it changes nothing.

When ``isobench replicate`` first runs a study's cells it records in the study's store every
finding of the paper as it was then (its spec and hash, :func:`record_rules`); a ``--resume``
keeps that first record. At evaluation (analysis/finding_provenance.py) a finding whose hash
differs from the one recorded with the data was changed after the data could be seen.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from isobench.analysis.finding_spec import Finding, PaperFindings
from isobench.store import Store

#: the store meta key of the record
RULES_META = "finding_rules"
HASH_CHARS = 12
#: what only labels or formats a check: changing it cannot change a verdict
_DISPLAY_ONLY = {"what", "scale", "unit"}
#: what names, cites or dates a finding, or only annotates its reason; every other field (the
#: checks, needs, origin, and whatever later fields decide a verdict) is part of the rule
_NOT_THE_RULE = {"id", "source", "claim", "paper", "written", "revisions", "runsc_platform", "checks", "rule"}


def rule_payload(finding: Finding) -> dict[str, Any]:
    """What decides the finding's verdict, and the text that says why."""
    payload = finding.model_dump(mode="json", exclude_defaults=True, exclude=_NOT_THE_RULE)
    payload["rule"] = " ".join(finding.rule.split())
    payload["checks"] = [check.model_dump(mode="json", exclude_defaults=True, exclude=_DISPLAY_ONLY)
                         for check in finding.checks]
    return payload


def rule_hash(finding: Finding) -> str:
    canonical = json.dumps(rule_payload(finding), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:HASH_CHARS]


def rules_record(paper: PaperFindings, today: datetime.date | None = None) -> dict[str, Any]:
    """The paper's findings as they are now: each one's whole spec (to re-evaluate it later) and hash."""
    return {"paper": paper.paper, "recorded": (today or datetime.date.today()).isoformat(),
            "findings": {f.id: {"hash": rule_hash(f), "spec": f.model_dump(mode="json")} for f in paper.findings}}


def record_rules(directory: Path, paper: PaperFindings) -> bool:
    """Record the paper's rules in the study's store unless a record is there already (the first
    run's stays: it is the one made before the data). False when nothing was written."""
    if not Store.exists(directory):
        return False
    store = Store.open(directory)
    try:
        if store.meta(RULES_META) is not None:
            return False
        store.set_meta(RULES_META, json.dumps(rules_record(paper), sort_keys=True))
        return True
    finally:
        store.close()


def recorded_rules(directory: Path) -> dict[str, Any] | None:
    """The record the study's cells were run under; None for a store that has none (run before
    rules were recorded, or by `isobench run`) or an unreadable one."""
    if not Store.exists(directory):
        return None
    store = Store.open(directory)
    try:
        text = store.meta(RULES_META)
    finally:
        store.close()
    try:
        record = json.loads(text) if text else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("findings"), dict) else None
