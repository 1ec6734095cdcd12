"""Run a study on the nodes of a Ray cluster (`isobench run STUDY --ray ADDRESS`).

One long-lived actor per node (a :class:`NodeAgent`) runs that node's cells with exactly the
code of a local run (platforms, probes, tenancy), one unit of work at a time, and returns
the outcomes; the head (this process) owns the study store and writes each unit as it
comes back, so a head crash loses no finished cell and ``--resume`` works as locally.

Scheduling is the head's, not Ray's: the head hands a node its next unit only when the
last one is back, so a node never runs two cells at once (``hosts.cells_per_node`` asks
for co-location explicitly; a tenant group is co-located by definition). In ``spread``
mode a node claims a whole measured round (every group once, in the plan's shuffled order),
so interleaving holds per host and every round has its baseline on the same host; each
host first runs its own copy of the warm-up rounds. In ``each`` mode every host runs the
whole plan (a fleet), its cell ids suffixed ``@host``. A node that is lost mid-cell has its
unit, and the rest of its queue, re-run on a live node with the same labels, or recorded
as ``lost`` when none is left (a resumed run tries lost cells again).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from isobench.errors import UserError
from isobench.plan.cells import Cell, expand
from isobench.report.plaintext import markup
from isobench.runner.execute import CellOutcome

#: the Ray node label that names the host a node stands for (default: its hostname)
HOST_LABEL = "isobench-host"
#: labels that identify one node rather than describe a class of nodes
IDENTITY_LABEL_PREFIXES = ("ray.io/", HOST_LABEL)
#: how often a unit is tried again after its node was lost, before it is recorded lost
MAX_RERUNS = 2
NAMESPACE = "isobench"


# -- what a node is and can do -----------------------------------------------------------------

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


def class_labels(labels: dict[str, str]) -> dict[str, str]:
    """The labels that describe what kind of node this is (a lost node's cells go to a node alike)."""
    return {k: v for k, v in labels.items() if not k.startswith(IDENTITY_LABEL_PREFIXES)}


def safe_host_key(name: str) -> str:
    """A host name fit for a cell id suffix."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64] or "host"


def matches(labels: dict[str, str], wanted: dict[str, str | list[str]]) -> bool:
    for key, value in wanted.items():
        allowed = [str(v) for v in value] if isinstance(value, list) else [str(value)]
        if labels.get(key) not in allowed:
            return False
    return True


# -- the node side --------------------------------------------------------------------------------

class NodeAgent:
    """Runs on one node (as a Ray actor): describes the node, runs units of work, cleans up."""

    def __init__(self, node_id: str, ray_labels: dict[str, str]) -> None:
        self.node_id = node_id
        self.ray_labels = dict(ray_labels)
        self.platforms: dict[str, Any] = {}
        self.data_paths: dict[str, str] = {}
        self.hostname = socket.gethostname()
        self.host_key = safe_host_key(self.ray_labels.get(HOST_LABEL) or self.hostname)

    def describe(self, full: bool = False) -> dict[str, Any]:
        caps = local_capabilities(full)
        labels = {**self.ray_labels, **caps.pop("labels"), "host": self.host_key}
        return {"node_id": self.node_id, "host_key": self.host_key, "hostname": self.hostname,
                "labels": labels, "pid": os.getpid(), **caps}

    def prepare(self, study_text: str, file: str) -> dict[str, str]:
        """Set up the study's platforms here; platform key -> "" (usable) or why not."""
        from isobench.hoststate import sweep_stale as sweep_host_state
        from isobench.liveness import runner_tag
        from isobench.platforms import PLATFORMS
        from isobench.probes import PROBES
        from isobench.study.model import Knobs
        from isobench.studyfile import load_study_text

        runner_tag()  # this actor is a runner: its lock protects what it starts
        study = load_study_text(study_text, file, check_host=False)
        usable: dict[str, str] = {}
        for entry in study.platforms:
            platform = PLATFORMS.get(entry.name)(entry)
            avail = platform.availability()
            reason = "" if avail.ok else (avail.reason or "unavailable")
            if not reason:
                knobs = {**study.knobs, **entry.knobs}
                wanted = set(Knobs(**{k: v for k, v in knobs.items() if not isinstance(v, list)}).as_dict())
                wanted |= {k for k, v in knobs.items() if isinstance(v, list)}
                missing = sorted(wanted & set(avail.knobs_unavailable))
                reason = "; ".join(f"knob {k}: {avail.knobs_unavailable[k]}" for k in missing)
            usable[entry.key] = reason
            if not reason:
                self.platforms[entry.key] = platform
        for platform_cls in {type(p) for p in self.platforms.values()}:
            platform_cls.sweep_stale()  # leftovers of a runner that died on this host
        for _, probe_cls in PROBES:
            probe_cls.sweep_stale()
        sweep_host_state()  # cpufreq etc. that a runner killed on this host left changed
        for key, platform in list(self.platforms.items()):
            try:
                platform.prepare()
            except Exception as exc:
                usable[key] = f"prepare failed: {type(exc).__name__}: {exc}"
                del self.platforms[key]
        return usable

    def run(self, batch: list[Cell], artifacts_root: str) -> dict[str, Any]:
        """Run one unit (a cell, or a tenant group at once) as a local run would."""
        from isobench.liveness import runner_tag
        from isobench.platforms.artifact_dirs import artifacts_dir_for
        from isobench.runner.hostknobs import applied_host_knobs
        from isobench.runner.study import prepare_data
        from isobench.runner.tenancy import run_group

        began, began_wall = time.monotonic(), time.time()
        self.data_paths.update(prepare_data([c for c in batch if c.data_key not in self.data_paths]))
        batch = [dataclasses.replace(c, data_dir=self.data_paths.get(c.data_key or ""),
                                     artifacts_dir=artifacts_dir_for(c, Path(artifacts_root))) for c in batch]
        platform = self.platforms[batch[0].platform_key]
        with applied_host_knobs(batch[0].knobs):
            outcomes = run_group(batch, platform)
        ended_wall = time.time()
        for outcome in outcomes:
            outcome.platform_info.update(host=self.hostname, host_key=self.host_key, runner=runner_tag())
            outcome.platform_info["ray"] = {"node_id": self.node_id, "unit_start": began_wall,
                                            "unit_end": ended_wall}
        return {"outcomes": outcomes, "display": platform.display(), "agent_s": time.monotonic() - began}

    def sweep(self) -> list[str]:
        """Remove what dead runners left on this host (an agent killed mid-cell, for one)."""
        from isobench.runner.leftovers import sweep_leftovers

        restored, removed = sweep_leftovers()
        return removed + restored

    def finish(self) -> list[str]:
        """Clean up this node: the platforms' shared state, empty cgroups, dead runners' leftovers."""
        from isobench.liveness import prune_stale_runner_locks, runner_tag
        from isobench.platforms.cgroups import prune_empty

        removed: list[str] = []
        for platform in self.platforms.values():
            try:
                platform.cleanup()
            except Exception as exc:
                removed.append(f"cleanup of {platform.display()} failed: {exc}")
            removed.extend(type(platform).sweep_stale())
        prune_empty(runner_tag())
        prune_stale_runner_locks()
        return removed


# -- the head side --------------------------------------------------------------------------------

def ray_module() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("Ray is not installed in this environment", field="--ray",
                        fix="./isobench.sh setup installs it (or pip install ray)") from None
    return ray


def connect(address: str, allow_unauthenticated: bool = False) -> Any:
    """Join the cluster at ``address`` ("auto": the one this machine belongs to) as a driver."""
    return connect_with_auth(address, allow_unauthenticated)[0]


def connect_with_auth(address: str, allow_unauthenticated: bool = False) -> tuple[Any, str]:
    """Join as :func:`connect` does; also say the cluster's authentication mode (token or disabled).

    A cluster that lets clients in without a token is refused unless ``allow_unauthenticated``:
    the agents run as root, so whoever reaches its port would too (runner/rayauth.py)."""
    from isobench.runner.rayauth import check_cluster_auth

    ray = ray_module()
    fix = "start one (`ray start --head`, README: \"Studies on a Ray cluster\") or pass its address as HOST:PORT"
    if address != "auto":
        # ray.init retries an address nobody answers at for minutes: ask once, briefly
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise UserError(f"{address!r} is not a cluster address", field="--ray", fix="write HOST:PORT or auto")
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
        except OSError as exc:
            raise UserError(f"no Ray cluster answers at {address!r}: {exc}", field="--ray", fix=fix) from None
    mode = check_cluster_auth(address, allow_unauthenticated)
    try:
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                 configure_logging=True)
    except ray.exceptions.AuthenticationError:
        raise UserError(f"the Ray cluster at {address!r} refused this machine's authentication token",
                        field="--ray", fix="use the head's token (`ray get-auth-token` there) in ~/.ray/auth_token, "
                                           "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH") from None
    except Exception as exc:  # ConnectionError, ValueError (bad address), RuntimeError (none running)
        raise UserError(f"no Ray cluster answers at {address!r}: {type(exc).__name__}: {str(exc)[:200]}",
                        field="--ray", fix=fix) from None
    return ray, mode


def start_agents(ray: Any, only: set[str] | None = None) -> list[tuple[dict[str, Any], Any]]:
    """One agent actor per live node (or per node id in ``only``), pinned there: [(node record, actor)]."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    agent_cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(NodeAgent)
    agents = []
    for node in ray.nodes():
        if not node.get("Alive") or (only is not None and node["NodeID"] not in only):
            continue
        labels = {k: str(v) for k, v in (node.get("Labels") or {}).items()}
        actor = agent_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                                  ).remote(node["NodeID"], labels)
        agents.append((node, actor))
    return agents


def gather(ray: Any, refs: list[Any], timeout: float) -> list[Any]:
    """Each call's result, or the exception it ended with: a node that died a moment ago may still
    be listed alive (Ray notices missed heartbeats only after a while), and its agent never answers."""
    results: list[Any] = []
    deadline = time.monotonic() + timeout
    for ref in refs:
        try:
            results.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
        except (ray.exceptions.RayError, ray.exceptions.GetTimeoutError) as exc:
            results.append(exc)
    return results


def describe_nodes(ray: Any, full: bool = False) -> list[dict[str, Any]]:
    """Every live node's description (host, labels, platforms), for `isobench doctor --ray`."""
    agents = start_agents(ray)
    try:
        described = gather(ray, [actor.describe.remote(full) for _, actor in agents], timeout=600)
    finally:
        for _, actor in agents:
            ray.kill(actor)
    answered = []
    for (node, _), info in zip(agents, described, strict=True):
        if isinstance(info, Exception):  # listed alive, but gone
            continue
        info["address"] = node.get("NodeManagerAddress", "")
        info["resources"] = node.get("Resources", {})
        answered.append(info)
    return answered


@dataclass
class Node:
    info: dict[str, Any]
    actor: Any
    usable: dict[str, str] = field(default_factory=dict)
    queue: deque[list[Cell]] = field(default_factory=deque)
    running: dict[Any, tuple[list[Cell], float]] = field(default_factory=dict)  # ref -> (unit, sent at)
    alive: bool = True
    warmed: bool = False

    @property
    def host(self) -> str:
        return str(self.info["host_key"])

    @property
    def kind(self) -> dict[str, str]:
        """What a node alike must share: its class labels. Docker and KVM are left to ``can_run``
        (the KVM label may be stale or untested on a node that is otherwise the same)."""
        return {k: v for k, v in class_labels(self.info["labels"]).items() if k not in ("host", "docker", "kvm")}

    def can_run(self, unit: list[Cell]) -> bool:
        cell = unit[0]
        if self.usable.get(cell.platform_key, "unknown") != "":
            return False
        device = str(cell.params.get("device", "cpu"))
        return not (device.startswith("cuda") and not self.info.get("gpus"))


def _suffixed(unit: list[Cell], host: str) -> list[Cell]:
    return [dataclasses.replace(c, cell_id=f"{c.cell_id}@{host}") for c in unit]


def _lost_outcome(cell: Cell, why: str) -> CellOutcome:
    return CellOutcome(cell=cell, status="lost", exit_code=None, error=why, stderr_tail="",
                       started_at=time.time(), wall_s=0.0, startup_s=None)


class Scheduler:
    """Which unit each node runs next (see the module's docstring for the policy)."""

    def __init__(self, nodes: list[Node], plan: list[Cell], done: set[str], mode: str) -> None:
        from isobench.runner.tenancy import tenant_batches

        self.nodes, self.mode, self.done = nodes, mode, done
        units = list(tenant_batches(plan))
        self.warmup = [u for u in units if u[0].warmup]
        self.rounds: deque[list[list[Cell]]] = deque()
        by_round: dict[int, list[list[Cell]]] = {}
        for unit in units:
            if not unit[0].warmup:
                by_round.setdefault(unit[0].rep, []).append(unit)
        #: units a host cannot run in `each` mode: recorded unavailable, with the node's reason
        self.unrunnable: list[tuple[list[Cell], str]] = []
        if mode == "each":
            for node in nodes:
                for unit in units:
                    mine = _suffixed(unit, node.host)
                    if node.can_run(unit):
                        node.queue.append(mine)
                    elif self._pending(mine):
                        why = node.usable.get(unit[0].platform_key) or "it needs a GPU and this host has none"
                        self.unrunnable.append((mine, f"{unit[0].platform_key} cannot run on host {node.host}: {why}"))
        else:
            self.rounds.extend(by_round[r] for r in sorted(by_round))

    def _pending(self, unit: list[Cell]) -> bool:
        return any(c.cell_id not in self.done for c in unit)

    def next_unit(self, node: Node) -> list[Cell] | None:
        if self.mode == "spread" and not node.warmed:
            node.warmed = True  # each host warms up itself before its first measured round
            node.queue.extendleft(reversed([_suffixed(u, node.host) for u in self.warmup if node.can_run(u)]))
        while True:
            while node.queue:
                unit = node.queue.popleft()
                if self._pending(unit):
                    return unit
            if not self.rounds:
                return None
            self._claim_round(node)
            if not node.queue:
                return None  # nothing here for this node (now): others take the rounds left

    def _claim_round(self, node: Node) -> None:
        """Take the next round this node can run whole. Only a round that no live node can run
        whole is split: then the node takes its part and the rest goes back for others."""
        pending = [[u for u in r if self._pending(u)] for r in self.rounds]
        for index, units in enumerate(pending):
            if units and all(node.can_run(u) for u in units):
                del self.rounds[index]
                node.queue.extend(units)
                return
        whole_elsewhere = any(n.alive and n is not node and all(n.can_run(u) for u in units)
                              for units in pending if units for n in self.nodes)
        if whole_elsewhere:
            return  # leave whole rounds to nodes that keep a round on one host
        for index, units in enumerate(pending):
            mine = [u for u in units if node.can_run(u)]
            if mine:
                del self.rounds[index]
                rest = [u for u in units if not node.can_run(u)]
                if rest:
                    self.rounds.insert(index, rest)
                node.queue.extend(mine)
                return

    def reassign(self, lost: Node, units: list[list[Cell]], why: str) -> list[tuple[list[Cell], str]]:
        """A lost node's units go to live nodes alike; returns the units no such node can run."""
        stranded = []
        for unit in units:
            if not self._pending(unit):
                continue
            reruns = int(unit[0].extra.get("reruns", 0))
            alike = [n for n in self.nodes if n.alive and n.kind == lost.kind and n.can_run(unit)]
            if not alike or reruns >= MAX_RERUNS:
                reason = (f"{why}; tried {reruns + 1} times" if alike else
                          f"{why}, and no live node has its labels {lost.kind}")
                stranded.append((unit, reason))
                continue
            target = min(alike, key=lambda n: (len(n.queue) + len(n.running)))
            again = [dataclasses.replace(c, extra={**c.extra, "reruns": reruns + 1, "lost_on": lost.host})
                     for c in unit]
            target.queue.appendleft(again)
        return stranded

    def stranded_rounds(self) -> list[list[Cell]]:
        """Measured rounds' units no live node can run (after losses): recorded lost at the end."""
        left = [u for r in self.rounds for u in r if self._pending(u)]
        self.rounds.clear()
        return left


def select_nodes(agents: list[tuple[dict[str, Any], Any]], described: list[dict[str, Any]],
                 wanted: dict[str, str | list[str]], console: Console) -> list[Node]:
    nodes: list[Node] = []
    seen_hosts: dict[str, str] = {}
    for (_, actor), info in zip(agents, described, strict=True):
        if not matches(info["labels"], wanted):
            continue
        if info["host_key"] in seen_hosts:
            # two Ray nodes on one host would measure each other: use one of them
            console.print(markup("[yellow]node {} is on host {} like node {}: using only one node per host[/] "
                                 "(give nodes on separate hosts distinct `{}` labels only if they truly are "
                                 "separate)", info["node_id"][:8], info["host_key"],
                                 seen_hosts[info["host_key"]][:8], HOST_LABEL))
            continue
        seen_hosts[info["host_key"]] = info["node_id"]
        nodes.append(Node(info, actor))
    return nodes


def run_study_on_ray(study_text: str | None, file: str | None, out: Path | None, resume: bool,
                     console: Console, address: str, allow_unauthenticated: bool = False) -> Path:
    from isobench.fingerprint import host_fingerprint
    from isobench.runner.study import open_store
    from isobench.store import Store

    study, study_text, file, out, store = open_store(study_text, file, out, resume)
    hosts = study.hosts
    mode = hosts.mode if hosts else "spread"
    if study.schedule == "duet":  # a pair shares one host's cores: the node agents run one cell at a time
        raise UserError("schedule: duet runs a pair on one host's cores and cluster runs send one cell at a "
                        "time to a node", file=file, field="schedule", fix="use schedule: sequential with --ray")
    if study.repetitions == "auto" and mode == "each":
        raise UserError("repetitions: auto on a cluster needs hosts.mode spread", file=file, field="hosts.mode",
                        fix="use mode spread, or give a number of repetitions")
    slots = hosts.cells_per_node if hosts else 1
    ray = connect(address, allow_unauthenticated)
    agents: list[tuple[dict[str, Any], Any]] = []
    nodes: list[Node] = []
    interrupted = True  # until the cells are done: any exit on the way kills and sweeps
    try:
        agents = start_agents(ray)
        described = gather(ray, [actor.describe.remote() for _, actor in agents], timeout=600)
        for (node, _), info in zip(agents, described, strict=True):
            if isinstance(info, Exception):
                console.print(markup("[yellow]node {} does not answer, left out[/]: {}", node["NodeID"][:8],
                                     type(info).__name__))
        answering = [(a, d) for a, d in zip(agents, described, strict=True) if not isinstance(d, Exception)]
        nodes = select_nodes([a for a, _ in answering], [d for _, d in answering],
                             hosts.labels if hosts else {}, console)
        if not nodes:
            raise UserError(f"no live node of the cluster at {address} matches hosts.labels "
                            f"{hosts.labels if hosts else {}}", file=file, field="hosts.labels",
                            fix="see the nodes' labels with `isobench doctor --ray ADDRESS`")
        usable = gather(ray, [n.actor.prepare.remote(study_text, file) for n in nodes], timeout=1800)
        for node, reasons in zip(nodes, usable, strict=True):
            if isinstance(reasons, ray.exceptions.RayTaskError):
                raise reasons  # a bug in the agent: say so rather than hide the node
            if isinstance(reasons, Exception):
                node.alive = False
                console.print(markup("[yellow]node of host {} was lost while preparing, left out[/]", node.host))
                continue
            node.usable = reasons
        nodes = [n for n in nodes if n.alive]
        if not nodes:
            raise UserError(f"every selected node of the cluster at {address} was lost while preparing",
                            field="--ray", fix="check the cluster (`isobench doctor --ray ADDRESS`) and resume")
        for index, entry in enumerate(study.platforms):
            if not any(n.usable.get(entry.key) == "" for n in nodes):
                why = "; ".join(f"{n.host}: {n.usable.get(entry.key)}" for n in nodes)
                raise UserError(f"{entry.name} cannot run on any selected node ({why})", file=file,
                                field=f"platforms[{index}]", fix="see `isobench doctor --ray ADDRESS`, or drop it")

        if store is None:
            fingerprint = host_fingerprint()
            fingerprint["cluster"] = {"address": address, "mode": mode}
            store = Store.create(out, study_text, study.name, file, fingerprint)
        known = json.loads(store.meta("hosts") or "{}")
        for node in nodes:
            known[node.host] = {"labels": class_labels(node.info["labels"]), "fingerprint": node.info["fingerprint"],
                                "node_id": node.info["node_id"]}
        store.set_meta("hosts", json.dumps(known, sort_keys=True, default=str))
        plan, more_rounds = (_adaptive_plan(study, store, nodes, console) if study.repetitions == "auto"
                             else (expand(study), None))
        done = store.finished_ids()
        scheduler = Scheduler(nodes, plan, done, mode)
        total = sum(len(u) for n in nodes for u in n.queue) + sum(len(u) for u, _ in scheduler.unrunnable) \
            if mode == "each" else (
            sum(not c.warmup for c in plan) + sum(len(u) for u in scheduler.warmup) * len(nodes))
        console.print(markup("study [bold]{}[/] on {} host(s) ({}), mode {}: about {} cells ({} already done) -> {}",
                             study.name, len(nodes), ", ".join(n.host for n in nodes), mode, total, len(done), out))
        failures = _drive(ray, scheduler, nodes, slots, store, out, console, total, len(done), more_rounds)
        interrupted = False
    except KeyboardInterrupt:
        console.print(markup("\n[yellow]interrupted[/]: finished cells are saved; continue with "
                             "`isobench run --resume --out {} --ray {}`", out, address))
        raise
    finally:
        _finish_nodes(ray, nodes, console, interrupted)
        for _, actor in agents:  # the nodes not selected, too
            try:
                ray.kill(actor)
            except Exception:
                pass
        ray.shutdown()
        if store is not None:
            store.close()
    if failures:
        console.print(markup("[red]{} cell(s) failed or were lost[/]; `isobench summary {}` lists them", failures, out))
    return out


Rounds = list[list[list[Cell]]]  # rounds of units of cells


def _adaptive_plan(study: Any, store: Any, nodes: list[Node], console: Console
                   ) -> tuple[list[Cell], Callable[[], Rounds]]:
    """`repetitions: auto` on a cluster: the planned rounds, and a function that decides, once
    they are all back, whether to add more: one round per live host at a time."""
    from isobench.runner.adaptive import _round, decide, finished_rounds
    from isobench.runner.tenancy import tenant_batches

    settings = study.adaptive
    state = {"rounds": max(study.initial_repetitions, finished_rounds(store)),
             "previous": json.loads(store.meta("adaptive") or "null")}
    plan = expand(study)
    previous = state["previous"]
    if previous and previous.get("active") and state["rounds"] > study.initial_repetitions:
        # resumed after adaptive rounds began: finish the last one's groups
        plan += _round(expand(study, state["rounds"]), state["rounds"] - 1, set(previous["active"]))

    def more() -> Rounds:
        decision = decide(store, study, state["rounds"], state["previous"])
        state["previous"] = decision.as_meta(settings.target, settings.metric) | {
            "active": sorted(decision.active_groups)}
        store.set_meta("adaptive", json.dumps(state["previous"]))
        if decision.stop:
            console.print(f"adaptive repetitions: stopped after {state['rounds']} round(s): {decision.reason}")
            return []
        added: Rounds = []
        for _ in range(max(1, sum(n.alive for n in nodes))):
            if state["rounds"] >= settings.max_repetitions:
                break
            state["rounds"] += 1
            cells = _round(expand(study, state["rounds"]), state["rounds"] - 1, decision.active_groups)
            added.append(list(tenant_batches(cells)))
        console.print(f"adaptive repetitions: rounds up to {state['rounds']}: {decision.reason}")
        return added

    return plan, more


def _drive(ray: Any, scheduler: Scheduler, nodes: list[Node], slots: int, store: Any, out: Path,
           console: Console, total: int, already: int, more_rounds: Callable[[], Rounds] | None) -> int:
    """Keep every live node busy with one unit (``slots`` with co-location) and store results;
    with ``more_rounds`` (adaptive repetitions), ask for more rounds whenever all are back."""
    from isobench.runner.study import sigterm_as_interrupt

    failures = 0
    progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                        TimeRemainingColumn(), console=console, transient=False)  # labels are plain text
    by_ref: dict[Any, Node] = {}

    def record(outcomes: list[CellOutcome], display: str) -> None:
        nonlocal failures
        store.record_all(outcomes, display)
        for outcome in outcomes:
            scheduler.done.add(outcome.cell.cell_id)
            if outcome.status not in ("ok", "unavailable"):
                failures += 1
                progress.console.print(markup("[red]{}[/] {}: {}", outcome.status, outcome.cell.cell_id,
                                              outcome.error))
            progress.advance(task)

    with sigterm_as_interrupt(), progress:
        task = progress.add_task("running", total=total, completed=already)
        for unit, why in scheduler.unrunnable:
            record([dataclasses.replace(_lost_outcome(c, why), status="unavailable") for c in unit],
                   unit[0].platform_key)
        while True:
            for node in nodes:
                while node.alive and len(node.running) < slots:
                    unit = scheduler.next_unit(node)
                    if unit is None:
                        break
                    ref = node.actor.run.remote(unit, str(out.resolve()))
                    node.running[ref] = (unit, time.monotonic())
                    by_ref[ref] = node
                    progress.update(task, description=f"{node.host}: {unit[0].workload_key} on {unit[0].platform_key}")
            if not by_ref:
                extra = more_rounds() if more_rounds is not None else []
                if not extra:
                    break
                scheduler.rounds.extend(extra)
                progress.update(task, total=(progress.tasks[0].total or 0) + sum(len(u) for r in extra for u in r))
                continue
            ready, _ = ray.wait(list(by_ref), num_returns=1, timeout=5.0)
            for ref in ready:
                node = by_ref.pop(ref)
                unit, sent = node.running.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayActorError as exc:  # the node (or its agent) is gone
                    node.alive = False
                    for other_ref in list(node.running):
                        unit_more, _ = node.running.pop(other_ref)
                        by_ref.pop(other_ref, None)
                        node.queue.appendleft(unit_more)
                    why = f"node {node.info['node_id'][:8]} (host {node.host}) was lost mid-cell"
                    progress.console.print(markup("[yellow]{}[/]: {}; re-running its {} unit(s) on nodes alike",
                                                  why, type(exc).__name__, len(node.queue) + 1))
                    stranded = scheduler.reassign(node, [unit, *node.queue], why)
                    node.queue.clear()
                    for lost_unit, reason in stranded:
                        record([_lost_outcome(c, reason) for c in lost_unit], unit[0].platform_key)
                    continue
                except ray.exceptions.RayTaskError as exc:  # a bug in the agent: the node lives on
                    message = str(exc).strip().splitlines()[-1][:500]
                    record([CellOutcome(cell=c, status="failed", exit_code=None,
                                        error=f"the node's agent failed: {message}", stderr_tail=str(exc)[-2000:],
                                        started_at=time.time(), wall_s=0.0, startup_s=None) for c in unit],
                           unit[0].platform_key)
                    continue
                head_s = time.monotonic() - sent
                for outcome in result["outcomes"]:
                    info = outcome.platform_info.setdefault("ray", {})
                    info.update(host_key=node.host, head_s=head_s,
                                overhead_s=max(0.0, head_s - result["agent_s"]))
                    if outcome.cell.extra.get("reruns"):
                        info.update(reruns=outcome.cell.extra["reruns"], lost_on=outcome.cell.extra.get("lost_on"))
                record(result["outcomes"], result["display"])
        for unit in scheduler.stranded_rounds():
            gone = ", ".join(n.host for n in nodes if not n.alive)
            record([_lost_outcome(c, "no live node of the study can run it" + (f" (lost: {gone})" if gone else ""))
                    for c in unit], unit[0].platform_key)
    return failures


def _finish_nodes(ray: Any, nodes: list[Node], console: Console, interrupted: bool) -> None:
    """Clean every live node up and end the agents.

    After a normal end the agents are idle and clean up themselves. After an interrupt they may
    be mid-cell, and a Ray actor's running task cannot be interrupted: the agents are killed and
    a fresh agent on each node sweeps what they left (their runner locks died with them)."""
    live = [n for n in nodes if n.alive]
    if interrupted:
        for node in nodes:
            try:
                ray.kill(node.actor)
            except Exception:
                pass
        janitors = start_agents(ray, {n.info.get("node_id") for n in live})
        refs = [actor.sweep.remote() for _, actor in janitors]
        actors = [actor for _, actor in janitors]
    else:
        refs = [n.actor.finish.remote() for n in live]
        actors = [n.actor for n in nodes]
    try:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=120)
        for ref in ready:
            try:
                for removed in ray.get(ref):
                    console.print(markup("[yellow]removed a leftover:[/] {}", removed))
            except Exception:  # a node lost at the very end: its own next run sweeps it
                pass
    finally:
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:
                pass
