"""What every root-cause hint is made of, shared by the rules in hints.py and field_hints.py: the
hint itself, the comparisons rules read, and how an intervention's result is found in a study."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from isobench.analysis.attribution import INJECTION_KNOBS
from isobench.analysis.compare import Comparison
from isobench.analysis.interventions import same_test_entry, stored_entries
from isobench.analysis.views import Context

#: what stands behind a hint: an intervention in the study removed the cost ("confirmed") or did not
#: ("refuted"), or there is evidence only and nothing tested it ("suspected")
HintStatus = Literal["confirmed", "refuted", "suspected"]


@dataclass
class Hint:
    rule: str
    text: str
    #: id of the figure or table in the report that shows the evidence
    figure: str
    status: HintStatus = "suspected"
    #: the intervention that would test a suspected hint (analysis/interventions.py): workload key,
    #: entry key, the knobs and the entry fields that remove the suspected cause (``isobench
    #: explain`` runs it); None when nothing can test it
    test: dict[str, Any] | None = None
    #: an intervention the evidence calls for that no follow-up of this study can run, and why (one
    #: line, "workload on entry: ..."; ``isobench explain`` lists it under "cannot test")
    untestable: str = ""


#: a phase grew when its comparison is resolved slower by at least this ratio
PHASE_GROWTH = 1.05
#: what a client adds to a served request outside the server (serve's, llm-serve's items)
STREAM_PHASES = ("connect", "transport")


def e2e_comparisons(ctx: Context) -> list[Comparison]:
    return [c for c in ctx.comparisons if c.metric == "e2e" and not c.is_aa and not c.emulated]


def entry_key(c: Comparison) -> tuple[str, ...]:
    return (c.workload, c.label, json.dumps(c.knobs, sort_keys=True, default=str), c.host,
            json.dumps(c.params, sort_keys=True, default=str))


def without_zero_injections(knobs: dict[str, Any]) -> dict[str, Any]:
    """An injection knob at 0 injects nothing, and a knob set to None is not set: the entry is the
    one without it."""
    return {k: v for k, v in knobs.items() if v is not None and not (k in INJECTION_KNOBS and not v)}


def intervention_result(ctx: Context, c: Comparison, knobs: dict[str, Any],
                        fields: dict[str, Any] | None = None) -> Comparison | None:
    """The comparison of the entry with ``knobs`` added and ``fields`` changed, where the study ran it."""
    wanted = without_zero_injections({**c.knobs, **knobs})
    entries = stored_entries(ctx.store) if fields else {}
    return next((t for t in ctx.comparisons if t.metric == c.metric and t.workload == c.workload and t.host == c.host
                 and t.params == c.params and without_zero_injections(t.knobs) == wanted
                 and (same_test_entry(entries, t.label, c.label, fields) if fields
                      else ctx.same_engine(t.label, c.label))), None)
