"""MIPS: the kernel's kprobe rules as a table, its errno numbers, and what Unicorn needs for delay slots.

The rules are arch/mips/kernel/kprobes.c's ``arch_prepare_kprobe`` (ll/lld/sc/scd refused, an
instruction in a delay slot refused, the test being ``__insn_has_delay_slot`` of
arch/mips/kernel/probes-common.h) and what kpsdk adds where it runs an instruction itself
(branches and traps run in place, not out of line).  Each row is an encoded instruction, so the
table holds whatever capstone prints for it.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest
import unicorn
from unicorn import mips_const as um

import kpsdk
from kpsdk import fixtures
from kpsdk.arch_backends import mips

#: (encoding, boostable, refused: a part of the kernel's message or None, why)
TABLE = [
    (0x00851021, True, None, "addu: runs out of line"),
    (0x8FBF0014, True, None, "lw ra, 20(sp)"),
    (0x7C03E83B, True, None, "rdhwr v1, $29: the TLS pointer, no pc"),
    (0x46201000, True, None, "add.d: a cop1 instruction the kernel calls a branch, kpsdk does not"),
    (0xC0830000, False, "ll and sc", "ll v1, 0(a0)"),
    (0xE0830000, False, "ll and sc", "sc v1, 0(a0)"),
    (0xD0830000, False, "ll and sc", "lld (MIPS64)"),
    (0xF0830000, False, "ll and sc", "scd (MIPS64)"),
    (0x74100000, False, "MIPS16e or microMIPS", "jalx: switches instruction set"),
    (0x03E00008, False, None, "jr ra: a branch, stepped in place"),
    (0x0320F809, False, None, "jalr t9"),
    (0x10800006, False, None, "beqz a0"),
    (0x04110001, False, None, "bal"),
    (0x0C100054, False, None, "jal"),
    (0x45000002, False, None, "bc1f: a real cop1 branch"),
    (0x0000000C, False, None, "syscall: a trap reports its pc"),
    (0x0000000D, False, None, "break"),
    (0x00C00034, False, None, "teq a2, zero"),
    (0x42000018, False, None, "eret"),
]

#: the instruction before -> whether the kernel refuses a probe after it (its delay slot)
AFTER = [
    (0x00851021, False), (0x03E00008, True), (0x0320F809, True), (0x10800006, True), (0x54800006, True),
    (0x04110001, True), (0x0C100054, True), (0x08100054, True), (0x45000002, True),
    (0x46201000, True),  # every cop1 opcode: the kernel's __insn_has_delay_slot, not the CPU's
    (0x0000000C, False),
]


@pytest.mark.parametrize("name", ["mips", "mipsel", "mips64el"])
def test_refusals_are_the_kernels(name: str) -> None:
    arch = kpsdk.get_registry().arch(name)
    order = ">" if arch.endian == "big" else "<"
    md = arch.disassembler()
    for word, boostable, refused, why in TABLE:
        if "MIPS64" in why and arch.bits == 32:
            continue  # no such instruction in MIPS32: nothing to probe
        insn = next(md.disasm(struct.pack(order + "I", word), 0x400000), None)
        assert insn is not None, why
        got = arch.insn.classify(insn)
        assert got[0] == boostable and (got[1] is None) == (refused is None), (why, got)
        assert refused is None or refused in (got[1] or ""), (why, got)
    slots = arch.delay_slots
    assert slots is not None
    for word, refuses in AFTER:
        reason = slots.refuses_after(struct.pack(order + "I", word))
        assert (reason is not None) == refuses, hex(word)
        assert reason is None or "Kprobes for branch delayslot are not supported" in reason
        assert slots.branch(struct.pack(order + "I", word)) == (refuses and word != 0x46201000)


@pytest.mark.parametrize("name", ["mips", "mips64el"])
def test_a_probe_in_a_delay_slot_is_refused_and_the_branch_is_stepped(name: str) -> None:
    """The return's delay slot is refused with the kernel's words; a post_handler on the return
    (``jr ra``) runs where it went, back in the caller, the delay slot done (sp restored)."""
    with kpsdk.open(f"elf:{fixtures.path(name)}") as s:
        inc = s.symbols.get("inc")
        insns = list(s.arch.disassembler().disasm(s.read_memory(inc.address, inc.size), inc.address))
        assert insns[-2].mnemonic == "jr"
        with pytest.raises(kpsdk.KprobeError, match="branch delayslot") as info:
            s.register_kprobe(kpsdk.Kprobe(addr=insns[-1].address))
        assert info.value.errno == 22
        seen: list[tuple[int, int]] = []
        entry_sp: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=lambda p, r: entry_sp.append(r.sp) or 0))
        s.register_kprobe(kpsdk.Kprobe(addr=insns[-2].address, post_handler=lambda p, r, f: seen.append((r.ip, r.sp))))
        assert s.call("loop", 2) == 3
        loop = s.symbols.get("loop")
        assert [sp for _, sp in seen] == entry_sp and len(seen) == 2
        assert all(loop.address <= ip < loop.address + loop.size for ip, _ in seen)


def test_errnos_are_the_cross_headers() -> None:
    """mips.ERRNOS against arch/mips/include/uapi/asm/errno.h as the cross compiler reads it."""
    import errno

    cc = shutil.which("mips-linux-gnu-gcc")
    if cc is None:
        pytest.skip("mips-linux-gnu-gcc not found: install the Debian package gcc-mips-linux-gnu")
    done = subprocess.run([cc, "-E", "-dM", "-x", "c", "-"], input="#include <asm/errno.h>\n", capture_output=True,
                          text=True, check=True, timeout=60)
    theirs = {m[1]: int(m[2]) for m in re.finditer(r"^#define (E[A-Z0-9]+) (\d+)$", done.stdout, re.M)}
    table = dict(mips.ERRNOS)
    for name, value in theirs.items():
        generic = getattr(errno, name, None)
        if generic is not None and name != "EDEADLOCK":  # generic EDEADLOCK is EDEADLK (35): MIPS's EDEADLK is
            assert table.get(generic, generic) == value, name


def test_unicorn_settle_stops_a_branch_target_running_twice() -> None:
    """A memory hook inside a delay slot restores the slot's pending branch into the engine, and
    without :func:`unicorn_settle` the branch target's first instruction runs twice (Unicorn 2.1.4)."""
    slots = kpsdk.get_registry().arch("mipsel").delay_slots
    assert slots is not None and slots.unicorn_settle is not None

    def run(settle: bool) -> int:
        uc = unicorn.Uc(unicorn.UC_ARCH_MIPS, unicorn.UC_MODE_MIPS32 | unicorn.UC_MODE_LITTLE_ENDIAN)
        uc.ctl_set_cpu_model(um.UC_CPU_MIPS32_24KF)
        uc.mem_map(0x400000, 0x1000)
        uc.mem_map(0x500000, 0x1000)
        # lui t0, 0x50; jal 0x400100; sw a0, 0(t0) [its delay slot]; nop ... 0x400100: addiu v1, v1, 7; jr ra; nop
        uc.mem_write(0x400000, struct.pack("<4I", 0x3C080050, 0x0C100040, 0xAD040000, 0))
        uc.mem_write(0x400100, struct.pack("<3I", 0x24630007, 0x03E00008, 0))
        hook = (lambda uc, *a: slots.unicorn_settle(uc)) if settle else (lambda *a: None)  # type: ignore[misc]
        uc.hook_add(unicorn.UC_HOOK_MEM_WRITE, hook, None, 0x500000, 0x500003)
        uc.emu_start(0x400000, 0x40000C)
        return int(uc.reg_read(um.UC_MIPS_REG_V1))

    assert run(False) == 14  # the engine's fault, which the settle exists for
    assert run(True) == 7


def test_a_store_in_a_delay_slot_is_watched_through_its_branch() -> None:
    """mips64el's try_escape stores gp into escape_buf in the delay slot of ``bal escape``: each
    store is reported once, at its own pc, with the CPU at escape (where the branch went), and the
    program's output is the program's."""
    with kpsdk.open(f"elf:{fixtures.path('mips64el')}") as s:
        buf = s.symbols.get("escape_buf").address
        hits: list[tuple[str, str]] = []
        s.register_watchpoint(kpsdk.Watchpoint(addr=buf + 24, length=8, type="w", handler=lambda w, r, a: hits.append(
            (s.symbols.format(a.pc), s.symbols.format(r.ip)))))
        assert s.run(timeout=20) == 0 and s.console == fixtures.EXPECTED_OUTPUT
        assert len(hits) == 3 and all(ip == "escape+0x0" for _, ip in hits)
        at = s.symbols.resolve(hits[0][0])
        branch = next(s.arch.disassembler().disasm(s.read_memory(at - 4, 4), at - 4))
        assert branch.mnemonic == "bal"


def test_o32_system_calls_take_stack_arguments_and_set_a3() -> None:
    """o32's fifth and sixth arguments come from the caller's stack (mmap2's fd and offset at
    sp+16 and sp+20); a call that succeeds leaves a3 0, one that fails sets it to 1 and returns
    MIPS's positive errno (ENOSYS is 89 there, 38 elsewhere): the minimal layer of a ``unicorn:``
    CPU answers write and nothing else."""
    with kpsdk.open("unicorn:mipsel") as s:
        s.target.map(0x400000, 0x1000, "rwx")
        code = struct.pack("<20I",
                           # sp -= 32; [sp+16] = -1; [sp+20] = 7
                           0x27BDFFE0, 0x2402FFFF, 0xAFA20010, 0x24020007, 0xAFA20014,
                           0x00002025, 0x24051000, 0x24060003, 0x24070802,  # a0-a3: 0, 0x1000, 3, 0x802
                           0x24021072, 0x0000000C,  # mmap2: 4210
                           0x00408025, 0x00E08825,  # s0 = v0, s1 = a3
                           0x24040001, 0x3C050040, 0x24060004, 0x24020FA4, 0x0000000C,  # write(1, 0x400000, 4)
                           0x03E00008, 0x27BD0020)  # return, sp += 32
        s.write_memory(0x400000, code)
        calls: list[tuple[str, tuple[int, ...], int | None, int, int]] = []

        class Recorder:
            @kpsdk.hookimpl
            def kpsdk_syscall_exit(self, session: kpsdk.Session, call: kpsdk.SyscallEvent) -> None:
                regs = session.regs()
                calls.append((call.name, call.args, call.result, regs["v0"], regs["a3"]))

        kpsdk.get_registry().pm.register(Recorder(), name="mips-recorder")
        try:
            assert s.call(0x400000) == 4
        finally:
            kpsdk.get_registry().pm.unregister(name="mips-recorder")
        (name, args, result, v0, a3), write = calls
        assert name == "mmap2" and args[4:6] == (0xFFFFFFFF, 7) and result == -38 and (v0, a3) == (89, 1)
        assert write[0] == "write" and write[2:] == (4, 4, 0)


@pytest.mark.parametrize(("abis", "fr1"), [
    ((5,), True),           # FPXX (Debian's o32): the mode the hardware prefers, FR=1 on a 64-bit FPU
    ((5, 5), True),         # FPXX program, FPXX ld.so
    ((1,), False),          # FP32 (-mfp32): FR=0
    ((5, 1), False),        # an FP32 interpreter keeps an FPXX program in FR=0
    ((6,), True), ((7, 5), True),  # FP64, FP64A
    ((None,), False),       # no .MIPS.abiflags: anything but FR=1
    ((3,), False),          # soft float: the default
])
def test_o32_fpu_mode_is_the_kernels(abis: tuple[int | None, ...], fr1: bool) -> None:
    """arch/mips/kernel/elf.c's arch_check_elf with CONFIG_MIPS_O32_FP64_SUPPORT (Debian's
    malta kernels have it): the executable's and interpreter's FP ABIs joined."""
    assert mips.o32_fr1(abis) is fr1
    assert mips.o32_fr1(abis, f64_r2=False) is (fr1 and abis[0] in (6, 7))


#: a program that shows its FPU mode by what it does: in FR=0 the odd register f1 is the high half
#: of the double in f0, in FR=1 a register of its own; and what Linux says (PR_GET_FP_MODE)
FP_MODE_PROGRAM = r"""
#include <stdio.h>
#include <sys/prctl.h>
int main(void)
{
    unsigned long long d;
    __asm__ volatile(".set push\n.set oddspreg\n mtc1 $0, $f0\n mtc1 $0, $f1\n li $8, 0x1234\n mtc1 $8, $f1\n"
                     " sdc1 $f0, %0\n.set pop\n" : "=m"(d) : : "$8", "$f0", "$f1");
    printf("fr %d\n", (int)(d >> 32) != 0x1234);
    printf("prctl %d\n", prctl(PR_GET_FP_MODE));
    return 0;
}
"""


@pytest.mark.parametrize(("flags", "fr1"), [((), True), (("-mfp32",), False)])
def test_linux_layer_starts_o32_in_the_kernels_fpu_mode(flags: tuple[str, ...], fr1: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An FPXX program (gcc's default for Debian's mipsel) starts in FR=1, as Linux and qemu-mipsel
    start it (PR_GET_FP_MODE 1), one built -mfp32 in FR=0: the program's own use of f0/f1 shows
    the same mode under kpsdk as under qemu-user (kpsdk's prctl has no PR_GET_FP_MODE)."""
    cc = shutil.which("mipsel-linux-gnu-gcc")
    if cc is None:
        pytest.skip("mipsel-linux-gnu-gcc not found: install the Debian package gcc-mipsel-linux-gnu")
    src = tmp_path / "fp.c"
    src.write_text(FP_MODE_PROGRAM)
    exe = tmp_path / "fp"
    subprocess.run([cc, "-static", "-O1", *flags, "-o", str(exe), str(src)], check=True, timeout=120)
    qemu = shutil.which("qemu-mipsel")
    if qemu is not None:
        out = subprocess.run([qemu, str(exe)], capture_output=True, text=True, timeout=60).stdout
        assert out == f"fr {int(fr1)}\nprctl {int(fr1)}\n"
    with kpsdk.open(f"elf:{exe}") as s:
        assert bool(s.target.uc.reg_read(um.UC_MIPS_REG_CP0_STATUS) & mips.ST_FR) is fr1
        assert s.run(timeout=20) == 0
        assert s.console.startswith(f"fr {int(fr1)}\n")


@pytest.mark.parametrize("name", ["mips", "mipsel", "mips64el"])
def test_kpsdk_archs_says_yes_or_why_for_every_feature(name: str) -> None:
    """kpsdk archs' features table: each MIPS feature "yes", or a reason (no bare "no")."""
    from kpsdk.cli.archs import features

    have = features(kpsdk.get_registry().arch(name))
    assert all(value.startswith("yes") or (value.startswith("no: ") and len(value) > 20) for value in have.values()), \
        have
    assert have["tcg-plugin"].startswith("no: QEMU 10's MIPS CPUs give plugins no registers")


def test_unicorns_mips_translator_runs_out_of_temps_on_long_blocks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Unicorn 2.1.4's MIPS translator allocates a TCG temp per instruction it never frees
    (``dyn_is_slot = tcg_const_i32(0)`` in qemu/target/mips/translate.c's
    mips_tr_translate_insn) and TCG_MAX_TEMPS is 512 on a 64-bit host, unchecked in a release
    build: a block of ~400 straight-line instructions overflows the temps and the host process
    dies in tcg_emit_op (~190 in the mix of Debian's md5sum).  Measured here in a child process;
    when this fails, Unicorn has fixed it and the skips naming this test can go."""
    script = tmp_path / "long_block.py"
    script.write_text(
        "import struct, unicorn as U\n"
        "from unicorn import mips_const as m\n"
        "uc = U.Uc(U.UC_ARCH_MIPS, U.UC_MODE_MIPS32 | U.UC_MODE_LITTLE_ENDIAN)\n"
        "uc.ctl_set_cpu_model(m.UC_CPU_MIPS32_24KF)\n"
        "code = struct.pack('<450I', *[0x00431021] * 450)\n"  # addu v0, v0, v1
        "uc.mem_map(0x400000, 0x1000)\n"
        "uc.mem_write(0x400000, code)\n"
        "uc.emu_start(0x400000, 0x400000 + len(code))\n")
    import sys

    done = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60, check=False)
    assert done.returncode == -11, (done.returncode, done.stderr[-500:])
