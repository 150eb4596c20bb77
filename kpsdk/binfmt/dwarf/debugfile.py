"""Where a program's DWARF is: in the program, or in a separate debug file.

Distributions strip their programs and ship the DWARF apart (Debian's ``-dbgsym`` packages),
and a developer does the same with ``objcopy --only-keep-debug`` and
``--add-gnu-debuglink``.  The separate file is found the way gdb documents it ("Separate
Debug Files" in its manual), in this order:

1. by build ID: ``DIR/.build-id/xx/yyyy....debug``, where ``xxyyyy...`` is the hex of the
   ``NT_GNU_BUILD_ID`` note, for each debug directory;
2. by the ``.gnu_debuglink`` name, checked against the CRC-32 the link carries: beside the
   program, in its ``.debug/`` subdirectory, then under each debug directory followed by the
   program's own directory.

The debug directories are the caller's ``debug_dir`` (searched first, also as a plain
directory holding the file) and ``/usr/lib/debug``.  A candidate must be a regular ELF file
with a ``.debug_info`` section that has contents: the stripped program itself has none.
Every place looked at is kept, with what was wrong there, for the error that says so.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kpsdk.binfmt.elfimage import ElfFile
from kpsdk.binfmt.files import read_regular
from kpsdk.errors import ImageFormatError, NoDebugInfoError

#: the system's debug directory (gdb's ``debug-file-directory`` default on Debian)
SYSTEM_DEBUG_DIR = "/usr/lib/debug"
_DEBUG_SECTIONS = (".debug_info", ".zdebug_info")
_NT_GNU_BUILD_ID = 3


@dataclass(frozen=True)
class DebugFile:
    """The file the DWARF comes from: ``elf`` read from ``path`` (the program itself or a
    separate debug file), ``build_id`` (hex, ``""`` without a note), and ``looked``: the
    places searched before it was found."""

    path: Path
    elf: ElfFile
    build_id: str
    separate: bool
    looked: tuple[str, ...]


def has_dwarf(elf: ElfFile) -> bool:
    """Whether ``elf`` carries DWARF (a ``.debug_info`` with contents, not ``SHT_NOBITS``)."""
    for name in _DEBUG_SECTIONS:
        section = elf.section(name)
        if section is not None and section.header["sh_type"] != "SHT_NOBITS" and section.header["sh_size"]:
            return True
    return False


def build_id(elf: ElfFile) -> str:
    """The hex build ID of ``elf`` from its ``.note.gnu.build-id``, else from any other note
    section (a vmlinux keeps it in ``.notes``, after Xen's notes); ``""`` when it has none."""
    named = elf.section(".note.gnu.build-id")
    notes = [named] if named is not None else [s for s in elf.sections if s.header["sh_type"] == "SHT_NOTE"]
    for section in notes:
        if section.header["sh_type"] != "SHT_NOBITS":
            found = _build_id_note(elf, elf.contents(section))
            if found:
                return found
    return ""


def _build_id_note(elf: ElfFile, data: bytes) -> str:
    """The ``NT_GNU_BUILD_ID`` note among the notes ``data`` holds, hex; ``""`` when none."""
    order = "<" if elf.endian == "little" else ">"
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from(order + "III", data, pos)
        name_end = pos + 12 + ((namesz + 3) & ~3)
        desc = data[name_end:name_end + descsz]
        if kind == _NT_GNU_BUILD_ID and data[pos + 12:pos + 12 + namesz].rstrip(b"\0") == b"GNU":
            return desc.hex()
        pos = name_end + ((descsz + 3) & ~3)
    return ""


def debuglink(elf: ElfFile) -> tuple[str, int] | None:
    """``(file name, CRC-32)`` of the ``.gnu_debuglink`` section, None without one."""
    section = elf.section(".gnu_debuglink")
    if section is None or section.header["sh_type"] == "SHT_NOBITS":
        return None
    data = elf.contents(section)
    end = data.find(b"\0")
    if end <= 0:
        return None
    crc_at = (end + 4) & ~3
    if crc_at + 4 > len(data):
        return None
    crc = struct.unpack_from("<I" if elf.endian == "little" else ">I", data, crc_at)[0]
    return os.fsdecode(data[:end]), crc


def read_elf(path: Path) -> ElfFile:
    """``path`` read as an ELF file (regular files only; see :mod:`kpsdk.binfmt.files`)."""
    data, _ = read_regular(path)
    return ElfFile(data, path)


def find_debug_file(path: str | os.PathLike[str], elf: ElfFile | None = None,
                    debug_dirs: Sequence[str | os.PathLike[str]] = ()) -> DebugFile:
    """Where the DWARF of the program at ``path`` is: itself, or the separate debug file found
    in ``debug_dirs`` (searched first) and the system's debug directory.  Raises
    :class:`~kpsdk.errors.NoDebugInfoError` listing every place looked at."""
    program = Path(path)
    if elf is None:
        elf = read_elf(program)
    bid = build_id(elf)
    if has_dwarf(elf):
        return DebugFile(program, elf, bid, False, ())
    looked: list[str] = [f"{program}: no .debug_info section"]
    dirs = [Path(d) for d in debug_dirs] + [Path(SYSTEM_DEBUG_DIR)]
    candidates: list[tuple[Path, int | None]] = []
    if bid:
        for d in dirs:
            candidates.append((d / ".build-id" / bid[:2] / f"{bid[2:]}.debug", None))
    else:
        looked.append(f"{program}: no build ID note")
    link = debuglink(elf)
    if link is not None:
        name, crc = link
        here = program.resolve().parent
        candidates += [(here / name, crc), (here / ".debug" / name, crc)]
        for d in dirs:
            candidates.append((d / name, crc))
            candidates.append((d / str(here).lstrip("/") / name, crc))
    else:
        looked.append(f"{program}: no .gnu_debuglink section")
    seen: set[Path] = set()
    for candidate, want in candidates:
        if candidate in seen:
            continue
        seen.add(candidate)
        found, why = _try(candidate, want, bid)
        if found is not None:
            return DebugFile(candidate, found, bid or build_id(found), True, tuple(looked))
        looked.append(f"{candidate}: {why}")
    raise NoDebugInfoError(program, looked)


def _try(candidate: Path, crc: int | None, bid: str) -> tuple[ElfFile | None, str]:
    """The debug file at ``candidate`` if it is one that fits, else (None, what was wrong)."""
    try:
        data, _ = read_regular(candidate)
    except FileNotFoundError:
        return None, "no such file"
    except OSError as e:
        return None, e.strerror or type(e).__name__
    except ImageFormatError as e:
        return None, e.problem
    if crc is not None and zlib.crc32(data) != crc:
        return None, f"CRC-32 {zlib.crc32(data):08x}, but the debuglink says {crc:08x}"
    try:
        elf = ElfFile(data, candidate)
    except ImageFormatError as e:
        return None, e.problem
    if bid and build_id(elf) not in ("", bid):
        return None, f"build ID {build_id(elf)}, not the program's {bid}"
    if not has_dwarf(elf):
        return None, "no .debug_info section"
    return elf, ""
