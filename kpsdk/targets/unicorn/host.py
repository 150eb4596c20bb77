"""What the Unicorn target's engines may use of it: the one interface between
:class:`~kpsdk.targets.unicorn.target.UnicornTarget` and :mod:`kpsdk.targets.unicorn.watch`
(watchpoints) and :mod:`kpsdk.targets.unicorn.detour` (kretprobe detours), and, with
:class:`LinuxHost`, :mod:`kpsdk.targets.unicorn.linux` (the process a program runs in).

Both engines run inside the target's hooks and share its engine, its hit
registers and its area for code; :class:`UnicornHost` names exactly what they may
touch, so the target's private state can change without them.  The Linux layer
builds the process into a loaded target (the loader, its console, the objects
mapped): :class:`LinuxHost` adds those, for it alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import mmap
    import struct
    from pathlib import Path

    import unicorn

    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.binfmt.symbols import SymbolTable
    from kpsdk.manager import ProbeManager, ProbePoint
    from kpsdk.probe import Probe
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import ShadowStacks
    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.fast import FastHooks, FastRegs
    from kpsdk.targets.unicorn.libraries import Libraries
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.output import GuestOutput
    from kpsdk.targets.unicorn.space import Space
    from kpsdk.targets.unicorn.step import SoftStep
    from kpsdk.targets.unicorn.tlb import TlbFill

#: a ctypes code-hook callback: ``(handle, address, size, user)``
CodeHook = Callable[[int, int, int, int], None]


class UnicornHost(Protocol):
    """The Unicorn target as its engines see it."""

    uc: unicorn.Uc
    arch: Arch
    fast: FastRegs
    hooks: FastHooks
    symbols: SymbolTable
    manager: ProbeManager
    rethook: ShadowStacks | None
    #: the registers view handed to handlers on every hit
    hit_regs: PtRegs
    #: the post_handlers' pending step (a hooked instruction ends it before its own hit)
    stepper: SoftStep
    #: no probe takes the breakpoint path while set (the watchpoints' engine sets it)
    breakpoints_paused: bool
    #: the process's mappings (write watchpoints protect pages of it in the engine only)
    space: Space
    #: the virtual TLB's fill (None: Unicorn's CPU fills it)
    tlb: TlbFill | None

    @property
    def running(self) -> bool:
        """Inside ``emu_start`` (a hook or handler runs)."""

    @property
    def failed(self) -> bool:
        """An error is stored for ``run()``/``call()`` to raise."""

    def fail(self, exc: BaseException) -> None:
        """Store ``exc`` for ``run()``/``call()`` and stop the emulation (from a hook)."""

    def read_pc(self) -> int: ...

    def running_iset(self) -> InstructionSet: ...

    def begin_at(self, addr: int, point: ProbePoint | None = None) -> int:
        """Set the pc to ``addr`` and return it as ``emu_start`` wants it (Thumb bit)."""

    def read_memory(self, addr: int, size: int) -> bytes: ...

    def read_word(self, addr: int) -> int: ...

    def hijack_word(self, addr: int, value: int) -> None:
        """Overwrite a return address in memory (the stack: host memory on the hot path)."""

    def stack_window(self) -> tuple[mmap.mmap | bytearray, int, int, struct.Struct]:
        """The stack as host memory: buffer, lowest address, last word offset (-1: none), word Struct."""

    #: the current process's stack window buffer (a hook that kept a window checks it is still this)
    _stack_mem: mmap.mmap | None

    def hook_point(self, addr: int) -> ProbePoint | None: ...

    def slot_point(self, addr: int) -> ProbePoint | None: ...

    def is_reserved(self, addr: int) -> bool:
        """``addr`` is in kpsdk's own area (booster slots, trampolines, detours)."""

    # -- kpsdk's area: code kpsdk writes -------------------------------------------------------

    def peek_code(self, size: int) -> int | None:
        """Where the next :meth:`alloc_code` of ``size`` bytes goes, or None when it would not fit."""

    def alloc_code(self, size: int) -> int:
        """``size`` bytes of kpsdk's area for code, for good (the caller keeps a free list)."""

    def write_code(self, addr: int, code: bytes) -> None:
        """Write code into kpsdk's area, dropping translations of what was there."""

    # -- return probes ---------------------------------------------------------------------------

    def current_task(self) -> int: ...

    def trampoline_for(self, entry: int) -> int: ...

    def trampoline_probe(self, entry: int) -> Probe: ...

    def patch(self, point: ProbePoint, addr: int, data: bytes) -> None:
        """Write probe bytes at ``addr`` in every process where ``point`` applies."""

    def on_detour_slow(self, handle: int, addr: int, size: int, user: int) -> None:
        """The code hook of a detour's slow path (a normal hit of the entry's probe)."""


class LinuxHost(UnicornHost, Protocol):
    """The Unicorn target as its Linux layer sees it: a loaded program (and its loader) to make a
    process of, and the objects mapped, which the layer adds to as ld.so maps libraries."""

    #: where the run starts (the program's entry, or its PT_INTERP loader's)
    entry: int | None
    #: the current process's mappings (:mod:`kpsdk.targets.unicorn.space`)
    space: Space
    #: the Linux layer's kernel, set by start_process
    kernel: LinuxKernel | None
    #: the library announcements (kpsdk.targets.unicorn.libraries)
    libraries: Libraries
    #: the directory the program sees as ``/`` (kpsdk.binfmt.filelocation looks names up there)
    sysroot: Path | None
    #: where the program's standard output and error go as written (their tail: ``_console``)
    output: GuestOutput
    #: the objects mapped, the program first (what ``mapped_files()`` returns)
    _files: tuple[MappedFile, ...]
    @property
    def pending_libraries(self) -> list[MappedFile]:
        """Libraries ld.so is mapping, announced at its first system call past their mappings."""

    def map(self, addr: int, size: int, perms: str = "rwx", shared: bool = False,
            buf: mmap.mmap | None = None) -> mmap.mmap:
        """Map ``[addr, addr + size)`` with ``perms``."""

    def mapped_files(self) -> list[MappedFile]: ...

    def unmapping(self, start: int, end: int) -> None:
        """The program is about to unmap ``[start, end)``: the objects there leave (and plugins hear)."""
