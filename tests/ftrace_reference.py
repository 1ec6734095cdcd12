"""The obvious ftrace parser: one regex per line, one dict per event (slow).

It stays out of the package: it exists only to cross-check the columnar parser in
:mod:`isobench.probes.ftrace_parse` (tests/test_ftrace.py) and to time it against it
(benchmarks/bench_ftrace_ingest.py).
"""

from __future__ import annotations

import re

from isobench.probes.ftrace_parse import CODE, REASONS, RWBS_BITS

_HEADER = re.compile(r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
                     r"(?P<ts>\d+\.\d+):\s+(?P<name>\w+):\s?(?P<body>.*)$")
_LOST = re.compile(r"^CPU:(\d+) \[LOST (\d+) EVENTS\]")
_BDI_DEV = re.compile(r"^bdi (\d+):(\d+):")
_DEV = re.compile(r"^(\d+)[,:](\d+)")
_BLOCK = re.compile(r"^(\d+),(\d+) (\S*) (?:(\d+) )?(?:\(.*?\) )?(\d+) \+ (\d+)")


def _int64(value: int) -> int:
    """Unsigned 64-bit kernel values wrap to int64, as in the columnar parser."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def _kv(body: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", body))


def _reference_fields(name: str, body: str) -> tuple[int, int, int, int] | None:
    def dev(text: str, pattern: re.Pattern[str] = _DEV) -> int:
        found = pattern.match(text)
        return (int(found.group(1)) << 20 | int(found.group(2))) if found else -1

    if name == "sys_enter":
        return int(body.split()[1]), -1, -1, -1
    kv = _kv(body)
    if name == "page_fault_user":
        return (int(kv["address"], 16), int(kv["ip"], 16), int(kv["error_code"], 16), -1)
    if name == "writeback_dirty_folio":
        return int(kv["ino"]), int(kv["index"]), dev(body, _BDI_DEV), -1
    if name in ("writeback_single_inode", "writeback_single_inode_start"):
        return int(kv["ino"]), int(kv["wrote"]), dev(body, _BDI_DEV), int(kv["index"])
    if name in ("writeback_start", "writeback_written"):
        found = re.search(r"sb_dev (\d+):(\d+)", body)
        sb_dev = int(found.group(1)) << 20 | int(found.group(2)) if found else -1
        reason = REASONS.index(kv["reason"]) if kv.get("reason") in REASONS else -1
        return reason, int(kv["nr_pages"]), sb_dev, int(kv["sync_mode"])
    if name.startswith("block_rq_") or name.startswith("block_bio_"):
        found = _BLOCK.match(body)
        if not found:
            return None
        bits = sum(RWBS_BITS.get(letter, 0) for letter in set(found.group(3)))
        return (int(found.group(1)) << 20 | int(found.group(2)), int(found.group(5)), int(found.group(6)), bits)
    if name in ("block_touch_buffer", "block_dirty_buffer"):
        return dev(body), int(kv["sector"]), int(kv["size"]), -1
    if name == "task_newtask":
        return int(kv["pid"]), int(kv["clone_flags"], 16), -1, -1
    if name == "mm_filemap_add_to_page_cache":
        found = re.match(r"dev (\d+):(\d+) ino ([0-9a-f]+)", body)
        assert found
        return (int(found.group(3), 16), int(kv["ofs"]) >> 12,
                int(found.group(1)) << 20 | int(found.group(2)), int(kv["order"]))
    return None


def parse_reference(raw: bytes) -> list[dict[str, object]]:
    """Line-by-line regex parser: a list of dicts with the same fields as :func:`parse`."""
    events: list[dict[str, object]] = []
    offset = 0
    for line in raw.split(b"\n"):
        start = offset
        offset += len(line) + 1
        text = line.decode(errors="replace")
        lost = _LOST.match(text)
        if lost:
            events.append({"time_s": events[-1]["time_s"] if events else 0.0, "pid": -1, "cpu": int(lost.group(1)),
                           "event": CODE["lost"], "a0": int(lost.group(2)), "a1": -1, "a2": -1, "a3": -1,
                           "line": start})
            continue
        header = _HEADER.match(text)
        if not header or header.group("name") not in CODE or header.group("name") in ("unknown", "lost"):
            continue
        fields = _reference_fields(header.group("name"), header.group("body"))
        if fields is None:
            continue
        a0, a1, a2, a3 = (_int64(value) for value in fields)
        events.append({"time_s": float(header.group("ts")), "pid": int(header.group("pid")),
                       "cpu": int(header.group("cpu")), "event": CODE[header.group("name")],
                       "a0": a0, "a1": a1, "a2": a2, "a3": a3, "line": start})
    return events
