"""Short one-line forms of long values for messages: a leaf that hostinfo and the study loader
use without pulling in the report renderers."""

from __future__ import annotations

from collections.abc import Iterable


def capped_list(items: Iterable[object], limit: int = 8, sep: str = ", ") -> str:
    """The first ``limit`` items, then "… and N more": a one-line error stays one short line."""
    shown: list[str] = []
    more = 0
    for item in items:
        if len(shown) < limit:
            shown.append(str(item))
        else:
            more += 1
    return sep.join(shown) + (f" … and {more} more" if more else "")


def clip(value: object, limit: int = 80) -> str:
    """``repr``-free short form of a long user string for a one-line message."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}… ({len(text)} characters)"
