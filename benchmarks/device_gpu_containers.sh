#!/bin/bash
# The GPU-in-containers check on a lent GPU host (no container engine, no internet), run once
# from the repository root with $OUT an empty folder whose files come back:
#
#   OUT=/some/dir bash benchmarks/device_gpu_containers.sh
#
# Carried beside the checkout (benchmarks/prepare_gpu_oci_carry.sh fills both): .whl/ (pydantic
# and its dependencies for Python 3.12) and .gpuoci/ (runc, crun and their libraries). Steps:
# the host's GPU facts; wheels into .site (under the project, which every container cell sees;
# the containers' /tmp is their own tmpfs); the runtimes on PATH; one container per runtime
# through isobench's own oci code with the GPU passed in (benchmarks/gpu_oci_smoke.py); then the
# built-in study gpu-containers (entries whose runtime failed the smoke test are left out), its
# summary, report and results. Every step is time-bounded and a failed step does not stop the
# next; $OUT/log.txt has everything, each step ending in a line `=== [step] rc=N`.
set -u
OUT=${OUT:-/tmp/gpuout}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
RESULTS=/tmp/gpuc
RUN_LIMIT=${RUN_LIMIT:-300}        # seconds for the study (stopped cleanly by SIGTERM past it)
STEPS=""
T0=$(date +%s)

step() {  # step NAME SECONDS CMD...: run, bounded, record the status, never stop the script
    local name=$1 limit=$2
    shift 2
    echo
    echo "=== [$name] start $(date +%T) (+$(( $(date +%s) - T0 )) s), limit ${limit}s"
    timeout -k 15 "$limit" "$@"
    local rc=$?
    [ "$rc" = 124 ] && echo "(timed out after ${limit}s)"
    echo "=== [$name] rc=$rc"
    STEPS="$STEPS $name=$rc"
    return "$rc"
}

PY=${PY:-python3}   # the GPU host's: /opt/torch/.venv/bin/python3 (PY= overrides, for a try elsewhere)
[ "$PY" = python3 ] && [ -x /opt/torch/.venv/bin/python3 ] && PY=/opt/torch/.venv/bin/python3
export PATH="$ROOT/.gpuoci/bin:$PATH:/usr/local/nvidia/bin"
export PYTHONPATH="$ROOT/.site:$ROOT/src"
export PYTHONDONTWRITEBYTECODE=1
ISOB=/tmp/isobench-cli   # `isobench` without installing it: the checkout's src/ is on PYTHONPATH
printf '#!/bin/sh\nexec "%s" -c %s "$@"\n' "$PY" \
    "'import sys; sys.argv[0] = \"isobench\"; from isobench.cli import main; sys.exit(main())'" > "$ISOB"
chmod 755 "$ISOB"

# -- the host ---------------------------------------------------------------------------------
step host 60 bash -c '
    echo "uname: $(uname -r) | $(nproc) cores | $(grep -m1 "model name" /proc/cpuinfo)"; free -g | head -2
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    ls -l /dev/nvidia* /dev/nvidia-caps 2>&1
    echo "libcuda / libnvidia-ml as the loader cache has them:"; ldconfig -p | grep -E "libcuda\.|libnvidia-ml\." || echo "  (none)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"; ls /usr/local/nvidia 2>&1 | head
    echo "cgroups:"; mount | grep -E "cgroup|/run |/tmp " ; cat /proc/self/cgroup
    echo "/sys/fs/cgroup/cgroup.controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>&1)"
    echo "writable: /run $(test -w /run && echo yes || echo no), /var/cache $(test -w /var/cache && echo yes || echo no)"
    df -h /tmp . | tail -2'
step python 60 "$PY" -c 'import sys, torch; print(sys.version); print(sys.executable, sys.prefix, sys.base_prefix)
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no device")'

# -- isobench's missing packages, the runtimes -----------------------------------------------------
install_wheels() {
    rm -rf "$ROOT/.site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$ROOT/.site" "$ROOT"/.whl/*.whl \
        || { echo "pip failed: unpacking the wheels instead"
             "$PY" -c 'import glob, sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in glob.glob(sys.argv[2] + "/*.whl")]' \
                 "$ROOT/.site" "$ROOT/.whl"; }
    "$PY" -c 'import pydantic, typer, yaml, rich, psutil, isobench.cli; print("pydantic", pydantic.VERSION, "from", pydantic.__file__)'
}
[ -n "${SKIP_WHEELS:-}" ] || step wheels 120 bash -c "$(declare -f install_wheels); PY=$PY ROOT=$ROOT install_wheels"
install_runtimes() {
    mkdir -p /tmp/isobench-gpuoci && rm -rf /tmp/isobench-gpuoci/lib && cp -r "$ROOT/.gpuoci/lib" /tmp/isobench-gpuoci/lib
    chmod 755 "$ROOT"/.gpuoci/bin/* 2>/dev/null
    mkdir -p /run/isobench 2>&1
    for r in runc crun; do echo "$r: $(command -v $r)"; $r --version | head -2; done
}
step runtimes 30 bash -c "$(declare -f install_runtimes); ROOT=$ROOT install_runtimes"
test -w /var/cache || { export ISOBENCH_CACHE="$ROOT/.isobench-cache"; echo "ISOBENCH_CACHE=$ISOBENCH_CACHE"; }

# -- one container per runtime, the GPU passed in ------------------------------------------------
OK_RUNTIMES=""
for r in runc crun; do
    step "smoke-$r" 90 "$PY" benchmarks/gpu_oci_smoke.py --runtime "$r" --timeout 75 --dev "${SMOKE_DEV:-/dev}" \
        && OK_RUNTIMES="$OK_RUNTIMES $r"
done
echo "runtimes that ran a CUDA container:${OK_RUNTIMES:- none}"

# -- KVM, cheaply ----------------------------------------------------------------------------------
step kvm 20 bash -c 'ls -l /dev/kvm 2>&1; command -v qemu-system-x86_64 firecracker 2>&1
    python3 -c "
import fcntl, os
try:
    fd = os.open(\"/dev/kvm\", os.O_RDWR)
    print(\"KVM_GET_API_VERSION\", fcntl.ioctl(fd, 0xAE00))
    vm = fcntl.ioctl(fd, 0xAE01, 0)
    print(\"KVM_CREATE_VM: fd\", vm, \"(a VM can be created)\")
except OSError as err:
    print(\"KVM:\", err)
"'

# -- the study ---------------------------------------------------------------------------------------
STUDY=gpu-containers
# STUDY_RUNTIMES (e.g. "runc"): only these runtimes' entries, to fit the device time left
WANT_RUNTIMES=${STUDY_RUNTIMES:-runc crun}
if [ "$OK_RUNTIMES" != " runc crun" ] || [ "$WANT_RUNTIMES" != "runc crun" ]; then  # leave out the entries whose runtime did not run a container
    STUDY=/tmp/gpu-containers-here.yaml
    step study-file 30 "$PY" -c '
import sys, yaml
from importlib import resources
ok = set(sys.argv[1].split()) & set(sys.argv[3].split())
study = yaml.safe_load(resources.files("isobench.studies").joinpath("gpu-containers.yaml").read_text())
study["platforms"] = [p for p in study["platforms"] if p["name"] != "oci" or p.get("runtime") in ok]
open(sys.argv[2], "w").write(yaml.safe_dump(study, sort_keys=False))
print("entries:", [p.get("label") or p["name"] for p in study["platforms"]])' "$OK_RUNTIMES" "$STUDY" "$WANT_RUNTIMES"
fi
step plan 60 "$ISOB" plan "$STUDY"
rm -rf "$RESULTS"
[ -e /dev/nvidiactl ] || { echo "no /dev/nvidiactl: no NVIDIA driver here, the study is not run"; RUN_LIMIT=0; }
if [ "$RUN_LIMIT" -gt 0 ]; then
    started=$(date +%s)
    step run $((RUN_LIMIT + 30)) timeout -s TERM -k 30 "$RUN_LIMIT" "$ISOB" run "$STUDY" --out "$RESULTS"
    rc=$?
    if [ "$rc" = 2 ] && [ $(( $(date +%s) - started )) -lt 60 ]; then  # refused up front: once more without the gpu probe
        echo "the study was refused (see above): trying once more without the gpu probe"
        step study-noprobe 30 "$PY" -c '
import sys, yaml
from importlib import resources
name = sys.argv[1]
text = open(name).read() if name.endswith(".yaml") else resources.files("isobench.studies").joinpath(name + ".yaml").read_text()
study = yaml.safe_load(text)
study["probes"] = {"proc": {}}
open("/tmp/gpu-containers-noprobe.yaml", "w").write(yaml.safe_dump(study, sort_keys=False))' "$STUDY"
        rm -rf "$RESULTS"
        left=$(( RUN_LIMIT - ($(date +%s) - started) ))
        step run-noprobe $((left + 30)) timeout -s TERM -k 30 "$left" "$ISOB" run /tmp/gpu-containers-noprobe.yaml --out "$RESULTS"
    fi
fi
if [ -d "$RESULTS" ]; then
    step summary 60 bash -o pipefail -c "'$ISOB' summary '$RESULTS' | tee '$OUT/summary.txt'"
    step summary-json 60 bash -c "'$ISOB' summary '$RESULTS' --json > '$OUT/summary.json'"
    step report 90 "$ISOB" report "$RESULTS" --format html -o "$OUT/report.html"
    step results-tar 60 tar -czf "$OUT/gpuc-results.tar.gz" -C "$(dirname "$RESULTS")" "$(basename "$RESULTS")"
fi

# -- F7 at a low core ratio: one core of this host's 16 (issue 24) --------------------------------------
# Samani & Salehi's vanilla-container outlier is largest at low container-to-host core ratios (4 of
# 64-80 cores); the 2-core CI host can only go to 1 of 2. Here: ResNet-18 E2E on the CPU, bare
# metal on one named core (the paper's bare metal at N cores: N cores, no quota) against a runc
# container under a 1-CPU quota whose threads the scheduler spreads over every core (vanilla) and
# the same quota on one named core (pinned). Written here, not built in: it needs 8+ cores.
# device: cpu, not auto: bare metal would take the GPU and a container without it the CPU.
F7_LIMIT=${F7_LIMIT:-150}
if [ "$F7_LIMIT" -gt 0 ] && [ -n "$OK_RUNTIMES" ]; then
    step f7-file 30 "$PY" -c '
import sys, yaml
runtime = sys.argv[1].split()[0]
one_core = {"cpuset": "1"}
platforms = [{"name": "baremetal", "knobs": one_core}, {"name": "baremetal", "label": "aa", "knobs": one_core},
             {"name": "oci", "label": "vanilla", "runtime": runtime, "knobs": {"cpus": 1}},
             {"name": "oci", "label": "pinned", "runtime": runtime, "knobs": {"cpus": 1, "cpuset": "1"}}]
study = {"name": "f7-low-ratio", "description": "Samani & Salehi F7 at 1 of this host cores: vanilla vs pinned container",
         "workloads": [{"name": "resnet-infer", "params": {"image_size": 64, "requests": 20, "device": "cpu"}}],
         "platforms": platforms, "baseline": "baremetal", "cell_cores": "all", "knobs": {"threads": 2},
         "probes": {"proc": {}, "cgroup": {}}, "schedule": "sequential", "min_seconds": 2, "warmup_items": 10,
         "warmup": 0, "repetitions": "auto", "adaptive": {"min_repetitions": 5, "max_repetitions": 12,
         "max_time_s": int(sys.argv[2])}, "seed": 2023, "timeout_s": 120}
open("/tmp/f7-low-ratio.yaml", "w").write(yaml.safe_dump(study, sort_keys=False))
print("entries:", [p.get("label") or p["name"] for p in platforms], "on", runtime)' "$OK_RUNTIMES" "$((F7_LIMIT - 20))"
    step f7-plan 60 "$ISOB" plan /tmp/f7-low-ratio.yaml
    rm -rf /tmp/f7
    step f7-run $((F7_LIMIT + 30)) timeout -s TERM -k 20 "$F7_LIMIT" "$ISOB" run /tmp/f7-low-ratio.yaml --out /tmp/f7
    if [ -d /tmp/f7 ]; then
        step f7-summary 60 bash -o pipefail -c "'$ISOB' summary /tmp/f7 | tee '$OUT/f7-summary.txt'"
        step f7-summary-json 60 bash -c "'$ISOB' summary /tmp/f7 --json > '$OUT/f7-summary.json'"
        step f7-tar 60 tar -czf "$OUT/f7-results.tar.gz" -C /tmp f7
    fi
fi

# -- F3 on the GPU: the host memory a container adds to CUDA training (issue 24) ---------------------
# Prashanthi 5.1.7 read the system's used memory (`free`) on a Jetson, where the GPU shares it. Here
# the meminfo probe reads the host's used memory over each LeNet training cell on CUDA, less the
# level before its launch, on bare metal (twice: the A/A) and in a runc container with the GPU
# passed in; one cell at a time, as the figure is the whole host's.
F3_LIMIT=${F3_LIMIT:-0}
if [ "$F3_LIMIT" -gt 0 ] && [ -n "$OK_RUNTIMES" ] && [ -e /dev/nvidiactl ]; then
    step f3-file 30 "$PY" -c '
import sys, yaml
runtime = sys.argv[1].split()[0]
platforms = [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"},
             {"name": "oci", "label": f"{runtime}-gpu", "runtime": runtime, "options": {"gpus": "all"}}]
study = {"name": "f3-gpu-memory", "description": "Prashanthi F3 on CUDA: host memory used, bare metal vs a GPU container",
         "workloads": [{"name": "lenet-train", "params": {"steps": 40, "batch_size": 16, "device": "cuda"}}],
         "platforms": platforms, "baseline": "baremetal", "cell_cores": "disjoint", "schedule": "sequential",
         "probes": {"meminfo": {}}, "min_seconds": 2, "warmup_items": 10, "warmup": 0, "repetitions": 5,
         "reruns": 0, "seed": 2023, "timeout_s": 120}
open("/tmp/f3-gpu-memory.yaml", "w").write(yaml.safe_dump(study, sort_keys=False))
print("entries:", [p.get("label") or p["name"] for p in platforms])' "$OK_RUNTIMES"
    rm -rf /tmp/f3
    step f3-run $((F3_LIMIT + 30)) timeout -s TERM -k 20 "$F3_LIMIT" "$ISOB" run /tmp/f3-gpu-memory.yaml --out /tmp/f3
    if [ -d /tmp/f3 ]; then
        step f3-summary 60 bash -o pipefail -c "'$ISOB' summary /tmp/f3 | tee '$OUT/f3-summary.txt'"
        step f3-summary-json 60 bash -c "'$ISOB' summary /tmp/f3 --json > '$OUT/f3-summary.json'"
        step f3-metrics 60 "$PY" -c '
import sqlite3
con = sqlite3.connect("/tmp/f3/isobench.sqlite")
rows = con.execute("SELECT c.platform_key, c.rep, m.metric, m.value FROM metrics m JOIN cells c USING (cell_id) "
                   "WHERE m.metric LIKE \"probe.meminfo.%\" AND c.warmup = 0 ORDER BY c.platform_key, c.rep, m.metric")
for platform, rep, metric, value in rows:
    print(f"{platform:12s} r{rep} {metric:40s} {value / 2**20:9.1f} MiB")' | tee "$OUT/f3-metrics.txt"
    fi
fi

# -- LLM generation on the GPU, bare metal against runc with the GPU passed in (issue 28) ---------
LLM_LIMIT=${LLM_LIMIT:-110}
if [ "$LLM_LIMIT" -gt 0 ] && [ -e /dev/nvidiactl ]; then
    step llm-file 30 "$PY" -c '
import sys, yaml
ok = sys.argv[1].split()
platforms = [{"name": "baremetal"}, {"name": "baremetal", "label": "aa"}]
platforms += [{"name": "oci", "label": f"{r}-gpu", "runtime": r, "options": {"gpus": "all"}} for r in ok[:1]]
study = {"name": "gpu-llm", "description": "LLM generation on CUDA: bare metal against a container with the GPU passed in",
         "workloads": [{"name": "llm-generate", "params": {"model": "llama", "size": "tiny", "prompt_tokens": 64,
                        "output_tokens": 32, "requests": 10, "device": "cuda"}}],
         "platforms": platforms, "baseline": "baremetal", "cell_cores": "disjoint", "schedule": "sequential",
         "min_seconds": 2, "warmup_items": 5, "warmup": 0, "repetitions": 3, "seed": 3, "timeout_s": 120}
open("/tmp/gpu-llm.yaml", "w").write(yaml.safe_dump(study, sort_keys=False))
print("entries:", [p.get("label") or p["name"] for p in platforms])' "$OK_RUNTIMES"
    rm -rf /tmp/gpu-llm
    step llm-run $((LLM_LIMIT + 30)) timeout -s TERM -k 20 "$LLM_LIMIT" "$ISOB" run /tmp/gpu-llm.yaml --out /tmp/gpu-llm
    if [ -d /tmp/gpu-llm ]; then
        step llm-summary 60 bash -o pipefail -c "'$ISOB' summary /tmp/gpu-llm | tee '$OUT/llm-summary.txt'"
        step llm-summary-json 60 bash -c "'$ISOB' summary /tmp/gpu-llm --json > '$OUT/llm-summary.json'"
    fi
fi

# -- a paper's replication, its GPU studies run here (issue 24) -----------------------------------
# REPLICATE=prashanthi-2023: `isobench replicate` on this host; studies that need Docker are left
# out with the reason (no engine here), the GPU ones run, and its page comes back in $OUT.
REPLICATE=${REPLICATE:-}
REPLICATE_LIMIT=${REPLICATE_LIMIT:-330}
if [ -n "$REPLICATE" ] && [ -e /dev/nvidiactl ]; then
    rm -rf /tmp/rep
    step "replicate-$REPLICATE" $((REPLICATE_LIMIT + 30)) timeout -s TERM -k 20 "$REPLICATE_LIMIT" \
        "$ISOB" replicate "$REPLICATE" --out /tmp/rep --markdown "$OUT/replication-gpu-$REPLICATE.md"
    if [ -d /tmp/rep ]; then
        for study in /tmp/rep/"$REPLICATE"/*/; do
            [ -e "$study/isobench.sqlite" ] || continue
            name=$(basename "$study")
            step "summary-$name" 60 bash -o pipefail -c "'$ISOB' summary '$study' | tee '$OUT/$name-summary.txt'"
        done
        step rep-tar 60 tar -czf "$OUT/rep-results.tar.gz" -C /tmp rep
    fi
fi

ls -l "$OUT"
for f in "$OUT"/*; do  # what comes back is at most 16 MiB a file
    [ "$(stat -c %s "$f")" -gt $((16 * 1024 * 1024 - 4096)) ] && { echo "too large to bring back, removed: $f"; rm -f "$f"; }
done

echo
echo "=== steps:$STEPS"
echo "=== total $(( $(date +%s) - T0 )) s"
