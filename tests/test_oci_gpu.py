"""GPU passthrough on the oci platform (`options: {gpus: all}`), as `docker run --gpus all`: the
driver's character devices in the bundle with an allow rule each, its libraries found, and a
clear refusal where the host has no NVIDIA driver or the entry passes no GPU to a CUDA workload."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from isobench.errors import UserError
from isobench.plan.cells import Cell
from isobench.platforms.gpus import gpu_passthrough, gpu_selection
from isobench.platforms.oci import Oci, bundle_config
from isobench.study.model import PlatformEntry
from isobench.studyfile import load_study_text


def _fake_dev(tmp_path: Path, gpus: int = 2) -> Path:
    """A /dev stand-in whose nvidia* nodes are links to real character devices (os.stat follows them)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", *(f"nvidia{i}" for i in range(gpus))):
        (dev / name).symlink_to("/dev/null")
    (dev / "nvidia-caps").mkdir()
    (dev / "nvidia-caps" / "nvidia-cap1").symlink_to("/dev/zero")
    return dev


def _cell() -> Cell:
    return Cell(study="s", cell_id="oci-r0", seq=0, workload="cpu-spin", workload_key="cpu-spin", params={},
                platform="oci", platform_key="oci", platform_entry={"name": "oci", "options": {"gpus": "all"}},
                knobs={}, rep=0, warmup=False, seed=0, timeout_s=60)


def test_bundle_passes_the_gpu_devices_in_with_an_allow_rule_each(tmp_path: Path) -> None:
    null, zero = os.stat("/dev/null"), os.stat("/dev/zero")
    gpu = gpu_passthrough("all", dev=_fake_dev(tmp_path), libcuda_dirs=["/opt/driver/lib64", "/usr/lib/x86_64-linux-gnu"])
    config = bundle_config(_cell(), ["true"], tmp_path, "/isobench/t", "runc", gpu)
    json.dumps(config)  # the bundle is written as JSON
    devices = {d["path"]: d for d in config["linux"]["devices"]}
    assert set(devices) == {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
                            "/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap1"}
    assert devices["/dev/nvidia0"] | {} == {"path": "/dev/nvidia0", "type": "c", "major": os.major(null.st_rdev),
                                            "minor": os.minor(null.st_rdev), "fileMode": null.st_mode & 0o7777,
                                            "uid": null.st_uid, "gid": null.st_gid}
    assert devices["/dev/nvidia-caps/nvidia-cap1"]["minor"] == os.minor(zero.st_rdev)
    rules = config["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # deny everything first, then allow each node
    for device in devices.values():
        assert {"allow": True, "type": "c", "major": device["major"], "minor": device["minor"],
                "access": "rwm"} in rules
    # the driver's libraries outside the mirrored paths are bound; the loader's default directory needs nothing
    mounts = {m["destination"]: m for m in config["mounts"]}
    assert "ro" in mounts["/opt/driver/lib64"]["options"]
    env = dict(e.split("=", 1) for e in config["process"]["env"])
    assert "/opt/driver/lib64" in env["LD_LIBRARY_PATH"].split(":")
    assert "/usr/lib/x86_64-linux-gnu" not in env["LD_LIBRARY_PATH"].split(":")
    if os.path.isfile("/etc/ld.so.cache"):
        assert "ro" in mounts["/etc/ld.so.cache"]["options"]


def test_a_bundle_without_gpus_has_no_devices(tmp_path: Path) -> None:
    config = bundle_config(_cell(), ["true"], tmp_path, "/isobench/t", "runc")
    assert "devices" not in config["linux"] and config["linux"]["resources"]["devices"] == [
        {"allow": False, "access": "rwm"}]


def test_selected_gpus_only_and_a_missing_one_is_named(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path)
    paths = {d["path"] for d in gpu_passthrough([1], dev=dev, libcuda_dirs=[]).devices}
    assert "/dev/nvidia1" in paths and "/dev/nvidia0" not in paths and "/dev/nvidiactl" in paths
    with pytest.raises(ValueError, match="nvidia3"):
        gpu_passthrough([3], dev=dev, libcuda_dirs=[])
    assert gpu_selection("0, 1") == [0, 1] and gpu_selection(0) == [0] and gpu_selection("all") == "all"
    for bad in ("none", [], True, [-1]):
        with pytest.raises(ValueError, match="options.gpus"):
            gpu_selection(bad)


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="this host has an NVIDIA driver")
def test_gpu_entry_is_unavailable_without_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")  # runc or not, the GPU is the reason
    avail = Oci(PlatformEntry(name="oci", runtime="runc", options={"gpus": "all"})).availability()
    assert not avail.ok and "/dev/nvidiactl" in avail.reason and "\n" not in avail.reason


def _study(platform: dict, device: str = "cuda") -> str:
    return json.dumps({"name": "g", "workloads": [{"name": "resnet-infer", "params": {"device": device}}],
                       "platforms": [{"name": "baremetal"}, platform], "repetitions": 2, "warmup": 0})


def test_study_validation_names_the_field_a_cuda_workload_needs() -> None:
    with pytest.raises(UserError) as err:
        load_study_text(_study({"name": "oci", "label": "runc"}), "g.yaml", check_host=False)
    message = str(err.value)
    assert "platforms[1].options.gpus" in message and "device: cuda" in message and "gpus: all" in message
    load_study_text(_study({"name": "oci", "label": "runc", "options": {"gpus": "all"}}), "g.yaml", check_host=False)
    load_study_text(_study({"name": "oci", "label": "runc"}, device="cpu"), "g.yaml", check_host=False)
    for options, runtime, needle in (({"gpus": "some"}, "runc", "options.gpus"), ({"gpu": "all"}, "runc", "'gpu'"),
                                     ({"gpus": "all"}, "runsc", "runsc")):
        with pytest.raises(UserError, match=needle):
            load_study_text(_study({"name": "oci", "runtime": runtime, "options": options}), "g.yaml",
                            check_host=False)


def test_a_host_pythonpath_reaches_mirrored_cells(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Packages a host process imports through PYTHONPATH (a lent host's wheels unpacked beside the
    checkout) are searched inside a container cell too; missing or relative entries are left out."""
    from isobench.platforms.hostmirror import container_env, python_path

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), "relative", str(tmp_path / "gone")]))
    assert python_path() == [str(tmp_path)] and container_env()["PYTHONPATH"] == str(tmp_path)
    monkeypatch.delenv("PYTHONPATH")
    assert "PYTHONPATH" not in container_env()


def test_a_gpu_entry_builds_its_skeleton_with_the_mount_points_it_binds(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The root is read-only: the loader cache's file and the driver's library directory must exist in it."""
    import isobench.platforms.oci as oci

    monkeypatch.setenv("ISOBENCH_CACHE", str(tmp_path / "cache"))
    fake = gpu_passthrough("all", dev=_fake_dev(tmp_path), libcuda_dirs=["/opt/driver/lib64"])
    fake.ld_so_cache = True
    monkeypatch.setattr(oci, "gpu_passthrough", lambda selection: fake)
    platform = Oci(PlatformEntry(name="oci", runtime="runc", options={"gpus": "all"}))
    root = platform._skeleton()
    assert (root / "etc/ld.so.cache").is_file() and (root / "opt/driver/lib64").is_dir()
    assert platform.fingerprint()["gpus"] == "all"
    plain = Oci(PlatformEntry(name="oci", runtime="runc"))._skeleton()
    assert plain != root and not (plain / "etc/ld.so.cache").exists()


def test_a_driver_directory_that_links_into_the_mirrored_usr_is_not_bound_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H100 host's loader cache names /lib/libcuda.so.1, and its /lib links to usr/lib: bound as
    /lib, the skeleton could not make that mount point (its own /lib is the same link)."""
    import isobench.platforms.oci as oci

    link = tmp_path / "lib"
    link.symlink_to("/usr/lib")
    outside = tmp_path / "driver"
    outside.mkdir()
    gpu = gpu_passthrough("all", dev=_fake_dev(tmp_path), libcuda_dirs=[str(link), str(outside / ".." / "driver")])
    assert gpu.library_mounts == [str(outside)]  # the link is under /usr where it leads; the other is bound once
    monkeypatch.setenv("ISOBENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "again").mkdir()
    again = _fake_dev(tmp_path / "again")
    monkeypatch.setattr(oci, "gpu_passthrough", lambda selection: gpu_passthrough(
        "all", dev=again, libcuda_dirs=["/lib", str(link)]))
    root = Oci(PlatformEntry(name="oci", runtime="runc", options={"gpus": "all"}))._skeleton()
    assert (root / "lib").is_symlink() and (root / "usr").is_dir()  # built, its /lib still the link
