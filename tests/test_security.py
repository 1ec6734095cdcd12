"""Security items of issue 15 that need no VM: trace files, the engine's daemon.json,
artifacts planted by a cell, the serving workload's shutdown and the OCI seccomp filter."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import need_root, wait_for

# -- trace files in /dev/shm ----------------------------------------------------------------


def test_trace_file_is_private_and_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    need_root()
    from isobench.probes.tracefs import SHM, TraceInstance, tracefs_problem

    if tracefs_problem():
        pytest.skip(f"host lacks tracefs instances: {tracefs_problem()}")

    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    instance = TraceInstance("sec", ["sched/sched_process_exec"], 64)
    old_name = SHM / f"{instance.name}.trace"  # the name the file had before: guessable
    old_name.symlink_to(victim)
    try:
        instance.start()
        subprocess.run(["true"], check=True)  # an event for the reader to copy
        instance.stop()
        assert instance.trace_file != old_name and instance.trace_file.parent == SHM
        mode = instance.trace_file.lstat()
        assert stat.S_ISREG(mode.st_mode) and stat.S_IMODE(mode.st_mode) == 0o600
        assert victim.read_text() == "untouched\n" and old_name.is_symlink()
    finally:
        instance.discard()
        old_name.unlink(missing_ok=True)
    assert not instance.trace_file.exists()


# -- daemon.json ----------------------------------------------------------------------------


def test_daemon_json_with_comments_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    from isobench.platforms.engineconfig import EngineConfigError, merge_runtime

    config = tmp_path / "daemon.json"
    text = '{\n  // the admin\'s note\n  "log-level": "warn"\n}\n'
    config.write_text(text)
    with pytest.raises(EngineConfigError) as caught:
        merge_runtime(config, "runsc", "/usr/bin/runsc", ["--network=none"])
    message = str(caught.value)
    assert "\n" not in message and "not plain JSON" in message
    assert '"runsc": {"path": "/usr/bin/runsc"' in message and "by hand" in message
    assert config.read_text() == text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]  # no temp file left


def test_daemon_json_merge_keeps_settings_mode_and_owner(tmp_path: Path) -> None:
    from isobench.platforms.engineconfig import merge_runtime

    config = tmp_path / "daemon.json"
    config.write_text(json.dumps({"log-level": "warn", "runtimes": {"kata": {"path": "/k"}}}))
    config.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(config, 1234, 5678)
    inode = config.stat().st_ino
    change = merge_runtime(config, "runsc", "/usr/bin/runsc", ["--network=none"])
    assert change is not None and "added runtime 'runsc'" in change
    merged = json.loads(config.read_text())
    assert merged == {"log-level": "warn", "runtimes": {"kata": {"path": "/k"}, "runsc": {
        "path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}
    after = config.stat()
    assert stat.S_IMODE(after.st_mode) == 0o640 and after.st_ino != inode  # a new file, renamed in
    if os.geteuid() == 0:
        assert (after.st_uid, after.st_gid) == (1234, 5678)
    assert merge_runtime(config, "runsc", "/usr/bin/runsc", ["--network=none"]) is None
    assert config.stat().st_ino == after.st_ino  # nothing to change: not rewritten


def test_only_the_engine_reading_the_file_is_reloaded(tmp_path: Path) -> None:
    """A stand-in engine (a script named dockerd, with its own --config-file) gets the SIGHUP;
    an engine reading another file (the host's real dockerd, if any) is not among the pids."""
    from isobench.platforms.engineconfig import DEFAULT_DAEMON_JSON, engines_using, reload_engines

    config = tmp_path / "daemon.json"
    config.write_text("{}\n")
    other = tmp_path / "other.json"
    other.write_text("{}\n")
    hups = tmp_path / "hups"
    script = tmp_path / "dockerd"
    # Says it is ready once its trap is set: a SIGHUP before that would just kill it.
    script.write_text(f"#!/bin/sh\ntrap 'echo hup >> {hups}' HUP\ntouch \"$0.$$.ready\"\n"
                      "while :; do sleep 0.05; done\n")
    script.chmod(0o755)
    # sh cannot trap a signal that was ignored when it started (a suite run under nohup ignores
    # SIGHUP), so the stand-ins start with SIGHUP at its default.
    default_hup = lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL)  # noqa: E731
    mine = subprocess.Popen([str(script), "--config-file", str(config)], start_new_session=True,
                            preexec_fn=default_hup)
    bystander = subprocess.Popen([str(script), f"--config-file={other}"], start_new_session=True,
                                 preexec_fn=default_hup)
    try:
        for ready in (Path(f"{script}.{mine.pid}.ready"), Path(f"{script}.{bystander.pid}.ready")):
            wait_for(ready.exists, 10, "a stand-in engine to start")
        assert reload_engines(config) == [mine.pid]
        wait_for(lambda: hups.exists(), 5, "the SIGHUP to arrive")
        time.sleep(0.3)
        assert hups.read_text() == "hup\n"  # once, and the bystander (same script) sent nothing
        assert bystander.pid in engines_using(other) and bystander.pid not in engines_using(config)
        if DEFAULT_DAEMON_JSON.exists():
            assert not set(engines_using(DEFAULT_DAEMON_JSON)) & {mine.pid, bystander.pid}
    finally:
        for proc in (mine, bystander):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- the serving workload -------------------------------------------------------------------

SERVE = {"image_size": 32, "n_images": 8, "source_size": 40, "n_classes": 4, "top_k": 2,
         "requests": 6, "concurrency": 2, "warmup_requests": 1}


def _serve_cell(platform: str = "baremetal"):  # type: ignore[no-untyped-def]
    import dataclasses

    from isobench.plan import expand
    from isobench.runner.setup import prepare_data
    from isobench.studyfile import load_study_text

    text = json.dumps({"name": "sec", "workloads": [{"name": "serve", "params": SERVE}],
                       "platforms": [{"name": platform}], "knobs": {"threads": 1}, "repetitions": 1,
                       "warmup": 0, "probes": {}, "timeout_s": 300})
    cell = expand(load_study_text(text, "sec.yaml"))[0]
    return dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])


def _listening(port: int) -> list[str]:
    """Local addresses of the TCP sockets listening on ``port`` (from /proc/net/tcp{,6})."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.append(address)
    return found


def test_serving_shutdown_needs_the_cells_token_and_listens_on_loopback() -> None:
    import http.client

    from isobench.runner.execute import platform_for, worker_argv
    from isobench.workloads.serving import TOKEN_HEADER

    need_root()
    cell = _serve_cell()
    argv = worker_argv(cell, platform_for(cell))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        ready = None
        assert proc.stdout is not None
        for line in proc.stdout:
            record = json.loads(line)
            if record["type"] == "ready":
                ready = record
                break
        assert ready is not None and len(ready["token"]) >= 32
        port = ready["port"]
        assert _listening(port) == ["0100007F"]  # 127.0.0.1 only, never 0.0.0.0 (00000000)

        def post(headers: dict[str, str]) -> int:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("POST", "/shutdown", headers=headers)
            status = connection.getresponse().status
            connection.close()
            return status

        assert post({}) == 403 and post({TOKEN_HEADER: "x" * 43}) == 403
        time.sleep(1.0)  # the server's loop would have ended by now had it accepted either
        assert proc.poll() is None
        health = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        health.request("GET", "/health")
        assert health.getresponse().status == 200
        health.close()
        assert post({TOKEN_HEADER: ready["token"]}) == 200
        proc.wait(timeout=30)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_driver_ends_a_serving_cell_with_its_token() -> None:
    from isobench.runner.execute import run_cell

    need_root()
    outcome = run_cell(_serve_cell())
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail[-500:])
    assert outcome.platform_info["driver"]["address"].startswith("127.0.0.1:")
    assert outcome.platform_info["workload"]["server"]["listen"] == "127.0.0.1"
    assert "token" not in json.dumps(outcome.platform_info)  # the token is not stored with the results


# -- artifacts ------------------------------------------------------------------------------

TRAIN = {"image_size": 32, "n_images": 8, "source_size": 40, "n_classes": 4, "top_k": 2, "steps": 2,
         "batch_size": 4, "artifact": "tiny"}


def _cells(workloads: list[dict], platforms: list[dict]):  # type: ignore[no-untyped-def]
    from isobench.plan import expand
    from isobench.studyfile import load_study_text

    text = json.dumps({"name": "art", "workloads": workloads, "platforms": platforms, "knobs": {"threads": 1},
                       "repetitions": 1, "warmup": 0, "probes": {}, "timeout_s": 300})
    return expand(load_study_text(text, "art.yaml", check_host=False))


def test_a_planted_link_in_artifacts_is_not_written_through(tmp_path: Path) -> None:
    """A container cell (root in its own namespace) leaves links where a bare-metal producer,
    root on the host, writes next: its whole directory, its model file."""
    import dataclasses
    import shutil

    from isobench.platforms.artifact_dirs import artifacts_dir_for
    from isobench.runner.execute import run_cell
    from isobench.runner.setup import prepare_data

    need_root()
    out = tmp_path / "out"
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "passwd"
    victim.write_text("root:x:0:0\n")
    area = out / "artifacts" / "tiny" / "baremetal"
    area.parent.mkdir(parents=True)
    area.symlink_to(outside, target_is_directory=True)  # the producer's directory, a link to /etc say
    cell = _cells([{"name": "train-save", "params": TRAIN}], [{"name": "baremetal"}])[0]
    cell = dataclasses.replace(cell, data_dir=prepare_data([cell])[cell.data_key])

    def untouched() -> bool:
        return victim.read_text() == "root:x:0:0\n" and sorted(p.name for p in outside.iterdir()) == ["passwd"]

    given = artifacts_dir_for(cell, out)
    assert given == str(out.resolve() / "artifacts/tiny/baremetal") and area.is_dir() and not area.is_symlink()
    outcome = run_cell(dataclasses.replace(cell, artifacts_dir=given))
    assert outcome.status == "ok", (outcome.error, outcome.stderr_tail[-500:])
    assert untouched()
    model = area / "model.pt"
    assert model.is_file() and not model.is_symlink() and model.stat().st_size > 1000

    # Links left inside the directory are removed before the producer runs again.
    for planted in (model, area / "manifest.json"):
        planted.unlink()
        planted.symlink_to(victim)
    assert artifacts_dir_for(cell, out) == given and not any(area.iterdir()) and untouched()

    # A link that replaces the directory after the runner made it (a cell running beside it):
    # the producer refuses to open it, and the cell fails saying why.
    shutil.rmtree(area)
    area.symlink_to(outside, target_is_directory=True)
    outcome = run_cell(dataclasses.replace(cell, artifacts_dir=given))
    assert outcome.status == "failed" and "symbolic link is refused" in str(outcome.error)
    assert untouched()


def test_a_consumer_refuses_a_linked_model_and_mounts_read_only(tmp_path: Path) -> None:
    from isobench.platforms.artifact_dirs import artifacts_dir_for, artifacts_mode
    from isobench.workloads.artifacts import ArtifactError, load_model
    from isobench.workloads.channel import CellContext

    producer, consumer = _cells([{"name": "train-save", "params": TRAIN},
                                 {"name": "deploy-infer", "params": {"load_from": "tiny", "requests": 1, "n_classes": 4,
                                                                     "top_k": 2}}],
                                [{"name": "baremetal"}])
    assert producer.workload == "train-save" and consumer.workload == "deploy-infer"
    out = tmp_path / "out"
    area = Path(str(artifacts_dir_for(producer, out)))
    root = artifacts_dir_for(consumer, out)
    assert root == str(out.resolve() / "artifacts") and area.parent.parent == Path(root)
    assert (artifacts_mode(producer), artifacts_mode(consumer)) == ("rw", "ro")
    secret = tmp_path / "secret"
    secret.write_text("not a model")
    (area / "manifest.json").write_text(json.dumps({"producer_cell": producer.cell_id, "sha256": "x"}))
    (area / "model.pt").symlink_to(secret)
    with open(os.devnull, "w") as sink:
        ctx = CellContext(sink, {**consumer.worker_payload(), "artifacts_dir": root})
        with pytest.raises(ArtifactError, match="symbolic link is refused"):
            load_model(ctx, "tiny", None)
    # The engines get the same modes: a consumer container cannot write into the artifacts.
    from dataclasses import replace

    from isobench.platforms.oci import bundle_config

    for cell, mode in ((replace(producer, artifacts_dir=str(area)), "rw"), (replace(consumer, artifacts_dir=root), "ro")):
        config = bundle_config(cell, ["true"], tmp_path, "/isobench/t", "runc")
        mount = next(m for m in config["mounts"] if m["destination"] == cell.artifacts_dir)
        assert mode in mount["options"]


# -- the OCI seccomp filter -----------------------------------------------------------------

NAMESPACE_PROBE = '''
import ctypes, os, subprocess, threading
from isobench.api import metric

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
SIGCHLD, CLONE_NEWUSER, CLONE_NEWNET = 17, 0x10000000, 0x40000000


def clone(flags: int) -> int:
    """errno of a raw clone(flags) (0 when it worked; the child exits at once)."""
    pid = libc.syscall(56, ctypes.c_ulong(flags | SIGCHLD), None, None, None, None)  # SYS_clone
    if pid == 0:
        os._exit(0)
    if pid < 0:
        return ctypes.get_errno()
    os.waitpid(pid, 0)
    return 0


metric("newuser_errno", clone(CLONE_NEWUSER))
metric("newnet_errno", clone(CLONE_NEWNET))
metric("plain_clone_errno", clone(0))
args = (ctypes.c_uint64 * 11)(0, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)  # struct clone_args
pid = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(88))  # SYS_clone3
if pid == 0:
    os._exit(0)
metric("clone3_errno", ctypes.get_errno() if pid < 0 else 0)
unshare = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
metric("unshare_status", unshare.returncode)
seen = []
worker = threading.Thread(target=lambda: seen.append(1))
worker.start()
worker.join()
metric("thread_ran", len(seen))
metric("subprocess_status", subprocess.run(["true"]).returncode)
'''


def test_oci_default_filter_denies_new_namespaces_like_docker(tmp_path: Path) -> None:
    from isobench.plan import expand
    from isobench.runner.execute import platform_for, run_cell
    from isobench.studyfile import load_study_text
    from tests.conftest import need_tool

    need_tool("runc")
    script = tmp_path / "probe" / "ns_probe.py"
    script.parent.mkdir()
    script.write_text(NAMESPACE_PROBE)
    study = {"name": "ns", "workloads": [{"name": "script", "params": {"path": str(script)}}],
             "platforms": [{"name": "oci", "runtime": "runc"}, {"name": "baremetal"}],
             "knobs": {"seccomp": "default"}, "repetitions": 1, "warmup": 0, "probes": {}}
    found = {}
    for cell in expand(load_study_text(json.dumps(study), "ns.yaml")):
        platform = platform_for(cell)
        platform.prepare()
        outcome = run_cell(cell, platform)
        assert outcome.status == "ok", (outcome.error, outcome.stderr_tail[-800:])
        found[cell.platform] = {name: value[0] for name, value in outcome.done["metrics"].items()}
    inside = found["oci"]
    assert inside["newuser_errno"] == 1 and inside["newnet_errno"] == 1  # EPERM, as under Docker
    assert inside["clone3_errno"] == 38 and inside["unshare_status"] != 0  # ENOSYS: libc falls back to clone
    assert inside["plain_clone_errno"] == 0 and inside["thread_ran"] == 1 and inside["subprocess_status"] == 0
    # The probe itself can tell: on the host (root, no filter) the same calls work.
    assert found["baremetal"]["newuser_errno"] == 0 and found["baremetal"]["clone3_errno"] == 0
