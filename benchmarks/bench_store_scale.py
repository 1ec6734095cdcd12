"""The store and its readers at fleet scale, against the row layout, in one run.

Builds synthetic stores (benchmarks/synthetic_store.py: realistic cells, 2,400 item-phase values
each, ~100 metrics, the default probes' series, duet pairs, 25 hosts) and times, each in a fresh
process with its peak memory:

* ``rows @ N_OLD``: the last isobench with one row per item and phase (``--old-rev``, its ``src``
  and ``pyproject.toml`` unpacked from git into a temporary directory and put first on
  PYTHONPATH), writing and reading its own store of N_OLD cells;
* ``columnar @ N_OLD``: this checkout, the same cells;
* ``columnar @ N_NEW``: this checkout at fleet scale (10,000 cells by default).

Steps: record (ms per cell, inside ``Store.record_all``), store size (KB per cell), ``summary
--json``, ``report`` and ``export --format parquet``. Then the targets at N_NEW, pass or fail,
and the ratios of the side-by-side runs. The load average and steal time are printed beside.

    .venv/bin/python benchmarks/bench_store_scale.py [--cells 10000] [--old-cells 1000] [--old-rev REV]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the last commit whose store keeps one row per item and phase (store schema version 1)
ROW_LAYOUT_REV = "bb58705"
#: issue 26's targets at 10,000 cells
TARGETS = {"summary --json": 5.0, "report": 20.0, "export --format parquet": 10.0}
PEAK_TARGET_MB = 1024
SIZE_TARGET_KB = 80


def cpu_jiffies() -> tuple[int, int]:
    """(all, steal) jiffies from /proc/stat's cpu line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), fields[7] if len(fields) > 7 else 0


def measured(argv: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall seconds and peak RSS (MB) of one fresh process, its stdout kept."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_chunks: list[bytes] = []
    assert proc.stdout is not None and proc.stderr is not None
    out_chunks.append(proc.stdout.read())
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err.decode(errors='replace').strip()[-800:]}")
    return wall, usage.ru_maxrss / 1024, b"".join(out_chunks).decode(errors="replace")


def unpack_old(rev: str, into: Path) -> Path:
    """``src`` and ``pyproject.toml`` of ``rev``, unpacked (no checkout, no change to git state)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src", "pyproject.toml"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


def run_side(name: str, src: Path, cells: int, work: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    store = work / name.replace(" ", "").replace("@", "-")
    print(f"  {name}: building {cells} cells ...", file=sys.stderr, flush=True)
    _, build_peak, out = measured([sys.executable, str(ROOT / "benchmarks" / "synthetic_store.py"), str(store),
                                   "--cells", str(cells)], env)
    built = json.loads(out.strip().splitlines()[-1])
    db = store / "isobench.sqlite"
    row = {"cells": built["cells"], "record ms/cell": 1000 * built["record_s"] / built["cells"]}
    cli = [sys.executable, "-m", "isobench.cli"]
    steps = {"summary --json": [*cli, "summary", "--json", str(store)],
             "report": [*cli, "report", str(store), "-o", str(work / f"{store.name}.html")],
             "export --format parquet": [*cli, "export", str(store), "--format", "parquet",
                                         "-o", str(work / f"{store.name}.parquet")]}
    for step, argv in steps.items():
        print(f"  {name}: {step} ...", file=sys.stderr, flush=True)
        wall, peak, _ = measured(argv, env)
        row[f"{step} s"], row[f"{step} MB"] = wall, peak
    row["store KB/cell"] = db.stat().st_size / 1024 / built["cells"]  # after the readers' migration, if any
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--old-cells", type=int, default=1_000)
    parser.add_argument("--old-rev", default=ROW_LAYOUT_REV)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    total0, steal0 = cpu_jiffies()
    with tempfile.TemporaryDirectory(prefix="isobench-bench-store-") as tmp:
        work = Path(tmp)
        (work / "old").mkdir()
        old_src = unpack_old(args.old_rev, work / "old")
        rows = {f"rows @ {args.old_cells}": run_side(f"rows @ {args.old_cells}", old_src, args.old_cells, work),
                f"columnar @ {args.old_cells}": run_side(f"columnar @ {args.old_cells}", ROOT / "src",
                                                         args.old_cells, work),
                f"columnar @ {args.cells}": run_side(f"columnar @ {args.cells}", ROOT / "src", args.cells, work)}
    total1, steal1 = cpu_jiffies()
    names = list(rows)
    measures = list(rows[names[0]])
    width = max(len(m) for m in measures) + 2
    print(f"{'':{width}}" + "".join(f"{n:>22}" for n in names))
    for measure in measures:
        print(f"{measure:{width}}" + "".join(f"{rows[n][measure]:>22.{0 if measure == 'cells' else 2}f}"
                                             for n in names))
    old, same, big = (rows[n] for n in names)
    print("\nratios, columnar / rows at the same size (side by side in this run):")
    for measure in measures[1:]:
        print(f"  {measure:{width}} {same[measure] / old[measure]:.2f}x")
    print(f"\ntargets at {big['cells']:.0f} cells:")
    verdicts = []
    for step, limit in TARGETS.items():
        verdicts.append(big[f"{step} s"] <= limit)
        print(f"  {step:<26} {big[f'{step} s']:7.2f} s  (target <= {limit:.0f} s)  {'ok' if verdicts[-1] else 'MISSED'}")
    peak = max(big[f"{step} MB"] for step in TARGETS)
    verdicts.append(peak <= PEAK_TARGET_MB)
    print(f"  {'peak memory':<26} {peak:7.0f} MB (target <= {PEAK_TARGET_MB} MB)  {'ok' if verdicts[-1] else 'MISSED'}")
    verdicts.append(big["store KB/cell"] <= SIZE_TARGET_KB)
    print(f"  {'store':<26} {big['store KB/cell']:7.1f} KB per cell (target <= {SIZE_TARGET_KB})  "
          f"{'ok' if verdicts[-1] else 'MISSED'}")
    faster = same["record ms/cell"] <= old["record ms/cell"] * 1.05
    verdicts.append(faster)
    print(f"  {'recording a cell':<26} {same['record ms/cell']:.2f} ms vs {old['record ms/cell']:.2f} ms in rows "
          f"(target: no slower, 5% for noise)  {'ok' if faster else 'MISSED'}")
    steal = 100 * (steal1 - steal0) / max(1, total1 - total0)
    print(f"\nload average at the start {load:.2f}; steal over the run {steal:.2f}%; {os.cpu_count()} CPUs")
    sys.exit(0 if all(verdicts) else 1)


if __name__ == "__main__":
    main()
