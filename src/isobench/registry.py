"""Plugin registries: platforms, workloads and probes are found by name, never by if-chains.

Plugins are found through Python entry points, as pytest and pyperf find theirs: the groups
``isobench.platforms``, ``isobench.workloads`` and ``isobench.probes``. An entry point names a
module to import, whose classes register themselves with the registry's decorator (the
built-ins do this; one module may register several names), or a class, which is registered
under the entry point's name::

    [project.entry-points."isobench.platforms"]
    myplatform = "my_package.platform"          # a module: @PLATFORMS.register("...") inside
    other = "my_package.other:OtherPlatform"    # a class: registered as "other"

Built-ins are declared the same way, in isobench's own pyproject.toml. Where isobench runs
from a source checkout (the src layout, an editable install) that file is read directly
rather than the installed metadata: an egg-info written before a built-in was added (or
before entry points existed at all) is stale, while the checkout's pyproject.toml always
describes the code beside it. An installed wheel's metadata is written with its code, so
there the metadata is used. (A package scan would need no list at all, but it imports
every helper module too, torch among them, inside each cell before its measured imports.)

Built-ins load first and a broken built-in is a bug that raises; a third-party plugin that
fails to load is skipped with one warning line naming it and its distribution.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")

DISTRIBUTION = "isobench"


@cache
def _checkout_entry_points() -> dict[str, dict[str, str]] | None:
    """group -> {name: value} from the source checkout's pyproject.toml; None when isobench
    is not running from a checkout."""
    import tomllib

    import isobench

    package_dir = Path(isobench.__file__).resolve().parent
    if package_dir.parent.name != "src":
        return None
    pyproject = package_dir.parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text()).get("project", {})
    except (OSError, ValueError):
        return None
    if project.get("name") != DISTRIBUTION:
        return None
    return project.get("entry-points", {})


@cache
def _installed_entry_points() -> metadata.EntryPoints:
    """Every installed entry point, read once per process (one pass over the distributions)."""
    return metadata.entry_points()


def _is_ours(entry_point: metadata.EntryPoint) -> bool:
    dist = getattr(entry_point, "dist", None)
    name = dist.metadata["Name"] if dist is not None else None
    return (name or "").lower().replace("_", "-") == DISTRIBUTION


def _distribution(entry_point: metadata.EntryPoint) -> str:
    dist = getattr(entry_point, "dist", None)
    if dist is None:
        return "an unknown distribution"
    return f"{dist.metadata['Name']} {dist.version}"


class Registry(Generic[T]):
    """A name -> class map filled by decorators in the plugin modules.

    Plugin modules are imported lazily (on the first lookup) so that importing the registry
    does not import torch or talk to a container engine.
    """

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        #: the entry-point group, e.g. "isobench.platforms"
        self.group = group
        self._items: dict[str, type[T]] = {}
        self._loaded = False
        #: third-party plugins that failed to load: "name (distribution)" -> why
        self.broken: dict[str, str] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorate(cls: type[T]) -> type[T]:
            if name in self._items and self._items[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name  # type: ignore[attr-defined]
            self._items[name] = cls
            return cls

        return decorate

    # -- loading ------------------------------------------------------------------------
    def builtin_entry_points(self) -> list[metadata.EntryPoint]:
        """isobench's own plugins: from the checkout's pyproject.toml, else the installed metadata."""
        declared = _checkout_entry_points()
        if declared is not None:
            return [metadata.EntryPoint(name, value, self.group)
                    for name, value in declared.get(self.group, {}).items()]
        return [ep for ep in _installed_entry_points().select(group=self.group) if _is_ours(ep)]

    def plugin_entry_points(self) -> list[metadata.EntryPoint]:
        """Third-party plugins, in a stable order."""
        found = [ep for ep in _installed_entry_points().select(group=self.group) if not _is_ours(ep)]
        return sorted(found, key=lambda ep: (_distribution(ep), ep.name))

    def _add(self, entry_point: metadata.EntryPoint) -> None:
        loaded: Any = entry_point.load()
        if isinstance(loaded, type) and loaded not in self._items.values():
            self.register(entry_point.name)(loaded)

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        builtins = self.builtin_entry_points()
        if not builtins:
            raise RuntimeError(f"isobench declares no {self.kind} plugins (entry-point group {self.group}): "
                               f"its installation is incomplete; reinstall it (pip install -e . in a checkout)")
        for entry_point in builtins:
            self._add(entry_point)  # a broken built-in is isobench's bug: it raises
        for entry_point in self.plugin_entry_points():
            before = dict(self._items)
            try:
                self._add(entry_point)
            except Exception as err:  # noqa: BLE001 (any failure of foreign code)
                self._items = before  # nothing half-registered stays
                label = f"{entry_point.name} ({_distribution(entry_point)})"
                why = f"{type(err).__name__}: {err}".splitlines()[0]
                self.broken[label] = why
                sys.stderr.write(f"warning: skipped the {self.kind} plugin {entry_point.name!r} "
                                 f"= {entry_point.value} from {_distribution(entry_point)}: {why}\n")

    def _load_builtin(self, name: str) -> None:
        """Only the built-in whose entry point is ``name``: a cell's worker looks up one workload,
        and importing every workload module costs it ~0.5 s here (numpy, data loaders) before
        anything is measured. Loading everything later (``names``, a plugin's name) stays safe:
        a module already imported registers nothing twice."""
        for entry_point in self.builtin_entry_points():
            if entry_point.name == name:
                self._add(entry_point)
                return

    # -- lookup -------------------------------------------------------------------------
    def get(self, name: str) -> type[T]:
        if name not in self._items and not self._loaded:
            self._load_builtin(name)
        if name not in self._items:
            self._load()
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        # a built-in name is answered by importing its module alone, as get() does: a study's
        # validation asks for each of its plugins, and loading every module cost `isobench plan`
        # ~0.8 s of its 2.3 s (numba, numpy, data loaders); an unknown name still loads everything
        if isinstance(name, str) and name not in self._items and not self._loaded:
            self._load_builtin(name)
        if name in self._items:
            return True
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, type[T]]]:
        self._load()
        return iter(sorted(self._items.items()))
