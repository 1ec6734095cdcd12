"""Durable, resumable study results: one SQLite database per study directory."""

from isobench.store.sqlite import STORE_FILE, Store

__all__ = ["STORE_FILE", "Store"]
