"""Was the host busy with other work? Judged on the sample the runner took before its own
set-up (runner/hostload_baseline.py), against what an idle host shows.

An idle host is not at zero: kernel threads, the container engine and the system's daemons
keep a few hundredths of a core busy, and some kernel threads idle in D state, which the load
average counts as load although they use no CPU. So:

- other processes' CPU use is judged in cores: a warning needs more than
  ``max(MIN_OTHER_CORES, OTHER_SHARE × cores)``. A quarter of a core is five to ten times what
  an idle host's background uses, and a neighbour of that size on a 2-core host takes a core a
  quarter of the time, which is well above the ±1% floors a quiet host reaches; on a large host
  the cells hold a small share of the cores and the scheduler keeps others off them, so the
  bar grows with the host (10% of it);
- steal time (the hypervisor giving the vCPUs to another guest) above ``STEAL_SHARE`` warns
  on its own: it slows whatever runs, own work included;
- the load average is shown, not judged: right after ``pip`` or ``apt-get`` it still reads
  their load for a minute or more, and it counts D-state sleepers.
"""

from __future__ import annotations

from typing import Any

#: other processes' busy time (in cores) above which the host was not idle, and the same as a
#: share of the host's cores (the larger of the two applies)
MIN_OTHER_CORES = 0.25
OTHER_SHARE = 0.10
#: the share of the CPU time stolen by the hypervisor above which the host was not idle
STEAL_SHARE = 0.05
#: stores without a sample (older ones, cluster nodes): a 1-minute load average of this many
#: tasks per core says the host was saturated, whatever set-up or D state adds
LEGACY_LOAD_PER_CORE = 1.0


def busy_threshold(cores: int) -> float:
    return max(MIN_OTHER_CORES, OTHER_SHARE * cores)


def _load_words(sample: dict[str, Any]) -> str:
    load = sample.get("loadavg")
    if not load:
        return ""
    blocked = float(sample.get("blocked_tasks") or 0.0)
    idle = f", {blocked:.1f} of it task(s) in D state that use no CPU" if blocked >= 0.5 else ""
    return f"; 1-minute load average {load[0]:.2f}{idle}"


def before_setup_warning(sample: dict[str, Any] | None, cores: int) -> str | None:
    """The warning text when the sample shows other work beyond an idle host's, else None."""
    if not sample:
        return None
    other = float(sample.get("other_busy_cores") or 0.0)
    steal = float(sample.get("steal_share") or 0.0)
    cores = int(sample.get("cores") or cores or 1)
    limit = busy_threshold(cores)
    if other <= limit and steal <= STEAL_SHARE:
        return None
    measured = (f"over {float(sample.get('window_s') or 0):.1f} s before the runner's set-up, other processes "
                f"kept {other:.2f} core(s) busy on {cores} (an idle host stays under {limit:.2f}; the runner's "
                f"own processes left out), steal {steal:.1%}{_load_words(sample)}")
    if other > limit:
        return (f"{measured}: other work competed for the CPU. Stop it, or run on an idle host; interleaved "
                "rounds and duet pairs spread the harm but widen the intervals.")
    return (f"{measured}: the hypervisor gave these vCPUs to other guests {steal:.1%} of the time (limit "
            f"{STEAL_SHARE:.0%}). Run on a host with dedicated vCPUs, or at a quieter hour.")


def legacy_load_warning(load: list[float] | None, cores: int) -> str | None:
    """For a store without a busy sample: only a load average of a saturated host warns."""
    if not load or load[0] < LEGACY_LOAD_PER_CORE * cores:
        return None
    return (f"the 1-minute load average was {load[0]:.2f} on {cores} cores when the study started (this store "
            "has no CPU-busy sample from before set-up, so set-up that ran just before and tasks in D state "
            "count too): other processes may have competed for the CPU. Re-run on an idle host to be sure.")


def cell_start_excess(mean_start_load: float, sample: dict[str, Any] | None, at_once: int) -> float:
    """The load average at cell starts beyond what the study itself and an idle host put there:
    the cells that run at once (one, or a duet's two) and the D-state tasks the host idles with."""
    blocked = float((sample or {}).get("blocked_tasks") or 0.0)
    return mean_start_load - at_once - blocked
