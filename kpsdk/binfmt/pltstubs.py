"""PLT stubs named ``SYM@plt``, as gdb, objdump and perf name them.

A call from one object to a function of another goes through a stub of the caller's PLT,
which jumps through the function's GOT slot.  The stubs have no symbols of their own;
binutils synthesizes ``SYM@plt`` names for them (``bfd_get_synthetic_symtab``), which
gdb and ``objdump -d`` show, and perf does the same from ``.rela.plt``.  kpsdk names them
the same way, from the architecture's layout (:class:`kpsdk.arch.PltTable`): stub ``i``
serves relocation ``i`` of ``.rela.plt`` (``.rel.plt`` on i386 and ARM), whose symbol
names the function; or, where the linker writes relocations in another order than it lays
out stubs (x86: a library's ``R_X86_64_IRELATIVE`` come last), the relocation of the
``i``-th GOT slot, stubs and slots being allocated together.

x86's ``.plt.got`` (functions bound at load time, whose address is taken too) follows no
relocation's order: each stub is named by the relocation of the GOT slot its jump reads
(:class:`kpsdk.arch.PltGotTable`), as binutils names it.

Nothing is guessed: a layout is used only when its section's size is exactly the header
plus one stub per relocation (or, for ppc64's glink stubs placed by ``DT_PPC64_GLINK``,
when every stub lies inside an executable segment); otherwise the file's stubs stay
unnamed.  Relocations without a symbol (``R_*_IRELATIVE`` of a static program) name nothing.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from kpsdk.binfmt.relocs import dynamic_relocation_sections, read_relocations
from kpsdk.binfmt.symbols import Symbol

if TYPE_CHECKING:
    from kpsdk.arch import Arch, PltGotTable, PltTable
    from kpsdk.binfmt.elfimage import ElfFile, Segment

#: the PLT's relocation sections, by name and type
RELOCATION_SECTIONS = ((".rela.plt", "SHT_RELA"), (".rel.plt", "SHT_REL"))
#: the suffix of a stub's name
SUFFIX = "@plt"
#: the kind of a PLT stub's Symbol (not "func": globs such as ``prog:*`` and lists of a
#: file's functions leave the stubs out, as perf probe's default filter ``!*@plt`` does)
KIND = "plt"


def plt_symbols(elf: ElfFile, arch: Arch | None, segments: list[Segment]) -> list[Symbol]:
    """The ``SYM@plt`` stubs of ``elf`` by the first of the arch's layouts that fits, each one
    stub long; none when the file has no PLT relocations or no layout fits."""
    if arch is None or not arch.plt:
        return []
    got = _plt_got(elf, arch.plt_got) if arch.plt_got is not None else []
    relocations = _relocation_names(elf)
    if not relocations:
        return got
    by_slot = [name for _, name in sorted(relocations)]
    in_order = [name for _, name in relocations]
    flags = elf.elf.header["e_flags"]
    for table in arch.plt:
        if table.e_flags is not None and flags & table.e_flags[0] != table.e_flags[1]:
            continue
        stubs = _stubs(elf, table, len(relocations), segments)
        if stubs is None:
            continue
        names = by_slot if table.by_slot else in_order
        return [Symbol(name + SUFFIX, addr, table.entry, KIND, "", table.label)
                for addr, name in zip(stubs, names, strict=True) if name] + got
    return got


def _plt_got(elf: ElfFile, table: PltGotTable) -> list[Symbol]:
    """The named stubs of x86's ``.plt.got``: each by the relocation of the slot it jumps through."""
    section = elf.section(table.section)
    if section is None or section.header["sh_type"] != "SHT_PROGBITS":
        return []
    size = table.ibt_entry if elf.section(table.ibt_section) is not None else table.entry
    code, start = elf.contents(section), int(section.header["sh_addr"])
    if not code or len(code) % size:
        return []
    got_plt = elf.section(".got.plt")
    base = int(got_plt.header["sh_addr"]) if got_plt is not None else 0
    slots = {r.offset: r.symbol for s in dynamic_relocation_sections(elf) for r in read_relocations(elf, s)
             if r.symbol}
    out = []
    for at in range(0, len(code), size):
        slot = table.slot(code[at:at + size], start + at, base)
        name = slots.get(slot) if slot is not None else None
        if name:
            out.append(Symbol(name + SUFFIX, start + at, size, KIND, "", table.section))
    return out


def _stubs(elf: ElfFile, table: PltTable, count: int, segments: list[Segment]) -> list[int] | None:
    """Where each of ``count`` stubs starts (after any prefix), when the file has the table's
    layout (else None)."""
    if table.dynamic_tag is not None:
        start = _dynamic(elf, table.dynamic_tag)
        if start is None:
            return None
        first, end = start + table.header, start + table.header + count * table.entry
        inside = any(seg.executable and seg.vaddr <= first and end <= seg.vaddr + len(seg.data) for seg in segments)
        return [first + i * table.entry for i in range(count)] if inside else None
    section = elf.section(table.section)
    if section is None or section.header["sh_type"] != "SHT_PROGBITS":
        return None
    size, start = section.header["sh_size"], int(section.header["sh_addr"])
    if not table.prefix:
        if size != table.header + count * table.entry:
            return None
        return [start + table.header + i * table.entry for i in range(count)]
    code = elf.contents(section)
    out, at = [], table.header
    for _ in range(count):
        if code.startswith(table.prefix, at):
            at += table.prefix_size
        out.append(start + at)
        at += table.entry
    return out if at == size == len(code) else None


def _relocation_names(elf: ElfFile) -> list[tuple[int, str]]:
    """``(GOT slot, symbol name)`` of each PLT relocation in the section's order ("": no symbol)."""
    dynamic = {s.number for s in dynamic_relocation_sections(elf)}
    for name, kind in RELOCATION_SECTIONS:
        section = elf.section(name)
        # a static program's .rela.plt (its IRELATIVE relocations, linked to no symbol
        # table: sh_link 0) serves no dynamic symbol: nothing to name
        if section is not None and section.header["sh_type"] == kind and section.number in dynamic:
            return [(r.offset, r.symbol) for r in read_relocations(elf, section)]
    return []


def _dynamic(elf: ElfFile, tag: int) -> int | None:
    """The value of ``tag`` in ``.dynamic`` (None: no such entry, or no ``.dynamic``)."""
    section = elf.section(".dynamic")
    if section is None or section.header["sh_type"] != "SHT_DYNAMIC":
        return None
    word = elf.elf_class // 8
    data = elf.contents(section)
    code = (">" if elf.endian == "big" else "<") + ("QQ" if word == 8 else "II")
    for d_tag, value in struct.iter_unpack(code, data[: len(data) - len(data) % (2 * word)]):
        if d_tag == 0:  # DT_NULL ends the table
            break
        if d_tag == tag:
            return int(value)
    return None
