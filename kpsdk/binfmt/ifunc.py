"""IFUNC symbols resolved to the implementation the loader picked, in a running session.

An ``STT_GNU_IFUNC`` symbol (glibc's ``strlen`` on x86) is the address of a resolver, which
the dynamic loader calls once, when it relocates the object, to choose an implementation
for the CPU (``__strlen_avx2``...).  A probe on the resolver would fire once per process,
never on a call.  The loader stores its choice where the object's own calls find it: the
GOT slot of each ``R_*_IRELATIVE`` relocation (``R_PPC64_JMP_IREL`` too) whose addend is
the resolver.  So :func:`irelative_slots` reads, from the file, which slots hold each
resolver's choice; :func:`resolve` reads such a slot in a session that maps the file (the
loader has relocated it before the program's entry, where a session opens) and turns the
value back into an address of the file as linked.

Only what the loader actually wrote is used: a resolver with no such slot in its own file
(an IFUNC the library never calls itself), or no session mapping the file, is refused
with ``EOPNOTSUPP``, saying which.  The choice is the one made for the CPU QEMU emulates;
it holds for every session of that architecture (the probe is then an ordinary uprobe at
the implementation's file offset).
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from kpsdk.binfmt.relocs import dynamic_relocation_sections, read_relocations
from kpsdk.binfmt.symbols import shown_name
from kpsdk.errors import KprobeError, TargetError, shown

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfFile, ElfImage, Segment
    from kpsdk.binfmt.running import OpenSession
    from kpsdk.binfmt.symbols import Symbol


def irelative_slots(elf: ElfFile, arch: Arch | None, segments: list[Segment],
                    code: Callable[[str, int], int]) -> dict[int, tuple[int, ...]]:
    """``resolver -> GOT slots`` (addresses as linked) the loader fills with that resolver's
    choice; ``code`` turns an addend into the code address (a function descriptor's)."""
    if arch is None or not arch.irelative:
        return {}
    word = elf.elf_class // 8
    found: dict[int, list[int]] = {}
    for section in dynamic_relocation_sections(elf):
        for reloc in read_relocations(elf, section):
            if reloc.type not in arch.irelative:
                continue
            addend = reloc.addend if reloc.addend is not None else _word_at(segments, reloc.offset, word, elf.endian)
            if addend is None:
                continue
            if arch.has_thumb:
                addend &= ~1
            found.setdefault(code("an IRELATIVE addend", addend), []).append(reloc.offset)
    return {resolver: tuple(slots) for resolver, slots in found.items()}


def _word_at(segments: list[Segment], vaddr: int, word: int, endian: str) -> int | None:
    """The word the file stores at ``vaddr`` (a REL entry's addend), None outside its bytes."""
    for seg in segments:
        if seg.vaddr <= vaddr and vaddr + word <= seg.vaddr + len(seg.data):
            at = vaddr - seg.vaddr
            return int.from_bytes(seg.data[at: at + word], endian)  # type: ignore[arg-type]
    return None


def resolve(image: ElfImage, path: str, sym: Symbol, sessions: Iterable[OpenSession]) -> int:
    """The address (as linked) of the implementation the loader chose for the IFUNC ``sym`` of
    ``image``, read in the first open session that maps the file; ``EOPNOTSUPP`` otherwise."""
    slots = image.ifunc_slots.get(sym.address, ())
    where = f"{shown(path)}:{shown_name(sym.name)} is an IFUNC symbol (its address is the resolver the loader " \
            "runs once to choose an implementation)"
    if not slots:
        raise KprobeError(errno.EOPNOTSUPP, f"{where}, and the file has no IRELATIVE GOT slot for it (it never "
                          "calls it itself), so what the loader chose cannot be read; probe the implementation "
                          "by its file offset")
    for session in sessions:
        if session.closed:
            continue
        for mf in session.target.mapped_files():
            if image.identity is None or mf.identity != image.identity:
                continue
            try:
                chosen = _chosen(session, mf.bias, slots[0], image)
            except TargetError:
                continue
            if chosen is not None:
                return chosen
    raise KprobeError(errno.EOPNOTSUPP, f"{where}: open a session that maps the file first (kpsdk reads the "
                      "loader's choice from the running program, qemu-user: targets), or probe the implementation "
                      "by its file offset")


def _chosen(session: OpenSession, bias: int, slot: int, image: ElfImage) -> int | None:
    """The code address (as linked) the slot at ``slot`` holds in ``session``: the value, or the
    first word of the function descriptor it points at (ppc64 ELFv1); None when it is no code
    of the file."""
    target = session.target
    word = target.arch.word_size
    value = int.from_bytes(target.read_memory(bias + slot, word), target.arch.endian)
    if target.arch.has_thumb:
        value &= ~1
    for candidate in (value, None):
        if candidate is None:
            if not image.contains(value - bias):
                return None
            candidate = int.from_bytes(target.read_memory(value, word), target.arch.endian)
        linked = candidate - bias
        if image.vaddr_to_offset(linked) is not None:
            return linked
    return None
