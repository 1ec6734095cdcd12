"""What makes an A/A: an entry that is the baseline again in everything but its label.

An A/A comparison measures the study's noise floor, so it must differ from the baseline in
nothing that could cost time: the same platform name, runtime (its build and runsc platform too),
image and options, the same effective knobs (the study's merged with the entry's), and no tenant
group (a tenant group measures interference, never noise). Its label is free: a label names an
entry, it changes nothing that runs, so ``aa`` is not what makes an A/A and ``slow3`` with
``slowdown: 0.03`` is a comparison whatever its name. Workload parameters need no check here: the analysis only
ever compares groups of one workload variant.

Two levels, because knobs may be swept:

* :func:`is_aa_entry`: the plan's question, "is this entry an A/A of the baseline?": every knob
  combination it runs is one the baseline runs, and the other way round.
* :func:`is_aa_group`: the analysis' question, per knob combination: "is this group the baseline
  group's twin?". An entry that sweeps a knob the baseline also sweeps, but over fewer values,
  is no A/A entry, yet each of its groups whose knobs the baseline ran is an A/A group: it
  measures exactly what that baseline group does.
"""

from __future__ import annotations

import json
from typing import Any

from isobench.study.model import PlatformEntry, Study, knob_combinations


def knob_sets(study: Study, entry: PlatformEntry) -> list[dict[str, Any]]:
    """The knob combinations the entry's groups run: the study's knobs with the entry's on top,
    swept, unset (None) knobs left out: the same expansion as the plan's (plan/cells.py)."""
    return [{k: v for k, v in combo.items() if v is not None}
            for combo in knob_combinations({**study.knobs, **entry.knobs})]


def _tenants(study: Study, entry: PlatformEntry) -> int | list[str]:
    spec = entry.tenants if entry.tenants is not None else study.tenants
    return spec if spec else 1


def same_setup(study: Study, entry: PlatformEntry) -> bool:
    """The entry runs as the baseline entry does in everything but its label and knobs, as one
    cell at a time; the baseline entry itself is not its own A/A."""
    baseline = study.baseline_entry()
    if entry.key == baseline.key:
        return False
    if entry.engine_key() != baseline.engine_key():
        return False
    return _tenants(study, entry) == _tenants(study, baseline) == 1


def _canonical(knobs: dict[str, Any]) -> str:
    return json.dumps(knobs, sort_keys=True)


def is_aa_entry(study: Study, entry: PlatformEntry) -> bool:
    """The entry is the baseline again (everything but its label equal), knob combinations included."""
    if not same_setup(study, entry):
        return False
    return ({_canonical(k) for k in knob_sets(study, entry)}
            == {_canonical(k) for k in knob_sets(study, study.baseline_entry())})


def is_aa_group(study: Study, entry: PlatformEntry, knobs: dict[str, Any], baseline_knobs: dict[str, Any]) -> bool:
    """A group of ``entry`` with ``knobs``, compared with the baseline group with ``baseline_knobs``,
    is an A/A: the entry runs as the baseline does and both groups ran the same knobs."""
    return same_setup(study, entry) and knobs == baseline_knobs
