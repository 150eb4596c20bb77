"""Line programs (``.debug_line``, DWARF 2 to 5, section 6.2) decoded into rows.

Every source-level question goes through the line table: which lines of a function have
code (``perf probe -L``), where ``FILE:LINE`` is, where a function's body starts after its
prologue.  pyelftools runs the line-number state machine through construct, about 23,000
rows a second here (7.7 s for the 181,565 rows of SQLite at ``-O0``), so the program is run
here over the bytes, with the header's file table read the same way.  A :class:`LineTable`
keeps its rows as parallel lists, sorted as the program emitted them (by sequence).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from kpsdk.binfmt.dwarf.primitives import Numbers, cstring, sleb, uleb
from kpsdk.binfmt.dwarf.sections import Sections

#: row flags
IS_STMT, END_SEQUENCE, PROLOGUE_END = 1, 2, 4

_DW_LNCT_PATH, _DW_LNCT_DIRECTORY_INDEX = 1, 2
_FORM_STRING, _FORM_LINE_STRP, _FORM_STRP, _FORM_UDATA = 0x08, 0x1F, 0x0E, 0x0F
_FORM_DATA = {0x0B: 1, 0x05: 2, 0x06: 4, 0x07: 8, 0x1E: 16}
_FORM_BLOCK = 0x09


@dataclass
class LineTable:
    """A unit's line table: its files (full paths, indexed as ``DW_AT_decl_file`` and the
    program index them) and rows (address, file, line, flags)."""

    files: list[str]
    addresses: list[int] = field(default_factory=list)
    file_of: list[int] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    flags: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.addresses)

    def file(self, index: int) -> str:
        """The path of file ``index``, ``""`` when there is no such file."""
        return self.files[index] if 0 <= index < len(self.files) else ""


class _Header:
    def __init__(self, data: bytes, offset: int, num: Numbers, sec: Sections, comp_dir: str, unit_name: str,
                 address_size: int) -> None:
        length = num.u32(data, offset)[0]
        pos = offset + 4
        osize = 4
        if length == 0xFFFFFFFF:
            length, pos, osize = num.u64(data, pos)[0], pos + 8, 8
        self.end = pos + length
        self.version = num.u16(data, pos)[0]
        pos += 2
        if not 2 <= self.version <= 5:
            raise ValueError(f"line program at .debug_line+{offset:#x}: version {self.version}, not 2 to 5")
        if self.version >= 5:
            address_size = data[pos]
            pos += 2  # address_size, segment_selector_size
        header_length = num.read(data, pos, osize)
        pos += osize
        self.program = pos + header_length
        self.min_insn = data[pos]
        pos += 1
        self.max_ops = 1
        if self.version >= 4:
            self.max_ops = data[pos] or 1
            pos += 1
        self.default_is_stmt = data[pos]
        self.line_base = data[pos + 1] - 256 if data[pos + 1] > 127 else data[pos + 1]
        self.line_range = data[pos + 2] or 1
        self.opcode_base = data[pos + 3]
        pos += 4
        self.lengths = list(data[pos:pos + self.opcode_base - 1])
        pos += self.opcode_base - 1
        self.address_size = address_size
        self.num, self.sec, self.osize = num, sec, osize
        if self.version >= 5:
            dirs, pos = self._entries5(data, pos)
            files, pos = self._entries5(data, pos)
            dir_names = [d[0] for d in dirs]
            base = dir_names[0] if dir_names else comp_dir
            self.files = [self._join(base, dir_names, d, name) for name, d in files]
        else:
            dir_names = [comp_dir]
            while data[pos]:
                name, pos = cstring(data, pos)
                dir_names.append(name.decode("utf-8", "replace"))
            pos += 1
            self.files = [posixpath.join(comp_dir, unit_name) if unit_name else ""]
            while data[pos]:
                raw, pos = cstring(data, pos)
                d, pos = uleb(data, pos)
                _, pos = uleb(data, pos)
                _, pos = uleb(data, pos)
                self.files.append(self._join(comp_dir, dir_names, d, raw.decode("utf-8", "replace")))

    @staticmethod
    def _join(comp_dir: str, dirs: list[str], index: int, name: str) -> str:
        if name.startswith("/"):
            return posixpath.normpath(name)
        directory = dirs[index] if 0 <= index < len(dirs) else ""
        if not directory.startswith("/"):
            directory = posixpath.join(comp_dir, directory)
        return posixpath.normpath(posixpath.join(directory, name))

    def _entries5(self, data: bytes, pos: int) -> tuple[list[tuple[str, int]], int]:
        count = data[pos]
        pos += 1
        formats = []
        for _ in range(count):
            kind, pos = uleb(data, pos)
            form, pos = uleb(data, pos)
            formats.append((kind, form))
        n, pos = uleb(data, pos)
        out = []
        for _ in range(n):
            path, directory = "", 0
            for kind, form in formats:
                value: object
                if form == _FORM_STRING:
                    raw, pos = cstring(data, pos)
                    value = raw.decode("utf-8", "replace")
                elif form == _FORM_LINE_STRP:
                    value = self.sec.line_string(self.num.read(data, pos, self.osize))
                    pos += self.osize
                elif form == _FORM_STRP:
                    value = self.sec.string(self.num.read(data, pos, self.osize))
                    pos += self.osize
                elif form == _FORM_UDATA:
                    value, pos = uleb(data, pos)
                elif form in _FORM_DATA:
                    size = _FORM_DATA[form]
                    value = self.num.read(data, pos, size) if size <= 8 else 0
                    pos += size
                elif form == _FORM_BLOCK:
                    size, pos = uleb(data, pos)
                    value, pos = 0, pos + size
                else:
                    raise ValueError(f"line table entry form {form:#x} not supported")
                if kind == _DW_LNCT_PATH:
                    path = str(value)
                elif kind == _DW_LNCT_DIRECTORY_INDEX:
                    directory = int(value)  # type: ignore[call-overload]
            out.append((path, directory))
        return out, pos


def files(sec: Sections, offset: int, comp_dir: str, unit_name: str, address_size: int) -> LineTable:
    """The file table of the line program at ``offset``, without running the program (a
    :class:`LineTable` with no rows): what naming a declaration's file needs."""
    return LineTable(_Header(sec.line, offset, sec.num, sec, comp_dir, unit_name, address_size).files)


def decode(sec: Sections, offset: int, comp_dir: str, unit_name: str, address_size: int) -> LineTable:
    """The line program at ``offset`` of ``.debug_line``, run."""
    data, num = sec.line, sec.num
    h = _Header(data, offset, num, sec, comp_dir, unit_name, address_size)
    table = LineTable(h.files)
    addresses, files, lines, flags = table.addresses, table.file_of, table.lines, table.flags
    min_insn, line_base, line_range, opcode_base = h.min_insn, h.line_base, h.line_range, h.opcode_base
    address, file, line, is_stmt, prologue = 0, 1, 1, h.default_is_stmt, 0
    pos, end = h.program, h.end
    while pos < end:
        op = data[pos]
        pos += 1
        if op >= opcode_base:                       # special opcode
            adjusted = op - opcode_base
            address += (adjusted // line_range) * min_insn
            line += line_base + adjusted % line_range
            addresses.append(address)
            files.append(file)
            lines.append(line)
            flags.append(is_stmt | prologue)
            prologue = 0
        elif op == 1:                               # DW_LNS_copy
            addresses.append(address)
            files.append(file)
            lines.append(line)
            flags.append(is_stmt | prologue)
            prologue = 0
        elif op == 2:                               # advance_pc
            n, pos = uleb(data, pos)
            address += n * min_insn
        elif op == 3:                               # advance_line
            n, pos = sleb(data, pos)
            line += n
        elif op == 4:                               # set_file
            file, pos = uleb(data, pos)
        elif op == 5:                               # set_column
            _, pos = uleb(data, pos)
        elif op == 6:                               # negate_stmt
            is_stmt ^= 1
        elif op == 7 or op == 11 or op == 12:       # basic_block, epilogue_begin, set_isa
            if op == 12:
                _, pos = uleb(data, pos)
        elif op == 8:                               # const_add_pc
            address += ((255 - opcode_base) // line_range) * min_insn
        elif op == 9:                               # fixed_advance_pc
            address += num.u16(data, pos)[0]
            pos += 2
        elif op == 10:                              # set_prologue_end
            prologue = PROLOGUE_END
        elif op == 0:                               # extended
            length, pos = uleb(data, pos)
            sub = data[pos]
            if sub == 1:                            # end_sequence
                addresses.append(address)
                files.append(file)
                lines.append(line)
                flags.append(END_SEQUENCE)
                address, file, line, is_stmt, prologue = 0, 1, 1, h.default_is_stmt, 0
            elif sub == 2:                          # set_address
                address = num.read(data, pos + 1, length - 1)
            pos += length
        else:                                       # an opcode this decoder does not know: skip its operands
            for _ in range(h.lengths[op - 1]):
                _, pos = uleb(data, pos)
    return table
