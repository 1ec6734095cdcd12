"""The published JSON Schemas (`isobench schema`) describe what `isobench export` and
`isobench summary --json` really write, for a small real study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from isobench.report.export import EXPORT_VERSION, FIELDS
from isobench.schema import SUMMARY_VERSION
from tests.conftest import json_lines, need_root, run_cli, write_study


def _schema(name: str) -> Draft202012Validator:
    out = run_cli("schema", name, check=True)
    schema = json.loads(out.stdout)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def small_study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_root()
    tmp = tmp_path_factory.mktemp("schema")
    spin = {"name": "cpu-spin", "params": {"iterations": 3, "work": 20_000, "allocate_mb": 128}}
    study = write_study(tmp / "small.yaml", {
        "name": "schema", "workloads": [spin],
        "platforms": [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"},
                      {"name": "baremetal", "label": "two-cpus", "knobs": {"cpus": 2}},
                      # 128 MiB allocated under a 48m limit: OOM-killed, so the export has a failed cell
                      {"name": "baremetal", "label": "starved", "knobs": {"memory": "48m"}}],
        "repetitions": 2, "warmup": 0, "seed": 1, "probes": {}, "timeout_s": 120})
    out = tmp / "out"
    run_cli("run", str(study), "--out", str(out), timeout=600, check=True)
    return out


def test_the_schemas_are_versioned() -> None:
    assert _schema("export").schema["$id"].endswith(f":export:{EXPORT_VERSION}")
    assert _schema("summary").schema["$id"].endswith(f":summary:{SUMMARY_VERSION}")
    assert tuple(_schema("export").schema["properties"]) == FIELDS


def test_an_unknown_schema_is_bad_input() -> None:
    out = run_cli("schema", "nope")
    assert out.returncode == 2 and "export, summary" in out.stderr and "Traceback" not in out.stderr


def test_a_real_export_validates(small_study: Path, tmp_path: Path) -> None:
    target = tmp_path / "export.jsonl"
    run_cli("export", str(small_study), "--format", "jsonl", "-o", str(target), check=True)
    records = json_lines(target.read_text())
    assert {r["status"] for r in records} >= {"ok", "failed"}
    validator = _schema("export")
    for record in records:
        validator.validate(record)


def test_a_real_summary_validates(small_study: Path) -> None:
    records = json.loads(run_cli("summary", str(small_study), "--json", check=True).stdout)
    assert {r["label"] for r in records} >= {"aa", "two-cpus"}
    _schema("summary").validate(records)


def test_the_schemas_reject_what_they_do_not_describe(small_study: Path) -> None:
    records = json.loads(run_cli("summary", str(small_study), "--json", check=True).stdout)
    validator = _schema("summary")
    assert not validator.is_valid([{**records[0], "verdict": "maybe"}])
    assert not validator.is_valid([{**records[0], "surprise": 1}])
    assert not validator.is_valid([{k: v for k, v in records[0].items() if k != "ratio"}])
