"""Execution platforms: plugins behind one interface (prepare / launch / collect / cleanup)."""

from isobench.platforms.base import Availability, Launched, Platform
from isobench.registry import Registry

# each module registers its classes; the modules are pyproject.toml's entry points (isobench.registry)
PLATFORMS: Registry[Platform] = Registry("platform", "isobench.platforms")



def platform_variants() -> list[tuple[str, str | None]]:
    """(platform name, runtime) of every variant `isobench doctor` checks, sorted."""
    variants = [("docker", None), ("gvisor", None), ("oci", "runc"), ("oci", "crun"), ("oci", "runsc"),
                ("baremetal", None), ("podman", None), ("vm", None), ("microvm", None), ("vm-container", None),
                *((name, None) for name, _ in PLATFORMS if name.startswith("layer-"))]
    return sorted(variants, key=lambda v: (v[0], v[1] or ""))


__all__ = ["PLATFORMS", "Availability", "Launched", "Platform", "platform_variants"]
