"""Ray token authentication: which mode a cluster is in, and joining it only when it is safe.

isobench's agents run as root on every node, so a Ray cluster that accepts clients without a
token lets anyone who reaches its port run code as root there. Ray (2.60, installed here) checks a
shared token on every RPC when its processes run with ``RAY_AUTH_MODE=token``; the token comes
from ``RAY_AUTH_TOKEN``, the file named by ``RAY_AUTH_TOKEN_PATH``, or ``~/.ray/auth_token``
(``ray get-auth-token --generate`` writes that one).

What a cluster accepts is tested, not assumed: a throw-away process with authentication off
and no token asks the cluster's GCS for its node table. If the GCS answers, anyone can join.
"""

from __future__ import annotations

import os
import subprocess
import sys

from isobench.errors import UserError

#: the mode a cluster answers a client that sends no token with
TOKEN, DISABLED = "token", "disabled"
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
PROBE_TIMEOUT_S = 60.0

# Run in a child: Ray reads its authentication mode and token once per process.
_PROBE = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).get_all_node_info(timeout=20)
except AuthenticationError:
    print("refused")
else:
    print("accepted")
"""


def gcs_address(address: str) -> str:
    """``HOST:PORT`` of the cluster's GCS (``auto``: the cluster this machine belongs to)."""
    if address != "auto":
        return address.removeprefix("ray://")
    from ray._private.services import canonicalize_bootstrap_address_or_die

    try:
        return canonicalize_bootstrap_address_or_die("auto")
    except Exception as exc:  # ConnectionError: none, or several, found
        raise UserError(f"no Ray cluster found on this machine: {str(exc)[:200]}", field="--ray",
                        fix="start one (README: \"Studies on a Ray cluster\") or pass its address as HOST:PORT"
                        ) from None


def _accepted(address: str, env: dict[str, str]) -> bool:
    """Whether the cluster's GCS answers a client with these authentication settings."""
    try:
        probe = subprocess.run([sys.executable, "-c", _PROBE, gcs_address(address)], env=env, capture_output=True,
                               text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"the Ray cluster at {address!r} did not answer within {PROBE_TIMEOUT_S:.0f} s",
                        field="--ray", fix="check the address and that its GCS port is reachable") from None
    verdict = probe.stdout.strip()
    if probe.returncode != 0 or verdict not in ("accepted", "refused"):
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise UserError(f"cannot tell whether the Ray cluster at {address!r} needs authentication: {tail}",
                        field="--ray", fix="check the address (`ray status --address HOST:PORT`)")
    return verdict == "accepted"


def cluster_auth_mode(address: str) -> str:
    """``token`` when the cluster at ``address`` refuses a client without a token, else ``disabled``."""
    env = {k: v for k, v in os.environ.items() if k not in AUTH_ENV}
    env["RAY_AUTH_MODE"] = "disabled"  # send no token, whatever this process or ~/.ray holds
    return DISABLED if _accepted(address, env) else TOKEN


def use_token() -> None:
    """Join with a token from here on (this process and the Ray workers it starts)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    if os.environ.get("RAY_AUTH_MODE") != TOKEN:
        os.environ["RAY_AUTH_MODE"] = TOKEN
        Config.initialize("")  # Ray caches its config: re-read the mode
        AuthenticationTokenLoader.instance().reset_cache()
    if not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        raise UserError("the Ray cluster needs an authentication token and this machine has none", field="--ray",
                        fix="copy the head's token (`ray get-auth-token` there) to ~/.ray/auth_token, "
                            "or set RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")


def check_cluster_auth(address: str, allow_unauthenticated: bool) -> str:
    """The cluster's mode; refuse one that lets anyone in unless the user accepts it explicitly."""
    mode = cluster_auth_mode(address)
    if mode == TOKEN:
        use_token()
        if not _accepted(address, dict(os.environ)):  # Ray itself would retry a wrong token for a while
            raise UserError(f"the Ray cluster at {address!r} refused this machine's authentication token",
                            field="--ray", fix="use the head's token (`ray get-auth-token` there) in "
                                               "~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH")
    elif not allow_unauthenticated:
        raise UserError(f"the Ray cluster at {address!r} accepts clients without authentication: anyone who "
                        "reaches its port can run code as root on every node", field="--ray",
                        fix="restart it with RAY_AUTH_MODE=token (README: \"Studies on a Ray cluster\"), "
                            "or pass --allow-unauthenticated on a network only you can reach")
    return mode


def describe_mode(mode: str) -> str:
    """One line for `isobench doctor --ray`."""
    if mode == TOKEN:
        return "authentication: token (clients without the cluster's token are refused)"
    return ("authentication: DISABLED: anyone who reaches the cluster's ports can run code as root on its "
            "nodes; restart it with RAY_AUTH_MODE=token (README: \"Studies on a Ray cluster\")")
