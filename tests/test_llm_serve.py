"""llm-serve: tokens streamed from a real server process to the runner's driver, the same tokens on
bare metal and in Docker (and the same as llm-generate's), TTFT and TPOT from a model that sleeps
known times split into the server's part and the transport's, and LoadGen's token mode end to end."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from isobench.plan import expand
from isobench.runner.drivers import LlmStreamLoad
from isobench.runner.execute import platform_for, run_cell
from isobench.runner.setup import prepare_data
from isobench.studyfile import load_study_text
from isobench.workloads import WORKLOADS
from isobench.workloads.channel import CellContext
from isobench.workloads.llm_generate import serve_requests
from isobench.workloads.llm_serve import (
    ITEM_PHASES,
    LlmServeParams,
    StreamedReply,
    StreamingGenerator,
    TokenDigest,
    host_prompts,
    make_llm_app,
    request_body,
    stream_generation,
    stream_metrics,
)
from isobench.workloads.serving import http_server, new_server_state
from tests.conftest import json_lines, need_docker
from tests.test_llm_generate import TINY, SleepingModel


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("llm-serve") / "data"
    WORKLOADS.get("llm-serve").prepare_data(LlmServeParams(**TINY), target)
    return target


@contextmanager
def serving(data_dir: Path, params: LlmServeParams, model: Any) -> Iterator[int]:
    """llm-serve's app in a thread of this process, on loopback, generating with ``model``."""
    import torch

    from isobench.workloads.llm_common import load_prompt_tokenizer

    generator = StreamingGenerator(params, model, load_prompt_tokenizer(data_dir, params.prompt_tokens),
                                   torch.device("cpu"))
    state = new_server_state()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = http_server(make_llm_app(generator, state), state)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


async def _requests(port: int, prompts: list[str], params: LlmServeParams, indices: list[int],
                    concurrency: int = 1) -> list[tuple[int, StreamedReply]]:
    pending = list(indices)
    done: list[tuple[int, StreamedReply]] = []

    async def client() -> None:
        while pending:
            index = pending.pop(0)
            reply, _ = await stream_generation("127.0.0.1", port, request_body(prompts, index, params.batch_size))
            done.append((index, reply))

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return done


def _cell(platform: str, params: dict[str, Any]) -> Any:
    study = {"name": "llm-serve", "workloads": [{"name": "llm-serve", "params": params}],
             "platforms": [{"name": platform}], "knobs": {"threads": 1}, "repetitions": 1, "warmup": 0,
             "probes": {}, "seed": 5, "schedule": "sequential", "warmup_items": 1, "min_seconds": None,
             "aa": False, "timeout_s": 300}
    cell = expand(load_study_text(json.dumps(study), "llm-serve.yaml"))[0]
    return dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])


def test_the_driver_reads_the_same_streamed_tokens_from_bare_metal_and_docker() -> None:
    # Sampled, the harder case: the seeded draws must match as well as the logits.
    need_docker()
    params = {**TINY, "sampling": True}
    outcomes = {}
    for platform in ("baremetal", "docker"):
        cell = _cell(platform, params)
        platform_obj = platform_for(cell)
        platform_obj.prepare()
        outcomes[platform] = outcome = run_cell(cell, platform_obj)
        assert outcome.status == "ok", (outcome.error, outcome.stderr_tail[-2000:])
    digests = set()
    for platform, outcome in outcomes.items():
        driver = outcome.platform_info["driver"]
        assert driver["name"] == "llm-stream" and driver["stream"] == "server-sent events"
        assert driver["network"] == ("host" if platform == "baremetal" else "bridge:isobench-net")
        assert driver["warmup_requests"] == 1 and driver["digest_requests"] == 3
        digests.add(driver["tokens_digest"])
        # the window opened at the first measured request, after the driver's warm-up
        assert outcome.measured is not None
        assert len(outcome.items) == 3
        for item in outcome.items:
            assert tuple(item["phases"]) == ITEM_PHASES
            assert sum(item["phases"].values()) == pytest.approx(item["e2e"], rel=1e-9)
            assert item["phases"]["prefill"] > 0 and item["phases"]["decode"] > 0 and item["phases"]["transport"] > 0
        metrics = {name: value[0] if isinstance(value, list | tuple) else value
                   for name, value in outcome.done["metrics"].items()}
        assert metrics["server.requests"] == 4 and metrics["client.requests"] == 3  # one warm-up request
        assert metrics["ttft_mean"] == pytest.approx(metrics["ttft_server"] + metrics["ttft_transport"], rel=1e-9)
        assert metrics["tpot"] == pytest.approx(metrics["tpot_server"] + metrics["tpot_transport"], rel=1e-9)
        assert 0 < metrics["ttft_server"] < metrics["ttft_mean"] and 0 < metrics["transport_share"] < 1
        assert metrics["tpot"] > 0 and metrics["tokens_per_s"] > 0
    assert len(digests) == 1 and None not in digests


def test_ttft_and_tpot_come_from_the_servers_sleeps_and_the_rest_is_transport(data_dir: Path) -> None:
    prefill_s, decode_s = 0.04, 0.01
    params = LlmServeParams(**{**TINY, "output_tokens": 5})
    prompts = host_prompts(params, data_dir, seed=1)
    with serving(data_dir, params, SleepingModel(400, prefill_s, decode_s)) as port:
        started = time.perf_counter()
        replies = [reply for _, reply in asyncio.run(_requests(port, prompts, params, list(range(4))))]
        wall = time.perf_counter() - started
        both = [reply for _, reply in asyncio.run(_requests(port, prompts, params, [4, 5], concurrency=2))]
    for reply in replies:
        phases = reply.phases()
        assert sum(phases.values()) == pytest.approx(reply.e2e, rel=1e-9)
        assert prefill_s <= phases["prefill"] < prefill_s + 0.02 and 4 * decode_s <= phases["decode"] < 4 * decode_s + 0.03
        assert phases["queue"] < 0.005 and phases["transport"] > 0
        assert len(reply.steps) == 5 and all(len(step) == 2 for step in reply.steps)  # two prompts a request
        # the client sees the first token after the server sent it, and each later one a decode step apart
        assert prefill_s <= reply.server["first_token"] < reply.ttft < prefill_s + 0.03
        assert decode_s <= reply.server_tpot < decode_s + 0.008
        assert 0.9 * decode_s <= reply.tpot < decode_s + 0.01
    metrics = {name: value[0] if isinstance(value, tuple) else value
               for name, value in stream_metrics(replies, wall, 2 * 5).items()}
    assert metrics["ttft"] == pytest.approx(statistics.median(r.ttft for r in replies))
    assert metrics["ttft_mean"] == pytest.approx(statistics.fmean(r.ttft for r in replies))
    assert prefill_s <= metrics["ttft_server"] < metrics["ttft_mean"] and metrics["ttft_transport"] > 0
    assert 0.9 * decode_s <= metrics["tpot_p90"] < decode_s + 0.015
    assert metrics["tokens_per_s"] == pytest.approx(4 * 2 * 5 / wall)
    assert 0 < metrics["transport_share"] < 0.2
    # two at once: the second waits in the server for the whole first generation, and its TTFT holds it
    waited = max(both, key=lambda r: r.server["queue"])
    generation = prefill_s + 4 * decode_s
    assert waited.server["queue"] >= 0.9 * generation and waited.ttft >= generation + prefill_s
    assert min(r.server["queue"] for r in both) < 0.005


def test_the_served_tokens_are_llm_generates(data_dir: Path) -> None:
    import torch

    from isobench.workloads.datasets import CORPUS_FILE, read_text_samples
    from isobench.workloads.llm_common import build_prompts, load_prompt_tokenizer

    params = LlmServeParams(**{**TINY, "sampling": True, "requests": 3})
    model = SleepingModel(400, 0.0, 0.0)
    prompts = host_prompts(params, data_dir, seed=1)
    digest = TokenDigest(3)
    with serving(data_dir, params, model) as port:  # out of order, two at a time: the digest is by request
        for index, reply in asyncio.run(_requests(port, prompts, params, [2, 0, 1], concurrency=2)):
            digest.add(index, reply)
    tokenizer = load_prompt_tokenizer(data_dir, params.prompt_tokens)
    assert build_prompts(tokenizer, read_text_samples(data_dir / CORPUS_FILE), params.prompt_tokens, 1) == prompts
    stream = io.StringIO()
    ctx = CellContext(stream, {"seed": 1})
    try:
        serve_requests(ctx, params, model, tokenizer, prompts, torch.device("cpu"))
    finally:
        gc.unfreeze()  # CellContext.start_run freezes the collector's objects, as a cell should
    ctx.finish()
    done = json_lines(stream.getvalue())[-1]
    assert done["digest_requests"] == 3 and digest.hexdigest() == done["tokens_digest"]


def test_a_bad_request_is_refused_and_the_server_serves_on(data_dir: Path) -> None:
    params = LlmServeParams(**TINY)
    prompts = host_prompts(params, data_dir, seed=1)
    with serving(data_dir, params, SleepingModel(400, 0.0, 0.0)) as port:
        for body in (b"not json", json.dumps({"prompts": [], "request": 0}).encode(),
                     json.dumps({"prompts": [prompts[0], prompts[1][:20]], "request": 0}).encode()):
            with pytest.raises(ValueError, match="HTTP 400|failed mid-stream: ValueError: the prompts must"):
                asyncio.run(stream_generation("127.0.0.1", port, body))
        reply, _ = asyncio.run(stream_generation("127.0.0.1", port, request_body(prompts, 0, 2)))
        assert len(reply.steps) == params.output_tokens


def test_the_loadgen_client_process_reports_loadgens_token_verdict(data_dir: Path) -> None:
    # The driver's own path: LoadGen in a process of its own, its queries streamed from a server.
    params = {**TINY, "client": "loadgen", "requests": 24, "target_qps": 40, "output_tokens": 4,
              "ttft_bound_ms": 500, "tpot_bound_ms": 100}
    parsed = LlmServeParams(**params)
    prompts = host_prompts(parsed, data_dir, seed=1)
    cell = SimpleNamespace(params=parsed.model_dump(), seed=1, timeout_s=120, seq=0)
    driver = LlmStreamLoad(cell, None, None, [])  # type: ignore[arg-type]  # only its LoadGen path runs
    with serving(data_dir, parsed, SleepingModel(400, 0.004, 0.002)) as port:
        driver._loadgen("127.0.0.1", port, prompts)
    loadgen = driver.info["loadgen"]
    assert len(driver.items) == 24 == driver.metrics["client.requests"] and driver.metrics["client.errors"] == 0
    # too few queries for early stopping: INVALID, though both token constraints hold, and it says so
    assert loadgen["verdict"] == "INVALID" and driver.metrics["loadgen.valid"] == 0
    assert loadgen["perf_constraints_met"] is True and loadgen["early_stopping_met"] is False
    assert "more queries" in loadgen["early_stopping_tpot_result"]
    assert loadgen["client_constraints"]["met"] is True and loadgen["effective_min_query_count"] == 24
    ttft, tpot = driver.metrics["loadgen.ttft_mean"][0], driver.metrics["loadgen.tpot_p99"][0]
    assert 0.004 <= ttft < 0.1 and 0.002 <= tpot < 0.05 and ttft == pytest.approx(driver.metrics["ttft"][0], abs=0.01)
    assert all(tuple(item["phases"]) == ITEM_PHASES for item in driver.items)
