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
- The probe grammar of each kernel's version: ``$argN`` definitions written into the guest's
  own ``kprobe_events`` before the workload, parsed by kpsdk with the version it reads from
  the image (6.1 on i386 and arm, 6.12 on riscv64): the same acceptance and error_log lines.
- The trace prefix: the task (comm-pid) kpsdk's trace shows at each open in that window
  equals the task of the guest's own trace line for it: riscv64's kernel keeps ``current``
  in ``tp`` and has BTF; i386's, arm's and ppc64le's have no BTF, and kpsdk reads current's
  place (``fs_base`` + current_task, TPIDRURO, the PACA's ``__current``) and task_struct's
  pid and comm where their dump_stack_print_info reads them (kpsdk/kernel/taskcode.py).

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
from kpsdk.kernel.kallsyms import extract_vmlinux, load_kernel_symbols
from kpsdk.kernel.kallsyms_table import decode_kallsyms
from tests.conftest import KERNEL_ARCHS, require_tool

pytestmark = pytest.mark.kernel

#: the archs whose kernels kpsdk probes through QEMU's gdbstub: every one booted with Debian's kernel
PROBED_ARCHS = KERNEL_ARCHS
NAMED = ("_stext", "do_sys_openat2", "kernel_clone", "start_kernel", kernel.TRACING_ON_WRITE)


def table_entries(image: Path) -> list[Any]:
    """The kallsyms table decoded from the kernel in ``image``; a self-extracting ELF around it
    (MIPS's vmlinuz) says the kernel's word size, which the raw kernel does not."""
    return decode_kallsyms(extract_vmlinux(image)[0], str(image), image.read_bytes())


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
    entries = table_entries(image)
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


#: ``$argN`` where each kernel's rules differ (kpsdk.trace.grammar.arg_error): written into the
#: guest's own kprobe_events before its workload, and parsed by kpsdk with the grammar of the
#: version it reads from the same image: 6.1 (i386, arm) and 6.12 (riscv64)
ARG_CASES = ("p:kpsdk_a1 do_sys_openat2 $arg1", "r:kpsdk_a2 do_sys_openat2 $arg2",
             "r:kpsdk_a3 do_sys_openat2 $arg0", "p:kpsdk_a4 do_sys_openat2+4 $arg1")
#: what a kernel says when it parsed a definition but could not place the probe (riscv64's 6.12
#: refuses a kprobe on a function's ftrace site): the grammar accepted it
REGISTRATION_ERRORS = ("Failed to register probe event",)


def _arg_cases_script() -> str:
    t = "/sys/kernel/tracing"
    lines = [f"mount -t tracefs nodev {t} 2>/dev/null"]
    for i, case in enumerate(ARG_CASES):
        lines += [f"echo KPSDK-ARGCASE-{i}", f"echo > {t}/error_log",
                  f"echo '{case}' >> {t}/kprobe_events 2>/dev/null && echo KPSDK-ARGCASE-ACCEPTED",
                  f"cat {t}/error_log"]
    return "\n".join([*lines, f"echo > {t}/kprobe_events", "echo KPSDK-ARGCASES-END", ""])


def _check_arg_cases(console: str, arch: str, image: Path) -> tuple[int, int]:
    """kpsdk accepts what the guest's kprobe_events parsed, and refuses the rest with its error_log."""
    from kpsdk.errors import TraceDefinitionError
    from kpsdk.kernel.version import kernel_version
    from kpsdk.trace.grammar import Parser

    body = console.replace("\r", "").split("KPSDK-ARGCASES-END", 1)[0]
    answers = re.findall(r"KPSDK-ARGCASE-(\d+)\n(.*?)(?=KPSDK-ARGCASE-\d|\Z)", body, re.S)
    assert [int(n) for n, _ in answers] == list(range(len(ARG_CASES))), body[-2000:]
    version = kernel_version(image)
    assert version is not None
    parser = Parser(kpsdk.get_registry().arch(arch), kernel=version)
    for (_, answer), case in zip(answers, ARG_CASES, strict=True):
        # Debian's 6.1.176 (i386, arm) still spells BAD_VAR's message "Invalid $-valiable specified",
        # which later 6.1 stable kernels (6.1.192, x86_64) and kpsdk spell "variable"
        lines = [re.sub(r"^\[\s*[\d.]+\] ", "", line).replace("$-valiable", "$-variable")
                 for line in answer.rstrip("\n").split("\n")]
        parsed = "KPSDK-ARGCASE-ACCEPTED" in answer or any(e in answer for e in REGISTRATION_ERRORS)
        try:
            parser.parse(case)
            ours = None
        except TraceDefinitionError as exc:
            ours = exc.error_log.rstrip("\n").split("\n")[-3:]
        assert (ours is None) == parsed and (parsed or ours == lines[-3:]), (case, version, answer, ours)
    return version


def _guest_open_tasks(console: str, mode: str) -> list[tuple[str, int]]:
    """The task (comm, pid) of each do_sys_openat2 line of the guest's own trace, in order."""
    tasks = []
    for line in console.splitlines():
        m = re.match(r"KTRACE\s+(.+)-(\d+)\s+\[\d+\] \S+\s+[\d.]+: (.*)$", line)
        if m and (m[3].startswith("open: ") if mode == "kprobe" else m[3].startswith("do_sys_openat2 <-")):
            tasks.append((m[1].strip(), int(m[2])))
    return tasks


@pytest.mark.parametrize("arch", PROBED_ARCHS)
def test_probes_match_the_guest(arch: str, arch_kernel: Callable[[str], Path],
                                arch_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    image = arch_kernel(arch)
    initrd = arch_initramfs(arch, _arg_cases_script() + kernel.traced_workload())
    start = time.monotonic()
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
        window = [False]  # between the guest's writes of 1 and 0 to tracing_on
        writes = [0]

        @s.kprobe(kernel.TRACING_ON_WRITE)
        def toggle(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            writes[0] += 1  # the guest writes 0, 1, 0 (kernel.traced_workload)
            window[0] = writes[0] == 2
            return 0

        gate = s.target.arch.access_gate  # ppc64: the AMR that KUAP closes, opened for each read
        gate_values: list[tuple[int, int]] = []

        def gate_value() -> int:
            assert gate is not None
            return int(s.target.link.request(f"r {gate.register}"), 16)

        def user_string(addr: int) -> str | None:
            before = gate_value() if gate is not None else 0
            try:
                return s.read_string(addr, max=256)
            except kpsdk.TargetFault:
                return None  # not paged in yet (at entry the kernel has not touched it)
            finally:
                if gate is not None:
                    gate_values.append((before, gate_value()))

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

        # the trace prefix's task at each open in the window, for the guest's own lines' task-pid
        tasks: list[tuple[str, int]] = []
        s.trace(["p:kpsdk_open do_sys_openat2"], sink=lambda r: tasks.append((r.comm, r.pid)) if window[0] else None)

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
    if gate is not None:  # the kernel had its gate closed at each read, and found it closed again
        assert gate_values and all(b == a != gate.open_value for b, a in gate_values), gate_values
    # what the guest kernel recorded of the same functions over the same window: the same counts
    # and values, none reported twice (QEMU's empty step over a breakpoint, see TCG_ACCEL), none lost
    mode, hits, values = _guest_record(console, kpsdk.get_registry().arch(arch).bits)
    if mode == "kprobe":
        assert len(opened) == hits["open"], (hits, opened)
        assert open_rets == values["openret"], (values, open_rets)
        assert clone_rets == values["cloneret"], (values, clone_rets)
    else:  # the function tracer: calls, no return values (those are checked against the workload above)
        assert len(opened) == hits["do_sys_openat2"], (hits, opened)
        assert len(clone_rets) == hits["kernel_clone"], (hits, clone_rets)
        assert len(open_rets) == len(opened)
    version = _check_arg_cases(console, arch, image)
    # the prefix's comm-pid, where kpsdk knows where this arch's kernel keeps current (KernelTasks)
    guest_tasks = _guest_open_tasks(console, mode)
    assert len(tasks) == len(opened) == len(guest_tasks), (tasks, guest_tasks)
    # the kernel prints a pid's comm as it last recorded it (test_trace_prefix_kernel.py): a
    # forked child that then exec'd /bin/true may be "true" in the guest where kpsdk saw "sh"
    spawned = {int(m.fields["pid"]): Path(m.fields["cmd"]).name for m in markers if m.action == "spawn"}
    assert all(g == o or (g[1] == o[1] and spawned.get(g[1]) == g[0])
               for g, o in zip(guest_tasks, tasks, strict=True)), (guest_tasks, tasks)
    assert {("cat", pid) for c, pid in tasks if c == "cat"} and len(set(tasks)) > 2, tasks
    print(f"{arch} {version}: {seconds:.1f} s, guest {mode} {hits}, kpsdk open={len(opened)} openret={len(open_rets)} "
          f"cloneret={len(clone_rets)}")


@pytest.mark.parametrize("arch", ["riscv64", "ppc64le"])
def test_write_watchpoint_on_a_kernel_global(arch: str, arch_kernel: Callable[[str], Path],
                                             arch_initramfs: Callable[..., Path]) -> None:
    """A hardware write watchpoint (a RISC-V trigger, ppc64's DAWR, through QEMU's gdbstub) on
    ``vm_swappiness``, found by name (riscv64: in the kallsyms table; ppc64le: in the vmlinux's
    .symtab): each write the workload makes, in order, with the value it printed."""
    from tests.test_kernel_watch import WORKLOAD, WRITES

    require_tool("gdb-multiarch", "gdb-multiarch")
    image, initrd = arch_kernel(arch), arch_initramfs(arch, WORKLOAD)
    with kpsdk.open(f"qemu-system:{arch}", kernel=str(image), initrd=str(initrd)) as s:
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


def test_ppc64le_local_entries_match_the_elf(arch_kernel: Callable[[str], Path]) -> None:
    """Where kpsdk stops a ppc64le kernel (``start_kernel``'s local entry: the ``bl`` from
    ``start_here_common`` skips the two instructions that set up r2, so a breakpoint on the
    symbol itself is never passed) and where probes by name land: the local entry kpsdk
    reads from the code must be the one the ELF's ``st_other`` records, for every function."""
    from elftools.elf.elffile import ELFFile

    from kpsdk.binfmt.elfimage import load_elf
    from kpsdk.targets.live.qemu import ready_address

    image_path = arch_kernel("ppc64le")
    arch = kpsdk.get_registry().arch("ppc64le")
    assert arch.local_entry is not None
    image = load_elf(image_path)
    # ELFv2's st_other bits 5-7: 0 and 1 mean no separate local entry, 2..6 mean 4 << (n - 2) bytes
    offsets = {0: 0, 1: 0, 2: 4, 3: 8, 4: 16, 5: 32, 6: 64}
    seen: dict[tuple[int, int], int] = {}
    with open(image_path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        for sym in symtab.iter_symbols():  # type: ignore[union-attr]
            if sym["st_info"]["type"] != "STT_FUNC" or sym["st_value"] == 0:
                continue
            code = image.read(sym["st_value"], 8)
            assert code is not None, sym.name
            pair = (offsets[sym["st_other"]["local"]], arch.local_entry(code))
            assert pair[0] == pair[1], (sym.name, hex(sym["st_value"]), code.hex())
            seen[pair] = seen.get(pair, 0) + 1
    assert seen.get((8, 8), 0) > 10000 and seen.get((0, 0), 0) > 1000, seen  # both kinds were there
    start_kernel = image.symbols.get("start_kernel").address
    assert ready_address(arch, image.symbols, image, "start_kernel") == start_kernel + 8
    assert ready_address(arch, image.symbols, None, "start_kernel") == start_kernel  # no code: the symbol


@pytest.mark.parametrize("arch", ["i386", "arm", "ppc64le", "mipsel", "mips64el"])
def test_kernels_without_data_symbols(arch: str, arch_kernel: Callable[[str], Path]) -> None:
    """Why a watchpoint by name is tested on riscv64, ppc64le (and x86_64) only: Debian builds
    these kernels without CONFIG_KALLSYMS_ALL, so their kallsyms table names no data at all
    (ppc64le's vmlinux has its .symtab, which does: that is what its sessions use)."""
    image = arch_kernel(arch)
    (config,) = image.parent.glob("config-*")
    assert "# CONFIG_KALLSYMS_ALL is not set" in config.read_text().splitlines()
    entries = table_entries(image)
    assert "vm_swappiness" not in {e.name for e in entries}


#: the guest's count of processes created since boot (``total_forks``, kernel/fork.c:
#: ``copy_process`` adds one for each task it creates), printed by ``/proc/stat``'s
#: ``processes`` line (fs/proc/stat.c, ``show_stat``)
FORKS_WORKLOAD = "grep '^processes ' /proc/stat | sed 's/^processes /KPSDK forks count=/'\n"


@pytest.mark.parametrize("arch", ("x86_64", *PROBED_ARCHS))
def test_whole_boot_clones_match_the_guest(arch: str, arch_kernel: Callable[[str], Path],
                                           arch_initramfs: Callable[..., Path]) -> None:
    """Every ``kernel_clone`` of a whole boot, from ``start_kernel`` on: the calls kpsdk
    reported and the tasks they created (distinct pids returned) both equal the guest's own
    count of created tasks at the moment it reads ``/proc/stat``: none lost, none reported
    twice (what QEMU's default multi-threaded TCG did now and then: it ended gdb's step over
    the breakpoint having executed nothing, and gdb evaluated the breakpoint again; see
    :data:`kpsdk.targets.live.qemu.TCG_ACCEL`).  The count differs from boot to boot; the
    guest's differs with it."""
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
    returns = [v for kind, v in seen if kind == "R" and v > 0]
    assert len(pids) == forks, (len(pids), forks)  # each created task seen, none lost
    assert calls == forks, (calls, forks, seen)  # and no call reported twice
    assert len(returns) == len(set(returns)), returns  # nor a return (each pid is returned once)
    print(f"{arch}: kernel_clone called {calls} times, created {len(pids)} tasks before the guest read {forks}")


def test_riscv64_busy_allocator_hits_match_the_guest(arch_kernel: Callable[[str], Path],
                                                     arch_initramfs: Callable[..., Path]) -> None:
    """The busy function of bench/kernels.py on Debian 13's riscv64 kernel, counted by kpsdk and
    by the guest over the same tracing window: every call of ``kmem_cache_alloc_noprof``.

    6.12's slab allocator is the ``_noprof`` function (``kmem_cache_alloc`` is a macro around
    it).  The guest refuses a kprobe there (its ftrace site, no CONFIG_KPROBES_ON_FTRACE), so it
    counts with the function tracer, which rewrites that site while kpsdk's breakpoint is on it.
    """
    require_tool("gdb-multiarch", "gdb-multiarch")
    name = "kmem_cache_alloc_noprof"
    workload = kernel.traced_workload(events=(f"p:kpsdk/alloc {name}",), functions=(name,))
    image, initrd = arch_kernel("riscv64"), arch_initramfs("riscv64", workload)
    window = [False]
    writes = [0]
    hits = [0]
    with kpsdk.open("qemu-system:riscv64", kernel=str(image), initrd=str(initrd)) as s:
        @s.kprobe(kernel.TRACING_ON_WRITE)
        def toggle(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            writes[0] += 1  # the guest writes 0, 1, 0: the window is between the second and third
            window[0] = writes[0] == 2
            if writes[0] in (2, 3):
                s.stop()  # the allocator's probe only over the window: the boot calls it 10^4+ times
            return 0

        def on_alloc(p: kpsdk.Probe, regs: kpsdk.PtRegs) -> int:
            hits[0] += window[0]
            return 0

        assert s.run(timeout=600) is None and writes[0] == 2
        probe = kpsdk.Kprobe(symbol_name=name, pre_handler=on_alloc)
        s.register_kprobe(probe)
        assert s.run(timeout=600) is None and writes[0] == 3
        s.unregister_kprobe(probe)
        assert s.run(timeout=600) == 0
        console = s.console
    assert "KPSDK ktrace mode=function" in console, console[-2000:]
    guest = [line for line in console.splitlines() if line.startswith("KTRACE ") and f" {name} <-" in line]
    assert guest and hits[0] == len(guest), (hits[0], len(guest))  # none reported twice, none lost
