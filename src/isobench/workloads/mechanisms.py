"""Known mechanisms, each a counted number of kernel events: the ground truth a "why" is tested on.

Two causes whose cost per event a platform is known to change: a system call (a trip into the
kernel and back: gVisor's sentry intercepts each) and a minor page fault (a fresh anonymous page
that the kernel maps and zeroes on its first write: gVisor's sentry handles each, a VM's nested
page tables make each dearer). The ``syscall-loop`` and ``fault-loop`` workloads time them one by
one; the ``extra_syscalls`` and ``extra_faults`` knobs add them to any workload's items
(workloads/timing.py), so the count a probe or the done record's ``run_faults`` reads is known.
Both use these helpers, so what a workload measures per event is exactly what an injection adds.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from functools import cache

PAGESIZE = mmap.PAGESIZE
#: the most pages one mapping holds at once (256 MiB of 4 KiB pages): a larger count is touched
#: in several mappings, one after the other, so the resident set never grows past this
CHUNK_PAGES = 1 << 16


def make_syscalls(calls: int) -> None:
    """``calls`` real system calls: ``getppid()`` enters the kernel every time (the C library caches
    no parent pid) and does almost nothing there, so its cost is the kernel entry itself."""
    getppid = os.getppid
    for _ in range(calls):
        getppid()


@cache
def page_writer() -> Callable[[mmap.mmap, int], None]:
    """How one byte of each page of a mapping gets written: a strided numpy store (one C loop),
    or a Python loop where numpy is missing. Call it once before any timed item: it imports numpy."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover (numpy is a dependency; a bare interpreter still works)
        def write_loop(region: mmap.mmap, size: int) -> None:
            for offset in range(0, size, PAGESIZE):
                region[offset] = 1

        return write_loop

    uint8 = np.uint8

    def write_numpy(region: mmap.mmap, size: int) -> None:
        np.frombuffer(region, uint8)[::PAGESIZE] = 1  # the view is gone before the caller unmaps

    return write_numpy


def touch_fresh_pages(pages: int) -> None:
    """``pages`` minor page faults: map a fresh anonymous private region, write one byte in each of
    its pages (the first write to each takes exactly one fault: the kernel allocates and zeroes
    it), then unmap it. Transparent huge pages are refused for the region (``MADV_NOHUGEPAGE``):
    with THP ``always``, one fault would map 512 pages of an aligned 2 MiB stretch at once."""
    write = page_writer()
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    protection = mmap.PROT_READ | mmap.PROT_WRITE
    no_huge = getattr(mmap, "MADV_NOHUGEPAGE", None)
    while pages > 0:
        chunk = min(pages, CHUNK_PAGES)
        size = chunk * PAGESIZE
        region = mmap.mmap(-1, size, flags=flags, prot=protection)
        try:
            if no_huge is not None:
                region.madvise(no_huge)
            write(region, size)
        finally:
            region.close()
        pages -= chunk
