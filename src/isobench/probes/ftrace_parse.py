"""Columnar parsing of ftrace's text stream (``trace_pipe``) for the events isobench enables.

One compiled pass (probes/ftrace_kernels.py) over the raw bytes fills typed arrays (no per-event Python objects):
``time_s`` (the instance's clock), ``pid`` (kernel task id), ``cpu``, ``event`` (an
``EVENTS`` code) and four integer fields ``a0..a3`` whose meaning depends on the event:

====================  ===========  ==========  ===========  ============
event                 a0           a1          a2           a3
====================  ===========  ==========  ===========  ============
writeback_start       reason       nr_pages    sb_dev       sync_mode
writeback_written     reason       nr_pages    sb_dev       sync_mode
writeback_dirty_folio ino          index       bdi dev      -
writeback_single_inode ino         wrote       bdi dev      writeback_index
(also ..._start)
block_rq_insert/issue dev          sector      nr_sector    rwbs bits
block_rq_complete     dev          sector      nr_sector    rwbs bits
block_bio_* (merges, queue) dev    sector      nr_sector    rwbs bits
block_*_buffer        dev          sector      size         -
page_fault_user       address      ip          error_code   -
sys_enter             syscall nr   -           -            -
task_newtask          child pid    clone_flags -            -
mm_filemap_add...     ino          index       dev          folio order
lost                  events lost  -           -            -
====================  ===========  ==========  ===========  ============

Devices are ``major << 20 | minor`` (the kernel's dev_t); -1 where a field is absent.
``line`` is each event's byte offset, so the task name (comm) can be read for the few
lines that need it. ``tests/ftrace_reference.py`` holds a line-by-line regex parser producing
the same columns: the tests check the two agree and the benchmark compares their speed.

The events of ``RAW_FIELDS`` (the cell's page faults, syscalls and new tasks: nearly all of a
trace's volume) can also be read as the kernel's binary ring-buffer pages (``parse_raw``): the
same columns, the fields found through each event's ``format`` file, times in nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

EVENTS = ("unknown", "writeback_start", "writeback_written", "writeback_dirty_folio",
          "writeback_single_inode", "block_rq_insert", "block_rq_issue", "block_rq_complete",
          "block_bio_backmerge", "block_bio_frontmerge", "block_touch_buffer", "block_dirty_buffer",
          "page_fault_user", "sys_enter", "task_newtask", "mm_filemap_add_to_page_cache", "lost",
          "writeback_single_inode_start", "block_bio_queue")
CODE = {name: code for code, name in enumerate(EVENTS)}
#: writeback reason codes, as the kernel numbers them (include/linux/backing-dev-defs.h)
REASONS = ("background", "vmscan", "sync", "periodic", "laptop_timer", "fs_free_space",
           "forker_thread", "foreign_flush")
#: rwbs letters -> bits (W write, R read, D discard, F flush, S sync, M metadata, A readahead, N none)
RWBS_BITS = {"W": 1, "R": 2, "D": 4, "F": 8, "S": 16, "M": 32, "A": 64, "N": 128, "E": 256}
COLUMNS = ("time_s", "pid", "cpu", "event", "a0", "a1", "a2", "a3", "line")


def _name_hash(name: bytes) -> int:
    h = 1469598103934665603
    for byte in name:
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


_HASHES = np.array([_name_hash(name.encode()) for name in EVENTS], dtype=np.uint64)


def _slot(column: str, doc: str) -> property:
    """A per-event name for one of the shared ``a0..a3`` columns."""
    return property(lambda self: getattr(self, column), doc=doc)


@dataclass
class Events:
    """Parsed events as columns (equal-length numpy arrays)."""

    time_s: np.ndarray
    pid: np.ndarray
    cpu: np.ndarray
    event: np.ndarray
    a0: np.ndarray
    a1: np.ndarray
    a2: np.ndarray
    a3: np.ndarray
    line: np.ndarray

    def __len__(self) -> int:
        return len(self.time_s)

    def select(self, mask: np.ndarray) -> Events:
        return Events(*(getattr(self, name)[mask] for name in COLUMNS))

    def of(self, *names: str) -> np.ndarray:
        """Mask of the events with one of these names."""
        return np.isin(self.event, [CODE[name] for name in names])

    def lost(self) -> int:
        return int(self.lost_count[self.event == CODE["lost"]].sum())

    # The a0..a3 slots by what they hold for each event (the module docstring's table). Mask
    # with ``of(...)`` first: elsewhere the same slot holds another event's field.
    #: writeback_start / _written
    wb_reason = _slot("a0", "write-back reason code (REASONS)")
    wb_nr_pages = _slot("a1", "pages the write-back call was asked for")
    wb_sb_dev = _slot("a2", "the superblock's device")
    wb_sync_mode = _slot("a3", "WB_SYNC_NONE (0) or WB_SYNC_ALL (1)")
    #: writeback_dirty_folio, writeback_single_inode(_start), mm_filemap_add_to_page_cache
    ino = _slot("a0", "inode number")
    page_index = _slot("a1", "page index in the file (writeback_single_inode: pages written, ``wrote``)")
    inode_dev = _slot("a2", "the inode's device (the bdi's for the writeback events)")
    folio_order = _slot("a3", "mm_filemap_add_to_page_cache: the folio's order (single_inode: writeback_index)")
    #: block_rq_*, block_bio_*, block_*_buffer
    block_dev = _slot("a0", "the request's device")
    sector = _slot("a1", "first sector")
    nr_sector = _slot("a2", "sectors (block_*_buffer: size in bytes)")
    rwbs = _slot("a3", "rwbs letters as RWBS_BITS")
    #: page_fault_user
    fault_address = _slot("a0", "faulting address")
    fault_ip = _slot("a1", "instruction pointer")
    fault_error_code = _slot("a2", "the fault's error code")
    #: sys_enter
    syscall_nr = _slot("a0", "system call number")
    #: task_newtask
    child_pid = _slot("a0", "the new task's id")
    clone_flags = _slot("a1", "the clone flags")
    #: lost
    lost_count = _slot("a0", "events the buffer dropped")


def comm_at(raw: bytes | np.ndarray, offset: int) -> str:
    """The task name of the line starting at ``offset`` (right-aligned in 16 columns)."""
    chunk = bytes(raw[offset:offset + 64])
    dash = 16 if len(chunk) > 16 and chunk[16:17] == b"-" else chunk.rfind(b"-", 0, chunk.find(b"["))
    return chunk[:max(dash, 0)].decode(errors="replace").strip()


def parse(raw: bytes | bytearray | memoryview | np.ndarray) -> Events:
    """Parse a trace_pipe text stream into columns. Unknown events and malformed lines are skipped."""
    buf = raw.view() if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
    # one type for every caller: numba compiles (and caches) once per argument type, and a read-only
    # array (bytes) and a writable one (a file) were two compiles of ~40 s each on a fresh install
    buf.flags.writeable = False
    # the compiled kernels import numba (~0.3 s) and compile on first use: only a parse pays
    from isobench.probes import ftrace_kernels

    capacity = ftrace_kernels.count_lines(buf) + 1
    cols = (np.empty(capacity, np.float64), np.empty(capacity, np.int32), np.empty(capacity, np.int16),
            np.empty(capacity, np.int8), np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int64), np.empty(capacity, np.int64), np.empty(capacity, np.int64))
    count = ftrace_kernels.parse_into(buf, _HASHES, *cols, ftrace_kernels.keys())
    return Events(*(column[:count].copy() if count < capacity // 2 else column[:count] for column in cols))


def parse_file(path: str) -> Events:
    return parse(np.fromfile(path, dtype=np.uint8))


#: the fields read from each raw event, in its a0..a3 order (the table above)
RAW_FIELDS = {"exceptions/page_fault_user": ("page_fault_user", ("address", "ip", "error_code")),
              "raw_syscalls/sys_enter": ("sys_enter", ("id",)),
              "task/task_newtask": ("task_newtask", ("pid", "clone_flags"))}


@dataclass(frozen=True)
class RawLayout:
    """Where the fields of each raw event are, one row per event: the kernel's event id, its
    ``EVENTS`` code and, per slot a0..a3, the field's offset (-1: none), size and signedness."""

    ids: np.ndarray
    codes: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    signed: np.ndarray


def raw_layout(events_dir: Path, events: list[str]) -> RawLayout | None:
    """The layout of ``events`` from their ``format`` files; None when one of them cannot be read
    raw (not in ``RAW_FIELDS``, or a field this kernel names otherwise): then read it as text."""
    ids, codes = [], []
    offsets = np.full((len(events), 4), -1, dtype=np.int64)
    sizes = np.zeros((len(events), 4), dtype=np.int64)
    signed = np.zeros((len(events), 4), dtype=np.bool_)
    for row, name in enumerate(events):
        if name not in RAW_FIELDS:
            return None
        code, wanted = RAW_FIELDS[name]
        fields: dict[str, tuple[int, int, bool]] = {}
        try:
            text = (events_dir / name / "format").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("ID:"):
                ids.append(int(line[3:]))
            elif line.startswith("field:"):  # field:unsigned long ip;\toffset:16;\tsize:8;\tsigned:0;
                parts = dict(part.strip().split(":", 1) for part in line.split(";") if ":" in part)
                declared = parts["field"].split("[")[0].split()[-1]
                fields[declared] = (int(parts["offset"]), int(parts["size"]), parts.get("signed", "0").strip() == "1")
        if len(ids) != row + 1 or any(field not in fields or fields[field][1] > 8 for field in wanted):
            return None
        codes.append(CODE[code])
        for slot, field in enumerate(wanted):
            offsets[row, slot], sizes[row, slot], signed[row, slot] = fields[field]
    return RawLayout(np.array(ids, dtype=np.int64), np.array(codes, dtype=np.int8), offsets, sizes, signed)


def parse_raw(raw: bytes | bytearray | np.ndarray, layout: RawLayout) -> Events:
    """Parse a raw trace file (ring-buffer pages, see ``ftrace_kernels.parse_raw_into``) into
    columns, in time order (each CPU's pages are in order, the CPUs are merged here)."""
    buf = raw.view() if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
    buf.flags.writeable = False  # one numba signature for every caller (see parse)
    from isobench.probes import ftrace_kernels

    capacity = len(buf) // 12 + len(buf) // 4096 + 1  # a record holds 12 bytes at least; a lost row per page
    cols = (np.empty(capacity, np.float64), np.empty(capacity, np.int32), np.empty(capacity, np.int16),
            np.empty(capacity, np.int8), np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int64), np.empty(capacity, np.int64), np.empty(capacity, np.int64))
    count = ftrace_kernels.parse_raw_into(buf, layout.ids, layout.codes, layout.offsets, layout.sizes,
                                          layout.signed, *cols)
    events = Events(*(column[:count] for column in cols))
    if count > 1 and np.any(np.diff(events.time_s) < 0):
        return events.select(np.argsort(events.time_s, kind="stable"))
    return Events(*(column.copy() for column in (getattr(events, name) for name in COLUMNS)))
