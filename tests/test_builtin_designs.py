"""Every built-in study writes its whole design: the resolving design's defaults fill in nothing,
each study runs the schedule its file documents, and each departure from the resolving design
carries its reason in the file. The quick variants `isobench replicate --quick` runs stay the
small designs they write."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest
import yaml

from isobench.analysis.finding_spec import PAPERS, load_findings
from isobench.design import RESOLVING_FIELDS, duet_obstacle, resolve
from isobench.plan import expand
from isobench.plan.cores import assign_cores
from isobench.replicate.study_text import study_text
from isobench.study.aa import is_aa_entry
from isobench.studyfile import builtin_studies, load_study_text, resolve_study_text

#: study -> the schedule its file documents; a sequential one says why at its top
SCHEDULES = {
    "default": "duet",
    "density": "sequential",  # tenant groups, host-wide memory
    "gpu-containers": "sequential",  # one GPU
    "layers": "duet",
    "llm": "duet",
    "park-bahn-2023": "sequential",   # tenant groups, host-wide kernel evidence
    "park-bahn-nvm": "sequential",    # tenant groups, host-wide write-back traces
    "prashanthi-2023": "duet",
    "prashanthi-2023-memory": "sequential",  # host-wide memory (F3)
    "prashanthi-2023-gpu": "sequential",  # one GPU
    "prashanthi-2023-syscalls": "duet",
    "samani-salehi": "sequential",    # the cores a cell gets are the experiment
    "samani-salehi-gpu": "sequential",  # one GPU
    "siddaramanna-john": "duet",
    "siddaramanna-john-models": "duet",
}
#: studies without an A/A entry, each writing `aa: false` with its reason
NO_AA = {"park-bahn-nvm", "density"}
#: the resolving design's values a written field may differ from only with a reason beside it
RESOLVING_VALUES: dict[str, Any] = {**RESOLVING_FIELDS, "schedule": "duet", "duet_swap_s": 0.02,
                                    "cell_cores": "disjoint"}
HOSTS = ([0, 1], [0, 1, 2, 3], list(range(16)))


def _text(name: str) -> str:
    return resources.files("isobench.studies").joinpath(f"{name}.yaml").read_text()


def test_the_table_names_every_builtin_study() -> None:
    assert set(SCHEDULES) == set(builtin_studies())


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_builtin_study_fills_in_nothing(name: str) -> None:
    text = _text(name)
    study, resolved, design = resolve_study_text(text, name)
    assert design.filled == {} and design.aa_added is None, f"{name} relies on defaults: {design.filled}"
    assert resolved == text  # the text stored and run is the file, comments and all
    raw = yaml.safe_load(text)
    for cores in (None, *HOSTS):  # whatever host it lands on
        _, again = resolve(raw, study, cores)
        assert again.filled == {} and again.schedule == SCHEDULES[name]
    # written, not inherited from the schema either
    needed = {"schedule", "cell_cores", *RESOLVING_FIELDS}
    if raw["schedule"] == "duet":
        needed.add("duet_swap_s")
    assert needed <= set(raw), f"{name} does not write {sorted(needed - set(raw))}"
    if raw["repetitions"] == "auto":
        adaptive = raw["adaptive"]
        assert {"min_repetitions", "max_repetitions", "max_time_s"} <= set(adaptive)
        # a replication study stays within 30 minutes of running cells on 2 cores
        assert adaptive["max_time_s"] <= 30 * 60
    else:
        assert "adaptive" not in raw


def _has_reason(text: str, key: str) -> bool:
    """The top-level ``key:`` line carries a comment, or a comment line stands just above it."""
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"{key}:"))
    value = lines[index].split(":", 1)[1]
    return "#" in value or (index > 0 and lines[index - 1].startswith("#"))


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_builtin_study_documents_its_design(name: str) -> None:
    text = _text(name)
    raw = yaml.safe_load(text)
    assert raw["schedule"] == SCHEDULES[name]
    header = text.split("\nname:", 1)[0]
    if SCHEDULES[name] == "duet":
        assert "the resolving one" in header, f"{name}'s header does not say it uses the resolving design"
    else:
        assert "Design: sequential" in header, f"{name}'s header does not say why it keeps another design"
    departures = [key for key, value in RESOLVING_VALUES.items() if key in raw and raw[key] != value]
    if raw.get("repetitions") == "auto":
        adaptive = raw["adaptive"]
        if (adaptive["min_repetitions"], adaptive["max_repetitions"]) != (6, 12):
            departures.append("adaptive")
    if raw.get("aa") is False:
        departures.append("aa")
    missing = [key for key in departures if not _has_reason(text, key)]
    assert not missing, f"{name} departs from the resolving design without a reason at {missing}"


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_builtin_study_states_its_noise_floor(name: str) -> None:
    study = load_study_text(_text(name), name, check_host=False)
    has_aa = any(p.key != study.baseline and is_aa_entry(study, p) for p in study.platforms)
    assert has_aa == (name not in NO_AA)
    assert study.aa == (name not in NO_AA)  # the one without writes `aa: false`, with its reason


@pytest.mark.parametrize("name", [n for n, schedule in SCHEDULES.items() if schedule == "duet"])
def test_duet_studies_pair_and_trade_on_any_host(name: str) -> None:
    """No entry keeps a duet study off the duet on a 2-, 4- or 16-core host, and every cell of
    every pair gets a side of its own to trade."""
    study = load_study_text(_text(name), name, check_host=False)
    for cores in HOSTS:
        assert duet_obstacle(study, cores) is None
        cells = assign_cores(study, expand(study, repetitions=1), cores)
        assert all(cell.duet is not None and cell.cores for cell in cells)
        pairs: dict[str, set[str]] = {}
        for cell in cells:
            pairs.setdefault(cell.duet.pair, set()).add(cell.cores)  # type: ignore[union-attr]
        assert all(len(sides) == 2 for sides in pairs.values())


@pytest.mark.parametrize("name", ["park-bahn-2023", "park-bahn-nvm", "samani-salehi"])
def test_sequential_reasons_agree_with_the_tool(name: str) -> None:
    """Where a sequential study's reason is one the tool knows (tenant groups, every core to each
    cell), the tool would not pair it either."""
    raw = yaml.safe_load(_text(name))
    raw.pop("schedule")
    study = load_study_text(yaml.safe_dump(raw), name, check_host=False)
    reason = duet_obstacle(study, [0, 1])
    assert reason is not None and re.search(r"tenant|cell_cores", reason)


def test_the_layer_ladder_has_no_rung_that_picks_its_cores() -> None:
    """Every cell of the layer ladder runs on its side's cores, through its cgroup's cpuset: a
    cpuset rung would be the baseline again, and the full runtimes take the layout's cpuset."""
    raw = yaml.safe_load(_text("layers"))
    assert all("cpuset" not in (p.get("knobs") or {}) for p in raw["platforms"])
    assert {p["name"] for p in raw["platforms"]} >= {"layer-namespaces", "layer-cpu-quota", "layer-memory",
                                                     "layer-seccomp", "layer-overlay", "docker", "oci"}


@pytest.mark.parametrize("paper", list(PAPERS))
def test_quick_variants_write_their_small_design(paper: str) -> None:
    """`--quick` runs the toy design its findings file writes: no A/A added, no rounds added."""
    findings = load_findings(paper)
    for name in findings.studies:
        study, _, design = resolve_study_text(study_text(findings, name, True, None), f"{name} (quick)")
        assert design.filled == {} and design.aa_added is None, f"{name} --quick: {design.filled}"
        assert study.repetitions != "auto" and int(study.repetitions) <= 2
