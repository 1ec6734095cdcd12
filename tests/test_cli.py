"""The CLI end to end on a small real study: run, summary (--json), export, plan, doctor, listings."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ISOBENCH, json_lines, need_docker, need_root, run_cli, write_study


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_docker()
    tmp = tmp_path_factory.mktemp("cli")
    study = write_study(tmp / "small.yaml", {
        "name": "small",
        "workloads": [{"name": "cpu-spin", "params": {"iterations": 5, "work": 30_000, "allocate_mb": 128}}],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"},
                      {"name": "docker", "knobs": {"cpus": 1.5}},
                      # cpu-spin allocates 128 MiB first: under a 48m limit it is OOM-killed, and the study goes on
                      {"name": "docker", "label": "starved", "knobs": {"memory": "48m"}}],
        "repetitions": 3, "warmup": 0, "seed": 3})  # no test here reads a warm-up cell
    out = tmp / "out"
    result = run_cli("run", str(study), "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "baremetal/aa" in result.stdout and "docker/runc" in result.stdout
    assert f"results: {out}" in result.stdout.replace("\n", "")
    return out


def test_summary_json_has_one_record_per_comparison(finished_study: Path) -> None:
    result = run_cli("summary", str(finished_study), "--json")
    assert result.returncode == 0, result.stderr
    records = json.loads(result.stdout)
    keys = {"workload", "platform", "label", "knobs", "metric", "baseline", "ratio", "ci_low", "ci_high", "n",
            "significant"}
    assert records and all(keys <= set(r) for r in records)
    e2e = [r for r in records if "e2e" in r["metric"] and r["metric"] == "e2e"]
    by_label = {r["label"]: r for r in e2e}
    assert set(by_label) >= {"aa", "docker"}
    assert by_label["docker"]["knobs"] == {"cpus": 1.5}
    assert by_label["aa"]["n"] == 3 and by_label["aa"]["baseline"] == "baremetal"
    for record in e2e:
        assert record["ci_low"] <= record["ratio"] <= record["ci_high"]
        assert record["significant"] == (record["ci_low"] > 1 or record["ci_high"] < 1)
    assert len({(r["label"], r["metric"]) for r in records}) == len(records)


def test_failed_cells_are_recorded_and_reported(finished_study: Path) -> None:
    result = run_cli("summary", str(finished_study))
    assert "did not finish" in result.stdout and "starved" in result.stdout and "OOM" in result.stdout
    export = finished_study / "failed.jsonl"
    assert run_cli("export", str(finished_study), "--format", "jsonl", "-o", str(export)).returncode == 0
    failed = [r for r in json_lines(export.read_text()) if r["status"] != "ok"]
    assert failed and all(r["platform"] == "docker/starved" for r in failed)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_export_formats(finished_study: Path, fmt: str, tmp_path: Path) -> None:
    target = tmp_path / f"export.{fmt}"
    result = run_cli("export", str(finished_study), "--format", fmt, "-o", str(target))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and f"wrote {target}" in result.stderr  # the note is a diagnostic
    fields = {"study", "cell_id", "workload", "platform", "knobs", "rep", "metric", "value", "unit", "status", "host",
              "versions"}
    if fmt == "jsonl":
        rows = json_lines(target.read_text())
    elif fmt == "csv":
        rows = list(csv.DictReader(target.open()))
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(target).to_pylist()
    assert rows and all(set(r) == fields for r in rows)
    assert {r["metric"] for r in rows} >= {"e2e", "phase.compute", "cell.startup", "cell.wall"}
    ok_cells = {r["cell_id"] for r in rows if r["status"] == "ok"}
    assert len(ok_cells) == 9  # 3 platforms that work × 3 repetitions; warm-ups are not exported


@pytest.mark.parametrize("command", [["export"], ["summary", "--json"]])
def test_a_reader_that_leaves_early_is_not_a_failure(finished_study: Path, command: list[str]) -> None:
    """`isobench export DIR | head`: the pipe closes before isobench writes; it stops quietly with
    SIGPIPE's status 141 (click alone would exit 1, which `set -o pipefail` reads as a failure)."""
    proc = subprocess.Popen([*ISOBENCH, command[0], str(finished_study), *command[1:]], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader has gone before the first byte
    assert proc.wait(timeout=120) == 141
    assert proc.stderr.read() == b""  # no traceback, no "Exception ignored" at exit


def test_a_run_outlives_the_reader_of_its_progress(tmp_path: Path, tiny_spin: dict) -> None:
    """`isobench run STUDY | head -1`: the study still runs every cell; progress stops, one note says so."""
    need_root()
    study = write_study(tmp_path / "s.yaml", {"name": "piped", "workloads": [tiny_spin],
                                              "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
                                              "repetitions": 2, "warmup": 0, "probes": {}})
    proc = subprocess.Popen([*ISOBENCH, "run", str(study), "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    assert proc.wait(timeout=300) == 0
    assert "stdout's reader closed the pipe; the study goes on" in proc.stderr.read().decode()
    records = json.loads(run_cli("summary", str(tmp_path / "out"), "--json", check=True).stdout)
    assert [r["n"] for r in records if r.get("metric") == "e2e"] == [2]


def test_export_writes_stdout_without_o_or_with_dash(finished_study: Path, tmp_path: Path) -> None:
    before = sorted(p.name for p in finished_study.iterdir())
    to_file = tmp_path / "all.jsonl"
    assert run_cli("export", str(finished_study), "-o", str(to_file)).returncode == 0
    plain = run_cli("export", str(finished_study), cwd=tmp_path)
    dash = run_cli("export", str(finished_study), "-o", "-", cwd=tmp_path)
    assert plain.returncode == 0 and dash.returncode == 0, plain.stderr + dash.stderr
    assert plain.stdout == dash.stdout == to_file.read_text() and plain.stderr == ""
    assert not (tmp_path / "-").exists()  # `-o -` is stdout, not a file named "-"
    assert sorted(p.name for p in finished_study.iterdir()) == before  # nothing written into the results
    rows = list(csv.DictReader(io.StringIO(run_cli("export", str(finished_study), "--format", "csv").stdout)))
    assert len(rows) == len(json_lines(plain.stdout))
    import pyarrow.parquet as pq

    binary = subprocess.run([*ISOBENCH, "export", str(finished_study), "--format", "parquet"], capture_output=True,
                            timeout=300)
    assert binary.returncode == 0 and pq.read_table(io.BytesIO(binary.stdout)).num_rows == len(rows)


def test_plan_prints_cells_and_estimate(tmp_path: Path) -> None:
    result = run_cli("plan")
    assert result.returncode == 0, result.stderr
    assert "estimated time" in result.stdout and "warm-up" in result.stdout
    assert "gvisor" in result.stdout and "resnet-infer" in result.stdout


def test_doctor_and_listings() -> None:
    need_root()
    doctor = run_cli("doctor")
    assert doctor.returncode == 0, doctor.stderr
    for name in ("baremetal", "docker/runc", "oci/crun", "oci/runc", "gvisor/runsc"):
        assert name in doctor.stdout
    platforms = run_cli("platforms")
    assert all(n in platforms.stdout for n in ("baremetal", "docker", "oci", "gvisor"))
    workloads = run_cli("workloads")
    assert all(n in workloads.stdout for n in ("cpu-spin", "lenet-train", "resnet-infer"))
    assert "fetch_stall" in workloads.stdout and "preprocess" in workloads.stdout


def test_table_commands_have_json(tmp_path: Path) -> None:
    """--json on each command that prints a table: one JSON document on stdout, nothing else."""
    plan = json.loads(run_cli("plan", "--json", check=True).stdout)
    assert plan["cells"] and plan["estimated_s"] > 0 and {"cell_id", "workload", "platform", "cores"} <= set(
        plan["cells"][0])
    platforms = {p["name"]: p for p in json.loads(run_cli("platforms", "--json", check=True).stdout)}
    assert {"baremetal", "docker"} <= set(platforms) and "cpus" in platforms["docker"]["knobs"]
    [spin] = json.loads(run_cli("workloads", "cpu-spin", "--json", check=True).stdout)
    assert spin["name"] == "cpu-spin" and "work" in spin["parameters"] and spin["phases"] == ["compute"]
    probes = json.loads(run_cli("probes", "--json", check=True).stdout)
    assert {p["name"] for p in probes} >= {"cgroup", "perf"}
    assert all(p["works_here"] == (p["why_not"] is None) for p in probes)
    doctor = json.loads(run_cli("doctor", "--json", check=True).stdout)
    assert doctor["host"]["cores"] >= 1 and any(p["platform"] == "baremetal" for p in doctor["platforms"])
    assert set(doctor["host_knobs"]) >= {"governor", "numa_node"} and "works" in doctor["probes"]
    bad = run_cli("workloads", "nope", "--json")
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1


def test_moved_commands_keep_their_options() -> None:
    for command, options in (("doctor", ("--ray", "--repair", "--json")),
                             ("nvmsim", ("--capacity", "--policy", "--sweep", "--characterise", "--export-csv",
                                         "--plot", "--json"))):
        text = run_cli(command, "--help", check=True).stdout
        assert all(option in text for option in options), (command, text)


def test_run_json_keeps_stdout_for_the_records(tmp_path: Path, tiny_spin: dict) -> None:
    need_root()
    study = write_study(tmp_path / "s.yaml", {"name": "quiet", "workloads": [tiny_spin],
                                              "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}],
                                              "repetitions": 2, "warmup": 0, "probes": {}})
    out = tmp_path / "out"
    result = run_cli("run", str(study), "--out", str(out), "--json", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    records = json.loads(result.stdout)  # progress went to stderr
    assert any(r.get("label") == "aa" and r.get("metric") == "e2e" for r in records)
    assert f"results: {out}" in result.stderr
    assert records == json.loads(run_cli("summary", str(out), "--json", check=True).stdout)


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    from tests import report_store

    store = report_store.build(tmp_path / "known")
    for args in (("export", str(store), "-o", str(tmp_path / "no" / "such" / "x.jsonl")),
                 ("report", str(store), "-o", str(tmp_path / "no" / "r.html")),
                 ("export", str(store), "--format", "xml"), ("plan", "--bogus"), ("compare", str(store)),
                 ("export", str(tmp_path / "nothing"))):
        result = run_cli(*args)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and result.stdout == "" and len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith("error: ") and "fix:" in lines[0] and "Traceback" not in lines[0], lines
    assert not (tmp_path / "no").exists()
