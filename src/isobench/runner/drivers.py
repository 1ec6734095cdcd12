"""Host-side drivers: load generators that run in the runner, outside the platform.

A workload that names a ``host_driver`` (the ``serve`` workload: ``http-load``; ``llm-serve``:
``llm-stream``) gets one started beside its cell. The driver waits for the cell's ``ready``
record (which names the port), reaches the cell where its platform says
(:meth:`Platform.service_host`), sends the load, and ends the cell (``POST /shutdown`` with the
token of the ready record; failing that, it kills the launcher so the runner's usual cleanup
runs). Its per-request records become the cell's items and its summary numbers the cell's
``workload.*`` metrics (``client.*`` for both), stored like any other.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar

from isobench.plan.cells import Cell
from isobench.platforms.base import Launched, Platform, kill_process_group

#: one client's kept HTTP connection
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]

READY_POLL_S = 0.01
SHUTDOWN_WAIT_S = 30.0


class HostDriver(threading.Thread):
    """Runs beside one cell; subclasses implement ``drive(host, ready_record)``."""

    name_: ClassVar[str]

    def __init__(self, cell: Cell, platform: Platform, launched: Launched, records: list[dict[str, Any]],
                 mark_window: Callable[[str], None] | None = None) -> None:
        super().__init__(daemon=True, name=f"driver-{cell.seq}")
        #: opens ("run_start") and closes ("done") the cell's measured window, whose CPU time is divided
        #: by the driver's items: the server's own marks would take in its warm-up requests and idling
        self.mark_window = mark_window or (lambda kind: None)
        self.cell = cell
        self.platform = platform
        self.launched = launched
        self.records = records
        self.stopping = threading.Event()
        self.items: list[dict[str, Any]] = []
        self.metrics: dict[str, Any] = {}
        self.info: dict[str, Any] = {}
        self.error: str | None = None

    def _wait_ready(self) -> dict[str, Any] | None:
        seen = 0
        while not self.stopping.is_set():
            while seen < len(self.records):
                record = self.records[seen]
                seen += 1
                # a duet member's start line is a ready record too, without a port: the server's comes after
                if record.get("type") == "ready" and "port" in record:
                    return record
                if record.get("type") in ("error", "done"):
                    return None  # the cell ended without serving: its own error says why
            if self.launched.proc.poll() is not None and seen >= len(self.records):
                return None
            time.sleep(READY_POLL_S)
        return None

    def run(self) -> None:
        ready = self._wait_ready()
        if ready is None:
            return
        try:
            host = self.platform.service_host(self.launched)
            self.info["address"] = f"{host}:{ready['port']}"
            self.info["network"] = self.platform.network_mode(self.cell)
            self.drive(host, ready)
        except Exception as exc:  # recorded as the cell's error; the cell is ended below
            self.error = f"{self.name_} driver: {type(exc).__name__}: {exc}"
        finally:
            if not self.end_cell(ready) or self.error:
                kill_process_group(self.launched.proc)

    def drive(self, host: str, ready: dict[str, Any]) -> None:
        raise NotImplementedError

    def end_cell(self, ready: dict[str, Any]) -> bool:
        """Ask the cell to end; True when it did within SHUTDOWN_WAIT_S."""
        return False

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=SHUTDOWN_WAIT_S + 5)


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


class HttpLoad(HostDriver):
    """POST JPEG files to the cell's ``/classify`` at a fixed concurrency; time each request."""

    name_ = "http-load"

    def drive(self, host: str, ready: dict[str, Any]) -> None:
        from isobench.workloads.datasets import list_jpeg_folder
        from isobench.workloads.serving import SERVER_PHASES, parse_response_head, parse_server_timing

        params = self.cell.params
        files, _ = list_jpeg_folder(Path(str(self.cell.data_dir)))
        bodies = [path.read_bytes() for path, _ in files]
        port = int(ready["port"])
        self._parse = parse_server_timing
        self._parse_head = parse_response_head
        self._server_phases = SERVER_PHASES
        asyncio.run(self._load(host, port, bodies, params))

    async def _load(self, host: str, port: int, bodies: list[bytes], params: dict[str, Any]) -> None:
        concurrency, keepalive = int(params["concurrency"]), bool(params["keepalive"])
        if params["warmup_requests"]:
            await self._phase(host, port, bodies, concurrency, keepalive, int(params["warmup_requests"]), 0.0, False)
        self.mark_window("run_start")
        started = time.perf_counter()
        duration = float(params["duration_s"])
        errors = await self._phase(host, port, bodies, concurrency, keepalive,
                                   None if duration > 0 else int(params["requests"]), duration, True)
        wall = time.perf_counter() - started
        self.mark_window("done")
        if not self.items:
            raise RuntimeError(f"no request succeeded ({len(errors)} failed; first: {errors[:1]})")
        e2e = sorted(item["e2e"] for item in self.items)
        self.metrics.update({
            "client.throughput": (len(self.items) / wall, "1/s"),
            "client.latency_mean": (sum(e2e) / len(e2e), "s"),
            "client.latency_p50": (percentile(e2e, 50), "s"),
            "client.latency_p90": (percentile(e2e, 90), "s"),
            "client.latency_p99": (percentile(e2e, 99), "s"),
            "client.requests": len(self.items), "client.errors": len(errors), "client.concurrency": concurrency,
        })
        self.info.update(concurrency=concurrency, keepalive=keepalive, wall_s=wall, requests=len(self.items),
                         errors=len(errors), first_errors=errors[:3])

    async def _phase(self, host: str, port: int, bodies: list[bytes], concurrency: int, keepalive: bool,
                     count: int | None, duration: float, record: bool) -> list[str]:
        deadline = time.perf_counter() + duration if count is None else math.inf

        def more(index: int) -> bool:
            return (count is None or index < count) and time.perf_counter() < deadline

        def send(index: int, conn: Connection | None) -> Awaitable[tuple[dict[str, Any], Connection | None]]:
            return self._request(host, port, bodies[index % len(bodies)], conn, keepalive)

        def keep(index: int, item: dict[str, Any]) -> None:
            if record:
                item["i"] = len(self.items)
                self.items.append(item)

        return await self._clients(concurrency, more, send, keep)

    async def _clients(self, concurrency: int, more: Callable[[int], bool],
                       send: Callable[[int, Connection | None], Awaitable[tuple[Any, Connection | None]]],
                       keep: Callable[[int, Any], None]) -> list[str]:
        """``concurrency`` closed-loop clients taking request indices 0, 1, ... in turn while
        ``more(index)``: each sends its request (``send``, on its kept connection) and hands the reply
        to ``keep``. A failure is counted as an error and its connection dropped, so the next request
        opens a fresh one; more than ten failures before any item was kept end the clients."""
        indices = itertools.count()
        errors: list[str] = []

        async def client() -> None:
            conn: Connection | None = None
            while not self.stopping.is_set():
                index = next(indices)
                if not more(index):
                    break
                try:
                    reply, conn = await send(index, conn)
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    conn = None
                    if len(errors) > 10 and not self.items:
                        break
                    continue
                keep(index, reply)
            if conn is not None:
                conn[1].close()

        await asyncio.gather(*(client() for _ in range(concurrency)))
        return errors

    async def _request(self, host: str, port: int, body: bytes,
                       conn: Connection | None, keepalive: bool) -> tuple[dict[str, Any], Connection | None]:
        clock = time.perf_counter
        t0 = clock()
        if conn is None:
            conn = await asyncio.open_connection(host, port)
        t1 = clock()
        reader, writer = conn
        head = (f"POST /classify HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: image/jpeg\r\n"
                f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keepalive else 'close'}\r\n\r\n")
        writer.write(head.encode() + body)
        await writer.drain()
        status, headers = self._parse_head(await reader.readuntil(b"\r\n\r\n"))
        payload = await reader.readexactly(int(headers.get("content-length", "0")))
        t2 = clock()
        if status != 200:
            raise ValueError(f"HTTP {status}: {payload[:200]!r}")
        labels = json.loads(payload)["labels"]
        if not labels:
            raise ValueError("an empty answer")
        if not keepalive:
            writer.close()
            conn = None
        server = self._parse(headers.get("server-timing", ""))
        total = server.get("total", 0.0)
        phases = {name: server.get(name, 0.0) for name in self._server_phases}
        e2e = t2 - t0
        return {"e2e": e2e, "phases": {"connect": t1 - t0, **phases,
                                       "server_other": total - sum(phases.values()),
                                       "transport": e2e - (t1 - t0) - total}}, conn

    def end_cell(self, ready: dict[str, Any]) -> bool:
        import http.client

        from isobench.workloads.serving import TOKEN_HEADER

        try:
            host, _, port = self.info["address"].rpartition(":")
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            connection.request("POST", "/shutdown", headers={TOKEN_HEADER: str(ready.get("token", ""))})
            answer = connection.getresponse()
            answer.read()
            connection.close()
            if answer.status != 200:
                return False  # the caller kills the cell
        except (OSError, KeyError, ValueError, http.client.HTTPException):
            return False
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        while time.monotonic() < deadline:
            if self.launched.proc.poll() is not None:
                return True
            time.sleep(0.02)
        return False


#: the LoadGen client process: LoadGen keeps global state, and a duet's two drivers run at once
LOADGEN_CLIENT = ("import json, sys; from isobench.workloads.llm_serve import loadgen_client; "
                  "print(json.dumps(loadgen_client(json.load(sys.stdin))))")


class LlmStreamLoad(HttpLoad):
    """Stream generations from llm-serve's ``/generate`` and time every token as the client sees it:
    after the warm-up requests, a closed loop at ``concurrency`` (``requests``, or on until
    ``min_seconds``), or MLPerf LoadGen's Server scenario (``client: loadgen``) in a process of its
    own. Each request is an item: connect, the server's phases, server_other and transport."""

    name_ = "llm-stream"

    def drive(self, host: str, ready: dict[str, Any]) -> None:
        from isobench.workloads.llm_serve import LlmServeParams, TokenDigest, host_prompts, stream_metrics

        params = LlmServeParams(**self.cell.params)
        prompts = host_prompts(params, Path(str(self.cell.data_dir)), self.cell.seed)
        port = int(ready["port"])
        warmup = self.cell.warmup_items if params.warmup_requests is None else params.warmup_requests
        self.replies: list[Any] = []
        digest = TokenDigest(params.requests)
        errors = asyncio.run(self._closed_loop(host, port, prompts, params, 0, warmup, 0.0, digest, record=False))
        self.info.update(client=params.client, stream="server-sent events", warmup_requests=warmup,
                         keepalive=params.keepalive)
        self.mark_window("run_start")
        if params.client == "loadgen":
            self._loadgen(host, port, prompts)
            self.mark_window("done")
            return
        started = time.perf_counter()
        errors += asyncio.run(self._closed_loop(host, port, prompts, params, warmup, params.requests,
                                                params.min_seconds, digest, record=True))
        wall = time.perf_counter() - started
        self.mark_window("done")
        if not self.items:
            raise RuntimeError(f"no request succeeded ({len(errors)} failed; first: {errors[:1]})")
        self.metrics.update(stream_metrics(self.replies, wall, params.batch_size * params.output_tokens))
        self.metrics.update({"client.requests": len(self.items), "client.errors": len(errors),
                             "client.concurrency": params.concurrency})
        self.info.update(concurrency=params.concurrency, wall_s=wall, requests=len(self.items), errors=len(errors),
                         first_errors=errors[:3], tokens_digest=digest.hexdigest(), digest_requests=params.requests)

    async def _closed_loop(self, host: str, port: int, prompts: list[str], params: Any, first: int, count: int,
                           min_seconds: float, digest: Any, record: bool) -> list[str]:
        from isobench.workloads.llm_serve import request_body, stream_generation

        started = time.perf_counter()

        def more(index: int) -> bool:
            return index < count or time.perf_counter() - started < min_seconds

        def send(index: int, conn: Connection | None) -> Awaitable[tuple[Any, Connection | None]]:
            body = request_body(prompts, first + index, params.batch_size, warmup=not record)
            return stream_generation(host, port, body, conn, params.keepalive)

        def keep(index: int, reply: Any) -> None:
            digest.add(first + index, reply)
            if record:
                self.replies.append(reply)
                self.items.append({"i": len(self.items), "e2e": reply.e2e, "phases": reply.phases()})

        return await self._clients(params.concurrency, more, send, keep)

    def _loadgen(self, host: str, port: int, prompts: list[str]) -> None:
        config = {"host": host, "port": port, "prompts": prompts, "params": self.cell.params, "seed": self.cell.seed}
        proc = subprocess.run([sys.executable, "-c", LOADGEN_CLIENT], input=json.dumps(config), capture_output=True,
                              text=True, timeout=self.cell.timeout_s)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"the LoadGen client exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
        result = json.loads(lines[-1])
        if not result["items"]:
            raise RuntimeError(f"no query succeeded (first errors: {result['errors'][:2]})")
        self.items.extend({"i": i, **item} for i, item in enumerate(result["items"]))
        self.metrics.update(result["metrics"])
        self.metrics.update({"client.requests": len(result["items"]), "client.errors": len(result["errors"])})
        self.info.update(loadgen=result["info"], requests=len(result["items"]), errors=len(result["errors"]),
                         first_errors=result["errors"][:3])


DRIVERS: dict[str, type[HostDriver]] = {HttpLoad.name_: HttpLoad, LlmStreamLoad.name_: LlmStreamLoad}


def has_host_driver(cell: Cell) -> bool:
    """Whether the cell's items come from a driver on the host (a served workload), not the cell."""
    from isobench.workloads import WORKLOADS

    return WORKLOADS.get(cell.workload).host_driver is not None


def start_host_driver(cell: Cell, platform: Platform, launched: Launched, records: list[dict[str, Any]],
                      mark_window: Callable[[str], None] | None = None) -> HostDriver | None:
    """Start the workload's host driver beside the cell, if it has one."""
    from isobench.workloads import WORKLOADS

    name = WORKLOADS.get(cell.workload).host_driver
    if name is None:
        return None
    driver = DRIVERS[name](cell, platform, launched, records, mark_window)
    driver.start()
    return driver


def settle(outcome: Any, driver: HostDriver | None) -> None:
    """Fold a workload's ``done.info`` and a driver's results into the cell's outcome."""
    if outcome.done:
        # Every fact a workload noted (timing mode, epochs, torch threads, ...) is kept with the cell.
        # (the page-fault counts are stored as metrics: store/sqlite.py, process_fault_metrics)
        facts = {k: v for k, v in outcome.done.items()
                 if k not in ("type", "items", "run_s", "metrics", "info", "faults", "run_faults", "run_reads")}
        facts.update(outcome.done.get("info") or {})
        if facts:
            outcome.platform_info["workload"] = facts
    if driver is None:
        return
    outcome.items.extend(driver.items)
    if driver.info:
        outcome.platform_info["driver"] = {"name": driver.name_, **driver.info}
    if outcome.done is not None:
        outcome.done.setdefault("metrics", {}).update(driver.metrics)
    if driver.error and not outcome.error:
        outcome.error = driver.error
