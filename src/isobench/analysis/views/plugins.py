"""Other analysis modules' views (isolation layers, interference, density), when they exist."""

from __future__ import annotations

from typing import Any

from isobench.analysis.views.base import PB, Context, Figure, Skipped, Table, View, builder


@builder(110)
def plugin_views(ctx: Context) -> list[View]:
    import importlib

    views: list[View] = []
    for module_name in ("isobench.analysis.layer_ladder", "isobench.analysis.interference",
                        "isobench.analysis.density"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        try:
            if hasattr(module, "report_views"):
                views.extend(module.report_views(ctx))
            elif hasattr(module, "waterfalls"):
                views.extend(_waterfall_views(ctx, module.waterfalls(ctx.store), getattr(module, "unresolved_note", None)))
            elif hasattr(module, "summary_lines"):
                lines = module.summary_lines(ctx.store)
                if lines:
                    views.append(Table("tab-interference", "Multi-tenant interference", f"{PB}, Tables 9–10 (tenancy)",
                                       ["finding"], [[line] for line in lines]))
        except Exception as exc:  # another module's bug must not lose the report
            views.append(Skipped(module_name, module_name, "", f"could not build: {type(exc).__name__}: {exc}"))
    return views


def _waterfall_views(ctx: Context, waterfalls: list[Any], note: Any = None) -> list[View]:
    views: list[View] = []
    multi = len({getattr(w, "host", "") for w in waterfalls}) > 1
    for w in waterfalls:
        on = f" on {w.host}" if multi else ""  # a cluster study: one waterfall per host
        full_key = next((g.platform_key for g in ctx.groups if w.full in (g.display, g.platform_key)), w.full)
        entries = [(f"full: {w.full}", full_key, w.full_estimate)]
        entries += [(step.layer, step.layer, step.estimate) for step in w.steps]
        if w.remainder is not None:
            entries.append(("unexplained", "", w.remainder))
        entries = [e for e in entries if e[2].ci_low is not None]
        if not entries:
            continue
        fig_id = f"fig-layers-{w.workload}-{w.full}{on.replace(' on ', '-')}".replace("/", "-")
        rows = [[label, f"{est.ratio:.3f}", f"{est.ci_low:.3f}–{est.ci_high:.3f}"] for label, _, est in entries]
        views.append(Figure(fig_id, f"{w.workload}: {w.full}'s overhead, layer by layer (vs {w.baseline}){on}",
                            "isolation-layer ladder (no study did this)", "forest",
                            {"labels": [e[0] for e in entries], "keys": [e[1] for e in entries],
                             "ratio": [e[2].ratio for e in entries], "low": [e[2].ci_low for e in entries],
                             "high": [e[2].ci_high for e in entries], "floor": [None] * len(entries),
                             "xlabel": f"e2e time relative to {w.baseline} (×)"},
                            # what an unresolved overhead still says: the layers equivalence bounds
                            note=note(w) if note else "",
                            table=Table(fig_id + "-data", "", "", ["layer", "×", "95% CI"], rows)))
    return views
