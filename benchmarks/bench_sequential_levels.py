"""Stopping a comparison at each look's level against at its alpha increment: rounds, wrong stops
and the 95% interval's coverage where it stops (docs/statistics.md's table).

Simulated duet pairs (no cells run): log ratios with a true effect and a spread per pair, normal
or heavy-tailed (a t with 4 degrees of freedom, scaled); a look after every round from round 6 to
24, each stopping as `repetitions: auto` does (runner/adaptive.py: the verdict at the look's level,
a direction only once its size is stated). A wrong stop is a direction where there is none, or
equivalence within ±2% of a 3% effect.

    .venv/bin/python benchmarks/bench_sequential_levels.py [--studies 2000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from isobench.analysis.stats import paired_of_diffs
from isobench.analysis.verdict import DIRECTIONS, verdict_and_reason
from isobench.runner.adaptive import look_alpha, look_level, size_resolved

MAX_ROUNDS, FIRST_LOOK, MARGIN = 24, 6, 0.02
FRACTIONS = {r: r / MAX_ROUNDS for r in range(FIRST_LOOK, MAX_ROUNDS + 1)}


def one_study(effect: float, spread: float, rule: str, rng: random.Random, heavy: bool) -> tuple[int, bool, str]:
    """(rounds run, whether the final 95% interval covers the truth, the verdict it stopped on)."""
    diffs: list[float] = []
    looks: list[int] = []
    verdict = "inconclusive"
    for r in range(1, MAX_ROUNDS + 1):
        noise = rng.gauss(0, spread) if not heavy else spread * rng.gauss(0, 1) / math.sqrt(rng.gammavariate(2, 0.5) * 2)
        diffs.append(math.log1p(effect) + noise)
        if r < FIRST_LOOK:
            continue
        looks.append(r)
        est = paired_of_diffs(diffs)
        level = look_level(looks, FRACTIONS) if rule == "level" else look_alpha(r, MAX_ROUNDS, looks)
        verdict, _ = verdict_and_reason("e2e", est.log_ratio, est.se, est.df, est.p_value, MARGIN, level, n=r)
        width = (math.log(est.ci_high) - math.log(est.ci_low)) / 2
        if verdict != "inconclusive" and (verdict not in DIRECTIONS or size_resolved(est.log_ratio, width, MARGIN)):
            break
    est = paired_of_diffs(diffs)
    return r, est.ci_low <= 1 + effect <= est.ci_high, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=2000)
    studies = parser.parse_args().studies
    print("| pairs (spread per pair) | true effect | rounds, at the increment / at the level | wrong stops "
          "| 95% interval covers the truth |")
    print("|---|---|---|---|---|")
    for heavy in (False, True):
        for spread in (0.019, 0.03, 0.04):
            for effect in (0.03, 0.0):
                cells = []
                for rule in ("increment", "level"):
                    rng = random.Random(5)
                    runs = [one_study(effect, spread, rule, rng, heavy) for _ in range(studies)]
                    wrong = statistics.fmean((effect == 0 and v in DIRECTIONS) or (effect >= MARGIN and v == "equivalent")
                                             for _, _, v in runs)
                    cells.append((statistics.fmean(r for r, _, _ in runs), wrong, statistics.fmean(c for _, c, _ in runs)))
                (r0, w0, c0), (r1, w1, c1) = cells
                kind = "heavy-tailed" if heavy else "normal"
                print(f"| {kind}, {spread:.1%} | {f'{effect:.0%}' if effect else 'none'} | {r0:.1f} / {r1:.1f} "
                      f"| {w0:.1%} / {w1:.1%} | {c0:.3f} / {c1:.3f} |")


if __name__ == "__main__":
    main()
