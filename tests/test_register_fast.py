"""Registration's fast paths on Unicorn: the decoding walk remembered per function,
reads through ``uc_mem_read`` directly, and probes placed while code runs.

The walk from a function's start is made once (without capstone's details) and
kept while the bytes read agree (``kpsdk/arch/decode.py``); every answer must be the
one a full, detailed decode from the start gives, on every arch, and changed
code must be walked again.  A probe registered from a handler, over code
Unicorn has translated already, must fire (its translations dropped), and
unregistering must put the original bytes back and leave no translation of
the trap behind (riscv64 did: translations are dropped from the function's
start now).
"""

from __future__ import annotations

import errno

import capstone
import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.arch.insn import Decoded
from tests.conftest import UNICORN_ARCHS


def reference(s: kpsdk.Session, addr: int, start: int, iset: kpsdk.arch.InstructionSet) -> Decoded | None:
    """The instruction at ``addr`` by one detailed decode from ``start`` (how
    registration decoded before; Thumb's IT blocks give their condition to the
    instructions after them), or None inside an instruction; on its own where
    the walk stops before ``addr``."""
    md = capstone.Cs(*iset.capstone)
    md.detail = True
    code = s.target.read_memory(start, addr - start + 16)
    for insn in md.disasm(code, start):
        if insn.address == addr:
            arch = s.arch
            boostable, refused = arch.insn.classify(insn)
            cond = arch.conditions.of(insn) if arch.conditions is not None else None
            slots = arch.delay_slots  # MIPS: refused in a delay slot, whatever the instruction
            if slots is not None and refused is None:
                after = slots.refuses_after(s.target.read_memory(addr - slots.size, slots.size))
                boostable, refused = (boostable, None) if after is None else (False, after)
            return Decoded(insn.address, insn.size, insn.mnemonic, insn.op_str, bytes(insn.bytes),
                           boostable, refused, cond)
        if insn.address < addr < insn.address + insn.size:  # inside it (registration used to miss
            return None  # this when the next instruction did not fit in the 16 bytes it read past addr)
    if start == addr:
        return None
    return reference(s, addr, addr, iset)


@pytest.mark.parametrize("short", [None, 0, 1], ids=["walk by chunks", "walk to the function's end",
                                                    "a symbol size one byte short"])
@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_every_address_decodes_as_a_full_decode_does(arch: str, short: int | None) -> None:
    """Also when the walk stops at the function's end, as registration's does (the
    instructions at the end, and the bytes inside them, included), and when the symbol's
    size cuts its last instruction: a byte inside that one is still inside an instruction."""
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        funcs = [sym for sym in s.symbols if sym.kind == "func" and sym.size]
        assert len(funcs) > 5
        for sym in funcs:
            start = sym.address & ~1 if s.arch.has_thumb else sym.address
            iset = s.target.iset_at(sym.address, sym)
            end = None if short is None else start + sym.size - short
            for addr in range(start, start + sym.size - (short or 0)):
                assert s.target.decode_at(addr, start, iset, end) == reference(s, addr, start, iset), \
                    f"{sym.name}+{addr - start:#x}"


def test_changed_code_is_walked_again() -> None:
    """x86_64 ``inc`` is ``lea eax, [rdi + 1]; ret``: inc+1 is inside the lea, until the
    function is rewritten as four one-byte nops."""
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        inc = s.symbols.resolve("inc")
        with pytest.raises(kpsdk.KprobeError) as e:
            s.register_kprobe(kpsdk.Kprobe(addr=inc + 1))
        assert e.value.errno == errno.EILSEQ
        s.write_memory(inc, b"\x90\x90\x90\x90")
        kp = kpsdk.Kprobe(addr=inc + 1)
        s.register_kprobe(kp)
        s.unregister_kprobe(kp)


@pytest.mark.parametrize("optimize", [True, False], ids=["hook", "breakpoint"])
@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_a_probe_registered_while_running_fires_and_unregistering_restores(arch: str, optimize: bool) -> None:
    """From a hit at loop's entry, a probe on inc's second instruction, which Unicorn
    translated in an earlier run: it fires on each of the 100 calls that follow."""
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        s.kprobes_optimization = optimize
        inc = s.symbols.resolve("inc")
        entry = inc & ~1 if s.arch.has_thumb else inc
        iset = s.target.iset_at(inc, s.symbols.containing(entry))
        first = s.target.decode_at(entry, entry, iset)
        assert first is not None
        second = entry + first.size
        before = bytes(s.target.uc.mem_read(entry, 16))  # type: ignore[attr-defined]
        assert s.call("loop", 100) == fixtures.EXPECTED["loop"]  # inc is translated now
        late = kpsdk.Kprobe(addr=second | (1 if iset.thumb_bit else 0), pre_handler=lambda p, regs: 0)

        def on_loop(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            s.register_kprobe(late)
            return 0

        kp = kpsdk.Kprobe(symbol_name="loop", pre_handler=on_loop)
        s.register_kprobe(kp)
        assert s.call("loop", 100) == fixtures.EXPECTED["loop"]
        assert kp.hits == 1 and late.hits == 100
        s.unregister_kprobe(late)
        s.unregister_kprobe(kp)
        assert bytes(s.target.uc.mem_read(entry, 16)) == before  # type: ignore[attr-defined]
        assert s.call("loop", 100) == fixtures.EXPECTED["loop"] and late.hits == 100


@pytest.mark.parametrize("remapped", [False, True])
def test_breakpoint_traps_in_host_backed_code_and_after_a_remap(remapped: bool) -> None:
    """Executable memory is host-backed, so a breakpoint-path trap is a memmove into kpsdk's buffer;
    where the memory was unmapped and mapped again behind kpsdk's back, that buffer is stale and the
    trap must still reach the code that runs.  Either way: every call hits, reads show the
    program's bytes (K10), and unregistering puts them back (the function runs unprobed)."""
    s = kpsdk.open("unicorn:x86_64")
    code = s.arch.assemble("lea eax, [rdi + 1]; ret", 0x400000)
    buf = s.target.map(0x400000, 0x1000, "rx")
    assert buf is not None  # host-backed by default
    if remapped:
        s.target.uc.mem_unmap(0x400000, 0x1000)
        s.target.uc.mem_map(0x400000, 0x1000, 5)
    s.target.uc.mem_write(0x400000, code)
    s.kprobes_optimization = False  # the breakpoint path: a trap written over the instruction
    seen: list[int] = []
    p = kpsdk.Kprobe(addr=0x400000, pre_handler=lambda p, r: seen.append(r.arg(0)))
    s.register_kprobe(p)
    assert "[OPTIMIZED]" not in s.list()
    assert [s.call(0x400000, i) for i in (1, 2, 3)] == [2, 3, 4] and seen == [1, 2, 3]
    assert s.read_memory(0x400000, len(code)) == code
    assert bytes(s.target.uc.mem_read(0x400000, 1)) != code[:1]  # the trap is in the memory that runs
    s.unregister_kprobe(p)
    assert bytes(s.target.uc.mem_read(0x400000, len(code))) == code
    assert s.call(0x400000, 9) == 10 and seen == [1, 2, 3]
    s.close()


def test_instructions_with_the_same_bytes_keep_their_own_operands() -> None:
    """Classification is kept per distinct instruction bytes (``kpsdk/arch/decode.py``), but a
    relative branch's operand text names its own target: two copies of one ``jmp rel8`` and
    ``call rel32`` decode as a detailed decode at each address does."""
    with kpsdk.open("unicorn:x86_64") as s:
        code = 0x400000
        s.target.map(code, 0x2000, "rx")  # type: ignore[attr-defined]
        body = bytes.fromhex("eb02" "9090" "e800000000" "c3")
        for at in (code, code + 0x1000):
            s.target.uc.mem_write(at, body)  # type: ignore[attr-defined]
        iset = s.target.iset_at(code, None)
        for at in (code, code + 0x1000):
            for off in (0, 2, 4, 9):
                assert s.target.decode_at(at + off, at + off, iset) == reference(s, at + off, at + off, iset)
        first, second = (s.target.decode_at(at, at, iset) for at in (code, code + 0x1000))
        assert first is not None and second is not None and first.op_str != second.op_str


def test_a_batch_leaves_the_garbage_collector_as_it_found_it() -> None:
    """``register_kprobes`` pauses Python's cyclic collector for the batch, also when it fails."""
    import gc

    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        inc = s.symbols.resolve("inc")
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            try:
                probes = [kpsdk.Kprobe(addr=inc), kpsdk.Kprobe(addr=inc + 1)]  # inc+1 is inside the lea
                with pytest.raises(kpsdk.KprobeError):
                    s.register_kprobes(probes)
                assert gc.isenabled() is enabled
                assert not probes[0].registered  # K8: none
                s.register_kprobes(probes[:1])
                assert gc.isenabled() is enabled
                s.unregister_kprobes(probes[:1])
            finally:
                gc.enable()
