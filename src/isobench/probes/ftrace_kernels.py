"""The compiled half of the trace parser (probes/ftrace_parse.py): one pass over the raw bytes
filling the columns. Apart so that importing the parser's tables (event codes, reasons) does not
import numba: every run imports the probes to sweep leftovers, and only a run that parses a
trace needs these.
"""

from __future__ import annotations

import numba
import numpy as np


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
def parse_into(buf: np.ndarray, hashes: np.ndarray, time_s: np.ndarray, pid: np.ndarray, cpu: np.ndarray,
           event: np.ndarray, a0: np.ndarray, a1: np.ndarray, a2: np.ndarray, a3: np.ndarray,
           line_at: np.ndarray, keys: tuple[np.ndarray, ...]) -> int:
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
def count_lines(buf: np.ndarray) -> int:
    count = 0
    for byte in buf:  # no temporary array, unlike np.count_nonzero(buf == 10)
        if byte == 10:
            count += 1
    return count


def keys() -> tuple[np.ndarray, ...]:
    # a tuple, not a numba.typed.List: building a typed list compiled its methods in every new
    # process (0.46 s of CPU before the first parse), and a tuple of arrays needs nothing
    return tuple(np.frombuffer(key, dtype=np.uint8).copy()
                 for key in (b"sb_dev ", b"reason=", b"clone_flags=", b"ofs=", b"order=", b"ino=", b"wrote=",
                             b"index=", b"ino "))


@numba.njit(cache=True)
def _le(buf: np.ndarray, i: int, size: int, signed: bool) -> int:
    """The little-endian integer of ``size`` bytes at ``i`` (8 bytes: two's complement, as int64)."""
    value = 0
    for k in range(size):
        value |= np.int64(buf[i + k]) << (8 * k)
    if signed and size < 8 and value >= 1 << (8 * size - 1):
        value -= 1 << (8 * size)
    return value


@numba.njit(cache=True)
def parse_raw_into(buf: np.ndarray, ids: np.ndarray, codes: np.ndarray, offsets: np.ndarray, sizes: np.ndarray,
                   signed: np.ndarray, time_s: np.ndarray, pid: np.ndarray, cpu: np.ndarray, event: np.ndarray,
                   a0: np.ndarray, a1: np.ndarray, a2: np.ndarray, a3: np.ndarray, line_at: np.ndarray) -> int:
    """Decode ring-buffer pages (each behind a (cpu u32, length u32) header) into the columns.

    A page: u64 timestamp, u64 commit (data length; bit 31: events were lost before this page,
    bit 30: their count follows the data), then events, each behind a u32 header whose low 5 bits
    are ``type_len`` and high 27 a time delta: 1..28 data of type_len*4 bytes, 0 length in the
    next u32, 29 padding, 30 a time extend, 31 an absolute time stamp (include/linux/ring_buffer.h).
    A page cut short at the file's end is skipped."""
    n = len(buf)
    count = 0
    p = 0
    while p + 8 <= n:
        page_cpu = _le(buf, p, 4, False)
        page = p + 8
        p = page + _le(buf, p + 4, 4, False)
        if p > n or p - page < 16:
            break
        ts = _le(buf, page, 8, False)
        commit = _le(buf, page + 8, 8, False)
        end = min(page + 16 + (commit & 0x3FFFFFFF), p)
        if commit & (1 << 31):  # events lost before this page: a "lost" row, as the text stream has
            time_s[count] = ts / 1e9
            pid[count] = -1
            cpu[count] = page_cpu
            event[count] = 16
            a0[count] = _le(buf, end, 8, False) if commit & (1 << 30) and end + 8 <= p else 1
            a1[count] = -1
            a2[count] = -1
            a3[count] = -1
            line_at[count] = page
            count += 1
        i = page + 16
        while i + 4 <= end:
            header = _le(buf, i, 4, False)
            type_len = header & 31
            delta = header >> 5
            if type_len == 29:  # padding: the page's end, or a discarded event
                if delta == 0:
                    break
                ts += delta
                i += 4 + _le(buf, i + 4, 4, False)
                continue
            if type_len == 30:
                ts += (_le(buf, i + 4, 4, False) << 27) + delta
                i += 8
                continue
            if type_len == 31:
                ts = (_le(buf, i + 4, 4, False) << 27) + delta
                i += 8
                continue
            if type_len == 0:
                data = i + 8
                length = _le(buf, i + 4, 4, False) - 4
            else:
                data = i + 4
                length = type_len * 4
            i = data + ((length + 3) & ~3)
            ts += delta
            if i > end or length < 8:
                break
            type_id = _le(buf, data, 2, False)
            row = -1
            for r in range(len(ids)):
                if ids[r] == type_id:
                    row = r
                    break
            if row < 0:
                continue
            values = (a0, a1, a2, a3)
            for slot in range(4):
                offset = offsets[row, slot]
                size = sizes[row, slot]
                values[slot][count] = _le(buf, data + offset, size, signed[row, slot]) \
                    if offset >= 0 and offset + size <= length else -1
            time_s[count] = ts / 1e9
            pid[count] = _le(buf, data + 4, 4, True)
            cpu[count] = page_cpu
            event[count] = codes[row]
            line_at[count] = data
            count += 1
    return count
