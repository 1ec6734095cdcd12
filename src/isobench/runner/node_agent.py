"""The node side of a cluster run: one :class:`NodeAgent` per node (a Ray actor) describes its
node, sets the study up there as a local run would (``runner/setup.py``), runs the units of
cells the head sends, and cleans up.

A unit runs through the local runner's :func:`~isobench.runner.tenancy.run_group`: a duet pair's
two members start behind its start line and trade cores, on the cores this node's own layout
gives them (``plan/cores.py``), and its members' start-up leads are learnt from this node's pairs."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from isobench.hostinfo import host_cpus
from isobench.plan.cells import Cell
from isobench.plan.cores import assign_cores, core_layout
from isobench.runner.duet import Leads
from isobench.runner.nodes import HOST_LABEL, safe_host_key
from isobench.runner.setup import prepare_data, sweep_for, tidy_up, unavailable_knobs


def _cached_kvm() -> str:
    """KVM's verdict from the cache `isobench doctor` fills (booting a guest here is too slow)."""
    from isobench.platforms.kvm import VERDICT_FILE

    try:
        cached = json.loads(VERDICT_FILE.read_text())
    except (OSError, ValueError):
        return "untested" if os.path.exists("/dev/kvm") else "no"
    return "yes" if cached.get("works") else "no"


def local_capabilities(full: bool = False) -> dict[str, Any]:
    """This host's platforms (usable or why not) and the labels isobench detects on it.

    ``full`` also boots a KVM guest to test KVM (what `isobench doctor` does); otherwise the VM
    platforms are judged from the cached verdict only."""
    from isobench.fingerprint import host_fingerprint
    from isobench.platforms import PLATFORMS, platform_variants
    from isobench.platforms.kvm import kvm_verdict
    from isobench.probes.gpu import nvml
    from isobench.study.model import PlatformEntry

    kvm = ("yes" if kvm_verdict().works else "no") if full else _cached_kvm()
    platforms: dict[str, str] = {}
    for name, runtime in platform_variants():
        platform = PLATFORMS.get(name)(PlatformEntry(name=name, runtime=runtime))
        if name in ("vm", "microvm", "vm-container") and not full:
            platforms[platform.display()] = "" if kvm == "yes" else f"KVM {kvm} (run `isobench doctor` on the node)"
            continue
        try:
            avail = platform.availability()
        except Exception as exc:  # one broken check must not hide the others
            platforms[platform.display()] = f"check failed: {exc}"
            continue
        platforms[platform.display()] = "" if avail.ok else (avail.reason or "unavailable")
    lib, _ = nvml()
    gpus = lib.nvmlDeviceGetCount() if lib is not None else 0
    fingerprint = host_fingerprint()
    docker_ok = platforms.get("docker/runc", "no") == ""
    labels = {"gpu": "true" if gpus else "false", "arch": fingerprint["machine"],
              "cpu_model": fingerprint["cpu_model"] or "unknown", "docker": "true" if docker_ok else "false",
              "kvm": kvm}
    return {"platforms": platforms, "gpus": gpus, "labels": labels, "fingerprint": fingerprint}


class NodeAgent:
    """Runs on one node (as a Ray actor): describes the node, runs units of work, cleans up."""

    def __init__(self, node_id: str, ray_labels: dict[str, str]) -> None:
        self.node_id = node_id
        self.ray_labels = dict(ray_labels)
        self.platforms: dict[str, Any] = {}
        self.data_paths: dict[str, str] = {}
        self.hostname = socket.gethostname()
        self.host_key = safe_host_key(self.ray_labels.get(HOST_LABEL) or self.hostname)
        self.study: Any = None
        #: this node's CPUs, read before the agent pins itself anywhere: its cells' core layout
        self.cores = host_cpus()
        #: duet members' start-up leads, learnt from the pairs run here (a node's start-up is its own)
        self.leads = Leads()

    def describe(self, full: bool = False) -> dict[str, Any]:
        caps = local_capabilities(full)
        labels = {**self.ray_labels, **caps.pop("labels"), "host": self.host_key}
        return {"node_id": self.node_id, "host_key": self.host_key, "hostname": self.hostname,
                "labels": labels, "pid": os.getpid(), **caps}

    def prepare(self, study_text: str, file: str) -> dict[str, str]:
        """Set up the study's platforms here; platform key -> "" (usable) or why not."""
        from isobench.liveness import runner_tag
        from isobench.platforms import PLATFORMS
        from isobench.studyfile import load_study_text

        runner_tag()  # this actor is a runner: its lock protects what it starts
        study = self.study = load_study_text(study_text, file, check_host=False)
        usable: dict[str, str] = {}
        for entry in study.platforms:
            platform = PLATFORMS.get(entry.name)(entry)
            avail = platform.availability()
            reason = "" if avail.ok else (avail.reason or "unavailable")
            if not reason:
                reason = "; ".join(f"knob {k}: {avail.knobs_unavailable[k]}"
                                   for k in unavailable_knobs(study, entry, avail))
            usable[entry.key] = reason
            if not reason:
                self.platforms[entry.key] = platform
        for _ in sweep_for(list(self.platforms.values())):
            pass  # leftovers of runners that died on this host: removed, not reported
        for key, platform in list(self.platforms.items()):
            try:
                platform.prepare()
                platform.versions()  # the tools answer now, not beside a measuring cell
            except Exception as exc:
                usable[key] = f"prepare failed: {type(exc).__name__}: {exc}"
                del self.platforms[key]
        return usable

    def run(self, batch: list[Cell], artifacts_root: str) -> dict[str, Any]:
        """Run one unit (a cell, a tenant group or a duet pair, at once) as a local run would, on
        this node's own core layout: the head planned the cells' cores on its own CPUs."""
        from isobench.liveness import runner_tag
        from isobench.platforms.artifact_dirs import artifacts_dir_for
        from isobench.runner.harness import harness_on_its_cores
        from isobench.runner.hostknobs import applied_host_knobs
        from isobench.runner.study import share_contamination
        from isobench.runner.tenancy import run_group

        began, began_wall = time.monotonic(), time.time()
        self.data_paths.update(prepare_data([c for c in batch if c.data_key not in self.data_paths]))
        batch = assign_cores(self.study, [dataclasses.replace(c, cores=None) for c in batch], self.cores)
        batch = [dataclasses.replace(c, data_dir=self.data_paths.get(c.data_key or ""),
                                     artifacts_dir=artifacts_dir_for(c, Path(artifacts_root))) for c in batch]
        members = [self.platforms[c.platform_key] for c in batch]
        # The agent keeps off the cells' cores as the local runner does. The engine daemons stay
        # where they are: their affinity is host state, and Ray may kill an agent mid-unit.
        with harness_on_its_cores(core_layout(self.study, self.cores), pin_engine=False) as cores, \
                applied_host_knobs(batch[0].knobs):
            outcomes = run_group(batch, members if batch[0].duet else members[0], self.leads)
        share_contamination(outcomes)  # a trading pair that met one disturbance alike is kept, as locally
        ended_wall = time.time()
        for outcome in outcomes:
            outcome.platform_info.update(host=self.hostname, host_key=self.host_key, runner=runner_tag())
            outcome.platform_info["ray"] = {"node_id": self.node_id, "unit_start": began_wall,
                                            "unit_end": ended_wall, "cores": cores}
        return {"outcomes": outcomes, "display": [p.display() for p in members],
                "agent_s": time.monotonic() - began}

    def sweep(self) -> list[str]:
        """Remove what dead runners left on this host (an agent killed mid-cell, for one)."""
        from isobench.runner.leftovers import sweep_leftovers

        restored, removed = sweep_leftovers()
        return removed + restored

    def finish(self) -> list[str]:
        """Clean up this node: the platforms' shared state, empty cgroups, dead runners' leftovers."""
        removed: list[str] = []
        for platform in self.platforms.values():
            try:
                platform.cleanup()
            except Exception as exc:
                removed.append(f"cleanup of {platform.display()} failed: {exc}")
            removed.extend(type(platform).sweep_stale())
        tidy_up()
        return removed
