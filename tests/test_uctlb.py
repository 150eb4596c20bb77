"""Unicorn's virtual TLB filled by kpsdk (kpsdk/targets/unicorn/tlb.py).

Guest stores to memory that is not executable take Unicorn's fast path; what
must not change is what a program sees: code it rewrites runs rewritten, and a
mapping's permissions still hold after fast-path stores to it.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref

import pytest
import unicorn

import kpsdk
from kpsdk.errors import KpsdkError
from kpsdk.targets.unicorn.tlb import flush_tlb

CODE, PAGE, DATA = 0x100000, 0x200000, 0x300000


@pytest.fixture(autouse=True, params=["native", "python"])
def fill_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> str:
    """Every test twice: with the C fill (tlbfill.c), and with the Python fill it falls back
    to on a machine without gcc (an empty cache, no gcc on the PATH), which must behave the
    same: it is the reference the C fill is compared against."""
    from kpsdk.targets.unicorn import tlb

    if request.param == "python":
        monkeypatch.setenv("KPSDK_CACHE", str(tmp_path))
        monkeypatch.setattr("kpsdk.nativebuild.shutil.which", lambda name: None)
        monkeypatch.setattr(tlb, "_native", None)
        monkeypatch.setattr(tlb, "_native_tried", False)
    yield request.param
    if request.param == "python":
        assert tlb._native is None  # the fallback was the one tested


def _check_kind(s: kpsdk.Session, kind: str) -> None:
    """The fill asked for; MIPS always has the Python one (only it settles a delay slot's state)."""
    tlb = s.target.tlb  # type: ignore[attr-defined]
    assert tlb is not None and tlb.native == (kind == "native" and s.arch.delay_slots is None)


def _words(ws: tuple[int, ...], endian: str) -> bytes:
    return b"".join(w.to_bytes(4, endian) for w in ws)  # type: ignore[arg-type]


#: per arch: ``store2(a, b, v)`` storing the byte v at a and then at b; ``one()`` returning 1;
#: the offset in ``one`` of the byte to patch and the value that makes it return 2
PROGRAMS: dict[str, tuple[bytes, bytes, int, int]] = {
    # mov [rdi], dl; mov [rsi], dl; ret || mov eax, 1; ret
    "x86_64": (bytes.fromhex("88178816c3"), bytes.fromhex("b801000000c3"), 1, 2),
    # mov eax, [esp+4]; mov ecx, [esp+8]; mov edx, [esp+12]; mov [eax], dl; mov [ecx], dl; ret
    "i386": (bytes.fromhex("8b4424048b4c24088b54240c88108811c3"), bytes.fromhex("b801000000c3"), 1, 2),
    # strb r2, [r0]; strb r2, [r1]; bx lr || mov r0, #1; bx lr
    "arm": (_words((0xE5C02000, 0xE5C12000, 0xE12FFF1E), "little"), _words((0xE3A00001, 0xE12FFF1E), "little"), 0, 2),
    # sb a2, 0(a0); sb a2, 0(a1); ret || addi a0, zero, 1; ret (the immediate's low bits: byte 2's high nibble)
    "riscv64": (_words((0x00C50023, 0x00C58023, 0x00008067), "little"), _words((0x00100513, 0x00008067), "little"),
                2, 0x20),
    # stb r5, 0(r3); stb r5, 0(r4); blr || li r3, 1; blr
    "ppc64": (_words((0x98A30000, 0x98A40000, 0x4E800020), "big"), _words((0x38600001, 0x4E800020), "big"), 3, 2),
    # strb w2, [x0]; strb w2, [x1]; ret || mov w0, #1; ret (the immediate's low bits: byte 0's bits 5-7)
    "aarch64": (_words((0x39000002, 0x39000022, 0xD65F03C0), "little"), _words((0x52800020, 0xD65F03C0), "little"),
                0, 0x40),
    # sb a2, 0(a0); sb a2, 0(a1); jr ra; nop || jr ra; li v0, 1 (in the delay slot: the immediate's low byte)
    **{arch: (_words((0xA0860000, 0xA0A60000, 0x03E00008, 0), endian), _words((0x03E00008, 0x24020001), endian),
              7 if endian == "big" else 4, 2)
       for arch, endian in (("mips", "big"), ("mipsel", "little"), ("mips64el", "little"))},
}


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_code_a_program_rewrites_with_its_own_stores_runs_rewritten(arch: str, fill_kind: str) -> None:
    """The case a fill that made the page data-only would break: ``one``'s code is
    translated, the TLB is emptied (a mapping changed), the program's first store to
    that page lands beside the code and its second rewrites the code.  Unicorn drops
    the stale translation only if that second store takes the slow path, so a page
    of an executable mapping must keep its stores there, also when that mapping was
    made after the fill last read the memory map."""
    store2, one, off, value = PROGRAMS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, store2)
    s.call(CODE, DATA, DATA + 1, 7)  # fills before the executable page exists: the map must be re-read
    s.target.map(PAGE, 0x1000, "rwx")  # type: ignore[attr-defined]
    s.write_memory(PAGE, one)
    assert s.call(PAGE) == 1
    s.target.map(DATA + 0x1000, 0x1000, "rw")  # type: ignore[attr-defined]  # a mapping change empties the TLB
    s.call(CODE, PAGE + 0x200, PAGE + off, value)  # 0x200: ARM's TLB pages are 1 KiB
    assert s.read_memory(PAGE + off, 1) == bytes([value])
    assert s.call(PAGE) == 2
    assert s.target.tlb.fills > 0  # type: ignore[attr-defined]  # the fill is kpsdk's, ARM's too
    _check_kind(s, fill_kind)


def test_a_tlb_miss_inside_a_thumb_it_block_leaves_no_it_state_behind(fill_kind: str) -> None:
    """In the virtual TLB mode Unicorn 2.1.4 restores the CPU state of the accessing
    instruction at every fill, Thumb's IT state included; a load that missed inside an IT
    block left that state behind, and the next block ran as if still inside it: its second
    instruction, an unconditional ``mov``, was skipped (Debian's armhf bzip2 wrote a corrupt
    stream).  kpsdk's fill clears the restored IT state (tlb.py).  The function returns
    7 + the word at r0."""
    # cmp r0, r0; ite eq; ldreq r2, [r0]; movne r3, #1; b 1f
    # 1: mov.w r12, #9; mov.w r1, #7; add.w r0, r1, r2; bx lr
    code = bytes.fromhex("80420cbf02680123ffe74ff0090c4ff0070101eb02007047")
    s = kpsdk.open("unicorn:arm")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, code)
    s.target.uc.mem_write(DATA, (1000).to_bytes(4, "little"))  # type: ignore[attr-defined]
    flush_tlb(s.target.uc)  # type: ignore[attr-defined]  # the load misses (kpsdk's own writes fill)
    _check_kind(s, fill_kind)
    assert s.call(CODE | 1, DATA) == 1007
    assert s.call(CODE | 1, DATA) == 1007  # the TLB filled: no miss this time


#: per arch: ``load2(a)``, two loads of the byte at a (the second returned), and the second's offset
LOADS: dict[str, tuple[bytes, int]] = {
    "x86_64": (bytes.fromhex("0fb6070fb607c3"), 3),  # movzx eax, byte [rdi] (twice); ret
    "i386": (bytes.fromhex("8b4424040fb6080fb600c3"), 7),  # mov eax, [esp+4]; movzx ecx/eax, byte [eax]; ret
    "arm": (_words((0xE5D01000, 0xE5D00000, 0xE12FFF1E), "little"), 4),  # ldrb r1, [r0]; ldrb r0, [r0]; bx lr
    "riscv64": (_words((0x00054583, 0x00054503, 0x00008067), "little"), 4),  # lbu a1/a0, 0(a0); ret
    "ppc64": (_words((0x88830000, 0x88630000, 0x4E800020), "big"), 4),  # lbz r4/r3, 0(r3); blr
    "aarch64": (_words((0x39400001, 0x39400000, 0xD65F03C0), "little"), 4),  # ldrb w1/w0, [x0]; ret
    # lbu v1, 0(a0); lbu v0, 0(a0); jr ra; nop
    **{arch: (_words((0x90830000, 0x90820000, 0x03E00008, 0), endian), 4)
       for arch, endian in (("mips", "big"), ("mipsel", "little"), ("mips64el", "little"))},
}


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_a_mapping_made_unreadable_inside_a_run_refuses_the_next_load(arch: str) -> None:
    """Unicorn 2.1.4 keeps the TLB entry when ``mem_protect`` takes away only the read
    permission, and a load that hits it takes the fast path unchecked.  Between the
    program's two loads a pre_handler takes the permission away (as a Linux program's
    ``mprotect`` does inside a run): kpsdk empties the TLB, so the second load is refused."""
    code, second = LOADS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, code)
    s.write_memory(DATA + 8, b"\x05")
    assert s.call(CODE, DATA + 8) == 5
    uc = s.target.uc  # type: ignore[attr-defined]

    def take_read(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
        uc.mem_protect(DATA, 0x1000, unicorn.UC_PROT_WRITE)
        return 0

    s.register_kprobe(kpsdk.Kprobe(addr=CODE + second, pre_handler=take_read))
    with pytest.raises(KpsdkError) as info:
        s.call(CODE, DATA + 8)
    assert "read" in str(info.value).lower()


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_a_mapping_made_read_only_refuses_stores_after_fast_ones(arch: str) -> None:
    """Stores to a data page go the fast way after the first; taking the write
    permission away must still refuse the next store, with a clear error."""
    store2, _, _, _ = PROGRAMS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
    s.write_memory(CODE, store2)
    for v in range(1, 4):
        s.call(CODE, DATA + 8, DATA + 16, v)
    assert s.read_memory(DATA + 8, 9) == bytes([3]) + bytes(7) + bytes([3])
    s.target.uc.mem_protect(DATA, 0x1000, unicorn.UC_PROT_READ)  # type: ignore[attr-defined]
    with pytest.raises(KpsdkError) as info:
        s.call(CODE, DATA + 8, DATA + 16, 9)
    assert "write" in str(info.value).lower()
    assert s.read_memory(DATA + 8, 1) == bytes([3])



def _session_with(arch: str) -> tuple[kpsdk.Session, int, int]:
    """``store2`` in CODE, ``one`` at PAGE (rwx, translated once); the byte to patch and its value."""
    store2, one, off, value = PROGRAMS[arch]
    s = kpsdk.open(f"unicorn:{arch}")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(PAGE, 0x1000, "rwx")  # type: ignore[attr-defined]
    s.write_memory(CODE, store2)
    s.write_memory(PAGE, one)
    assert s.call(PAGE) == 1
    return s, off, value


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_code_rewritten_after_its_page_lost_and_regained_exec_runs_rewritten(arch: str) -> None:
    """Unicorn 2.1.4 keeps TLB entries when ``mem_protect`` changes only the execute
    permission: a data-only entry made while the page was not executable must not
    survive the page becoming executable again (its stores would skip the
    translated code).  A Linux program's ``mprotect`` takes the same call."""
    s, off, value = _session_with(arch)
    uc = s.target.uc  # type: ignore[attr-defined]
    uc.mem_protect(PAGE, 0x1000, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
    s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]  # the TLB emptied
    s.call(CODE, PAGE + 0x200, PAGE + 0x201, 9)  # the page's entry made by data accesses
    uc.mem_protect(PAGE, 0x1000, unicorn.UC_PROT_ALL)
    s.call(CODE, PAGE + 0x202, PAGE + off, value)
    assert s.call(PAGE) == 2


@pytest.mark.parametrize("arch", sorted(PROGRAMS))
def test_code_written_while_not_executable_runs_once_executable_again(arch: str) -> None:
    """A JIT's pattern: code made writable and not executable, rewritten, made
    executable again.  Its stores met no translated code to drop (the mapping was not
    executable), so making the range executable drops the translations."""
    s, off, value = _session_with(arch)
    uc = s.target.uc  # type: ignore[attr-defined]
    uc.mem_protect(PAGE, 0x1000, unicorn.UC_PROT_READ | unicorn.UC_PROT_WRITE)
    s.call(CODE, PAGE + 0x200, PAGE + off, value)
    uc.mem_protect(PAGE, 0x1000, unicorn.UC_PROT_READ | unicorn.UC_PROT_EXEC)
    assert s.call(PAGE) == 2


def test_ctrl_c_during_a_run_of_tlb_misses_raises_keyboard_interrupt(fill_kind: str) -> None:
    """A run touching more pages than the TLB holds spends its Python time in the fill,
    so Ctrl-C's KeyboardInterrupt arrives there; it must end the run as itself, not as
    a CPU fault (nor be lost)."""
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.map(DATA, 0x1000000, "rw")  # type: ignore[attr-defined]  # 4,096 pages
    # for (n = rdi; n; n--) for (p = DATA; p < DATA + 16 MiB; p += 4 KiB) eax += *p
    s.write_memory(CODE, bytes.fromhex("31c048be" + DATA.to_bytes(8, "little").hex() + "48b9"
                                       + (DATA + 0x1000000).to_bytes(8, "little").hex()
                                       + "03064881c6001000004839ce72f248ffcf75d9c3"))
    _check_kind(s, fill_kind)
    s.call(CODE, 2)  # translated, and the fill built (the C one: ~0.1 us a miss, Python's ~2 us)
    start = time.perf_counter()
    s.call(CODE, 20)
    passes = max(4, int(6.0 / max((time.perf_counter() - start) / 20, 1e-5)))  # ~6 s of misses
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.perf_counter()
    try:
        with pytest.raises(KeyboardInterrupt):
            s.call(CODE, passes)
    finally:
        timer.cancel()
    assert time.perf_counter() - start < 3.0
    assert s.target.tlb.fills > 4096  # type: ignore[attr-defined]  # the fill ran


def test_a_closed_session_s_engine_is_freed() -> None:
    """The fill is registered for the unraisable hook (Ctrl-C above) weakly: a closed
    session's target, its engine and the guest memory go with it."""
    refs = []
    for _ in range(3):
        s = kpsdk.open("unicorn:x86_64")
        s.target.map(DATA, 0x1000, "rw")  # type: ignore[attr-defined]
        refs.append(weakref.ref(s.target))
        s.close()
        del s
    gc.collect()
    assert [r() for r in refs] == [None, None, None]
