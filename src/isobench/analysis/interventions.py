"""Interventions: what a follow-up changes in a suspected entry to remove the cause a hint names.

An intervention (``Hint.test``) is the suspected entry run again with some of its knobs changed
(``data_mount: copy``, ``seccomp: unconfined``, ``malloc: tuned``) and, where the cause lies in how
the entry runs rather than in its resources, some of its own fields changed: gVisor on the other
runsc platform (``platform: ptrace``), a container on the host's network (``options: {network:
host}``). As a dict: ``{"workload", "entry", "knobs", "fields"}``; a field set to None, like a knob
set to None, is the entry without it, and ``options`` is merged key by key.

Everything here reads the stored study's platform entries and asks the platform classes (their
``takes_*`` attributes, ``validate_entry``, ``network_mode``): no rule names a platform.
"""

from __future__ import annotations

import functools
import json
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from isobench.study.model import PlatformEntry, Study

if TYPE_CHECKING:
    from isobench.store import Store

#: the entry fields an intervention may change: the rest name the entry (``name``, ``label``), hold
#: its knobs, or say how many cells run at once (``tenants``)
FIELDS = ("platform", "options", "runtime_path", "runtime", "image")


def intervention(workload: str, entry: str, knobs: dict[str, Any] | None = None,
                 fields: dict[str, Any] | None = None) -> dict[str, Any]:
    """``Hint.test``: the workload and entry (keys) and what the follow-up entry changes."""
    return {"workload": workload, "entry": entry, "knobs": dict(knobs or {}), "fields": dict(fields or {})}


def with_fields(written: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """A platform entry as a study writes it, with ``fields`` changed: a dict-valued field
    (``options``) merged key by key, None removing a key or a field."""
    out = dict(written)
    for name, value in fields.items():
        if isinstance(value, dict):
            merged = {**(out.get(name) or {}), **value}
            merged = {k: v for k, v in merged.items() if v is not None}
            if merged:
                out[name] = merged
            else:
                out.pop(name, None)
        elif value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def changed_entry(entry: PlatformEntry, fields: dict[str, Any]) -> PlatformEntry:
    """``entry`` with ``fields`` changed (ValueError: a value the schema refuses)."""
    foreign = sorted(set(fields) - set(FIELDS))
    if foreign:
        raise ValueError(f"{foreign[0]} is not a field an intervention changes (fix: one of {', '.join(FIELDS)})")
    try:
        return PlatformEntry(**with_fields(entry.model_dump(exclude_none=True), fields))
    except ValidationError as err:
        first = err.errors()[0]
        raise ValueError(f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from None


def engine_of(entry: PlatformEntry) -> tuple[str, ...]:
    """The entry's engine (``PlatformEntry.engine_key``) with the runsc platform's default spelled out:
    ``{name: gvisor}`` runs the same sandbox as ``{name: gvisor, platform: systrap}``."""
    from isobench.platforms import PLATFORMS

    if entry.name in PLATFORMS and PLATFORMS.get(entry.name).takes_runsc_platform and entry.platform is None:
        from isobench.platforms.runsc import DEFAULT_PLATFORM

        entry = entry.model_copy(update={"platform": DEFAULT_PLATFORM})
    return entry.engine_key()


def already_has(entry: PlatformEntry, fields: dict[str, Any]) -> bool:
    """The entry runs as the intervention would make it: nothing to test."""
    try:
        return engine_of(changed_entry(entry, fields)) == engine_of(entry)
    except ValueError:
        return False


def field_problem(entry: PlatformEntry, fields: dict[str, Any]) -> str | None:
    """Why the entry's platform does not take these field changes (None: it does), in words that
    follow "its platform": the same checks a study's loader makes."""
    from isobench.platforms import PLATFORMS

    if entry.name not in PLATFORMS:
        return f"{entry.name} is not a platform here"
    cls = PLATFORMS.get(entry.name)
    try:
        changed = changed_entry(entry, fields)
    except ValueError as err:
        return f"refuses {describe_fields(fields, written=True)} ({err})"
    if changed.platform is not None and not cls.takes_runsc_platform:
        return f"takes no runsc platform (`platform: {changed.platform}`)"
    if changed.runtime_path is not None and not cls.takes_runtime_path:
        return "takes no runtime binary (`runtime_path`)"
    try:
        cls.validate_entry(changed)
    except ValueError as err:
        return f"refuses {describe_fields(fields, written=True)} ({str(err).split(' (fix:')[0]})"
    return None


def describe_fields(fields: dict[str, Any], written: bool = False) -> str:
    """Field changes in words ("on platform=ptrace") or as a study writes them (`platform: ptrace`)."""
    parts = []
    for name, value in sorted(fields.items()):
        if isinstance(value, dict):
            inner = ", ".join(f"{k}: {v}" for k, v in sorted(value.items()))
            parts.append(f"`{name}: {{{inner}}}`" if written else
                         ", ".join(f"{name}.{k}={v}" for k, v in sorted(value.items())))
        elif value is None:
            parts.append(f"without `{name}`" if written else f"without {name}")
        else:
            parts.append(f"`{name}: {value}`" if written else f"{name}={value}")
    return " and ".join(parts)


def label_parts(fields: dict[str, Any]) -> list[str]:
    """The follow-up entry's label words for its field changes ("platform-ptrace", "network-host")."""
    parts = []
    for name, value in sorted(fields.items()):
        items = sorted(value.items()) if isinstance(value, dict) else [(name, value)]
        parts += [f"{k.replace('_', '-')}-{'none' if v is None else v}" for k, v in items]
    return parts


@functools.lru_cache(maxsize=8)
def _study(text: str) -> Study | None:
    from isobench.studyfile import load_study_text

    try:
        return load_study_text(text, "store", check_host=False)
    except (ValueError, OSError):
        return None


def stored_study(store: Store) -> Study | None:
    """The study the store ran, as written (None: not readable)."""
    return _study(store.meta("study_yaml") or "")


def stored_entries(store: Store) -> dict[str, PlatformEntry]:
    study = stored_study(store)
    return {p.key: p for p in study.platforms} if study else {}


def cores_per_cell(store: Store) -> int | None:
    """How many cores each cell had, as the runner recorded its core layout (None: not recorded)."""
    from isobench.hostinfo import parse_cpu_list

    try:
        facts = json.loads(store.meta("cores") or "null")
        sides = [parse_cpu_list(str(side)) for side in (facts or {}).get("sides") or []]
    except (ValueError, AttributeError):
        return None
    return min(len(side) for side in sides) if sides else None


def serving_network(entry: PlatformEntry) -> str | None:
    """The network the entry's serving cells get ("host", "bridge:..."), as its platform says;
    None where it cannot serve or the platform cannot say without a cell."""
    from isobench.platforms import PLATFORMS

    if entry.name not in PLATFORMS:
        return None
    try:  # network_mode reads only whether the cell serves
        return PLATFORMS.get(entry.name)(entry).network_mode(SimpleNamespace(network=True))  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - a platform that cannot serve, or needs a real cell to say
        return None


def same_test_entry(entries: dict[str, PlatformEntry], label: str, suspect: str, fields: dict[str, Any]) -> bool:
    """``label`` runs the suspect entry's engine with ``fields`` changed."""
    if label not in entries or suspect not in entries:
        return False
    try:
        return engine_of(entries[label]) == engine_of(changed_entry(entries[suspect], fields))
    except ValueError:
        return False
