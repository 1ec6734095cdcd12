"""Sweeping what runners that died left on this host: changed host state, containers, cgroups,
trace instances. ``isobench doctor --repair`` and a cluster node's agent call it; a study's own
runner sweeps the same way at start-up, for its platforms and probes."""

from __future__ import annotations


def sweep_leftovers() -> tuple[list[str], list[str]]:
    """(host state restored, leftovers removed), each as lines a person can read."""
    from isobench.hoststate import sweep_stale
    from isobench.liveness import prune_stale_runner_locks, runner_tag
    from isobench.platforms import PLATFORMS
    from isobench.probes import PROBES

    runner_tag()  # this process is a runner too: what it sweeps is never its own
    restored = sweep_stale()
    removed: list[str] = []
    for _, cls in [*PLATFORMS, *PROBES]:
        try:
            removed.extend(cls.sweep_stale())
        except Exception as exc:  # one broken sweep must not stop the others
            removed.append(f"sweep of {cls.__name__} failed: {exc}")
    prune_stale_runner_locks()
    return restored, removed
