"""The target interface: what a session needs from a CPU it probes.

A target kind (Unicorn, and later gdb/MI) is a plugin returning
:class:`TargetKind` objects from ``kpsdk_targets``.  The session and probe
manager only speak to :class:`Target`.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import TargetFault

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.arch.insn import Decoded
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.binfmt.symbols import Symbol, SymbolTable
    from kpsdk.fetchargs import BoundFetch
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.manager import ProbeManager, ProbePoint
    from kpsdk.probe import Probe
    from kpsdk.regs import PtRegs
    from kpsdk.rethook import RethookNode, ShadowStacks
    from kpsdk.session import Session

#: kpsdk.arch.decode.decode_at once loaded (:meth:`Target.decode_at`)
_DECODER: list[Callable[..., Decoded | None]] = []


def _load_decoder() -> Callable[..., Decoded | None]:
    from kpsdk.arch.decode import decode_at

    _DECODER.append(decode_at)
    return decode_at


@dataclass(frozen=True)
class MappedFile:
    """An executable file a target runs, and where this run put it (uprobes).

    :param path: the path the target was opened with (informational: files are
        matched by ``identity``, so a rename or a hard link is the same file).
    :param identity: ``(st_dev, st_ino)`` of the file when the target opened it.
    :param bias: what was added to the file's link-time addresses (0 for
        ``ET_EXEC``; a PIE's load base).
    :param image: the file as linked (:func:`~kpsdk.binfmt.elfimage.load_elf`, not relocated):
        its program headers map a file offset to a link-time address.
    :param name: the path the program itself used for it (the loader's ``l_name``),
        when that differs from ``path`` (a file found in a sysroot); "" otherwise.
    """

    path: Path
    identity: tuple[int, int]
    bias: int
    image: ElfImage
    name: str = ""

    def executable_at(self, addr: int) -> bool:
        """Whether ``addr`` is inside one of this mapping's executable segments."""
        return any(seg.executable and seg.vaddr + self.bias <= addr < seg.vaddr + self.bias + seg.memsz
                   for seg in self.image.segments)

    def span(self, page: int = 0x1000) -> tuple[int, int]:
        """Where the loader put the file: from its first segment's page to its last segment's end."""
        segments = self.image.segments
        return (self.bias + (segments[0].vaddr & ~(page - 1)),
                self.bias + max(seg.vaddr + seg.memsz for seg in segments))

    @classmethod
    def of(cls, image: ElfImage, bias: int) -> MappedFile:
        """Describe ``image`` (as linked) loaded at ``bias``; its identity is the file's whose
        bytes were read (else read now)."""
        if image.identity is not None:
            return cls(image.path, image.identity, bias, image)
        st = os.stat(image.path)
        return cls(image.path, (st.st_dev, st.st_ino), bias, image)


@dataclass(frozen=True)
class TargetKind:
    """A way to open targets, chosen by the scheme of ``kpsdk.open(spec)``.

    :param name: the scheme (``unicorn`` for ``"unicorn:riscv64"``).
    :param open: ``(rest_of_spec, registry, **options) -> Target``.
    :param help: one line for ``kpsdk plugins`` and errors.
    """

    name: str
    open: Callable[..., Target]
    help: str


class Target(ABC):
    """A CPU and its memory, stopped or running, that probes can be put on."""

    arch: Arch
    symbols: SymbolTable
    session: Session
    manager: ProbeManager
    #: calling convention of the code probed: "user" or "kernel"
    abi_kind: str = "user"
    #: CPUs that can run the probed code at once (a kretprobe's default maxactive is max(10, 2 * ncpus))
    ncpus: int = 1
    #: a kernel's ELF symbols file (``symbols=``: a vmlinux), whose DWARF, when it has some, gives
    #: source probe points, variables and call frames (:mod:`kpsdk.debuginfo`); None otherwise
    symbols_file: str | None = None
    #: the return-probe core, set by :meth:`kpsdk.rethook.ShadowStacks.of` on first use
    rethook: ShadowStacks | None = None

    def emit(self, event: str, **kwargs: Any) -> None:
        """Fire the target-event hook ``kpsdk_<event>`` (:mod:`kpsdk.events`) for this
        target's session: every plugin implementing it runs now, the CPU stopped."""
        session = getattr(self, "session", None)
        if session is not None:
            caller = getattr(session.registry.pm.hook, f"kpsdk_{event}")
            if caller.get_hookimpls():  # no one listens: pluggy's call costs ~5 us (a system call's entry and exit)
                caller(session=session, **kwargs)

    @property
    def running(self) -> bool:
        """True while target code runs on this thread's behalf: what runs then (a hook,
        a handler) may not start a run of its own.  Handlers are also known by the
        probe manager's ``busy``; this covers code kpsdk did not call (a user's raw hook)."""
        return False

    # -- memory -------------------------------------------------------------
    @abstractmethod
    def read_memory(self, addr: int, size: int) -> bytes:
        """Target memory as the program sees it: never kpsdk's breakpoints (K10)."""

    @abstractmethod
    def write_memory(self, addr: int, data: bytes) -> None: ...

    def read_word(self, addr: int) -> int:
        """The machine word at ``addr`` (a return address on the stack), as the program sees it."""
        return int.from_bytes(self.read_memory(addr, self.arch.word_size), self.arch.endian)

    def memory_fault(self, message: str, addr: int) -> TargetFault:
        """The error for memory at ``addr`` that could not be read or written: it names the
        address (and its symbol), not a pc, since no instruction of the target was running."""
        return TargetFault(message, where=self.symbols.symbolic(addr), address=addr)

    def read_cstring(self, addr: int, max: int) -> bytes:  # noqa: A002 - as Session.read_string
        """The bytes of a NUL-terminated string at ``addr`` (without the NUL), at most ``max``:
        read in 64-byte pieces, never across a page boundary in one go (the next page may be
        unmapped).  A target with a cheaper way to reach its memory overrides this."""
        out = bytearray()
        while len(out) < max:
            at = addr + len(out)
            chunk = self.read_memory(at, min(64, max - len(out), 0x1000 - at % 0x1000))
            end = chunk.find(b"\0")
            if end >= 0:
                out += chunk[:end]
                break
            out += chunk
        return bytes(out)

    @abstractmethod
    def is_mapped(self, addr: int) -> bool: ...

    @abstractmethod
    def is_executable(self, addr: int) -> bool: ...

    @abstractmethod
    def is_reserved(self, addr: int) -> bool:
        """True inside kpsdk's own areas (slots, trampolines): never probed."""

    # -- instructions -----------------------------------------------------------
    #: the instruction set of code outside any function symbol (None: the arch's first)
    default_iset: InstructionSet | None = None

    def iset_at(self, addr: int, sym: Symbol | None) -> InstructionSet:
        """The instruction set at ``addr``: the symbol's, else the one bit 0 of the address selects
        (:meth:`kpsdk.arch.Arch.iset_for_address`)."""
        if sym is not None and sym.iset:
            return self.arch.iset(sym.iset)
        if addr & 1:
            return self.arch.iset_for_address(addr)
        if (sym is not None and sym.kind == "func") or self.default_iset is None:
            return self.arch.isets[0]
        return self.default_iset

    def decode_at(self, addr: int, start: int, iset: InstructionSet, end: int | None = None) -> Decoded | None:
        """The instruction at ``addr``, decoding from ``start`` (up to ``end``, the function's
        end where known) in target memory; None if ``addr`` falls inside an instruction
        (:func:`kpsdk.arch.decode.decode_at`).  The decoder needs capstone, which ``import
        kpsdk`` does not load: it is imported at the first call and kept (an import
        statement here was ~5% of registering a probe)."""
        decode = _DECODER[0] if _DECODER else _load_decoder()
        return decode(self, addr, start, iset, end)

    @abstractmethod
    def can_step(self, point: ProbePoint) -> bool:
        """Whether a post_handler can be run after this instruction."""

    # -- probes ----------------------------------------------------------------
    @abstractmethod
    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        """Make the target match the point: arm, re-arm with another mechanism, or disarm."""

    def list_flag(self, point: ProbePoint) -> str:
        """What ``list()`` adds to the point's probes besides ``[DISABLED]`` and ``[OPTIMIZED]``:
        a target with more than one mechanism names the one serving the point (``[PLUGIN]``)."""
        return ""

    # -- execution ---------------------------------------------------------------
    @abstractmethod
    def run(self, timeout: float | None = None) -> int | None:
        """Run until the program ends, ``stop()`` or the timeout; the exit status if it ended.

        ``timeout`` is what :meth:`Session.run` checked (``kpsdk.session.check_timeout``):
        None for no limit, else a positive, finite number of seconds.
        """

    @abstractmethod
    def stop(self) -> None: ...

    def call(self, addr: int, args: tuple[int, ...], restype: str = "long") -> int:
        from kpsdk.errors import TargetError

        raise TargetError(f"{type(self).__name__} cannot call functions")

    def ifunc_args(self) -> tuple[int, ...]:
        """What an IFUNC resolver is called with to pick its implementation (glibc passes
        AT_HWCAP on ARM, RISC-V and ppc64; x86's resolvers take nothing).  A target that
        cannot call functions, or does not know the process's hwcaps, refuses."""
        from kpsdk.errors import TargetError

        raise TargetError(f"{type(self).__name__} cannot resolve an IFUNC (an STT_GNU_IFUNC symbol)")

    @abstractmethod
    def regs(self) -> PtRegs:
        """A register view of the stopped CPU."""

    #: what the program wrote (stdout and stderr), or the guest's serial console
    _console: bytearray
    #: the program's exit status once it ended
    _exit_status: int | None = None

    @property
    def console(self) -> str:
        return self._console.decode("utf-8", "replace")

    @property
    def console_bytes(self) -> bytes:
        return bytes(self._console)

    @property
    def exit_status(self) -> int | None:
        return self._exit_status

    # -- return probes (kpsdk.rethook) ----------------------------------------------------
    #
    # A target that supports return probes implements attach_rethook,
    # hijack_return and release_return (detach_rethook and current_task when it
    # has something to undo or several tasks).  ``core`` is the object that
    # attach_rethook received; the target calls into it twice:
    #
    # * ``core.on_return(regs, at_trampoline)`` whenever control reaches a place
    #   hijack_return sent a return to.  It runs the return handlers and gives
    #   the address to resume at, or None when that stop was not a hooked return.
    # * ``core.unwind(task, below)`` when hooked calls will never return: the
    #   program or a task ended (``below=None``: all of them), or a call the
    #   target made for the user was abandoned (the calls entered below that sp).
    #
    # The core reads registers through ``regs`` (``regs.sp``, ``regs.ip``, the
    # link register by its name) and the stack through :meth:`read_word`.

    def attach_rethook(self, core: ShadowStacks) -> None:
        """Get ready to hook returns for ``core``; called when the first return probe
        registers on this target (again after a :meth:`detach_rethook`).

        Keep ``core``: it is what a hooked return calls into.  Set up whatever
        all hooked returns share (the Unicorn target maps its trampolines
        here and registers their probes, so ``list()`` shows them).  Raise
        :class:`~kpsdk.errors.TargetError` if this target cannot hook returns:
        the registration then fails with ``EOPNOTSUPP`` and leaves nothing behind.
        """
        from kpsdk.errors import TargetError

        raise TargetError(f"return probes are not supported by this target ({type(self).__name__})")

    def detach_rethook(self) -> None:  # noqa: B027 - optional: most targets keep nothing to undo
        """Undo :meth:`attach_rethook`: no return probe is registered and no hooked call
        is in flight any more."""

    def hijack_return(self, regs: PtRegs, node: RethookNode) -> int:
        """Make the call now at its entry come back to kpsdk when it returns.

        Called at a function entry (a probe hit at its first instruction, the
        CPU stopped there) with the hit's registers, for a call whose return
        is not hooked yet.  ``node.ret_addr`` is its real return address (read
        from the link register, else from the word at ``node.frame``, the
        stack pointer at entry); ``node.task`` is :meth:`current_task`.

        Either replace the return address (link register or the word at sp)
        with an address of kpsdk's own that the target traps (Unicorn: a
        trampoline), or leave it and trap ``node.ret_addr`` itself (a live
        target: a temporary breakpoint there).  Several nodes may ask for
        the same return address (recursion): keep one breakpoint per address
        while any node uses it.  Return the value the return address holds
        now: the trampoline, or ``node.ret_addr`` when it was left alone.

        When the trap is reached, call ``core.on_return(regs, at_trampoline)``
        (``True`` for a trampoline, ``False`` for a breakpoint at a return
        address, which other passes through that address hit too) and resume
        at the address it returns; None means that stop was not a hooked
        return (at a return-address breakpoint: just continue).
        """
        from kpsdk.errors import TargetError

        raise TargetError(f"return probes are not supported by this target ({type(self).__name__})")

    def release_return(self, node: RethookNode) -> None:
        """A node that :meth:`hijack_return` hooked is done: its call returned, or
        left without returning (``longjmp``, the program ended).

        Called exactly once per :meth:`hijack_return` call, possibly while
        other nodes still use the same return address.  A target with a
        breakpoint at ``node.ret_addr`` removes it when no node uses it any
        more; a target with a trampoline has nothing to do.
        """
        from kpsdk.errors import TargetError

        raise TargetError(f"return probes are not supported by this target ({type(self).__name__})")

    def settle_returns(self) -> None:  # noqa: B027 - optional: only targets with guest-code entries
        """Report the calls this target hooked by itself since it last did.

        A target may hook a return probe's entries without stopping for them
        (Unicorn: guest code at the function entry, for a probe whose
        :attr:`~kpsdk.probe.Probe.entry_rethook` is set).  It then owes the core
        those calls, oldest first, through ``core.entered(...)``; the core asks
        for them here before it looks at its shadow stacks, and the target
        settles before each ``core.on_return``.
        """

    def current_task(self) -> int:
        """The task (thread, process) running now: each has its own hooked calls.

        Read at entries and returns.  A target that cannot tell tasks apart
        returns 0; one running several (a kernel) returns something that
        identifies the current one, such as the ``current`` task pointer.
        """
        return 0

    # -- the trace line's prefix (kpsdk/kernel/tasks.py) -----------------------------------------

    def task_info(self) -> TaskInfo | None:
        """The task the current hit runs in, as the kernel's trace line names it (comm,
        pid, CPU, irqs off); None where the target has no tasks of its own (Unicorn):
        the trace then uses the comm and pid the user chose.  Called during a hit."""
        return None

    def program_pid(self) -> int | None:
        """The pid the target tells the program it runs (``getpid``, ``/proc/self``), where it
        has no tasks of its own: a trace's prefix shows it, so that a trace line and the
        program's own output name the same process.  None: no program, or no pid told."""
        return None

    def thread_pointer(self) -> int | None:
        """The running thread's pointer as its C library uses it (x86_64's fs base, ARM's
        TPIDRURO, riscv's tp): what a library's thread-local variable, glibc's ``errno``, is
        found from (:mod:`kpsdk.binfmt.tls`); None where the target does not know it."""
        return None

    def reads_comm(self) -> bool:
        """Whether :meth:`task_info` reads the running task's real ``comm`` at a hit (a
        kernel whose ``current`` kpsdk found): ``$comm`` then reads it too."""
        return False

    def prepare_clock(self) -> str:
        """Get ready to answer :meth:`clock_ns` before the run: what the trace header says the
        timestamps are ("" where the target has no guest clock kpsdk reads: the host's)."""
        return ""

    def clock_ns(self) -> int | None:
        """The guest's trace clock at the hit, in ns (a kernel's ``sched_clock``), once
        :meth:`prepare_clock` said it has one; None: not readable."""
        return None

    def native_tracer(self) -> Any:
        """Where trace events run in C at the hit (:mod:`kpsdk.fetchprog`'s programs): an object
        with ``new_ring``, ``program`` and ``close_ring`` (the Unicorn target's
        :class:`~kpsdk.targets.unicorn.nativetrace.NativeTraceHost`); None (the default): every
        event's fetches run in Python at its pre_handler."""
        return None

    def declare_fetches(self, probe: Probe, args: Sequence[BoundFetch]) -> None:
        """A trace event's fetch arguments, told before its probe registers: a target whose
        handlers run after the hit (the QEMU plugin) reads their memory at the hit.  Others
        read memory when the handler asks: nothing to do."""
        return

    def prepare_tasks(self) -> str:
        """Get ready to answer :meth:`task_info` (a kernel: find ``current``'s layout)
        before the run; returns one line for the trace header saying where comm and
        pid come from ("" when there is nothing to say)."""
        return ""

    # -- files (uprobes) --------------------------------------------------------------------
    #
    # Uprobes are addressed by (file, offset).  A target that runs ELF files says
    # which, and at which load bias, by setting ``_files`` (or overriding
    # mapped_files); the uprobes plugin turns a file offset into
    # ``bias + p_vaddr + (offset - p_offset)`` of the executable PT_LOAD holding it.

    #: what mapped_files() returns; set by the target's opener once the bias is known
    _files: tuple[MappedFile, ...] = ()

    def mapped_files(self) -> list[MappedFile]:
        """The executable files this target runs, each with its identity and load bias.

        Empty for a target that runs no file kpsdk knows (a blank Unicorn CPU, a
        kernel): uprobes then never apply to it.
        """
        return list(self._files)

    # -- watchpoints ----------------------------------------------------------------------

    def watch_engine(self) -> Any:
        """The object that arms this target's watchpoints (made on first use), with:

        * ``emulator``: True where ``strict=False`` may lift the architecture's rules;
        * ``check(wp)``: raise :class:`~kpsdk.errors.KprobeError` for a watchpoint
          this target cannot watch (``EOPNOTSUPP``: qemu-user has no hardware ones);
        * ``arm(wp)`` / ``disarm(wp)``: start and stop watching ``wp.address``,
          ``wp.length`` for ``wp.type``.

        On an access it calls ``wp.fire(regs, kind, addr, size, value, old, pc)``
        with the CPU stopped: after a data access, before an executed instruction.
        Raise :class:`~kpsdk.errors.TargetError` when the target has no watchpoints
        at all (registration then fails with ``EOPNOTSUPP``).
        """
        from kpsdk.errors import TargetError

        raise TargetError(f"watchpoints are not supported by this target ({type(self).__name__})")

    def close(self) -> None:  # noqa: B027 - optional: most targets have nothing to release
        """Release the target's resources."""
