"""Multi-tenant interference: each tenant's time beside others vs the same cell alone (stub)."""

from __future__ import annotations

from isobench.store import Store


def summary_lines(store: Store) -> list[str]:
    return []
