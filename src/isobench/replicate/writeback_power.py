"""`--power` for device write-back checks (Park & Bahn F6): an extra writer of the paper's size.

A count of the flusher's write-back calls cannot be lengthened like a phase: the injected arm is
the baseline plus an extra writer on the same device (the ``extra_writebacks`` knob,
workloads/file_writer.py), which stands for a container engine's own writes there (its json-file
log, overlay and containerd metadata). Each of its calls is one more ``sync`` write-back call of
the flusher on the device, so the writer's rate sets the expected ratio of device calls:
``(effect − 1) ×`` the baseline's own calls a second. That rate is read from the paper's real
run of the same study (its baseline arm's checkpoint cells, ``device_writebacks`` over their wall
time), which has run before any power run; without it (not run, no calls) the baseline is taken
to make the kernel's periodic calls only, one per ``dirty_writeback_centisecs`` (5 s, the paper's
Table 7), and the result says which.

An interval check (the s.d. of the gaps between calls) gets the same writer, sized by its
finding's count check: the paper gives no figure for the spread, and the writer's calls come at
random moments (one in each 1/rate-second slot), so whether the spread of the merged calls grows
is what the power run shows, not what it assumes.
"""

from __future__ import annotations

import math
from pathlib import Path

from isobench.analysis.finding_spec import Check

#: the probe's device-wide write-back readings (probes/ftrace.py) an extra writer can move
COUNT_METRIC = "probe.ftrace.device_writebacks"
WRITEBACK_METRICS = frozenset({COUNT_METRIC, "probe.ftrace.device_writeback_interval_std_s",
                               "probe.ftrace.device_writeback_interval_mean_s"})
#: the knob's ceiling (study/model.py Knobs.extra_writebacks)
MAX_RATE = 20.0
FLUSHER_PERIOD = Path("/proc/sys/vm/dirty_writeback_centisecs")


def is_writeback_check(check: Check) -> bool:
    names = [check.metric] if isinstance(check.metric, str) else list(check.metric)
    return not check.per and all(n in WRITEBACK_METRICS for n in names)


def count_effect(checks: list[Check]) -> float | None:
    """The paper's effect on the device call count, from the finding's count check (None: none)."""
    return next((c.effect for c in checks if c.metric == COUNT_METRIC and c.effect is not None), None)


def flusher_period_s(path: Path = FLUSHER_PERIOD) -> float:
    """The flusher's periodic wake-up, s (5 s when it cannot be read, the kernel's default)."""
    try:
        centisecs = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 5.0
    return centisecs / 100 if centisecs > 0 else 5.0


def baseline_calls_per_s(directory: Path, workload: str, platform: str) -> float | None:
    """Device write-back calls a second of the baseline's measured cells of ``workload`` in the
    store at ``directory`` (None: no store, no such cells, or no calls)."""
    from isobench.store import Store

    if not Store.exists(directory):
        return None
    store = Store.open(directory)
    try:
        rows = store.conn.execute(
            "SELECT c.wall_s AS wall, m.value AS calls FROM cells c JOIN metrics m ON m.cell_id = c.cell_id "
            "WHERE c.workload_key = ? AND c.platform_key = ? AND c.warmup = 0 AND c.status = 'ok' "
            "AND m.metric = ?", (workload, platform, COUNT_METRIC)).fetchall()
    finally:
        store.close()
    seconds, calls = sum(float(r["wall"]) for r in rows), sum(float(r["calls"]) for r in rows)
    return calls / seconds if seconds > 0 and calls > 0 else None


def writer_rate(effect: float, directory: Path, workload: str, platform: str) -> tuple[float, str]:
    """The extra writer's syncfs calls a second for ``effect`` × the baseline's device calls, and
    what it was sized on."""
    measured = baseline_calls_per_s(directory, workload, platform)
    if measured is not None:
        base, said = measured, f"{platform}'s {measured:.3g} device calls/s in the paper's run"
    else:
        period = flusher_period_s()
        base, said = 1.0 / period, f"one periodic call per {period:g} s (no calls of {platform} in the paper's run)"
    rate = min(max((effect - 1.0) * base, 1e-3), MAX_RATE)
    return round(rate, 4), f"{rate:.3g} calls/s = ({effect:g} − 1) × {said}"


def expected_ratio(rate: float, base_per_s: float) -> float:
    """The count ratio a writer of ``rate`` should give over a baseline of ``base_per_s``."""
    return (base_per_s + rate) / base_per_s if base_per_s > 0 else math.inf
