"""Host-wide knobs applied around a cell and restored after it (filled in by the placement work)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def applied_host_knobs(knobs: dict[str, Any]) -> Iterator[None]:
    yield
