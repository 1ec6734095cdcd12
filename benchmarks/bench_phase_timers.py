"""What the phase timers cost per item, measured in one run.

Three loops of the same items: without timers, with the training loop's PhaseClock (start,
five laps, stop), and with PhaseClock plus the record written for each item (JSON to a
null stream, as CellContext.item does). Twice: over empty phases (the timers' own cost),
and over LeNet-5 minibatches of 8 (the smallest real item in the catalogue), where the
ratio says what the timers add to a measurement. Best of several interleaved rounds after a
warm-up, since other processes on the machine only ever add time.

    .venv/bin/python benchmarks/bench_phase_timers.py [--items 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

from isobench.workloads.channel import CellContext
from isobench.workloads.timing import PhaseClock

PHASES = ("fetch_stall", "forward", "backward", "optimizer", "logging")


def best_of(rounds: int, runs: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Best time of each loop; one warm-up each, then rounds interleave the loops so drift in
    the machine's load reaches them alike."""
    for run in runs.values():
        run()
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def loops(items: int, work: list[Callable[[], object]]) -> dict[str, Callable[[], None]]:
    ctx = CellContext(io.StringIO(), {"cell_id": "bench"})
    clock = PhaseClock()
    steps = list(zip(PHASES, work, strict=True))

    def bare() -> None:  # the same loop over (name, step) pairs, minus the clock
        for _ in range(items):
            for _name, step in steps:
                step()

    def timed() -> None:
        for _ in range(items):
            clock.start()
            for name, step in steps:
                step()
                clock.lap(name)
            clock.stop()

    def timed_and_recorded() -> None:
        ctx._stream = io.StringIO()  # a fresh sink each round, so memory does not grow across rounds
        for _ in range(items):
            clock.start()
            for name, step in steps:
                step()
                clock.lap(name)
            ctx.item(*clock.stop())

    return {"no timers": bare, "PhaseClock": timed, "PhaseClock + record": timed_and_recorded}


def lenet_work() -> list[Callable[[], object]]:
    import torch

    from isobench.workloads.nets import build_lenet5

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_lenet5()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    state: dict[str, torch.Tensor] = {}

    def forward() -> None:
        state["loss"] = torch.nn.functional.cross_entropy(model(x), y)

    def backward() -> None:
        state["loss"].backward()

    def step() -> None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return [lambda: None, forward, backward, step, lambda: None]


def report(title: str, items: int, rounds: int, work: list[Callable[[], object]]) -> None:
    results = best_of(rounds, loops(items, work))
    base = results["no timers"]
    print(f"\n{title}: {items} items × {len(PHASES)} phases, best of {rounds}")
    print(f"{'loop':<22}{'µs/item':>12}{'ratio':>9}{'added ns/item':>15}{'added ns/phase':>16}")
    for name, seconds in results.items():
        added = (seconds - base) / items * 1e9
        print(f"{name:<22}{seconds / items * 1e6:>12.3f}{seconds / base:>9.4f}{added:>15.0f}"
              f"{added / len(PHASES):>16.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    report("empty phases (the timers' own cost)", args.items, args.rounds, [lambda: None] * len(PHASES))
    report("LeNet-5 minibatches of 8 (forward, backward, SGD step)", max(args.items // 100, 50), args.rounds,
           lenet_work())


if __name__ == "__main__":
    main()
