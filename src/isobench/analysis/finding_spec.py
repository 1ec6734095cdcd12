"""A paper's findings written down as data: what each one claims, and the rule that tests it.

Each built-in replication has a file ``studies/findings/<paper>.yaml`` beside its studies:

    paper: prashanthi-2023
    title: "Prashanthi et al. 2023, ..."
    studies: [prashanthi-2023]          # the studies `isobench replicate` runs for it
    study_needs: {prashanthi-2023: [docker]}   # a study this host cannot run is skipped, saying why
    overrides: {density: {...}}         # top-level study fields replaced for every run of this paper
    quick: {prashanthi-2023: {...}}     # top-level study fields replaced for --quick (toy size)
    findings:
      - id: F1
        source: "Prashanthi 5.1.1"
        claim: "lightweight training suffers most in a container"
        paper: "compute +53.7% LeNet, +16.3% MobileNet, +7.3% ResNet"
        written: 2026-11-24             # when the rule was last written (required of the built-ins)
        revisions: []                   # each later change: {date, reason}
        checks:
          - what: "LeNet compute, Docker vs bare metal"
            kind: ratio
            workload: lenet-train
            platform: docker
            metric: [phase.forward, phase.backward, phase.optimizer]   # summed per cell
            expect: "> 1.10"

A finding holds when every check it can test holds, does not hold when one resolves the
other way, and is inconclusive otherwise; checks that need what the host lacks (``needs``)
are reported as such, and a finding none of whose checks can run here "cannot be tested".
A check's ``effect`` (the paper's, on the check's scale), ``design_limit`` and a finding's
``setting`` decide when "does not hold" is what the design can say (analysis/finding_power.py).
``analysis/findings.py`` evaluates the rules; nothing about a paper is hidden in code.
"""

from __future__ import annotations

import datetime
import re
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from isobench.errors import UserError

#: what a check may need that a host can lack (see replicate/capabilities.py for the probes)
CAPABILITIES = ("gpu", "kvm", "perf-hardware", "rapl", "ftrace", "docker", "gvisor")

KINDS = ("ratio", "ratio_of_ratios", "value", "difference", "largest", "nvmsim")

_EXPECT = re.compile(r"^\s*(?:(>|<)\s*(-?[0-9.eE+-]+)|within\s+([0-9.]+)"
                     r"|between\s+(-?[0-9.eE+-]+)\s+and\s+(-?[0-9.eE+-]+))\s*$")


def _known_capabilities(value: list[str]) -> list[str]:
    unknown = [v for v in value if v not in CAPABILITIES]
    if unknown:
        raise ValueError(f"unknown capability {unknown[0]!r}; known: {', '.join(CAPABILITIES)}")
    return value


class Expectation(BaseModel):
    """``> x``, ``< x``, ``within m`` (a ratio inside [1/(1+m), 1+m]) or ``between a and b``
    (a two-sided band around a cited figure: the interval must lie inside [a, b])."""

    op: Literal[">", "<", "within", "between"]
    value: float
    #: between: the band's upper end (``value`` is its lower end)
    upper: float | None = None

    @classmethod
    def parse(cls, text: str) -> Expectation:
        match = _EXPECT.match(text)
        if not match:
            raise ValueError(f"expect {text!r} is not '> X', '< X', 'within M' or 'between A and B'")
        if match.group(3) is not None:
            return cls(op="within", value=float(match.group(3)))
        if match.group(4) is not None:
            low, high = float(match.group(4)), float(match.group(5))
            if not low < high:
                raise ValueError(f"expect {text!r}: the band's lower end must be below its upper end")
            return cls(op="between", value=low, upper=high)
        return cls(op=match.group(1), value=float(match.group(2)))  # type: ignore[arg-type]

    def describe(self, percent: bool = False) -> str:
        if self.op == "within":
            return f"within ±{self.value:.0%}"
        if self.op == "between":
            return f"between {self.value:g} and {self.upper:g}"
        return f"{self.op} {self.value:g}"


class Side(BaseModel):
    """One comparison: a workload on a platform (by its label) against the study's baseline."""

    model_config = ConfigDict(extra="forbid")

    study: str | None = None
    workload: str
    platform: str
    #: the reference platform (label); default: the study's baseline
    against: str | None = None
    #: the reference workload (key); default: the same workload (a platform comparison). Another
    #: workload on the same platform compares two settings, e.g. inference on the CPU over the GPU
    against_workload: str | None = None
    #: one metric, or several summed per cell (e.g. the compute phases)
    metric: str | list[str] = "e2e"
    #: divide each cell's metric by this one of the same cell (a share), or by ``items``: the
    #: cell's measured items (a count per item)
    per: str | None = None
    #: only the groups whose knobs include these (a sweep's value)
    knobs: dict[str, object] = Field(default_factory=dict)
    #: the reference's knobs where they differ from ``knobs``: the same entry at another value of a
    #: sweep (e.g. one core against two), for a finding about the sweep itself
    against_knobs: dict[str, object] | None = None

    @property
    def reference_knobs(self) -> dict[str, object]:
        return self.knobs if self.against_knobs is None else self.against_knobs


class Check(Side):
    what: str
    kind: Literal["ratio", "ratio_of_ratios", "value", "difference", "largest", "nvmsim"] = "ratio"
    expect: str = "> 1.0"
    #: ratio_of_ratios: the second comparison (this check's ratio over ``other``'s)
    other: Side | None = None
    #: largest: the metric expected to carry the largest added time among ``metrics``
    metrics: list[str] = Field(default_factory=list)
    needs: list[str] = Field(default_factory=list)
    #: measured in the paper's own setting (the finding's ``setting.paper``, e.g. on a GPU), where
    #: the finding's other checks measure in this host's (``setting.here``): where such a check
    #: was tested, the paper's setting decides the finding (finding_power.combine)
    in_setting: bool = False
    #: how to show a value: a scale and unit (bytes shown in GB: scale 1e-9, unit "GB")
    scale: float = 1.0
    unit: str = ""
    #: nvmsim: the NVM device, slow device and capacity of the replay
    nvm: str = "pcm"
    slow: str = "hdd"
    capacity_mib: float = 16.0
    #: nvmsim: the capacity as a multiple of each trace's footprint (its distinct pages written
    #: back), in place of capacity_mib; with ``effect`` (the paper's improvement, 0.82) the result
    #: also names the capacity each trace needs to reach it
    capacity_footprint: float | None = None
    #: nvmsim: charge the NVM system the write-through it owes at the trace's end (its dirty pages)
    drain: bool = False
    #: the paper's effect on this check's scale (a ratio: 1.537 for +53.7%): "does not hold" then
    #: needs the design to have been able to see it (analysis/finding_power.py)
    effect: float | None = None
    #: a limit of the design no statistic sees: a "does not hold" reads "not testable by this design"
    design_limit: str = ""
    #: the literature gives no figure for this comparison (what is missing, and where it was looked
    #: for): the estimate is shown, with no band and no verdict ("cannot be tested")
    no_figure: str = ""

    # the workload/platform of a check that needs no study (only `needs`) may be left out
    workload: str = ""
    platform: str = ""

    @field_validator("expect")
    @classmethod
    def _expect(cls, value: str) -> str:
        Expectation.parse(value)
        return value

    @field_validator("needs")
    @classmethod
    def _needs(cls, value: list[str]) -> list[str]:
        return _known_capabilities(value)

    @model_validator(mode="after")
    def _effect(self) -> Check:
        if self.effect is not None and self.kind in ("ratio", "ratio_of_ratios") and self.effect <= 0:
            raise ValueError(f"effect {self.effect:g} of a ratio must be positive (1.5 for +50%)")
        return self

    @property
    def expectation(self) -> Expectation:
        return Expectation.parse(self.expect)


class Setting(BaseModel):
    """Where the paper measured and where this host measures, when they differ (GPU and CPU)."""

    model_config = ConfigDict(extra="forbid")

    paper: str
    here: str


class Revision(BaseModel):
    """A change to a finding's rule made after one of its studies had been run, and why."""

    model_config = ConfigDict(extra="forbid")

    date: datetime.date
    reason: str


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    claim: str
    #: the paper's own figure, as the paper gives it
    paper: str
    #: "paper": a seed paper's finding; "literature": a published figure for a platform the seeds skipped
    origin: Literal["paper", "literature"] = "paper"
    needs: list[str] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    #: why the rule is what it is (shown in docs/replication.md)
    rule: str = ""
    #: the date the rule (its text and checks) was last written; required of the built-ins, so a
    #: reader can tell a rule written before the data from one written after (finding_rules.py)
    written: datetime.date | None = None
    #: each change made after a study had been run: when, and why
    revisions: list[Revision] = Field(default_factory=list)
    #: the runsc platform (ptrace, systrap, kvm) the cited figure was measured on: the result
    #: names the platform this host's gVisor cells ran on, and says when it differs
    runsc_platform: Literal["ptrace", "systrap", "kvm"] | None = None
    #: a limit of the design for every check (see Check.design_limit)
    design_limit: str = ""
    #: the paper's setting, where this host tests another: a "does not hold" reads "not reproduced"
    setting: Setting | None = None


class PaperFindings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paper: str
    title: str
    studies: list[str]
    #: study -> what the host must have for it to run at all; a study whose needs the host lacks
    #: is not run, and the checks that read it cannot be tested (a GPU study on a CPU host)
    study_needs: dict[str, list[str]] = Field(default_factory=dict)
    #: study -> top-level fields replaced for this paper's runs, full and quick (``quick`` replaces
    #: them again): a shared study run at the part and size this paper's findings read
    overrides: dict[str, dict[str, object]] = Field(default_factory=dict)
    quick: dict[str, dict[str, object]] = Field(default_factory=dict)
    findings: list[Finding]

    @model_validator(mode="after")
    def _study_needs(self) -> PaperFindings:
        for study, needs in self.study_needs.items():
            if study not in self.studies:
                raise ValueError(f"study_needs names {study!r}, which is not among studies")
            _known_capabilities(needs)
        for study in self.overrides:
            if study not in self.studies:
                raise ValueError(f"overrides names {study!r}, which is not among studies")
        return self


PAPERS = ("park-bahn-2023", "prashanthi-2023", "samani-salehi", "siddaramanna-john")


def load_findings(paper: str) -> PaperFindings:
    """The built-in findings of ``paper`` (one of PAPERS)."""
    if paper not in PAPERS:
        raise UserError(f"unknown paper {paper!r}", field="PAPER", fix=f"use one of {', '.join(PAPERS)} or all")
    name = f"findings/{paper}.yaml"
    text = resources.files("isobench.studies").joinpath(name).read_text()
    parsed = parse_findings(text, name)
    for index, finding in enumerate(parsed.findings):
        if finding.written is None:
            raise UserError(f"finding {finding.id} does not say when its rule was written", file=name,
                            field=f"findings.{index}.written",
                            fix="add `written: YYYY-MM-DD`, the date its rule and checks were last changed")
    return parsed


def parse_findings(text: str, source: str) -> PaperFindings:
    try:
        return PaperFindings.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(first["msg"], file=source, field=where, fix="see analysis/finding_spec.py") from None
    except yaml.YAMLError as exc:
        raise UserError(f"not valid YAML ({exc.__class__.__name__})", file=source,
                        fix="check the indentation and quoting") from None
