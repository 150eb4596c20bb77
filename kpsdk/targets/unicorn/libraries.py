"""Libraries coming and going on the Unicorn target: ld.so's objects announced once mapped,
and unloaded before dlclose's ``munmap`` takes their pages.

The Linux layer sees a library's first mapping (:func:`kpsdk.targets.unicorn.linux.library_mapped`
queues it in :attr:`Libraries.pending`) and the program's ``munmap`` calls
(:meth:`Libraries.unmapping`); the system-call glue (:mod:`.syscalls`) announces the queue at
the first call that is not one of ld.so's mapping calls, when the library's segments are in
place with their own protections.  Its own module because it is one job with its own state
(the queue) between those two, and the one place that changes what ``mapped_files()`` lists
once the program runs.  An object the target owns, typed against :class:`LibraryHost`; nothing
here runs per hit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kpsdk.binfmt.symbols import loaded_symbols
from kpsdk.targets.unicorn.layout import PAGE

if TYPE_CHECKING:
    from kpsdk.binfmt.symbols import SymbolTable
    from kpsdk.target import MappedFile


class LibraryHost(Protocol):
    """What the library announcements use of the Unicorn target."""

    symbols: SymbolTable
    #: what ``mapped_files()`` returns (:attr:`kpsdk.target.Target._files`): the program first
    _files: tuple[MappedFile, ...]

    def emit(self, event: str, **kwargs: Any) -> None:
        """Fire ``kpsdk_<event>`` for the target's session (:meth:`kpsdk.target.Target.emit`)."""


class Libraries:
    """The libraries of one Unicorn target's program (see the module's docstring)."""

    def __init__(self, host: LibraryHost) -> None:
        self._host = host
        #: libraries ld.so is mapping, announced at its first system call past their mappings;
        #: changed in place, never rebound (the system-call glue holds the same list)
        self.pending: list[MappedFile] = []
        #: the images execve loaded in other processes: in mapped_files() (uprobes on them arm),
        #: their symbols not in the session's table (which names the program kpsdk.open ran)
        self.programs: list[MappedFile] = []

    def announce(self) -> None:
        """The libraries ld.so finished mapping: they join mapped_files() (so uprobes
        registered later find them) and plugins hear ``kpsdk_library_loaded`` (uprobes on
        them are armed)."""
        host = self._host
        done = self.pending[:]
        self.pending.clear()
        host._files = (*host._files, *done)
        # the libraries' too (Thumb functions are decoded as such), not other processes' programs
        host.symbols = loaded_symbols(tuple(mf for mf in host._files if mf not in self.programs))
        for library in done:
            host.emit("library_loaded", library=library)

    def unmapping(self, start: int, end: int) -> None:
        """The program is about to unmap ``[start, end)`` (ld.so at dlclose unmaps a library's
        whole span at once): each object whose first page lies there leaves mapped_files()
        and plugins hear ``kpsdk_library_unloaded`` (uprobes there are taken out while the
        pages still exist).  The program itself is never one of them."""
        def inside(mf: MappedFile) -> bool:
            return start <= mf.span(PAGE)[0] < end

        host = self._host
        self.pending[:] = [mf for mf in self.pending if not inside(mf)]
        gone = [mf for mf in host._files[1:] if inside(mf)]
        if not gone:
            return
        host._files = tuple(mf for mf in host._files if mf not in gone)
        host.symbols = loaded_symbols(tuple(mf for mf in host._files if mf not in self.programs))
        for library in gone:
            host.emit("library_unloaded", library=library)
