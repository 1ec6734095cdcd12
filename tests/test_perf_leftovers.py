"""The perf probe's output directories: named by the runner, so the next run removes what a killed
runner left in /dev/shm and nothing a live runner (or another tool) still uses."""

from __future__ import annotations

from pathlib import Path

from isobench.liveness import boot_id, runner_tag
from isobench.probes.perf import WORKDIR_PREFIX, sweep_stale_workdirs


def test_only_the_directories_of_dead_runners_and_empty_untagged_ones_are_removed(tmp_path: Path) -> None:
    other_boot = tmp_path / f"{WORKDIR_PREFIX}4242-{'0' * 8 if boot_id()[:8] != '0' * 8 else '1' * 8}-abc"
    live = tmp_path / f"{WORKDIR_PREFIX}{runner_tag()}-def"
    empty_untagged = tmp_path / f"{WORKDIR_PREFIX}x1y2z3"
    full_untagged = tmp_path / f"{WORKDIR_PREFIX}q9w8e7"
    for path in (other_boot, live, empty_untagged, full_untagged):
        path.mkdir()
    for path in (other_boot, live, full_untagged):
        (path / "cell.csv").write_text("1,,task-clock\n")
    removed = sweep_stale_workdirs(tmp_path)
    assert sorted(removed) == sorted(f"perf output {p}" for p in (other_boot, empty_untagged))
    assert live.exists() and full_untagged.exists()
    assert not other_boot.exists() and not empty_untagged.exists()
