"""The KVM verdict is kept until the host reboots or QEMU changes: booting the test guest takes up
to 20 s where guests never boot, and a run of the suite asked for it several times. A missing QEMU
is asked anew each time. The boot itself is replaced here: this host cannot boot a KVM guest and
cannot be made to."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from isobench.platforms import kvm


@pytest.fixture
def tested(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    qemu = tmp_path / "qemu-system-x86_64"
    qemu.write_text("#!/bin/sh\n")
    monkeypatch.setattr(kvm, "VERDICT_FILE", tmp_path / "state" / "kvm-verdict.json")
    monkeypatch.setattr(kvm, "STATE_ROOT", tmp_path / "state")
    monkeypatch.setattr(kvm, "qemu_binary", lambda: str(qemu) if qemu.exists() else None)
    calls: list[int] = []

    def boot() -> kvm.KvmVerdict:
        calls.append(1)
        if not qemu.exists():
            return kvm.KvmVerdict(False, "QEMU is not installed", 0.0)
        return kvm.KvmVerdict(False, "a KVM guest does not boot", 0.0, booted_or_not=True)

    monkeypatch.setattr(kvm, "_test_kvm", boot)
    return calls


def test_a_boot_test_is_kept_until_qemu_changes(tested: list[int], tmp_path: Path) -> None:
    first = kvm.kvm_verdict()
    assert first.works is False and "does not boot" in first.reason
    for _ in range(3):
        assert kvm.kvm_verdict().reason == first.reason
    assert len(tested) == 1  # one boot test for four questions
    qemu = tmp_path / "qemu-system-x86_64"
    os.utime(qemu, ns=(1, 1))  # QEMU replaced: asked anew
    kvm.kvm_verdict()
    assert len(tested) == 2
    kvm.kvm_verdict(refresh=True)
    assert len(tested) == 3


def test_a_missing_qemu_is_asked_anew_each_time(tested: list[int], tmp_path: Path) -> None:
    (tmp_path / "qemu-system-x86_64").unlink()
    assert "not installed" in kvm.kvm_verdict().reason
    assert "not installed" in kvm.kvm_verdict().reason
    assert len(tested) == 2 and not (tmp_path / "state" / "kvm-verdict.json").exists()
