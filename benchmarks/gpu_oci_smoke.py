"""One container through isobench's own oci code path (bundle_config, the host-mirror skeleton,
runtime_argv) with the GPU passed in, running a short Python snippet; prints what the runtime
said, and on failure what on the host may be the cause (cgroups, namespaces, devices).

    python3 benchmarks/gpu_oci_smoke.py --runtime runc [--dev /dev] [--code 'import torch; ...']

``--dev`` points at another /dev (a folder of links to character devices) to try the bundle
on a host without a GPU. Exit status: the container's (or 3 when it never ran).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from isobench.hostinfo import cgroup_layout
from isobench.plan.cells import Cell
from isobench.platforms.gpus import LD_SO_CACHE, gpu_passthrough
from isobench.platforms.hostmirror import build_skeleton, data_root
from isobench.platforms.oci import STATE_ROOT, bundle_config, remove_container, runtime_argv

CUDA_CODE = """
import os, sys, torch
print("python", sys.executable, "torch", torch.__version__, "cuda", torch.version.cuda)
print("LD_LIBRARY_PATH", os.environ.get("LD_LIBRARY_PATH"), "PYTHONPATH", os.environ.get("PYTHONPATH"))
try:
    torch.cuda.init()
except Exception as err:  # the driver's own words: no device node, no libcuda, a refused ioctl
    print("cuda init failed:", type(err).__name__, err)
    raise SystemExit(4)
x = torch.ones(1024, 1024, device="cuda")
print("cuda", torch.cuda.is_available(), torch.cuda.device_count(), torch.cuda.get_device_name(0),
      "matmul", float((x @ x).sum()))
"""


def diagnose(runtime: str) -> None:
    """What on this host may keep a container from starting."""
    print("--- diagnosis")
    print("cgroup layout:", json.dumps(cgroup_layout()))
    for path in ("/sys/fs/cgroup/cgroup.controllers", "/sys/fs/cgroup/cgroup.subtree_control", "/proc/self/cgroup"):
        try:
            print(f"{path}: {Path(path).read_text().strip()}")
        except OSError as err:
            print(f"{path}: {err}")
    checks = {
        "namespaces (unshare -pfmiun)": ["unshare", "-p", "-f", "-m", "-i", "-u", "-n", "--mount-proc", "true"],
        "runtime version": [runtime, "--version"],
    }
    for what, cmd in checks.items():
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            print(f"{what}: rc={out.returncode} {(out.stdout + out.stderr).strip()[:400]}")
        except (OSError, subprocess.SubprocessError) as err:
            print(f"{what}: {err}")
    print("seccomp:", Path("/proc/self/status").read_text().split("Seccomp:")[1].split("\n")[0].strip())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runtime", default="runc")
    parser.add_argument("--dev", default="/dev")
    parser.add_argument("--code", default=CUDA_CODE)
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()

    try:
        gpu = gpu_passthrough("all", dev=Path(args.dev))
    except ValueError as err:
        print(f"no GPU to pass in: {err}")
        return 3
    print("devices:", ", ".join(f"{d['path']} {d['major']}:{d['minor']}" for d in gpu.devices))
    print("library mounts:", gpu.library_mounts, "LD_LIBRARY_PATH:", gpu.library_path,
          "ld.so.cache:", gpu.ld_so_cache, "env:", gpu.env)
    files = (LD_SO_CACHE,) if gpu.ld_so_cache else ()
    rootfs = build_skeleton((str(data_root()), *gpu.library_mounts), files)
    name = f"isobench-smoke-{os.getpid()}-{args.runtime}"
    cell = Cell(study="smoke", cell_id=name, seq=0, workload="smoke", workload_key="smoke", params={},
                platform="oci", platform_key="oci", platform_entry={"name": "oci", "options": {"gpus": "all"}},
                knobs={}, rep=0, warmup=False, seed=0, timeout_s=args.timeout)
    bundle = STATE_ROOT / "bundles" / name
    bundle.mkdir(parents=True, exist_ok=True)
    (STATE_ROOT / args.runtime).mkdir(parents=True, exist_ok=True)
    config = bundle_config(cell, [sys.executable, "-c", args.code], rootfs, f"/isobench/smoke/{name}", args.runtime,
                           gpu)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))
    cmd = runtime_argv(args.runtime, "run", "--bundle", str(bundle), name)
    print("+", " ".join(cmd))
    started = time.monotonic()
    rc = 3
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=args.timeout,
                             cwd=bundle)
        rc = out.returncode
        print(f"rc={rc} in {time.monotonic() - started:.1f} s")
        print("stdout:", out.stdout.strip()[-3000:])
        print("stderr:", out.stderr.strip()[-3000:])
    except subprocess.TimeoutExpired:
        print(f"timed out after {args.timeout} s")
    except OSError as err:
        print(f"could not start {args.runtime}: {err}")
    finally:
        try:
            remove_container(args.runtime, name)
        except (RuntimeError, OSError, subprocess.SubprocessError) as err:
            print("cleanup:", err)
        shutil.rmtree(bundle, ignore_errors=True)
    if rc != 0:
        diagnose(args.runtime)
    return rc


if __name__ == "__main__":
    sys.exit(main())
