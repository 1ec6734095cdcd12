"""A paper's study as its replication runs it: the built-in study with the paper's overrides,
at toy size with ``--quick``, its budget capped with ``--max-minutes``. Read by the replication
(replicate/run.py) and its power runs (replicate/power.py) alike."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from isobench.analysis.finding_spec import PaperFindings


def study_text(paper: PaperFindings, study: str, quick: bool, max_minutes: float | None) -> str:
    """The built-in study with the paper's ``overrides:`` fields in place of the study's, at toy
    size with ``quick`` (its ``quick:`` fields replace them again), its adaptive budget capped at
    ``max_minutes`` when given."""
    data: dict[str, Any] = yaml.safe_load(resources.files("isobench.studies").joinpath(f"{study}.yaml").read_text())
    data.update(paper.overrides.get(study, {}))
    if quick:
        data.update(paper.quick.get(study, {}))
        if data.get("repetitions") != "auto":
            data.pop("adaptive", None)
    if max_minutes is not None and data.get("repetitions") == "auto":
        adaptive = dict(data.get("adaptive") or {})
        adaptive["max_time_s"] = min(float(adaptive.get("max_time_s", max_minutes * 60)), max_minutes * 60)
        data["adaptive"] = adaptive
    return yaml.safe_dump(data, sort_keys=False)
