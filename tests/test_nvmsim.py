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
        assert (row["hits"], row["sync_destages"], row["slow_reads"]) == \
            (ref.hits, ref.sync_destages, ref.slow_reads)
        summary = summarize(ref.latency_s)
        assert row["mean_s"] == pytest.approx(summary["mean_s"], rel=1e-12)
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
