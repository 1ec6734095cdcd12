"""Every piece of host state isobench changes, journaled so that a crash cannot leave it changed.

One mechanism for all of it (cpufreq files, ``vm.dirty_background_*``, ``nvpmodel``,
``jetson_clocks``). For each *target* (one file, one setting) a directory under
``/run/isobench/hoststate`` holds:

- ``original.json``: the value in force before isobench changed it, written (durably, and
  before anything is changed) by the first holder only, so it is the host's own value even
  when runners overlap;
- one ``<runner tag>-<n>.json`` per *holder*: the value it asked for and which runner it is.

While holders remain, their combined wish is in force (the newest holder's, or the smallest
for ``dirty_background``); when the last one leaves, the original is put back and the
directory removed. A runner killed with ``kill -9`` leaves its holder file behind: the next
run's sweep, or ``isobench doctor --repair``, drops the holders whose runner is dead
(:func:`isobench.liveness.tag_is_stale`) and settles again, which restores the original.

``/run`` is a tmpfs: the journal goes with a reboot, as do the sysfs and sysctl values it guards.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_DIR = Path("/run/isobench/hoststate")
ORIGINAL = "original.json"
VM = Path("/proc/sys/vm")
_sequence = itertools.count()


# -- what can be changed, and how it is read, written and put back ---------------------------------

def _write_file(path: Path, value: str) -> None:
    # sysfs/procfs refuse the lseek of Python's buffered writers on some files: one plain write
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _tool(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=True).stdout


def _read_nvpmodel(_: str) -> str:
    match = re.search(r"^\s*(\d+)\s*$", _tool("nvpmodel", "-q"), re.MULTILINE)
    if match is None:
        raise RuntimeError("`nvpmodel -q` printed no mode number")
    return match.group(1)


def _write_nvpmodel(_: str, mode: Any) -> None:
    _tool("nvpmodel", "-m", str(mode))


def _jetson_store() -> Path:
    return STATE_DIR / "jetson_clocks.state"


def _read_jetson_clocks(_: str) -> str:
    # the clocks' state is too big for a value: it is stored in a file the journal names
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    _tool("jetson_clocks", "--store", str(_jetson_store()))
    return "stored"


def _write_jetson_clocks(_: str, locked: Any) -> None:
    if locked is True or locked == "locked":
        _tool("jetson_clocks")
    else:  # unlocked, or the original: the state stored before the first change
        _tool("jetson_clocks", "--restore", str(_jetson_store()))


def _restore_jetson_clocks(key: str, original: Any) -> None:
    _write_jetson_clocks(key, original)
    _jetson_store().unlink(missing_ok=True)


def _read_dirty_background(key: str) -> dict[str, str]:
    return {name: (Path(key) / name).read_text().strip()
            for name in ("dirty_background_bytes", "dirty_background_ratio")}


def _restore_dirty_background(key: str, original: dict[str, str]) -> None:
    # writing one of the pair zeroes the other: restore whichever was in force
    if int(original.get("dirty_background_bytes", "0")):
        _write_file(Path(key) / "dirty_background_bytes", original["dirty_background_bytes"])
    else:
        _write_file(Path(key) / "dirty_background_ratio", original.get("dirty_background_ratio", "10"))


def _read_affinity(key: str) -> str:
    from isobench.hostinfo import cpu_list

    return cpu_list(sorted(os.sched_getaffinity(int(key))))


def _write_affinity(key: str, value: Any) -> None:
    """Every thread of process ``key`` (a container engine's daemon) onto these cores; a process
    that is gone (the daemon restarted) has nothing left to restore."""
    from isobench.hostinfo import parse_cpu_list

    cores = parse_cpu_list(str(value))
    for task in Path(f"/proc/{key}/task").glob("*"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(task.name), cores)


@dataclass(frozen=True)
class Kind:
    """How one kind of host state is read, set, combined across holders, and put back."""

    read: Callable[[str], Any]
    write: Callable[[str, Any], None]
    restore: Callable[[str, Any], None] | None = None  # default: write the original
    #: the value in force while several holders overlap (they are given oldest first)
    combine: Callable[[list[Any]], Any] = field(default=lambda values: values[-1])


#: a sysctl in centiseconds that holders lower: the shortest asked for is in force
_FLUSHER_TIMER = Kind(read=lambda key: Path(key).read_text().strip(),
                      write=lambda key, value: _write_file(Path(key), str(value)),
                      combine=lambda values: min(values, key=int))

KINDS: dict[str, Kind] = {
    "sysfs": Kind(read=lambda key: Path(key).read_text().strip(),
                  write=lambda key, value: _write_file(Path(key), str(value))),
    "dirty_background": Kind(read=_read_dirty_background,
                             write=lambda key, value: _write_file(Path(key) / "dirty_background_bytes",
                                                                  str(value)),
                             restore=_restore_dirty_background, combine=min),
    # the flusher's timers lowered (probes/tracefs.py): vm.dirty_expire_centisecs, and
    # vm.dirty_writeback_centisecs, its wake-up period
    "dirty_expire": _FLUSHER_TIMER,
    "dirty_writeback": _FLUSHER_TIMER,
    "nvpmodel": Kind(read=_read_nvpmodel, write=_write_nvpmodel),
    # the container engine's daemons kept off the cells' cores (runner/harness.py)
    "affinity": Kind(read=_read_affinity, write=_write_affinity),
    "jetson_clocks": Kind(read=_read_jetson_clocks, write=_write_jetson_clocks, restore=_restore_jetson_clocks),
}


# -- the journal ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One lock for the whole journal: threads and runners alike (flock is per open file)."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with (STATE_DIR / "lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _durable_write(path: Path, data: dict[str, Any]) -> None:
    """Write whole or not at all, and on disk (well, in the tmpfs) before the change it guards."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def target_dir(kind: str, key: str) -> Path:
    digest = hashlib.sha256(f"{kind}\0{key}".encode()).hexdigest()[:16]
    return STATE_DIR / f"{kind}-{digest}"


def _holders(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in directory.glob("*.json"):
        if path.name != ORIGINAL:
            data = _read_json(path)
            if data is not None and "owner" in data:
                found.append((path, data))
    return sorted(found, key=lambda item: item[1].get("since", 0))


def _settle(directory: Path) -> str | None:
    """With the lock held: put the holders' combined value in force, or the original when none is
    left (then the target's journal goes). Says what it restored."""
    original = _read_json(directory / ORIGINAL)
    holders = _holders(directory)
    if original is None:  # nothing was changed yet (or the entry is already gone)
        if not holders:
            _remove_dir(directory)
        return None
    kind, key = KINDS[original["kind"]], original["key"]
    if holders:
        kind.write(key, kind.combine([data["value"] for _, data in holders]))
        return None
    (kind.restore or kind.write)(key, original["value"])
    _remove_dir(directory)
    what = key if key == original["kind"] else f"{original['kind']} {key}"
    return f"{what} restored to {original['value']}"


def _remove_dir(directory: Path) -> None:
    for path in directory.iterdir():
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()


class Change:
    """One holder's change of one piece of host state: :meth:`apply` journals, then changes it;
    :meth:`release` restores it unless another holder still wants it changed."""

    def __init__(self, kind: str, key: str, value: Any) -> None:
        from isobench.liveness import runner_tag

        if kind not in KINDS:
            raise ValueError(f"unknown kind of host state {kind!r}")
        self.kind, self.key, self.value = kind, key, value
        self.owner = runner_tag()
        self.directory = target_dir(kind, key)
        self.holder = self.directory / f"{self.owner}-{next(_sequence)}.json"
        self.held = False

    def apply(self) -> None:
        with _locked():
            self.directory.mkdir(parents=True, exist_ok=True)
            if not (self.directory / ORIGINAL).exists():  # kept if there: a dead holder's is still the original
                _durable_write(self.directory / ORIGINAL, {"kind": self.kind, "key": self.key,
                                                           "value": KINDS[self.kind].read(self.key),
                                                           "saved_by": self.owner})
            _durable_write(self.holder, {"owner": self.owner, "value": self.value, "since": time.time_ns()})
            self.held = True
            try:
                _settle(self.directory)
            except BaseException:
                self.holder.unlink(missing_ok=True)
                self.held = False
                with contextlib.suppress(Exception):
                    _settle(self.directory)
                raise

    def release(self) -> None:
        if not self.held:
            return
        with _locked():
            self.holder.unlink(missing_ok=True)
            self.held = False
            _settle(self.directory)


@contextlib.contextmanager
def changed(kind: str, key: str, value: Any) -> Iterator[None]:
    """``kind``/``key`` set to ``value`` for the block, journaled, and put back after it."""
    change = Change(kind, key, value)
    change.apply()
    try:
        yield
    finally:
        change.release()


def holders(kind: str | None = None) -> list[dict[str, Any]]:
    """Every journaled holder (of one kind, if given), with the target it holds."""
    found = []
    if STATE_DIR.is_dir():
        for directory in sorted(p for p in STATE_DIR.iterdir() if p.is_dir()):
            original = _read_json(directory / ORIGINAL) or {}
            if kind is None or original.get("kind") == kind:
                found += [{**data, "kind": original.get("kind"), "key": original.get("key")}
                          for _, data in _holders(directory)]
    return found


def journal() -> list[dict[str, Any]]:
    """The originals still journaled: one per target isobench has changed and not yet put back."""
    if not STATE_DIR.is_dir():
        return []
    entries = (_read_json(directory / ORIGINAL) for directory in sorted(STATE_DIR.iterdir()) if directory.is_dir())
    return [entry for entry in entries if entry is not None]


def sweep_stale(kinds: set[str] | None = None) -> list[str]:
    """Restore what dead runners left changed (of these kinds, or all); say what was restored."""
    from isobench.liveness import tag_is_stale

    done: list[str] = []
    if not STATE_DIR.is_dir():
        return done
    with _locked():
        for directory in sorted(p for p in STATE_DIR.iterdir() if p.is_dir()):
            original = _read_json(directory / ORIGINAL)
            if kinds is not None and (original or {}).get("kind") not in kinds:
                continue
            for tmp in directory.glob(".*.tmp"):  # a write cut short; its holder never counted
                tmp.unlink(missing_ok=True)
            holders = _holders(directory)
            stale = [path for path, data in holders if tag_is_stale(str(data["owner"]))]
            if holders and not stale:
                continue  # live runners hold it: theirs to put back
            for path in stale:
                path.unlink(missing_ok=True)
            try:
                restored = _settle(directory)
            except Exception as exc:  # kept in the journal: a later repair tries again
                key = (original or {}).get("key", directory.name)
                done.append(f"could not restore {key}: {type(exc).__name__}: {exc}")
                continue
            if restored:
                done.append(restored)
    return done
