"""The ``malloc`` knob: glibc allocator settings that cut mmap churn, the same on every platform.

glibc serves an allocation above ``M_MMAP_THRESHOLD`` (128 KiB at first, raised as such blocks are
freed) with a fresh ``mmap`` and gives it back with ``munmap`` when freed, and trims the heap's top
back to the kernel past ``M_TRIM_THRESHOLD``: a workload that allocates and frees large tensors each
item maps, faults in and unmaps the same memory every time. ``malloc: tuned`` keeps it: blocks up to
32 MiB come from the heap, which is trimmed only past 256 MiB free and grows 64 MiB at a time.

The environment variables (``MALLOC_MMAP_THRESHOLD_`` ...) are read when the C library starts, before
any isobench code runs, and no platform passes a cell an environment of the study's choosing; so the
worker, the one process every platform starts, applies them itself with ``mallopt`` before the
workload is imported, and exports them for the processes it starts (a DataLoader's workers).
"""

from __future__ import annotations

import ctypes
import os

#: ``malloc`` value -> (environment variable, mallopt parameter, value)
SETTINGS: dict[str, tuple[tuple[str, int, int], ...]] = {
    "tuned": (("MALLOC_MMAP_THRESHOLD_", -3, 32 * 2**20),   # M_MMAP_THRESHOLD (its maximum on 64-bit)
              ("MALLOC_TRIM_THRESHOLD_", -1, 256 * 2**20),  # M_TRIM_THRESHOLD
              ("MALLOC_TOP_PAD_", -2, 64 * 2**20)),         # M_TOP_PAD
}


def allocator_env(value: str) -> dict[str, str]:
    """The environment variables ``malloc: value`` stands for."""
    return {name: str(setting) for name, _, setting in SETTINGS[value]}


def apply_malloc(value: str) -> dict[str, str]:
    """Set the allocator for this process (``mallopt``) and its children (the environment); return
    the settings, for the cell's notes. Raises RuntimeError where the C library has no ``mallopt``
    (not glibc): the cell then fails with that line rather than run untuned."""
    libc = ctypes.CDLL(None)
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        raise RuntimeError(f"malloc: {value} needs glibc's mallopt, which this C library lacks")
    for name, param, setting in SETTINGS[value]:
        if mallopt(ctypes.c_int(param), ctypes.c_int(setting)) != 1:
            raise RuntimeError(f"malloc: {value}: mallopt refused {name.rstrip('_')}={setting}")
    env = allocator_env(value)
    os.environ.update(env)
    return env
