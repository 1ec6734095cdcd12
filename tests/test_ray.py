"""Studies on a real local Ray cluster of 3 nodes (ray.cluster_utils.Cluster), each node
labelled as its own host, driven through the CLI as a user would."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from isobench.hostinfo import host_cpus
from tests import leftovers
from tests.conftest import ISOBENCH, need_docker, run_cli, wait_for, write_study

pytestmark = pytest.mark.slow
HOSTS = ("h0", "h1", "h2")


AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _reread_ray_auth() -> None:
    """Ray caches its authentication mode and token per process: make this one read them again."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


class LocalCluster:
    """Three nodes on this machine, with token authentication unless ``auth`` is False.

    The nodes (started from this process) and every `isobench` this test starts inherit the
    mode and the token file from the environment, as on real machines."""

    def __init__(self, tmp: Path, auth: bool = True) -> None:
        from ray.cluster_utils import Cluster

        self.env_before = {name: os.environ.get(name) for name in AUTH_ENV}
        for name in AUTH_ENV:
            os.environ.pop(name, None)
        os.environ["RAY_AUTH_MODE"] = "token" if auth else "disabled"
        if auth:
            token = tmp / "auth_token"
            token.write_text(secrets.token_hex(32))
            token.chmod(0o600)
            os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
        _reread_ray_auth()
        self.cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 1, "labels": {"isobench-host": HOSTS[0], "rack": "a"}, "include_dashboard": False})
        self.nodes = {HOSTS[0]: self.cluster.head_node}
        for host in HOSTS[1:]:
            self.nodes[host] = self.cluster.add_node(num_cpus=1, labels={"isobench-host": host, "rack": "a"})
        self.cluster.wait_for_nodes()
        self.address = self.cluster.address

    def kill(self, host: str) -> None:
        """The node disappears at once, as when its machine loses power."""
        self.cluster.remove_node(self.nodes.pop(host), allow_graceful=False)

    def shutdown(self) -> None:
        self.cluster.shutdown()
        for name, value in self.env_before.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value
        _reread_ray_auth()


def _cluster(tmp: Path, auth: bool = True) -> Iterator[LocalCluster]:
    pytest.importorskip("ray", reason="Ray is not installed (./isobench.sh setup installs it)")
    need_docker()
    cluster = LocalCluster(tmp, auth)
    try:
        yield cluster
    finally:
        cluster.shutdown()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path_factory.mktemp("ray"))


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from _cluster(tmp_path_factory.mktemp("ray"))


@pytest.fixture
def open_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster without authentication, as `ray start` makes one unless told otherwise."""
    yield from _cluster(tmp_path_factory.mktemp("ray"), auth=False)


def _spin(work: int, iterations: int = 3) -> dict[str, Any]:
    """cpu-spin: 2,000,000 work is about 0.2 s of CPU an iteration here, besides ~0.5 s of start-up."""
    return {"name": "cpu-spin", "params": {"iterations": iterations, "work": work}}


def _rows(out: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(out / "isobench.sqlite")
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM cells ORDER BY started_at")]
    conn.close()
    for row in rows:
        row["info"] = json.loads(row["platform_info"] or "{}")
    return rows


def _assert_one_unit_per_host_at_a_time(rows: list[dict[str, Any]]) -> None:
    spans: dict[str, set[tuple[float, float]]] = defaultdict(set)  # a unit's members share its span
    for row in rows:
        if row["status"] == "ok":
            spans[row["info"]["host_key"]].add((row["info"]["ray"]["unit_start"], row["info"]["ray"]["unit_end"]))
    for host, unit_spans in spans.items():
        host_spans = sorted(unit_spans)
        for (_, end), (start, _) in zip(host_spans, host_spans[1:], strict=False):
            assert start >= end, f"two cells overlapped on {host}: one ended at {end}, the next began at {start}"


def _assert_clean() -> None:
    assert leftovers.all_leftovers() == {}


def test_cells_spread_over_every_node_one_at_a_time_with_same_host_ratios(cluster: LocalCluster,
                                                                         tmp_path: Path) -> None:
    study = write_study(tmp_path / "spread.yaml", {
        "name": "spread", "workloads": [_spin(20_000)],
        "platforms": [{"name": "baremetal"}, {"name": "docker"}],
        "repetitions": 6, "warmup": 1, "probes": {}})
    out = tmp_path / "out"
    result = run_cli("run", str(study), "--ray", cluster.address, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(out)
    # every measured cell once; each host ran its own warm-up round first
    measured = [r for r in rows if not r["warmup"]]
    assert len(measured) == 12 and len({r["cell_id"] for r in measured}) == 12
    assert sorted(r["cell_id"].rsplit("@", 1)[1] for r in rows if r["warmup"]) == sorted(HOSTS * 2)
    assert all(r["status"] == "ok" for r in rows), [(r["cell_id"], r["error"]) for r in rows if r["status"] != "ok"]
    assert {r["info"]["host_key"] for r in measured} == set(HOSTS)
    _assert_one_unit_per_host_at_a_time(rows)
    # a measured round (every group once) runs whole on one host: its baseline is beside it
    by_round: dict[int, set[str]] = defaultdict(set)
    for row in measured:
        by_round[row["rep"]].add(row["info"]["host_key"])
    assert all(len(hosts) == 1 for hosts in by_round.values()), by_round
    # the head's scheduling costs little next to a cell: a few ms a unit, beside the cell's own time
    overheads = [r["info"]["ray"]["overhead_s"] for r in rows]
    assert max(overheads) < 2.0, overheads

    # per-host ratios: docker on host h against bare metal on h, never another host
    summary = run_cli("summary", str(out), "--json", check=True)
    records = [r for r in json.loads(summary.stdout) if r["metric"] == "e2e"]
    assert {r["host"] for r in records} == {h for h in HOSTS if len(by_host_reps(measured, h)) > 0}
    for record in records:
        mine = [r for r in measured if r["info"]["host_key"] == record["host"]]
        docker = [_e2e(out, r["cell_id"]) for r in mine if r["platform_key"] == "docker"]
        bare = [_e2e(out, r["cell_id"]) for r in mine if r["platform_key"] == "baremetal"]
        assert record["ratio"] == pytest.approx(_geo(docker) / _geo(bare), rel=1e-6)
    text = run_cli("summary", str(out), check=True).stdout
    assert "across 3 hosts" in text
    _assert_clean()


def by_host_reps(rows: list[dict[str, Any]], host: str) -> set[int]:
    return {r["rep"] for r in rows if r["info"]["host_key"] == host}


def _e2e(out: Path, cell_id: str) -> float:
    conn = sqlite3.connect(out / "isobench.sqlite")
    value = conn.execute("SELECT value FROM metrics WHERE cell_id = ? AND metric = 'e2e'", (cell_id,)).fetchone()[0]
    conn.close()
    return float(value)


def _geo(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def test_each_mode_runs_the_whole_plan_on_every_selected_host(cluster: LocalCluster, tmp_path: Path) -> None:
    study = write_study(tmp_path / "fleet.yaml", {
        "name": "fleet", "workloads": [_spin(5_000)],
        "platforms": [{"name": "baremetal"}, {"name": "docker"}],
        "repetitions": 2, "warmup": 0, "probes": {},
        "hosts": {"mode": "each", "labels": {"host": ["h0", "h2"], "rack": "a"}}})
    out = tmp_path / "out"
    result = run_cli("run", str(study), "--ray", cluster.address, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(out)
    assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
    assert {r["info"]["host_key"] for r in rows} == {"h0", "h2"}  # h1 is not selected
    for row in rows:
        assert row["cell_id"].endswith("@" + row["info"]["host_key"])
    _assert_one_unit_per_host_at_a_time(rows)
    records = json.loads(run_cli("summary", str(out), "--json", check=True).stdout)
    assert sorted(r["host"] for r in records if r["metric"] == "e2e") == ["h0", "h2"]
    assert all(r["n"] == 2 for r in records if r["metric"] == "e2e")
    meta = json.loads(sqlite3.connect(out / "isobench.sqlite").execute(
        "SELECT value FROM meta WHERE key = 'hosts'").fetchone()[0])
    assert set(meta) == {"h0", "h2"} and meta["h0"]["labels"]["rack"] == "a"


def test_adaptive_repetitions_add_a_round_per_host_until_the_budget(cluster: LocalCluster, tmp_path: Path) -> None:
    study = write_study(tmp_path / "auto.yaml", {
        "name": "auto", "workloads": [_spin(2_000)],
        "platforms": [{"name": "baremetal"}, {"name": "docker"}], "warmup": 0, "probes": {},
        "repetitions": "auto", "adaptive": {"target": 0.0001, "min_repetitions": 2, "max_repetitions": 5}})
    out = tmp_path / "out"
    result = run_cli("run", str(study), "--ray", cluster.address, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(out)
    assert sorted({r["rep"] for r in rows}) == [0, 1, 2, 3, 4] and len(rows) == 10  # 2 planned + 3 (one per host)
    _assert_one_unit_per_host_at_a_time(rows)
    meta = json.loads(sqlite3.connect(out / "isobench.sqlite").execute(
        "SELECT value FROM meta WHERE key = 'adaptive'").fetchone()[0])
    assert meta["stopped"] and "budget of 5 repetitions" in meta["reason"]


def test_a_duet_pair_runs_whole_on_one_node_side_by_side_with_adaptive_rounds(cluster: LocalCluster,
                                                                             tmp_path: Path) -> None:
    study = write_study(tmp_path / "duet.yaml", {
        "name": "duet", "workloads": [{"name": "cpu-spin", "params": {"iterations": 1, "work": 1000,
                                                                       "min_seconds": 0.5}}],
        "platforms": [{"name": "baremetal"}, {"name": "docker"}], "aa": False,
        "schedule": "duet", "warmup": 0, "reruns": 0, "probes": {},
        "repetitions": "auto", "adaptive": {"target": 0.0001, "min_repetitions": 2, "max_repetitions": 4}})
    out = tmp_path / "out"
    crowded = write_study(tmp_path / "crowded.yaml", {**yaml.safe_load(study.read_text()),
                                                      "hosts": {"cells_per_node": 2}})
    refused = run_cli("run", str(crowded), "--ray", cluster.address, "--out", str(out))
    # two pairs at once on a node would share its two sides' cores
    assert refused.returncode == 2 and "hosts.cells_per_node" in refused.stderr and not out.exists()
    result = run_cli("run", str(study), "--ray", cluster.address, "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(out)
    assert all(r["status"] == "ok" for r in rows), [(r["cell_id"], r["error"]) for r in rows if r["status"] != "ok"]
    # 2 planned rounds, then adaptive rounds (a pair each) up to the budget of 4
    assert sorted(r["rep"] for r in rows) == [0, 0, 1, 1, 2, 2, 3, 3]
    pairs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        pairs[row["info"]["duet"]["pair"]].append(row)
    assert len(pairs) == 4
    for members in pairs.values():
        assert sorted(m["platform_key"] for m in members) == ["baremetal", "docker"]
        # one unit on one node: the same agent ran both members at once, behind one start line
        assert len({(m["info"]["host_key"], m["info"]["ray"]["node_id"]) for m in members}) == 1
        assert len({(m["info"]["ray"]["unit_start"], m["info"]["ray"]["unit_end"]) for m in members}) == 1
        duet = [m["info"]["duet"] for m in members]
        assert duet[0]["overlap"] is not None and duet[0]["overlap"] > 0.5, duet
        assert all(d["lead_s"] is not None for d in duet)
        # the node's own core layout: one side each, traded while they ran
        if len(host_cpus()) >= 2:
            assert duet[0]["cores"] != duet[1]["cores"], duet
            assert duet[0]["trade"]["trades"] >= 1 and duet[0]["trade"]["problem"] is None, duet
        assert members[0]["info"]["ray"]["cores"]["sides"] == sorted({d["cores"] for d in duet})
    _assert_one_unit_per_host_at_a_time(rows)
    meta = json.loads(sqlite3.connect(out / "isobench.sqlite").execute(
        "SELECT value FROM meta WHERE key = 'adaptive'").fetchone()[0])
    assert meta["stopped"] and "budget of 4 repetitions" in meta["reason"], meta
    run_cli("summary", str(out), check=True)
    _assert_clean()


def test_bad_cluster_input_is_refused_before_anything_is_written(cluster: LocalCluster, tmp_path: Path) -> None:
    study = {"name": "nobody", "workloads": [_spin(1_000)], "platforms": [{"name": "baremetal"}],
             "repetitions": 1, "warmup": 0, "probes": {}, "hosts": {"labels": {"rack": "z"}}}
    out = tmp_path / "out"
    result = run_cli("run", str(write_study(tmp_path / "s.yaml", study)), "--ray", cluster.address, "--out", str(out))
    assert result.returncode == 2 and "hosts.labels" in result.stderr and not out.exists(), result.stderr
    del study["hosts"]
    result = run_cli("run", str(write_study(tmp_path / "s.yaml", study)), "--ray", "127.0.0.1:1", "--out", str(out))
    assert result.returncode == 2 and "--ray" in result.stderr and "no Ray cluster answers" in result.stderr
    assert not out.exists()


def test_doctor_shows_each_nodes_capabilities(cluster: LocalCluster) -> None:
    result = run_cli("doctor", "--ray", cluster.address, check=True)
    assert "3 live node(s)" in result.stdout
    for host in HOSTS:
        assert host in result.stdout
    assert "docker/runc" in result.stdout and "rack=a" in result.stdout
    assert "authentication: token" in result.stdout
    as_json = json.loads(run_cli("doctor", "--ray", cluster.address, "--json", check=True).stdout)
    assert sorted(n["host"] for n in as_json["nodes"]) == sorted(HOSTS)
    assert "authentication: token" in as_json["authentication"]
    assert all("docker/runc" in n["platforms"] for n in as_json["nodes"])


def _head(study: Path, address: str, out: Path) -> subprocess.Popen[str]:
    """`isobench run --ray` in the background, as a user's terminal would run it."""
    return subprocess.Popen([*ISOBENCH, "run", str(study), "--ray", address, "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _two_platforms(path: Path, name: str, work: int, repetitions: int, warmup: int) -> Path:
    return write_study(path, {"name": name, "workloads": [_spin(work, iterations=5 if work >= 1_000_000 else 3)],
                              "platforms": [{"name": "baremetal"}, {"name": "docker"}],
                              "repetitions": repetitions, "warmup": warmup, "probes": {}})


def _recorded(out: Path) -> list[str]:
    try:
        conn = sqlite3.connect(out / "isobench.sqlite", timeout=5)
        ids = [r[0] for r in conn.execute("SELECT cell_id FROM cells")]
        conn.close()
        return ids
    except sqlite3.Error:
        return []


def test_a_node_lost_mid_cell_has_its_cells_rerun_and_every_cell_recorded_once(fresh_cluster: LocalCluster,
                                                                               tmp_path: Path) -> None:
    study = _two_platforms(tmp_path / "loss.yaml", "loss", 2_000_000, repetitions=4, warmup=1)
    out = tmp_path / "out"
    head = _head(study, fresh_cluster.address, out)
    try:
        # h2 starts a measured cell as soon as its two warm-up cells are stored: kill it then
        wait_for(lambda: sum(i.endswith("@h2") for i in _recorded(out)) == 2, 300, "h2's warm-up")
        fresh_cluster.kill("h2")  # its first measured cell (~1 s of CPU) is running
        output, _ = head.communicate(timeout=600)
    finally:
        if head.poll() is None:
            head.kill()
    assert head.returncode == 0, output
    assert "was lost mid-cell" in output, output
    rows = _rows(out)
    measured = [r for r in rows if not r["warmup"]]
    assert len(measured) == 8 and len({r["cell_id"] for r in rows}) == len(rows)
    assert all(r["status"] == "ok" for r in rows), [(r["cell_id"], r["status"], r["error"]) for r in rows]
    rerun = [r for r in measured if r["info"]["ray"].get("lost_on") == "h2"]
    assert rerun and all(r["info"]["host_key"] in ("h0", "h1") for r in rerun)
    _assert_one_unit_per_host_at_a_time(rows)
    _assert_clean()  # the survivors swept what the dead node's cell left on this host


def test_a_killed_head_loses_no_finished_cell_and_resume_finishes(cluster: LocalCluster, tmp_path: Path) -> None:
    study = write_study(tmp_path / "crash.yaml", {
        "name": "crash", "workloads": [_spin(60_000)],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
        "repetitions": 4, "warmup": 0, "probes": {}})
    out = tmp_path / "out"
    head = _head(study, cluster.address, out)
    try:
        wait_for(lambda: len(_recorded(out)) >= 2, 300, "two finished cells")
        head.send_signal(signal.SIGKILL)
        head.wait(timeout=30)
    finally:
        if head.poll() is None:
            head.kill()
    before = set(_recorded(out))
    assert 2 <= len(before) < 8
    result = run_cli("run", "--resume", "--out", str(out), "--ray", cluster.address)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = _rows(out)
    assert len(rows) == 8 and before <= {r["cell_id"] for r in rows}
    assert all(r["status"] == "ok" for r in rows)
    _assert_clean()


def test_an_interrupted_head_cleans_every_node_and_keeps_finished_cells(cluster: LocalCluster, tmp_path: Path) -> None:
    study = _two_platforms(tmp_path / "stop.yaml", "stop", 150_000, repetitions=6, warmup=0)
    out = tmp_path / "out"
    head = _head(study, cluster.address, out)
    try:
        wait_for(lambda: len(_recorded(out)) >= 2, 300, "two finished cells")
        time.sleep(0.5)  # every node is mid-cell now
        head.send_signal(signal.SIGTERM)
        output, _ = head.communicate(timeout=180)
    finally:
        if head.poll() is None:
            head.kill()
    assert head.returncode == 130, output
    assert "--resume" in output
    kept = _recorded(out)
    assert len(kept) >= 2
    _assert_clean()  # containers and cgroups of the cells cut short are gone from the host
    assert run_cli("run", "--resume", "--out", str(out), "--ray", cluster.address).returncode == 0
    assert len(_recorded(out)) == 12
    _assert_clean()


def test_a_node_without_a_capability_is_never_given_cells_that_need_it(cluster: LocalCluster, tmp_path: Path) -> None:
    # a fourth node whose Docker engine is unreachable (its raylet's DOCKER_HOST names no socket)
    node = cluster.cluster.add_node(num_cpus=1, labels={"isobench-host": "h3", "rack": "a"},
                                    env_vars={"DOCKER_HOST": "unix:///run/isobench-no-such-engine.sock"})
    try:
        doctor = run_cli("doctor", "--ray", cluster.address, check=True).stdout
        assert "docker=false" in doctor and "4 live node(s)" in doctor
        spread = _two_platforms(tmp_path / "spread.yaml", "nodocker", 5_000, repetitions=4, warmup=0)
        out = tmp_path / "spread"
        assert run_cli("run", str(spread), "--ray", cluster.address, "--out", str(out)).returncode == 0
        rows = _rows(out)
        assert len(rows) == 8 and all(r["status"] == "ok" for r in rows)
        assert not [r for r in rows if r["info"]["host_key"] == "h3"]  # it can run no round whole
        fleet = write_study(tmp_path / "fleet.yaml", {
            "name": "nodockerfleet", "workloads": [_spin(5_000)],
            "platforms": [{"name": "baremetal"}, {"name": "docker"}],
            "repetitions": 1, "warmup": 0, "probes": {}, "hosts": {"mode": "each", "labels": {"host": ["h0", "h3"]}}})
        out = tmp_path / "fleet"
        assert run_cli("run", str(fleet), "--ray", cluster.address, "--out", str(out)).returncode == 0
        by_id = {r["cell_id"]: r for r in _rows(out)}
        docker_h3 = [r for i, r in by_id.items() if i.endswith("@h3") and r["platform_key"] == "docker"]
        assert docker_h3 and all(r["status"] == "unavailable" and "h3" in r["error"] for r in docker_h3)
        assert all(r["status"] == "ok" for i, r in by_id.items() if not (i.endswith("@h3") and r["platform_key"] == "docker"))
    finally:
        cluster.cluster.remove_node(node)
    _assert_clean()


def test_cells_of_a_lost_node_with_no_node_alike_are_recorded_lost_and_resumed_later(
        cluster: LocalCluster, tmp_path: Path) -> None:
    # the only node of rack b: when it goes, no node alike is left to take its cells
    lone = cluster.cluster.add_node(num_cpus=1, labels={"isobench-host": "hb", "rack": "b"})
    study = write_study(tmp_path / "rackb.yaml", {
        "name": "rackb", "workloads": [_spin(2_000_000, iterations=10)], "platforms": [{"name": "baremetal"}],
        "repetitions": 3, "warmup": 0, "probes": {}, "hosts": {"labels": {"rack": "b"}}})
    out = tmp_path / "out"
    head = _head(study, cluster.address, out)
    try:
        wait_for(lambda: len(_recorded(out)) >= 1, 300, "a first cell on rack b")
        cluster.cluster.remove_node(lone, allow_graceful=False)  # its second cell (~2 s) is running
        output, _ = head.communicate(timeout=300)
    finally:
        if head.poll() is None:
            head.kill()
    rows = _rows(out)
    assert len(rows) == 3, output
    lost = [r for r in rows if r["status"] == "lost"]
    assert lost and all("no live node" in r["error"] for r in lost)
    assert any("no live node has its labels" in r["error"] and "'rack': 'b'" in r["error"] for r in lost)
    assert "were lost" in output
    # rack b is back (another machine alike): a resumed run gives the lost cells their run
    back = cluster.cluster.add_node(num_cpus=1, labels={"isobench-host": "hb2", "rack": "b"})
    try:
        result = run_cli("run", "--resume", "--out", str(out), "--ray", cluster.address)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        cluster.cluster.remove_node(back)
    rows = _rows(out)
    assert len(rows) == 3 and all(r["status"] == "ok" for r in rows)
    assert {r["info"]["host_key"] for r in rows if r["cell_id"] in {x["cell_id"] for x in lost}} == {"hb2"}
    _assert_clean()


def _without_token(home: Path, **extra: str) -> dict[str, str]:
    """This environment as a machine that holds no token for the cluster would have it."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV}
    return {**env, "HOME": str(home), **extra}  # no ~/.ray/auth_token either


def test_the_cluster_refuses_clients_without_its_token(cluster: LocalCluster, tmp_path: Path) -> None:
    from isobench.runner.rayauth import cluster_auth_mode

    assert cluster_auth_mode(cluster.address) == "token"  # a client without a token is turned away
    study = write_study(tmp_path / "s.yaml", {"name": "tokenless", "workloads": [_spin(1_000)],
                                              "platforms": [{"name": "baremetal"}], "repetitions": 1, "warmup": 0})
    out = tmp_path / "out"
    for env, said in ((_without_token(tmp_path), "needs an authentication token and this machine has none"),
                      (_without_token(tmp_path, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32)),
                       "refused this machine's authentication token")):
        result = subprocess.run([*ISOBENCH, "run", str(study), "--ray", cluster.address, "--out", str(out)],
                                env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2 and said in result.stderr, result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and not out.exists()
    # with the token (this environment's), the same study runs
    assert run_cli("run", str(study), "--ray", cluster.address, "--out", str(out)).returncode == 0
    assert [r["status"] for r in _rows(out)] == ["ok"]


def test_an_unauthenticated_cluster_is_refused_unless_allowed(open_cluster: LocalCluster, tmp_path: Path) -> None:
    from isobench.runner.rayauth import cluster_auth_mode

    assert cluster_auth_mode(open_cluster.address) == "disabled"
    study = write_study(tmp_path / "s.yaml", {"name": "open", "workloads": [_spin(1_000)],
                                              "platforms": [{"name": "baremetal"}], "repetitions": 2, "warmup": 0})
    out = tmp_path / "out"
    refused = run_cli("run", str(study), "--ray", open_cluster.address, "--out", str(out))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1  # one line, no traceback
    assert "without authentication" in refused.stderr and "--allow-unauthenticated" in refused.stderr
    assert not out.exists()  # refused before anything was written
    doctor = run_cli("doctor", "--ray", open_cluster.address, check=True).stdout
    assert "authentication: DISABLED" in doctor and "3 live node(s)" in doctor
    allowed = run_cli("run", str(study), "--ray", open_cluster.address, "--out", str(out), "--allow-unauthenticated")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert [r["status"] for r in _rows(out)] == ["ok", "ok"]

