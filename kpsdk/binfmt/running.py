"""A running program as the file readers see it: what they ask of the layers above them.

:mod:`kpsdk.binfmt` reads files.  A few of its answers depend on a program that runs them:
an object's symbols at the address the loader put it (:func:`kpsdk.binfmt.symbols.loaded_symbols`),
the file a uprobe's bare name means to an open session (:mod:`kpsdk.binfmt.filelocation`) and the
implementation the loader chose for an IFUNC (:mod:`kpsdk.binfmt.ifunc`).  What they are handed is
the core's :class:`~kpsdk.target.MappedFile`, :class:`~kpsdk.target.Target` and
:class:`~kpsdk.session.Session`; these protocols say which of their members are read, so that this
layer imports nothing of the core (tests/test_layers.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage


class LoadedObject(Protocol):
    """An ELF object a program runs and where this run put it (:class:`kpsdk.target.MappedFile`)."""

    @property
    def path(self) -> Path: ...

    @property
    def name(self) -> str: ...

    @property
    def identity(self) -> tuple[int, int]: ...

    @property
    def bias(self) -> int: ...

    @property
    def image(self) -> ElfImage: ...


class RunningProgram(Protocol):
    """A target as the file readers ask it: its arch, the objects it maps and its memory
    (:class:`kpsdk.target.Target`).  Its sysroot, where it has one, is read as an attribute
    ``sysroot`` that not every target has."""

    @property
    def arch(self) -> Arch: ...

    def mapped_files(self) -> Sequence[LoadedObject]: ...

    def read_memory(self, addr: int, size: int, /) -> bytes: ...


class OpenSession(Protocol):
    """A session as the file readers ask it (:class:`kpsdk.session.Session`): whether it is
    still open, and its target.  Its ``repr`` names it in messages."""

    @property
    def closed(self) -> bool: ...

    @property
    def target(self) -> RunningProgram: ...
