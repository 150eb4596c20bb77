"""Debian's own kernels on i386, arm, riscv64 and ppc64le, under qemu-system (TCG), each
checked against the guest itself.

- Symbols: the kallsyms table kpsdk decodes from the kernel image equals the booted
  kernel's ``/proc/kallsyms`` line for line (same count, same bytes, ``%px`` width), and
  the table sessions use places the named functions where the guest says.
- Probes: kprobes by name on the syscall path reading the user's file names, kretprobes
  with return values, over the same window in which the guest records the same functions
  with its own tracing (:func:`kpsdk.fixtures.kernel.traced_workload`): the hit counts
  must be equal (no call reported twice, none lost), and where the guest's kprobe events
  record return values, the values must be the same, in order.

The x86_64 kernel has its own tests (test_kernel_live.py, test_kernel_image.py...).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk.fixtures import kernel
from kpsdk.kallsyms import extract_vmlinux, load_kernel_symbols
from kpsdk.kallsyms_table import decode_kallsyms
from tests.conftest import KERNEL_ARCHS, require_tool

pytestmark = pytest.mark.kernel

#: the archs whose kernels kpsdk probes through QEMU's gdbstub (ppc64le: see docs/api.md's
#: limitations: QEMU 7.2's pseries never reports a breakpoint at a kernel address)
PROBED_ARCHS = ("i386", "arm", "riscv64")
NAMED = ("_stext", "do_sys_openat2", "kernel_clone", "start_kernel", kernel.TRACING_ON_WRITE)


@pytest.mark.parametrize("arch", KERNEL_ARCHS)
def test_kallsyms_match_the_guest(arch: str, arch_kernel: Callable[[str], Path],
                                  arch_initramfs: Callable[..., Path]) -> None:
    image = arch_kernel(arch)
    width = kpsdk.get_registry().arch(arch).bits // 4  # /proc/kallsyms prints %px: a word of hex digits
    pattern = "|".join(re.escape(n) for n in NAMED)
    workload = rf"""
echo 0 > /proc/sys/kernel/kptr_restrict
grep -v '\[' /proc/kallsyms > /tmp/kallsyms
echo "KPSDK kallsyms lines=$(wc -l < /tmp/kallsyms) sha256=$(sha256sum /tmp/kallsyms | cut -d' ' -f1)"
grep -E ' ({pattern})$' /tmp/kallsyms | sed 's/^/KALLSYMS /'
"""
    result = kernel.boot(image, arch_initramfs(arch, workload), arch=arch, timeout=300)
    assert result.returncode == 0, result.console[-2000:]
    guest = {}
    for line in result.console.splitlines():
        if line.startswith("KALLSYMS "):
            addr, _typ, name = line.split()[1:4]
            guest[name] = int(addr, 16)
    assert set(guest) == set(NAMED), result.console[-2000:]
    # the kallsyms table inside the image, decoded: the guest's whole list, byte for byte
    entries = decode_kallsyms(extract_vmlinux(image)[0], str(image))
    ours = "".join(f"{e.address:0{width}x} {e.type} {e.name}\n" for e in entries)
    (summary,) = [m for m in kernel.parse_markers(result.console) if m.action == "kallsyms"]
    assert int(summary.fields["lines"]) == len(entries)
    assert summary.fields["sha256"] == hashlib.sha256(ours.encode()).hexdigest()
    # and the table sessions use (for ppc64le the vmlinux's .symtab) agrees on the functions
    table = load_kernel_symbols(image)
    for name, address in guest.items():
        assert table.get(name).address == address, name


def _guest_record(console: str, bits: int) -> tuple[str, dict[str, int], dict[str, list[int]]]:
    """The guest's own trace: its mode, hits per event, and return values per return event."""
    (mode,) = [m.fields["mode"] for m in kernel.parse_markers(console) if m.action == "ktrace"]
    hits: dict[str, int] = {}
    values: dict[str, list[int]] = {}
    for line in console.splitlines():
        if not line.startswith("KTRACE "):
            continue
        if mode == "kprobe":
            m = re.search(r" (\w+): \(.*?\)(?: ret=(0x[0-9a-f]+))?$", line)
            assert m is not None, line
            event = m.group(1)
            if m.group(2) is not None:
                raw = int(m.group(2), 16) & ((1 << bits) - 1)
                values.setdefault(event, []).append(raw - (1 << bits) if raw >> (bits - 1) else raw)
        else:
            m = re.search(r" (\w+) <-\S+$", line)
            assert m is not None, line
            event = m.group(1)
        hits[event] = hits.get(event, 0) + 1
    return mode, hits, values


@pytest.mark.parametrize("arch", PROBED_ARCHS)
def test_probes_match_the_guest(arch: str, arch_kernel: Callable[[str], Path],
                                arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel(arch), arch_initramfs(arch)
    start = time.monotonic()
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        window = [False]  # between the guest's writes of 1 and 0 to tracing_on
        writes = [0]

        @s.kprobe(kernel.TRACING_ON_WRITE)
        def toggle(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            writes[0] += 1  # the guest writes 0, 1, 0 (kernel.traced_workload)
            window[0] = writes[0] == 2
            return 0

        def user_string(addr: int) -> str | None:
            try:
                return s.read_string(addr, max=256)
            except kpsdk.TargetFault:
                return None  # not paged in yet (at entry the kernel has not touched it)

        opened: list[str | None] = []

        @s.kprobe("do_sys_openat2")
        def on_open(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            if window[0]:
                opened.append(user_string(regs.arg(1)))  # (dfd, const char __user *filename, how)
            return 0

        names: dict[int, int] = {}
        open_rets: list[int] = []
        failed: list[tuple[str | None, int]] = []

        def open_entry(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> int:
            names[id(ri)] = regs.arg(1)
            return 0 if window[0] else 1  # 1: not this call's return (the kernel's entry_handler rule)

        def open_return(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> None:
            ret = regs.signed("return_value")
            open_rets.append(ret)
            if ret < 0:  # the kernel has read the name by now: its page is present
                failed.append((user_string(names[id(ri)]), ret))

        clone_rets: list[int] = []
        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="do_sys_openat2", entry_handler=open_entry,
                                             handler=open_return))
        s.register_kretprobe(kpsdk.Kretprobe(
            symbol_name="kernel_clone", entry_handler=lambda ri, regs: 0 if window[0] else 1,
            handler=lambda ri, regs: clone_rets.append(regs.signed("return_value"))))
        assert s.run(timeout=600) == 0  # the guest powered off
        console = s.console
        assert s.target._return_bps == {}  # no return breakpoint outlives the run
    seconds = time.monotonic() - start
    markers = kernel.parse_markers(console)
    assert [m.action for m in markers][-2:] == ["END", "POWEROFF"], console[-3000:]
    assert writes[0] == 3 and not window[0], f"the guest wrote tracing_on {writes[0]} times, not 3"
    # what the workload itself says it did
    opens = {m.fields["path"]: m.fields["ret"] for m in markers if m.action == "open"}
    assert opens == {"/etc/kpsdk-hello": "ok", "/kpsdk-missing": "-2", "/etc/kpsdk-hello/sub": "-20"}
    spawned = [int(m.fields["pid"]) for m in markers if m.action == "spawn"]
    assert len(spawned) == kernel.SPAWN_COUNT and set(spawned) <= set(clone_rets)
    assert {"/etc/kpsdk-hello", "/kpsdk-missing", "/etc/kpsdk-hello/sub"} <= set(opened), opened
    assert ("/kpsdk-missing", -2) in failed and ("/etc/kpsdk-hello/sub", -20) in failed, failed
    # what the guest kernel recorded of the same functions over the same window
    mode, hits, values = _guest_record(console, kpsdk.get_registry().arch(arch).bits)
    if mode == "kprobe":
        assert hits == {"open": len(opened), "openret": len(open_rets), "cloneret": len(clone_rets)}, hits
        assert values["openret"] == open_rets and values["cloneret"] == clone_rets
    else:  # the function tracer: calls, no return values (those are checked against the workload above)
        assert hits == {"do_sys_openat2": len(opened), "kernel_clone": len(clone_rets)}, hits
        assert len(open_rets) == len(opened)
    print(f"{arch}: {seconds:.1f} s, guest {mode} {hits}, kpsdk open={len(opened)} openret={len(open_rets)} "
          f"cloneret={len(clone_rets)}")


def test_write_watchpoint_on_a_riscv64_kernel_global(arch_kernel: Callable[[str], Path],
                                                     arch_initramfs: Callable[..., Path]) -> None:
    """A hardware write watchpoint (a RISC-V trigger, through QEMU's gdbstub) on ``vm_swappiness``,
    found by name: each write the workload makes, in order, with the value it printed."""
    from tests.test_kernel_watch import WORKLOAD, WRITES

    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel("riscv64"), arch_initramfs("riscv64", WORKLOAD)
    with kpsdk.open("qemu-system:riscv64", kernel=str(image), initrd=str(initrd)) as s:
        seen: list[tuple[int, int, str, int]] = []

        def on_write(wp: kpsdk.Watchpoint, regs: kpsdk.PtRegs, access: Any) -> None:
            seen.append((access.old, access.new, s.symbols.lookup(regs.ip)[0], s.read_int(access.addr, 4)))

        assert s.register_watchpoint(kpsdk.Watchpoint(symbol_name="vm_swappiness", length=4, type="w",
                                                      handler=on_write)) == 0
        assert s.run(timeout=300) == 0
        values = [int(m.fields["value"]) for m in kernel.parse_markers(s.console) if m.action == "swappiness"]
    assert len(values) == len(WRITES) + 1 and values[1:] == list(WRITES), values
    assert [(old, new) for old, new, _, _ in seen] == list(zip(values, values[1:], strict=False))
    for _old, new, function, in_memory in seen:
        assert in_memory == new and function != "start_kernel"  # stopped in the sysctl code that wrote it


@pytest.mark.parametrize("arch", ["i386", "arm", "ppc64le"])
def test_kernels_without_data_symbols(arch: str, arch_kernel: Callable[[str], Path]) -> None:
    """Why a watchpoint by name is tested on riscv64 (and x86_64) only: Debian builds these
    kernels without CONFIG_KALLSYMS_ALL, so their kallsyms table names no data at all
    (ppc64le's .symtab does, but its kernel cannot be probed: see docs/api.md)."""
    image = arch_kernel(arch)
    (config,) = image.parent.glob("config-*")
    assert "# CONFIG_KALLSYMS_ALL is not set" in config.read_text().splitlines()
    entries = decode_kallsyms(extract_vmlinux(image)[0], str(image))
    assert "vm_swappiness" not in {e.name for e in entries}


#: the guest's count of processes created since boot (``total_forks``, kernel/fork.c:
#: ``copy_process`` adds one for each task it creates), printed by ``/proc/stat``'s
#: ``processes`` line (fs/proc/stat.c, ``show_stat``)
FORKS_WORKLOAD = "grep '^processes ' /proc/stat | sed 's/^processes /KPSDK forks count=/'\n"


@pytest.mark.parametrize("arch", ("x86_64", *PROBED_ARCHS))
def test_whole_boot_clones_match_the_guest(arch: str, arch_kernel: Callable[[str], Path],
                                           arch_initramfs: Callable[..., Path]) -> None:
    """Every ``kernel_clone`` of a whole boot, from ``start_kernel`` on: the tasks it
    created (distinct pids returned) are the guest's own count of created tasks at the
    moment it reads ``/proc/stat``, none lost; and every call beyond that count is a
    re-report, an entry back to back with the previous one at the same sp (gdb evaluating
    the breakpoint again after QEMU ended its step over it having executed nothing: see
    docs/api.md, "A step that executes nothing").  The count differs from boot to boot;
    the guest's differs with it."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    image = arch_kernel(arch)
    initrd = arch_initramfs(arch, FORKS_WORKLOAD)
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        log: list[tuple[str, int]] = []  # ("E", sp) at each entry, ("R", pid) at each return
        at_read: list[list[tuple[str, int]]] = []

        def entry(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> int:
            log.append(("E", regs.sp))
            return 0

        def returned(ri: kpsdk.Kretprobe, regs: kpsdk.PtRegs) -> None:
            log.append(("R", regs.signed("return_value")))

        def show_stat(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            at_read.append(list(log))
            return 0

        s.register_kretprobe(kpsdk.Kretprobe(symbol_name="kernel_clone", entry_handler=entry, handler=returned,
                                             maxactive=64))
        s.register_kprobe(kpsdk.Kprobe(symbol_name="show_stat", pre_handler=show_stat))
        assert s.run(timeout=600) == 0
        console = s.console
    (forks,) = [int(m.fields["count"]) for m in kernel.parse_markers(console) if m.action == "forks"]
    assert len(at_read) == 1, len(at_read)
    seen = at_read[0]
    pids = {v for kind, v in seen if kind == "R" and v > 0}
    calls = sum(kind == "E" for kind, _ in seen)
    rereports = sum(e == prev and e[0] == "E" for prev, e in zip(seen, seen[1:], strict=False))
    assert len(pids) == forks, (len(pids), forks)  # each created task seen, none lost
    assert calls - rereports == forks, (calls, rereports, forks)  # every extra call a re-report
    print(f"{arch}: kernel_clone created {len(pids)} tasks before the guest read {forks}; "
          f"{calls} entries reported, {rereports} of them re-reports")
