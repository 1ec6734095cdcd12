"""Versions on every result: each cell records the engine and runtime builds it ran on, and every
comparison names them, in the summary's sentences, in `summary --json` and in the export."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from isobench.analysis.groups import _merge_versions
from isobench.runtime_versions import short_version, version_words
from isobench.store import Store
from tests.conftest import need_docker, need_tool, run_cli, write_study


def test_each_tool_s_version_line_gives_the_version_people_quote() -> None:
    assert short_version("runc", "runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1") == "1.1.5+ds1"
    assert short_version("crun", "crun version 1.8.1") == "1.8.1"
    # gVisor names its releases by date
    assert short_version("runsc", "runsc version 0.0~20221219.0") == "2022-12-19"
    assert short_version("runsc", "runsc version release-20240729.0") == "2024-07-29"
    assert short_version("containerd", "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1") \
        == "1.6.20~ds1"
    assert short_version("docker", "20.10.24+dfsg1") == "20.10.24+dfsg1"
    assert short_version("qemu", "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)") == "7.2.22"
    assert short_version("podman", "podman version 4.3.1") == "4.3.1"
    # a tool that answers with an error names no version
    assert short_version("docker", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock") is None
    assert short_version("runc", None) is None


def test_a_group_that_ran_on_two_builds_names_both() -> None:
    seen: dict[str, str] = {}
    for versions in ({"runc": "1.1.5"}, {"runc": "1.1.5"}, {"runc": "1.1.12", "docker": "24.0.7"}):
        _merge_versions(seen, versions)
    assert seen == {"runc": "1.1.5 | 1.1.12", "docker": "24.0.7"}
    assert version_words(seen) == "docker 24.0.7, runc 1.1.5 | 1.1.12"  # the engine before its runtime


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def test_cells_record_their_runtime_builds_and_every_output_names_them(tmp_path: Path) -> None:
    need_docker()
    need_tool("crun")
    # What the engine and crun say of themselves, read here independently of isobench.
    engine = _docker("version", "--format", "{{.Server.Version}}")
    components = {c["Name"]: c["Version"] for c in json.loads(_docker("version", "--format",
                                                                       "{{json .Server.Components}}"))}
    crun_line = subprocess.run(["crun", "--version"], capture_output=True, text=True, check=True).stdout
    crun = re.search(r"crun version (\S+)", crun_line).group(1)  # type: ignore[union-attr]

    spin = {"name": "cpu-spin", "params": {"iterations": 3, "work": 20_000}}
    study = write_study(tmp_path / "v.yaml", {
        "name": "versions", "workloads": [spin],
        "platforms": [{"name": "baremetal"}, {"name": "docker"},
                      {"name": "oci", "label": "crun", "runtime": "crun"}],
        "baseline": "baremetal", "repetitions": 2, "aa": False, "seed": 1, "probes": {}})
    out = tmp_path / "out"
    run_cli("run", str(study), "--out", str(out), timeout=600, check=True)

    docker_built = {"docker": engine, "containerd": components["containerd"], "runc": components["runc"]}
    store = Store.open(out)
    cells = {(r["platform_key"], r["rep"]): json.loads(r["platform_info"])
             for r in store.conn.execute("SELECT platform_key, rep, platform_info FROM cells WHERE warmup = 0")}
    fingerprint = json.loads(store.meta("host") or "{}")
    store.close()
    assert all(cells[("docker", rep)]["versions"] == docker_built for rep in (0, 1))
    assert all(cells[("crun", rep)]["versions"] == {"crun": crun} for rep in (0, 1))
    assert all("versions" not in cells[("baremetal", rep)] for rep in (0, 1))  # the host is no build
    assert fingerprint["versions"]["runc"] and fingerprint["versions"]["crun"] == crun

    records = {r["label"]: r for r in json.loads(run_cli("summary", str(out), "--json", check=True).stdout)
               if r.get("metric") == "e2e"}
    assert records["docker"]["versions"] == docker_built and records["crun"]["versions"] == {"crun": crun}
    text = run_cli("summary", str(out), check=True).stdout
    flat = " ".join(text.split())  # the terminal wraps long lines
    assert (f"docker/runc (docker {engine}, containerd {components['containerd']}, runc {components['runc']}): "
            f"cpu-spin e2e") in flat
    assert f"oci/crun (crun {crun}): cpu-spin e2e" in flat

    exported = tmp_path / "x.jsonl"
    run_cli("export", str(out), "--format", "jsonl", "-o", str(exported), check=True)
    rows = [json.loads(line) for line in exported.read_text().splitlines()]
    assert {json.dumps(r["versions"], sort_keys=True) for r in rows if r["platform"] == "docker/runc"} \
        == {json.dumps(docker_built, sort_keys=True)}
    assert all(r["versions"] == {} for r in rows if r["platform"] == "baremetal")
