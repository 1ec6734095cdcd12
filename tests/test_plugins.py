"""Plugins from outside the tree: entry points of other distributions, loaded beside the built-ins;
a broken one is skipped with one warning line, never a traceback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from isobench import registry
from isobench.platforms import PLATFORMS
from tests.conftest import ROOT

GROUPS = {"isobench.platforms": "PLATFORMS", "isobench.workloads": "WORKLOADS", "isobench.probes": "PROBES"}


def _distribution(site: Path, name: str, version: str, entry_points: str, modules: dict[str, str]) -> None:
    """An installed distribution as pip leaves it: modules plus a ``*.dist-info`` directory."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)
    for module, source in modules.items():
        (site / f"{module}.py").write_text(source)


def _isobench(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "isobench.cli", *args], capture_output=True, text=True,
                          env=env, timeout=120)


TOY = '''
from isobench.platforms import PLATFORMS
from isobench.platforms.baremetal import BareMetal


@PLATFORMS.register("toy-host")
class ToyHost(BareMetal):
    description = "a toy platform from a plugin"
'''

TOY_CLASS = '''
from isobench.platforms.baremetal import BareMetal


class Other(BareMetal):
    description = "a platform named by its entry point"
'''


def test_a_plugin_platform_is_listed(tmp_path: Path) -> None:
    _distribution(tmp_path, "toy-plugin", "0.1",
                  "[isobench.platforms]\ntoy = toy_platform\ntoy-other = toy_other:Other\n",
                  {"toy_platform": TOY, "toy_other": TOY_CLASS})
    out = _isobench(tmp_path, "platforms")
    assert out.returncode == 0, out.stderr
    assert "toy-host" in out.stdout and "a toy platform from a plugin" in out.stdout
    assert "toy-other" in out.stdout and "named by its entry point" in out.stdout
    assert "baremetal" in out.stdout and "docker" in out.stdout
    assert out.stderr == ""


def test_a_broken_plugin_warns_once_and_the_built_ins_still_list(tmp_path: Path) -> None:
    _distribution(tmp_path, "broken-plugin", "0.2", "[isobench.platforms]\nbroken = broken_platform\n",
                  {"broken_platform": "import isobench_no_such_dependency\n"})
    # a plugin taking a built-in's name is refused the same way, and the built-in stays
    _distribution(tmp_path, "clash-plugin", "1.0", "[isobench.platforms]\nclash = clash_platform\n",
                  {"clash_platform": TOY.replace('"toy-host"', '"docker"').replace("ToyHost", "Docker")})
    _distribution(tmp_path, "toy-plugin", "0.1", "[isobench.platforms]\ntoy = toy_platform\n",
                  {"toy_platform": TOY})
    out = _isobench(tmp_path, "platforms")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 2, out.stderr
    broken = next(line for line in lines if "'broken'" in line)
    assert "broken-plugin 0.2" in broken and "isobench_no_such_dependency" in broken
    clash = next(line for line in lines if "'clash'" in line)
    assert "clash-plugin 1.0" in clash and "registered twice" in clash
    for name in ("baremetal", "docker", "gvisor", "podman", "toy-host"):
        assert name in out.stdout
    assert "a toy platform from a plugin" in out.stdout
    assert "a Docker container" in out.stdout  # the built-in docker, not the clashing plugin's


def test_every_registering_module_is_declared_in_pyproject() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for group, variable in GROUPS.items():
        package = ROOT / "src" / Path(*group.split("."))
        registering = {
            ".".join(("isobench", *path.relative_to(package.parent.parent / "isobench").with_suffix("").parts))
            for path in package.rglob("*.py")
            if re.search(rf"^@{variable}\.register\(", path.read_text(), re.M)}
        assert registering == set(declared[group].values()), group


def test_a_stale_install_still_loads_the_checkouts_built_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    """An egg-info written before the entry points existed declares none: the checkout's
    pyproject.toml is read instead."""
    monkeypatch.setattr(registry, "_installed_entry_points", lambda: metadata.EntryPoints(()))
    modules = {ep.value for ep in PLATFORMS.builtin_entry_points()}
    assert "isobench.platforms.baremetal" in modules and "isobench.platforms.docker" in modules


def test_an_installed_wheel_reads_its_built_ins_from_its_metadata(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _distribution(tmp_path, "isobench", "9.9", "[isobench.platforms]\nbaremetal = isobench.platforms.baremetal\n", {})
    _distribution(tmp_path, "toy-plugin", "0.1", "[isobench.platforms]\ntoy = toy_platform\n", {})
    installed = metadata.EntryPoints(ep for dist in metadata.distributions(path=[str(tmp_path)])
                                     for ep in dist.entry_points)
    monkeypatch.setattr(registry, "_installed_entry_points", lambda: installed)
    monkeypatch.setattr(registry, "_checkout_entry_points", lambda: None)
    assert [ep.value for ep in PLATFORMS.builtin_entry_points()] == ["isobench.platforms.baremetal"]
    assert [ep.value for ep in PLATFORMS.plugin_entry_points()] == ["toy_platform"]
