#!/usr/bin/env python3
"""What a guest store costs in Unicorn 2.1.4, by TLB mode (kpsdk/targets/unicorn/tlb.py).

Usage: ``python bench/stores.py [--turns N]``

Plain Unicorn, no hooks, one loop per arch: ``N`` turns of four stores (or
none) to a page of its own, in the default TLB mode (the CPU's fill), in the
virtual mode without a fill hook, and in the virtual mode with kpsdk's fill
(:class:`kpsdk.targets.unicorn.tlb.TlbFill`).  Then, on x86_64, a loop whose turn
reads and writes the same page (the stack's case), where the virtual mode
without a hook refills the page at each access; and a loop reading one word
per page over more pages than the TLB holds, where each access is a TLB miss
(kpsdk's fill is a Python callback).  Wall time per turn, best of three.

ppc64 has no "cpu" column: its CPU fill (the hash MMU) faults at the first
fetch, which is why kpsdk ran it in the virtual mode, without a fill hook,
before the fill existed.  ARM's row measures the fill as on the other arches,
but kpsdk's ARM targets do not use it (``Arch.unicorn_tlb_fill``: Unicorn's
virtual mode leaves Thumb's IT state behind after a miss inside an IT block).
"""

from __future__ import annotations

import argparse
import struct
import time
from collections.abc import Callable

import unicorn
from keystone import (
    KS_ARCH_ARM,
    KS_ARCH_PPC,
    KS_ARCH_X86,
    KS_MODE_32,
    KS_MODE_64,
    KS_MODE_ARM,
    KS_MODE_BIG_ENDIAN,
    KS_MODE_PPC64,
    Ks,
)
from unicorn import arm_const, ppc_const, riscv_const, x86_const

from kpsdk.arch_backends.ppc64 import MSR
from kpsdk.targets.unicorn.tlb import TlbFill

CODE, DATA = 0x10000, 0x100000


def riscv_loop(stores: int) -> bytes:
    """``sd a0, 8i(a2)`` x stores; ``addi a1, a1, -1``; ``bnez a1`` back (no assembler for riscv here)."""
    words = [((8 * i >> 5) << 25) | (10 << 20) | (12 << 15) | (3 << 12) | ((8 * i & 31) << 7) | 0x23
             for i in range(stores)]
    words.append(0xFFF58593)
    imm = -4 * (stores + 1) & 0x1FFF
    words.append(((imm >> 12) & 1) << 31 | ((imm >> 5) & 0x3F) << 25 | 11 << 15 | 1 << 12
                 | ((imm >> 1) & 0xF) << 8 | ((imm >> 11) & 1) << 7 | 0x63)
    return b"".join(struct.pack("<I", w) for w in words)


def assembled(arch: int, mode: int, loop: str, store: str) -> Callable[[int], bytes]:
    ks = Ks(arch, mode)
    return lambda n: bytes(ks.asm(loop.format(body=" ".join(store.format(o=8 * i) for i in range(n))), CODE)[0])


#: arch -> (Unicorn arch and mode, the loop's code for n stores, the base register, the counter)
ARCHES: dict[str, tuple[tuple[int, int], Callable[[int], bytes], int, int]] = {
    "x86_64": ((unicorn.UC_ARCH_X86, unicorn.UC_MODE_64),
               assembled(KS_ARCH_X86, KS_MODE_64, "L: {body} dec ecx; jnz L", "mov [rbx+{o}], rax;"),
               x86_const.UC_X86_REG_RBX, x86_const.UC_X86_REG_RCX),
    "i386": ((unicorn.UC_ARCH_X86, unicorn.UC_MODE_32),
             assembled(KS_ARCH_X86, KS_MODE_32, "L: {body} dec ecx; jnz L", "mov [ebx+{o}], eax;"),
             x86_const.UC_X86_REG_EBX, x86_const.UC_X86_REG_ECX),
    "arm": ((unicorn.UC_ARCH_ARM, unicorn.UC_MODE_ARM),
            assembled(KS_ARCH_ARM, KS_MODE_ARM, "L: {body} subs r1, r1, #1; bne L", "str r0, [r2, #{o}];"),
            arm_const.UC_ARM_REG_R2, arm_const.UC_ARM_REG_R1),
    "ppc64": ((unicorn.UC_ARCH_PPC, unicorn.UC_MODE_PPC64 | unicorn.UC_MODE_BIG_ENDIAN),
              assembled(KS_ARCH_PPC, KS_MODE_PPC64 | KS_MODE_BIG_ENDIAN, "L: {body} addic. 4, 4, -1; bne L",
                        "std 3, {o}(5);"),
              ppc_const.UC_PPC_REG_5, ppc_const.UC_PPC_REG_4),
    "riscv64": ((unicorn.UC_ARCH_RISCV, unicorn.UC_MODE_RISCV64), riscv_loop,
                riscv_const.UC_RISCV_REG_A2, riscv_const.UC_RISCV_REG_A1),
}
MODES = ("cpu", "virtual", "virtual + kpsdk's fill")


def engine(uc_args: tuple[int, int], mode: str, size: int = 0x10000) -> tuple[unicorn.Uc, object]:
    uc = unicorn.Uc(*uc_args)
    keep: object = None
    if mode == "virtual":
        uc.ctl_set_tlb_mode(unicorn.UC_TLB_VIRTUAL)
    elif mode != "cpu":
        keep = TlbFill(uc)
    if uc_args[0] == unicorn.UC_ARCH_PPC:  # a 64-bit process's MSR (arch_backends/ppc64.py)
        uc.reg_write(ppc_const.UC_PPC_REG_MSR, MSR)
    uc.mem_map(CODE, 0x10000)
    uc.mem_map(DATA, size, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
    return uc, keep


def per_turn_ns(uc_args: tuple[int, int], mode: str, code: bytes, regs: dict[int, int], turns: int,
                size: int = 0x10000) -> float:
    if uc_args[0] == unicorn.UC_ARCH_PPC and mode == "cpu":
        return float("nan")  # the CPU's hash MMU faults at the first fetch (arch_backends/ppc64.py)
    best = float("inf")
    for _ in range(3):
        uc, _keep = engine(uc_args, mode, size)
        uc.mem_write(CODE, code)
        for reg, value in regs.items():
            uc.reg_write(reg, value)
        start = time.perf_counter()
        uc.emu_start(CODE, CODE + len(code))
        best = min(best, time.perf_counter() - start)
    return best / turns * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200_000, help="loop turns per run (default 200,000)")
    turns = parser.parse_args().turns
    print(f"ns per loop turn, best of 3 runs of {turns:,} turns; unicorn {unicorn.__version__}")
    print(f"{'arch':8} {'stores':>6}  " + "  ".join(f"{m:>22}" for m in MODES))
    for name, (uc_args, loop, base, counter) in ARCHES.items():
        for stores in (0, 4):
            cells = [per_turn_ns(uc_args, m, loop(stores), {base: DATA, counter: turns}, turns) for m in MODES]
            print(f"{name:8} {stores:>6}  " + "  ".join(f"{c:>22.1f}" for c in cells))
    ks = Ks(KS_ARCH_X86, KS_MODE_64)
    print("x86_64, the same page read and written in each turn:")
    for label, src in (("store + load", "L: mov [rbx], rcx; mov rax, [rbx+8]; dec rcx; jnz L"),
                       ("push + pop", "L: push rcx; pop rax; dec rcx; jnz L")):
        code = bytes(ks.asm(src, CODE)[0])
        regs = {x86_const.UC_X86_REG_RBX: DATA, x86_const.UC_X86_REG_RSP: DATA + 0x8000,
                x86_const.UC_X86_REG_RCX: turns}
        cells = [per_turn_ns((unicorn.UC_ARCH_X86, unicorn.UC_MODE_64), m, code, regs, turns) for m in MODES]
        print(f"  {label:13}  " + "  ".join(f"{c:>22.1f}" for c in cells))
    print("x86_64, one load per page over 4 / 64 MiB (more pages than the TLB's 256 entries), ns per page:")
    for mib in (4, 64):
        # for (p = DATA; p < DATA + mib MiB; p += 4 KiB) eax += *p, rcx times
        code = bytes(ks.asm(f"L: mov rsi, {DATA}; M: add eax, [rsi]; add rsi, 0x1000; "
                            f"cmp rsi, {DATA + mib * 0x100000}; jb M; dec rcx; jnz L", CODE)[0])
        pages = mib * 256
        cells = [per_turn_ns((unicorn.UC_ARCH_X86, unicorn.UC_MODE_64), m, code, {x86_const.UC_X86_REG_RCX: 10},
                             10 * pages, size=mib * 0x100000) for m in MODES]
        print(f"  {mib:>3} MiB        " + "  ".join(f"{c:>22.1f}" for c in cells))


if __name__ == "__main__":
    main()
