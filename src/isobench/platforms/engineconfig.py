"""Registering a runtime (runsc) in the Docker engine's ``daemon.json`` without harming it.

The file belongs to the host's administrator, so isobench merges one key into it and
nothing else: a file that is not plain JSON (dockerd itself accepts no comments, but
editors and other tools leave them) is refused with a line saying what to add by hand;
the file's mode and owner are kept; the new text replaces the old in one rename; and only
the dockerd processes that read this very file are asked to reload it (SIGHUP).
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_DAEMON_JSON = Path("/etc/docker/daemon.json")
#: where the engine configuration lives, for a host (or a test) that keeps it elsewhere
DAEMON_JSON_ENV = "ISOBENCH_DOCKER_DAEMON_JSON"


class EngineConfigError(RuntimeError):
    """daemon.json cannot be merged safely; the message says what to do by hand."""


def daemon_json_path() -> Path:
    return Path(os.environ.get(DAEMON_JSON_ENV) or DEFAULT_DAEMON_JSON)


def _by_hand(path: Path, name: str, entry: dict[str, Any], why: str) -> EngineConfigError:
    snippet = json.dumps({"runtimes": {name: entry}})
    return EngineConfigError(f"{path}: {why}; isobench does not rewrite it: merge {snippet} into it by hand, "
                             "then send dockerd SIGHUP")


def merge_runtime(path: Path, name: str, runtime_path: str, args: list[str]) -> str | None:
    """Add runtime ``name`` to the engine configuration at ``path``.

    Returns a one-line account of the change, or None when the file already had it.
    Raises EngineConfigError, leaving the file as it was, when it cannot be merged safely.
    """
    entry = {"path": runtime_path, "runtimeArgs": args}
    target = path.resolve()  # a symlinked daemon.json stays a symlink: write where it points
    try:
        text = target.read_text()
        stat: os.stat_result | None = target.stat()
    except FileNotFoundError:
        text, stat = "", None
    try:
        config = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise _by_hand(path, name, entry, f"not plain JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(config, dict) or not isinstance(config.get("runtimes", {}), dict):
        raise _by_hand(path, name, entry, "not a JSON object with a `runtimes` object")
    runtimes = config.setdefault("runtimes", {})
    before = runtimes.get(name)
    if before == entry:
        return None
    runtimes[name] = entry
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".isobench-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(config, indent=2) + "\n")
            handle.flush()
            # The administrator's mode and owner, not mkstemp's 0600 (dockerd may run as another user).
            os.fchmod(handle.fileno(), stat.st_mode & 0o7777 if stat else 0o644)
            if stat is not None:
                os.fchown(handle.fileno(), stat.st_uid, stat.st_gid)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    verb = "replaced" if before is not None else "added"
    return f"{path}: {verb} runtime {name!r} ({runtime_path} {' '.join(args)}); other settings kept"


def _dockerd_config(pid: int) -> tuple[int, int] | None:
    """(device, inode) of the configuration file a running dockerd reads, or None when ``pid``
    is no dockerd (or its file does not exist). Compared by identity, not by name, so an engine
    in another mount namespace or started with a relative ``--config-file`` is matched right."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "dockerd":
            return None
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    # A dockerd started from a script shows the interpreter first: its own arguments follow its name.
    start = next((i for i, arg in enumerate(argv) if os.path.basename(arg) == "dockerd"), 0)
    config = str(DEFAULT_DAEMON_JSON)
    words = argv[start + 1:]
    for index, word in enumerate(words):
        if word == "--config-file" and index + 1 < len(words):
            config = words[index + 1]
        elif word.startswith("--config-file="):
            config = word.split("=", 1)[1]
    seen_from = f"/proc/{pid}/root" if config.startswith("/") else f"/proc/{pid}/cwd/"
    try:
        info = os.stat(seen_from + config)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def engines_using(path: Path) -> list[int]:
    """Pids of the dockerd processes whose configuration file is ``path``."""
    try:
        info = os.stat(path)
    except OSError:
        return []
    wanted = (info.st_dev, info.st_ino)
    return sorted(int(entry.name) for entry in Path("/proc").iterdir()
                  if entry.name.isdigit() and _dockerd_config(int(entry.name)) == wanted)


def reload_engines(path: Path) -> list[int]:
    """SIGHUP only the engines that read ``path`` (they reload runtimes without a restart)."""
    pids = engines_using(path)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError:
            pids.remove(pid)
    return pids
