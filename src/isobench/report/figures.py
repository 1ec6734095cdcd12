"""Figures as inline SVG (matplotlib, Agg): one renderer per figure kind in analysis.views.

Platform colours come from one palette keyed by the study's platform order, so a platform has
the same colour in every figure; phases use a second palette. Sizes suit a 1280 px page.
"""

from __future__ import annotations

import io
import re
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from isobench.analysis.views import Figure  # noqa: E402
from isobench.report.plaintext import MPL_RC  # noqa: E402

PLATFORM_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
                    "#ccb974", "#64b5cd"]
PHASE_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]
#: one colour per phase name across every figure
NAMED_PHASES = {"fetch stall": "#8da0cb", "fetch_stall": "#8da0cb", "preprocess": "#8da0cb", "tokenize": "#8da0cb",
                "compute (forward+backward+optimizer)": "#66a61e", "forward": "#1b9e77", "inference": "#1b9e77",
                "backward": "#d95f02", "optimizer": "#7570b3", "postprocess": "#e6ab02", "logging": "#e7298a",
                "baseload": "#bdbdbd", "incremental": "#e6550d", "e2e": "#4c72b0", "total": "#4c72b0"}
WIDTH_IN = 11.0  # ≈ 1056 px at 96 dpi: fits a 1280 px window with margins


def platform_colours(order: list[str]) -> dict[str, str]:
    return {key: PLATFORM_COLOURS[i % len(PLATFORM_COLOURS)] for i, key in enumerate(order)}


def _svg(fig: Any) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: the SVG is inlined in HTML
    # Let the browser scale it to the column width.
    return re.sub(r'<svg([^>]*?) width="[^"]+" height="[^"]+"', r'<svg\1 style="max-width:100%;height:auto"',
                  text, count=1)


def render(figure: Figure, colours: dict[str, str]) -> str:
    plt.rcParams.update({"font.size": 10, "svg.fonttype": "none", "axes.spines.top": False,
                         "axes.spines.right": False})
    renderer = RENDERERS[figure.kind]
    with matplotlib.rc_context(MPL_RC):  # labels are text: "$\\foo$" is never math text
        return _svg(renderer(figure.data, colours))


def _colour_ticks(ax: Any, keys: list[str], colours: dict[str, str], axis: str = "y") -> None:
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    for label, key in zip(labels, keys, strict=False):
        label.set_color(colours.get(key, "#222222"))


def stacked(data: dict[str, Any], colours: dict[str, str]) -> Any:
    labels, stacks, scale = data["labels"], data["stacks"], data.get("scale", 1.0)
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.9 + 0.42 * len(labels)))
    left = [0.0] * len(labels)
    y = list(range(len(labels)))[::-1]
    for i, (name, values) in enumerate(stacks.items()):
        scaled = [v * scale for v in values]
        colour = NAMED_PHASES.get(name, PHASE_COLOURS[i % len(PHASE_COLOURS)])
        ax.barh(y, scaled, left=left, color=colour, label=name.replace("_", " "), height=0.62,
                edgecolor="white", linewidth=0.5)
        left = [a + b for a, b in zip(left, scaled, strict=True)]
    for yi, total in zip(y, left, strict=True):
        ax.text(total, yi, f" {total:,.0f}" if total >= 100 else f" {total:.3g}", va="center", fontsize=9)
    ax.set_yticks(y, labels)
    _colour_ticks(ax, data.get("keys", []), colours)
    ax.set_xlabel(data["xlabel"])
    ax.set_xlim(0, max(left + [1e-12]) * 1.15)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / max(1, len(labels)) - 0.12),
              ncol=min(5, len(stacks)), frameon=False)
    return fig


def forest(data: dict[str, Any], colours: dict[str, str]) -> Any:
    """Ratios with CIs on a log axis (ratios are multiplicative: 0.5× and 2× sit equally far from 1).
    Intervals wider than the axis are clipped and drawn with an arrow; the label keeps the true numbers."""
    labels = data["labels"]
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 0.8 + 0.36 * len(labels)))
    y = list(range(len(labels)))[::-1]
    ratios = [r for r in data["ratio"] if r and r > 0]
    span_low = min([*data["low"], *ratios, 0.98])
    span_high = max([*data["high"], *ratios, 1.02])
    lo_lim = max(span_low, min(ratios + [1.0]) / 4, 1 / 20)
    hi_lim = min(span_high, max(ratios + [1.0]) * 4, 20)
    lo_lim, hi_lim = min(lo_lim, 0.98), max(hi_lim, 1.02)
    for yi, key, ratio, low, high, floor in zip(y, data["keys"], data["ratio"], data["low"], data["high"],
                                                data["floor"], strict=True):
        if floor:
            # symmetric on the log axis: 1/(1+f) to 1+f
            ax.fill_betweenx([yi - 0.4, yi + 0.4], max(1 / (1 + floor), lo_lim), min(1 + floor, hi_lim), color="#dddddd",
                             zorder=0)
        colour = colours.get(key, "#333333")
        a, b = max(low, lo_lim), min(high, hi_lim)
        ax.plot([a, b], [yi, yi], color=colour, linewidth=2.2)
        if low < lo_lim:
            ax.plot([a], [yi], marker="<", color=colour, markersize=7)
        if high > hi_lim:
            ax.plot([b], [yi], marker=">", color=colour, markersize=7)
        ax.plot([min(max(ratio, lo_lim), hi_lim)], [yi], "o", color=colour, markersize=6)
        ax.text(b, yi, f"  {ratio:.3f}× [{low:.3g}, {high:.3g}]", va="center", fontsize=8.5, color="#333333")
    ax.axvline(1.0, color="#555555", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_xlim(lo_lim / 1.02, hi_lim * (hi_lim / lo_lim) ** 0.45)  # room on the right for the labels
    from matplotlib.ticker import FuncFormatter, LogLocator

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_minor_locator(LogLocator(base=10, subs=tuple(range(1, 10))))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if hi_lim / lo_lim < 1.6 else ""))
    ax.set_yticks(y, labels)
    _colour_ticks(ax, data["keys"], colours)
    ax.set_xlabel(data["xlabel"] + ", log scale")
    return fig


def bars(data: dict[str, Any], colours: dict[str, str]) -> Any:
    labels = data["labels"]
    fig, ax = plt.subplots(figsize=(WIDTH_IN * 0.8, 2.8))
    x = list(range(len(labels)))
    ax.bar(x, data["values"], yerr=data["errors"], capsize=4,
           color=[colours.get(k, "#4c72b0") for k in data["keys"]])
    ax.set_xticks(x, labels, rotation=20, ha="right")
    ax.set_ylabel(data["ylabel"])
    return fig


def lines(data: dict[str, Any], colours: dict[str, str]) -> Any:
    """One line per series over a shared x (e.g. an NVM capacity sweep); platforms keep their colour,
    and a marker and dash style per series tell same-platform lines apart."""
    fig, ax = plt.subplots(figsize=(WIDTH_IN * 0.8, 3.4))
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    for i, line in enumerate(data["series"]):
        ax.plot(data["x"], line["values"], label=line["label"], color=colours.get(line.get("key", "")),
                linestyle=styles[i % len(styles)], marker=markers[i % len(markers)], markersize=3)
    if data.get("logx"):
        ax.set_xscale("log")
    ax.set_xlabel(data["xlabel"])
    ax.set_ylabel(data["ylabel"])
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def heatmap(data: dict[str, Any], colours: dict[str, str]) -> Any:
    panels = data["panels"]
    cols = min(2, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH_IN, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=False):
        image = ax.imshow(panel["matrix"], aspect="auto", origin="lower", cmap="magma_r", interpolation="nearest",
                          extent=(panel["t0"], panel["t1"], 0, panel["pages"]))
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("time since the first write-back (s)")
        ax.set_ylabel("page (ranked by first write-back)")
        fig.colorbar(image, ax=ax, label="write-backs per bin")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


#: a violin's outline is drawn from at most this many of a label's values (evenly spaced quantiles):
#: a fleet's hundreds of thousands of samples made one figure take seconds to draw the same shape
VIOLIN_POINTS = 2000


def _quantile_thinned(values: list[float]) -> list[float]:
    if len(values) <= VIOLIN_POINTS:
        return values
    ordered = sorted(values)
    step = (len(ordered) - 1) / (VIOLIN_POINTS - 1)
    return [ordered[round(i * step)] for i in range(VIOLIN_POINTS)]


def violins(data: dict[str, Any], colours: dict[str, str]) -> Any:
    panels = data["panels"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(WIDTH_IN, 3.4 * len(panels)), squeeze=False)
    for ax, panel in zip(axes.flat, panels, strict=True):
        samples = [_quantile_thinned(s) if len(s) > 1 else (s * 2 if s else [0.0, 0.0]) for s in panel["samples"]]
        parts = ax.violinplot(samples, showmedians=True)
        for body, key in zip(parts["bodies"], panel["keys"], strict=True):
            body.set_facecolor(colours.get(key, "#4c72b0"))
            body.set_alpha(0.7)
        ax.set_xticks(range(1, len(panel["labels"]) + 1), panel["labels"], rotation=15, ha="right")
        _colour_ticks(ax, panel["keys"], colours, axis="x")
        ax.set_ylabel(panel["ylabel"])
        ax.set_title(panel["title"], fontsize=9, color="#555555")
    fig.tight_layout()
    return fig


RENDERERS = {"stacked": stacked, "forest": forest, "bars": bars, "heatmap": heatmap, "violins": violins, "lines": lines}
