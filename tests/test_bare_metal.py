"""The fixture program as a bare-metal payload under qemu-system (no Linux,
:mod:`kpsdk.fixtures.bare`): riscv64 on QEMU's ``virt`` board, started in S-mode by its bundled
OpenSBI, big-endian ppc64 (ELFv1) on ``pseries``, entered in real mode by VOF, and big-endian
MIPS (o32) on ``malta``, entered in kernel mode at its KSEG0 address.

A quick qemu-system target on each (a second or so of guest time): kprobes by name, a
kretprobe and a hardware write watchpoint on the program's own functions and ``counter``,
checked against what the program itself prints on the board's console (the same lines as
under qemu-user and Unicorn) and against its source: ``fact(5)`` recurses down to 1, and
``counter`` is written by ``bump`` three times, 0 -> 1 -> 3 -> 42.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk.fixtures import EXPECTED_OUTPUT
from kpsdk.fixtures.bare import BARE_ARCHS, BARE_QEMU_ARGS, build_bare
from kpsdk.fixtures.build import FIXTURES
from tests.conftest import require_tool


@pytest.mark.parametrize("arch", BARE_ARCHS)
def test_payload_probes_kretprobes_and_watchpoint(arch: str, tmp_path: Path) -> None:
    fixture = FIXTURES[arch]
    require_tool(fixture.compilers[0], fixture.package)
    board = kpsdk.get_registry().arch(arch).qemu_system
    assert board is not None
    require_tool(board.binary, board.package)
    require_tool("gdb-multiarch", "gdb-multiarch")
    payload = build_bare(arch, tmp_path)
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(payload), qemu_args=list(BARE_QEMU_ARGS[arch])) as s:
        entries: list[int] = []
        returns: list[int] = []
        writes: list[tuple[int, int, str, int]] = []

        @s.kprobe("fact")
        def on_fact(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            entries.append(regs.arg(0))
            return 0

        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="fact",
                                             handler=lambda ri, regs: returns.append(regs.signed("return_value"))))

        def on_write(wp: kpsdk.Watchpoint, regs: kpsdk.PtRegs, access: Any) -> None:
            writes.append((access.old, access.new, s.symbols.lookup(regs.ip)[0], s.read_int(access.addr, 4)))

        assert s.register_watchpoint(kpsdk.Watchpoint(symbol_name="counter", length=4, type="w",
                                                      handler=on_write)) == 0
        assert s.run(timeout=120) == 0  # SBI system reset / RTAS power-off: the board powered off
        console = s.console
    # what the payload printed: the fixture's output, line for line, after the firmware's banner
    assert console.replace("\r", "").endswith(EXPECTED_OUTPUT), console[-1000:]
    assert "fact=120\n" in EXPECTED_OUTPUT and "counter=42\n" in EXPECTED_OUTPUT
    assert entries == [5, 4, 3, 2, 1]  # fact(5) and its recursion
    assert returns == [1, 2, 6, 24, 120]  # innermost first, the last the printed fact=120
    assert writes == [(0, 1, "bump", 1), (1, 3, "bump", 3), (3, 42, "bump", 42)]
