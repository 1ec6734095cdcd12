"""llm-serve: llm-generate's model behind an HTTP server in the cell, its tokens streamed to a
client on the host as they are generated.

The cell loads the model (llm_common: the same decoder, tokenizer and seeds as llm-generate),
listens like ``serve`` (serving.py: an ephemeral port, loopback on the host's network, the
bridge address in a bridged container, ``/health``, ``/shutdown`` with the cell's token, an idle
watchdog) and answers ``POST /generate`` (``{"prompts": [...], "request": i}``) with a stream of
server-sent events: one ``data:`` event per generated token (the token ids of every prompt and
their text), then one ``server-timing`` event whose data is a Server-Timing value, serve's header
format, with the server's own phases (``queue`` for the model, ``tokenize``, ``prefill``,
``decode``, ``detokenize``), when the first and the last token event were handed to the
connection (``first_token``, ``last_token``) and the handler's ``total``, all counted from the
request's arrival. Server-sent events rather than bare chunks: each event is self-delimited, so
a client tells tokens apart however the network path splits or merges the bytes, this is how
LLM servers stream to their clients (what a client sees is what is measured), and a trailing
event can carry numbers known only at the end, which an HTTP header, sent before the body,
cannot. Request ``i`` generates from prompts ``i × batch_size + row`` and reseeds its sampling
with ``i``, as llm-generate's request ``i`` does, so the tokens match llm-generate's.

One request at a time reaches the model (its steps run on one thread, beside the server's event
loop); later ones wait (``queue``), as a client sees them.
The load comes from the runner's ``llm-stream`` driver (runner/drivers.py): a closed loop at
``concurrency``, or (``client: loadgen``) MLPerf LoadGen's Server scenario with its TTFT and TPOT
constraints, run in a process of its own on the host (:func:`loadgen_client`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from isobench.workloads import WORKLOADS
from isobench.workloads.base import Workload
from isobench.workloads.datasets import CORPUS_FILE, read_text_samples
from isobench.workloads.llm_common import (
    DECODE_S,
    PREFILL_S,
    CausalStep,
    LlmData,
    LlmParams,
    build_language_model,
    build_prompts,
    load_prompt_tokenizer,
)
from isobench.workloads.llm_generate import START_S, percentile, token_picker
from isobench.workloads.serving import (
    control_routes,
    http_server,
    listening_socket,
    new_server_state,
    parse_response_head,
    parse_server_timing,
    serve_until_shutdown,
    server_timing_header,
)

if TYPE_CHECKING:
    from isobench.workloads.channel import CellContext

GENERATE_PATH = "/generate"
#: the server's own phases, in order (each request's item also has connect, server_other, transport)
SERVER_PHASES = ("queue", "tokenize", "prefill", "decode", "detokenize")
ITEM_PHASES = ("connect", *SERVER_PHASES, "server_other", "transport")
#: the trailing event's name; its data is a Server-Timing value
TIMING_EVENT = "server-timing"
#: per request, about what HTTP, the event stream and the client add on this 2-core VM (estimate_s)
HTTP_S = 0.004
EVENT_S = 1e-4


class LlmServeParams(LlmParams):
    concurrency: int = Field(1, ge=1, le=4096, description="closed loop: requests in flight at once")
    warmup_requests: int | None = Field(None, ge=0, le=1_000_000,
                                        description="requests sent first and not recorded (default: the "
                                                    "study's warmup_items)")
    keepalive: bool = Field(False, description="reuse each client connection (false: connect per request, "
                                               "so TTFT holds the network path's handshake)")
    idle_timeout_s: float = Field(60.0, gt=0, le=86_400, description="server exits if no request comes for this long")
    client: Literal["closed", "loadgen"] = Field("closed", description="closed: `concurrency` clients back to "
                                                 "back; loadgen: MLPerf LoadGen's Server scenario")
    target_qps: float = Field(5.0, gt=0, le=1e6, description="loadgen: Poisson arrival rate")
    ttft_bound_ms: float = Field(2000.0, gt=0, le=1e7, description="loadgen: TTFT bound at the percentile "
                                                                   "(MLPerf's Llama 2 70B Server: 2000)")
    tpot_bound_ms: float = Field(200.0, gt=0, le=1e7, description="loadgen: TPOT bound at the percentile "
                                                                  "(MLPerf's Llama 2 70B Server: 200)")
    latency_percentile: float = Field(0.99, gt=0, lt=1, description="loadgen: the percentile both bounds hold at")


def sse_event(data: str, name: str | None = None) -> bytes:
    head = f"event: {name}\n" if name else ""
    return (head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode()


class StreamingGenerator:
    """The model behind the server: one request's tokens, step by step, as server-sent events."""

    def __init__(self, params: LlmParams, step: Callable[[Any, Any], tuple[Any, Any]], tokenizer: Any,
                 device: Any) -> None:
        self.params, self.step, self.tokenizer, self.device = params, step, tokenizer, device
        self.pick, self.reseed = token_picker(params, device)

    def stream(self, texts: list[str], index: int, times: dict[str, float]) -> Iterator[bytes]:
        """One event per generated token; ``times`` gathers the phases (seconds) as they pass."""
        import torch

        clock = time.perf_counter
        started = clock()
        self.reseed(index)
        encoded = [e.ids for e in self.tokenizer.encode_batch(texts)]
        if len({len(ids) for ids in encoded}) != 1:
            raise ValueError("the prompts must tokenize to the same length")
        ids = torch.tensor(encoded, dtype=torch.long).to(self.device)
        tokenized = clock()
        times["tokenize"] += tokenized - started
        cache = None
        for position in range(self.params.output_tokens):
            begun = clock()
            with torch.inference_mode():
                logits, cache = self.step(ids, cache)
                ids = self.pick(logits)[:, None]
            row_ids = ids[:, 0].tolist()  # on the host: the token is streamed now
            stepped = clock()
            times["prefill" if position == 0 else "decode"] += stepped - begun
            # one row at a time: decode_batch hands a few ids to a thread pool, ~0.5 ms a call here
            text = [self.tokenizer.decode([token]) for token in row_ids]
            times["detokenize"] += clock() - stepped
            yield sse_event(json.dumps({"ids": row_ids, "text": text}))


class GenerateEndpoint:
    """``POST /generate`` as a raw ASGI app, so each event is handed to the connection as it is made."""

    def __init__(self, generator: StreamingGenerator, state: dict[str, Any], ctx: CellContext | None) -> None:
        self.generator, self.state, self.ctx = generator, state, ctx
        self.lock = asyncio.Lock()
        # The model steps run on a thread of their own, so the event loop goes on taking requests
        # while one generates: they wait at the lock, timed as their ``queue``, not unread in a socket.
        self.model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        arrived = time.perf_counter()
        self.state["last_request"] = time.monotonic()
        try:
            request = json.loads(body)
            texts, index = request["prompts"], int(request["request"])
            if not isinstance(texts, list) or not 0 < len(texts) <= 4096 or not all(isinstance(t, str) for t in texts):
                raise ValueError("prompts must be a list of 1 to 4096 strings")
            if not 0 <= index < 2**40:
                raise ValueError("request must be a number from 0 to 2**40 - 1 (it seeds the sampling)")
        except (ValueError, KeyError, TypeError) as exc:
            answer = json.dumps({"error": str(exc)[:300]}).encode()
            await send({"type": "http.response.start", "status": 400, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]})
            await send({"type": "http.response.body", "body": answer})
            return
        async with self.lock:  # one request at a time at the model: the rest wait here, as clients see
            await self._stream(send, texts, index, bool(request.get("warmup")), arrived)
        self.state["served"].append(index)
        self.state["last_request"] = time.monotonic()

    async def _stream(self, send: Any, texts: list[str], index: int, warmup: bool, arrived: float) -> None:
        clock = time.perf_counter
        times = dict.fromkeys(SERVER_PHASES, 0.0)
        times["queue"] = clock() - arrived
        if not warmup and self.ctx is not None:
            # The driver's warm-up requests are over: the measured window opens with this request
            # (a serving cell reports no items of its own; the driver's are its items).
            self.ctx.skip_warmup()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        first = last = None
        loop, steps = asyncio.get_running_loop(), self.generator.stream(texts, index, times)
        try:
            while (event := await loop.run_in_executor(self.model_thread, next, steps, None)) is not None:
                await send({"type": "http.response.body", "body": event, "more_body": True})
                last = clock() - arrived
                first = last if first is None else first
        except Exception as exc:  # the stream has begun: the error is its last event
            await send({"type": "http.response.body", "more_body": False,
                        "body": sse_event(f"{type(exc).__name__}: {exc}"[:500], "error")})
            return
        timing = {**times, "first_token": first or 0.0, "last_token": last or 0.0}
        await send({"type": "http.response.body", "more_body": False,
                    "body": sse_event(server_timing_header(timing, clock() - arrived), TIMING_EVENT)})


def make_llm_app(generator: StreamingGenerator, state: dict[str, Any], ctx: CellContext | None = None) -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Route

    return Starlette(routes=[Route(GENERATE_PATH, GenerateEndpoint(generator, state, ctx), methods=["POST"]),
                             *control_routes(state)])


# ---- the client side (the runner's driver, LoadGen's client process, tests): no torch here ----


@dataclass
class StreamedReply:
    """One request as the client saw it; times in seconds from the request's start."""

    e2e: float
    connect: float
    token_times: list[float]
    steps: list[list[int]]
    server: dict[str, float]

    @property
    def ttft(self) -> float:
        return self.token_times[0]

    @property
    def tpot(self) -> float:
        return (self.token_times[-1] - self.token_times[0]) / max(1, len(self.token_times) - 1)

    @property
    def server_tpot(self) -> float:
        return (self.server["last_token"] - self.server["first_token"]) / max(1, len(self.token_times) - 1)

    def phases(self) -> dict[str, float]:
        """connect, the server's phases, server_other and transport: they add up to e2e."""
        server = {name: self.server.get(name, 0.0) for name in SERVER_PHASES}
        total = self.server.get("total", 0.0)
        return {"connect": self.connect, **server, "server_other": total - sum(server.values()),
                "transport": self.e2e - self.connect - total}

    def sequences(self) -> list[list[int]]:
        """Each prompt's generated ids (llm-generate hashes the same lists)."""
        return [list(row) for row in zip(*self.steps, strict=True)]


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def stream_generation(host: str, port: int, body: bytes, conn: Connection | None = None,
                            keepalive: bool = False, on_first_token: Callable[[], None] | None = None
                            ) -> tuple[StreamedReply, Connection | None]:
    """POST one request to ``/generate`` and read its event stream as it comes; each event is
    stamped when the bytes that complete it have been read."""
    clock = time.perf_counter
    t0 = clock()
    if conn is None:
        conn = await asyncio.open_connection(host, port)
    connected = clock()
    reader, writer = conn
    try:
        head = (f"POST {GENERATE_PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n"
                f"Connection: {'keep-alive' if keepalive else 'close'}\r\n\r\n")
        writer.write(head.encode() + body)
        reply = await _read_stream(reader, writer, t0, connected, on_first_token)
    except BaseException:
        writer.close()
        raise
    if not keepalive:
        writer.close()
        return reply, None
    return reply, conn


async def _read_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, t0: float, connected: float,
                       on_first_token: Callable[[], None] | None) -> StreamedReply:
    clock = time.perf_counter
    await writer.drain()
    status, headers = parse_response_head(await reader.readuntil(b"\r\n\r\n"))
    if status != 200:
        length = int(headers.get("content-length", "0"))
        raise ValueError(f"HTTP {status}: {(await reader.readexactly(length))[:200]!r}")
    if headers.get("transfer-encoding", "").lower() != "chunked":
        raise ValueError("the event stream is not chunked")
    reply = StreamedReply(0.0, connected - t0, [], [], {})
    pending = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        if size == 0:
            await reader.readuntil(b"\r\n")  # no trailers: the empty line that ends the body
            break
        pending += (await reader.readexactly(size + 2))[:-2]
        stamp = clock() - t0
        while b"\n\n" in pending:
            event, pending = pending.split(b"\n\n", 1)
            name, data = parse_event(event.decode())
            if name == "error":
                raise ValueError(f"the server failed mid-stream: {data[:300]}")
            if name == TIMING_EVENT:
                reply.server = parse_server_timing(data)
                continue
            reply.steps.append(list(json.loads(data)["ids"]))
            reply.token_times.append(stamp)
            if on_first_token is not None and len(reply.steps) == 1:
                on_first_token()
    reply.e2e = clock() - t0
    if not reply.steps or "total" not in reply.server:
        raise ValueError(f"the stream ended after {len(reply.steps)} token(s) without the server's timing")
    return reply


def parse_event(text: str) -> tuple[str | None, str]:
    """One server-sent event: (its name or None, its data lines joined)."""
    name, data = None, []
    for line in text.split("\n"):
        key, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if key == "event":
            name = value
        elif key == "data":
            data.append(value)
    return name, "\n".join(data)


def host_prompts(params: LlmParams, data_dir: Path, seed: int) -> list[str]:
    """The prompts the cell's llm-generate would build: the client sends them."""
    tokenizer = load_prompt_tokenizer(data_dir, params.prompt_tokens)
    return build_prompts(tokenizer, read_text_samples(data_dir / CORPUS_FILE), params.prompt_tokens, seed)


def request_body(prompts: list[str], index: int, batch: int, warmup: bool = False) -> bytes:
    """Request ``index``: its ``batch`` prompts, as llm-generate's request ``index`` takes them."""
    texts = [prompts[(index * batch + row) % len(prompts)] for row in range(batch)]
    return json.dumps({"prompts": texts, "request": index, **({"warmup": True} if warmup else {})}).encode()


@dataclass
class TokenDigest:
    """SHA-256 of the token ids of requests 0 .. ``requests``-1 in request order (llm-generate's
    ``tokens_digest``), however the requests were interleaved."""

    requests: int
    seen: dict[int, list[list[int]]] = field(default_factory=dict)

    def add(self, index: int, reply: StreamedReply) -> None:
        if index < self.requests:
            self.seen[index] = reply.sequences()

    def hexdigest(self) -> str | None:
        if len(self.seen) < self.requests:
            return None
        digest = hashlib.sha256()
        for index in range(self.requests):
            digest.update(json.dumps(self.seen[index]).encode())
        return digest.hexdigest()


def stream_metrics(replies: list[StreamedReply], wall: float, tokens_per_request: int) -> dict[str, Any]:
    """The cell's token metrics as the client saw them, and their split into the server's part
    and the transport's (the rest: client-seen minus server-side)."""
    ttft = [r.ttft for r in replies]
    gaps = [later - earlier for r in replies for earlier, later in zip(r.token_times, r.token_times[1:], strict=False)]
    e2e = sum(r.e2e for r in replies)
    return {
        # the median, as llm-generate's (a stray interruption of one request moved a mean by 25%); the
        # server/transport split is of the mean, so that its two parts add up to ttft_mean
        "ttft": (statistics.median(ttft), "s"), "ttft_mean": (statistics.fmean(ttft), "s"),
        "ttft_p90": (percentile(ttft, 0.9), "s"),
        "tpot": (statistics.fmean(r.tpot for r in replies), "s"),
        "tpot_p90": (percentile(gaps, 0.9), "s") if gaps else (0.0, "s"),
        "tokens_per_s": (len(replies) * tokens_per_request / wall, "tokens/s"),
        "ttft_server": (statistics.fmean(r.server["first_token"] for r in replies), "s"),
        "ttft_transport": (statistics.fmean(r.ttft - r.server["first_token"] for r in replies), "s"),
        "tpot_server": (statistics.fmean(r.server_tpot for r in replies), "s"),
        "tpot_transport": (statistics.fmean(r.tpot - r.server_tpot for r in replies), "s"),
        "transport_share": sum(r.e2e - r.server["total"] for r in replies) / e2e if e2e > 0 else 0.0,
    }


def loadgen_client(config: dict[str, Any]) -> dict[str, Any]:
    """MLPerf LoadGen's Server scenario against a running server: each query one streamed request
    (sample ``s``: request ``s``), its first token reported to LoadGen as it arrives. Runs in a
    process of its own (LoadGen keeps global state, and a duet's two drivers run at once)."""
    from isobench.workloads import loadgen

    params = LlmServeParams(**config["params"])
    host, port, prompts = config["host"], int(config["port"]), list(config["prompts"])
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, name="loadgen-client", daemon=True)
    runner.start()
    replies: list[StreamedReply] = []
    errors: list[str] = []
    span: list[float] = []

    async def answer(query_id: int, sample: int) -> None:
        span.append(time.perf_counter())
        reported = False

        def first() -> None:
            nonlocal reported
            reported = True
            loadgen.first_token(query_id)

        try:
            reply, _ = await stream_generation(host, port, request_body(prompts, sample, params.batch_size),
                                               on_first_token=first)
            replies.append(reply)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            if not reported:  # LoadGen needs a first token before the end, even for a failed query
                loadgen.first_token(query_id)
            loadgen.query_complete(query_id, params.output_tokens)
            span.append(time.perf_counter())

    def issue(query_id: int, sample: int) -> None:
        asyncio.run_coroutine_threadsafe(answer(query_id, sample), loop)

    test = loadgen.TokenServer(
        target_qps=params.target_qps, ttft_bound_s=params.ttft_bound_ms / 1000, tpot_bound_s=params.tpot_bound_ms / 1000,
        percentile=params.latency_percentile, min_duration_s=params.min_seconds, min_query_count=params.requests,
        output_tokens=params.output_tokens, sample_count=len(prompts) // params.batch_size or 1, seed=int(config["seed"]))
    try:
        loadgen_metrics, info = loadgen.run_token_server(issue, test)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(timeout=10)
    if replies:  # LoadGen's rule on the client's own clock: LoadGen's starts at its issue call, a little earlier
        info["client_constraints"] = loadgen.token_constraints(
            [r.ttft for r in replies], [r.tpot for r in replies], test.ttft_bound_s, test.tpot_bound_s, test.percentile)
    items = [{"e2e": r.e2e, "phases": r.phases()} for r in replies]
    metrics = stream_metrics(replies, max(span) - min(span), params.batch_size * params.output_tokens) \
        if replies else {}
    return {"items": items, "metrics": {**metrics, **loadgen_metrics}, "info": info, "errors": errors}


@WORKLOADS.register("llm-serve")
class LlmServe(LlmData, Workload):
    description = ("llm-generate's model behind an HTTP server in the cell, tokens streamed to a client on the "
                   "host (server-sent events): TTFT, TPOT, tokens/s, server vs transport")
    item = "request"
    phases = ITEM_PHASES
    setup_phases = ("import", "data_load", "model_load", "listen")
    Params = LlmServeParams
    imports = ("torch", "tokenizers", "uvicorn", "starlette.applications")
    needs_network = True
    host_driver = "llm-stream"
    headline_metrics = {"ttft": "time", "tpot": "time", "tokens_per_s": "rate"}

    @classmethod
    def estimate_s(cls, params: LlmServeParams) -> float:  # type: ignore[override]
        per_request = params.batch_size * params.prompt_tokens * PREFILL_S[params.size] + HTTP_S + \
            params.output_tokens * (DECODE_S[params.size] * (1 + 0.1 * (params.batch_size - 1)) + EVENT_S)
        requests = params.requests + (params.warmup_requests or 10)
        if params.client == "loadgen":
            requests = max(requests, int(params.target_qps * params.min_seconds))
        return max(START_S + 1.5 + requests * per_request, params.min_seconds)

    def run(self, params: LlmServeParams, ctx: CellContext) -> None:  # type: ignore[override]
        from isobench.workloads.timing import resolve_device

        assert ctx.data_dir is not None, "llm-serve needs its data set (its tokenizer)"
        device = resolve_device(params.device)
        with ctx.setup("data_load"):
            tokenizer = load_prompt_tokenizer(ctx.data_dir, params.prompt_tokens)
        with ctx.setup("model_load"):
            model = build_language_model(params.model, params.size, tokenizer.get_vocab_size(), ctx.seed).to(device)
        with ctx.setup("listen"):
            sock, listen, port = listening_socket(ctx)
            state = new_server_state()
            generator = StreamingGenerator(params, CausalStep(model), tokenizer, device)
            http_server(make_llm_app(generator, state, ctx), state)
        ctx.start_run()  # a duet member waits here for its partner, before any request
        ctx.emit({"type": "ready", "port": port, "listen": listen, "protocol": "http", "path": GENERATE_PATH,
                  "token": state["token"]})
        serve_until_shutdown(sock, state, params.idle_timeout_s)
        ctx.note(device=str(device), parameters=sum(p.numel() for p in model.parameters()),
                 info={"server": {"requests_served": len(state["served"]), "port": port, "listen": listen,
                                  "stream": "server-sent events", "concurrency_model":
                                      "one request at a time at the model"}},
                 metrics={"server.requests": len(state["served"])})
