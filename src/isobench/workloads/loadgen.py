"""loadgen: image classification driven by the real MLPerf LoadGen (``mlperf_loadgen``).

Scenarios: ``SingleStream`` (one query at a time; the metric is the 90th-percentile
latency), ``Offline`` (every sample at once; samples per second) and ``Server`` (queries
at Poisson-distributed times at ``target_qps``; the 99th-percentile latency must stay under
``latency_bound_ms``). ``min_duration_s`` and ``min_query_count`` are LoadGen's own knobs.

The system under test answers each sample with the same E2E request as resnet-infer (read
the JPEG file, decode, resize, normalize; forward pass; softmax, top-k, labels) in one
worker thread, and reports one item per sample: ``queue`` (from LoadGen's issue call to
the start of work: the Server and Offline backlog), ``preprocess``, ``inference``,
``postprocess`` and ``complete`` (handing the response back to LoadGen). LoadGen writes
its logs to a temporary directory inside the cell; its verdict (VALID/INVALID, with the
reasons) and key numbers come back in the ``done`` record and are stored as
``workload.loadgen.*`` metrics and in the cell's platform_info.

For generated tokens (``llm-serve``'s ``client: loadgen``), :func:`run_token_server` runs the
Server scenario with LoadGen's token latencies (``use_token_latencies``): the system under test
reports each query's first token (``FirstTokenComplete``) and its end with its token count, and
LoadGen judges the TTFT and TPOT percentiles against ``ttft_latency`` and ``tpot_latency``.
:func:`token_constraints` is the same percentile rule in Python, for a check on the per-query
timings a client recorded.
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.channel import CellContext
from isobench.workloads.datasets import list_jpeg_folder
from isobench.workloads.imaging import (
    TORCH_IMPORT_S,
    Classifier,
    ImageParams,
    JpegData,
    build_model,
    per_request_estimate_s,
)

Scenario = Literal["SingleStream", "Offline", "Server"]
NS = 1e-9


class LoadgenParams(ImageParams):
    scenario: Scenario = Field("SingleStream", description="MLPerf scenario: SingleStream, Offline or Server")
    min_duration_s: float = Field(2.0, gt=0, le=86_400, description="LoadGen min_duration (seconds)")
    min_query_count: int = Field(32, ge=1, le=10_000_000, description="LoadGen min_query_count")
    max_duration_s: float = Field(0.0, ge=0, le=86_400, description="LoadGen max_duration (0: none)")
    target_qps: float = Field(20.0, gt=0, le=1e6,
                              description="Server: Poisson arrival rate; Offline: expected samples/s")
    latency_bound_ms: float = Field(100.0, gt=0, le=1e6, description="Server: the p99 latency bound")
    expected_latency_ms: float = Field(10.0, gt=0, le=1e6, description="SingleStream: expected latency")
    performance_sample_count: int = Field(64, ge=1, le=1_000_000,
                                          description="samples LoadGen may use (at most the files on disk)")


def _parse_detail(path: Path) -> dict[str, Any]:
    """LoadGen's detail log: ``:::MLLOG {json}`` lines -> key -> value."""
    values: dict[str, Any] = {}
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(":::MLLOG "):
            try:
                record = json.loads(line[len(":::MLLOG "):])
            except ValueError:
                continue
            values[record.get("key")] = record.get("value")
    return values


def _summary_verdict(text: str) -> str | None:
    for line in text.splitlines():
        if line.strip().startswith("Result is"):
            return line.split(":", 1)[1].strip()
    return None


def parse_logs(log_dir: Path, scenario: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, info) from LoadGen's summary and detail logs; the verdict must agree in both."""
    summary_text = (log_dir / "mlperf_log_summary.txt").read_text(errors="replace")
    detail = _parse_detail(log_dir / "mlperf_log_detail.txt")
    verdict = _summary_verdict(summary_text)
    if verdict is None or detail.get("result_validity") not in (None, verdict):
        raise RuntimeError(f"LoadGen's summary ({verdict}) and detail ({detail.get('result_validity')}) "
                           "logs disagree on the verdict")
    metrics: dict[str, Any] = {"loadgen.valid": int(verdict == "VALID")}
    for name, key in (("mean", "result_mean_latency_ns"), ("p50", "result_50.00_percentile_latency_ns"),
                      ("p90", "result_90.00_percentile_latency_ns"), ("p99", "result_99.00_percentile_latency_ns"),
                      ("max", "result_max_latency_ns")):
        if isinstance(detail.get(key), int | float):
            metrics[f"loadgen.latency_{name}"] = (detail[key] * NS, "s")
    for name, key in (("samples_per_s", "result_samples_per_second"),
                      ("completed_samples_per_s", "result_completed_samples_per_sec"),
                      ("scheduled_samples_per_s", "result_scheduled_samples_per_sec"),
                      ("qps", "result_qps_with_loadgen_overhead")):
        if isinstance(detail.get(key), int | float):
            metrics[f"loadgen.{name}"] = (detail[key], "1/s")
    for name, key in (("query_count", "result_query_count"), ("overlatency_queries", "result_overlatency_query_count")):
        if isinstance(detail.get(key), int | float):
            metrics[f"loadgen.{name}"] = detail[key]
    tokens = "result_first_token_mean_latency_ns" in detail
    if tokens:  # LoadGen's token latencies (use_token_latencies): TTFT and TPOT per query
        for name, key in (("ttft_mean", "result_first_token_mean_latency_ns"),
                          ("ttft_p90", "result_first_token_90.00_percentile_latency_ns"),
                          ("ttft_p99", "result_first_token_99.00_percentile_latency_ns"),
                          ("ttft_max", "result_first_token_max_latency_ns"),
                          ("tpot_mean", "result_time_to_output_token_mean"),
                          ("tpot_p90", "result_time_per_output_token_90.00_percentile_ns"),
                          ("tpot_p99", "result_time_per_output_token_99.00_percentile_ns"),
                          ("tpot_max", "result_time_to_output_token_max")):
            if isinstance(detail.get(key), int | float):
                metrics[f"loadgen.{name}"] = (detail[key] * NS, "s")
        if isinstance(detail.get("result_completed_tokens_per_second"), int | float):
            metrics["loadgen.tokens_per_s"] = (detail["result_completed_tokens_per_second"], "tokens/s")
    info = {"scenario": scenario, "verdict": verdict,
            "result_metric": "tokens_per_s" if tokens else {"SingleStream": "latency_p90", "Offline": "samples_per_s",
                                                             "Server": "latency_p99"}[scenario],
            "summary": summary_text[:6000]}
    for key in ("result_min_duration_met", "result_min_queries_met", "result_perf_constraints_met",
                "early_stopping_met", "result_invalid_reason", "early_stopping_result", "loadgen_version",
                "effective_target_qps", "effective_target_latency_ns", "effective_min_duration_ms",
                "effective_min_query_count", "effective_target_latency_percentile", "early_stopping_ttft_result",
                "early_stopping_tpot_result"):
        if key in detail:
            info[key.removeprefix("result_")] = detail[key]
    return metrics, info


def loadgen_percentile(values: list[float], q: float) -> float:
    """LoadGen's percentile (results.cc): the ascending values at index floor(n × q), no interpolation."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def token_constraints(ttfts: list[float], tpots: list[float], ttft_bound_s: float, tpot_bound_s: float,
                      q: float) -> dict[str, Any]:
    """LoadGen's Server constraints on token latencies, from per-query times: the TTFT and the TPOT
    (a query's time after its first token over its tokens after the first) each at LoadGen's
    percentile ``q`` must not exceed its bound. Early stopping and the minimum duration and query
    count, which LoadGen's VALID also needs, are not judged here."""
    ttft, tpot = loadgen_percentile(ttfts, q), loadgen_percentile(tpots, q)
    return {"percentile": q, "ttft": ttft, "ttft_met": ttft <= ttft_bound_s, "tpot": tpot,
            "tpot_met": tpot <= tpot_bound_s, "met": ttft <= ttft_bound_s and tpot <= tpot_bound_s}


@dataclass(frozen=True)
class TokenServer:
    """The Server scenario's settings for generated tokens (LoadGen's names in the comments)."""

    target_qps: float  # server_target_qps: Poisson arrivals
    ttft_bound_s: float  # ttft_latency
    tpot_bound_s: float  # tpot_latency
    percentile: float  # server_target_latency_percentile, for TTFT and TPOT alike
    min_duration_s: float  # min_duration_ms
    min_query_count: int  # min_query_count
    output_tokens: int  # the e2e bound (server_target_latency_ns) is TTFT + TPOT for each later token
    sample_count: int  # samples in the query sample library
    seed: int  # qsl, sample index and schedule seeds


def first_token(query_id: int) -> None:
    """Tell LoadGen a query's first token has arrived (its TTFT ends now)."""
    import mlperf_loadgen as lg

    lg.FirstTokenComplete([lg.QuerySampleResponse(query_id, 0, 0, 1)])


def query_complete(query_id: int, tokens: int) -> None:
    """Tell LoadGen a query has ended with ``tokens`` tokens (its TPOT is the time since its first
    token over ``tokens`` - 1; at least 2, so LoadGen never divides by zero)."""
    import mlperf_loadgen as lg

    lg.QuerySamplesComplete([lg.QuerySampleResponse(query_id, 0, 0, max(2, tokens))])


def run_token_server(issue: Callable[[int, int], None], test: TokenServer) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run LoadGen's Server scenario with token latencies; ``issue(query_id, sample_index)`` starts
    one query and must answer it, from any thread, with :func:`first_token` and then
    :func:`query_complete`. Returns (metrics, info) as :func:`parse_logs` reads LoadGen's logs.
    LoadGen keeps global state: one run per process at a time."""
    import mlperf_loadgen as lg

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = test.target_qps
    settings.use_token_latencies = True
    settings.ttft_latency = int(test.ttft_bound_s * 1e9)
    settings.tpot_latency = int(test.tpot_bound_s * 1e9)
    settings.server_target_latency_percentile = test.percentile
    settings.server_target_latency_ns = int((test.ttft_bound_s + test.tpot_bound_s * (test.output_tokens - 1)) * 1e9)
    settings.min_duration_ms = int(test.min_duration_s * 1000)
    settings.min_query_count = test.min_query_count
    settings.sample_index_rng_seed = settings.schedule_rng_seed = settings.qsl_rng_seed = test.seed
    log_dir = Path(tempfile.mkdtemp(prefix="isobench-loadgen-"))
    log_settings = lg.LogSettings()
    log_settings.log_output.outdir = str(log_dir)
    log_settings.log_output.copy_summary_to_stdout = False
    log_settings.enable_trace = False
    try:
        sut = lg.ConstructSUT(lambda samples: [issue(s.id, s.index) for s in samples], lambda: None)
        qsl = lg.ConstructQSL(test.sample_count, test.sample_count, lambda indices: None, lambda indices: None)
        try:
            lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        finally:
            lg.DestroyQSL(qsl)
            lg.DestroySUT(sut)
        metrics, info = parse_logs(log_dir, "Server")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
    info.update(ttft_bound_s=test.ttft_bound_s, tpot_bound_s=test.tpot_bound_s, percentile=test.percentile,
                target_qps=test.target_qps)
    return metrics, info


class _SystemUnderTest:
    """LoadGen's SUT: queries go to one worker thread that runs the E2E request per sample."""

    def __init__(self, classifier: Classifier, files: list[Path], ctx: CellContext) -> None:
        self.classifier = classifier
        self.files = files
        self.ctx = ctx
        self.todo: queue.Queue[tuple[float, Any] | None] = queue.Queue()
        self.worker = threading.Thread(target=self._work, name="sut-worker", daemon=True)
        self.failure: BaseException | None = None

    def issue(self, samples: list[Any]) -> None:
        issued = time.perf_counter()
        for sample in samples:
            self.todo.put((issued, sample))

    def flush(self) -> None:
        pass

    def _work(self) -> None:
        import mlperf_loadgen as lg

        clock = time.perf_counter
        while (job := self.todo.get()) is not None:
            issued, sample = job
            try:
                started = clock()
                _, phases = self.classifier.classify(self.files[sample.index % len(self.files)])
                done = clock()
                lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])
                completed = clock()
                self.ctx.item({"queue": started - issued, **phases, "complete": completed - done},
                              completed - issued)
            except BaseException as exc:  # answer anyway, so LoadGen does not wait forever
                self.failure = self.failure or exc
                lg.QuerySamplesComplete([lg.QuerySampleResponse(sample.id, 0, 0)])


@WORKLOADS.register("loadgen")
class Loadgen(JpegData, Workload):
    description = "ResNet image classification driven by MLPerf LoadGen (SingleStream, Offline, Server)"
    item = "sample"
    phases = ("queue", "preprocess", "inference", "postprocess", "complete")
    setup_phases = ("import", "model_load", "data_load", "loadgen")
    Params = LoadgenParams
    imports = ("torch", "PIL.Image", "mlperf_loadgen")

    @classmethod
    def estimate_s(cls, params: LoadgenParams) -> float:  # type: ignore[override]
        per = per_request_estimate_s(params)
        work = max(params.min_query_count * per, params.min_duration_s)
        return TORCH_IMPORT_S + 3.0 + work

    def run(self, params: LoadgenParams, ctx: CellContext) -> None:  # type: ignore[override]
        import mlperf_loadgen as lg

        assert ctx.data_dir is not None, "loadgen needs its data set"
        with ctx.setup("model_load"):
            model = build_model(params.model, params.n_classes, ctx.seed)
        with ctx.setup("data_load"):
            files, classes = list_jpeg_folder(ctx.data_dir)
            paths = [path for path, _ in files]
            classifier = Classifier(model, classes, params.image_size, params.top_k)
        sut_impl = _SystemUnderTest(classifier, paths, ctx)

        def load_samples(indices: list[int]) -> None:  # LoadGen's untimed load: warm the page cache
            for index in indices:
                paths[index % len(paths)].read_bytes()

        settings = lg.TestSettings()
        settings.scenario = getattr(lg.TestScenario, params.scenario)
        settings.mode = lg.TestMode.PerformanceOnly
        settings.min_duration_ms = int(params.min_duration_s * 1000)
        settings.max_duration_ms = int(params.max_duration_s * 1000)
        settings.min_query_count = params.min_query_count
        settings.single_stream_expected_latency_ns = int(params.expected_latency_ms * 1e6)
        settings.offline_expected_qps = params.target_qps
        settings.server_target_qps = params.target_qps
        settings.server_target_latency_ns = int(params.latency_bound_ms * 1e6)
        settings.sample_index_rng_seed = settings.schedule_rng_seed = settings.qsl_rng_seed = ctx.seed
        log_dir = Path(tempfile.mkdtemp(prefix="isobench-loadgen-"))
        log_settings = lg.LogSettings()
        log_settings.log_output.outdir = str(log_dir)
        log_settings.log_output.copy_summary_to_stdout = False
        log_settings.enable_trace = False
        count = min(params.performance_sample_count, len(paths))
        try:
            with ctx.setup("loadgen"):
                sut = lg.ConstructSUT(sut_impl.issue, sut_impl.flush)
                qsl = lg.ConstructQSL(len(paths), count, load_samples, lambda indices: None)
            sut_impl.worker.start()
            ctx.start_run()
            try:
                lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
            finally:
                sut_impl.todo.put(None)
                sut_impl.worker.join()
                lg.DestroyQSL(qsl)
                lg.DestroySUT(sut)
            if sut_impl.failure is not None:
                raise RuntimeError(f"a query failed: {sut_impl.failure!r}") from sut_impl.failure
            metrics, info = parse_logs(log_dir, params.scenario)
        finally:
            shutil.rmtree(log_dir, ignore_errors=True)
        ctx.note(metrics=metrics, info={"loadgen": info})
