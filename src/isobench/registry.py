"""Plugin registries: platforms, workloads and probes are found by name, never by if-chains."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A name -> class map filled by decorators in the plugin modules.

    Plugin modules are imported lazily (listed in ``modules``) so that importing the
    registry does not import torch or talk to a container engine.
    """

    def __init__(self, kind: str, modules: list[str]) -> None:
        self.kind = kind
        self._modules = modules
        self._items: dict[str, type[T]] = {}
        self._loaded = False

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        def decorate(cls: type[T]) -> type[T]:
            if name in self._items and self._items[name] is not cls:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            cls.name = name  # type: ignore[attr-defined]
            self._items[name] = cls
            return cls

        return decorate

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            for module in self._modules:
                importlib.import_module(module)

    def get(self, name: str) -> type[T]:
        self._load()
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items

    def __iter__(self) -> Iterator[tuple[str, type[T]]]:
        self._load()
        return iter(sorted(self._items.items()))
