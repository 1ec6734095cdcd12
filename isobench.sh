#!/usr/bin/env bash
# isobench's front door. Each command sets up what it needs first (idempotent):
#   ./isobench.sh demo [ARGS]   set up, then run the default study (isobench run ARGS)
#   ./isobench.sh test [ARGS]   set up, then run the test suite (pytest ARGS)
#   ./isobench.sh setup         only set up: system packages, venv, runsc (bookworm-backports), Docker engine
#   ./isobench.sh CMD [ARGS]    set up, then any isobench command (doctor, plan, summary, ...)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="${ISOBENCH_VENV:-$ROOT/.venv}"
APT_PACKAGES=(docker.io runc crun runsc trace-cmd linux-perf util-linux procps chromium strace binutils podman
              qemu-system-x86 busybox-static cpio kmod libc6-dbg)
log() { printf '\033[1m[isobench setup]\033[0m %s\n' "$*" >&2; }

setup_system() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    if [[ $EUID -ne 0 ]]; then
      log "missing packages ${missing[*]}: run this as root, or install them yourself"; exit 1
    fi
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

find_python() {
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
      command -v "$candidate"; return
    fi
  done
  log "isobench needs Python 3.11 (apt-get install python3 python3-venv on Debian 12)"; exit 1
}

setup_venv() {
  # Apache Otava, the change-point detector of `isobench history`. Its wheel pins numpy and scipy
  # older than ours, but otava.analysis imports only those two: it goes in without its dependencies.
  local otava_version=0.8.0
  local stamp="$VENV/.isobench-installed" want
  want="$({ cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt"; echo "apache-otava==$otava_version"; } |
          sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$VENV/bin/isobench" ]]; then return; fi
  if [[ ! -x "$VENV/bin/python" ]]; then
    local py; py="$(find_python)"
    # A pyenv shim does not work inside containers: build the venv from the real interpreter.
    py="$("$py" -c 'import sys; print(sys.executable)')"
    log "creating the virtual environment $VENV from $py"
    "$py" -m venv "$VENV"
  fi
  log "installing isobench and its pinned dependencies (torch 2.14.1, torchvision 0.29.1)"
  # constraints.txt: the versions the tests last passed with. One retry: a registry hiccup
  # mid-download should not cost a whole CI run.
  local pip=("$VENV/bin/pip" install -q --disable-pip-version-check -c "$ROOT/constraints.txt" -e "$ROOT[test]")
  "${pip[@]}" || { log "pip failed; trying once more"; sleep 5; "${pip[@]}"; }
  local otava=("$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "apache-otava==$otava_version")
  "${otava[@]}" || { log "pip failed; trying once more"; sleep 5; "${otava[@]}"; }
  echo "$want" > "$stamp"
}

DOCKERD_LOG=/var/log/isobench-dockerd.log
DOCKERD_PIDFILE=/var/run/docker.pid
engine_answers() { docker info >/dev/null 2>&1; }

# Wait up to $1 seconds for the engine to answer; give up early once the daemon is gone: the
# process $2 when given (the one this script started), else any dockerd. The pid, not the name:
# just after the launch the child may still be setsid or nohup, not yet dockerd, and a name
# check then reads "no dockerd left" before it has started (the CI failure of stop 36).
wait_for_engine() {
  local deadline=$((SECONDS + $1)) pid="${2:-}"
  while ((SECONDS < deadline)); do
    engine_answers && return 0
    if [[ -n $pid ]]; then kill -0 "$pid" 2>/dev/null || return 1
    else pgrep -x dockerd >/dev/null || return 1; fi
    sleep 0.5
  done
  return 1
}

start_docker() {
  engine_answers && return
  if [[ $EUID -ne 0 ]]; then log "no Docker engine answers and only root can start one"; return; fi
  # A dockerd that is still starting, or still shutting down after its session was ended, holds
  # the pid file: a second one would refuse to start. Wait for it to answer or to go.
  if pgrep -x dockerd >/dev/null; then
    log "a dockerd is running but not answering yet; waiting for it"
    wait_for_engine 60 && return
    if pgrep -x dockerd >/dev/null; then
      log "dockerd $(pgrep -x dockerd | tr '\n' ' ')does not answer after 60 s: stop it, or see $DOCKERD_LOG"
      exit 1
    fi
  fi
  # A pid file left by a killed dockerd can name a pid that a later process took: dockerd then
  # refuses to start. No dockerd runs now (checked above), so the file is stale.
  rm -f "$DOCKERD_PIDFILE"
  log "starting dockerd (log: $DOCKERD_LOG)"
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  # Detached (own session, no inherited stdio) so it outlives this script without holding its pipes.
  setsid nohup dockerd --iptables=false --bridge=none </dev/null >"$DOCKERD_LOG" 2>&1 &
  local pid=$!
  wait_for_engine 120 "$pid" && return
  local status="still not answering after 120 s"
  kill -0 "$pid" 2>/dev/null || { wait "$pid" && status="exited with 0" || status="exited with $?"; }
  log "dockerd did not come up ($status); disk: $(df -h --output=avail /var/lib 2>/dev/null | tail -1 | tr -d ' ') free under /var/lib; the end of $DOCKERD_LOG:"
  tail -n 15 "$DOCKERD_LOG" >&2 || true
  exit 1
}

# gVisor as users deploy it: Debian 12 ships runsc 0.0~20221219 (ptrace only); bookworm-backports
# has 0.0~20240729, whose default platform is systrap. Only runsc comes from backports (the suite's
# priority stays 100, so nothing else follows it), and Debian 12's build is kept unpacked beside
# it for studies that compare the two (`runtime_path:`). A backports suite out of reach is logged,
# not fatal: the runsc already installed stays.
BACKPORTS_SOURCES=/etc/apt/sources.list.d/isobench-bookworm-backports.sources
DEBIAN_SOURCES=/etc/apt/sources.list.d/debian.sources
RUNSC_BACKPORTS_MIN=0.0~20240729
RUNSC_KEPT_DIR=/opt/isobench/runsc-20221219   # platforms/runsc.py: KEPT_BOOKWORM_RUNSC

# The version of runsc that apt offers from suite $1 (e.g. bookworm, bookworm-backports), or nothing.
runsc_version_in() {
  apt-cache madison runsc 2>/dev/null | awk -F' *[|] *' -v suite=" $1/" 'index($3, suite) {print $2; exit}'
}

keep_bookworm_runsc() {
  [[ -x $RUNSC_KEPT_DIR/usr/bin/runsc ]] && return 0
  local version tmp
  version="$(runsc_version_in bookworm)"
  if [[ -z $version ]]; then log "Debian 12's runsc is not in apt's lists: not kept at $RUNSC_KEPT_DIR"; return 0; fi
  tmp="$(mktemp -d)"
  if (cd "$tmp" && apt-get download -qq "runsc=$version" >/dev/null 2>&1) &&
     mkdir -p "$(dirname "$RUNSC_KEPT_DIR")" && rm -rf "$RUNSC_KEPT_DIR.tmp" &&
     dpkg-deb -x "$tmp"/runsc_*.deb "$RUNSC_KEPT_DIR.tmp" && mv "$RUNSC_KEPT_DIR.tmp" "$RUNSC_KEPT_DIR"; then
    log "kept Debian 12's runsc $version at $RUNSC_KEPT_DIR/usr/bin/runsc"
  else
    log "could not keep Debian 12's runsc $version (apt-get download failed); studies naming it will say so"
  fi
  rm -rf "$tmp" "$RUNSC_KEPT_DIR.tmp"
}

setup_runsc() {
  [[ $EUID -eq 0 ]] && command -v apt-get >/dev/null || return 0
  local codename installed wanted
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  [[ $codename == bookworm ]] || return 0   # elsewhere the distribution's own runsc is what users get
  installed="$(dpkg-query -W -f='${Version}' runsc 2>/dev/null || true)"
  if [[ -n $installed ]] && dpkg --compare-versions "$installed" ge "$RUNSC_BACKPORTS_MIN" &&
     [[ -x $RUNSC_KEPT_DIR/usr/bin/runsc ]]; then
    return 0   # the usual case after the first run: no apt call at all
  fi
  keep_bookworm_runsc   # before the upgrade, while apt's lists surely name bookworm's build
  if [[ -n $installed ]] && dpkg --compare-versions "$installed" ge "$RUNSC_BACKPORTS_MIN"; then return 0; fi
  if ! grep -rqs --include='*.sources' --include='*.list' 'bookworm-backports' \
       /etc/apt/sources.list /etc/apt/sources.list.d/; then
    if [[ ! -f $DEBIAN_SOURCES ]]; then log "no $DEBIAN_SOURCES to copy: runsc stays at ${installed:-none}"; return 0; fi
    # The first stanza (Debian's main archive) with the backports suite.
    awk 'BEGIN{RS=""; ORS="\n"} NR==1 {print; exit}' "$DEBIAN_SOURCES" |
      sed -E 's/^Suites:.*/Suites: bookworm-backports/' > "$BACKPORTS_SOURCES.tmp"
    mv "$BACKPORTS_SOURCES.tmp" "$BACKPORTS_SOURCES"
    log "added $BACKPORTS_SOURCES (bookworm-backports, for runsc only)"
  fi
  wanted="$(runsc_version_in bookworm-backports)"
  if [[ -z $wanted ]]; then
    apt-get update -qq >/dev/null 2>&1 || true
    wanted="$(runsc_version_in bookworm-backports)"
  fi
  if [[ -z $wanted ]]; then
    log "bookworm-backports is out of reach (or has no runsc): gVisor stays at runsc ${installed:-none}"; return 0
  fi
  log "installing runsc $wanted from bookworm-backports (gVisor's systrap platform; was ${installed:-none})"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends -t bookworm-backports runsc \
    >/dev/null 2>&1 || log "apt-get install -t bookworm-backports runsc failed: gVisor stays at runsc ${installed:-none}"
}

setup_vm_guest() {
  # The VM platforms' guest kernel (Debian's, unpacked into the cache) and initramfs; cached.
  [[ $EUID -eq 0 ]] || return 0
  "$VENV/bin/python" -c 'from isobench.platforms.guest import guest_image; guest_image()' ||
    log "could not prepare the VM guest kernel; the vm platforms will try again when used"
}

setup() {
  # The venv (pip: torch and the rest from PyPI) needs nothing apt installs, so on a fresh machine
  # the two downloads run side by side instead of one after the other (each takes minutes there).
  setup_venv &
  local venv_job=$!
  setup_system
  setup_runsc
  wait "$venv_job" || { log "setting up the virtual environment failed (see above)"; exit 1; }
  start_docker
  setup_vm_guest
}

cmd="${1:-demo}"
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/isobench" run "$@" ;;
  test)
    setup
    cd "$ROOT"
    exec "$VENV/bin/python" -m pytest -q -rs --durations=25 "$@" ;;
  *) setup; exec "$VENV/bin/isobench" "$cmd" "$@" ;;
esac
