"""Tenant groups on real processes and containers: started together, each with its own results."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import pytest

from isobench.plan import expand
from isobench.store import Store
from isobench.studyfile import load_study_text
from tests.conftest import need_docker, run_cli, write_study
from tests.leftovers import all_leftovers

SPIN = {"name": "cpu-spin", "params": {"iterations": 4, "work": 60_000}}


@pytest.fixture(scope="module")
def tenant_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_docker()
    tmp = tmp_path_factory.mktemp("tenancy")
    study = write_study(tmp / "tenants.yaml", {
        "name": "tenants", "workloads": [SPIN],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "x4", "tenants": 4},
                      {"name": "docker"}, {"name": "docker", "label": "d2", "tenants": 2}],
        "repetitions": 1, "warmup": 0, "seed": 1, "probes": {}})
    out = tmp / "out"
    result = run_cli("run", str(study), "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _cells(out: Path) -> list[dict]:
    store = Store.open(out)
    try:
        return store.cells()
    finally:
        store.close()


def test_four_tenants_start_together_and_all_finish(tenant_study: Path) -> None:
    cells = [c for c in _cells(tenant_study) if c["platform_key"] == "x4"]
    assert len(cells) == 4 and all(c["status"] == "ok" and c["items"] == 4 for c in cells)
    tenancy = [c["platform_info"]["tenancy"] for c in cells]
    assert sorted(t["tenant"] for t in tenancy) == [0, 1, 2, 3]
    assert len({t["group"] for t in tenancy}) == 1 and all(t["tenants"] == 4 for t in tenancy)
    # The runner launched all four at once; their interpreters then came up on a shared 2-core
    # host within about one interpreter start-up of each other (on an idle host: ~0.2 s).
    assert tenancy[0]["release_skew_s"] < 0.25
    slowest_startup = max(c["startup_s"] for c in cells)
    assert tenancy[0]["start_skew_s"] < max(1.0, slowest_startup), (tenancy[0], slowest_startup)
    # And they ran side by side: every tenant had started before any of them finished.
    starts = [c["started_at"] + c["startup_s"] for c in cells]
    ends = [c["started_at"] + c["wall_s"] for c in cells]
    assert max(starts) < min(ends)
    # Each tenant is its own process, with its own cgroup and its own stored items.
    assert len({c["inside"]["pid"] for c in cells}) == 4
    assert len({c["platform_info"]["cgroup"] for c in cells}) == 4
    # co-tenants share the cores on purpose: only steal can mark a tenant contaminated
    accounted = [c["platform_info"]["interference"] for c in cells if c["platform_info"].get("interference")]
    assert accounted and all("3 co-tenant" in a["judged_on"] for a in accounted)
    runner = cells[0]["platform_info"]["runner"]  # other agents' runs may be going on beside this one
    assert not [item for found in all_leftovers().values() for item in found if runner in item]


def test_container_tenants_run_side_by_side(tenant_study: Path) -> None:
    cells = [c for c in _cells(tenant_study) if c["platform_key"] == "d2"]
    assert len(cells) == 2 and all(c["status"] == "ok" for c in cells)
    assert len({c["platform_info"]["container_id"] for c in cells}) == 2
    assert cells[0]["platform_info"]["tenancy"]["start_skew_s"] < 3.0
    # The two containers overlapped in time: each started before the other ended.
    spans = sorted((c["started_at"], c["started_at"] + c["wall_s"]) for c in cells)
    assert spans[1][0] < spans[0][1]


def test_summary_compares_each_tenant_with_the_same_cell_alone(tenant_study: Path) -> None:
    result = run_cli("summary", str(tenant_study))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "interference: cpu-spin on baremetal/x4 (4 tenants)" in text and "alone on baremetal" in text
    assert "interference: cpu-spin on docker/d2 (2 tenants)" in text and "alone on docker/runc" in text
    assert "start skew median" in text
    # A tenant group of the baseline's platform is not mistaken for the A/A entry.
    assert "A/A noise floor for cpu-spin: baremetal/x4" not in text


def test_plan_keeps_groups_whole_and_mixed_groups_list_their_workloads() -> None:
    study = load_study_text(json.dumps({
        "name": "mix", "workloads": [SPIN, {"name": "cpu-spin", "label": "big", "params": {"work": 9}}],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "mix", "tenants": ["big", "cpu-spin", "big"]}],
        "repetitions": 2, "warmup": 1}), "mix.yaml")
    cells = expand(study)
    assert [c.seq for c in cells] == list(range(len(cells)))
    groups: dict[str, list] = {}
    for cell in cells:
        if cell.tenant:
            groups.setdefault(cell.tenant.group, []).append(cell)
    assert len(groups) == 3  # one mixed group per round (1 warm-up + 2 measured)
    for members in groups.values():
        assert [m.workload_key for m in members] == ["big", "cpu-spin", "big"]
        assert [m.tenant.index for m in members] == [0, 1, 2]
        seqs = [m.seq for m in members]
        assert seqs == list(range(seqs[0], seqs[0] + 3))  # contiguous: started and stored together
        assert len({m.cell_id for m in members}) == 3


def test_unknown_tenant_workload_is_a_user_error(tmp_path: Path) -> None:
    study = write_study(tmp_path / "bad.yaml", {"name": "bad", "workloads": [SPIN],
                                               "platforms": [{"name": "baremetal", "tenants": ["nope"]}]})
    result = run_cli("plan", str(study))
    assert result.returncode == 2 and "tenants" in result.stderr and "nope" in result.stderr


def test_a_group_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    store = Store.create(tmp_path, "name: x", "x", "x.yaml", {})
    study = load_study_text(json.dumps({"name": "g", "workloads": [SPIN],
                                        "platforms": [{"name": "baremetal", "tenants": 2}],
                                        "repetitions": 1, "warmup": 0}), "g.yaml")
    first, second = expand(study)
    good = SimpleNamespace(cell=first, hello=None, status="ok", exit_code=0, error=None, stderr_tail="",
                           started_at=0.0, wall_s=1.0, startup_s=0.1, items=[], platform_info={}, setup={},
                           done=None, probes=None)
    broken = SimpleNamespace(**{**vars(good), "cell": second, "items": None})  # fails while being written
    with pytest.raises(TypeError):
        store.record_all([good, broken], "baremetal")
    assert store.finished_ids() == set()
    assert store.record_all([good, SimpleNamespace(**{**vars(good), "cell": second})], "baremetal") == 2
    assert store.record_all([good], "baremetal") == 0  # already stored: skipped, not doubled
    store.close()
    rows = sqlite3.connect(tmp_path / "isobench.sqlite").execute("SELECT COUNT(*) FROM cells").fetchone()
    assert rows == (2,)
