"""Columnar parsing of ftrace's text stream (``trace_pipe``) for the events isobench enables.

One compiled pass over the raw bytes fills typed arrays (no per-event Python objects):
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
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
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


# ---------------------------------------------------------------------------------------------
# compiled parser


# Numba-level inlining of every helper made the first parse on a fresh install compile for 47 s
# (here, 2 cores); inlining only this one compiles in ~8 s and parses ~540 MB/s against ~660.
@numba.njit(cache=True, inline="always")
def _skip_spaces(buf: np.ndarray, i: int, end: int) -> int:
    while i < end and buf[i] == 32:
        i += 1
    return i


@numba.njit(cache=True)
def _dec(buf: np.ndarray, i: int, end: int) -> tuple[int, int, bool]:
    """Parse a (possibly negative) decimal at ``i``; returns value, next index, ok."""
    i = _skip_spaces(buf, i, end)
    negative = False
    if i < end and buf[i] == 45:
        negative = True
        i += 1
    start = i
    value = 0
    while i < end and 48 <= buf[i] <= 57:
        value = value * 10 + (buf[i] - 48)
        i += 1
    return (-value if negative else value), i, i > start


@numba.njit(cache=True)
def _hex(buf: np.ndarray, i: int, end: int) -> tuple[int, int, bool]:
    i = _skip_spaces(buf, i, end)
    if i + 1 < end and buf[i] == 48 and (buf[i + 1] == 120 or buf[i + 1] == 88):
        i += 2
    start = i
    value = np.uint64(0)
    while i < end:
        c = buf[i]
        if 48 <= c <= 57:
            digit = c - 48
        elif 97 <= c <= 102:
            digit = c - 87
        elif 65 <= c <= 70:
            digit = c - 55
        else:
            break
        value = value * np.uint64(16) + np.uint64(digit)
        i += 1
    return np.int64(value), i, i > start


@numba.njit(cache=True)
def _after(buf: np.ndarray, i: int, end: int, ch: int) -> int:
    """Index just after the next ``ch`` at or after ``i`` (``end`` when absent)."""
    while i < end and buf[i] != ch:
        i += 1
    return i + 1 if i < end else end


@numba.njit(cache=True)
def _find(buf: np.ndarray, i: int, end: int, pattern: np.ndarray) -> int:
    """Index just after ``pattern`` found at or after ``i`` (``end`` when absent)."""
    n = len(pattern)
    while i + n <= end:
        if buf[i] == pattern[0]:
            k = 1
            while k < n and buf[i + k] == pattern[k]:
                k += 1
            if k == n:
                return i + n
        i += 1
    return end


@numba.njit(cache=True)
def _dev_colon(buf: np.ndarray, i: int, end: int) -> tuple[int, int]:
    """``MAJOR:MINOR`` (or ``MAJOR,MINOR``) -> dev_t, next index; -1 when not numeric."""
    major, i, ok = _dec(buf, i, end)
    if not ok or i >= end or (buf[i] != 58 and buf[i] != 44):
        return -1, i
    minor, i, ok = _dec(buf, i + 1, end)
    if not ok:
        return -1, i
    return (major << 20) | minor, i


@numba.njit(cache=True)
def _bdi(buf: np.ndarray, i: int, end: int) -> tuple[int, int]:
    """``bdi NAME: `` -> dev (from a numeric bdi name) and the index after ``": "``."""
    i += 4  # "bdi "
    dev, j = _dev_colon(buf, i, end)
    if dev >= 0 and j + 1 < end and buf[j] == 58 and buf[j + 1] == 32:
        return dev, j + 2
    while j + 1 < end and not (buf[j] == 58 and buf[j + 1] == 32):
        j += 1
    return -1, j + 2


@numba.njit(cache=True)
def _rwbs(buf: np.ndarray, i: int, end: int) -> tuple[int, int]:
    i = _skip_spaces(buf, i, end)
    bits = 0
    while i < end and buf[i] != 32:
        c = buf[i]
        if c == 87:
            bits |= 1
        elif c == 82:
            bits |= 2
        elif c == 68:
            bits |= 4
        elif c == 70:
            bits |= 8
        elif c == 83:
            bits |= 16
        elif c == 77:
            bits |= 32
        elif c == 65:
            bits |= 64
        elif c == 78:
            bits |= 128
        elif c == 69:
            bits |= 256
        i += 1
    return bits, i


@numba.njit(cache=True)
def _reason(buf: np.ndarray, i: int, end: int) -> int:
    if i >= end:
        return -1
    c = buf[i]
    if c == 98:
        return 0  # background
    if c == 118:
        return 1  # vmscan
    if c == 115:
        return 2  # sync
    if c == 112:
        return 3  # periodic
    if c == 108:
        return 4  # laptop_timer
    if c == 102 and i + 3 < end:
        if buf[i + 1] == 115:
            return 5  # fs_free_space
        if buf[i + 3] == 107:
            return 6  # forker_thread
        return 7  # foreign_flush
    return -1


@numba.njit(cache=True)
def _parse(buf: np.ndarray, hashes: np.ndarray, time_s: np.ndarray, pid: np.ndarray, cpu: np.ndarray,
           event: np.ndarray, a0: np.ndarray, a1: np.ndarray, a2: np.ndarray, a3: np.ndarray,
           line_at: np.ndarray, keys: numba.typed.List) -> int:
    n = len(buf)
    count = 0
    p = 0
    k_sb_dev, k_eq_reason, k_clone, k_ofs, k_order, k_ino, k_wrote, k_index, k_ino_hex = (
        keys[0], keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8])
    while p < n:
        end = p
        while end < n and buf[end] != 10:
            end += 1
        line_start = p
        p = end + 1
        if end - line_start < 20:
            continue
        # "CPU:N [LOST M EVENTS]"
        if buf[line_start] == 67 and buf[line_start + 1] == 80 and buf[line_start + 2] == 85 \
                and buf[line_start + 3] == 58:
            c, j, ok = _dec(buf, line_start + 4, end)
            lost, j, ok2 = _dec(buf, j + 6, end)  # " [LOST"
            if ok and ok2:
                time_s[count] = time_s[count - 1] if count else 0.0
                pid[count] = -1
                cpu[count] = c
                event[count] = 16
                a0[count] = lost
                a1[count] = -1
                a2[count] = -1
                a3[count] = -1
                line_at[count] = line_start
                count += 1
            continue
        # header: comm (16 columns) '-' pid ... '[' cpu ']' flags time ':'
        j = line_start + 16
        if buf[j] != 45:
            bracket = line_start
            while bracket < end and buf[bracket] != 91:
                bracket += 1
            j = bracket
            while j > line_start and buf[j] != 45:
                j -= 1
        task, j, ok = _dec(buf, j + 1, end)
        if not ok:
            continue
        j = _after(buf, j, end, 91)
        c, j, ok = _dec(buf, j, end)
        if not ok:
            continue
        j = _after(buf, j, end, 93)
        j = _skip_spaces(buf, j, end)
        if j < end and not 48 <= buf[j] <= 57:
            while j < end and buf[j] != 32:  # irq/preempt flags, e.g. "d..1." (never start with a digit)
                j += 1
        secs, j, ok = _dec(buf, j, end)
        if not ok or j >= end or buf[j] != 46:
            continue
        j += 1
        frac = 0
        scale = 1
        while j < end and 48 <= buf[j] <= 57:
            frac = frac * 10 + (buf[j] - 48)
            scale *= 10
            j += 1
        if j + 1 >= end or buf[j] != 58:
            continue
        j = _skip_spaces(buf, j + 1, end)
        h = np.uint64(1469598103934665603)
        name_start = j
        while j < end and buf[j] != 58:
            h = (h ^ np.uint64(buf[j])) * np.uint64(1099511628211)
            j += 1
        if j == name_start:
            continue
        code = 0
        for e in range(1, hashes.shape[0]):
            if e != 16 and hashes[e] == h:  # 16: "lost" lines, matched above
                code = e
                break
        if code == 0:
            continue
        i = j + 2
        v0 = -1
        v1 = -1
        v2 = -1
        v3 = -1
        if code == 13:  # sys_enter: "NR 0 (...)"
            v0, i, ok = _dec(buf, i + 3, end)
        elif code == 12:  # page_fault_user: address=0x.. ip=0x.. error_code=0x..
            v0, i, ok = _hex(buf, _after(buf, i, end, 61), end)
            v1, i, ok = _hex(buf, _after(buf, i, end, 61), end)
            v2, i, ok = _hex(buf, _after(buf, i, end, 61), end)
        elif code == 3:  # writeback_dirty_folio: bdi X: ino=N index=N
            v2, i = _bdi(buf, i, end)
            v0, i, ok = _dec(buf, _after(buf, i, end, 61), end)
            v1, i, ok = _dec(buf, _after(buf, i, end, 61), end)
        elif code == 5 or code == 6 or code == 7 or code == 8 or code == 9 or code == 18:
            v0, i = _dev_colon(buf, i, end)
            v3, i = _rwbs(buf, i, end)
            if code == 5 or code == 6:
                _, i, ok = _dec(buf, i, end)  # bytes
            if code <= 7:
                i = _after(buf, i, end, 41)  # "(cmd)"
            v1, i, ok = _dec(buf, i, end)
            i = _after(buf, i, end, 43)  # "+"
            v2, i, ok = _dec(buf, i, end)
        elif code == 10 or code == 11:  # "dev sector=N size=N"
            v0, i = _dev_colon(buf, i, end)
            v1, i, ok = _dec(buf, _after(buf, i, end, 61), end)
            v2, i, ok = _dec(buf, _after(buf, i, end, 61), end)
        elif code == 4 or code == 17:  # writeback_single_inode (_start: same fields)
            v2, i = _bdi(buf, i, end)
            v0, i, ok = _dec(buf, _find(buf, i, end, k_ino), end)
            v3, i, ok = _dec(buf, _find(buf, i, end, k_index), end)
            v1, i, ok = _dec(buf, _find(buf, i, end, k_wrote), end)
        elif code == 1 or code == 2:  # writeback_start / _written
            i = _find(buf, i, end, k_sb_dev)
            v2, i = _dev_colon(buf, i, end)
            v1, i, ok = _dec(buf, _after(buf, i, end, 61), end)  # nr_pages
            v3, i, ok = _dec(buf, _after(buf, i, end, 61), end)  # sync_mode
            v0 = _reason(buf, _find(buf, i, end, k_eq_reason), end)
        elif code == 14:  # task_newtask: pid=N comm=X clone_flags=HEX ...
            v0, i, ok = _dec(buf, _after(buf, i, end, 61), end)
            v1, i, ok = _hex(buf, _find(buf, i, end, k_clone), end)
        elif code == 15:  # mm_filemap_add_to_page_cache: dev M:m ino HEX pfn=.. ofs=N order=N
            v2, i = _dev_colon(buf, i + 4, end)
            v0, i, ok = _hex(buf, _find(buf, i, end, k_ino_hex), end)
            v1, i, ok = _dec(buf, _find(buf, i, end, k_ofs), end)
            v1 = v1 >> 12
            v3, i, ok = _dec(buf, _find(buf, i, end, k_order), end)
        time_s[count] = (secs * scale + frac) / scale  # exact ints, one rounding: same as float(text)
        pid[count] = task
        cpu[count] = c
        event[count] = code
        a0[count] = v0
        a1[count] = v1
        a2[count] = v2
        a3[count] = v3
        line_at[count] = line_start
        count += 1
    return count


@numba.njit(cache=True)
def _count_lines(buf: np.ndarray) -> int:
    count = 0
    for byte in buf:  # no temporary array, unlike np.count_nonzero(buf == 10)
        if byte == 10:
            count += 1
    return count


def _keys() -> numba.typed.List:
    keys = numba.typed.List()
    for key in (b"sb_dev ", b"reason=", b"clone_flags=", b"ofs=", b"order=", b"ino=", b"wrote=", b"index=",
                b"ino "):
        keys.append(np.frombuffer(key, dtype=np.uint8).copy())
    return keys


def parse(raw: bytes | bytearray | memoryview | np.ndarray) -> Events:
    """Parse a trace_pipe text stream into columns. Unknown events and malformed lines are skipped."""
    buf = raw.view() if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
    # one type for every caller: numba compiles (and caches) once per argument type, and a read-only
    # array (bytes) and a writable one (a file) were two compiles of ~40 s each on a fresh install
    buf.flags.writeable = False
    capacity = _count_lines(buf) + 1
    cols = (np.empty(capacity, np.float64), np.empty(capacity, np.int32), np.empty(capacity, np.int16),
            np.empty(capacity, np.int8), np.empty(capacity, np.int64), np.empty(capacity, np.int64),
            np.empty(capacity, np.int64), np.empty(capacity, np.int64), np.empty(capacity, np.int64))
    count = _parse(buf, _HASHES, *cols, _keys())
    return Events(*(column[:count].copy() if count < capacity // 2 else column[:count] for column in cols))


def parse_file(path: str) -> Events:
    return parse(np.fromfile(path, dtype=np.uint8))
