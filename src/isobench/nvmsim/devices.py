"""Storage device models: a fixed access latency per page plus, optionally, transfer time.

HDD and PCM carry the parameters Park & Bahn used (Toshiba DT01ACA1 HDD: 8 ms read/write
access; PCM: 350 ns write). The other presets are typical published figures, given so a
user can compare media; every value can be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

PAGE_BYTES = 4096


@dataclass(frozen=True)
class Device:
    name: str
    read_s: float
    write_s: float
    bandwidth_bytes_s: float | None = None  # None: transfer time folded into the latency

    def _transfer(self) -> float:
        return PAGE_BYTES / self.bandwidth_bytes_s if self.bandwidth_bytes_s else 0.0

    @property
    def page_write_s(self) -> float:
        return self.write_s + self._transfer()

    @property
    def page_read_s(self) -> float:
        return self.read_s + self._transfer()


PRESETS: dict[str, Device] = {
    "hdd": Device("hdd", read_s=8e-3, write_s=8e-3),  # Park & Bahn: Toshiba DT01ACA1
    "sata-ssd": Device("sata-ssd", read_s=90e-6, write_s=60e-6, bandwidth_bytes_s=500e6),
    "nvme-ssd": Device("nvme-ssd", read_s=80e-6, write_s=20e-6, bandwidth_bytes_s=3e9),
    "pcm": Device("pcm", read_s=100e-9, write_s=350e-9),  # Park & Bahn: PCM write 350 ns
    "optane": Device("optane", read_s=300e-9, write_s=100e-9, bandwidth_bytes_s=2e9),
}


def device(name: str, **overrides: float) -> Device:
    """A preset with some values replaced, e.g. ``device("hdd", write_s=5e-3)``."""
    if name not in PRESETS:
        raise ValueError(f"unknown device {name!r}; use one of {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)
