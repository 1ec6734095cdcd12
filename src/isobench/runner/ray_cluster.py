"""Reaching a Ray cluster from the head: joining it (refusing one without authentication), and
starting, asking and ending one :class:`NodeAgent` per node."""

from __future__ import annotations

import socket
import time
from typing import Any

from isobench.errors import UserError
from isobench.runner.node_agent import NodeAgent

NAMESPACE = "isobench"


def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("Ray is not installed in this environment", field="--ray",
                        fix="./isobench.sh setup installs it (or pip install ray)") from None
    return ray


def connect(address: str, allow_unauthenticated: bool = False) -> Any:
    """Join the cluster at ``address`` ("auto": the one this machine belongs to) as a driver."""
    return connect_with_auth(address, allow_unauthenticated)[0]


def connect_with_auth(address: str, allow_unauthenticated: bool = False) -> tuple[Any, str]:
    """Join as :func:`connect` does; also say the cluster's authentication mode (token or disabled).

    A cluster that lets clients in without a token is refused unless ``allow_unauthenticated``:
    the agents run as root, so whoever reaches its port would too (runner/rayauth.py)."""
    from isobench.runner.rayauth import check_cluster_auth

    ray = ray_module()
    fix = "start one (`ray start --head`, README: \"Studies on a Ray cluster\") or pass its address as HOST:PORT"
    if address != "auto":
        # ray.init retries an address nobody answers at for minutes: ask once, briefly
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"{address!r} is not a cluster address", field="--ray", fix="write HOST:PORT or auto")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise UserError(f"no Ray cluster answers at {address!r}: {exc}", field="--ray", fix=fix) from None
    mode = check_cluster_auth(address, allow_unauthenticated)
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                 configure_logging=True)
    except ray.exceptions.AuthenticationError:
        raise UserError(f"the Ray cluster at {address!r} refused this machine's authentication token",
                        field="--ray", fix="use the head's token (`ray get-auth-token` there) in ~/.ray/auth_token, "
                                           "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH") from None
    except Exception as exc:  # ConnectionError, ValueError (bad address), RuntimeError (none running)
        raise UserError(f"no Ray cluster answers at {address!r}: {type(exc).__name__}: {str(exc)[:200]}",
                        field="--ray", fix=fix) from None
    return ray, mode


def start_agents(ray: Any, only: set[str] | None = None) -> list[tuple[dict[str, Any], Any]]:
    """One agent actor per live node (or per node id in ``only``), pinned there: [(node record, actor)]."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    agent_cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(NodeAgent)
    agents = []
    for node in ray.nodes():
        if not node.get("Alive") or (only is not None and node["NodeID"] not in only):
            continue
        labels = {k: str(v) for k, v in (node.get("Labels") or {}).items()}
        actor = agent_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                                  ).remote(node["NodeID"], labels)
        agents.append((node, actor))
    return agents


def gather(ray: Any, refs: list[Any], timeout: float) -> list[Any]:
    """Each call's result, or the exception it ended with: a node that died a moment ago may still
    be listed alive (Ray notices missed heartbeats only after a while), and its agent never answers."""
    results: list[Any] = []
    deadline = time.monotonic() + timeout
    for ref in refs:
        try:
            results.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            results.append(exc)
    return results


def describe_nodes(ray: Any, full: bool = False) -> list[dict[str, Any]]:
    """Every live node's description (host, labels, platforms), for `isobench doctor --ray`."""
    agents = start_agents(ray)
    try:
        described = gather(ray, [actor.describe.remote(full) for _, actor in agents], timeout=600)
    finally:
        for _, actor in agents:
            ray.kill(actor)
    answered = []
    for (node, _), info in zip(agents, described, strict=True):
        if isinstance(info, Exception):  # listed alive, but gone
            continue
        info["address"] = node.get("NodeManagerAddress", "")
        info["resources"] = node.get("Resources", {})
        answered.append(info)
    return answered
