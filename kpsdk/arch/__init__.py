"""Architecture descriptions: declared as data, the rest derived.

An :class:`Arch` is what every layer asks about a CPU: which registers exist and
how each engine numbers them, which register plays which role (pc, sp, return
value, link), how arguments are passed in kernel and user code, what breakpoint
to write and how long an instruction is.  Backends in ``kpsdk.arch_backends``
fill in the data; lookups (by exact name or alias, never by pattern), masks and
engine handles are derived here.  Engines (capstone, keystone, unicorn) are
created lazily because importing keystone alone costs tens of milliseconds.

The package is read through this module (``from kpsdk.arch import Arch``); each
part is declared in a module of its own:

- :mod:`kpsdk.arch.model`: :class:`Arch` and :class:`ArchRegistry`, registers,
  breakpoints, ABIs, instruction sets;
- :mod:`kpsdk.arch.capabilities`: instruction rules and the optional capabilities
  (out-of-line code, detours, conditions, the mode bit, frame records, watchpoint
  rules, PLT layouts);
- :mod:`kpsdk.arch.linux`: the Linux system-call convention and process ABI;
- :mod:`kpsdk.arch.machine`: QEMU's board and Debian's kernel packages;
- :mod:`kpsdk.arch.kernel`: where a live kernel keeps the running task, page walks
  and access gates;
- :mod:`kpsdk.arch.insn` and :mod:`kpsdk.arch.decode`: instructions decoded for
  probes (imported by their users, not here).
"""

from __future__ import annotations

from kpsdk.arch.capabilities import (
    Classify,
    Conditions,
    DetourCode,
    EntryDetour,
    FrameRecord,
    InsnRules,
    Jump,
    ModeBit,
    OutOfLine,
    PltGotTable,
    PltTable,
    ReturnDetour,
    Successors,
    WatchRules,
)
from kpsdk.arch.dwarfregs import DwarfRegisters
from kpsdk.arch.kernel import AccessGate, FieldUse, KernelTasks, PageWalk, TaskCode
from kpsdk.arch.linux import LinuxAbi, StatLayout, Syscalls
from kpsdk.arch.machine import DebianPort, KernelClock, QemuMachine
from kpsdk.arch.model import Abi, Arch, ArchRegistry, Breakpoint, CallRule, InstructionSet, Register

__all__ = [
    # model
    "Abi", "Arch", "ArchRegistry", "Breakpoint", "CallRule", "InstructionSet", "Register",
    # capabilities
    "Classify", "Conditions", "DetourCode", "EntryDetour", "FrameRecord", "InsnRules", "Jump", "ModeBit",
    "OutOfLine", "PltGotTable", "PltTable", "ReturnDetour", "Successors", "WatchRules",
    # the Linux ABI
    "LinuxAbi", "StatLayout", "Syscalls",
    # machine and packages
    "DebianPort", "KernelClock", "QemuMachine",
    # DWARF register numbers
    "DwarfRegisters",
    # kernel data
    "AccessGate", "FieldUse", "KernelTasks", "PageWalk", "TaskCode",
]
