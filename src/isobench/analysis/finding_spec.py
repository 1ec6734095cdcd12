"""A paper's findings written down as data: what each one claims, and the rule that tests it.

Each built-in replication has a file ``studies/findings/<paper>.yaml`` beside its studies:

    paper: prashanthi-2023
    title: "Prashanthi et al. 2023, ..."
    studies: [prashanthi-2023]          # the studies `isobench replicate` runs for it
    study_needs: {prashanthi-2023: [docker]}   # a study this host cannot run is skipped, saying why
    quick: {prashanthi-2023: {...}}     # top-level study fields replaced for --quick (toy size)
    findings:
      - id: F1
        source: "Prashanthi 5.1.1"
        claim: "lightweight training suffers most in a container"
        paper: "compute +53.7% LeNet, +16.3% MobileNet, +7.3% ResNet"
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
``analysis/findings.py`` evaluates the rules; nothing about a paper is hidden in code.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from isobench.errors import UserError

#: what a check may need that a host can lack (see replicate/capabilities.py for the probes)
CAPABILITIES = ("gpu", "kvm", "perf-hardware", "rapl", "ftrace", "docker", "gvisor")

KINDS = ("ratio", "ratio_of_ratios", "value", "difference", "largest", "nvmsim")

_EXPECT = re.compile(r"^\s*(?:(>|<)\s*(-?[0-9.eE+-]+)|within\s+([0-9.]+))\s*$")


def _known_capabilities(value: list[str]) -> list[str]:
    unknown = [v for v in value if v not in CAPABILITIES]
    if unknown:
        raise ValueError(f"unknown capability {unknown[0]!r}; known: {', '.join(CAPABILITIES)}")
    return value


class Expectation(BaseModel):
    """``> x``, ``< x`` or ``within m`` (a ratio inside [1/(1+m), 1+m])."""

    op: Literal[">", "<", "within"]
    value: float

    @classmethod
    def parse(cls, text: str) -> Expectation:
        match = _EXPECT.match(text)
        if not match:
            raise ValueError(f"expect {text!r} is not '> X', '< X' or 'within M'")
        if match.group(3) is not None:
            return cls(op="within", value=float(match.group(3)))
        return cls(op=match.group(1), value=float(match.group(2)))  # type: ignore[arg-type]

    def describe(self, percent: bool = False) -> str:
        if self.op == "within":
            return f"within ±{self.value:.0%}"
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
    #: divide each cell's metric by this one of the same cell (a share)
    per: str | None = None
    #: only the groups whose knobs include these (a sweep's value)
    knobs: dict[str, object] = Field(default_factory=dict)


class Check(Side):
    what: str
    kind: Literal["ratio", "ratio_of_ratios", "value", "difference", "largest", "nvmsim"] = "ratio"
    expect: str = "> 1.0"
    #: ratio_of_ratios: the second comparison (this check's ratio over ``other``'s)
    other: Side | None = None
    #: largest: the metric expected to carry the largest added time among ``metrics``
    metrics: list[str] = Field(default_factory=list)
    needs: list[str] = Field(default_factory=list)
    #: how to show a value: a scale and unit (bytes shown in GB: scale 1e-9, unit "GB")
    scale: float = 1.0
    unit: str = ""
    #: nvmsim: the NVM device, slow device and capacity of the replay
    nvm: str = "pcm"
    slow: str = "hdd"
    capacity_mib: float = 16.0

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

    @property
    def expectation(self) -> Expectation:
        return Expectation.parse(self.expect)


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


class PaperFindings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    paper: str
    title: str
    studies: list[str]
    #: study -> what the host must have for it to run at all; a study whose needs the host lacks
    #: is not run, and the checks that read it cannot be tested (a GPU study on a CPU host)
    study_needs: dict[str, list[str]] = Field(default_factory=dict)
    quick: dict[str, dict[str, object]] = Field(default_factory=dict)
    findings: list[Finding]

    @model_validator(mode="after")
    def _study_needs(self) -> PaperFindings:
        for study, needs in self.study_needs.items():
            if study not in self.studies:
                raise ValueError(f"study_needs names {study!r}, which is not among studies")
            _known_capabilities(needs)
        return self


PAPERS = ("park-bahn-2023", "prashanthi-2023", "samani-salehi", "siddaramanna-john")


def load_findings(paper: str) -> PaperFindings:
    """The built-in findings of ``paper`` (one of PAPERS)."""
    if paper not in PAPERS:
        raise UserError(f"unknown paper {paper!r}", field="PAPER", fix=f"use one of {', '.join(PAPERS)} or all")
    name = f"findings/{paper}.yaml"
    text = resources.files("isobench.studies").joinpath(name).read_text()
    return parse_findings(text, name)


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
