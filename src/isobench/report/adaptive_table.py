"""Why each comparison of a `repetitions: auto` study stopped, from the store's ``adaptive`` meta
(runner/adaptive.py): the report's adaptive table in HTML and Markdown says it in these words."""

from __future__ import annotations

from typing import Any


def budget_kind(reason: str) -> str:
    """Which budget the study's stopping reason names: "time", "rounds", or "" (neither)."""
    if "time budget" in reason:
        return "time"
    if "repetitions ran out" in reason:
        return "rounds"
    return ""


def stop_words(state: dict[str, Any], meta: dict[str, Any]) -> str:
    """One comparison's fate: the round it stopped at and why. ``state`` is one entry of the
    meta's ``comparisons``; ``meta`` the whole record (its rounds, reason, target, stopped)."""
    status, at = state.get("status"), state.get("reached_at")
    rounds = meta.get("rounds")
    if status == "verdict" and state.get("verdict") == "not comparable":
        return (f"stopped at round {at}: not comparable (the two sides ran on different devices; more rounds "
                "cannot change that)")
    if status == "verdict":
        alpha = state.get("alpha")
        level = f" (at α={alpha:.4f})" if isinstance(alpha, int | float) else ""
        return f"stopped at round {at}: {state.get('verdict', 'a verdict')}{level}"
    if status == "reached":
        target = meta.get("target")
        width = f"±{target:.1%}" if isinstance(target, int | float) else "the target"
        return f"stopped at round {at}: its interval reached {width}"
    if status == "served":
        return (f"stopped at round {at}: every comparison it is the noise floor for had its verdict, and "
                f"its floor was within the margin ({state.get('verdict', 'inconclusive')} itself)")
    if status == "budget":
        kind = budget_kind(str(meta.get("reason") or ""))
        return (f"budget ran out at round {rounds}" + (f" ({kind})" if kind else "")
                + f": {state.get('verdict', 'inconclusive')}")
    if meta.get("stopped"):  # the study stopped for a reason of its own (no comparison to check, ...)
        return f"stopped with the study at round {rounds}: {state.get('verdict', 'inconclusive')}"
    return (f"no verdict at round {rounds}, when the study last looked: it did not finish "
            "(`isobench run --resume --out DIR` goes on)")
