"""Outputs other tools read, on real small stores (tests/report_store.py records them through
Store.record): `export --format bmf` against the Bencher Metric Format's documented shape and
`summary --json`'s numbers; `compare A B --format md` for a pull-request comment; and `summary
--json` built without dataclasses.asdict, unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from isobench.analysis.compare import Comparison
from isobench.analysis.crossstudy import CrossResult
from isobench.report.bmf import BENCHMARK_NAME_LIMIT, MEASURE_NAME_LIMIT, benchmark_names
from isobench.report.compare_md import SIZE_LIMIT, render_compare_md
from isobench.report.plaintext import md
from tests import report_store
from tests.conftest import run_cli

#: the Bencher Metric Format as its reference describes it: benchmarks by name, each holding
#: measures by name, each a number `value` with optional number bounds; names within its limits
BMF_SCHEMA = {
    "type": "object",
    "propertyNames": {"minLength": 1, "maxLength": BENCHMARK_NAME_LIMIT},
    "additionalProperties": {
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"minLength": 1, "maxLength": MEASURE_NAME_LIMIT},
        "additionalProperties": {
            "type": "object",
            "properties": {"value": {"type": "number"}, "lower_value": {"type": "number"},
                           "upper_value": {"type": "number"}},
            "required": ["value"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("outputs")
    return report_store.build(tmp / "a"), report_store.build(tmp / "b|*b*<i>", scale=1.10)  # B: 10% slower


def summary_records(directory: Path) -> list[dict]:
    result = run_cli("summary", str(directory), "--json", check=True)
    return [r for r in json.loads(result.stdout) if "ratio" in r]


def test_bmf_has_the_documented_shape_and_summarys_numbers(stores: tuple[Path, Path], tmp_path: Path) -> None:
    a, _ = stores
    target = tmp_path / "bmf.json"
    assert run_cli("export", str(a), "--format", "bmf", "-o", str(target), check=True).stdout == ""
    document = json.loads(target.read_text())
    jsonschema.validate(document, BMF_SCHEMA)
    assert run_cli("export", str(a), "--format", "bmf", check=True).stdout == target.read_text()  # stdout alike
    records = summary_records(a)
    assert records and sum(len(measures) for measures in document.values()) == len(records)
    for r in records:
        knobs = ", ".join(f"{k}={v}" for k, v in sorted(r["knobs"].items()))
        measure = document[f"{r['workload']} / {r['label']} vs {r['baseline']} / {knobs}"][r["metric"]]
        assert measure["value"] == r["ratio"]
        assert (measure.get("lower_value"), measure.get("upper_value")) == (r["ci_low"], r["ci_high"])
    docker = document["lenet-train / docker vs baremetal / cpus=1.0, threads=1"]["e2e"]
    assert docker["lower_value"] < docker["value"] < docker["upper_value"]
    assert docker["value"] == pytest.approx(report_store.expected_e2e("docker") / report_store.expected_e2e("baremetal"),
                                            rel=0.02)
    assert not any("vm vs" in name for name in document)  # emulated cells: left out, as summary does


def test_bmf_names_stay_unique_and_within_bencher_limits() -> None:
    def comparison(knobs: dict, label: str = "docker") -> Comparison:
        return Comparison("w", "docker/runc", label, knobs, "e2e", "baremetal", 1.1, 1.0, 1.2, 3, False, 3,
                          None, 1.0, 1.0, "s", "welch", False)

    names = benchmark_names([comparison({"cpus": 1}), comparison({"cpus": "1"}), comparison({}, "L" * 3000)])
    assert len(set(names)) == 3 and names[0].startswith("w / docker vs baremetal / cpus=1 ~")
    assert len(names[2]) == BENCHMARK_NAME_LIMIT and names[2].startswith("w / LLL")


def test_compare_md_is_a_comment_sized_table(stores: tuple[Path, Path]) -> None:
    a, b = stores
    result = run_cli("compare", str(a), str(b), "--format", "md", check=True)
    text = result.stdout
    cross = json.loads(run_cli("compare", str(a), str(b), "--json", check=True).stdout)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    header, rows = rows[0], rows[1:]
    assert header.startswith("| workload | platform | metric | A ×baseline") and header.endswith("| verdict |")
    assert len(rows) == len(cross) and len(text) < SIZE_LIMIT
    own_a = {r["label"]: r for r in summary_records(a) if r["metric"] == "e2e"}
    docker = next(row for row in rows if "| docker · cpus=1.0" in row).split(" | ")
    own = own_a["docker"]
    assert docker[3] == md(f"{own['ratio']:.3f}× ({own['ci_low']:.3f}–{own['ci_high']:.3f})")  # A's own ratio
    assert docker[-1] == "slower |"  # B is 10% slower everywhere, and resolved so
    baseline = next(row for row in rows if "| baremetal ·" in row).split(" | ")
    assert baseline[3] == baseline[4] == "baseline"
    assert rows[-1].endswith("| inconclusive |")  # resolved changes first: a cut comment keeps them
    assert r"B: /" in text and r"b\|\*b\*&lt;i&gt;" in text  # a directory's name is text, not markup


def test_compare_md_escapes_labels_and_fits_a_comment() -> None:
    def comparison(index: int) -> Comparison:
        return Comparison("w", "p", f"x|`y`<b>{index}", {"k": "[a](http://e)"}, "e2e", "base", 1.1, 1.0, 1.2, 3,
                          True, 3, 0.01, 1.0, 1.0, "s", "welch", False, verdict="slower")

    text = render_compare_md(CrossResult([comparison(i) for i in range(2000)], ["*note*"]), "a", "b",
                             ("base", "base"))
    assert len(text) < SIZE_LIMIT and "more row(s) left out to fit a comment" in text
    assert r"x\|\`y\`&lt;b&gt;0" in text and r"k=\[a\](http://e)" in text and r"- note: \*note\*" in text
    assert "<b>" not in text and "`y`" not in text


def test_compare_md_puts_resolved_changes_first() -> None:
    verdicts = ["inconclusive", "equivalent", "faster", "slower", "inconclusive"]
    comparisons = [Comparison("w", "p", f"e{i}", {}, "e2e", "base", 1.0, 0.9, 1.1, 3, False, 3, None, 1.0, 1.0,
                              "s", "welch", False, verdict=v) for i, v in enumerate(verdicts)]
    text = render_compare_md(CrossResult(comparisons, []), "a", "b", ("base", "base"))
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| w |")]
    assert [(r[1], r[-1]) for r in rows] == [("e3", "slower |"), ("e2", "faster |"), ("e0", "inconclusive |"),
                                             ("e4", "inconclusive |"), ("e1", "equivalent |")]
    assert rows[0][3] == rows[0][4] == "n/a"  # no study of its own compared it: not "baseline"


def test_compare_refuses_two_outputs(stores: tuple[Path, Path]) -> None:
    a, b = stores
    both = run_cli("compare", str(a), str(b), "--json", "--format", "md")
    assert both.returncode == 2 and both.stdout == "" and len(both.stderr.strip().splitlines()) == 1
    assert both.stderr.startswith("error: --format:") and "fix:" in both.stderr
    gated = run_cli("compare", str(a), str(b), "--format", "md", "--fail-if", "slower")
    assert gated.returncode == 1 and gated.stdout.startswith("### isobench compare")  # the gate still gates


def test_summary_json_is_what_as_dict_gave(stores: tuple[Path, Path]) -> None:
    """Records are read off the attributes now; the old way (as_dict per key) gives the same bytes."""
    from isobench.analysis.compare import compare
    from isobench.cli import SUMMARY_FIELDS, summary_record
    from isobench.store import Store

    comparisons = compare(Store.open(stores[0]))
    old = [{k: c.as_dict()[k] for k in SUMMARY_FIELDS} for c in comparisons]
    new = [summary_record(c) for c in comparisons]
    assert json.dumps(new, indent=1, default=str) == json.dumps(old, indent=1, default=str)
    assert list(new[0]) == list(SUMMARY_FIELDS) and len(new) == len(comparisons) > 3


def test_export_offers_every_writer() -> None:
    from isobench.cli import ExportFormat
    from isobench.report.export import WRITERS

    assert {f.value for f in ExportFormat} == set(WRITERS)
