"""serve: the image classifier behind a real ASGI HTTP server (starlette + uvicorn) in the cell.

The cell listens on an ephemeral port, reports ``ready`` with it, and answers
``POST /classify`` (a JPEG body) with the top-k labels; each response carries the server's
own phase times in a standard ``Server-Timing`` header (``preprocess``, ``inference``,
``postprocess``, ``total``; milliseconds). The load comes from outside the platform: the
runner's ``http-load`` driver (:mod:`isobench.runner.drivers`) sends the requests at a fixed
concurrency and records each one, so the platform's network path (a Docker bridge, say)
is part of what is measured. ``POST /shutdown`` ends the server and the cell; it needs the
per-cell token the server made and reported in its ``ready`` record (the record channel is a
pipe only the runner reads: the token never appears on a command line). A cell on the host's
network listens on loopback only (the runner says so in the payload's ``listen``). A server that
hears nothing for ``idle_timeout_s`` exits with an error, so a runner that died cannot
leave it serving.

With ``load_from`` the model is the one a ``train-save`` cell stored on the host (the
deployment half of train-then-deploy); its architecture and input size come from the
artifact's manifest.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import socket
import statistics
import time
from typing import Any

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
from isobench.workloads.pipeline import ARTIFACT_NAME, LoadFromParams, load_classifier

SERVER_PHASES = ("preprocess", "inference", "postprocess")
#: the header ``POST /shutdown`` must carry, with the token of the cell's ``ready`` record
TOKEN_HEADER = "X-Isobench-Token"


class ServeParams(ImageParams):
    concurrency: int = Field(4, ge=1, le=4096, description="requests in flight at once (client side)")
    requests: int = Field(100, ge=1, le=10_000_000, description="timed requests (after the warm-up)")
    duration_s: float = Field(0.0, ge=0, le=86_400,
                              description="if > 0: send requests for this long instead of a count")
    warmup_requests: int = Field(8, ge=0, le=1_000_000, description="requests sent first and not recorded")
    keepalive: bool = Field(False, description="reuse each client connection (false: connect per request, "
                                               "so `connect` measures the network path's handshake)")
    load_from: str | None = Field(None, pattern=ARTIFACT_NAME,
                                  description="serve the model a train-save workload stored (default: random weights)")
    from_platform: str | None = Field(None, description="with load_from: the platform entry that trained it")
    idle_timeout_s: float = Field(60.0, gt=0, le=86_400, description="server exits if no request comes for this long")


def server_timing_header(phases: dict[str, float], total: float) -> str:
    return ", ".join(f"{name};dur={seconds * 1000:.4f}" for name, seconds in [*phases.items(), ("total", total)])


def parse_server_timing(value: str) -> dict[str, float]:
    """``name;dur=ms, ...`` -> name -> seconds."""
    result: dict[str, float] = {}
    for part in value.split(","):
        name, _, rest = part.strip().partition(";")
        for attribute in rest.split(";"):
            key, _, number = attribute.strip().partition("=")
            if key == "dur" and name:
                result[name] = float(number) / 1000
    return result


def parse_response_head(raw: bytes) -> tuple[int, dict[str, str]]:
    """An HTTP/1.1 response's status line and headers (names lower-cased), for the host's clients."""
    lines = raw.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    return status, headers


def new_server_state() -> dict[str, Any]:
    """What the server's handlers share: the per-cell shutdown token, when a request last came, and
    whether ``/shutdown`` ended it (else the idle watchdog did)."""
    return {"served": [], "last_request": time.monotonic(), "shutdown_requested": False,
            "token": secrets.token_urlsafe(32)}


def control_routes(state: dict[str, Any]) -> list[Any]:
    """``GET /health`` and ``POST /shutdown`` (which needs the cell's token), for every serving workload."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def health(request: Request) -> Response:
        state["last_request"] = time.monotonic()
        return JSONResponse({"ok": True})

    async def shutdown(request: Request) -> Response:
        offered = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(offered.encode(), str(state["token"]).encode()):
            return JSONResponse({"error": f"shutdown needs this cell's {TOKEN_HEADER}"}, status_code=403)
        state["shutdown_requested"] = True
        state["server"].should_exit = True
        return JSONResponse({"shutting_down": True})

    return [Route("/health", health), Route("/shutdown", shutdown, methods=["POST"])]


def make_app(classifier: Classifier, state: dict[str, Any]) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    async def classify(request: Request) -> Response:
        body = await request.body()
        t0 = time.perf_counter()
        # Inline, not in a thread pool: one request at a time reaches the model (a single
        # model worker); requests beyond that wait in the server, which the client sees.
        labels, phases = classifier.classify(body)
        total = time.perf_counter() - t0
        state["last_request"] = time.monotonic()
        state["served"].append((total, phases))
        return JSONResponse({"labels": labels}, headers={"Server-Timing": server_timing_header(phases, total)})

    return Starlette(routes=[Route("/classify", classify, methods=["POST"]), *control_routes(state)])


def listening_socket(ctx: CellContext) -> tuple[socket.socket, str, int]:
    """(socket, address, port): an ephemeral port on the address the runner chose. On the host's
    network: loopback only (the driver runs on this host). A bridged container has a network
    namespace of its own and is reached on its bridge address: the runner passes 0.0.0.0 for it.
    An ephemeral port: no clash with anything else."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listen = str(ctx.cell.get("listen") or "127.0.0.1")
    sock.bind((listen, 0))
    sock.listen(1024)
    return sock, listen, sock.getsockname()[1]


def http_server(app: Any, state: dict[str, Any]) -> Any:
    """The uvicorn server for ``app`` (h11, no access log, no lifespan), kept in ``state``."""
    import uvicorn

    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", loop="asyncio",
                            http="h11", timeout_keep_alive=30)
    state["server"] = uvicorn.Server(config)
    return state["server"]


def serve_until_shutdown(sock: socket.socket, state: dict[str, Any], idle_timeout_s: float) -> None:
    """Serve until ``POST /shutdown``; a server that hears nothing for ``idle_timeout_s`` gives up
    with an error (the load driver never came, or stopped)."""
    server = state["server"]

    async def serve() -> None:
        async def watchdog() -> None:
            while not server.should_exit:
                await asyncio.sleep(0.5)
                if time.monotonic() - state["last_request"] > idle_timeout_s:
                    server.should_exit = True

        guard = asyncio.create_task(watchdog())
        try:
            await server.serve(sockets=[sock])
        finally:
            guard.cancel()

    asyncio.run(serve())
    if not state["shutdown_requested"]:
        raise RuntimeError(f"no request for {idle_timeout_s:g} s: the load driver never came "
                           "(or stopped); the server gave up")


@WORKLOADS.register("serve")
class Serve(JpegData, Workload):
    description = "the classifier behind an HTTP server in the cell; load from the host at fixed concurrency"
    item = "request"
    phases = ("connect", "preprocess", "inference", "postprocess", "server_other", "transport")
    setup_phases = ("import", "data_load", "model_load", "listen")
    Params = ServeParams
    imports = ("torch", "PIL.Image", "uvicorn", "starlette.applications")
    needs_network = True
    host_driver = "http-load"
    uses_artifacts = True

    @classmethod
    def artifact_flow(cls, params: ServeParams) -> tuple[str | None, str | None]:  # type: ignore[override]
        return None, params.load_from

    @classmethod
    def estimate_s(cls, params: ServeParams) -> float:  # type: ignore[override]
        work = params.duration_s or (params.requests + params.warmup_requests) * (per_request_estimate_s(params) + 0.003)
        return TORCH_IMPORT_S + 3.0 + work

    def run(self, params: ServeParams, ctx: CellContext) -> None:  # type: ignore[override]
        assert ctx.data_dir is not None, "serve needs its data set (for the class names)"
        with ctx.setup("data_load"):
            _, classes = list_jpeg_folder(ctx.data_dir)
        manifest = None
        with ctx.setup("model_load"):
            if params.load_from:
                source = LoadFromParams(load_from=params.load_from, from_platform=params.from_platform)
                classifier, manifest = load_classifier(ctx, source, classes, params.top_k)
            else:
                classifier = Classifier(build_model(params.model, len(classes), ctx.seed), classes,
                                        params.image_size, params.top_k)
        with ctx.setup("listen"):
            sock, listen, port = listening_socket(ctx)
            state = new_server_state()
            http_server(make_app(classifier, state), state)
        ctx.start_run()
        ctx.emit({"type": "ready", "port": port, "listen": listen, "protocol": "http", "path": "/classify",
                  "token": state["token"]})
        serve_until_shutdown(sock, state, params.idle_timeout_s)
        served = state["served"]
        info: dict[str, Any] = {"server": {"requests_served": len(served), "port": port, "listen": listen,
                                           "concurrency_model": "one request at a time at the model"}}
        metrics: dict[str, Any] = {"server.requests": len(served)}
        if served:
            metrics["server.total_mean"] = (statistics.fmean(total for total, _ in served), "s")
        if manifest is not None:
            info["artifact"] = manifest
        ctx.note(info=info, metrics=metrics)
