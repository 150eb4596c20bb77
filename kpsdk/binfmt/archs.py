"""Which architecture an ELF file is for: the backends' declarations, matched by machine, class
and byte order.

What a symbol's value means beyond an address (ARM's Thumb bit, ppc64's function descriptors),
which relocations fill IFUNC slots and where the PLT stubs are, is declared by the arch backends,
which are plugins: only the registry (:mod:`kpsdk.registry`) loads them, and the registry is a
layer above this one.  So the file readers are given the architectures: a caller passes an
:class:`~kpsdk.arch.ArchRegistry` of its own (``load_elf(path, archs)``), and one that passes
none gets those the kpsdk package provided when it was imported (:func:`provide`:
``kpsdk/__init__.py`` gives the registry's, so a file is read with the backends loaded now).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.errors import UnknownNameError

if TYPE_CHECKING:
    from kpsdk.arch import Arch, ArchRegistry

#: where the architectures come from when a reader is given none (:func:`provide`)
_default: list[Callable[[], ArchRegistry]] = []


def provide(default: Callable[[], ArchRegistry]) -> None:
    """Have readers that are given no architectures ask ``default()``: called at each file,
    so a registry made anew (``kpsdk.registry.configure``) is the one asked."""
    _default[:] = [default]


def arch_for(machine: str, elf_class: int, endian: str, archs: ArchRegistry | None = None) -> Arch | None:
    """The architecture a backend declares for a file's machine, class and byte order, among
    ``archs`` (None: the provided ones); None where none does (the file's symbols are then
    read as they are)."""
    if archs is None:
        if not _default:
            return None
        archs = _default[0]()
    try:
        return archs.by_elf(machine, elf_class, endian)
    except UnknownNameError:
        return None
