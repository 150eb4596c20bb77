"""A library's thread-local variable in a running thread: glibc's ``errno``, where the C library
keeps it for the thread that runs.

``errno`` is a TLS symbol of ``libc.so.6`` (``STT_TLS``, its value an offset in the library's
TLS block), so its address differs in each thread: the thread pointer, plus where the loader
put the library's block relative to it, plus the symbol's offset.  The loader's placement is
not in any file, but the library's own initial-exec accesses need it, so the loader writes it
into the GOT: each ``R_*_TPOFF`` relocation of the library (``R_X86_64_TPOFF64``,
``R_ARM_TLS_TPOFF32``, ``R_RISCV_TLS_TPREL64``... the arch's
:attr:`kpsdk.arch.Arch.tls_tpoff`) against no symbol gets the block's offset from the thread
pointer plus its addend, as the IRELATIVE slots get an IFUNC's choice
(:mod:`kpsdk.binfmt.ifunc`).  So :func:`tls_variable` reads, from the file, the symbol's value
and one such slot with its addend (the entry's, or the word the file stores there for a REL
entry), and :meth:`TlsVariable.address` turns a running thread's pointer and the slot's value
into the variable's address.  Which register the thread pointer is, and its bias (ppc64's
``r13`` is 0x7000 past the block), is the arch's: the TPOFF value is relative to it on every
arch kpsdk has, so nothing more is needed.

A static program (no dynamic relocations), a library without such a slot, or a symbol that is
no TLS symbol give None: the variable is not known.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kpsdk.binfmt.files import read_regular
from kpsdk.binfmt.relocs import dynamic_relocation_sections, read_relocations

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfFile, ElfImage


@dataclass(frozen=True)
class TlsVariable:
    """Where a thread-local variable of one object is, given a thread (see the module)."""

    #: the symbol's value: its offset in the object's TLS block
    offset: int
    #: a GOT slot (as linked) the loader fills with the block's offset from the thread pointer
    slot: int
    #: what that slot holds besides the block's offset (its relocation's addend)
    addend: int
    #: the word size in bits (addresses wrap at it)
    bits: int

    def address(self, thread_pointer: int, slot_value: int) -> int:
        """The variable's address in the thread whose pointer is ``thread_pointer``, the slot
        holding ``slot_value`` in the running program."""
        mask = (1 << self.bits) - 1
        return (thread_pointer + slot_value - self.addend + self.offset) & mask


def tls_variable(image: ElfImage, arch: Arch, name: str) -> TlsVariable | None:
    """Thread-local ``name`` of the object ``image`` (its dynamic symbol), or None where the file
    does not say enough (see the module).  Reads the file again: the image keeps no TLS symbol."""
    from kpsdk.binfmt.elfimage import ElfFile

    if not arch.tls_tpoff:
        return None
    raw, _ = read_regular(image.path)
    elf = ElfFile(raw, image.path)
    offset = _tls_symbol(elf, name)
    if offset is None:
        return None
    word = elf.elf_class // 8
    for section in dynamic_relocation_sections(elf):
        for reloc in read_relocations(elf, section):
            if reloc.type not in arch.tls_tpoff or reloc.symbol:
                continue  # the object's own block: an entry against no symbol
            addend = reloc.addend if reloc.addend is not None else _word_at(image, reloc.offset, word)
            if addend is not None:
                return TlsVariable(offset, reloc.offset, addend, elf.elf_class)
    return None


def _tls_symbol(elf: ElfFile, name: str) -> int | None:
    """The value of the defined ``STT_TLS`` symbol ``name`` of ``.dynsym`` (versioned names, such as
    glibc's ``errno@@GLIBC_PRIVATE``, are stored without their version)."""
    dynsym = elf.section(".dynsym")
    if dynsym is None:
        return None
    for sym in elf.symbols(dynsym):
        if sym.name == name and sym["st_info"]["type"] == "STT_TLS" and sym["st_shndx"] != "SHN_UNDEF":
            return int(sym["st_value"])
    return None


def _word_at(image: ElfImage, vaddr: int, word: int) -> int | None:
    """The word the file stores at ``vaddr`` (a REL entry's addend)."""
    data = image.read(vaddr, word)
    return None if data is None else int.from_bytes(data, image.endian)  # type: ignore[arg-type]
