"""Rules written before the data (dates, hashes, "changed after seeing data" with the old verdict
beside the new), the two-sided band ``between A and B``, tenant groups counted once per round,
the runsc platform a gVisor cell ran on (check by check), a check with no published figure, and
a paper's overrides of a shared study."""

from __future__ import annotations

import json
import math
import re
import shutil
import statistics
import subprocess
from pathlib import Path

import pytest
from scipy import stats as sps

from isobench.analysis import finding_spec
from isobench.analysis.blocked import Point
from isobench.analysis.finding_rules import RULES_META, record_rules, recorded_rules, rule_hash, rule_payload
from isobench.analysis.finding_spec import PAPERS, load_findings, parse_findings
from isobench.analysis.findings import FAILS, HOLDS, INCONCLUSIVE, evaluate
from isobench.analysis.tenant_rounds import tenant_means, tenant_points
from isobench.errors import UserError
from isobench.platforms.runsc import default_platform, engine_runsc_platform, platform_from_args
from isobench.report.findings_table import markdown_details, markdown_table
from isobench.store import Store
from tests import report_store


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # docker: optimizer 3.4x (95% interval about 3.2-3.6), backward unchanged
    return report_store.build(tmp_path_factory.mktemp("known") / "out")


def paper_text(first_expect: str, revisions: str = "", extra: str = "") -> str:
    """T1 tests docker's optimizer step against ``first_expect``; T2 its backward pass, unchanged."""
    return f"""
paper: test-paper
title: a paper with known outcomes
studies: [known]
findings:
  - id: T1
    source: "test §1"
    claim: "the optimizer step is slower in a container"
    paper: "3×"
    written: 2026-11-20
{revisions}    rule: the optimizer step must be slower in Docker.
    checks:
      - {{what: optimizer, workload: lenet-train, platform: docker, metric: phase.optimizer, expect: "{first_expect}"}}
  - id: T2
    source: "test §2"
    claim: "the backward pass is on par"
    paper: "on par"
    written: 2026-11-20
    checks:
      - {{what: backward, workload: lenet-train, platform: docker, metric: phase.backward, expect: "within 0.03"}}
{extra}"""


def copy_store(known: Path, tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    shutil.copytree(known, directory)
    return directory


def test_the_hash_is_stable_and_changes_with_what_decides_the_verdict() -> None:
    finding = parse_findings(paper_text("> 2.0"), "t.yaml").findings[0]
    digest = rule_hash(finding)
    assert re.fullmatch(r"[0-9a-f]{12}", digest)
    assert rule_hash(parse_findings(paper_text("> 2.0"), "t.yaml").findings[0]) == digest
    check = finding.checks[0]

    def with_check(**update: object) -> str:
        return rule_hash(finding.model_copy(update={"checks": [check.model_copy(update=update)]}))

    assert with_check(expect="> 2.5") != digest
    assert with_check(metric="phase.forward") != digest
    assert with_check(needs=["gpu"]) != digest
    assert rule_hash(finding.model_copy(update={"rule": "another rule"})) != digest
    # what only labels or formats a check, and the rule text's line breaks, decide nothing
    assert with_check(what="another label", scale=1000.0, unit="ms") == digest
    assert rule_hash(finding.model_copy(update={"rule": "the optimizer step\n  must be slower in Docker."})) == digest
    # every built-in finding has a date, and findings with different rules have different hashes
    # (L3 and L4 share one: the same placeholder, a check that needs KVM and nothing else)
    builtin = [f for name in PAPERS for f in load_findings(name).findings]
    assert all(f.written is not None for f in builtin)
    payloads = {json.dumps(rule_payload(f), sort_keys=True) for f in builtin}
    assert len({rule_hash(f) for f in builtin}) == len(payloads) > 10


def test_a_builtin_finding_without_its_date_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    undated = paper_text("> 2.0").replace("    written: 2026-11-20\n", "", 1)

    class Files:
        def joinpath(self, name: str) -> Files:
            return self

        def read_text(self) -> str:
            return undated

    monkeypatch.setattr(finding_spec.resources, "files", lambda package: Files())
    with pytest.raises(UserError) as err:
        load_findings(PAPERS[0])
    text = str(err.value)
    assert "\n" not in text and f"findings/{PAPERS[0]}.yaml" in text
    assert "findings.0.written" in text and "YYYY-MM-DD" in text


def test_a_rule_changed_after_its_data_is_marked_with_the_reason_and_the_old_verdict(known: Path,
                                                                                     tmp_path: Path) -> None:
    directory = copy_store(known, tmp_path)
    before = parse_findings(paper_text("> 2.0"), "t.yaml")
    assert record_rules(directory, before)
    # a second record (a --resume) keeps the first
    assert not record_rules(directory, parse_findings(paper_text("> 9.0"), "t.yaml"))
    assert recorded_rules(directory)["findings"]["T1"]["hash"] == rule_hash(before.findings[0])  # type: ignore[index]
    revised = paper_text("> 5.0", revisions="""    revisions:
      - {date: 2026-11-21, reason: "an earlier reason"}
      - {date: 2026-11-22, reason: "the cited figure is 5x, not 2x"}
""", extra="""  - id: T3
    source: "test §3"
    claim: "added later"
    paper: "x"
    written: 2026-11-22
    checks:
      - {what: forward, workload: lenet-train, platform: docker, metric: phase.forward, expect: "> 1.0"}
""")
    changed, unchanged, added = evaluate(parse_findings(revised, "t.yaml"), {"known": directory}, {})
    assert changed.verdict == FAILS and changed.changed_after_data
    assert changed.change_reason == "the cited figure is 5x, not 2x"  # the latest revision's
    assert changed.verdict_before == HOLDS and changed.rule_hash_before == rule_hash(before.findings[0])
    assert changed.rule_written == "2026-11-20" and changed.rule_hash != changed.rule_hash_before
    assert not unchanged.changed_after_data and unchanged.verdict_before is None and unchanged.change_reason == ""
    assert added.changed_after_data and added.verdict_before is None and "written after the data" in added.change_reason
    # without a revision the mark says no reason was written
    bare = evaluate(parse_findings(paper_text("> 5.0"), "t.yaml"), {"known": directory}, {})[0]
    assert bare.changed_after_data and bare.change_reason == "no reason written"
    # the page: every finding with its date and hash; the changed one marked, its old verdict beside
    table = "\n".join(markdown_table([changed, unchanged]))
    assert f"2026-11-20, {changed.rule_hash}" in table and f"2026-11-20, {unchanged.rule_hash}" in table
    assert "does not hold (rule changed after seeing data; before the change: holds)" in table
    details = "\n".join(markdown_details(changed, "a rule", [("2026-11-22", "the cited figure is 5x, not 2x")]))
    assert "**Changed after seeing data**: the cited figure is 5x, not 2x." in details
    assert f"({changed.rule_hash_before}) gives: **holds**" in details and "Revised 2026-11-22" in details
    record = changed.as_record()
    assert record["changed_after_data"] is True and record["verdict_before"] == HOLDS


def test_a_store_without_a_record_claims_nothing(known: Path) -> None:
    # a store from before rules were recorded (or from `isobench run`): its provenance is unknown
    result = evaluate(parse_findings(paper_text("> 5.0"), "t.yaml"), {"known": known}, {})[0]
    assert not result.changed_after_data and result.rule_hash and result.rule_written == "2026-11-20"
    store = Store.open(known)
    try:
        assert store.meta(RULES_META) is None
    finally:
        store.close()


@pytest.mark.parametrize(("expect", "verdict"), [("between 3 and 4", HOLDS), ("between 5 and 10", FAILS),
                                                 ("between 1.5 and 3", FAILS), ("between 3.39 and 10", INCONCLUSIVE)])
def test_a_two_sided_band_decides_all_three_ways(known: Path, expect: str, verdict: str) -> None:
    result = evaluate(parse_findings(paper_text(expect), "t.yaml"), {"known": known}, {})[0]
    check = result.checks[0]
    assert check.ci_low is not None and 3.0 < check.ci_low < 3.4 < check.ci_high < 4.0  # type: ignore[operator]
    assert result.verdict == verdict, (check.shown, check.reason)
    if verdict == INCONCLUSIVE:
        assert check.repetitions_needed is not None and check.repetitions_needed > check.n
    else:
        assert check.reason == f"expected {expect}"


def test_a_band_must_run_upwards() -> None:
    with pytest.raises(UserError) as err:
        parse_findings(paper_text("between 4 and 3"), "bad.yaml")
    assert "bad.yaml" in str(err.value) and "expect" in str(err.value) and "lower end" in str(err.value)


def test_tenant_points_count_once_per_round(tmp_path: Path) -> None:
    points = [Point(rep, 10.0 * rep + t, f"c{rep}/t{t}") for rep in range(3) for t in range(4)]
    assert tenant_means(points) == [1.5, 11.5, 21.5]
    # a cell outside any group keeps its own value
    assert tenant_means([Point(0, 1.0, "a"), Point(0, 3.0, "b")]) == [1.0, 3.0]
    # on a store: a four-tenant entry's value check counts its six rounds, not 24 cells
    study = report_store.STUDY.replace("  - {name: baremetal, label: aa}\n",
                                       "  - {name: baremetal, label: aa, tenants: 4}\n")
    study += "schedule: sequential\n"
    directory = report_store.build(tmp_path / "tenants", study_text=study)
    cells = Store.open(directory)
    try:
        members = [r[0] for r in cells.conn.execute("SELECT cell_id FROM cells WHERE platform_key = 'aa'")]
    finally:
        cells.close()
    assert len(members) == 24 and all(re.search(r"/t[0-3]$", m) for m in members)
    paper = parse_findings(paper_text("> 0").replace(
        "workload: lenet-train, platform: docker, metric: phase.optimizer, expect: \"> 0\"",
        "kind: value, workload: lenet-train, platform: aa, metric: probe.proc.ctx_involuntary, expect: \"> 0\""),
        "t.yaml")
    value = evaluate(paper, {"known": directory}, {})[0].checks[0]
    assert value.n == 6 and value.estimate == pytest.approx(520 + 7 * 2.5)
    difference = evaluate(parse_findings(paper_text("> 0").replace(
        "workload: lenet-train, platform: docker, metric: phase.optimizer, expect: \"> 0\"",
        "kind: difference, workload: lenet-train, platform: aa, metric: probe.proc.ctx_involuntary, "
        "expect: \"> -1\""), "t.yaml"), {"known": directory}, {})[0].checks[0]
    # both sides read 520 + 7 x round: Welch over six round means a side (df 10), where 24
    # tenants counted apart would have narrowed the interval
    variance = statistics.variance([7.0 * r for r in range(6)])
    half = float(sps.t.ppf(0.975, 10)) * math.sqrt(2 * variance / 6)
    assert difference.n == 6 and difference.estimate == pytest.approx(0.0, abs=1e-9)
    assert difference.ci_high == pytest.approx(half)
    # a ratio pairs the group with its round's baseline cell: six pairs of one value each, not
    # 24 tenants against 6 (which the blocked estimate could not pair, and took as independent)
    ratio = evaluate(parse_findings(paper_text("> 0").replace(
        "workload: lenet-train, platform: docker, metric: phase.optimizer, expect: \"> 0\"",
        "workload: lenet-train, platform: aa, metric: probe.proc.ctx_involuntary, expect: \"> 0.5\""),
        "t.yaml"), {"known": directory}, {})[0].checks[0]
    assert ratio.n == 6 and ratio.estimate == pytest.approx(1.0)
    merged = tenant_points(points)
    assert [(p.rep, p.value, p.cell_id) for p in merged] == [(0, 1.5, "c0"), (1, 11.5, "c1"), (2, 21.5, "c2")]


def test_runsc_platform_is_read_from_the_args_or_the_binary() -> None:
    assert platform_from_args(["--network=none", "--platform=kvm"]) == "kvm"
    assert platform_from_args(["-platform", "ptrace"]) == "ptrace"  # one dash or two
    assert platform_from_args(["--platform", "ptrace"]) == "ptrace"
    assert platform_from_args(["--network=none", "--platform_device_path=/dev/kvm"]) is None
    assert engine_runsc_platform({"runc": {"path": "runc"}}) is None
    assert engine_runsc_platform({"runsc": {"path": "/x/runsc", "runtimeArgs": ["--platform=systrap"]}}) == "systrap"
    # a binary that cannot be asked: the default of releases since mid-2023
    assert default_platform("/nonexistent/runsc") == "systrap"


def test_the_engines_runsc_platform_on_this_host() -> None:
    from isobench.platforms.docker import engine_problem, engine_runtimes

    if shutil.which("runsc") is None:
        pytest.skip("host lacks runsc")
    problem = engine_problem()
    if problem:
        pytest.skip(f"host lacks a Docker engine: {problem}")
    runtimes = engine_runtimes()
    names = sorted(n for n in runtimes if n.startswith("runsc"))
    if not names:  # isobench registers one runtime per runsc platform (runsc-systrap, ...) on first use
        from isobench.platforms.docker import GVisor
        from isobench.study.model import PlatformEntry

        GVisor(PlatformEntry(name="gvisor")).prepare()
        runtimes = engine_runtimes()
        names = sorted(n for n in runtimes if n.startswith("runsc"))
    assert names, runtimes
    name = names[0]
    platform = engine_runsc_platform(runtimes, name)
    assert platform in ("ptrace", "systrap", "kvm")
    binary = runtimes[name].get("path") or "runsc"
    named = platform_from_args([str(a) for a in runtimes[name].get("runtimeArgs") or []])
    # what daemon.json passes wins; otherwise the binary's own default, as `runsc flags` states it
    listing = subprocess.run([binary, "flags"], capture_output=True, text=True, timeout=20)
    stated = re.search(r'-platform string\s*\n[^\n]*\(default "(\w+)"\)', listing.stdout + listing.stderr)
    assert platform == (named or (stated.group(1) if stated else "systrap"))


def test_a_cited_runsc_figure_names_the_platform_that_ran(known: Path, tmp_path: Path) -> None:
    directory = copy_store(known, tmp_path)
    text = paper_text("> 2.0").replace("    rule: the optimizer", "    runsc_platform: ptrace\n    rule: the optimizer")
    unrecorded = evaluate(parse_findings(text, "t.yaml"), {"known": directory}, {})[0]
    assert "runsc's platform was not recorded" in unrecorded.reason

    def ran_on(platform: str) -> None:
        store = Store.open(directory)
        try:
            for cell_id, info in store.conn.execute("SELECT cell_id, platform_info FROM cells "
                                                    "WHERE platform_key = 'docker'").fetchall():
                data = {**json.loads(info or "{}"), "runsc_platform": platform}
                store.conn.execute("UPDATE cells SET platform_info = ? WHERE cell_id = ?", (json.dumps(data), cell_id))
        finally:
            store.close()

    ran_on("systrap")
    other = evaluate(parse_findings(text, "t.yaml"), {"known": directory}, {})[0]
    assert other.verdict == HOLDS  # the note explains; it does not decide
    assert other.reason.endswith("the cited figure is for ptrace; this host ran systrap")
    assert other.here.endswith("(runsc platform: systrap)")
    ran_on("ptrace")
    same = evaluate(parse_findings(text, "t.yaml"), {"known": directory}, {})[0]
    assert "runsc ran on ptrace here, the cited figure's platform" in same.reason
    # a finding that cites no runsc platform says nothing about it
    assert "runsc" not in evaluate(parse_findings(paper_text("> 2.0"), "t.yaml"), {"known": directory}, {})[0].reason


def test_each_check_names_the_runsc_platform_of_its_own_entry(known: Path, tmp_path: Path) -> None:
    """A study with gVisor on two platforms (docker and vm stand in for them): each check reads
    the runsc platform of the entries it compares, not the study's, and says where it differs
    from the cited figure's."""
    directory = copy_store(known, tmp_path)
    store = Store.open(directory)
    try:
        for key, platform in (("docker", "ptrace"), ("vm", "systrap")):
            for cell_id, info in store.conn.execute("SELECT cell_id, platform_info FROM cells WHERE platform_key = ?",
                                                    (key,)).fetchall():
                data = {**json.loads(info or "{}"), "runsc_platform": platform}
                store.conn.execute("UPDATE cells SET platform_info = ? WHERE cell_id = ?", (json.dumps(data), cell_id))
    finally:
        store.close()
    two = paper_text("> 2.0").replace("    rule: the optimizer", "    runsc_platform: ptrace\n    rule: the optimizer") \
        .replace('metric: phase.optimizer, expect: "> 2.0"}', 'metric: phase.optimizer, expect: "> 2.0"}\n'
                 '      - {what: forward, workload: lenet-train, platform: vm, metric: phase.forward, expect: "> 2.0"}')
    result = evaluate(parse_findings(two, "t.yaml"), {"known": directory}, {})[0]
    optimizer, forward = result.checks
    assert result.verdict == HOLDS  # the notes explain; they do not decide
    assert optimizer.shown.endswith("(runsc platform: ptrace)") and forward.shown.endswith("(runsc platform: systrap)")
    assert "runsc ran on ptrace here, the cited figure's platform" in optimizer.reason
    assert forward.reason.endswith("the cited figure is for ptrace; this host ran systrap")
    assert "forward: the cited figure is for ptrace; this host ran systrap" in result.reason
    assert "optimizer: runsc ran on" not in result.reason  # a match is named on its check only
    assert "optimizer: " in result.here and "(runsc platform: ptrace); forward: " in result.here
    # one entry alone reads its own platform, whatever else the study ran
    one = evaluate(parse_findings(paper_text("> 2.0").replace(
        "    rule: the optimizer", "    runsc_platform: ptrace\n    rule: the optimizer"), "t.yaml"),
        {"known": directory}, {})[0]
    assert one.here.endswith("(runsc platform: ptrace)") and "the cited figure's platform" in one.reason


def test_a_check_without_a_published_figure_shows_its_estimate_and_no_verdict(known: Path) -> None:
    text = paper_text("> 2.0").replace('metric: phase.optimizer, expect: "> 2.0"}',
                                       'metric: phase.optimizer, expect: "> 2.0"}\n'
                                       '      - {what: backward, workload: lenet-train, platform: docker, '
                                       'metric: phase.backward, no_figure: "the source measured one platform only"}')
    finding = parse_findings(text, "t.yaml").findings[0]
    result = evaluate(parse_findings(text, "t.yaml"), {"known": known}, {})[0]
    optimizer, backward = result.checks
    assert backward.verdict == "cannot be tested here" and "×" in backward.shown
    assert backward.reason == "no published figure to compare with: the source measured one platform only"
    assert backward.ci_low is not None and backward.ci_low < 1.0 < backward.ci_high  # type: ignore[operator]
    # the other check decides; the row says what is missing
    assert result.verdict == HOLDS and "no published figure" in result.reason and "backward: " in result.here
    # it is part of the rule: adding or dropping it changes the hash
    assert "no_figure" in rule_payload(finding)["checks"][1]


def test_a_papers_overrides_replace_a_shared_studys_fields_and_quick_replaces_them_again() -> None:
    import yaml

    from isobench.replicate.study_text import study_text

    paper = load_findings("siddaramanna-john")
    full = yaml.safe_load(study_text(paper, "density", False, None))
    quick = yaml.safe_load(study_text(paper, "density", True, None))
    shipped = yaml.safe_load((Path(finding_spec.__file__).parents[1] / "studies" / "density.yaml").read_text())
    assert full["platforms"] == paper.overrides["density"]["platforms"] != shipped["platforms"]
    assert full["repetitions"] == shipped["repetitions"] and full["baseline"] == "docker"
    assert quick["repetitions"] == 1 and {p.get("tenants") for p in quick["platforms"]} == {None, 2}
    # every entry L6 reads is in the full run; the quick one keeps the cited (ptrace) checks' entries
    wanted = {c.platform for f in paper.findings for c in f.checks if c.study == "density"} \
        | {c.against for f in paper.findings for c in f.checks if c.study == "density" and c.against}
    assert wanted <= {p.get("label", p["name"]) for p in full["platforms"]}
    assert {w for w in wanted if "systrap" not in w} == {p.get("label", p["name"]) for p in quick["platforms"]}
    bad = yaml.safe_load((Path(finding_spec.__file__).parents[1] / "studies" / "findings" /
                          "siddaramanna-john.yaml").read_text())
    bad["overrides"] = {"layers": {"repetitions": 1}}
    with pytest.raises(UserError) as err:
        parse_findings(yaml.safe_dump(bad), "o.yaml")
    assert "overrides names 'layers'" in str(err.value)


def test_a_finding_is_judged_by_the_record_of_the_study_its_data_are_in(known: Path, tmp_path: Path) -> None:
    """A finding added with a study of its own, beside a check that reads no store (only `needs`),
    is not "written after the data" because the paper's first study, run earlier, lacks it."""
    old, new = copy_store(known, tmp_path / "a"), copy_store(known, tmp_path / "b")
    text = paper_text("> 2.0").replace("studies: [known]", "studies: [first, second]")
    record_rules(old, parse_findings(text, "t.yaml"))  # the first study ran before T3 was written
    added = text + """  - id: T3
    source: "test §3"
    claim: "added with a study of its own"
    paper: "x"
    written: 2026-11-22
    checks:
      - {what: forward, study: second, workload: lenet-train, platform: docker, metric: phase.forward, expect: "> 1.0"}
      - {what: "on the GPU", needs: [gpu]}
"""
    paper = parse_findings(added, "t.yaml")
    record_rules(new, paper)  # the second study ran after it was
    result = evaluate(paper, {"first": old, "second": new}, {"gpu": "no GPU here"})[2]
    assert result.id == "T3" and not result.changed_after_data, result.change_reason
