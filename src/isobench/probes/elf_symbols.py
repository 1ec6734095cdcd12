"""Function symbols of ELF files, read in-process: what ``nm -S --defined-only`` lists as text
(``t``, ``T``, ``w``, ``W``, ``i``), without running nm.

nm printed every symbol of a library as text (hundreds of thousands for libtorch), which the
pagefaults probe then split line by line: seconds per file. Here the symbol table is read as
one array, and a name is read only for a symbol some fault landed in.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import BinaryIO

import numpy as np

SYMBOL = np.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                   ("size", "<u8")])
SECTION = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, addralign, entsize
SHT_SYMTAB, SHT_NOTE, SHT_DYNSYM = 2, 7, 11
SHF_EXECINSTR = 0x4
STT_OBJECT, STT_SECTION, STT_FILE, STT_GNU_IFUNC = 1, 3, 4, 10
STB_WEAK = 2
SHN_LORESERVE = 0xFF00  # ABS, COMMON and other special section indices start here
NT_GNU_BUILD_ID = 3
DEBUG_DIR = Path("/usr/lib/debug/.build-id")


@dataclass(frozen=True)
class Symbols:
    """Function symbols sorted by address, their sizes, where each name is in the file's string
    table, and the file's PT_LOAD segments (file offset, virtual address, size in the file)."""

    path: str
    addresses: np.ndarray
    sizes: np.ndarray
    name_at: np.ndarray
    strtab_offset: int
    segments: tuple[tuple[int, int, int], ...]

    def functions(self, file_offsets: np.ndarray) -> list[str]:
        """The function covering each file offset ("" where none does)."""
        vaddr = np.full(len(file_offsets), -1, dtype=np.int64)
        for p_offset, p_vaddr, filesz in self.segments:
            inside = (file_offsets >= p_offset) & (file_offsets < p_offset + filesz) & (vaddr < 0)
            vaddr[inside] = file_offsets[inside] - p_offset + p_vaddr
        if not len(self.addresses):
            return [""] * len(file_offsets)
        i = np.searchsorted(self.addresses, vaddr.astype(np.uint64), side="right") - 1
        hit = (vaddr >= 0) & (i >= 0)
        index = np.where(hit, i, 0)
        hit &= vaddr.astype(np.uint64) < self.addresses[index] + np.maximum(self.sizes[index], 1)
        names = self._names(np.unique(index[hit]).tolist())
        return [names[k] if ok else "" for k, ok in zip(index.tolist(), hit.tolist(), strict=True)]

    def _names(self, indices: list[int]) -> dict[int, str]:
        """The name of each symbol; of aliases (same address and size: memcpy and memmove), the
        greatest, as nm's sorted listing gave."""
        found = {}
        with open(self.path, "rb") as handle:
            for k in indices:
                first = k
                while first > 0 and self.addresses[first - 1] == self.addresses[k] \
                        and self.sizes[first - 1] == self.sizes[k]:
                    first -= 1
                found[k] = max(self._name(handle, j) for j in range(first, k + 1))
        return found

    def _name(self, handle: BinaryIO, k: int) -> str:
        handle.seek(self.strtab_offset + int(self.name_at[k]))
        raw = b""
        while b"\0" not in raw:  # C++ names run to thousands of bytes
            more = handle.read(256)
            if not more:
                break
            raw += more
        return raw.split(b"\0", 1)[0].decode(errors="replace")


def symbols(path: str) -> Symbols | None:
    """The function symbols of ELF file ``path`` (from its separate debug file where one is
    installed, ``libc6-dbg``: stripped libraries keep their full symbols there), or None when it
    is not a 64-bit little-endian ELF file. Cached per file version."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return _symbols(path, stat.st_ino, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def _symbols(path: str, ino: int, size: int, mtime_ns: int) -> Symbols | None:
    del ino, size, mtime_ns  # the cache key: a rewritten file is read again
    try:
        sections, segments = _headers(path)
    except (OSError, struct.error, ValueError):
        return None
    if sections is None:
        return None
    debug = _debug_file(path, sections)
    for source, table in ([(debug, SHT_SYMTAB)] if debug else []) + [(path, SHT_SYMTAB), (path, SHT_DYNSYM)]:
        try:
            found = _read_table(source, table)
        except (OSError, struct.error, ValueError):
            continue
        if found is not None:
            addresses, sizes, name_at, strtab_offset = found
            return Symbols(source, addresses, sizes, name_at, strtab_offset, tuple(segments))
    return Symbols(path, np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint32), 0, tuple(segments))


def _headers(path: str) -> tuple[list[tuple[int, ...]] | None, list[tuple[int, int, int]]]:
    """Section headers and PT_LOAD segments; (None, []) for a file that is not 64-bit little-endian ELF."""
    with open(path, "rb") as handle:
        header = handle.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None, []
        phoff, shoff = struct.unpack_from("<QQ", header, 32)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 54)
        handle.seek(phoff)
        table = handle.read(phentsize * phnum)
        segments = []
        for n in range(phnum):
            p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", table, n * phentsize)
            if p_type == 1:  # PT_LOAD
                segments.append((p_offset, p_vaddr, p_filesz))
        handle.seek(shoff)
        raw = handle.read(shentsize * shnum)
    sections = [SECTION.unpack_from(raw, n * shentsize) for n in range(shnum)] if shentsize >= SECTION.size else []
    return sections, segments


def _read_table(path: str, table_type: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    sections, _ = _headers(path)
    if not sections:
        return None
    table = next((s for s in sections if s[1] == table_type), None)
    if table is None or table[9] != SYMBOL.itemsize or table[6] >= len(sections):
        return None
    with open(path, "rb") as handle:
        handle.seek(table[4])
        entries = np.frombuffer(handle.read(table[5]), dtype=SYMBOL)
    executable = np.array([bool(s[2] & SHF_EXECINSTR) for s in sections] + [False], dtype=bool)
    kind, bind = entries["info"] & 0xF, entries["info"] >> 4
    shndx = entries["shndx"].astype(np.int64)
    defined = (shndx > 0) & (shndx < SHN_LORESERVE)
    in_text = defined & executable[np.minimum(shndx, len(sections))]
    # nm's t/T (in a text section), i (an ifunc), W (weak, not an object): never sections or files
    keep = (in_text | (defined & ((kind == STT_GNU_IFUNC) | ((bind == STB_WEAK) & (kind != STT_OBJECT))))) \
        & (kind != STT_SECTION) & (kind != STT_FILE)
    chosen = entries[keep]
    if not len(chosen):
        return None
    order = np.lexsort((chosen["size"], chosen["value"]))
    return (chosen["value"][order].copy(), chosen["size"][order].copy(), chosen["name"][order].copy(),
            sections[table[6]][4])


def _debug_file(path: str, sections: list[tuple[int, ...]]) -> str | None:
    """The separate debug-symbol file of ``path`` (``/usr/lib/debug/.build-id/xx/rest.debug``), if installed."""
    with open(path, "rb") as handle:
        for section in sections:
            if section[1] != SHT_NOTE or section[5] > 1 << 16:
                continue
            handle.seek(section[4])
            notes, at = handle.read(section[5]), 0
            while at + 12 <= len(notes):
                namesz, descsz, note_type = struct.unpack_from("<III", notes, at)
                name_end = at + 12 + ((namesz + 3) & ~3)
                if note_type == NT_GNU_BUILD_ID and notes[at + 12:at + 12 + namesz].rstrip(b"\0") == b"GNU":
                    build_id = notes[name_end:name_end + descsz].hex()
                    debug = DEBUG_DIR / build_id[:2] / f"{build_id[2:]}.debug"
                    return str(debug) if len(build_id) > 2 and debug.exists() else None
                at = name_end + ((descsz + 3) & ~3)
    return None
