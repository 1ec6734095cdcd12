"""The resolving design: what a study gets for the design fields it does not write, each
fallback with its reason, the A/A entry, the budget, and that a written field always wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from isobench.design import DEFAULT_BUDGET_S, Design, duet_obstacle, resolve
from isobench.errors import UserError
from isobench.studyfile import load_study_text, resolve_study_text
from tests.conftest import run_cli  # noqa: F401 (tiny_spin is a fixture there)

MINIMAL = {"name": "mine", "workloads": [{"name": "resnet-infer"}, {"name": "lenet-train"}],
           "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "slow3", "knobs": {"slowdown": 0.03}},
                         {"name": "docker"}],
           "baseline": "baremetal"}


def _resolve(study: dict, cores: list[int] | None = (0, 1)) -> tuple[dict, Design]:
    parsed = load_study_text(json.dumps(study), "s.yaml", check_host=False)
    return resolve(study, parsed, None if cores is None else list(cores))


def test_a_study_without_design_fields_gets_the_resolving_design() -> None:
    resolved, design = _resolve(MINIMAL)
    assert resolved["schedule"] == "duet" and design.schedule == "duet" and design.fallback is None
    assert resolved["min_seconds"] == 4 and resolved["warmup_items"] == 10 and resolved["warmup"] == 0
    assert resolved["repetitions"] == "auto"
    assert resolved["adaptive"] == {"min_repetitions": 6, "max_repetitions": 24}
    assert design.budget_s == DEFAULT_BUDGET_S
    # An A/A entry: the baseline again, and nothing else differs.
    added = [p for p in resolved["platforms"] if p.get("label") == "aa"]
    assert added == [{"name": "baremetal", "label": "aa"}] and design.aa_added == "aa"
    study = load_study_text(json.dumps(resolved), "s.yaml", check_host=False)
    assert study.adaptive is not None and study.adaptive.max_time_s == DEFAULT_BUDGET_S
    assert "duet" in design.sentence() and "A/A entry 'aa' added" in design.sentence()


def test_a_written_field_always_wins() -> None:
    written = {**MINIMAL, "schedule": "sequential", "min_seconds": 5, "repetitions": 4, "warmup": 2}
    resolved, design = _resolve(written)
    assert (resolved["schedule"], resolved["min_seconds"], resolved["repetitions"], resolved["warmup"]) == \
        ("sequential", 5, 4, 2)
    assert "adaptive" not in resolved and "budget" not in resolved and design.budget_s is None
    assert resolved["warmup_items"] == 10  # not written: filled
    assert set(design.filled) == {"warmup_items"}
    assert design.fallback is None and "the study's choice" in design.sentence()


@pytest.mark.parametrize(("change", "reason"), [
    ({"tenants": 2}, "tenant groups"),
    ({"cell_cores": "all"}, "cell_cores: all"),
    ({"platforms": [{"name": "baremetal"}, {"name": "vm", "options": {"allow_emulation": True}}]},
     "'vm' (vm) cannot hold its cell at a duet's start line"),
    ({"platforms": [{"name": "baremetal"}, {"name": "docker", "knobs": {"cpuset": "1"}}]},
     "'docker' chooses its own cores (cpuset)"),
    ({"platforms": [{"name": "baremetal"}], "aa": False}, "no entry to compare"),
])
def test_each_fallback_says_why(change: dict, reason: str) -> None:
    resolved, design = _resolve({**MINIMAL, **change})
    assert resolved["schedule"] == "sequential" and design.schedule == "sequential"
    assert design.fallback is not None and reason in design.fallback
    assert reason in design.sentence()
    # The rest of the resolving design still applies.
    assert resolved["min_seconds"] == 4 and resolved["repetitions"] == "auto"


def test_a_one_core_host_and_a_quota_wider_than_a_side_fall_back() -> None:
    _, design = _resolve(MINIMAL, cores=[0])
    assert design.fallback is not None and "one core" in design.fallback
    wide = {**MINIMAL, "platforms": [{"name": "baremetal"}, {"name": "docker", "knobs": {"cpus": 1.5}}]}
    _, design = _resolve(wide, cores=[0, 1])
    assert design.fallback is not None and "1.5 cores" in design.fallback
    assert duet_obstacle(load_study_text(json.dumps(wide), "s.yaml", check_host=False), [0, 1, 2, 3, 4]) is None


def test_aa_entry_is_added_only_when_none_has_the_baselines_content() -> None:
    own = {**MINIMAL, "platforms": [{"name": "baremetal", "knobs": {"threads": 1}},
                                    {"name": "baremetal", "label": "twin", "knobs": {"threads": 1}}]}
    resolved, design = _resolve(own)
    assert design.aa_added is None and len(resolved["platforms"]) == 2
    # The same platform with other knobs is a comparison, not an A/A: an A/A is added beside it,
    # with the baseline's knobs.
    knobbed = {**MINIMAL, "platforms": [{"name": "baremetal", "knobs": {"threads": 1}},
                                        {"name": "baremetal", "label": "aa", "knobs": {"threads": 2}}]}
    resolved, design = _resolve(knobbed)
    assert design.aa_added == "aa-2"
    assert resolved["platforms"][-1] == {"name": "baremetal", "knobs": {"threads": 1}, "label": "aa-2"}
    resolved, design = _resolve({**MINIMAL, "aa": False})
    assert design.aa_added is None and design.aa_missing == "aa: false"
    assert all(p.get("label") != "aa" for p in resolved["platforms"])


def test_resolving_a_resolved_study_changes_nothing(tmp_path: Path) -> None:
    text = yaml.safe_dump(MINIMAL)
    study, resolved, design = resolve_study_text(text, "s.yaml")
    assert resolved != text and resolved.startswith("# isobench filled in the resolving design")
    again, resolved_again, design_again = resolve_study_text(resolved, "s.yaml")
    assert resolved_again == resolved and not design_again.filled and design_again.aa_added is None
    assert again.model_dump() == study.model_dump()
    # A study that writes its whole design (the default study) is run as written, comments and all.
    from isobench.studyfile import default_study_text

    default = default_study_text()
    assert resolve_study_text(default, "default")[1] == default


def test_budget_from_the_command_line_and_its_errors() -> None:
    text = yaml.safe_dump(MINIMAL)
    study, resolved, design = resolve_study_text(text, "s.yaml", budget="3m")
    assert design.budget_s == 180 and study.adaptive is not None and study.adaptive.max_time_s == 180
    assert "budget: 3m" in resolved
    with pytest.raises(UserError, match="--budget"):
        resolve_study_text(text, "s.yaml", budget="soon")
    fixed = yaml.safe_dump({**MINIMAL, "repetitions": 4})
    with pytest.raises(UserError, match="repetitions"):
        resolve_study_text(fixed, "s.yaml", budget="3m")
    with pytest.raises(UserError, match="budget"):
        load_study_text(yaml.safe_dump({**MINIMAL, "repetitions": "auto", "budget": "2m",
                                        "adaptive": {"max_time_s": 60}}), "s.yaml")


def test_plan_shows_the_design_and_what_the_budget_buys(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**MINIMAL, "platforms": [*MINIMAL["platforms"], {"name": "baremetal",
                                                                                       "label": "t",
                                                                                       "tenants": 2}]}))
    result = run_cli("plan", str(path), "--budget", "5m")
    assert result.returncode == 0, result.stderr
    assert "design: sequential" in result.stdout and "tenant groups" in result.stdout
    assert "budget 5 min" in result.stdout
    path.write_text(yaml.safe_dump(MINIMAL))
    record = json.loads(run_cli("plan", str(path), "--json", check=True).stdout)
    assert record["schedule"] == "duet" and record["design"]["aa_added"] == "aa"
    assert {c["entry"] for c in record["comparisons"]} == {"aa", "slow3", "docker"}
    assert all("duet" in c["design"] for c in record["comparisons"])
    bad = run_cli("plan", str(path), "--budget", "0m")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--budget" in bad.stderr


def test_a_run_stores_the_resolved_study_and_the_summary_names_its_design(tmp_path: Path, tiny_spin: dict) -> None:
    from tests.conftest import need_root

    need_root()
    # Small on purpose: only the schedule and the A/A entry are left to the design.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "d", "workloads": [tiny_spin], "platforms": [{"name": "baremetal"}],
                                    "repetitions": 1, "warmup": 0, "warmup_items": 0, "min_seconds": None,
                                    "probes": {}, "reruns": 0}))
    out = tmp_path / "out"
    result = run_cli("run", str(path), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    from isobench.store import Store

    store = Store.open(out)
    assert (store.meta("study_yaml") or "").startswith("# isobench filled in the resolving design")
    design = Design.from_meta(store.meta("design"))
    assert design is not None and design.schedule == "duet" and design.aa_added == "aa"
    cells = store.cells()
    assert {c["platform_key"] for c in cells} == {"baremetal", "aa"} and len(cells) == 2
    summary = run_cli("summary", str(out), check=True)
    assert "design: duet" in summary.stdout and "A/A entry 'aa' added" in summary.stdout
    # Resuming with the study file as written is the same study.
    assert run_cli("run", str(path), "--out", str(out), "--resume").returncode == 0
