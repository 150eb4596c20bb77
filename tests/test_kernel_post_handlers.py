"""post_handlers (K3) on Debian's kernels through QEMU's gdbstub, on every arch.

A post_handler runs once per hit, after its pre_handler, with the probed instruction
executed: its ``ip`` is the address after that instruction.  The kernel rewrites its own
code after kpsdk decoded it (kpsdk registers before the boot): ftrace turns each
function's entry into nops at boot, and on riscv64 the four compressed nops the compiler
left become two 4-byte ones.  Ground truth is therefore the guest's memory at the hit:
the instruction there, decoded by the test, gives the address the post_handler must see.

Both ways a step ends are checked: in gdb's agent (the run goes on) and through MI (the
pre_handler calls ``stop()``: run() returns with the step done and the post_handler run).
On riscv64 the MI step used to plant a breakpoint and continue (gdb's Linux ABI), so a
pending timer interrupt ran inside the step (test_kernel_watch_arches.py caught that).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import capstone
import pytest

import kpsdk
from tests.conftest import require_tool
from tests.test_kernel_arches import PROBED_ARCHS

pytestmark = pytest.mark.kernel

FUNCTION = "do_sys_openat2"
WORKLOAD = "cat /proc/version > /dev/null\n"
#: the hit whose pre_handler stops the run (the step then ends through MI)
STOP_AT = 3

def length_at(arch: str, code: bytes, addr: int) -> int:
    """The length of the instruction at the start of ``code`` (the arch's kernel instruction set)."""
    insn = next(capstone.Cs(*kpsdk.get_registry().arch(arch).iset().capstone).disasm(code, addr), None)
    assert insn is not None, f"no instruction at {addr:#x}: {code.hex()}"
    return int(insn.size)


@pytest.mark.parametrize("arch", ("x86_64", *PROBED_ARCHS))
def test_post_handlers_follow_the_instruction_the_cpu_ran(arch: str, arch_kernel: Callable[[str], Path],
                                                          arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel(arch), arch_initramfs(arch, WORKLOAD)
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        start = s.symbols.resolve(FUNCTION)
        before = s.read_memory(start, 32)  # the image's bytes: the boot has not run
        events: list[tuple[str, int, int]] = []  # (handler, hit, ip)
        expected: list[int] = []  # per hit: the address after the instruction at the hit
        now: list[bytes] = []

        def pre(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            events.append(("pre", p.hits, regs.ip))
            code = s.read_memory(regs.ip, 16)
            now.append(code)
            expected.append(regs.ip + length_at(arch, code, regs.ip))
            if p.hits == STOP_AT:
                s.stop()
            return 0

        def post(p: kpsdk.Probe, regs: kpsdk.PtRegs, flags: int) -> None:
            events.append(("post", p.hits, regs.ip))

        s.register_kprobe(kpsdk.Kprobe(symbol_name=FUNCTION, pre_handler=pre, post_handler=post))
        assert s.run(timeout=300) is None  # stopped at hit STOP_AT, its step done
        assert events[-1][:2] == ("post", STOP_AT)
        status = s.run(timeout=300)
        assert status == 0, f"run() gave {status}; the guest's output ends:\n{s.console[-1500:]}"

    hits = len(expected)
    assert hits > STOP_AT
    # one pre, then its post, for every hit: none lost, none doubled
    assert [e[:2] for e in events] == [(kind, n) for n in range(1, hits + 1) for kind in ("pre", "post")]
    assert [e[2] for e in events if e[0] == "post"] == expected
    ip = events[0][2]
    assert start <= ip < start + 16
    if arch == "riscv64":  # the case that needs the code as it is at the hit
        offset = ip - start
        assert length_at(arch, before[offset:], ip) == 2 and length_at(arch, now[0], ip) == 4
