"""nvmsim: hand-computed cases, properties, and fast paths identical to the reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isobench.nvmsim.devices import device
from isobench.nvmsim.fast import simulate_fast, sweep_lru
from isobench.nvmsim.model import SimConfig, baseline_latency, simulate_reference, summarize
from isobench.nvmsim.trace import READ, WRITE, Trace

PCM, HDD = device("pcm"), device("hdd")
W, S = PCM.page_write_s, HDD.page_write_s


def trace_of(pages: list[int], ops: list[int] | None = None) -> Trace:
    return Trace.from_columns(np.arange(len(pages), dtype=float), np.array(pages), None if ops is None
                              else np.array(ops))


def both(trace: Trace, config: SimConfig):  # type: ignore[no-untyped-def]
    ref = simulate_reference(trace, config, PCM, HDD)
    assert simulate_fast(trace, config, PCM, HDD).same_as(ref)
    return ref


@pytest.mark.parametrize("policy", ["lru", "clock", "hot"])
def test_all_hits(policy: str) -> None:
    result = both(trace_of([7] * 10), SimConfig(4, policy))  # type: ignore[arg-type]
    assert result.hits == 9 and result.misses == 1 and result.slow_writes == 0
    assert result.latency_s.tolist() == [W] * 10


@pytest.mark.parametrize("policy", ["lru", "clock", "hot"])
def test_all_misses_beyond_capacity(policy: str) -> None:
    result = both(trace_of(list(range(10))), SimConfig(3, policy))  # type: ignore[arg-type]
    # the first 3 fill the buffer; each later one evicts a dirty page synchronously
    assert result.hits == 0 and result.sync_destages == 7
    assert result.latency_s.tolist() == [W] * 3 + [W + S] * 7


def test_capacity_of_one_page() -> None:
    result = both(trace_of([1, 1, 2, 1, 2, 2]), SimConfig(1, "lru"))
    assert result.latency_s.tolist() == [W, W, W + S, W + S, W + S, W]
    assert (result.hits, result.misses, result.sync_destages) == (2, 4, 3)


@pytest.mark.parametrize("policy", ["lru", "clock", "hot"])
def test_working_set_that_just_fits(policy: str) -> None:
    pages = [0, 1, 2, 3] * 5
    fits = both(trace_of(pages), SimConfig(4, policy))  # type: ignore[arg-type]
    assert fits.misses == 4 and fits.slow_writes == 0
    lru_short = both(trace_of(pages), SimConfig(3, "lru"))
    assert lru_short.hits == 0  # the classic LRU cliff: one page short, every access misses


def test_hot_policy_keeps_hot_pages_through_a_scan() -> None:
    hot = [0, 1] * 10
    scan = list(range(100, 110))
    pages = hot + scan + hot
    hot_result = both(trace_of(pages), SimConfig(3, "hot"))
    lru_result = both(trace_of(pages), SimConfig(3, "lru"))
    assert hot_result.hits > lru_result.hits


def test_reads_hit_only_resident_pages() -> None:
    result = both(trace_of([5, 5, 6], [WRITE, READ, READ]), SimConfig(2, "lru"))
    assert result.latency_s.tolist() == [W, PCM.page_read_s, HDD.page_read_s] and result.slow_reads == 1


def test_background_destage_keeps_foreground_fast() -> None:
    pages = list(range(20))
    sync_only = both(trace_of(pages), SimConfig(10, "lru"))
    with_bg = both(trace_of(pages), SimConfig(10, "lru", high_watermark=0.5, low_watermark=0.3))
    assert with_bg.sync_destages == 0 and with_bg.background_destages > 0
    assert with_bg.latency_s.sum() < sync_only.latency_s.sum()


traces = st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=200)


@settings(max_examples=150, deadline=None)
@given(events=traces, capacity=st.integers(1, 40), policy=st.sampled_from(["lru", "clock", "hot"]),
       high=st.sampled_from([1.0, 0.9, 0.5]))
def test_properties(events: list[tuple[int, bool]], capacity: int, policy: str, high: float) -> None:
    trace = trace_of([p for p, _ in events], [READ if r else WRITE for _, r in events])
    config = SimConfig(capacity, policy, high, min(high, 0.4))  # type: ignore[arg-type]
    result = both(trace, config)
    base = baseline_latency(trace, HDD)
    # NVM faster than the slow device: never worse than the baseline, in total or per event
    assert result.latency_s.sum() <= base.sum()
    assert np.all(result.latency_s <= base + W)
    assert result.hits + result.misses == int((trace.op == WRITE).sum())
    assert result.extra["max_resident"] <= capacity  # the buffer never exceeds its capacity


@settings(max_examples=80, deadline=None)
@given(events=traces, capacities=st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_sweep_equals_simulation_per_capacity(events: list[tuple[int, bool]], capacities: list[int]) -> None:
    trace = trace_of([p for p, _ in events], [READ if r else WRITE for _, r in events])
    for row in sweep_lru(trace, capacities, PCM, HDD):
        ref = simulate_reference(trace, SimConfig(row["capacity"], "lru"), PCM, HDD)
        assert (row["hits"], row["sync_destages"], row["slow_reads"], row["drain_pages"]) == \
            (ref.hits, ref.sync_destages, ref.slow_reads, ref.dirty_at_end)
        summary = summarize(ref.latency_s)
        assert row["mean_s"] == pytest.approx(summary["mean_s"], rel=1e-12)
        drained = (ref.latency_s.sum() + ref.dirty_at_end * S) / len(trace)
        assert row["mean_drained_s"] == pytest.approx(drained, rel=1e-12)
        assert (row["p50_s"], row["p99_s"]) == (summary["p50_s"], summary["p99_s"])


def test_fast_paths_match_on_larger_random_traces() -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        n = int(rng.integers(1000, 5000))
        pages = (rng.zipf(1.4, n) % int(rng.integers(10, 500))).tolist()
        ops = (rng.random(n) < 0.1).astype(int).tolist()
        trace = trace_of(pages, ops)
        for policy in ("lru", "clock", "hot"):
            for high in (1.0, 0.8):
                config = SimConfig(int(rng.integers(1, 200)), policy, high, 0.5)  # type: ignore[arg-type]
                assert simulate_fast(trace, config, PCM, HDD).same_as(simulate_reference(trace, config, PCM, HDD))


def test_cli_on_csv_and_parquet_traces(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import run_cli

    rng = np.random.default_rng(1)
    n = 2000
    hot = rng.integers(0, 20, n)
    cold = rng.integers(1000, 100_000, n)
    index = np.where(rng.random(n) < 0.8, hot, cold)
    rows = ["time_s,dev,ino,index,op"] + [f"{i * 0.01:.2f},sda,42,{p},W" for i, p in enumerate(index)]
    csv_path = tmp_path / "a.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    parquet_path = tmp_path / "b.parquet"
    pq.write_table(pa.table({"time_s": np.arange(n) * 0.01 + 0.005, "ino": np.full(n, 43), "index": index}),
                   parquet_path)
    out = run_cli("nvmsim", str(csv_path), str(parquet_path), "--capacity", "64", "--sweep", "8", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["events"] == 2 * n and result["write_backs"] == 2 * n
    assert 0.5 < result["improvement"] < 1 and result["flushes_avoided"] > 0
    assert result["nvm_system"]["mean_s"] < result["baseline"]["mean_s"]
    gains = [row["improvement"] for row in result["sweep"]]
    assert gains == sorted(gains) and len(gains) >= 6  # more NVM never hurts LRU here
    # the footprint figures come along: distinct pages of both files, a drain no larger than the buffer
    footprint = result["footprint"]
    assert footprint["footprint_pages"] == result["footprint_pages"] == 2 * len(set(index.tolist()))  # two inodes
    assert 0 < result["drain_pages"] <= 64 and result["improvement_drained"] < result["improvement"]
    assert [row["fraction"] for row in footprint["capacities"]] == [0.25, 0.5, 1.0, 2.0]
    text = run_cli("nvmsim", str(csv_path), "--capacity", "1m")
    assert text.returncode == 0 and "I/O latency improvement" in text.stdout
    bad = tmp_path / "bad.csv"
    bad.write_text("time_s,ino\n1,2\n")
    failed = run_cli("nvmsim", str(bad))
    assert failed.returncode == 2 and "missing column(s) ['index']" in failed.stderr


def test_characterisation_and_plot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json
    import xml.etree.ElementTree as ET

    from isobench.nvmsim.characterise import hot_share_over_time, writebacks_per_page_over_time
    from tests.conftest import run_cli

    # early: writes spread over 500 pages; later: the same 5 pages again and again (Figure 4's shape)
    early = list(range(500))
    late = [0, 1, 2, 3, 4] * 200
    trace = trace_of(early + late)
    shares = hot_share_over_time(trace, windows=3)
    assert shares[0]["hot_share"] < 0.05 and shares[-1]["hot_share"] > 0.15
    heat = writebacks_per_page_over_time(trace, time_bins=4, page_bins=10)
    counts = np.array(heat["counts"])
    assert counts.sum() == 1500 and counts[-1, 0] == counts[-1].sum()  # late write-backs: first pages only

    csv_path = tmp_path / "t.csv"
    csv_path.write_text("time_s,ino,index\n" + "\n".join(f"{i},1,{p}" for i, p in enumerate(early + late)))
    svg = tmp_path / "sweep.svg"
    out = run_cli("nvmsim", str(csv_path), "--capacity", "8", "--characterise", "--plot", str(svg), "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["hot_share"] and result["heatmap"]["counts"] and result["sweep"]
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg") and "improvement" in svg.read_text()


@settings(max_examples=60, deadline=None)
@given(events=traces, capacities=st.lists(st.integers(1, 40), min_size=1, max_size=10),
       front=st.sampled_from([1, 2, 5, 16, 64]))
def test_sweep_histograms_do_not_depend_on_the_front_array_size(events: list[tuple[int, bool]],
                                                                capacities: list[int], front: int) -> None:
    from isobench.nvmsim.fast import _lru_buckets

    trace = trace_of([p for p, _ in events], [READ if r else WRITE for _, r in events])
    caps = np.array(sorted(set(capacities)), dtype=np.int64)
    n_pages = max(trace.n_pages, 1)
    one = _lru_buckets(trace.page, trace.op, n_pages, caps, 1)
    other = _lru_buckets(trace.page, trace.op, n_pages, caps, front)
    assert all(np.array_equal(a, b) for a, b in zip(one, other, strict=True))


def sweep_matches_simulation(trace: Trace, capacities: list[int]) -> None:
    rows = sweep_lru(trace, capacities, PCM, HDD)
    assert [row["capacity"] for row in rows] == capacities  # the order asked for, duplicates kept
    for row in rows:
        fast = simulate_fast(trace, SimConfig(row["capacity"], "lru"), PCM, HDD)
        assert (row["hits"], row["sync_destages"], row["slow_reads"]) == \
            (fast.hits, fast.sync_destages, fast.slow_reads), row["capacity"]


def test_sweep_on_long_traces_with_deep_stacks() -> None:
    # long enough that stamps span many bitmap words and lazy boundaries pass many set bits;
    # capacities unsorted, duplicated, 1, around the exact-depth limit and beyond the distinct pages
    rng = np.random.default_rng(7)
    n, n_pages = 60_000, 3000
    hot = rng.zipf(1.2, n) % n_pages
    scan = np.arange(n) % n_pages  # a cyclic scan: every depth just below n_pages
    pages = np.where(rng.random(n) < 0.7, hot, scan)
    ops = (rng.random(n) < 0.2).astype(int)
    trace = trace_of(pages.tolist(), ops.tolist())
    capacities = [5000, 1, 255, 256, 257, 300, 1, 2999, 3000, 64, 1024, 2, 2048]
    sweep_matches_simulation(trace, capacities)


def test_sweep_with_one_page_rewritten_between_cold_pages() -> None:
    # long runs of one page leave the bitmap sparse between the other pages' stamps
    pages = list(range(300)) + [0] * 5000 + list(range(300)) + [7] * 3000 + list(range(299, -1, -1))
    trace = trace_of(pages, [READ if k % 11 == 0 else WRITE for k in range(len(pages))])
    sweep_matches_simulation(trace, [1, 2, 150, 256, 299, 300, 301, 400])


def test_sweep_of_no_capacities_and_of_reads_only() -> None:
    assert sweep_lru(trace_of([1, 2, 3]), [], PCM, HDD) == []
    rows = sweep_lru(trace_of([1, 2, 1], [READ] * 3), [1, 4], PCM, HDD)
    assert [(r["hits"], r["misses"], r["slow_reads"]) for r in rows] == [(0, 0, 3), (0, 0, 3)]


# Footprint-relative capacity, the write-through at the end (the drain), hot pages, capacity for 82%


def rewrite(pages: int, times: int) -> Trace:
    """A checkpoint of ``pages`` pages rewritten in place, front to back, ``times`` times."""
    return trace_of(list(range(pages)) * times)


@pytest.mark.parametrize("policy", ["lru", "clock", "hot"])
def test_the_drain_is_the_dirty_pages_left_at_the_end(policy: str) -> None:
    from isobench.nvmsim.run import compare

    trace = rewrite(10, 4)
    fits = both(trace, SimConfig(10, policy))  # type: ignore[arg-type]
    assert fits.slow_writes == 0 and fits.dirty_at_end == 10  # never wrote the HDD: it owes every page
    result = compare(trace, SimConfig(10, policy), PCM, HDD)  # type: ignore[arg-type]
    assert result["improvement"] == pytest.approx(1 - W / S)
    # charged one HDD write per page at the end: 40 NVM writes and 10 HDD writes against 40 HDD writes
    assert result["improvement_drained"] == pytest.approx(1 - (40 * W + 10 * S) / (40 * S))
    assert (result["drain_pages"], result["slow_writes_with_drain"], result["footprint_pages"]) == (10, 10, 10)
    # background destage leaves fewer pages dirty, and each page it cleaned was already paid for
    bg = both(trace, SimConfig(10, policy, high_watermark=0.5, low_watermark=0.3))  # type: ignore[arg-type]
    assert bg.dirty_at_end <= 5 and bg.background_destages > 0


def test_footprint_counts_distinct_pages_written_and_capacities_follow_it() -> None:
    from isobench.nvmsim.run import footprint_capacity

    trace = trace_of([1, 2, 2, 3, 9, 8], [WRITE, WRITE, WRITE, WRITE, READ, READ])
    assert trace.footprint() == 3 and trace.n_pages == 5  # pages only read are not part of it
    big = rewrite(10, 2)
    assert [footprint_capacity(big, f) for f in (0.25, 0.5, 1.0, 2.0)] == [3, 5, 10, 20]
    assert footprint_capacity(trace_of([1]), 0.25) == 1 and trace_of([1], [READ]).footprint() == 0


def test_hot_share_is_the_top_tenth_of_pages() -> None:
    from isobench.nvmsim.characterise import hot_share

    assert hot_share(rewrite(100, 10)) == pytest.approx(0.10)  # every page alike: no hot pages
    hot = [p for p in range(10) for _ in range(100)]  # 10 pages written 100 times, 90 pages once
    assert hot_share(trace_of(hot + list(range(10, 100)))) == pytest.approx(1000 / 1090)
    assert hot_share(trace_of([5] * 3 + [6])) == pytest.approx(0.75)  # one page of two: at least one
    assert hot_share(trace_of([1], [READ])) == 0.0


def test_a_rewrite_larger_than_the_buffer_reaches_its_ceiling_only_at_the_footprint() -> None:
    from isobench.nvmsim.run import footprint_report

    report = footprint_report(rewrite(100, 10), PCM, HDD, target=0.82)
    rows = {row["fraction"]: row for row in report["capacities"]}
    assert [row["capacity_pages"] for row in report["capacities"]] == [25, 50, 100, 200]
    # below the footprint LRU misses every write; the drain counted, the buffer gains nothing
    assert rows[0.5]["improvement"] == pytest.approx(1 - (1000 * W + 950 * S) / (1000 * S))  # the first fill
    assert rows[0.5]["improvement_drained"] <= 0 and rows[0.25]["improvement_drained"] <= 0
    # at the footprint: every page once to the HDD, at the end; twice the footprint is no better
    ceiling = 1 - (1000 * W + 100 * S) / (1000 * S)
    assert rows[1.0]["improvement_drained"] == pytest.approx(ceiling) == report["ceiling"]
    assert rows[2.0]["improvement_drained"] == pytest.approx(ceiling) and rows[2.0]["drain_pages"] == 100
    assert rows[1.0]["improvement"] > 0.99  # without the drain the buffer looks near perfect
    assert report["capacity_for_target"] == {"pages": 100, "mib": 100 * 4096 / 2**20, "fraction": 1.0}
    assert report["write_backs_per_page"] == 10 and report["hot_share_top10"] == pytest.approx(0.1)
    assert footprint_report(rewrite(100, 10), PCM, HDD, target=0.95)["capacity_for_target"] is None  # > 1 - 1/10


def test_capacity_for_a_target_is_the_smallest_that_reaches_it() -> None:
    from isobench.nvmsim.run import capacity_for

    rng = np.random.default_rng(11)
    for _ in range(6):
        n = int(rng.integers(300, 1500))
        pages = (rng.zipf(1.3, n) % int(rng.integers(20, 120))).tolist()
        trace = trace_of(pages, (rng.random(n) < 0.1).astype(int).tolist())
        base = baseline_latency(trace, HDD).sum()
        gains = []
        for capacity in range(1, trace.footprint() + 1):  # brute force, one simulation per capacity
            result = simulate_fast(trace, SimConfig(capacity, "lru"), PCM, HDD)
            gains.append(1 - (result.latency_s.sum() + result.dirty_at_end * S) / base)
        assert all(a <= b + 1e-12 for a, b in zip(gains, gains[1:], strict=False))  # monotone: search is exact
        for target in (gains[0] - 0.01, float(np.median(gains)), gains[-1], gains[-1] + 0.01):
            expected = next((c for c, g in enumerate(gains, start=1) if g >= target), None)
            assert capacity_for(trace, target, PCM, HDD) == expected, (target, expected)


def test_the_finding_rule_reads_the_footprint_and_the_drain(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from isobench.analysis.finding_power import FAILS, HOLDS
    from isobench.analysis.finding_spec import parse_findings
    from isobench.analysis.findings import evaluate
    from tests import report_store

    store = report_store.build(tmp_path / "out")  # each cell wrote back 30 pages, 60 times; 3 pages hot

    def check(fields: str):  # type: ignore[no-untyped-def]
        paper = parse_findings(f"""
paper: t
title: t
studies: [known]
findings:
  - {{id: T1, source: s, claim: c, paper: p,
     checks: [{{what: flush, kind: nvmsim, study: known, {fields}}}]}}
""", "t.yaml")
        return evaluate(paper, {"known": store}, {})[0]

    # at the footprint, nothing written through: near 100%; charged the drain: 1 - 30/60, just short of half
    assert check('capacity_footprint: 1.0, expect: "> 0.99"').verdict == HOLDS
    drained = check('capacity_footprint: 1.0, drain: true, expect: "> 0.5", effect: 0.82')
    assert drained.verdict == FAILS and drained.checks[0].estimate == pytest.approx(0.5 - W / S)
    assert "1× each trace's footprint" in drained.reason and "written through at the end" in drained.reason
    assert "top-10% pages 55% of write-backs" in drained.here and "82% at no capacity, at most 50%" in drained.here
    # a figure within reach: the smallest capacity for it, as a multiple of the footprint and in MiB
    reach = check('capacity_footprint: 0.5, drain: true, expect: "> 0.4", effect: 0.45')
    assert "45% at " in reach.here and "× footprint (" in reach.here and " MiB)" in reach.here
    assert "45% at no capacity" not in reach.here
