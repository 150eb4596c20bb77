"""Handlers that misbehave, probes at odd places, and programs that pass bad pointers.

Whatever a handler does, the host process survives and ``run()`` ends with a
kpsdk error that names the probe (K4), or the program goes on as it should.
"""

from __future__ import annotations

import errno

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.regs import PtRegs


@pytest.fixture
def s(arch: str) -> kpsdk.Session:
    return kpsdk.open(f"elf:{fixtures.path(arch)}")


# -- handlers that call what cannot run inside a hit -------------------------------------------


@pytest.mark.parametrize("timeout", [None, 1.0])
def test_run_from_a_handler_is_a_clear_error(s: kpsdk.Session, timeout: float | None) -> None:
    """A nested run() used to abort the interpreter (Unicorn joins its timer thread
    twice) or fault at pc=0; it is refused at once, inside the handler."""
    caught: list[BaseException] = []

    def pre(p: kpsdk.Probe, regs: PtRegs) -> int:
        try:
            s.run(timeout=timeout)
        except kpsdk.KpsdkError as e:
            caught.append(e)
        return 0

    s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=pre))
    assert s.run(timeout=5) == 0
    assert s.console == fixtures.EXPECTED_OUTPUT
    assert len(caught) == 5 and "run() was called while the target is running" in str(caught[0])


def test_an_uncaught_nested_run_ends_the_run_with_the_probe_named(s: kpsdk.Session) -> None:
    kp = s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=lambda p, regs: s.run(timeout=1)))
    with pytest.raises(kpsdk.ProbeHandlerError, match=r"pre_handler of <Kprobe fact\+0x0 registered>") as e:
        s.run(timeout=5)
    assert isinstance(e.value.__cause__, kpsdk.KpsdkError)
    s.unregister_kprobe(kp)
    assert s.run(timeout=5) == 0  # the program goes on from the probe, where it stopped
    assert s.console == fixtures.EXPECTED_OUTPUT


def test_close_from_a_handler_is_refused_and_the_session_stays_usable(s: kpsdk.Session) -> None:
    s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, regs: s.close()))
    with pytest.raises(kpsdk.ProbeHandlerError, match="close"):
        s.run(timeout=5)
    assert not s.closed
    assert s.call("sub", 9, 2) == 7


def test_a_raw_unicorn_hook_may_not_start_a_run() -> None:
    s = kpsdk.open(f"elf:{fixtures.path('x86_64')}")
    uc = s.target.uc  # type: ignore[attr-defined]
    errors: list[BaseException] = []

    def hook(uc: object, addr: int, size: int, user: object) -> None:
        try:
            s.run(timeout=1)
        except kpsdk.KpsdkError as e:
            errors.append(e)
            s.stop()

    add = s.symbols.resolve("add")
    uc.hook_add(__import__("unicorn").UC_HOOK_CODE, hook, begin=add, end=add)
    s.run(timeout=5)
    assert errors and "while the target is running" in str(errors[0])


# -- what a handler returns, and fault handlers that fail --------------------------------------


class Untruthful:
    def __bool__(self) -> bool:
        raise ValueError("no truth value")


def test_a_return_value_without_a_truth_value_is_the_handlers_error(s: kpsdk.Session) -> None:
    s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, regs: Untruthful()))
    with pytest.raises(kpsdk.ProbeHandlerError, match="pre_handler.*ValueError: no truth value"):
        s.run(timeout=5)


def test_an_entry_handler_return_without_a_truth_value_goes_to_its_fault_handler(s: kpsdk.Session) -> None:
    trapnrs: list[int] = []
    rp = kpsdk.Kretprobe(symbol_name="add", entry_handler=lambda ri, regs: Untruthful(),
                         fault_handler=lambda p, regs, trapnr: trapnrs.append(trapnr) or 1)
    s.register_kretprobe(rp)
    assert s.run(timeout=5) == 0
    assert trapnrs == [kpsdk.TRAP_HANDLER_EXCEPTION]


def fails(p: object, regs: PtRegs, trapnr: int) -> int:
    raise RuntimeError("the fault handler failed")


def test_a_fault_handler_that_raises_is_reported_as_such(s: kpsdk.Session) -> None:
    s.register_kprobe(kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, regs: 1 // 0, fault_handler=fails))
    with pytest.raises(kpsdk.ProbeHandlerError) as e:
        s.run(timeout=5)
    assert e.value.phase == "fault_handler" and "the fault handler failed" in str(e.value)
    assert isinstance(e.value.__cause__, RuntimeError)


def test_a_kretprobe_fault_handler_that_raises_is_reported_as_such(s: kpsdk.Session) -> None:
    rp = kpsdk.Kretprobe(symbol_name="fact", handler=lambda ri, regs: 1 // 0, fault_handler=fails)
    s.register_kretprobe(rp)
    entry = s.symbols.format(s.target.manager.point_of(rp).addr)  # ppc64le: the local entry, fact+0x8
    with pytest.raises(kpsdk.ProbeHandlerError) as e:
        s.run(timeout=5)
    assert e.value.phase == "fault_handler" and e.value.where == entry and entry.startswith("fact+")


def test_a_watchpoint_fault_handler_that_raises_is_reported_as_such(s: kpsdk.Session) -> None:
    wp = kpsdk.Watchpoint(symbol_name="counter", length=4, type="w", handler=lambda wp, regs, a: 1 // 0,
                          fault_handler=fails)
    s.register_watchpoint(wp)
    with pytest.raises(kpsdk.ProbeHandlerError) as e:
        s.run(timeout=5)
    assert e.value.phase == "fault_handler"


# -- where a probe lands: addr + offset, as the kernel adds them -------------------------------


def test_addr_plus_offset_is_probed_where_the_kernel_would(s: kpsdk.Session) -> None:
    fact = s.symbols.get("fact")
    second = fact.address + len(s.target.decode_at(fact.address, fact.address, None).raw)  # type: ignore[union-attr]
    offset = second - fact.address
    by_addr = kpsdk.Kprobe(addr=fact.address | (1 if fact.thumb else 0), offset=offset)
    by_name = kpsdk.Kprobe(symbol_name="fact", offset=offset)
    s.register_kprobes([by_addr, by_name])
    points = [a for a, point in s.target.manager.points.items() if by_addr in point.probes]
    assert points == [second] and by_name in s.target.manager.points[second].probes
    assert f"fact+{offset:#x}" in s.list()
    s.unregister_kprobes([by_addr, by_name])
    s.register_kprobe(by_addr)  # registering again lands at the same place (the offset is not added twice)
    assert by_addr in s.target.manager.points[second].probes


@pytest.mark.parametrize("offset", [-1, -4, 1 << 32])
def test_an_offset_outside_an_unsigned_int_is_einval(s: kpsdk.Session, offset: int) -> None:
    for probe in (kpsdk.Kprobe(symbol_name="sub", offset=offset),
                  kpsdk.Kprobe(addr=s.symbols.resolve("sub"), offset=offset),
                  kpsdk.Kretprobe(symbol_name="sub", offset=offset)):
        with pytest.raises(kpsdk.KprobeError) as e:
            s.register(probe)
        assert e.value.errno == errno.EINVAL and "unsigned int" in str(e.value)
    assert s.list() == ""


# -- registration leaves nothing behind -------------------------------------------------------------


def test_a_kretprobe_too_big_to_make_leaves_no_trampoline(s: kpsdk.Session) -> None:
    rp = kpsdk.Kretprobe(symbol_name="add", data_size=1 << 40)
    with pytest.raises(kpsdk.KprobeError) as e:
        s.register_kretprobe(rp)
    assert e.value.errno == errno.E2BIG  # the kernel's KRETPROBE_MAX_DATA_SIZE
    assert s.list() == "" and not rp.registered
    ok = kpsdk.Kretprobe(symbol_name="add", data_size=16)
    s.register_kretprobe(ok)
    assert "kretprobe_trampoline" in s.list()
    s.unregister_kretprobe(ok)
    assert s.list() == ""


# -- a program that passes the system a bad pointer --------------------------------------------------

#: per arch: a nop (kpsdk sets the call's registers on it), the system-call trap, a return
SYSCALL_STUBS = {
    "x86_64": "90 0f05 c3",
    "i386": "90 cd80 c3",
    "arm": "00f020e3 000000ef 1eff2fe1",
    "thumb": "00bf 00df 7047",
    "riscv64": "13000000 73000000 67800000",
    "ppc64": "60000000 44000002 4e800020",
    "ppc64le": "00000060 02000044 2000804e",  # the same three instructions, little-endian
    "aarch64": "1f2003d5 010000d4 c0035fd6",  # nop; svc #0; ret
}


def write_syscall(arch: str, buf: int | None, count: int) -> tuple[int, str]:
    """``write(1, buf, count)`` made by guest code: its result and what reached the console.

    ``buf`` None: the last 3 bytes of the stub's own page, the next page unmapped."""
    s = kpsdk.open(f"unicorn:{arch}")
    code = s.target._area - 0x10000  # type: ignore[attr-defined]
    s.target.map(code, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.uc.mem_write(code, bytes.fromhex(SYSCALL_STUBS[arch].replace(" ", "")))  # type: ignore[attr-defined]
    sys = s.arch.syscalls
    assert sys is not None and not s.target.is_mapped(code + 0x1000)
    at = code + 0x1000 - 3 if buf is None else buf

    def set_call(p: kpsdk.Probe, regs: PtRegs) -> int:
        regs[sys.number] = sys.calls["write"]
        regs[sys.args[0]], regs[sys.args[1]], regs[sys.args[2]] = 1, at, count
        return 0

    thumb = 1 if arch == "thumb" else 0
    s.register_kprobe(kpsdk.Kprobe(addr=code | thumb, pre_handler=set_call))
    return s.call(code | thumb), s.console


def test_write_from_an_unmapped_buffer_is_efault(arch: str) -> None:
    linux = kpsdk.get_registry().arch(arch).syscalls.linux  # type: ignore[union-attr]
    # ppc64 says a call failed with CR0.SO and the positive errno in r3 (its ELF ABI)
    efault = errno.EFAULT if linux is not None and linux.error_flag is not None else -errno.EFAULT
    assert write_syscall(arch, 0x10, 4) == (efault, "")


def test_write_stops_at_the_first_unmapped_page_and_a_huge_count_allocates_nothing() -> None:
    assert write_syscall("x86_64", None, 1 << 62) == (3, "\0\0\0")
