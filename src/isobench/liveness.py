"""Is the runner that made a resource still alive? Every runner holds a lock named by its tag.

Platforms, probes and the runner tag what they start with :func:`runner_tag` and sweep what
stale tags left behind; a leaf module, so none of them imports another for it.
"""

from __future__ import annotations

import atexit
import fcntl
import os
from pathlib import Path
from typing import Any

RUNNERS_DIR = Path("/run/isobench/runners")
_held_lock: dict[str, Any] = {}


def runner_tag() -> str:
    """Who started a resource: ``<pid>-<boot id>``, so a later run can tell if it is stale.

    The first call takes an exclusive lock on ``/run/isobench/runners/<tag>.lock`` and holds
    it for the life of the process: the lock, not the pid or command line, says the runner
    is alive, so any process that runs cells (the CLI, a test, a Ray worker) is protected.
    """
    tag = f"{os.getpid()}-{boot_id()[:8]}"
    if _held_lock.get("tag") != tag:  # first call, or a forked child
        RUNNERS_DIR.mkdir(parents=True, exist_ok=True)
        handle = (RUNNERS_DIR / f"{tag}.lock").open("a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        _held_lock.update(tag=tag, handle=handle)
        atexit.register(_forget_own_lock, tag)
    return tag


def _forget_own_lock(tag: str) -> None:
    """At a normal exit, remove this runner's lock file, which would otherwise wait for the next run
    to prune it. Safe with leftovers still tagged: a missing lock reads as a dead runner. A forked
    child inherits the hook but not the tag, and leaves its parent's lock alone."""
    if _held_lock.get("tag") != tag or not tag.startswith(f"{os.getpid()}-"):
        return
    (RUNNERS_DIR / f"{tag}.lock").unlink(missing_ok=True)
    _held_lock.pop("handle").close()
    _held_lock.pop("tag")


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "noboot"


def tag_is_stale(tag: str) -> bool:
    """True when the runner that made a resource is gone: another boot, or nobody holds its lock."""
    _, _, boot = tag.partition("-")
    if boot != boot_id()[:8]:
        return True
    if _held_lock.get("tag") == tag:
        return False
    lock_path = RUNNERS_DIR / f"{tag}.lock"
    try:
        handle = lock_path.open("a")
    except OSError:
        return True
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its runner still holds it
        lock_path.unlink(missing_ok=True)
        return True


def prune_stale_runner_locks() -> None:
    """Forget the lock files of runners that have ended."""
    if RUNNERS_DIR.is_dir():
        for lock in RUNNERS_DIR.glob("*.lock"):
            tag_is_stale(lock.stem)
