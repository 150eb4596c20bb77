"""The system-call tables: every arch's calls as the kernel numbers them, and what the Linux layer answers.

kpsdk/arch_backends/syscall_numbers.py is generated from the kernel's uapi headers
(tools/gen_syscall_tables.py); the emulated sets (syscall_tables.py) name calls of those
tables, and each name has its handler, marked with it, in kpsdk/targets/unicorn/linux/calls/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import kpsdk
from kpsdk.arch_backends import syscall_numbers as numbers
from kpsdk.arch_backends import syscall_tables as emulated
from kpsdk.cli.strace import KINDS as PRINTED_KINDS
from kpsdk.cli.strace import CallText, StracePrinter
from kpsdk.events import SyscallEvent
from kpsdk.targets.unicorn.linux.calls.declare import KINDS
from kpsdk.targets.unicorn.linux.syscalls import HANDLERS, SIGNATURES
from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parent.parent
#: each table, and calls at known numbers (the kernel's tables; the ARM private calls; the mips bases)
KNOWN: dict[str, dict[str, int]] = {
    "X86_64": {"read": 0, "getdents": 78, "getgroups": 115, "openat": 257, "clone3": 435},
    "I386": {"exit": 1, "socketcall": 102, "getgroups32": 205, "set_thread_area": 243, "clone3": 435},
    "ARM": {"exit": 1, "getgroups32": 205, "openat": 322, "cacheflush": 0xF0002, "set_tls": 0xF0005},
    "GENERIC64": {"getxattr": 8, "openat": 56, "read": 63, "getgroups": 158, "clone3": 435},
    "RISCV64": {"riscv_hwprobe": 258, "riscv_flush_icache": 259},
    "AARCH64": {"renameat": 38, "openat": 56},
    "PPC64": {"getgroups": 80, "mmap": 90, "socketcall": 102, "openat": 286},
    "MIPS_O32": {"syscall": 4000, "read": 4003, "openat": 4288},
    "MIPS_N64": {"read": 5000, "openat": 5247},
}
#: the arches with a Linux layer, and their emulated sets
LINUX_ARCHS = {"x86_64": emulated.X86_64, "i386": emulated.I386, "arm": emulated.ARM, "riscv64": emulated.RISCV64,
               "ppc64": emulated.PPC64, "ppc64le": emulated.PPC64, "aarch64": emulated.AARCH64}


@pytest.mark.parametrize("table", KNOWN)
def test_each_table_names_each_number_once_and_knows_its_calls(table: str) -> None:
    calls: dict[str, int] = getattr(numbers, table)
    assert len(set(calls.values())) == len(calls)
    assert {name: calls.get(name) for name in KNOWN[table]} == KNOWN[table]


def test_the_generic_table_is_no_arch_s_own() -> None:
    """asm-generic's table is shared: riscv's calls are riscv64's alone, renameat arm64's."""
    assert not {"riscv_hwprobe", "riscv_flush_icache", "renameat"} & set(numbers.GENERIC64)
    assert not {"riscv_hwprobe", "riscv_flush_icache"} & set(numbers.AARCH64)
    assert "renameat" not in numbers.RISCV64
    assert set(numbers.GENERIC64) < set(numbers.RISCV64) and set(numbers.GENERIC64) < set(numbers.AARCH64)
    assert numbers.PPC64LE == numbers.PPC64


@pytest.mark.parametrize("name", LINUX_ARCHS)
def test_every_emulated_call_is_one_of_the_arch_s_with_a_handler(name: str) -> None:
    arch = kpsdk.get_registry().arch(name)
    assert arch.syscalls is not None and arch.syscalls.linux is not None
    answered = arch.syscalls.linux.calls
    assert answered == LINUX_ARCHS[name]
    assert answered <= set(arch.syscalls.calls), answered - set(arch.syscalls.calls)
    assert answered <= set(HANDLERS), answered - set(HANDLERS)
    # the target's own calls, with and without a Linux layer
    assert {"write", "exit", "exit_group"} <= set(arch.syscalls.calls)
    table = {"ppc64le": "PPC64LE"}.get(name, name.upper())
    assert arch.syscalls.calls == getattr(numbers, table)


def test_every_handler_and_signature_names_a_real_call() -> None:
    """A mark with a misspelt name would never be dispatched: each is a call of some arch."""
    known = set().union(*(getattr(numbers, table) for table in KNOWN))
    assert set(HANDLERS) <= known, set(HANDLERS) - known
    assert set(SIGNATURES) <= known, set(SIGNATURES) - known
    assert all(set(kinds) <= KINDS for kinds in SIGNATURES.values())


def test_the_declared_kinds_are_the_printers() -> None:
    assert KINDS == PRINTED_KINDS


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("result", [0, -2])
def test_the_strace_printer_formats_every_declared_kind(kind: str, result: int) -> None:
    """Each kind prints, at the call's entry and at its exit, after a success or a failure
    (a NULL pointer is never read: no target needed)."""
    call = SyscallEvent(0, "read", (0, 0, 0, 0, 0, 0), 0)
    text = CallText(None, call, (kind,))
    args = StracePrinter._arguments(text)
    call.result = result
    assert all(isinstance(arg, str) for arg in StracePrinter._finish(text, args))


def test_the_committed_tables_are_what_the_headers_give() -> None:
    for compiler in ("x86_64-linux-gnu-gcc", "i686-linux-gnu-gcc", "arm-linux-gnueabihf-gcc", "riscv64-linux-gnu-gcc",
                     "aarch64-linux-gnu-gcc", "powerpc64-linux-gnu-gcc", "powerpc64le-linux-gnu-gcc",
                     "mips-linux-gnu-gcc", "mips64el-linux-gnuabi64-gcc"):
        require_tool(compiler, "the gcc-TRIPLE cross compiler and linux-libc-dev-ARCH-cross")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_syscall_tables.py"), "--check"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
