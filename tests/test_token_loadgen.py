"""LoadGen's Server scenario with token latencies, through the real mlperf_loadgen, answered on known
synthetic times: VALID when both constraints hold over enough queries, INVALID naming the TTFT or
the TPOT constraint otherwise, at LoadGen's percentile rule (index floor(n × p) of the sorted
values), which token_constraints repeats."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

import pytest

from isobench.workloads.loadgen import (
    TokenServer,
    first_token,
    loadgen_percentile,
    query_complete,
    run_token_server,
    token_constraints,
)

TOKENS = 4


class SyntheticServer:
    """Answers each query after its own programmed TTFT and TPOT, on one timer thread: no query waits
    for another, so LoadGen sees exactly the programmed latencies (plus the timer's wake-up)."""

    def __init__(self, latencies: Callable[[int], tuple[float, float]]) -> None:
        self.latencies = latencies
        self.programmed: list[tuple[float, float]] = []
        self.due: list[tuple[float, int, Callable[[], None]]] = []
        self.order = itertools.count()
        self.wake = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.stopped = False
        self.thread.start()

    def issue(self, query_id: int, sample_index: int) -> None:
        ttft, tpot = self.latencies(len(self.programmed))
        self.programmed.append((ttft, tpot))
        now = time.monotonic()
        with self.wake:
            heapq.heappush(self.due, (now + ttft, next(self.order), lambda: first_token(query_id)))
            heapq.heappush(self.due, (now + ttft + tpot * (TOKENS - 1), next(self.order),
                                      lambda: query_complete(query_id, TOKENS)))
            self.wake.notify()

    def _run(self) -> None:
        with self.wake:
            while not self.stopped:
                if not self.due:
                    self.wake.wait(0.05)
                    continue
                when = self.due[0][0]
                if when > time.monotonic():
                    self.wake.wait(when - time.monotonic())
                    continue
                _, _, answer = heapq.heappop(self.due)
                answer()

    def stop(self) -> None:
        with self.wake:
            self.stopped = True
            self.wake.notify()
        self.thread.join(timeout=5)


def _run(latencies: Callable[[int], tuple[float, float]], queries: int, qps: float, percentile: float = 0.99
         ) -> tuple[dict, dict, list[tuple[float, float]]]:
    server = SyntheticServer(latencies)
    test = TokenServer(target_qps=qps, ttft_bound_s=0.05, tpot_bound_s=0.02, percentile=percentile,
                       min_duration_s=0.0, min_query_count=queries, output_tokens=TOKENS, sample_count=8, seed=3)
    try:
        metrics, info = run_token_server(server.issue, test)
    finally:
        server.stop()
    return metrics, info, server.programmed


def test_fast_tokens_over_enough_queries_are_valid() -> None:
    # Early stopping vouches for a 99th percentile with no query over its bound after ~460 queries.
    metrics, info, programmed = _run(lambda k: (0.002, 0.001), queries=500, qps=500)
    assert info["verdict"] == "VALID" and metrics["loadgen.valid"] == 1, info
    assert info["perf_constraints_met"] is True and info["early_stopping_met"] is True
    assert metrics["loadgen.query_count"] == len(programmed) >= 500
    assert 0.002 <= metrics["loadgen.ttft_p99"][0] < 0.05 and 0.001 <= metrics["loadgen.tpot_p99"][0] < 0.02
    assert metrics["loadgen.tokens_per_s"][0] > 0
    assert "Result is : VALID" in info["summary"] and info["result_metric"] == "tokens_per_s"


@pytest.mark.parametrize(("slow", "percentile", "met"), [(1, 0.9, True), (2, 0.9, False), (1, 0.95, False)])
def test_the_ttft_constraint_holds_at_loadgens_percentile(slow: int, percentile: float, met: bool) -> None:
    # 20 queries, `slow` of them 80 ms to their first token against a 50 ms bound: at p = 0.9 LoadGen
    # reads the sorted TTFTs at index 18, so one slow query passes and two do not; at 0.95, index 19.
    metrics, info, programmed = _run(lambda k: (0.08 if k < slow else 0.002, 0.001), queries=20, qps=200,
                                     percentile=percentile)
    assert len(programmed) == 20 and info["perf_constraints_met"] is met, info
    assert info["verdict"] == "INVALID"  # 20 queries are too few for early stopping either way
    mine = token_constraints([t for t, _ in programmed], [p for _, p in programmed], 0.05, 0.02, percentile)
    assert mine["met"] is met and mine["ttft_met"] is met and mine["tpot_met"] is True
    if not met:
        assert "TTFT constrain not met" in info["invalid_reason"] and "TPOT" not in info["invalid_reason"]


def test_a_slow_stream_after_a_fast_first_token_fails_the_tpot_constraint() -> None:
    metrics, info, programmed = _run(lambda k: (0.002, 0.03 if k % 4 == 0 else 0.001), queries=20, qps=200)
    assert info["perf_constraints_met"] is False and info["verdict"] == "INVALID"
    assert "TPOT constrain not met" in info["invalid_reason"] and "TTFT" not in info["invalid_reason"]
    assert metrics["loadgen.tpot_max"][0] >= 0.03 > metrics["loadgen.ttft_max"][0]
    mine = token_constraints([t for t, _ in programmed], [p for _, p in programmed], 0.05, 0.02, 0.99)
    assert mine == {**mine, "ttft_met": True, "tpot_met": False, "met": False}


def test_loadgens_percentile_is_an_index_not_an_interpolation() -> None:
    values = [float(v) for v in range(20, 0, -1)]
    assert loadgen_percentile(values, 0.9) == 19.0 and loadgen_percentile(values, 0.95) == 20.0
    assert loadgen_percentile(values, 0.5) == 11.0 and loadgen_percentile([3.0], 0.99) == 3.0
