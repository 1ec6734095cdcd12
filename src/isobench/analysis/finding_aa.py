"""A check's A/A: the twin of its reference group, so a reader sees the check's false-alarm rate.

A twin is an entry that runs as the check's reference does in everything but its label, by
study/aa.py's rule with the reference in the baseline's place (the same platform, runtime, image,
options and knobs, no tenant group), for the same workload on the same host. The check's ratio
with the twin in the platform's place is what the design reads when nothing differs.
"""

from __future__ import annotations

from isobench.analysis.groups import Group
from isobench.study.aa import is_aa_group
from isobench.study.model import Study


def aa_twin(study: Study, groups: list[Group], reference: Group) -> Group | None:
    """The group that is ``reference`` again but for its label; None when the study has none."""
    entries = {p.key: p for p in study.platforms}
    if reference.platform_key not in entries:
        return None
    as_baseline = study.model_copy(update={"baseline": reference.platform_key})
    for group in groups:
        if (group is reference or group.workload != reference.workload or group.host != reference.host
                or group.platform_key not in entries):
            continue
        if is_aa_group(as_baseline, entries[group.platform_key], group.knobs, reference.knobs):
            return group
    return None
