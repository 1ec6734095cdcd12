"""The cluster scheduler's policy, without Ray: warm-ups per host, whole rounds per host, splitting
only what no host can run whole, lost units to nodes alike, and fleets (`each`)."""

from __future__ import annotations

from typing import Any

from isobench.plan.cells import Cell
from isobench.runner.nodes import Node
from isobench.runner.scheduler import MAX_RERUNS, Scheduler


def cell(platform: str, rep: int, warmup: bool = False, **params: Any) -> Cell:
    return Cell(study="s", cell_id=f"{platform}-r{rep}{'-w' if warmup else ''}", seq=0, workload="cpu-spin",
                workload_key="cpu-spin", params=params, platform="docker", platform_key=platform,
                platform_entry={}, knobs={}, rep=rep, warmup=warmup, seed=0, timeout_s=60)


def node(host: str, platforms: str = "ab", rack: str = "a", gpus: int = 0) -> Node:
    usable = {key: "" if key in platforms else "not here" for key in "ab"}
    return Node(info={"host_key": host, "node_id": host, "labels": {"rack": rack}, "gpus": gpus}, actor=None,
                usable=usable)


def ids(unit: list[Cell] | None) -> list[str]:
    return [c.cell_id for c in unit or []]


def drain(scheduler: Scheduler, *nodes: Node) -> list[list[str]]:
    """Ask the nodes in turn, one unit each time (as the head does), until none gets more."""
    taken: list[list[str]] = [[] for _ in nodes]
    while True:
        units = [scheduler.next_unit(n) for n in nodes]
        if all(u is None for u in units):
            return taken
        for mine, unit in zip(taken, units, strict=True):
            mine += ids(unit)


PLAN = [cell("a", 0, warmup=True), cell("b", 0, warmup=True),
        cell("a", 0), cell("b", 0), cell("a", 1), cell("b", 1)]


def test_spread_warms_each_host_up_then_gives_each_a_whole_round() -> None:
    one, two = node("h1"), node("h2")
    scheduler = Scheduler([one, two], PLAN, done=set(), mode="spread")
    # each host's own warm-up first, then one whole round per host
    assert drain(scheduler, one, two) == [["a-r0-w@h1", "b-r0-w@h1", "a-r0", "b-r0"],
                                          ["a-r0-w@h2", "b-r0-w@h2", "a-r1", "b-r1"]]
    assert scheduler.stranded_rounds() == []


def test_finished_cells_are_not_handed_out_again() -> None:
    one = node("h1")
    scheduler = Scheduler([one], PLAN, done={"a-r0-w@h1", "a-r0", "b-r1"}, mode="spread")
    assert drain(scheduler, one) == [["b-r0-w@h1", "b-r0", "a-r1"]]


def test_a_round_is_split_only_when_no_node_runs_it_whole() -> None:
    only_a, both = node("h1", "a"), node("h2", "ab")
    scheduler = Scheduler([only_a, both], PLAN[2:4], done=set(), mode="spread")
    # h2 can keep the round on one host: h1 leaves it alone
    assert drain(scheduler, only_a, both) == [[], ["a-r0", "b-r0"]]

    only_a, only_b = node("h1", "a"), node("h2", "b")
    scheduler = Scheduler([only_a, only_b], PLAN[2:4], done=set(), mode="spread")
    assert drain(scheduler, only_a, only_b) == [["a-r0"], ["b-r0"]]  # nobody runs it whole: split


def test_a_lost_node_s_units_go_to_a_node_alike_until_tried_too_often() -> None:
    one, two, other_rack = node("h1"), node("h2"), node("h3", rack="b")
    scheduler = Scheduler([other_rack, one, two], [], done=set(), mode="spread")  # first: it must be passed over
    unit = [cell("a", 0)]
    for attempt in range(MAX_RERUNS):
        lost, alive = (one, two) if attempt % 2 == 0 else (two, one)
        lost.alive, alive.alive = False, True
        assert scheduler.reassign(lost, [unit], "gone") == []
        unit = alive.queue.popleft()  # to the live node alike, never to the other rack
        assert not other_rack.queue and ids(unit) == ["a-r0"]
    lost, alive = (two, one) if MAX_RERUNS % 2 else (one, two)  # the unit's holder goes, an alike lives
    lost.alive, alive.alive = False, True
    (stranded, why), = scheduler.reassign(lost, [unit], "gone")
    assert not alive.queue
    assert ids(stranded) == ["a-r0"] and f"tried {MAX_RERUNS + 1} times" in why

    one.alive = two.alive = False
    (_, why), = scheduler.reassign(two, [[cell("b", 0)]], "gone")
    assert "no live node has its labels {'rack': 'a'}" in why


def test_each_mode_gives_every_host_the_whole_plan_and_records_what_it_cannot_run() -> None:
    cpu_host, gpu_host = node("h1"), node("h2", gpus=1)
    plan = [cell("a", 0), cell("b", 0, device="cuda")]
    scheduler = Scheduler([cpu_host, gpu_host], plan, done=set(), mode="each")
    assert drain(scheduler, cpu_host, gpu_host) == [["a-r0@h1"], ["a-r0@h2", "b-r0@h2"]]
    (unit, why), = scheduler.unrunnable
    assert ids(unit) == ["b-r0@h1"] and "needs a GPU" in why


def pair(rep: int, warmup: bool = False) -> list[Cell]:
    """A duet pair of round ``rep``: a baseline cell (platform a) beside the compared one (b)."""
    from dataclasses import replace

    from isobench.plan.cells import DuetInfo

    tag = f"{'w' if warmup else 'r'}{rep}:b"
    return [replace(cell("a", rep, warmup), cell_id=f"a-r{rep}{'-w' if warmup else ''}/duet-b",
                    duet=DuetInfo(tag, "b", rep % 2, "b", 0.02)),
            replace(cell("b", rep, warmup), duet=DuetInfo(tag, "b", 1 - rep % 2, "a", 0.02))]


DUET_PLAN = [*pair(0, warmup=True), *pair(0), *pair(1), *pair(2)]


def test_a_duet_pair_is_one_unit_never_split_and_rerun_whole() -> None:
    one, two, only_a = node("h1"), node("h2"), node("h3", "a")
    scheduler = Scheduler([one, two, only_a], DUET_PLAN, done=set(), mode="spread")
    units = [[scheduler.next_unit(n) for n in (one, two, only_a)] for _ in range(3)]
    # every unit handed out is a whole pair, both members at once; the node that cannot run
    # the compared member is never given its baseline partner alone
    handed = [u for turn in units for u in turn if u is not None]
    assert all(len(u) == 2 and u[0].duet and u[0].duet.pair == u[1].duet.pair for u in handed), handed
    assert all(u is None for u in (turn[2] for turn in units))
    # each host warms up with its own pair, whose pair id names the host
    warm = [u for u in handed if u[0].warmup]
    assert sorted(u[0].duet.pair for u in warm) == ["w0:b@h1", "w0:b@h2"]
    assert sorted(u[1].cell_id for u in handed if not u[0].warmup) == ["b-r0", "b-r1", "b-r2"]

    # h1 is lost mid-pair: the whole pair goes to the node alike, both members tried again
    one.alive = False
    running = next(u for u in handed if u[1].cell_id == "b-r0")
    assert scheduler.reassign(one, [running], "gone") == []
    again = two.queue[0]
    assert ids(again) == ["a-r0/duet-b", "b-r0"] and {c.reruns for c in again} == {1}
    assert {c.lost_on for c in again} == {"h1"}

    # a pair that no live node can run whole is not split: it is stranded whole
    alone = Scheduler([only_a], DUET_PLAN[2:4], done=set(), mode="spread")
    assert alone.next_unit(only_a) is None
    assert [ids(u) for u in alone.stranded_rounds()] == [["a-r0/duet-b", "b-r0"]]


def test_each_mode_suffixes_a_duet_pair_per_host() -> None:
    one, only_a = node("h1"), node("h2", "a")
    scheduler = Scheduler([one, only_a], DUET_PLAN[2:4], done=set(), mode="each")
    unit = scheduler.next_unit(one)
    assert ids(unit) == ["a-r0/duet-b@h1", "b-r0@h1"] and {c.duet.pair for c in unit} == {"r0:b@h1"}
    (unrunnable, why), = scheduler.unrunnable  # h2 runs a but not b: the pair is unavailable there, whole
    assert ids(unrunnable) == ["a-r0/duet-b@h2", "b-r0@h2"] and "b cannot run on host h2: not here" in why
