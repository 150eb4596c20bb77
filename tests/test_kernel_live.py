"""A real kernel: Debian's stock amd64 kernel booted under qemu-system-x86_64 (TCG),
probed by name through gdb with symbols from the kernel image's own kallsyms table.

The busybox initramfs runs a workload that prints what it did (``KPSDK ...`` marker
lines); the probes must have seen exactly that: the file names opened, the failed
opens with their negative errno, the processes created with their pids.
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel


def test_kprobes_and_kretprobes_on_a_real_kernel(debian_kernel: Path,
                                                  kernel_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs()
    with kpsdk.open("qemu-system:x86_64", kernel=str(debian_kernel), initrd=str(initrd)) as s:
        assert s.symbols.lookup(s.regs().ip)[0] == "start_kernel"  # the session opens there
        opened: list[str] = []
        faults: list[int] = []

        def user_string(addr: int) -> str | None:
            """A user-space string, or None where its page is not in memory yet (at entry the
            kernel has not touched it; strncpy_from_user would fault it in, a debugger cannot)."""
            try:
                return s.read_string(addr, max=256)
            except kpsdk.TargetFault:
                faults.append(addr)
                return None

        @s.kprobe("do_sys_openat2")
        def on_open(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
            name = user_string(regs.arg(1))  # (dfd, const char __user *filename, how)
            if name is not None:
                opened.append(name)
            return 0

        failed: list[tuple[str | None, int]] = []
        pointers: dict[int, int] = {}

        def open_entry(ri: kpsdk.Kretprobe, regs: kpsdk.regs.PtRegs) -> int:
            pointers[id(ri)] = regs.arg(1)
            return 0

        def open_return(ri: kpsdk.Kretprobe, regs: kpsdk.regs.PtRegs) -> None:
            ret = regs.signed("rax")
            if ret < 0:  # the kernel has read the name by now: its page is present
                failed.append((user_string(pointers[id(ri)]), ret))

        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="do_sys_openat2", entry_handler=open_entry,
                                             handler=open_return))
        clones: list[int] = []
        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="kernel_clone",
                                             handler=lambda ri, regs: clones.append(regs.signed("rax"))))
        assert s.run(timeout=300) == 0  # the guest powered off
        markers = kernel.parse_markers(s.console)
        actions = [m.action for m in markers]
        assert "BEGIN" in actions and "POWEROFF" in actions, s.console[-2000:]
        opens = {m.fields["path"]: m.fields["ret"] for m in markers if m.action == "open"}
        assert opens == {"/etc/kpsdk-hello": "ok", "/kpsdk-missing": "-2", "/etc/kpsdk-hello/sub": "-20"}
        for path, ret in opens.items():
            assert path in opened
            if ret == "ok":
                assert all(name != path for name, _ in failed)
            else:
                assert (path, int(ret)) in failed
        assert (("/kpsdk-missing", -errno.ENOENT) in failed) and (("/etc/kpsdk-hello/sub", -errno.ENOTDIR) in failed)
        spawned = [int(m.fields["pid"]) for m in markers if m.action == "spawn"]
        assert len(spawned) == kernel.SPAWN_COUNT
        assert set(spawned) <= set(clones)  # kernel_clone returned each new pid
        assert s.target._return_bps == {}  # no return breakpoint outlives the run
