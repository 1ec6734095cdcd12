"""Analysis and report from a store with known values: statistics, tables, hints, warnings, CLI."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from pathlib import Path

import pytest

from isobench.analysis.advisor import repetitions_for_halfwidth, repetitions_for_power
from isobench.analysis.stats import bootstrap_ratio_ci, effect_words, holm, ratio_ci
from isobench.analysis.summary import analyse
from isobench.analysis.views import Figure, Skipped, Table
from isobench.store import Store
from tests import report_store
from tests.conftest import run_cli


def lognormal(n: int, median: float, sigma: float, rng: random.Random) -> list[float]:
    return [median * math.exp(rng.gauss(0, sigma)) for _ in range(n)]


# -- statistics ------------------------------------------------------------------------------
def test_holm_matches_hand_computed_values() -> None:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([None, 0.5, 0.9]) == [None, pytest.approx(1.0), pytest.approx(1.0)]
    assert holm([]) == []


def test_bootstrap_coverage_is_sane_and_narrower_than_welch_at_small_n() -> None:
    rng = random.Random(3)
    covered = {5: [0, 0], 12: [0, 0]}  # n -> [bootstrap, welch]
    trials = 300
    for n in covered:
        for trial in range(trials):
            base, other = lognormal(n, 1.0, 0.05, rng), lognormal(n, 1.1, 0.05, rng)
            low, high = bootstrap_ratio_ci(other, base, resamples=1000, seed=trial)  # type: ignore[misc]
            welch = ratio_ci(other, base)
            covered[n][0] += low <= 1.1 <= high
            covered[n][1] += welch.ci_low <= 1.1 <= welch.ci_high  # type: ignore[operator]
    boot_small, welch_small = covered[5][0] / trials, covered[5][1] / trials
    boot_large = covered[12][0] / trials
    assert 0.70 < boot_small < welch_small  # the percentile bootstrap undercovers at n=5 ...
    assert 0.85 < boot_large <= 0.98  # ... and approaches 95% as n grows
    assert welch_small > 0.90
    assert bootstrap_ratio_ci([1.0], [1.0, 2.0]) is None


def test_effect_words() -> None:
    assert effect_words(1.004) == "+0.4% (negligible)"
    assert effect_words(1.03) == "3.0% slower (small)"
    assert effect_words(0.9) == "10.0% faster (moderate)"
    assert effect_words(2.5) == "2.5× slower (large)"
    assert effect_words(1.3, "probe.proc.ctx_involuntary") == "30.0% higher (large)"


def test_advisor_against_closed_forms_and_simulation() -> None:
    # Half-width: t·sqrt(2 s²/n) ≤ log(1.01) → n ≈ 2·(1.96·0.05/0.00995)² ≈ 194.
    n = repetitions_for_halfwidth(0.05, 0.05, 0.01)
    assert 190 <= n <= 200
    assert repetitions_for_halfwidth(0.05, 0.05, 0.02) < n < repetitions_for_halfwidth(0.08, 0.05, 0.01)
    # Power: the normal approximation 2·(z.975 + z.8)²·s²/δ² ≈ 396.
    assert repetitions_for_power(0.05, 0.05, 0.01) == pytest.approx(396, rel=0.03)
    # At small n the noncentral t answer holds up in simulation.
    n = repetitions_for_power(0.02, 0.02, 0.05)
    rng = random.Random(5)
    hits = sum(ratio_ci(lognormal(n, 1.05, 0.02, rng), lognormal(n, 1.0, 0.02, rng)).p_value < 0.05  # type: ignore[operator]
               for _ in range(600))
    assert 3 <= n <= 6 and hits / 600 >= 0.72


def test_advisor_reads_the_noise_the_comparisons_method_sees() -> None:
    """Rounds that shift both sides alike (±10%) with little noise within a round (±0.5%): the
    paired comparison's standard error, not the groups' spread, says how many repetitions it needs."""
    from isobench.analysis.compare import Comparison
    from isobench.analysis.groups import Group
    from isobench.analysis.summary import advise

    rng = random.Random(9)
    shifts = [math.exp(rng.gauss(0, 0.1)) for _ in range(8)]
    base = [s * math.exp(rng.gauss(0, 0.005)) for s in shifts]
    other = [1.05 * s * math.exp(rng.gauss(0, 0.005)) for s in shifts]
    diffs = [math.log(o / b) for o, b in zip(other, base, strict=True)]
    paired_se = statistics.stdev(diffs) / math.sqrt(len(diffs))

    def group(key: str, values: list[float]) -> Group:
        return Group("w", {}, "baremetal", key, key, {}, {"e2e": values}, {"e2e": "s"})

    def comparison(method: str, se: float) -> Comparison:
        return Comparison("w", "b", "b", {}, "e2e", "a", 1.05, 1.04, 1.06, 8, True, 8, 0.001, 1.05, 1.0, "s",
                          method, False, se=se, df=7)

    groups = [group("a", base), group("b", other)]
    unpaired = ratio_ci(other, base).se
    [paired] = advise(groups, [comparison("paired-log", paired_se)], "a", 0.01)
    [welch] = advise(groups, [comparison("welch-log", unpaired)], "a", 0.01)
    assert paired.method == "paired-log" and paired.noise == pytest.approx(paired_se * 2)
    assert paired.n_halfwidth <= 8 < 100 < welch.n_halfwidth, (paired, welch)


# -- a store with known values ----------------------------------------------------------------
@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return report_store.build(tmp_path_factory.mktemp("known"))


def test_comparisons_of_known_values(known: Path) -> None:
    analysis = analyse(Store.open(known))
    e2e = {c.label: c for c in analysis.comparisons if c.metric == "e2e"}
    expected = report_store.expected_e2e("docker") / report_store.expected_e2e("baremetal")
    assert e2e["docker"].ratio == pytest.approx(expected, rel=0.01)
    assert e2e["docker"].significant_holm and e2e["docker"].effect.endswith("slower (large)")
    assert e2e["aa"].is_aa and e2e["aa"].ratio == pytest.approx(1.0, abs=0.01)
    # The A/A interval's reach is the noise floor shown beside every comparison of the workload.
    floor = max(e2e["aa"].ci_high - 1, 1 - e2e["aa"].ci_low)  # type: ignore[operator]
    assert e2e["docker"].noise_floor == pytest.approx(floor)
    # Holm: two non-A/A, non-emulated-excluded e2e comparisons of three in the family.
    family = [c for c in analysis.comparisons if c.metric == "e2e" and not c.is_aa]
    raw = sorted(c.p_value for c in family)  # type: ignore[type-var]
    assert min(c.p_holm for c in family) == pytest.approx(min(1.0, len(family) * raw[0]))  # type: ignore[type-var]
    assert e2e["vm"].emulated and all(not c.emulated for c in analysis.shown)
    low, high = e2e["docker"].boot_low, e2e["docker"].boot_high
    assert low is not None and high is not None and low < e2e["docker"].ratio < high


def test_tables_hints_and_warnings_from_known_values(known: Path) -> None:
    analysis = analyse(Store.open(known))
    views = {v.id: v for v in analysis.views}
    minibatch = views["fig-minibatch-lenet-train"]
    assert isinstance(minibatch, Figure)
    rows = {row[0]: row for row in minibatch.table.rows}  # type: ignore[union-attr]
    assert rows["baremetal"][2] == "8.01"  # compute = forward + backward + optimizer, in ms (mean noise ≈ 1)
    assert float(rows["docker/runc [cpus=1.0]"][2]) == pytest.approx(3 * 1.02 + 4 + 3.4, rel=0.01)
    assert "baremetal (aa)" in rows
    reasons = views["tab-writeback-reasons"]
    assert isinstance(reasons, Table) and reasons.columns[3:6] == ["background", "periodic", "sync"]
    assert next(r for r in reasons.rows if r[1].startswith("docker/runc (docker-pinned)"))[2] == "4 tenants"
    docker_row = next(r for r in reasons.rows if r[1] == "docker/runc [cpus=1.0]")
    assert docker_row[5] == "42 (10.4%)" and docker_row[6] == "402"  # 7 sync × 6 repetitions
    faults = views["tab-fault-sources-lenet-train-docker"]
    assert isinstance(faults, Table) and faults.rows[0][2].endswith("libtorch_cpu.so")
    assert views["fig-writeback-heat"].kind == "heatmap"  # type: ignore[union-attr]
    # Fig. 6 from the cells' own traces: 30 pages written once, then 3 of them 30 times more
    nvm = views["tab-nvm"]
    assert isinstance(nvm, Table) and nvm.rows
    assert all(row[3:7] == ["60", "30", "50.0%", "100.0%"] for row in nvm.rows)  # everything fits in 16 MiB
    sweep = views["fig-nvm-sweep"]
    assert isinstance(sweep, Figure) and sweep.kind == "lines"
    gains = sweep.data["series"][0]["values"]
    assert gains == sorted(gains) and gains[0] < 50 < gains[-1]  # one page holds little; 30 pages hold all
    events = views["tab-events-lenet-train"]
    assert isinstance(events, Table)  # five entries: one row per entry and scope, the events across
    cycles = events.columns.index("cycles")
    by_row = {r[0]: r for r in events.rows}
    assert by_row["baremetal: cell"][cycles] == "1,025,000,000"  # Park & Bahn's "host process"
    assert by_row["docker/runc [cpus=1.0]: engine (daemon)"][cycles] == "20,000,002"  # "container daemon"
    assert isinstance(views["fig-energy"], Skipped)
    pinning = views["tab-pinning-lenet-train"]
    assert isinstance(pinning, Table) and pinning.rows[0][0] == "docker/runc vs docker/runc (docker-pinned)"

    rules = {h.rule: h for h in analysis.hints}
    assert set(rules) == {"cfs-throttling", "pin", "optimizer", "sync-writeback", "shared-library-faults"}
    assert "30% of CFS periods" in rules["cfs-throttling"].text
    assert re.search(r"optimizer step holds 9\d% of the extra time", rules["optimizer"].text)
    assert all(h.figure in views for h in analysis.hints)  # every hint links to a figure that exists

    kinds = {w.kind for w in analysis.warnings}
    assert {"host", "outlier", "emulated"} <= kinds
    outlier = next(w for w in analysis.warnings if w.kind == "outlier")
    # round-paired: the pair of round 3 (only the pinned side ran 1.6x slow then), not the repetition
    assert "the pair in round 3" in outlier.text and "docker-pinned" in outlier.text, outlier.text
    assert any("governor" in w.text for w in analysis.warnings)
    assert any("turbo" in w.text for w in analysis.warnings)


def test_no_hint_without_evidence(tmp_path: Path) -> None:
    """The same timings without probes or series: only the phase-based rule may speak."""
    store_dir = report_store.build(tmp_path)
    store = Store.open(store_dir)
    store.conn.execute("DELETE FROM series")
    store.conn.execute("DELETE FROM metrics WHERE metric LIKE 'probe.%'")
    analysis = analyse(store)
    assert {h.rule for h in analysis.hints} == {"optimizer"}
    assert isinstance(next(v for v in analysis.views if v.id == "tab-writeback-reasons"), Skipped)


def test_report_cli_html_and_markdown(known: Path, tmp_path: Path) -> None:
    html_file = tmp_path / "r.html"
    result = run_cli("report", str(known), "-o", str(html_file))
    assert result.returncode == 0, result.stderr
    text = html_file.read_text()
    # Self-contained: nothing to fetch.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text and "<script" not in text
    assert text.count("<svg") >= 6
    for anchor in ("fig-ratios", "fig-minibatch-lenet-train", "tab-writeback-reasons", "fig-writeback-heat"):
        assert f'id="{anchor}"' in text
    assert "1.24× baremetal" in text and "noise floor" in text and "name: known" in text
    from isobench.report.markdown import render_markdown

    markdown = render_markdown(analyse(Store.open(known)))
    assert "| lenet-train | docker/runc | cpus=1.0, threads=1 | 6/6 |" in markdown
    assert "## Root-cause hints" in markdown and "Not measured in this study" in markdown
    terminal = run_cli("summary", str(known), "--tables")
    assert terminal.returncode == 0, terminal.stderr
    assert "(Park & Bahn 2023, Tables 9–10)" in terminal.stdout and "[anon]" in terminal.stdout
    assert "why (suspected):" in terminal.stdout and "warning:" in terminal.stdout


def test_compare_cli_same_statistics_and_refusal(tmp_path: Path) -> None:
    a = report_store.build(tmp_path / "a")
    b = report_store.build(tmp_path / "b", scale=1.10)  # host B is 10% slower across the board
    result = run_cli("compare", str(a), str(b), "--json")
    assert result.returncode == 0, result.stderr
    records = {r["label"]: r for r in json.loads(result.stdout)}
    assert records["docker"]["ratio"] == pytest.approx(1.10, rel=1e-6)
    assert records["docker"]["p_holm"] is not None and records["docker"]["significant"]
    assert records["docker"]["noise_floor"] == pytest.approx(0.01, abs=0.005)  # each study's own A/A floor
    text = run_cli("compare", str(a), str(b)).stdout
    assert "10.0% slower" in text
    # Different parameters: refused with the reason, unless forced.
    other = report_store.STUDY.replace("workloads:\n", "workloads:\n  - {name: lenet-train, label: big, params: "
                                                      "{steps: 20, batch_size: 8}}\n")
    c = report_store.build(tmp_path / "c", study_text=other)
    refused = run_cli("compare", str(a), str(c))
    assert refused.returncode == 2 and "different workloads or parameters" in refused.stderr
    assert "only in B: big" in refused.stderr and refused.stdout == ""
    forced = run_cli("compare", str(a), str(c), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "only the shared workloads are compared" in forced.stdout and "big" not in forced.stdout.split("note:")[0]


def test_replication_studies_load_and_name_their_paper() -> None:
    from isobench.plan import expand
    from isobench.report.replication import REPLICATIONS
    from isobench.studyfile import builtin_studies, load_study

    for name in REPLICATIONS:
        assert name in builtin_studies()
        study, text, _ = load_study(name)
        assert study.name == name and expand(study)
        assert any(p.label == "aa" for p in study.platforms)  # every replication measures its noise floor


def test_replication_box_links_resolve(tmp_path: Path) -> None:
    """A store named like a replication study gets the paper box, its links landing on this run's views."""
    from isobench.report.html import render_html

    text = report_store.STUDY.replace("name: known", "name: prashanthi-2023")
    html = render_html(analyse(Store.open(report_store.build(tmp_path, study_text=text))))
    assert "Replication of Prashanthi et al. 2023" in html
    links = re.findall(r'<li>[^<]*→ <a href="#([^"]+)">', html)
    assert "fig-minibatch-lenet-train" in links and "fig-compute-lenet-train" in links
    assert all(f'id="{target}"' in html for target in links)
    assert "fig-energy</a> (not measured in this run)" in html


def test_layer_waterfall_joins_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A study with layer-* entries gets the isolation-layer module's waterfall as a figure."""
    study = report_store.STUDY.replace("  - {name: docker, knobs: {cpus: 1.0}}\n", "  - {name: layer-namespaces}\n")
    monkeypatch.setitem(report_store.EFFECT, "layer-namespaces", {"forward": 1.05})
    analysis = analyse(Store.open(report_store.build(tmp_path, study_text=study)))
    waterfall = next(v for v in analysis.views if v.id.startswith("fig-layers-"))
    assert isinstance(waterfall, Figure) and waterfall.kind == "forest"
    labels = waterfall.data["labels"]
    assert labels[0].startswith("full: ") and "layer-namespaces" in labels and labels[-1] == "unexplained"


def test_fetch_stall_hint_points_at_the_data_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(report_store.EFFECT, "docker", {"fetch_stall": 2.5})
    analysis = analyse(Store.open(report_store.build(tmp_path)))
    hint = next(h for h in analysis.hints if h.rule == "data-path")
    assert "fetch_stall grows 2.50×" in hint.text and "data path" in hint.text
    assert hint.status == "suspected" and "data_mount: copy" in hint.text  # nothing tested it: says how to
    assert hint.figure == "fig-minibatch-lenet-train"
    assert "optimizer" not in {h.rule for h in analysis.hints}  # the optimizer did not change this time


#: docker/runc bind-mounted (the default) and the same entry with its data copied in
COPIED = report_store.STUDY.replace("  - {name: docker, label: vm}\n",
                                    "  - {name: docker, label: copied, knobs: {cpus: 1.0, data_mount: copy}}\n")


@pytest.mark.parametrize(("copied_stall", "status", "says"), [
    (1.0, "confirmed", "the data path is the cause"),
    (2.5, "refuted", "not the data path"),
])
def test_the_data_path_hint_is_confirmed_or_refuted_by_an_entry_with_the_data_copied_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copied_stall: float, status: str, says: str) -> None:
    monkeypatch.setitem(report_store.EFFECT, "docker", {"fetch_stall": 2.5})
    monkeypatch.setitem(report_store.EFFECT, "copied", {"fetch_stall": copied_stall, "forward": 1.3})
    monkeypatch.setitem(report_store.DISPLAY, "copied", "docker/runc")
    analysis = analyse(Store.open(report_store.build(tmp_path, study_text=COPIED)))
    on_bind = [h for h in analysis.hints if h.rule == "data-path" and "(copied)" in h.text]
    assert len(on_bind) == 1 and on_bind[0].status == status and says in on_bind[0].text, analysis.hints
    # the entry that already has its data inside is never told to copy it in
    assert not any("data_mount: copy" in h.text for h in analysis.hints)
    if copied_stall > 1:
        own = [h for h in analysis.hints if h.rule == "data-path" and "with the data already copied in" in h.text]
        assert own and own[0].status == "suspected"
