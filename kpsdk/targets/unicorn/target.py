"""The embedded default target: code run in-process by Unicorn.

How a probe point is armed (chosen per point, re-chosen whenever its probes,
the enabled knob or the optimization knob change):

``hook`` [OPTIMIZED]
    A Unicorn code hook bound to the one address.  Cheapest per hit (~0.7 us),
    but every hit walks all code hooks, so at most :data:`OPT_LIMIT` probes get
    it, the kernel-style optimization: the first ones registered, and then the
    hottest (a breakpoint-path point hit :data:`PROMOTE_EVERY` times takes the
    slot of a colder optimized one).  Never used for probes with a
    post_handler, as in the kernel.
``breakpoint`` (the classic path with the kprobe booster)
    A trap instruction over the probed one, and an out-of-line copy of the
    original instruction followed by a jump back (the kprobe booster, Guts section 6.1).  One
    interrupt hook and a dict lookup serve any number of probes, so the
    per-hit cost stays flat up to 10,000 probes and beyond.
``hook`` + step (not optimized)
    For instructions that cannot run out of line (they read or write the pc)
    and for post_handlers: the instruction runs in place; the successors it
    can reach are computed from the registers (software single-step, as gdb
    does on ARM and RISC-V) and hooks there, kept from hit to hit, run the
    post_handlers (:mod:`kpsdk.targets.unicorn.step`).

The trap encodings differ from the kernel's where Unicorn 2.1.4 would stop
emulation instead of raising a hookable interrupt; see each arch backend.

Return probes (:mod:`kpsdk.rethook`): a hooked call's return address is
replaced by a trampoline in kpsdk's area with an internal probe on it
(``kretprobe_trampoline`` in ``list()``; ARM has a second one for Thumb code).
The trampoline is an indirect jump through a word next to it (the arch
backend's ``return_jump``).  Its code hook asks the core which call returned
and writes the real return address into that word, and the jump takes the CPU
there.  No pc write: a pc written from a hook ends the translation block,
which cost more than the rest of the return put together.  A kretprobe whose
entry is detoured (:mod:`kpsdk.targets.unicorn.detour`) returns through its detour's
own return code instead, which counts on the same trampoline probe.

kpsdk's area and the stack are host memory handed to Unicorn
(``mem_map_ptr``), so the words a return probe reads and writes on every hit
(the return address at [sp], the trampoline's word) are plain ``struct``
accesses, not ``uc_mem_read``/``uc_mem_write`` calls (~1.5 us each).
"""

from __future__ import annotations

import bisect
import ctypes
import errno
import math
import mmap
import os
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import unicorn

from kpsdk import hookimpl
from kpsdk.arch import Arch, InstructionSet
from kpsdk.binfmt.symbols import Symbol, SymbolTable, loaded_symbols
from kpsdk.errors import ImageFormatError, KprobeError, TargetError, TargetFault, UnsupportedTargetError
from kpsdk.events import SyscallEvent
from kpsdk.manager import ProbeManager, ProbePoint
from kpsdk.probe import Probe
from kpsdk.regs import PtRegs
from kpsdk.target import MappedFile, Target, TargetKind
from kpsdk.targets.unicorn.detour import DATA_SIZE, DetourEngine
from kpsdk.targets.unicorn.fast import (
    FastHooks,
    FastRegs,
    FastWords,
    cache_remover,
    cstring_reader,
    memory_reader,
    memory_writer,
)
from kpsdk.targets.unicorn.linux import LinuxProcess, check_options, start_process
from kpsdk.targets.unicorn.linux.syscalls import PID
from kpsdk.targets.unicorn.step import SoftStep
from kpsdk.targets.unicorn.tlb import TlbFill, watch_mappings
from kpsdk.targets.unicorn.watch import UcWatch

if TYPE_CHECKING:
    import capstone

    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.rethook import RethookNode, ShadowStacks

PAGE = 0x1000
#: most probes given the [OPTIMIZED] hook path at once (see docs/performance.md)
OPT_LIMIT = 32
#: a breakpoint-path point hit this often asks for the hook path, taking the
#: slot of the coldest optimized point when all are taken (kpsdk's optimizer)
PROMOTE_EVERY = 256
AREA_SIZE = 0x200000  # kpsdk's own area: sentinel + out-of-line slots, then DATA_SIZE the guest writes
SLOT_SIZE = 32
#: the longest trap a breakpoint-path point writes (ARM, riscv64: 4 bytes): a read looks this far
#: back for a trap reaching into it (K10)
MAX_TRAP = 4
SLOT_BASE = 0x100  # offset of the first slot in kpsdk's area (the sentinel is at 0)
STACK_TOP = 0x7FFF0000
STACK_SIZE = 0x100000
BLANK_AREA = 0x7E000000
#: the most memory an elf: target maps for a program's segments (page-rounded, overlaps once):
#: 1 GiB, more than any program emulated function by function needs; a larger p_memsz is
#: refused at once instead of being mapped and written
MAX_LOAD = 1 << 30
#: load bases of an ET_DYN (PIE) executable, as Linux with ASLR off (see pie_base)
PIE_BASE_64 = 0x555555554000
PIE_BASE_32 = 0x56555000
#: the most one read or write moves (Linux's MAX_RW_COUNT: INT_MAX rounded down to a page)
MAX_RW_COUNT = 0x7FFFF000
_PERMS = {"r": unicorn.UC_PROT_READ, "w": unicorn.UC_PROT_WRITE, "x": unicorn.UC_PROT_EXEC}


#: the largest timeout uc_emu_start takes (a uint64 of microseconds; ctypes would wrap a larger one)
USEC_MAX = 2**64 - 1


def _align_up(x: int, a: int = PAGE) -> int:
    return (x + a - 1) & ~(a - 1)


def timeout_usec(timeout: float | None) -> int:
    """``uc_emu_start``'s timeout for ``timeout`` seconds (Session.run checked it): 0 is
    Unicorn's "no limit", so a positive timeout is at least 1 us, and at most USEC_MAX."""
    if timeout is None:
        return 0
    return min(max(1, math.ceil(min(timeout, USEC_MAX / 1e6) * 1e6)), USEC_MAX)


#: the system calls ld.so maps one library's segments with: a library is complete at the first other call
MAPPING_CALLS = frozenset({"mmap", "mmap2", "mprotect", "munmap"})


class UnicornTarget(Target):
    """One Unicorn CPU with its memory, symbols and probe points."""

    def __init__(self, arch: Arch, abi_kind: str = "user", default_iset: str | None = None) -> None:
        if arch.unicorn is None or arch.unicorn_unsupported:
            raise UnsupportedTargetError(arch.unicorn_unsupported or f"Unicorn has no {arch.name}")
        self.arch = arch
        self.abi_kind = abi_kind
        self.uc = unicorn.Uc(*arch.unicorn)
        #: guest stores at full speed on memory that is not executable (kpsdk.targets.unicorn.tlb), where
        #: the arch allows it (not ARM: ``Arch.unicorn_tlb_fill``)
        self.tlb = TlbFill(self.uc, fail=self.fail) if arch.unicorn_tlb_fill else None
        watch_mappings(self.uc, self.tlb)
        if arch.unicorn_setup is not None:  # CPU state Unicorn leaves off that programs expect (ARM's VFP)
            arch.unicorn_setup(self.uc)
        self.fast = FastRegs(self.uc)
        self.words = FastWords(self.uc, arch.word_size, arch.endian)
        self.hooks = FastHooks(self.uc)
        self._remove_cache = cache_remover(self.uc)
        self._mem_write = memory_writer(self.uc)  # a trap over a probed instruction, and back
        self._mem_read = memory_reader(self.uc)  # every read through kpsdk (decoding at registration)
        self._cstring = cstring_reader(self.uc)  # strings a trace fetches at every hit
        #: ``uc.mem_regions()`` as last read: dropped by :meth:`map` and by every run (a
        #: program may map or protect memory), re-read on a miss (see :meth:`_region`)
        self._regions: list[tuple[int, int, int]] | None = None
        #: translations to drop before the next run: ``(begin, end)`` ranges that registration
        #: changed outside a run, dropped once, merged, as the run starts (:meth:`_drop_translations`)
        self._stale: list[tuple[int, int]] = []
        #: pages of host-backed code where a trap written by memmove was read back through
        #: Unicorn since the last run or map (:meth:`_write_trap`); emptied with ``_regions``
        self._host_checked: set[int] = set()
        #: moves on at every change to memory made through kpsdk and at every run (see
        #: :attr:`code_generation`)
        self._generation = 0
        self.symbols = SymbolTable()
        self.manager = ProbeManager(self)
        self.default_iset = arch.iset(default_iset)
        self.entry: int | None = None
        self._pc = arch.register(arch.pc)
        self._sp = arch.register(arch.sp)
        self._rv = arch.register(arch.return_value)
        self.hit_regs = PtRegs.create(arch, self.fast, arch.abi(abi_kind), self.read_memory, self.read_word)
        self._bp_points: dict[int, ProbePoint] = {}
        #: the breakpoint-path points' addresses, sorted, and the bytes each one's trap hides:
        #: a read finds the traps inside it by bisection (K10)
        self._bp_sorted: list[int] = []
        self._bp_hidden: dict[int, bytes] = {}
        self._slot_points: dict[int, ProbePoint] = {}
        self._hook_points: dict[int, ProbePoint] = {}
        #: software single-step for post_handlers: persistent successor hooks, one pending step
        self.stepper = SoftStep(self, self._hook_points)
        self._n_optimized = 0
        self._area = 0
        self._free_slots: list[int] = []
        self._next_slot = 0
        self._console = bytearray()
        self._exit_status: int | None = None
        #: libraries ld.so is mapping, announced at its first system call past their mappings
        self.pending_libraries: list[MappedFile] = []
        #: the Linux process (elf: targets): every call but exit goes to it; None: write and exit only
        self.linux: LinuxProcess | None = None
        #: the directory a Linux program sees as ``/`` (None: none, or not a Linux program); where
        #: a bare library name (``libc.so.6``) is looked up for this session (kpsdk.binfmt.filelocation)
        self.sysroot: Path | None = None
        #: where call() builds its frame when no run is under way (below the process's initial stack)
        self.call_sp = STACK_TOP - 0x2000
        self._pending: BaseException | None = None
        self._depth = 0
        self._started = False
        bp = self.default_iset.unicorn_breakpoint
        self._bp_intno, self._bp_adjust = bp.intno, bp.pc_adjust
        self._sys = arch.syscalls
        self._syscall_names = {nr: name for name, nr in arch.syscalls.calls.items()} if arch.syscalls else {}
        # return probes: trampoline address by Thumb state, and their probes while attached
        self._link = arch.register(arch.link) if arch.link else None
        self._thumb_entry: dict[int, bool] = {}  # probed function entry -> runs Thumb code
        self._trampolines: dict[bool, int] = {}
        self._tramp_hooks: list[int] = []  # the hooked instruction of each trampoline (Thumb bit included)
        self._tramp_probes: list[Probe] = []
        self._tramp_probe: dict[int, Probe] = {}  # by hook address (no Thumb bit): profile() counts returns
        #: code-hook callbacks of kpsdk's internal points, by address (the trampolines')
        self._internal_hooks: dict[int, Any] = {}
        #: host buffers behind kpsdk's area and the stack (``map(host=True)``), and their ctypes views
        self._host_views: list[Any] = []
        #: executable mappings backed by a host buffer: ``(start, end, buffer)``, sorted by start
        self._host_code: list[tuple[int, int, mmap.mmap]] = []
        self._area_mem: mmap.mmap | None = None
        self._stack_mem: mmap.mmap | None = None
        word = "<" if arch.endian == "little" else ">"
        self._word = struct.Struct(word + ("Q" if arch.word_size == 8 else "I"))
        #: lowest and highest address kpsdk ever patched (reads outside skip the overlay)
        self._bp_lo, self._bp_hi = 1 << 64, -1
        #: return probes' entries done in guest code (made with kpsdk's area)
        self.detours: DetourEngine | None = None
        self.hooks.intr(self._on_intr)
        if self._sys is not None and self._sys.unicorn_insn is not None:  # x86_64's syscall instruction
            self.uc.hook_add(  # type: ignore[call-arg]  # mypy sees the py2 binding's signature
                unicorn.UC_HOOK_INSN, self._on_syscall_insn, aux1=self._sys.unicorn_insn
            )

    # -- set-up -----------------------------------------------------------------------

    def map(self, addr: int, size: int, perms: str = "rwx", host: bool | None = None) -> mmap.mmap | None:
        """Map memory (page-aligned outward).

        ``host``: back it with a buffer of ours (``mem_map_ptr``) and return that
        buffer, for memory kpsdk itself reads and writes on hot paths.  The
        buffer lives as long as the target (Unicorn never frees it).  By default
        executable memory is host-backed: registering a breakpoint-path kprobe
        writes a trap there, a memmove instead of ``uc_mem_write`` (which makes
        Unicorn 2.1.4 lift the protection and rebuild its view of memory,
        ~15 us; see :meth:`_write_trap`).
        """
        start, end = addr & ~(PAGE - 1), _align_up(addr + size)
        prot = 0
        for c in perms:
            prot |= _PERMS[c]
        if host is None:
            host = "x" in perms
        buf = mmap.mmap(-1, end - start) if host else None
        self._forget_memory()
        try:
            if buf is None:
                self.uc.mem_map(start, end - start, prot)
            else:
                view = (ctypes.c_char * (end - start)).from_buffer(buf)
                self.uc.mem_map_ptr(start, end - start, prot, ctypes.addressof(view))
                self._host_views.append(view)
        except unicorn.UcError as e:
            raise TargetError(f"cannot map {start:#x}-{end:#x}: {e}") from e
        if buf is not None and prot & unicorn.UC_PROT_EXEC:
            bisect.insort(self._host_code, (start, end, buf), key=lambda r: r[0])
        return buf

    def _forget_memory(self) -> None:
        """What kpsdk knows of the memory map and the code may be wrong from now on:
        kpsdk maps memory, or a run starts (the program may map, unmap, protect or
        change its code)."""
        self._regions = None
        self._host_checked.clear()
        self._generation += 1

    @property
    def code_generation(self) -> int | None:
        """An int that moves on whenever the code may have changed: memory mapped or written
        through kpsdk (:meth:`map`, :meth:`write_memory`), and every run.  Decoding keeps a
        function's walk while it stays the same (:mod:`kpsdk.arch.decode`), instead of reading
        the function again at each registration.  None while a run is under way (a handler
        registering: the program may have changed its code since the run began).  Bytes
        written behind kpsdk's back (``target.uc.mem_write``) do not move it."""
        return None if self._depth else self._generation

    def _write_trap(self, addr: int, data: bytes) -> None:
        """Write a trap over a probed instruction, or its bytes back (the caller drops
        the translations).  In host-backed code a memmove, checked by reading it back
        through Unicorn: a program that unmapped the memory and mapped other memory
        there no longer uses the buffer, and then ``uc_mem_write`` does it.  Outside a
        run the check is made once per page (until the next run or map: only a run
        can remap the program's memory)."""
        code = self._host_code
        i = bisect.bisect_right(code, addr, key=lambda r: r[0]) - 1
        if i >= 0:
            start, end, buf = code[i]
            if addr + len(data) <= end:
                buf[addr - start:addr - start + len(data)] = data
                checked = self._host_checked
                page = addr & ~(PAGE - 1)
                if page in checked and (addr + len(data) - 1) & ~(PAGE - 1) in checked and not self._depth:
                    return
                if self._mem_read(addr, len(data)) == data:
                    if not self._depth:
                        checked.add(page)
                        checked.add((addr + len(data) - 1) & ~(PAGE - 1))
                    return
        self._mem_write(addr, data)

    def _drop_translations(self, begin: int, end: int) -> None:
        """Make Unicorn translate ``[begin, end)`` again before it runs it.  Inside a run (a
        handler registering) at once; outside one, at the start of the next run, all the
        ranges merged (:meth:`_flush_stale`): dropping translations cost 22-35 us a call
        whatever the span (docs/performance.md), twice per registered probe."""
        if self._depth:
            self._remove_cache(begin, end)
        else:
            self._stale.append((begin, end))

    def _flush_stale(self) -> None:
        """Drop the translations registration left stale since the last run: one call per
        run of ranges less than a page apart."""
        stale, self._stale = self._stale, []
        if not stale:
            return
        stale.sort()
        begin, end = stale[0]
        for b, e in stale[1:]:
            if b > end + PAGE:
                self._remove_cache(begin, end)
                begin, end = b, e
            elif e > end:
                end = e
        self._remove_cache(begin, end)

    def setup_area(self, base: int) -> None:
        """Map kpsdk's own area (blacklisted): a sentinel return address, then slots."""
        self._area = base
        self._area_mem = self.map(base, AREA_SIZE - DATA_SIZE, "rx", host=True)
        assert self._area_mem is not None
        self._area_words = memoryview(self._area_mem).cast("Q" if self.arch.word_size == 8 else "I")
        data = base + AREA_SIZE - DATA_SIZE
        mem = self.map(data, DATA_SIZE, "rw", host=True)
        assert mem is not None
        self.detours = DetourEngine(self, data, mem)
        self._next_slot = base + SLOT_BASE

    def setup_stack(self) -> int:
        self._stack_mem = self.map(STACK_TOP - STACK_SIZE, STACK_SIZE, "rw", host=True)
        sp = STACK_TOP - 0x1000
        self.uc.mem_write(sp, bytes(8 * self.arch.word_size))  # argc=0, argv=NULL, envp=NULL, AT_NULL
        self.fast.write(self._sp, sp)
        return sp

    def close(self) -> None:
        """Close the host files the program opened."""
        if self.linux is not None:
            self.linux.close()

    def ifunc_args(self) -> tuple[int, ...]:
        """AT_HWCAP (and AT_HWCAP2), as glibc's resolvers get them (x86's ignore them)."""
        linux = self._sys.linux if self._sys is not None else None
        if linux is None:
            return super().ifunc_args()
        return (linux.hwcap, linux.hwcap2)

    @property
    def syscalls_unimplemented(self) -> dict[str, int]:
        """System calls the program made that the Linux layer does not emulate (each got
        ``-ENOSYS``), and files of its own ``/proc/self`` it does not make (``ENOENT``), with
        how often: empty when everything it asked for was there."""
        return dict(self.linux.unimplemented) if self.linux is not None else {}

    def program_pid(self) -> int | None:
        """The Linux layer's pid (1000) for a program it runs; None for a bare session."""
        return PID if self.linux is not None else None

    @property
    def sentinel(self) -> int:
        """Where ``call()`` makes functions return to: the first byte of kpsdk's area."""
        return self._area

    # -- memory (K10: reads never show kpsdk's breakpoints) ---------------------------------

    def read_memory(self, addr: int, size: int) -> bytes:
        try:
            data = bytearray(self._mem_read(addr, size))
        except unicorn.UcError as e:
            raise self.memory_fault(f"cannot read {size} bytes: {e}", addr) from e
        if self._bp_points:
            hidden, at = self._bp_hidden, self._bp_sorted
            for a in at[bisect.bisect_left(at, addr - MAX_TRAP + 1):bisect.bisect_left(at, addr + size)]:
                if a + len(hidden[a]) > addr:  # a trap before addr reaching into the read
                    _put_back(data, addr, a, hidden[a])
        if self.detours is not None and self.detours.by_addr:
            for det in self.detours.covering(addr, size):
                _put_back(data, addr, det.point.addr, det.original)
        return bytes(data)

    def read_cstring(self, addr: int, max: int) -> bytes:  # noqa: A002 - as Session.read_string
        """One ``uc_mem_read`` per page into a kept buffer, the NUL found by C; near kpsdk's
        breakpoints and detours (K10: the program's own bytes), or where a page cannot be
        read (the fault names the address), the generic pieces through :meth:`read_memory`."""
        if not (self._bp_lo - 4 < addr + max and addr < self._bp_hi + 4):
            data = self._cstring(addr, max)
            if data is not None:
                return data
        return super().read_cstring(addr, max)

    def read_word(self, addr: int) -> int:
        off = addr - STACK_TOP + STACK_SIZE
        if 0 <= off <= STACK_SIZE - self._word.size and self._stack_mem is not None:  # the hot case: [sp]
            return int(self._word.unpack_from(self._stack_mem, off)[0])
        if self._bp_lo - 4 < addr < self._bp_hi + 4:
            return super().read_word(addr)
        value = self.words.read(addr)
        if value is None:
            raise self.memory_fault(f"cannot read {self.arch.word_size} bytes: unmapped", addr)
        return value

    def write_memory(self, addr: int, data: bytes) -> None:
        probed = [a for a in list(self._bp_points) + list(self._hook_points) if a + 4 > addr and a < addr + len(data)]
        if self.detours is not None:  # a detoured entry: the whole of its displaced instructions
            probed += [d.point.addr for d in self.detours.covering(addr, len(data))]
        if probed:
            where = self.symbols.format(probed[0])
            raise KprobeError(errno.EBUSY, f"{where} is probed; unregister before writing code there")
        try:
            self.uc.mem_write(addr, bytes(data))
        except unicorn.UcError as e:
            raise self.memory_fault(f"cannot write {len(data)} bytes: {e}", addr) from e
        self.uc.ctl_remove_cache(addr, addr + len(data))
        self._generation += 1

    def _region(self, addr: int) -> tuple[int, int, int] | None:
        """The mapped region holding ``addr``, from the cached region list (registering
        10,000 probes walked ``mem_regions()`` 20,000 times); re-read once on a miss
        or a region without exec, so memory mapped behind kpsdk's back is seen."""
        for fresh in (False, True):
            if fresh or self._regions is None:
                self._regions = list(self.uc.mem_regions())
                fresh = True
            for start, end, perms in self._regions:
                if start <= addr <= end:
                    if perms & unicorn.UC_PROT_EXEC or fresh:
                        return start, end, perms
                    break
            if fresh:
                return None
        return None

    def is_mapped(self, addr: int) -> bool:
        return self._region(addr) is not None

    def is_executable(self, addr: int) -> bool:
        region = self._region(addr)
        return region is not None and bool(region[2] & unicorn.UC_PROT_EXEC)

    def is_reserved(self, addr: int) -> bool:
        return bool(self._area) and self._area <= addr < self._area + AREA_SIZE

    # -- instructions ---------------------------------------------------------------

    def _cs_insn(self, point: ProbePoint) -> capstone.CsInsn:
        insn = point.state.get("cs")
        if insn is None:
            md = self.arch.disassembler(point.iset)
            insn = next(md.disasm(point.insn.raw, point.addr))
            point.state["cs"] = insn
        return insn  # type: ignore[return-value]

    def can_step(self, point: ProbePoint) -> bool:
        succ = self.arch.insn.successors(
            self._cs_insn(point), lambda name: 0, lambda a, n: bytes(n), self.arch.word_size
        )
        return succ is not None

    # -- arming -------------------------------------------------------------------------

    def _choose(self, point: ProbePoint) -> tuple[str, bool] | None:
        if not point.active:
            return None
        if point.internal:  # kpsdk's own point: its own code hook, outside the OPT_LIMIT budget
            return ("hook", False)
        if self.detours is not None and self.manager.optimization and len(point.active) == 1 \
                and point.active[0].entry_rethook is not None:
            length = self.detours.plan(point)
            if length is not None:  # 0: the entry cannot hold the jump, the detour's return code serves
                return ("detour" if length else "hooked-entry", True)
        if point.needs_step or not point.insn.boostable:
            return ("hook", False)
        if self.manager.optimization and (point.optimized or self._n_optimized < OPT_LIMIT):
            return ("hook", True)
        slot = self._peek_slot()
        code = self._slot_code(point, slot)
        if code is None:
            return ("hook", False)
        point.state["booster"] = (slot, code)  # what _arm writes there, unless another slot comes first
        return ("breakpoint", False)

    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        want = self._choose(point)
        have = (point.mechanism, point.optimized) if point.mechanism else None
        if want != have or force:
            self._disarm(point)
            if want is not None:
                self._arm(point, *want)
            if self.detours is not None and self.detours.by_addr:  # a probe inside a detoured entry's bytes
                clash = self.detours.clashing(point)
                if clash is not None:
                    self.sync_point(clash, force=True)
        if point.mechanism == "hook":
            if point.needs_step:
                if not self._depth:  # outside a run, a step that goes nowhere new is hooked now
                    for a in self.stepper.prepare(point, self._cs_insn(point)):
                        self._drop_translations(a, a + 1)
            elif self.stepper.holds(point):  # its post_handlers are gone, the mechanism stays
                self.stepper.release(point)

    def _arm(self, point: ProbePoint, mechanism: str, optimized: bool) -> None:
        addr, size = point.addr, point.insn.size
        if mechanism == "hook":
            callback = self._internal_hooks.get(addr) or self._hook_callback(point)
            point.state["hook"] = self.hooks.code(callback, addr, addr)
            self._hook_points[addr] = point
            if optimized:
                self._n_optimized += 1
        elif mechanism in ("detour", "hooked-entry"):
            assert self.detours is not None
            length = int(point.state["detour_plan"])  # type: ignore[call-overload]
            self.detours.arm(point, length)
            if length:
                self._bp_lo, self._bp_hi = min(self._bp_lo, addr), max(self._bp_hi, addr + length)
            else:  # a hooked entry: a code hook at the entry, as the hook path's (resuming, steps)
                self._hook_points[addr] = point
        else:
            slot = self._alloc_slot()
            booster = point.state.pop("booster", None)
            code = booster[1] if booster is not None and booster[0] == slot else self._slot_code(point, slot)  # type: ignore[index]
            assert code is not None
            self.write_code(slot, code)
            bp = point.iset.unicorn_breakpoint.for_length(size)
            # the pc written on every hit: the slot, with the Thumb bit where it runs Thumb code
            resume = slot | (1 if point.iset.thumb_bit else 0)
            point.state.update(slot=slot, bp_len=len(bp), resume=resume)
            self._write_trap(addr, bp)
            self._bp_points[addr] = point
            self._bp_hidden[addr] = point.insn.raw[:len(bp)]
            bisect.insort(self._bp_sorted, addr)
            self._bp_lo, self._bp_hi = min(self._bp_lo, addr), max(self._bp_hi, addr)
            self._slot_points[slot] = point
        point.mechanism, point.optimized = mechanism, optimized
        self._drop_translations(self._translated_from(point), addr + size)

    def _translated_from(self, point: ProbePoint) -> int:
        """Where to drop translations from when ``point``'s bytes or hooks change: its
        function's start (same page), else the point.  Dropping the instruction's
        own bytes was not enough on riscv64 (Unicorn 2.1.4): after a breakpoint
        on inc's second instruction was removed, a block translated from inc's
        start with the trap in it still ran, and the next run faulted there;
        dropping from the function's start fixes it (tests/test_register_fast.py)."""
        start = point.state.get("translated_from")
        if start is None:
            sym = self.symbols.containing(point.addr)
            begin = sym.address & ~1 if sym is not None else point.addr
            start = begin if point.addr - PAGE < begin <= point.addr else point.addr
            point.state["translated_from"] = start
        return int(start)  # type: ignore[call-overload]

    def write_code(self, addr: int, code: bytes) -> None:
        """Write code into kpsdk's area (a slot reused by another point, a trampoline).

        The area is host memory (``mem_map_ptr``), for which Unicorn 2.1.4's
        ``uc_mem_write`` does not drop translations of the old bytes: a reused
        slot then ran its previous occupant's code.  So drop them here."""
        off = addr - self._area
        if self._area_mem is not None and 0 <= off and off + len(code) <= len(self._area_mem):
            self._area_mem[off:off + len(code)] = code  # host memory: a memmove, not uc_mem_write's ~19 us
        else:
            self.uc.mem_write(addr, code)
        self._drop_translations(addr, addr + len(code))

    def _disarm(self, point: ProbePoint) -> None:
        addr = point.addr
        if point.mechanism == "hook":
            self.hooks.delete(point.state.pop("hook"))  # type: ignore[arg-type]
            self.stepper.release(point)
            self._hook_points.pop(addr, None)
            if point.optimized:
                self._n_optimized -= 1
        elif point.mechanism == "breakpoint":
            bp_len = int(point.state.pop("bp_len"))  # type: ignore[call-overload]
            self._write_trap(addr, point.insn.raw[:bp_len])
            slot = int(point.state.pop("slot"))  # type: ignore[call-overload]
            point.state.pop("resume", None)
            self._slot_points.pop(slot, None)
            self._free_slots.append(slot)
            self._bp_points.pop(addr, None)
            del self._bp_hidden[addr]
            del self._bp_sorted[bisect.bisect_left(self._bp_sorted, addr)]
        elif point.mechanism in ("detour", "hooked-entry"):
            assert self.detours is not None
            self.detours.disarm(point)
            if self._hook_points.get(addr) is point:
                del self._hook_points[addr]
        else:
            return
        point.mechanism, point.optimized = None, False
        self._drop_translations(self._translated_from(point), addr + point.insn.size)

    def _promote(self, point: ProbePoint) -> bool:
        """Give a hot breakpoint-path point the [OPTIMIZED] hook path.

        Called from its trap after its handlers ran; the instruction then runs
        in place under the new hook, which skips this one re-entry.  When all
        OPT_LIMIT hook slots are taken, the coldest optimized point (fewest
        hits) goes back to the breakpoint path if it is colder than this one.
        """
        if not self.manager.optimization or self.manager.busy:
            return False
        if self._n_optimized >= OPT_LIMIT:
            def heat(p: ProbePoint) -> int:
                return sum(probe.hits for probe in p.probes)

            coldest = min((p for p in self._hook_points.values() if p.optimized and p.mechanism == "hook"),
                          key=heat, default=None)
            if coldest is None or heat(coldest) >= heat(point):
                return False
            if self._slot_code(coldest, self._peek_slot()) is None:
                return False  # no booster reaches it from kpsdk's area (riscv jal range): it keeps its hook
            self._disarm(coldest)
            self._arm(coldest, "breakpoint", False)
        self._disarm(point)
        self._arm(point, "hook", True)
        point.resuming = True
        self._set_pc(point.addr, point)
        return True

    def _peek_slot(self) -> int:
        return self._free_slots[-1] if self._free_slots else self._next_slot

    def _alloc_slot(self) -> int:
        if self._free_slots:
            return self._free_slots.pop()
        return self.alloc_code(SLOT_SIZE)

    def peek_code(self, size: int) -> int | None:
        """Where the next :meth:`_alloc_block` of ``size`` bytes starts, or None when it would not fit."""
        return self._next_slot if self._next_slot + size <= self._area + AREA_SIZE - DATA_SIZE else None

    def alloc_code(self, size: int) -> int:
        """``size`` bytes of kpsdk's area for code (a multiple of SLOT_SIZE), never given back:
        their owner keeps its own free list (slots, detours)."""
        block = self._next_slot
        if block + size > self._area + AREA_SIZE - DATA_SIZE:
            raise KprobeError(errno.ENOMEM, "kpsdk's out-of-line slot area is full")
        self._next_slot += size
        return block

    def _slot_code(self, point: ProbePoint, slot: int) -> bytes | None:
        """The booster: the original instruction, then a jump back after it."""
        ool = self.arch.out_of_line
        back = None if ool is None else ool.jump_back(slot + point.insn.size, point.addr + point.insn.size, point.iset)
        return None if back is None else point.insn.raw + back

    # -- hit paths (hot: keep them lean) ----------------------------------------------------

    def _on_intr(self, handle: int, intno: int, user: int) -> None:
        try:
            if intno == self._bp_intno:
                pc = self.fast.read(self._pc)
                point = self._bp_points.get(pc + self._bp_adjust)
                if point is not None:
                    run_pre = point.run_pre  # set whenever the point is armed (ProbeManager._sync)
                    new = None if run_pre is None or (point.insn.condition is not None
                                                      and not self._condition_passes(point)) \
                        else run_pre(self.hit_regs)
                    if new is not None:
                        self._set_pc(new, point)
                    elif point.mechanism != "breakpoint":  # a handler disarmed or re-armed it: run it in place
                        point.resuming = point.mechanism == "hook"
                        self._set_pc(point.addr, point)
                    elif not (point.active and point.active[0].hits % PROMOTE_EVERY == 0 and self._promote(point)):
                        self.fast.write(self._pc, point.state["resume"])  # type: ignore[arg-type]
                    return
            if self._sys is not None and intno == self._sys.intno:
                self._syscall()
                return
            pc = self.fast.read(self._pc)
            self.fail(TargetFault(f"unhandled CPU exception (interrupt {intno})", pc, self.symbols.format(pc)))
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.fail(exc)

    def _hook_callback(self, point: ProbePoint) -> Callable[[int, int, int, int], None]:
        """The code hook of one hook-path point: a closure over the point and what its
        hits need, so a hit does no lookup by address.

        The usual point, one active probe, runs in this one frame: it is
        :meth:`ProbeManager.pre <kpsdk.manager.ProbeManager.pre>` for one probe
        inlined (K2, K4 through the manager's ``_fault``, K6), because a second
        Python frame per hit was a quarter of a hit (docs/performance.md).  Any
        other point goes through ``point.run_pre``."""
        regs, stepper, manager, fail, set_pc = self.hit_regs, self.stepper, self.manager, self.fail, self._set_pc
        start_step, condition_passes = self._start_step, self._condition_passes
        conditional = point.insn.condition is not None
        state = point.state
        hit = regs._hit
        at = point.addr

        def on_hit(handle: int, addr: int, size: int, user: int) -> None:
            try:
                if point.resuming:
                    point.resuming = False
                    return
                if stepper.pending is not None:  # a step arriving here ends before this hit starts
                    stepper.reached(addr)
                if conditional and not condition_passes(point):
                    return
                only = point.only
                if only is not None:  # ProbeManager.pre for one probe, inlined
                    p, me = only
                    if manager.busy:  # K6
                        p.nmissed += 1
                        return
                    p.hits += 1
                    handler = p.pre_handler
                    new = None
                    if handler is not None:
                        manager.busy = True
                        hit[0] = None
                        hit[1] = at
                        hit[2] = None
                        try:
                            try:  # the truth test is the handler's too: a return value whose bool() raises
                                unchanged = not handler(me, regs)
                            except Exception as exc:  # noqa: BLE001 - K4: fault_handler or re-raised
                                manager._fault(p, point, regs, exc, "pre_handler")
                                unchanged = True
                            if not unchanged:  # K2
                                new = manager.path_change(p, point, hit[0])
                        finally:
                            manager.busy = False
                    if new is not None:
                        set_pc(new, point)
                    elif point.needs_step:
                        fixed = state.get("step_fixed")  # the step of an instruction that does not branch
                        if fixed is not None:
                            stepper.pending = fixed  # type: ignore[assignment]
                        else:
                            start_step(point)
                    return
                run_pre = point.run_pre
                if run_pre is None:  # no active probe (unregistered by a handler in this same block)
                    return
                reentrant = manager.busy
                new = run_pre(regs)
                if new is not None:
                    set_pc(new, point)
                elif point.needs_step and not reentrant:
                    start_step(point)
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_hit

    def _condition_passes(self, point: ProbePoint) -> bool:
        """A conditional instruction whose condition fails is skipped, handlers
        and all, as the kernel's ARM kprobe_handler does (no nmissed either)."""
        arch = self.arch
        cond = point.insn.condition
        assert arch.conditions is not None and cond is not None, "only conditional instructions get here"
        return bool(arch.conditions.passes(cond, lambda n: self.fast.read(arch.register(n))))

    def slot_point(self, addr: int) -> ProbePoint | None:
        """The probe point whose booster slot holds ``addr`` (its copied instruction
        or the jump back), or None."""
        if not self.is_reserved(addr) or addr < self._area + SLOT_BASE:
            return None
        return self._slot_points.get(addr - (addr - self._area - SLOT_BASE) % SLOT_SIZE)

    def _start_step(self, point: ProbePoint) -> None:
        """Run the point's post_handlers after its instruction (:mod:`kpsdk.targets.unicorn.step`):
        the step is pending, and the persistent hooks on the successors end it."""
        fresh = self.stepper.start(point, self._cs_insn(point))
        assert fresh is not None, "registration refuses post_handlers where can_step() is False"
        if fresh:
            # a successor got its first hook: leave the current translation block so that the
            # hook is seen, and re-enter this instruction without running its handlers again
            point.resuming = True
            self._remove_cache(point.addr, point.addr + point.insn.size)
            self._set_pc(point.addr, point)

    def _set_pc(self, addr: int, point: ProbePoint | None = None) -> None:
        if self.arch.has_thumb and not addr & 1:
            sym = self.symbols.containing(addr)
            if sym is not None:
                thumb = bool(sym.iset) and self.arch.iset(sym.iset).thumb_bit
            elif point is not None and self.is_reserved(addr):
                thumb = point.iset.thumb_bit
            else:
                thumb = self.running_iset().thumb_bit
            addr |= 1 if thumb else 0
        self.fast.write(self._pc, addr)

    # -- return probes (kpsdk.rethook) -----------------------------------------------------

    def attach_rethook(self, core: ShadowStacks) -> None:
        """Map the trampolines (once) and register their internal probes.

        One per instruction set: a Thumb function returns through the Thumb
        one with bit 0 set, an ARM one through the ARM one, so the CPU arrives
        in the state the trampoline's code is in, whatever the return
        instruction (``bx lr``, ``pop {pc}``, ``mov pc, lr``).  Its first
        instruction(s) store sp where the return hook reads it cheaply; the
        hook (the internal probe) is on the jump after them.
        """
        assert self.detours is not None
        return_jump = self.arch.require("out_of_line.return_jump", "a return probe on Unicorn")
        if not self._trampolines:
            for iset in self.arch.isets:
                slot = self._alloc_slot()
                code, hook, word = return_jump(slot, iset, self.detours.sp_word)
                self.write_code(slot, code)
                assert word % self.arch.word_size == 0, "kpsdk writes the trampoline's word as a word"
                name = "kretprobe_trampoline" + ("_thumb" if iset.thumb_bit else "")
                self.symbols.add(Symbol(name, slot, word, "func", iset="" if iset is self.arch.isets[0] else iset.name))
                thumb = 1 if iset.thumb_bit else 0
                self._trampolines[iset.thumb_bit] = slot | thumb
                self.detours.traps.add(slot | thumb)
                self._tramp_hooks.append((slot + hook) | thumb)
                self._internal_hooks[slot + hook] = self._trampoline_hook(
                    slot + hook, (slot + word - self._area) // self.arch.word_size)
        for addr in self._tramp_hooks:
            probe = Probe(addr=addr)
            plain = addr & ~1 if self.arch.has_thumb else addr
            probe.name = self.symbols.format(plain).partition("+")[0]
            self.manager.add(probe, addr, internal=True)
            self._tramp_probes.append(probe)
            self._tramp_probe[plain] = probe

    def detach_rethook(self) -> None:
        """Unregister the trampolines' probes (their code and symbols stay for the next attach)."""
        while self._tramp_probes:
            self.manager.remove(self._tramp_probes.pop())

    def trampoline_for(self, entry: int) -> int:
        """The trampoline a function starting at ``entry`` returns through: the one of its
        instruction set (from its symbol, cached: no cpsr read per hit)."""
        if not self.arch.has_thumb:
            return self._trampolines[False]
        thumb = self._thumb_entry.get(entry)
        if thumb is None:
            thumb = self._thumb_entry[entry] = self.iset_at(entry, self.symbols.containing(entry)).thumb_bit
        return self._trampolines[thumb]

    def trampoline_probe(self, entry: int) -> Probe:
        """The internal probe of :meth:`trampoline_for` ``(entry)``: its hits count the
        hooked returns of that instruction set (detoured ones included)."""
        base = self.trampoline_for(entry) & ~1
        return next(p for hook, p in self._tramp_probe.items() if base <= hook < base + SLOT_SIZE)

    def hijack_return(self, regs: PtRegs, node: RethookNode) -> int:
        """Point the return address (link register, or the word at sp) at the trampoline."""
        tramp = self.trampoline_for(regs.ip)
        if self._link is not None:
            self.fast.write(self._link, tramp)
        else:
            self.hijack_word(node.frame, tramp)
        return tramp

    def stack_window(self) -> tuple[mmap.mmap | bytearray, int, int, struct.Struct]:
        """The stack as host memory, for hooks that read and write return addresses
        without a call per word (:meth:`read_word` and :meth:`hijack_word` inlined):
        its buffer, its lowest address, the highest offset a word fits at (-1 while
        there is no stack, with an empty buffer) and the word's ``Struct``.  The stack is mapped once, at
        ``open``, and never unmapped (the Linux layer refuses to)."""
        mem = self._stack_mem
        if mem is None:
            return bytearray(), STACK_TOP - STACK_SIZE, -1, self._word
        return mem, STACK_TOP - STACK_SIZE, STACK_SIZE - self._word.size, self._word

    def hijack_word(self, addr: int, value: int) -> None:
        """Overwrite the return address at ``addr`` (the stack, in host memory, on the hot path)."""
        off = addr - STACK_TOP + STACK_SIZE
        if 0 <= off <= STACK_SIZE - self._word.size and self._stack_mem is not None:
            self._word.pack_into(self._stack_mem, off, value)
        elif not self.words.write(addr, value):
            raise self.memory_fault("cannot write the return address", addr)

    def release_return(self, node: RethookNode) -> None:
        """Nothing to undo: the trampoline serves every hooked return."""

    def settle_returns(self) -> None:
        if self.detours is not None:
            self.detours.settle()

    def on_detour_slow(self, handle: int, addr: int, size: int, user: int) -> None:
        """A detoured entry the guest code left to Python (no instance left, or the gate
        shut): a normal hit of the entry's probe, with the registers of the entry."""
        try:
            detours = self.detours
            assert detours is not None
            det = detours.slow(addr)
            detours.settle()
            new = self.manager.pre(det.point, self.hit_regs)
            detours.mirror(det)
            if new is not None:
                self._set_pc(new, det.point)
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.fail(exc)

    def _trampoline_hook(self, at: int, word: int) -> Callable[[int, int, int, int], None]:
        """The code hook of the trampoline whose jump is at ``at`` and goes through word
        ``word`` of kpsdk's area.  A hooked return arrived: the core runs its
        handlers, and the trampoline's jump takes the CPU to the real return
        address (with its Thumb bit, as the link register had it), read from the
        word this hook writes.

        Its own code hook rather than ``_on_code`` and the probe manager: a
        return must never be skipped (not even on a reentrant hit, K6 is for
        entries), and this is half of every kretprobe hit (hence a closure
        over what it needs)."""
        detours, area, probes = self.detours, self._area_words, self._tramp_probe
        assert detours is not None
        if self.arch.endian != sys.byteorder:  # a big-endian guest (ppc64): the word in its byte order
            packer, mem, offset = self._word, self._area_mem, word * self.arch.word_size
            assert mem is not None

            def on_trampoline_swapped(handle: int, addr: int, size: int, user: int) -> None:
                try:
                    probes[at].hits += 1
                    packer.pack_into(mem, offset, detours.general_return("the trampoline"))
                except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                    self.fail(exc)

            return on_trampoline_swapped

        def on_trampoline(handle: int, addr: int, size: int, user: int) -> None:
            try:
                probes[at].hits += 1
                area[word] = detours.general_return("the trampoline")  # settles detoured calls first
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                self.fail(exc)

        return on_trampoline

    def begin_at(self, addr: int, point: ProbePoint | None = None) -> int:
        """Set the pc to ``addr`` and return it as ``emu_start`` wants it: with
        the Thumb bit when the CPU is in Thumb state (``_set_pc`` decided which)."""
        self._set_pc(addr, point)
        pc = self.fast.read(self._pc)
        if self.arch.has_thumb and self.running_iset().thumb_bit:
            pc |= 1
        return pc

    def read_pc(self) -> int:
        """The program counter now (without a Thumb bit: see :meth:`running_iset`)."""
        return self.fast.read(self._pc)

    def hook_point(self, addr: int) -> ProbePoint | None:
        """The probe point whose code hook is at ``addr``, or None."""
        return self._hook_points.get(addr)

    @property
    def failed(self) -> bool:
        """A hook stored an error for ``run()``/``call()`` to raise (see :meth:`fail`)."""
        return self._pending is not None

    def running_iset(self) -> InstructionSet:
        """The instruction set the CPU is in now (the arch's ``mode_bit``)."""
        return self.arch.running_iset(lambda name: self.fast.read(self.arch.register(name)))

    def fail(self, exc: BaseException) -> None:
        if self._pending is None:
            self._pending = exc
        self.uc.emu_stop()

    # -- the minimal system-call layer -------------------------------------------------

    def _on_syscall_insn(self, uc: unicorn.Uc, user: Any) -> None:
        try:
            self._syscall()
        except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
            self.fail(exc)

    def _syscall(self) -> None:
        sys = self._sys
        assert sys is not None
        read = lambda name: self.fast.read(self.arch.register(name))  # noqa: E731
        nr = read(sys.number)
        calls = sys.calls
        call = SyscallEvent(nr, self._syscall_names.get(nr, f"syscall_{nr}"), tuple(read(r) for r in sys.args),
                            self.fast.read(self._pc))
        if self.pending_libraries and call.name not in MAPPING_CALLS:
            self._announce_libraries()
        self.emit("syscall_entry", call=call)
        if self.linux is not None and nr not in (calls["exit"], calls["exit_group"]):
            result = self.linux.syscall(nr, call.args)
        elif nr == calls["write"]:
            fd, buf, count = call.args[:3]
            if fd not in (1, 2):
                result = -errno.EBADF  # nothing else is open
            else:
                data = self._user_bytes(buf, min(count, MAX_RW_COUNT))
                self._console += data
                result = len(data) if data or not count else -errno.EFAULT
        elif nr in (calls["exit"], calls["exit_group"]):
            status = call.args[0] & 0xFF
            self._exit_status = status
            if self.rethook is not None:  # the calls in flight will never return
                self.rethook.unwind()
            self.uc.emu_stop()
            self.emit("program_exit", status=status)
            return
        else:
            result = -errno.ENOSYS
        self._set_result(result)
        call.result = result
        self.emit("syscall_exit", call=call)

    def _announce_libraries(self) -> None:
        """The libraries ld.so finished mapping: they join mapped_files() (so uprobes
        registered later find them) and plugins hear ``kpsdk_library_loaded`` (uprobes on
        them are armed)."""
        done, self.pending_libraries = self.pending_libraries, []
        self._files = (*self._files, *done)
        self.symbols = loaded_symbols(self._files)  # the libraries' too: Thumb functions are decoded as such
        for library in done:
            self.emit("library_loaded", library=library)

    def unmapping(self, start: int, end: int) -> None:
        """The program is about to unmap ``[start, end)`` (ld.so at dlclose unmaps a library's
        whole span at once): each object whose first page lies there leaves mapped_files()
        and plugins hear ``kpsdk_library_unloaded`` (uprobes there are taken out while the
        pages still exist).  The program itself is never one of them."""
        def inside(mf: MappedFile) -> bool:
            return start <= mf.span(PAGE)[0] < end

        self.pending_libraries = [mf for mf in self.pending_libraries if not inside(mf)]
        gone = [mf for mf in self._files[1:] if inside(mf)]
        if not gone:
            return
        self._files = tuple(mf for mf in self._files if mf not in gone)
        self.symbols = loaded_symbols(self._files)
        for library in gone:
            self.emit("library_unloaded", library=library)

    def _set_result(self, result: int) -> None:
        """Return ``result`` to the program: in the result register, or as a positive errno
        with the arch's error flag set (ppc64's CR0.SO) where the ABI says so."""
        sys = self._sys
        assert sys is not None
        flag = sys.linux.error_flag if sys.linux is not None else None
        if flag is not None:
            reg, bit = flag
            value = self.uc.reg_read(reg)
            failed = -4096 < result < 0
            self.uc.reg_write(reg, (value | bit) if failed else (value & ~bit))
            result = -result if failed else result
        self.fast.write(self.arch.register(sys.result), result & self.arch.word_mask)

    def _user_bytes(self, addr: int, count: int) -> bytes:
        """Up to ``count`` bytes the program passed a system call, as Linux copies them:
        page by page, stopping at the first page that is not mapped (a short
        write; none at all is ``-EFAULT``).  Never more than is mapped, so a
        huge count allocates nothing."""
        out = bytearray()
        while len(out) < count:
            at = addr + len(out)
            chunk = min(count - len(out), PAGE - at % PAGE)
            try:
                out += self.uc.mem_read(at, chunk)
            except unicorn.UcError:
                break
        return bytes(out)

    # -- watchpoints (kpsdk.targets.unicorn.watch) ------------------------------------------------

    watch: UcWatch | None = None

    def watch_engine(self) -> UcWatch:
        if self.watch is None:
            self.watch = UcWatch(self)
        return self.watch

    # -- running -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Inside ``emu_start`` (a hook or handler runs): Unicorn 2.1.4 cannot nest a
        timed ``emu_start`` (it joins the outer run's timer thread twice and aborts
        the process), and a nested untimed run would start over at the entry."""
        return self._depth > 0

    def regs(self) -> PtRegs:
        self.hit_regs._reset(self.fast.read(self._pc))
        return self.hit_regs

    def stop(self) -> None:
        self.uc.emu_stop()

    def run(self, timeout: float | None = None) -> int | None:
        if self._exit_status is not None:
            return self._exit_status
        if not self._started:
            if self.entry is None:
                raise TargetError("nothing to run: this target has no entry point (use call() or load an ELF)")
            start = self.entry
            self._started = True
        else:
            start = self.fast.read(self._pc)
        self._emu(self.begin_at(start), self.sentinel, timeout)
        return self._exit_status

    def _emu(self, begin: int, until: int, timeout: float | None) -> None:
        self._forget_memory()  # the program may map, unmap or protect memory, or write code, while it runs
        self._flush_stale()
        detours = self.detours
        if detours is None:
            self._emu_loop(begin, until, timeout)
            return
        if not self._depth:
            detours.recycle_blocks()
        gate = detours.set_gate(self.manager.busy)  # code a handler runs: its entries are reentrant (K6)
        try:
            self._emu_loop(begin, until, timeout)
        finally:
            detours.restore_gate(gate)
            detours.settle()

    def _emu_loop(self, begin: int, until: int, timeout: float | None) -> None:
        usec = timeout_usec(timeout)
        while True:
            self._depth += 1
            error: unicorn.UcError | None = None
            try:
                self.uc.emu_start(begin, until, timeout=usec)
            except unicorn.UcError as e:
                error = e
            finally:
                self._depth -= 1
                self.fast.hit[2] = None  # the registers moved on: no argument snapshot outlives a run
            if self._pending is not None:
                pending, self._pending = self._pending, None
                self.stepper.clear()
                if self.watch is not None:
                    self.watch.clear()
                raise pending
            if error is None:
                return
            resume = self.watch.resume_after_fault() if self.watch is not None else None  # a watched access
            if resume is None:
                resume = self._instruction_fault(error)
            if resume is None:
                pc = self.fast.read(self._pc)
                raise TargetFault(f"{error}", pc, self.symbols.format(pc)) from error
            begin = resume

    def _instruction_fault(self, error: unicorn.UcError) -> int | None:
        """K4 for the probed instruction itself: its probes' fault_handlers may handle it."""
        pc = self.fast.read(self._pc)
        point = self._hook_points.get(pc) or self.slot_point(pc)
        if point is None or not self.manager.instruction_fault(point, self.hit_regs, error.errno):
            return None
        new = self.hit_regs.new_ip
        return self.begin_at(int(new) if new is not None else point.addr + point.insn.size, point)

    def _through_descriptor(self, addr: int) -> int:
        """Where a call to ``addr`` starts, with the registers a call through its function
        descriptor loads (ppc64 ELFv1: r2, the TOC of the object the function is in) written,
        or the one that holds the function's address (ELFv2's r12).

        ``addr`` is a function's code (its symbol names its descriptor), or a function
        pointer, which on ELFv1 is the descriptor itself (what an IFUNC resolver returns);
        the descriptor is read from memory, where the loader has relocated it.
        Other architectures: ``addr`` unchanged."""
        arch = self.arch
        if arch.entry_address_register is not None:  # ELFv2: the global entry finds its TOC from it
            self.fast.write(arch.register(arch.entry_address_register), addr)
        if arch.entry_registers is None or arch.function_descriptors is None:
            return addr
        sym = self.symbols.containing(addr)
        if sym is not None and sym.address == addr and sym.descriptor:
            descriptor = sym.descriptor
        elif not self.is_executable(addr) and self._region(addr) is not None:
            descriptor = addr
        else:
            return addr
        words = self.read_memory(descriptor, 3 * arch.word_size)
        for name, value in arch.entry_registers(words, 0).items():
            self.fast.write(arch.register(name), value)
        return int.from_bytes(words[: arch.word_size], arch.endian)

    def call(self, addr: int, args: tuple[int, ...], restype: str = "long") -> int:
        arch, abi = self.arch, self.arch.abi(self.abi_kind)
        word, mask = arch.word_size, arch.word_mask
        fmt = ("<" if arch.endian == "little" else ">") + ("Q" if word == 8 else "I")
        ctx = self.uc.context_save()
        exited_before = self._exit_status
        try:
            sp = self.fast.read(self._sp) if self._depth else self.call_sp
            sp = (sp - 0x400) & ~(arch.stack_alignment - 1)
            stack_args = [a & mask for a in args[len(abi.args):]]
            for reg, value in zip(abi.args, args, strict=False):
                self.fast.write(arch.register(reg), value & mask)
            sp -= len(stack_args) * word
            sp &= ~(arch.stack_alignment - 1)
            blob = b"".join(struct.pack(fmt, a) for a in stack_args)
            if arch.link is None:  # x86: the return address is pushed
                sp -= word
                blob = struct.pack(fmt, self.sentinel) + blob
            else:
                self.fast.write(arch.register(arch.link), self.sentinel)
            if blob:
                self.uc.mem_write(sp, blob)
            self.fast.write(self._sp, sp)
            addr = self._through_descriptor(addr)
            sym = self.symbols.containing(addr)
            begin = addr | (1 if sym is not None and sym.iset and self.arch.iset(sym.iset).thumb_bit else 0)
            try:
                self._emu(begin, self.sentinel, None)
            finally:
                if self.rethook is not None:  # hooked calls made inside this call are over, returned or not
                    self.rethook.unwind(self.current_task(), sp + 1)
            pc = self.fast.read(self._pc)
            if pc != self.sentinel:
                if self._exit_status is not None and exited_before is None:
                    raise TargetError(f"the called function exited the program (status {self._exit_status})")
                raise TargetError(f"the call did not return (stopped at {self.symbols.format(pc)})")
            value = self.fast.read(self._rv)
        finally:
            self.uc.context_restore(ctx)
        if restype in ("int", "uint"):
            value &= 0xFFFFFFFF
            bits = 32
        else:
            bits = arch.bits
        if restype in ("int", "long") and value >> (bits - 1):
            value -= 1 << bits
        return value



def _put_back(data: bytearray, addr: int, at: int, original: bytes) -> None:
    """Show ``original`` (bytes kpsdk replaced at ``at``) in ``data``, read from ``addr`` (K10):
    one slice assignment (decoding next to many probes puts back each neighbour's bytes)."""
    lo, hi = max(at, addr), min(at + len(original), addr + len(data))
    if lo < hi:
        data[lo - addr:hi - addr] = original[lo - at:hi - at]


def pie_base(elf_class: int) -> int:
    """Where a position-independent executable is loaded: the base Linux gives a PIE
    with address randomization off (what gdb shows), so addresses look familiar."""
    return PIE_BASE_64 if elf_class == 64 else PIE_BASE_32


def open_elf(rest: str, registry: Registry, abi: str = "user", args: Sequence[str] | None = None,
             env: Mapping[str, str] | None = None, stdin: bytes | None = None,
             sysroot: str | os.PathLike[str] | None = None, cwd: str | None = None,
             **options: Any) -> UnicornTarget:
    """``elf:PATH``: load an executable's PT_LOAD segments into Unicorn, as the Linux process
    ``execve(PATH, [PATH, *args], env)`` starts (:mod:`kpsdk.targets.unicorn.linux`): ``stdin`` its
    standard input, ``sysroot`` the directory it sees as ``/`` (read-only), ``cwd`` its
    working directory in there."""
    from kpsdk.binfmt.elfimage import load_elf  # pyelftools loads when first used (start-up time)

    if options:
        raise TargetError(f"elf: unknown options {', '.join(options)} (known: abi, args, env, stdin, sysroot, cwd)")
    process = check_options(args, env, stdin, sysroot, cwd)
    linked = load_elf(Path(rest))
    arch = registry.archs.by_elf(linked.machine, linked.elf_class, linked.endian)
    bias = pie_base(linked.elf_class) if linked.kind == "ET_DYN" else 0
    image = linked.relocated(bias)  # a PIE at a Linux-like base, its symbols with it
    mappings = load_mappings(image, arch)
    target = UnicornTarget(arch, abi_kind=abi)
    target._files = (MappedFile.of(linked, bias),)
    for start, size, perms in mappings:
        target.map(start, size, perms)
    for seg in image.segments:
        target.uc.mem_write(seg.vaddr, seg.data)
    top = max(start + size for start, size, _ in mappings)
    try:
        target.setup_area(_align_up(top, 0x10000) + 0x10000)  # near the code: riscv jal reaches +-1 MiB
        target.setup_stack()
    except TargetError as e:
        raise ImageFormatError(image.path, f"its segments leave no room for kpsdk's area and stack: {e}") from e
    target.symbols = image.symbols
    target.entry = image.entry
    descriptor = image.raw_entry + bias
    if arch.entry_registers is not None and descriptor != image.entry:  # e_entry is a function descriptor
        for name, value in arch.entry_registers(target.read_memory(descriptor, 3 * arch.word_size), bias).items():
            target.fast.write(arch.register(name), value)
    if arch.entry_address_register is not None:
        target.fast.write(arch.register(arch.entry_address_register), image.entry)
    if arch.syscalls is not None and arch.syscalls.linux is not None:
        area = target.sentinel
        reserved = [(area, area + AREA_SIZE), (STACK_TOP - STACK_SIZE, STACK_TOP)]
        target.linux = start_process(target, image, rest, process, STACK_TOP - 0x10, reserved)
        target.call_sp = min(target.call_sp, target.fast.read(target._sp) - 0x100)
    return target


def load_mappings(image: ElfImage, arch: Arch) -> list[tuple[int, int, str]]:
    """``(start, size, perms)`` of the memory an image's segments need, checked against what
    the target maps.

    Segments are widened to whole pages; a page two segments share gets both's permissions,
    and adjacent pages with the same permissions become one mapping (one ``mem_map`` for a
    large bss, where page by page took minutes).  The whole must lie in the architecture's
    address space with room for kpsdk's area above it, and add up to at most
    :data:`MAX_LOAD` bytes.
    """
    edges: list[tuple[int, int, int]] = []  # (address, +1 starts / -1 ends, PF_ flags)
    for seg in image.segments:
        edges += [(seg.vaddr & ~(PAGE - 1), 1, seg.flags & 7), (_align_up(seg.vaddr + seg.memsz), -1, seg.flags & 7)]
    edges.sort()
    active = [0] * 8  # segments covering the current page, by flags
    out: list[tuple[int, int, str]] = []
    for i, (addr, step, flags) in enumerate(edges):
        active[flags] += step
        if i + 1 == len(edges) or edges[i + 1][0] == addr or not any(active):
            continue
        prot = 0
        for f, n in enumerate(active):
            prot |= f if n else 0
        perms = "".join(c for c, bit in (("r", 4), ("w", 2), ("x", 1)) if prot & bit) or "r"
        end = edges[i + 1][0]
        if out and out[-1][0] + out[-1][1] == addr and out[-1][2] == perms:
            addr = out.pop()[0]
        out.append((addr, end - addr, perms))
    total = sum(size for _, size, _ in out)
    if total > MAX_LOAD:
        raise ImageFormatError(image.path, f"its PT_LOAD segments need {total:#x} bytes of memory, more than an "
                                           f"elf: target maps ({MAX_LOAD:#x})")
    space = 1 << (8 * arch.word_size)
    top = out[-1][0] + out[-1][1]
    if _align_up(top, 0x10000) + 0x10000 + AREA_SIZE > space:
        raise ImageFormatError(image.path, f"its segments (loaded at bias {image.bias:#x}) end at {top:#x}, leaving "
                                           f"no room for kpsdk's area in the {8 * arch.word_size}-bit address space")
    return out


def open_blank(rest: str, registry: Registry, abi: str = "user", **options: Any) -> UnicornTarget:
    """``unicorn:ARCH``: an empty CPU with a stack; map and write code yourself."""
    if options:
        raise TargetError(f"unicorn: unknown options {', '.join(options)}")
    arch = registry.arch(rest)
    # a name that is an instruction set (``unicorn:thumb``) makes it the default for code without symbols
    iset = rest if any(i.name == rest for i in arch.isets) else None
    target = UnicornTarget(arch, abi_kind=abi, default_iset=iset)
    target.setup_area(BLANK_AREA)
    target.setup_stack()
    return target


@hookimpl
def kpsdk_targets() -> list[TargetKind]:
    return [
        TargetKind("elf", open_elf, "an ELF executable run in Unicorn (elf:PATH)"),
        TargetKind("unicorn", open_blank, "a blank Unicorn CPU (unicorn:ARCH)"),
    ]
