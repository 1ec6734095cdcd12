"""Where cells put what must outlive them (trained models): ``<study out>/artifacts``.

The directory is on the host, next to the study's results, and every platform mounts it
read-write at the same path, so a model trained in a container is a file on the host that
a later cell (on any platform) loads.
"""

from __future__ import annotations

from pathlib import Path

from isobench.plan.cells import Cell


def artifacts_dir_for(cell: Cell, out: Path) -> str | None:
    """The study's artifacts directory for cells whose workload uses one, else None."""
    from isobench.workloads import WORKLOADS

    if not WORKLOADS.get(cell.workload).uses_artifacts:
        return None
    path = (out / "artifacts").resolve()
    path.mkdir(parents=True, exist_ok=True)
    return str(path)
