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
"""

from __future__ import annotations

import json
import queue
import shutil
import tempfile
import threading
import time
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
    info = {"scenario": scenario, "verdict": verdict,
            "result_metric": {"SingleStream": "latency_p90", "Offline": "samples_per_s",
                              "Server": "latency_p99"}[scenario],
            "summary": summary_text[:6000]}
    for key in ("result_min_duration_met", "result_min_queries_met", "result_perf_constraints_met",
                "early_stopping_met", "result_invalid_reason", "early_stopping_result", "loadgen_version",
                "effective_target_qps", "effective_target_latency_ns", "effective_min_duration_ms",
                "effective_min_query_count", "effective_target_latency_percentile"):
        if key in detail:
            info[key.removeprefix("result_")] = detail[key]
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
