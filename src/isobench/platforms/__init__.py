"""Execution platforms: plugins behind one interface (prepare / launch / collect / cleanup)."""

from isobench.platforms.base import Availability, Launched, Platform
from isobench.registry import Registry

PLATFORMS: Registry[Platform] = Registry(
    "platform",
    [
        "isobench.platforms.baremetal",
        "isobench.platforms.docker",
        "isobench.platforms.oci",
        "isobench.platforms.vm",
        "isobench.platforms.layers",
        "isobench.platforms.podman",
    ],
)

__all__ = ["PLATFORMS", "Availability", "Launched", "Platform"]
