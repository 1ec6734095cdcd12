"""What evaluating a paper's finding gives: an estimate per check, a verdict per check, and the
finding's record with its verdict in words. Types only, below both the evaluation
(findings.py) and the provenance that annotates its results (finding_provenance.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from isobench.analysis.finding_power import DESIGN_UNTESTABLE, FAILS, HOLDS, INCONCLUSIVE, UNTESTABLE


@dataclass
class Estimate:
    value: float
    low: float | None
    high: float | None
    n: int
    #: the interval's scale: "log" for ratios (distances in log units), "linear" otherwise
    scale: str = "log"
    shown: str = ""
    #: the standard error and degrees of freedom of the interval (log units for ratios), for the MDE
    se: float | None = None
    df: float | None = None


@dataclass
class CheckResult:
    what: str
    verdict: str
    shown: str = ""
    reason: str = ""
    repetitions_needed: int | None = None
    estimate: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    #: the minimum detectable effect (finding_power.py): a ratio, or an amount in the metric's unit
    mde: float | None = None
    #: a ratio check's A/A: its reference against its twin ("no A/A in this study" without one)
    aa: str = ""


@dataclass
class FindingResult:
    paper: str
    id: str
    source: str
    claim: str
    paper_figure: str
    origin: str
    verdict: str
    here: str
    reason: str
    repetitions_needed: int | None = None
    checks: list[CheckResult] = field(default_factory=list)
    #: the verdict's own sentence where it has one (not reproduced in this setting)
    words: str = ""
    #: the rule's date and hash, and whether it changed after its data (analysis/finding_provenance.py)
    rule_written: str = ""
    rule_hash: str = ""
    changed_after_data: bool = False
    change_reason: str = ""
    #: a rule changed after its data: the recorded rule's hash and its verdict on the same stores
    rule_hash_before: str = ""
    verdict_before: str | None = None

    @property
    def verdict_words(self) -> str:
        """The table's wording: literature rows "match" or "do not match" instead of "hold"."""
        if self.words:
            return self.words
        if self.origin == "literature" and self.verdict in (HOLDS, FAILS):
            return "matches the literature" if self.verdict == HOLDS else "does not match the literature"
        if self.verdict == INCONCLUSIVE and self.repetitions_needed:
            return f"inconclusive: about {self.repetitions_needed} repetitions would settle it"
        if self.verdict == INCONCLUSIVE:
            return "inconclusive"
        if self.verdict in (UNTESTABLE, DESIGN_UNTESTABLE):
            return f"{self.verdict}: {self.reason}"
        return self.verdict

    def as_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["type"] = "finding"
        record["verdict_words"] = self.verdict_words
        return record
