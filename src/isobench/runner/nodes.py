"""What the head knows of a cluster node: the labels that say what kind of node it is, the host
it stands for, and its queue of units (:class:`Node`). Pure data, no Ray."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from isobench.plan.cells import Cell

#: the Ray node label that names the host a node stands for (default: its hostname)
HOST_LABEL = "isobench-host"
#: labels that identify one node rather than describe a class of nodes
IDENTITY_LABEL_PREFIXES = ("ray.io/", HOST_LABEL)


def class_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels that describe what kind of node this is (a lost node's cells go to a node alike)."""
    return {k: v for k, v in labels.items() if not k.startswith(IDENTITY_LABEL_PREFIXES)}


def safe_host_key(name: str) -> str:
    """A host name fit for a cell id suffix."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "host"


def matches(labels: dict[str, str], wanted: dict[str, str | list[str]]) -> bool:
    for key, value in wanted.items():
        allowed = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        if labels.get(key) not in allowed:
            return False
    return True


@dataclass
class Node:
    info: dict[str, Any]
    actor: Any
    usable: dict[str, str] = field(default_factory=dict)
    queue: deque[list[Cell]] = field(default_factory=deque)
    running: dict[Any, tuple[list[Cell], float]] = field(default_factory=dict)  # ref -> (unit, sent at)
    alive: bool = True
    warmed: bool = False

    @property
    def host(self) -> str:
        return str(self.info["host_key"])

    @property
    def kind(self) -> dict[str, str]:
        """What a node alike must share: its class labels. Docker and KVM are left to ``can_run``
        (the KVM label may be stale or untested on a node that is otherwise the same)."""
        return {k: v for k, v in class_labels(self.info["labels"]).items() if k not in ("host", "docker", "kvm")}

    def can_run(self, unit: list[Cell]) -> bool:
        """Whether this node runs every member of the unit (a duet pair's two platforms differ)."""
        for cell in unit:
            if self.usable.get(cell.platform_key, "unknown") != "":
                return False
            if str(cell.params.get("device", "cpu")).startswith("cuda") and not self.info.get("gpus"):
                return False
        return True

    def why_not(self, unit: list[Cell]) -> str:
        """Why this node cannot run the unit (for the record of a cell it never ran)."""
        for cell in unit:
            reason = self.usable.get(cell.platform_key, "unknown")
            if reason:
                return f"{cell.platform_key} cannot run on host {self.host}: {reason}"
        return f"{unit[0].platform_key} cannot run on host {self.host}: it needs a GPU and this host has none"
