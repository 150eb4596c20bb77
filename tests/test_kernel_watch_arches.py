"""Hardware watchpoints on Debian's i386, arm, riscv64 and arm64 kernels under qemu-system (TCG),
on ``jiffies``, a global every timer tick writes, with each arch's own slot rules.

i386's and armhf's kallsyms name no data (no CONFIG_KALLSYMS_ALL), so the address is
taken from the code that reads it: ``get_jiffies_64`` (kernel/time/jiffies.c) returns
``jiffies_64`` (``jiffies`` is its low word on little-endian machines: the linker
script's ``jiffies = jiffies_64``) read under the ``jiffies_seq`` seqcount.  The data
address it reads 64 bits from is jiffies_64 (:func:`u64_loaded`; the seqcount is a
32-bit read).  riscv64's table names data (and its get_jiffies_64 is inline): there the
name gives the address.  A wrong address could not pass: the values the guest prints
must be values the watchpoint saw.

Ground truth is what the guest prints: ``/proc/schedstat``'s ``timestamp`` line is
``jiffies`` (kernel/sched/stats.c), printed twice around a ``sleep``.  The watchpoint
runs from the first read of the file to a third one, so both printed values are values
the watchpoint saw jiffies take (the first is the first write's old value or one it wrote).
gdb reports a write only when it changes the bytes, and jiffies changes at every write:
the reports chain (each one's old value is the previous one's new value) and only grow.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

import capstone
import pytest

import kpsdk
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

WORKLOAD = """\
grep timestamp /proc/schedstat | sed 's/^timestamp /KPSDK jiffies value=/'
sleep 1
grep timestamp /proc/schedstat | sed 's/^timestamp /KPSDK jiffies value=/'
cat /proc/schedstat > /dev/null
"""
#: the seq_file show function that prints the timestamp line (kernel/sched/stats.c), when
#: its ``v`` argument is 1
PRINTER = "show_schedstat"

_DISASM = {
    "i386": (capstone.CS_ARCH_X86, capstone.CS_MODE_32),
    "arm": (capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM),
}


def u64_loaded(arch: str, code: bytes, address: int) -> set[int]:
    """The addresses a 32-bit function's code reads a 64-bit value from: i386 two
    ``mov r32, [disp32]`` at A and A + 4, ARM an ``ldrd`` through a register that a
    ``movw``/``movt`` pair set to A.  (The seqcount it also reads is a 32-bit load.)"""
    md = capstone.Cs(*_DISASM[arch])
    md.detail = True
    words: set[int] = set()
    pairs: set[int] = set()
    low: dict[int, int] = {}  # arm: register -> the movw half
    value: dict[int, int] = {}  # arm: register -> the address movw + movt built
    for insn in md.disasm(code, address):
        ops = insn.operands
        if arch == "i386" and insn.mnemonic == "mov" and len(ops) == 2:
            src = ops[1]
            if src.type == capstone.x86.X86_OP_MEM and src.mem.base == 0 and src.mem.index == 0 and src.size == 4:
                words.add(src.mem.disp & 0xFFFFFFFF)
        elif arch == "arm" and insn.mnemonic == "movw":
            low[ops[0].reg] = ops[1].imm & 0xFFFF
        elif arch == "arm" and insn.mnemonic == "movt" and ops[0].reg in low:
            value[ops[0].reg] = (ops[1].imm & 0xFFFF) << 16 | low.pop(ops[0].reg)
        elif arch == "arm" and insn.mnemonic == "ldrd":
            mem = ops[2].mem
            if mem.base in value and mem.index == 0:
                pairs.add(value[mem.base] + mem.disp)
    return pairs | {a for a in words if a + 4 in words}


def a64_updated(code: bytes, address: int) -> set[int]:
    """The doublewords an aarch64 function both loads and stores through an ``adrp`` base
    (``adrp xN, SYM; ldr xM, [xN, #:lo12:SYM]; ...; str xK, [xN, #:lo12:SYM]``): what
    ``do_timer`` (kernel/time/timekeeping.c: ``jiffies_64 += ticks``) does to jiffies_64 on a
    64-bit kernel, whose kallsyms name no data and whose get_jiffies_64 is inline."""
    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    md.detail = True
    page: dict[int, int] = {}
    loaded: set[int] = set()
    stored: set[int] = set()
    for insn in md.disasm(code, address):
        ops = insn.operands
        if insn.mnemonic == "adrp":
            page[ops[0].reg] = ops[1].imm & (1 << 64) - 1  # capstone gives it signed
        elif insn.mnemonic in ("ldr", "str") and len(ops) == 2 and ops[1].type == capstone.arm64.ARM64_OP_MEM:
            mem = ops[1].mem
            if mem.base in page and not mem.index and insn.reg_name(ops[0].reg).startswith("x"):
                (loaded if insn.mnemonic == "ldr" else stored).add((page[mem.base] + mem.disp) & (1 << 64) - 1)
    return loaded & stored


@pytest.mark.parametrize("arch", ["i386", "arm", "riscv64", "aarch64"])
def test_write_watchpoint_on_jiffies(arch: str, arch_kernel: Callable[[str], Path],
                                     arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel(arch), arch_initramfs(arch, WORKLOAD)
    reg = kpsdk.get_registry().arch(arch)
    rules = reg.watch
    assert rules is not None
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        if arch == "riscv64":  # 64-bit: get_jiffies_64 is inline; the table names the data
            jiffies = s.symbols.resolve("jiffies_64")
        elif arch == "aarch64":  # inline too, and the table names no data: do_timer's update
            fn = s.symbols.resolve("do_timer")
            found = s.symbols.lookup(fn)
            assert found is not None
            (jiffies,) = a64_updated(s.read_memory(fn, found[2]), fn)
        else:
            fn = s.symbols.resolve("get_jiffies_64")
            found = s.symbols.lookup(fn)
            assert found is not None
            (jiffies,) = u64_loaded(arch, s.read_memory(fn, found[2]), fn)
        prints = [0]

        def on_print(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            if regs.arg(1) == 1:  # the header with the timestamp (later calls: one per CPU)
                prints[0] += 1
                if prints[0] != 2:  # the first and the third read (watchpoints change only while stopped)
                    s.stop()
            return 0

        s.register_kprobe(kpsdk.Kprobe(symbol_name=PRINTER, pre_handler=on_print))
        assert s.run(timeout=300) is None and prints[0] == 1  # stopped at the first read

        seen: list[Any] = []
        others: list[Any] = []
        # the whole u64 where the hardware watches 8 bytes: riscv64's 8-byte store reaches the
        # high word's watchpoint below too, and QEMU reports one watchpoint per access (the
        # last inserted: the high word's), so a 4-byte one on the low word would see no tick
        # (test_riscv64_store_over_two_watchpoints_reports_one); else jiffies, its low word
        size = 8 if reg.bits == 64 and 8 in rules.lengths else 4
        wp = kpsdk.Watchpoint(addr=jiffies, length=size, type="w", handler=lambda w, r, a: seen.append(a))
        assert s.register_watchpoint(wp) == 0
        # the arch's rules: lengths, alignment or window, types, then the slots
        if 8 not in rules.lengths:
            with pytest.raises(kpsdk.KprobeError) as e:
                s.register_watchpoint(kpsdk.Watchpoint(addr=jiffies, length=8, type="w"))
            assert e.value.errno == errno.EINVAL
        with pytest.raises(kpsdk.KprobeError) as e:  # 4 bytes across a word: unaligned, or ARM's window
            s.register_watchpoint(kpsdk.Watchpoint(addr=jiffies + (rules.window or 4) - 2, length=4, type="w"))
        assert e.value.errno == errno.EINVAL
        if "r" not in rules.types:  # x86: no read-only type
            with pytest.raises(kpsdk.KprobeError) as e:
                s.register_watchpoint(kpsdk.Watchpoint(addr=jiffies, length=4, type="r"))
            assert e.value.errno == errno.EINVAL
        # the other slots: the high word (which no tick of this boot changes) and its bytes
        rest = [kpsdk.Watchpoint(addr=jiffies + 4 + (i and i - 1), length=1 if i else 4,
                                 type="w", handler=lambda w, r, a: others.append(a))
                for i in range(rules.slots - 1)]
        assert [s.register_watchpoint(w) for w in rest] == list(range(1, rules.slots))
        with pytest.raises(kpsdk.KprobeError) as e:
            s.register_watchpoint(kpsdk.Watchpoint(addr=jiffies, length=1, type="w"))
        assert e.value.errno == errno.ENOSPC
        assert s.run(timeout=300) is None and prints[0] == 3  # stopped at the third read
        for w in (wp, *rest):
            s.unregister_watchpoint(w)
        status = s.run(timeout=300)
        assert status == 0, (f"run() gave {status} after {prints[0]} headers; "
                             f"the guest's output ends:\n{s.console[-1500:]}")
        console = s.console
    printed = [int(m.fields["value"]) for m in kernel.parse_markers(console) if m.action == "jiffies"]
    assert len(printed) == 2, console[-2000:]
    assert seen, "no tick was seen"
    values = [seen[0].old] + [a.new for a in seen]
    assert all(a.kind == "w" and a.addr == jiffies and a.size == size for a in seen)
    assert all(b.old == a.new for a, b in zip(seen, seen[1:], strict=False))  # none missed
    assert values == sorted(set(values))  # jiffies only grows (no wrap: the boot is short)
    assert printed[0] in values and printed[1] in values, (printed, values[:3], values[-3:])
    assert printed[1] > printed[0] and others == []  # the high word stayed 0
    print(f"{arch}: jiffies at {jiffies:#x}, {len(seen)} writes seen, {values[-1] - values[0]} ticks")


def test_riscv64_store_over_two_watchpoints_reports_one(arch_kernel: Callable[[str], Path],
                                                         arch_initramfs: Callable[..., Path]) -> None:
    """What QEMU 7.2 and gdb do with one access that two watchpoints cover (docs/api/kernels.md, limitations).

    riscv64's tick writes ``jiffies_64`` with one 8-byte ``sd``.  A 4-byte watchpoint on its
    low half alone sees every tick (the store overlaps it, as the hardware's would).  Add a
    second one on the high half and the low half's ticks are no longer reported: QEMU stops
    for the first matching watchpoint of its list only (each gdb watchpoint goes to the
    list's head, so the one inserted last: gdb inserts in address order, the high half),
    and gdb, which looks only at the watchpoint holding the reported address, drops that
    hit because the high half's bytes did not change.  Ground truth: the guest's own
    jiffies, read at the stops and printed by the guest, still advance.
    """
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel("riscv64"), arch_initramfs("riscv64", WORKLOAD)
    with kpsdk.open("qemu-system:riscv64", kernel=str(image), initrd=str(initrd)) as s:
        jiffies = s.symbols.resolve("jiffies_64")
        prints = [0]

        def on_print(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            if regs.arg(1) == 1 and prints[0] < 3:  # the timestamp header: stop at the three reads
                prints[0] += 1
                s.stop()
            return 0

        def now() -> int:
            return int.from_bytes(s.read_memory(jiffies, 8), "little")

        s.register_kprobe(kpsdk.Kprobe(symbol_name=PRINTER, pre_handler=on_print))
        assert s.run(timeout=300) is None and prints[0] == 1
        low: list[Any] = []
        high: list[Any] = []
        wp_low = kpsdk.Watchpoint(addr=jiffies, length=4, type="w", handler=lambda w, r, a: low.append(a))
        assert s.register_watchpoint(wp_low) == 0
        assert s.run(timeout=300) is None and prints[0] == 2  # across `sleep 1`, the low half alone
        alone = list(low)
        at_second = now()
        wp_high = kpsdk.Watchpoint(addr=jiffies + 4, length=4, type="w", handler=lambda w, r, a: high.append(a))
        assert s.register_watchpoint(wp_high) == 1
        assert s.run(timeout=300) is None and prints[0] == 3  # the second grep and sed, both halves watched
        at_third = now()
        for w in (wp_low, wp_high):
            s.unregister_watchpoint(w)
        assert s.run(timeout=300) == 0
        console = s.console
    printed = [int(m.fields["value"]) for m in kernel.parse_markers(console) if m.action == "jiffies"]
    assert len(printed) == 2, console[-2000:]
    # alone: the ticks' 8-byte stores seen by the 4-byte watchpoint (as many as the guest made:
    # an idle guest's tick stops, and its wake-up advances jiffies by many ticks in one write)
    assert alone, "no tick was seen on the low half alone"
    values = [alone[0].old] + [a.new for a in alone]
    assert all(b.old == a.new for a, b in zip(alone, alone[1:], strict=False))  # none missed
    assert values == sorted(set(values))
    assert printed[0] in values and values[-1] <= printed[1], (printed, values[:3], values[-3:])
    # with the high half watched too: jiffies went on, and neither watchpoint reported it
    assert at_third > at_second
    assert low[len(alone):] == [] and high == []
    print(f"riscv64: {len(alone)} ticks seen on the low half alone; {at_third - at_second} ticks "
          f"unreported once the high half was watched too")
