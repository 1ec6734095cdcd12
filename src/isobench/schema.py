"""JSON Schemas of isobench's machine-readable outputs, published by ``isobench schema NAME``.

* ``export``: one record of ``isobench export`` (a line of the jsonl file; the csv and parquet
  files carry the same fields, with ``knobs`` as a JSON string).
* ``summary``: the array ``isobench summary --json`` prints, one record per comparison.

Each schema is versioned: its ``$id`` ends in its version, which changes whenever a field is
removed, renamed or changes its meaning or type (adding a field raises it too: the records are
closed, ``additionalProperties: false``, so that a consumer learns of every change).
"""

from __future__ import annotations

from typing import Any

from isobench.errors import UserError

#: the version of the ``isobench summary --json`` record (isobench.report.export has the export's)
SUMMARY_VERSION = 4
DIALECT = "https://json-schema.org/draft/2020-12/schema"

_STRING = {"type": "string"}
_NUMBER = {"type": "number"}
_OPTIONAL_NUMBER = {"type": ["number", "null"]}
_KNOBS = {"type": "object", "description": "the platform entry's knobs (cpus, memory, cpuset, threads, ...) "
                                           "as the study file gives them"}


_VERSIONS = {"type": "object", "additionalProperties": {"type": "string"},
             "description": "the engine and runtime versions the platform's cells ran on, by short name "
                            "(docker, containerd, runc, crun, runsc with its platform, podman, qemu); empty for "
                            "the host itself; a group whose cells ran on several names each: \"1.1.5 | 1.1.12\""}


def _described(kind: dict[str, Any], description: str) -> dict[str, Any]:
    return {**kind, "description": description}


def _record(title: str, description: str, fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"title": title, "description": description, "type": "object", "properties": fields,
            "required": list(fields), "additionalProperties": False}


def export_schema() -> dict[str, Any]:
    from isobench.report.export import EXPORT_VERSION

    fields = {
        "study": _described(_STRING, "the study's name"),
        "cell_id": _described(_STRING, "the cell: one run of one workload on one platform entry"),
        "workload": _described(_STRING, "the workload with its parameters, as the study names it"),
        "platform": _described(_STRING, "the platform entry as displayed, e.g. docker/runc or baremetal/aa"),
        "knobs": _KNOBS,
        "rep": _described({"type": "integer", "minimum": 0}, "the repetition (round) the cell belongs to"),
        "metric": _described(_STRING, "e2e, e2e.p50, e2e.p99, phase.<name>, setup.<name>, cell.run, "
                                      "cell.wall, cell.startup, workload.<name> or a probe's metric; a cell "
                                      "that did not finish has one record, cell.wall"),
        "value": _described(_NUMBER, "the metric's value in ``unit``; per-item times are means over the cell's "
                                     "items"),
        "unit": _described(_STRING, "s for times; a probe's or workload's own unit otherwise (may be empty)"),
        "status": _described(_STRING, "the cell's status: ok, failed, timeout, unavailable (e.g. a GPU kernel "
                                      "without a GPU) or lost (its cluster node went away)"),
        "host": _described(_STRING, "the host the cell ran on (empty where unknown)"),
        "versions": {**_VERSIONS, "description": "the engine and runtime versions the cell ran on ({} for the "
                                                 "host itself); csv and parquet carry it as a JSON string"},
    }
    return {"$schema": DIALECT, "$id": f"urn:isobench:schema:export:{EXPORT_VERSION}", "version": EXPORT_VERSION,
            **_record("isobench export record", "One record per measured cell and metric (warm-up cells "
                      "left out), as `isobench export` writes them.", fields)}


def summary_schema() -> dict[str, Any]:
    bound = "bound of the 95% confidence interval of the ratio (null: too few repetitions)"
    fields = {
        "workload": _described(_STRING, "the workload with its parameters"),
        "platform": _described(_STRING, "the platform compared with the baseline"),
        "label": _described(_STRING, "the platform entry's label"),
        "knobs": _KNOBS,
        "metric": _described(_STRING, "the metric compared (as in the export's `metric`)"),
        "baseline": _described(_STRING, "the baseline platform entry"),
        "ratio": _described(_NUMBER, "the platform's mean over the baseline's (> 1: more time for time metrics)"),
        "ci_low": _described(_OPTIONAL_NUMBER, f"lower {bound}"),
        "ci_high": _described(_OPTIONAL_NUMBER, f"upper {bound}"),
        "n": _described({"type": "integer", "minimum": 0}, "the platform's repetitions"),
        "significant": _described({"type": "boolean"}, "the confidence interval excludes 1"),
        "n_baseline": _described({"type": "integer", "minimum": 0}, "the baseline's repetitions"),
        "p_value": _described(_OPTIONAL_NUMBER, "the test's p-value"),
        "mean": _described(_NUMBER, "the platform's mean, in `unit`"),
        "baseline_mean": _described(_NUMBER, "the baseline's mean, in `unit`"),
        "unit": _described(_STRING, "the metric's unit"),
        "method": _described(_STRING, "the statistical method, e.g. welch-log or paired-log"),
        "is_aa": _described({"type": "boolean"}, "an A/A comparison: the baseline entry again, equal in "
                                                 "everything but its label (the study's noise floor)"),
        "host": _described(_STRING, "the host both sides ran on"),
        "p_holm": _described(_OPTIONAL_NUMBER, "the Holm-adjusted p-value across the study's comparisons of "
                                               "this metric (null for A/A)"),
        "verdict": _described({"enum": ["slower", "faster", "higher", "lower", "equivalent", "inconclusive",
                                        "not comparable"]},
                              "a resolved difference (slower/faster for times, higher/lower otherwise), "
                              "equivalence within the margin, inconclusive, or not comparable (the two "
                              "sides ran on different devices: verdict_reason says which)"),
        "ci90_low": _described(_OPTIONAL_NUMBER, "lower bound of the 90% interval of the equivalence test"),
        "ci90_high": _described(_OPTIONAL_NUMBER, "upper bound of the 90% interval of the equivalence test"),
        "margin": _described(_NUMBER, "the equivalence margin m: equivalent within [1/(1+m), 1+m]"),
        "repetitions_needed": _described({"type": ["integer", "null"]}, "for an inconclusive comparison: "
                                         "repetitions per side that would settle it"),
        "verdict_reason": _described(_STRING, "why the verdict is not the direction its interval shows: too "
                                     "few pairs, or inside the A/A noise floor (empty when no guard applied)"),
        "method_reason": _described(_STRING, "why `method` was chosen"),
        "se_paired": _described(_OPTIONAL_NUMBER, "the paired method's standard error of the log ratio"),
        "se_unpaired": _described(_OPTIONAL_NUMBER, "the unpaired method's standard error of the log ratio"),
        "versions": _VERSIONS,
    }
    return {"$schema": DIALECT, "$id": f"urn:isobench:schema:summary:{SUMMARY_VERSION}",
            "version": SUMMARY_VERSION, "title": "isobench summary --json",
            "description": "The comparisons of a study, one record each, as `isobench summary --json` prints them.",
            "type": "array",
            "items": {"oneOf": [
                _record("comparison", "A platform entry against the baseline, for one workload and metric.", fields),
                finding_record()]}}


#: a finding's and a check's verdicts (analysis/finding_power.py)
_FINDING_VERDICTS = ["holds", "does not hold", "inconclusive", "cannot be tested here", "not testable by this design",
                     "not reproduced in this setting"]


def finding_record() -> dict[str, Any]:
    """A replication study's finding, tested on this store (analysis/findings.py); `summary --json` of a
    built-in replication study and `isobench replicate --json` print these."""
    check = _record("check", "One rule of the finding.", {
        "what": _described(_STRING, "what the rule compares"),
        "verdict": {"enum": _FINDING_VERDICTS},
        "shown": _described(_STRING, "the estimate with its 95% interval, as shown"),
        "reason": _described(_STRING, "why the verdict is what it is"),
        "repetitions_needed": {"type": ["integer", "null"]},
        "estimate": _OPTIONAL_NUMBER, "ci_low": _OPTIONAL_NUMBER, "ci_high": _OPTIONAL_NUMBER,
        "n": {"type": "integer"},
        "mde": _described(_OPTIONAL_NUMBER, "the smallest effect the design could detect (two-sided 5%, 80% power): "
                          "a ratio for ratio checks (1.014 = 1.4%), else an amount in the metric's unit"),
        "aa": _described(_STRING, "a ratio check's A/A (its reference against its twin), or 'no A/A in this "
                         "study'; empty for other checks")})
    fields = {
        "type": {"const": "finding"},
        "paper": _described(_STRING, "the paper (park-bahn-2023, prashanthi-2023, samani-salehi, siddaramanna-john)"),
        "id": _described(_STRING, "F1..F10 for the papers' findings, L1.. for literature rows"),
        "source": _described(_STRING, "where the paper (or the literature) states it"),
        "claim": _STRING, "paper_figure": _described(_STRING, "the paper's own figure"),
        "origin": {"enum": ["paper", "literature"]},
        "verdict": {"enum": _FINDING_VERDICTS},
        "verdict_words": _described(_STRING, "the verdict as the table words it"),
        "here": _described(_STRING, "this host's estimates with their 95% intervals"),
        "reason": _STRING,
        "repetitions_needed": {"type": ["integer", "null"]},
        "checks": {"type": "array", "items": check},
        "words": _described(_STRING, "the verdict's own sentence where it has one (not reproduced in this setting)"),
        "rule_written": _described(_STRING, "the date the finding's rule was last written (YYYY-MM-DD)"),
        "rule_hash": _described(_STRING, "12 hex characters of sha256 over what decides the verdict"),
        "changed_after_data": _described({"type": "boolean"}, "the rule differs from the one recorded with the data"),
        "change_reason": _described(_STRING, "why it changed (its latest revision), when it did"),
        "rule_hash_before": _described(_STRING, "the hash of the rule recorded with the data, when it changed"),
        "verdict_before": _described({"type": ["string", "null"]}, "the recorded rule's verdict on the same data"),
    }
    return _record("finding", "A paper's finding re-tested on this host's results.", fields)


SCHEMAS = {"export": export_schema, "summary": summary_schema}


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema called ``name``."""
    if name not in SCHEMAS:
        raise UserError(f"no schema {name!r}", field="isobench schema", fix=f"use one of {', '.join(SCHEMAS)}")
    return SCHEMAS[name]()
