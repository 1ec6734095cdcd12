"""A self-contained SVG of the capacity sweep: latency improvement against NVM size."""

from __future__ import annotations

import math
from typing import Any


def sweep_svg(rows: list[dict[str, Any]], title: str, width: int = 720, height: int = 420) -> str:
    left, right, top, bottom = 70, 20, 40, 60
    plot_w, plot_h = width - left - right, height - top - bottom
    caps = [max(1, r["capacity"]) for r in rows]
    gains = [100 * r["improvement"] for r in rows]
    lo, hi = math.log10(min(caps)), math.log10(max(caps)) if max(caps) > min(caps) else math.log10(min(caps)) + 1

    def x(cap: float) -> float:
        return left + (math.log10(cap) - lo) / (hi - lo) * plot_w

    def y(gain: float) -> float:
        return top + (100 - max(0.0, min(100.0, gain))) / 100 * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for tick in range(0, 101, 20):
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(tick)}" y2="{y(tick)}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 8}" y="{y(tick) + 4}" text-anchor="end">{tick}%</text>')
    for exponent in range(math.floor(lo), math.ceil(hi) + 1):
        if lo <= exponent <= hi:
            px = x(10**exponent)
            parts.append(f'<line x1="{px}" x2="{px}" y1="{top}" y2="{top + plot_h}" stroke="#eee"/>')
            parts.append(f'<text x="{px}" y="{top + plot_h + 18}" text-anchor="middle">{10**exponent:g}</text>')
    points = " ".join(f"{x(c):.1f},{y(g):.1f}" for c, g in zip(caps, gains, strict=True))
    parts.append(f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    parts += [f'<circle cx="{x(c):.1f}" cy="{y(g):.1f}" r="2.5" fill="#1f77b4"/>' for c, g in zip(caps, gains, strict=True)]
    parts.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="black"/>')
    parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="black"/>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 15}" text-anchor="middle">'
                 'NVM capacity (4 KiB pages, log scale)</text>')
    parts.append(f'<text x="18" y="{top + plot_h / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 18 {top + plot_h / 2})">mean I/O latency improvement (%)</text>')
    parts.append("</svg>")
    return "\n".join(parts)
