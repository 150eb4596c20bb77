"""The TCG plugin mechanism (``mechanism="plugin"``) on Debian's amd64 kernel, checked
against the guest's own kprobe events over the same window.

The guest defines kprobe events on the functions kpsdk probes, reading the same registers
(:func:`kpsdk.fixtures.kernel.traced_workload`), and records the workload with them.
kpsdk's session, in the same boot:

- a kprobe with a pre_handler on ``do_sys_openat2`` (served by the plugin: no gdb stop per
  hit) records ``dfd``, ``filename`` and ``how`` (rdi, rsi, rdx) from its register snapshot;
- a kprobe with no handler on ``handle_mm_fault`` (a hot function in the workload: every
  page fault of the forks and execs), counted by the plugin alone, registered when the
  guest starts recording and unregistered when it stops;
- ``s.trace()`` with the same definition as the guest's, evaluated on the same snapshots;
- the window itself from a probe on the guest's writes to ``tracing_on`` that has a
  post_handler, so gdb's breakpoint path serves it in the same session.

The hits and values must equal the guest's records, in order: none lost, none doubled,
every register as the kernel's own kprobe read it; and ``list()`` names each mechanism.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

EVENTS = ("p:kpsdk/open do_sys_openat2 dfd=%di filename=%si how=%dx",
          "p:kpsdk/fault handle_mm_fault")


def _guest_events(console: str) -> tuple[list[tuple[int, int, int]], int]:
    """The guest's open events' (dfd, filename, how), and its count of fault events."""
    modes = [m.fields["mode"] for m in kernel.parse_markers(console) if m.action == "ktrace"]
    assert modes == ["kprobe"], console[-3000:]
    opens: list[tuple[int, int, int]] = []
    faults = 0
    for line in console.splitlines():
        if not line.startswith("KTRACE "):
            continue
        m = re.search(r" (open|fault): \(.*?\)(.*)$", line)
        assert m is not None, line
        if m.group(1) == "fault":
            faults += 1
            continue
        fields = dict(word.split("=", 1) for word in m.group(2).split())
        opens.append((int(fields["dfd"], 0), int(fields["filename"], 0), int(fields["how"], 0)))
    return opens, faults


def test_plugin_probes_match_the_guest(debian_kernel: Path, kernel_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    require_tool("gcc", "gcc")
    require_tool("dpkg-deb", "dpkg")
    initrd = kernel_initramfs(kernel.traced_workload(events=EVENTS))
    with kpsdk.open("qemu-system:x86_64", kernel=str(debian_kernel), initrd=str(initrd), mechanism="plugin") as s:
        window = [False]
        writes = [0]
        fault = kpsdk.Kprobe(symbol_name="handle_mm_fault")
        counted: list[int] = []

        def toggle(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            writes[0] += 1  # the guest writes 0, 1, 0 (kernel.traced_workload)
            window[0] = writes[0] == 2
            if writes[0] == 2:
                s.register_kprobe(fault)
            elif writes[0] == 3:
                s.unregister_kprobe(fault)
                counted.append(fault.hits)
            return 0

        def after(p: kpsdk.Probe, regs: kpsdk.PtRegs, flags: int) -> None:
            pass  # a post_handler: this probe takes gdb's path

        s.register_kprobe(kpsdk.Kprobe(symbol_name=kernel.TRACING_ON_WRITE, pre_handler=toggle,
                                       post_handler=after))
        opens: list[tuple[int, int, int]] = []

        @s.kprobe("do_sys_openat2")
        def on_open(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            if window[0]:
                opens.append((regs["rdi"], regs["rsi"], regs["rdx"]))
            return 0

        traced: list[tuple[int, int, int]] = []

        def record(r: kpsdk.trace.TraceRecord) -> None:
            if window[0]:  # the sink runs in hit order, as the handlers do
                traced.append((int(r.fields["dfd"]), int(r.fields["filename"]), int(r.fields["how"])))

        s.trace(["p:opentrace do_sys_openat2 dfd=%di:u64 filename=%si:u64 how=%dx:u64"], sink=record)
        listing = s.list()
        assert re.search(r"do_sys_openat2\+0x0\s+\[PLUGIN\]", listing), listing
        assert re.search(rf"{kernel.TRACING_ON_WRITE}\+0x0\s+\[GDB\]", listing), listing
        status = s.run(timeout=600)
        console = s.console
    assert status is not None, console[-3000:]
    guest_opens, guest_faults = _guest_events(console)
    assert writes[0] == 3
    assert len(guest_opens) >= 3 and opens == guest_opens
    assert traced == guest_opens  # kpsdk trace's definitions, evaluated on the same snapshots
    assert guest_faults > 100 and counted == [guest_faults]
    assert on_open.nmissed == 0 and fault.nmissed == 0


def _write_a_register(s: kpsdk.Session, regs: kpsdk.PtRegs) -> None:
    regs["rdi"] = 0


def _read_the_file_name(s: kpsdk.Session, regs: kpsdk.PtRegs) -> None:
    s.read_string(regs.arg(1), max=256)


@pytest.mark.parametrize(("act", "message"), [
    (_write_a_register, "cannot change rdi"),
    (_read_the_file_name, "cannot read guest memory"),
])
def test_plugin_handlers_see_a_read_only_snapshot(debian_kernel: Path, kernel_initramfs: Callable[..., Path],
                                                  act: Callable[[kpsdk.Session, kpsdk.PtRegs], None],
                                                  message: str) -> None:
    """A plugin handler that writes a register, or reads guest memory (the guest has moved on),
    gets a TargetError, which run() raises with the probe's context once the guest stopped."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs()
    with kpsdk.open("qemu-system:x86_64", kernel=str(debian_kernel), initrd=str(initrd), mechanism="plugin") as s:
        @s.kprobe("do_sys_openat2")
        def on_open(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            assert s.regs() is regs and s.symbols.lookup(regs.ip)[:2] == ("do_sys_openat2", 0)
            act(s, regs)
            return 0

        with pytest.raises(kpsdk.ProbeHandlerError, match=message):
            s.run(timeout=600)
        assert on_open.hits >= 1
