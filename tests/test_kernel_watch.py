"""A hardware write watchpoint on a real kernel's global, found by name in the kallsyms
table of Debian's stock vmlinuz, under qemu-system-x86_64 (TCG) through gdb.

The workload writes ``vm_swappiness`` through ``/proc/sys/vm/swappiness`` and prints the
value the kernel shows before and after each write: the ground truth the watchpoint's
reports must match, write for write, in order, and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

#: distinct values, each different from the one before (gdb reports a write only when it changes the value)
WRITES = (37, 61, 5)
WORKLOAD = "\n".join(
    ['echo "KPSDK swappiness value=$(cat /proc/sys/vm/swappiness)"']
    + [f'echo {v} > /proc/sys/vm/swappiness\necho "KPSDK swappiness value=$(cat /proc/sys/vm/swappiness)"'
       for v in WRITES]
) + "\n"


def test_write_watchpoint_on_a_kernel_global(debian_kernel: Path, kernel_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload=WORKLOAD)
    with kpsdk.open("qemu-system:x86_64", kernel=str(debian_kernel), initrd=str(initrd)) as s:
        seen: list[tuple[Any, str, int]] = []

        def on_write(wp: kpsdk.Watchpoint, regs: kpsdk.regs.PtRegs, access: Any) -> None:
            # after the access: the kernel's memory holds the new value; regs.ip is in kernel text
            seen.append((access, s.symbols.lookup(regs.ip)[0], s.read_int(access.addr, 4)))

        wp = kpsdk.Watchpoint(symbol_name="vm_swappiness", length=4, type="w", handler=on_write)
        assert s.register_watchpoint(wp) == 0
        with pytest.raises(kpsdk.KprobeError, match="cannot watch type 'r'"):  # x86: no read-only type
            s.register_watchpoint(kpsdk.Watchpoint(symbol_name="vm_swappiness", length=4, type="r"))
        assert s.run(timeout=300) == 0  # the guest powered off
        values = [int(m.fields["value"]) for m in kernel.parse_markers(s.console) if m.action == "swappiness"]
        assert len(values) == len(WRITES) + 1, s.console[-2000:]
        expected = list(zip(values, values[1:], strict=False))
        assert [(a.old, a.new) for a, _, _ in seen] == expected
        for access, function, in_memory in seen:
            assert access.kind == "w" and access.addr == s.symbols.resolve("vm_swappiness") and access.size == 4
            assert in_memory == access.new
            assert function != "start_kernel"  # stopped in the code that wrote it (the sysctl handler)
