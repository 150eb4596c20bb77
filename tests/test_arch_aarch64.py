"""aarch64's instruction rules against the kernel's arm64 kprobes decoder, on real instructions.

The table below is what Linux 6.1 (Debian 12's kernel) decides for each instruction in
arch/arm64/kernel/probes/decode-insn.c (``arm_kprobe_decode_insn`` -> ``arm_probe_decode_insn``
-> ``aarch64_insn_is_steppable``) with the classes of arch/arm64/include/asm/insn.h and
arch/arm64/lib/insn.c: *step* (INSN_GOOD: copied to an out-of-line slot and single-stepped
there), *simulate* (INSN_GOOD_NO_SLOT: simulate-insn.c computes it) or *reject*
(INSN_REJECTED: ``register_kprobe`` fails with EINVAL).  Each encoding is checked against
capstone's spelling, so a row names the instruction it tests; every row is then registered
on a blank Unicorn CPU, where a refused one must be EINVAL and the others must run with the
program's result unchanged.
"""

from __future__ import annotations

import errno
import struct

import capstone
import pytest

import kpsdk
from kpsdk.arch_backends import aarch64 as a64
from kpsdk.binfmt.symbols import Symbol

#: (encoding, capstone's text, the kernel's decision, why: the decoder's predicate)
TABLE = [
    # steppable: plain data processing, loads and stores, barriers, system hints the kernel lists
    (0x8B010000, "add x0, x0, x1", "step", "not class BR_SYS, no literal, not exclusive"),
    (0xF9400020, "ldr x0, [x1]", "step", "a load with a register base"),
    (0xA9BF7BFD, "stp x29, x30, [sp, #-0x10]!", "step", "a store pair"),
    (0xD503201F, "nop", "step", "aarch64_insn_is_steppable_hint: NOP"),
    (0xD503233F, "paciasp", "step", "steppable hint PACIASP (a function's first instruction)"),
    (0xD503245F, "bti c", "step", "steppable hint BTIC (a function's first instruction)"),
    (0xD50320FF, "xpaclri", "step", "steppable hint XPACLRI"),
    (0xD5033BBF, "dmb ish", "step", "class BR_SYS, none of the refused kinds"),
    (0xD53B0020, "mrs x0, ctr_el0", "step", "mrs of a register other than DAIF"),
    (0xC8DFFC20, "ldar x0, [x1]", "step", "load-acquire: o2 set, not exclusive"),
    (0x1C000040, "ldr s0, #8", "step", "SIMD literal: aarch64_insn_uses_literal does not list it"),
    # simulated (simulate-insn.c)
    (0x58000040, "ldr x0, #8", "simulate", "ldr_lit: simulate_ldr_literal"),
    (0x98000040, "ldrsw x0, #8", "simulate", "ldrsw_lit: simulate_ldrsw_literal"),
    (0x10000040, "adr x0, #8", "simulate", "adr: simulate_adr_adrp"),
    (0x90000000, "adrp x0, #0", "simulate", "adrp: simulate_adr_adrp"),
    (0x14000002, "b #8", "simulate", "b: simulate_b_bl"),
    (0x94000002, "bl #8", "simulate", "bl: simulate_b_bl"),
    (0x54000040, "b.eq #8", "simulate", "bcond: simulate_b_cond"),
    (0xB4000040, "cbz x0, #8", "simulate", "cbz: simulate_cbz_cbnz"),
    (0x35000040, "cbnz w0, #8", "simulate", "cbnz: simulate_cbz_cbnz"),
    (0x36000040, "tbz w0, #0, #8", "simulate", "tbz: simulate_tbz_tbnz"),
    (0xB7F80040, "tbnz x0, #0x3f, #8", "simulate", "tbnz: simulate_tbz_tbnz"),
    (0xD61F0200, "br x16", "simulate", "br: simulate_br_blr_ret"),
    (0xD63F0200, "blr x16", "simulate", "blr: simulate_br_blr_ret"),
    (0xD65F03C0, "ret", "simulate", "ret: simulate_br_blr_ret"),
    # rejected
    (0xC85F7C20, "ldxr x0, [x1]", "reject", "exclusive (load_ex)"),
    (0xC8027C20, "stxr w2, x0, [x1]", "reject", "exclusive (store_ex)"),
    (0xC87F0440, "ldxp x0, x1, [x2]", "reject", "exclusive pair"),
    (0xD4000001, "svc #0", "reject", "exception"),
    (0xD4000002, "hvc #0", "reject", "exception"),
    (0xD4200080, "brk #4", "reject", "exception (kprobes' own breakpoint)"),
    (0xD4400000, "hlt #0", "reject", "exception"),
    (0xD69F03E0, "eret", "reject", "eret"),
    (0xD51B4220, "msr daif, x0", "reject", "msr_reg"),
    (0xD50342DF, "msr daifset, #2", "reject", "msr_imm"),
    (0xD53B4220, "mrs x0, daif", "reject", "mrs of DAIF (AARCH64_INSN_SPCLREG_DAIF)"),
    (0xD503207F, "wfi", "reject", "hint WFI, not steppable"),
    (0xD503205F, "wfe", "reject", "hint WFE, not steppable"),
    (0xD503203F, "yield", "reject", "hint YIELD, not steppable"),
    (0xD50323BF, "autiasp", "reject", "hint AUTIASP, not steppable since Linux 5.9"),
    (0xD65F0BFF, "retaa", "reject", "ret_auth: a branch, not simulated"),
    (0xD63F081F, "blraaz x0", "reject", "blr_auth: a branch, not simulated"),
    (0xD8000040, "prfm pldl1keep, #8", "reject", "prfm_lit: uses a literal, not simulated"),
]


def _text(word: int, at: int = 0x100000) -> str:
    md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
    insn = next(md.disasm(struct.pack("<I", word), at))
    return f"{insn.mnemonic} {insn.op_str}".strip()


@pytest.mark.parametrize(("word", "text", "kind", "why"), TABLE, ids=[row[1] for row in TABLE])
def test_the_kernels_decision_for_each_instruction(word: int, text: str, kind: str, why: str) -> None:
    assert _text(word, 0) == text
    got, detail = a64.decode(word)
    assert got == kind, (why, detail)
    md = kpsdk.get_registry().arch("aarch64").disassembler()
    boostable, refused = a64.classify(next(md.disasm(struct.pack("<I", word), 0)))
    assert (refused is not None) == (kind == "reject")
    assert boostable == (kind == "step")  # what the kernel steps out of line kpsdk may run out of line


CODE = 0x100000


def _blank(words: list[int]) -> kpsdk.Session:
    s = kpsdk.open("unicorn:aarch64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.write_memory(CODE, struct.pack(f"<{len(words)}I", *words))
    return s


@pytest.mark.parametrize("row", [r for r in TABLE if r[2] == "reject"], ids=lambda r: r[1])
def test_a_refused_instruction_is_einval_on_every_mechanism(row: tuple[int, str, str, str]) -> None:
    for optimize in (True, False):
        with _blank([row[0], 0xD65F03C0]) as s:
            s.kprobes_optimization = optimize
            with pytest.raises(kpsdk.KprobeError) as info:
                s.register_kprobe(kpsdk.Kprobe(addr=CODE))
            assert info.value.errno == errno.EINVAL and "decode-insn.c" in str(info.value)


#: small functions around one simulated instruction: (code, x0 in, x0 out, what the probed
#: instruction is).  Each runs with a probe and a post_handler on its second instruction,
#: which must see the pc the CPU really went to.
SIMULATED = [
    # mov x1, x0 ; adr x0, #8 ; sub x0, x0, x1 ; ret   (x0 = CODE + 4 + 8 - x0)
    ([0xAA0003E1, 0x10000040, 0xCB010000, 0xD65F03C0], 0, CODE + 12, "adr"),
    # mov x1, x0 ; adrp x0, #0x1000 (page of CODE + 0x1000) ; add x0, x0, x1 ; ret
    ([0xAA0003E1, 0xB0000000, 0x8B010000, 0xD65F03C0], 5, CODE + 0x1000 + 5, "adrp"),
    # nop ; ldr x0, #8 (the literal 0x1234 at CODE + 12) ; ret ; .quad 0x1234 (3 words)
    ([0xD503201F, 0x58000040, 0xD65F03C0, 0x1234, 0], 0, 0x1234, "ldr literal"),
    # nop ; ldrsw x0, #8 ; ret ; .word -2
    ([0xD503201F, 0x98000040, 0xD65F03C0, 0xFFFFFFFE], 0, (1 << 64) - 2, "ldrsw literal"),
    # cmp x0, #3 ; b.eq +12 ; mov x0, #1 ; ret ; mov x0, #2 ; ret
    ([0xF1000C1F, 0x54000060, 0xD2800020, 0xD65F03C0, 0xD2800040, 0xD65F03C0], 3, 2, "b.eq taken"),
    ([0xF1000C1F, 0x54000060, 0xD2800020, 0xD65F03C0, 0xD2800040, 0xD65F03C0], 4, 1, "b.eq not taken"),
    # nop ; cbnz x0, +12 ; mov x0, #1 ; ret ; mov x0, #2 ; ret
    ([0xD503201F, 0xB5000060, 0xD2800020, 0xD65F03C0, 0xD2800040, 0xD65F03C0], 9, 2, "cbnz"),
    # nop ; tbz x0, #1, +12 ; mov x0, #1 ; ret ; mov x0, #2 ; ret
    ([0xD503201F, 0x36080060, 0xD2800020, 0xD65F03C0, 0xD2800040, 0xD65F03C0], 1, 2, "tbz"),
    # mov x16, x30 ; bl +12 ; mov x30, x16 ; ret ; mov x0, #7 ; ret   (a call and its return)
    ([0xAA1E03F0, 0x94000003, 0xAA1003FE, 0xD65F03C0, 0xD28000E0, 0xD65F03C0], 0, 7, "bl"),
    # adr x16, +16 ; br x16 ; mov x0, #1 ; ret ; mov x0, #3 ; ret
    ([0x10000090, 0xD61F0200, 0xD2800020, 0xD65F03C0, 0xD2800060, 0xD65F03C0], 0, 3, "br"),
]


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "breakpoint"])
@pytest.mark.parametrize(("words", "arg", "want", "what"), SIMULATED, ids=[r[3] for r in SIMULATED])
def test_simulated_instructions_run_and_post_handlers_follow_them(words: list[int], arg: int, want: int,
                                                                  what: str, optimize: bool) -> None:
    plain = _blank(words)
    expected = plain.call(CODE, arg, restype="ulong")
    plain.close()
    assert expected == want  # the code does what its comment says, unprobed
    with _blank(words) as s:
        s.kprobes_optimization = optimize
        pres: list[int] = []
        posts: list[int] = []
        kp = kpsdk.Kprobe(addr=CODE + 4, pre_handler=lambda p, regs: pres.append(regs.ip) or 0,
                          post_handler=lambda p, regs, flags: posts.append(regs.ip))
        s.register_kprobe(kp)
        assert s.call(CODE, arg, restype="ulong") == want
        assert pres == [CODE + 4] and len(posts) == 1
        # the post_handler runs where the instruction went: the word it executes next
        expected_next = {"b.eq taken": CODE + 16, "cbnz": CODE + 16, "tbz": CODE + 16, "bl": CODE + 16,
                         "br": CODE + 16}.get(what, CODE + 8)
        assert posts == [expected_next]


@pytest.mark.parametrize("optimize", [True, False], ids=["optimized", "breakpoint"])
def test_a_probe_by_name_lands_on_a_pac_or_bti_entry_and_the_function_runs(optimize: bool) -> None:
    """A kernel function built with branch protection starts with ``paciasp`` or ``bti c``:
    the kernel puts a kprobe by name on that instruction itself (arm64 has no
    arch_adjust_kprobe_addr), a steppable hint, and so does kpsdk."""
    # paciasp ; stp x29, x30, [sp, #-16]! ; mov x29, sp ; add x0, x0, #1 ; ldp x29, x30, [sp], #16 ;
    # autiasp ; ret   and   bti c ; add x0, x0, #2 ; ret
    words = [0xD503233F, 0xA9BF7BFD, 0x910003FD, 0x91000400, 0xA8C17BFD, 0xD50323BF, 0xD65F03C0,
             0xD503245F, 0x91000800, 0xD65F03C0]
    seen: list[int] = []
    with _blank(words) as s:
        s.kprobes_optimization = optimize
        s.symbols.add(Symbol("pac_func", CODE, 28, "func"))
        s.symbols.add(Symbol("bti_func", CODE + 28, 12, "func"))
        for name in ("pac_func", "bti_func"):
            s.register_kprobe(kpsdk.Kprobe(symbol_name=name, pre_handler=lambda p, r: seen.append(r.ip) or 0))
        rp = kpsdk.Kretprobe(symbol_name="pac_func", handler=lambda ri, regs: seen.append(regs.return_value))
        s.register_kretprobe(rp)
        assert s.call("pac_func", 41) == 42 and s.call("bti_func", 40) == 42
    assert seen == [CODE, 42, CODE + 28]


def test_kpsdks_own_code_decodes_as_intended() -> None:
    """The trampoline and detour code, hand-encoded, read back through capstone."""
    def text(code: bytes, at: int, n: int) -> list[str]:
        md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
        return [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(code[:4 * n], at)]

    at = 0x800000
    code, hook, word = a64.return_jump(at, a64.A64_ISET, at + 0x1F0)
    assert text(code, at, 5) == ["adrp x17, #0x800000", "mov x16, sp", "str x16, [x17, #0x1f0]",
                                 f"ldr x30, #{at + 24:#x}", "br x30"]
    assert (hook, word, len(code)) == (12, 24, 32)
    from kpsdk.arch import EntryDetour, ReturnDetour

    code, hook = a64.entry_detour(at, a64.A64_ISET, EntryDetour(0x900000, 0x900008, 0x900100, at + 256, at + 192))
    assert text(code, at, 15) == [
        f"ldr x16, #{at + 64:#x}", "ldr x17, [x16]", f"cbnz x17, #{at + 56:#x}",
        f"ldr x16, #{at + 72:#x}", "ldr x17, [x16]", f"cbz x17, #{at + 56:#x}",
        "sub x17, x17, #1", "str x17, [x16]", f"ldr x16, #{at + 80:#x}", "add x16, x16, x17, lsl #4",
        "mov x17, sp", "stp x30, x17, [x16]", f"ldr x30, #{at + 88:#x}", f"b #{at + 192:#x}", f"b #{at + 192:#x}"]
    assert hook == 56 and struct.unpack("<4Q", code[64:96]) == (0x900000, 0x900008, 0x900100, at + 256)
    code, short, general = a64.return_detour(at, a64.A64_ISET, ReturnDetour(0x900008, 0x900100, 0))
    assert text(code, at, 15)[9:] == ["cmp sp, x30", f"b.ne #{at + 52:#x}", "ldr x17, [x17]", "br x17",
                                      "ldr x17, [x16, #0x10]", "br x17"]
    assert (short, general) == (44, 52)
    assert a64.jump_back(at, at + (128 << 20), a64.A64_ISET) is None  # beyond b's reach: no booster
    assert text(a64.jump_back(at, at - 4, a64.A64_ISET) or b"", at, 1) == [f"b #{at - 4:#x}"]


@pytest.mark.parametrize(("addr_offset", "length", "ok"), [
    (0, 8, True), (3, 5, True), (5, 4, False),  # byte select: anywhere inside one aligned doubleword
    (0, 16, True), (8, 16, False),  # a MASK range: a power of two on its own alignment
    (0, 1 << 31, True), (0, 1 << 32, False), (0, 24, False),
])
def test_watchpoint_rules_are_byte_select_and_mask_ranges(addr_offset: int, length: int, ok: bool) -> None:
    from kpsdk.plugins.watchpoints import check_rules

    rules = kpsdk.get_registry().arch("aarch64").watch
    wp = kpsdk.Watchpoint(addr=0x10000, length=length, type="w", handler=lambda *a: None)
    if ok:
        check_rules(rules, "aarch64", wp, 0x80000000 + addr_offset, length)
    else:
        with pytest.raises(kpsdk.KprobeError) as info:
            check_rules(rules, "aarch64", wp, 0x80000000 + addr_offset, length)
        assert info.value.errno == errno.EINVAL


def test_a_raw_images_btf_is_found_by_its_header() -> None:
    """arm64's kallsyms name no data (no CONFIG_KALLSYMS_ALL), so no ``__start_BTF``: the one
    blob with a kernel's BTF header (types at 0, strings right after, the empty string first)
    is the BTF; none, or two, and there is no answer."""
    import random

    from kpsdk.kernel.image_btf import _scan_btf

    rng = random.Random(35)
    blob = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, 8, 8, 4) + bytes(range(8)) + b"\0abc"
    image = rng.randbytes(4099) + blob + rng.randbytes(999)
    assert _scan_btf(image) == blob
    assert _scan_btf(image + blob) is None
    assert _scan_btf(rng.randbytes(4096)) is None


def test_no_probe_inside_an_exclusive_sequence() -> None:
    """``is_probed_address_atomic``: between an ``ldxr`` and its ``stxr`` a probe would clear the
    exclusive monitor at every try, so the kernel refuses it (looking back to the function's
    start, 16 instructions at most); after the ``stxr`` it is fine again."""
    # 0: ldxr x0, [x1] ; 4: add x0, x0, #1 ; 8: stxr w2, x0, [x1] ; 12: cbnz w2, 0 ; 16: ret
    words = [0xC85F7C20, 0x91000400, 0xC8027C20, 0x35FFFFA2, 0xD65F03C0]
    with _blank(words) as s:
        s.symbols.add(Symbol("atomic_inc", CODE, 20, "func"))
        with pytest.raises(kpsdk.KprobeError) as info:
            s.register_kprobe(kpsdk.Kprobe(symbol_name="atomic_inc", offset=4))
        assert info.value.errno == errno.EINVAL and "exclusive load/store sequence" in str(info.value)
        kp = kpsdk.Kprobe(symbol_name="atomic_inc", offset=12)
        s.register_kprobe(kp)
        s.target.map(0x200000, 0x1000, "rw")  # type: ignore[attr-defined]
        s.write_memory(0x200000, (41).to_bytes(8, "little"))
        s.call("atomic_inc", 0, 0x200000)
        assert kp.hits == 1 and s.read_memory(0x200000, 8) == (42).to_bytes(8, "little")


def test_successors_of_traps_and_authenticated_branches() -> None:
    """``svc`` goes on after itself (the Linux layer returns there); ``brk``, ``hlt`` and the
    authenticated branches cannot be followed (None), as no simulate-insn.c handler follows them."""
    md = kpsdk.get_registry().arch("aarch64").disassembler()

    def after(word: int) -> set[int] | None:
        insn = next(md.disasm(struct.pack("<I", word), CODE))
        return a64.successors(insn, lambda name: 0x1234, lambda addr, n: bytes(n), 8)

    assert after(0xD4000001) == {CODE + 4}  # svc #0
    assert after(0xD4200080) is None and after(0xD4400000) is None  # brk #4, hlt #0
    assert after(0xD65F0BFF) is None and after(0xD63F081F) is None  # retaa, blraaz x0
    assert after(0xD65F03C0) == {0x1234} and after(0x14000010) == {CODE + 64}  # ret, b
