"""Processes, threads, signals and pipes on the embedded default, against a native run.

tests/programs/tasks.c exercises one thing per mode (threads with a mutex and TLS, futex
contention and timed waits, robust mutexes, fork and wait, fork from a thread, a pipe writer
blocked at 64 KiB, SIGPIPE, signal handlers, masks, SIGSEGV escaped by siglongjmp, alarm and
setitimer, SIGCHLD, default actions, a handler changing the saved pc through the ucontext,
execve of itself, a function that forks returning in both processes, the stack grown towards
Linux's 8 MiB limit and past it) and prints only what Linux decides, by signal name: the same
text on every arch.  The ground truth is the x86_64 build run natively on this machine (qemu-user is no
oracle here: it hangs on robust mutexes of foreign arches and cannot exec a foreign binary);
every arch's build under kpsdk must print it byte for byte and exit the same way.

Determinism: the racy mode's four threads append to one log without a lock; under kpsdk the
interleaving (the log's order, and the probe hits with their thread ids) is the same in every
run, and a ``schedule_seed`` gives another one, itself reproducible.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.errors import NotEmulatedError
from tests.conftest import REGISTERED_ARCHS, first_fixture, native_outputs, require_tool, static_builds

SOURCE = Path(__file__).parent / "programs" / "tasks.c"
#: the arches the Linux layer runs and kpsdk builds for
LINUX_ARCHS = tuple(a.name for a in REGISTERED_ARCHS
                    if a.syscalls is not None and a.syscalls.linux is not None and a.toolchain is not None
                    and not a.unicorn_unsupported)
MODES = ("threads", "futex", "robust", "fork", "forkthread", "pipe64k", "sigpipe", "signals", "ucontext", "exec",
         "retfork", "stack")

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the native ground truth is an x86_64 run")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build(arch)``: tasks.c, static with -pthread, for ``arch`` (once per module)."""
    return static_builds(tmp_path_factory, SOURCE, "tasks")


@pytest.fixture(scope="module")
def native(build: Callable[[str], Path]) -> Callable[[str], tuple[str, int]]:
    """The x86_64 build's output and status, run natively: what every arch must print."""
    return native_outputs(build)


def emulated(exe: Path, args: list[str], **options: object) -> tuple[str, int | None]:
    with kpsdk.open(f"elf:{exe}", args=args, **options) as s:  # type: ignore[arg-type]
        status = s.run(timeout=300)
        return s.console, status


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_tasks_print_what_linux_decides(build: Callable[[str], Path], native: Callable[[str], tuple[str, int]],
                                        arch: str, mode: str) -> None:
    expected, status = native(mode)
    assert status == 0 and expected  # the ground truth itself ran
    assert emulated(build(arch), [mode]) == (expected, status)


def test_a_shell_from_popen_and_system(build: Callable[[str], Path],
                                       native: Callable[[str], tuple[str, int]]) -> None:
    """popen() and system() run the host's /bin/sh (dash, dynamically linked) in a child."""
    assert emulated(build("x86_64"), ["shell"]) == native("shell")


@pytest.mark.parametrize("optimize", [True, False], ids=["detours", "breakpoints"])
@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_return_probes_follow_a_fork(build: Callable[[str], Path], native: Callable[[str], tuple[str, int]],
                                     arch: str, optimize: bool) -> None:
    """A kretprobe on a function that forks sees it return twice, in the child with the child's
    task (the parent's hooked call is the child's too, as uprobes copy it), and a function
    both processes call after the fork returns in each with that process's values: the
    return addresses and values kpsdk reports are those the native run prints."""
    returns: list[tuple[str, int, int]] = []
    with kpsdk.open(f"elf:{build(arch)}", args=["retfork"]) as s:
        s.kprobes_optimization = optimize

        @s.kretprobe("spawn")
        def on_spawn(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> int:
            returns.append(("spawn", ri.task, regs.return_value))
            return 0

        @s.kretprobe("leaf")
        def on_leaf(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> int:
            returns.append(("leaf", ri.task, regs.return_value))
            return 0

        assert s.run(timeout=300) == 0
        console = s.console
    assert console == native("retfork")[0]
    # an int comes back in the low 32 bits of the return register
    signed = sorted((name, task, (value & 0xFFFFFFFF) - ((value & 0x80000000) << 1)) for name, task, value in returns)
    parent, child = 1000, 1001
    assert signed == sorted([("leaf", parent, 3), ("spawn", parent, -5), ("spawn", child, 5)]
                            + [("leaf", child, 2 * (100 + i) + 1) for i in range(3)]
                            + [("leaf", parent, 2 * (200 + i) + 1) for i in range(3)])


def racy(exe: Path, seed: int | None) -> tuple[str, str]:
    """The racy mode's output and a digest of its probe hits (thread id, argument), in order."""
    hits: list[tuple[int, int]] = []
    with kpsdk.open(f"elf:{exe}", args=["racy"], schedule_seed=seed) as s:
        @s.kprobe("racer")
        def on_racer(p: kpsdk.Kprobe, regs: kpsdk.PtRegs) -> int:
            hits.append((s.target.current_task(), regs.arg(0)))  # type: ignore[attr-defined]
            return 0

        assert s.run(timeout=300) == 0
        assert sorted(arg for _, arg in hits) == [0, 1, 2, 3] and len({tid for tid, _ in hits}) == 4
        return s.console, hashlib.sha256(repr(hits).encode()).hexdigest()


def test_a_racy_program_runs_the_same_way_every_time(build: Callable[[str], Path]) -> None:
    exe = build("x86_64")
    runs = {racy(exe, None) for _ in range(10)}
    assert len(runs) == 1
    (console, _), = runs
    assert console.startswith("8000 entries")


def test_a_schedule_seed_gives_another_interleaving_reproducibly(build: Callable[[str], Path]) -> None:
    exe = build("x86_64")
    default = racy(exe, None)
    seeded = racy(exe, 7)
    assert seeded == racy(exe, 7)
    assert seeded[0] != default[0]  # the log's order differs


def test_a_bad_schedule_seed_is_refused(build: Callable[[str], Path]) -> None:
    with pytest.raises(kpsdk.ArgumentError, match="schedule_seed"):
        kpsdk.open(f"elf:{build('x86_64')}", schedule_seed="7")  # type: ignore[arg-type]


# -- fidelity -----------------------------------------------------------------------------------

FP = r"""
#include <stdio.h>
int main(void)
{
    volatile long double x = 1.0L;
    volatile long i = (long)(x * 3.7L);  /* gcc saves and restores the x87 control word */
    long double third = 1.0L / 3;
    double half = 999 * 0.5;
    printf("%ld %.19Lf %.12g\n", i, third, half);
    return 0;
}
"""


@pytest.mark.parametrize("arch", [a for a in ("x86_64", "i386") if a in LINUX_ARCHS])
def test_x87_arithmetic_runs_at_full_precision_after_a_cast(tmp_path: Path, arch: str) -> None:
    """A process starts with the x87 control word 0x37f (64-bit precision) and MXCSR 0x1f80, as
    Linux starts it: with 0, long double arithmetic after a cast ran at 24-bit precision."""
    fixture = first_fixture(arch)
    cc = require_tool(fixture.compilers[0], fixture.libc_packages)
    src, exe = tmp_path / "fp.c", tmp_path / f"fp-{arch}"
    src.write_text(FP)
    subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    assert emulated(exe, []) == ("3 0.3333333333333333333 499.5\n", 0)


KUSER = r"""
#include <stdio.h>
typedef int (*cmpxchg_t)(int, int, volatile int *);
typedef void *(*gettls_t)(void);
int main(void)
{
    volatile int v = 5;
    cmpxchg_t cx = (cmpxchg_t)0xffff0fc0;
    gettls_t get_tls = (gettls_t)0xffff0fe0;
    int swapped = cx(5, 7, &v), refused = cx(5, 9, &v);
    void *tp;
    __asm__("mrc p15, 0, %0, c13, c0, 3" : "=r"(tp));
    printf("cmpxchg %d %d -> %d, tls %d, version %d\n", swapped == 0, refused != 0, v, get_tls() == tp,
           *(int *)0xffff0ffc);
    return 0;
}
"""


@pytest.mark.skipif("arm" not in LINUX_ARCHS, reason="no arm backend")
def test_arm_kuser_helpers_answer_as_under_qemu(tmp_path: Path) -> None:
    fixture = first_fixture("arm")
    cc = require_tool(fixture.compilers[0], fixture.libc_packages)
    src, exe = tmp_path / "kuser.c", tmp_path / "kuser"
    src.write_text(KUSER)
    subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    qemu = subprocess.run([require_tool(fixture.qemu, "qemu-user"), str(exe)], capture_output=True, text=True,
                          timeout=60, check=True)
    assert emulated(exe, []) == (qemu.stdout, 0) == ("cmpxchg 1 1 -> 7, tls 1, version 5\n", 0)


OABI = """
.global _start
.arm
_start:
    mov r0, #1
    adr r1, msg
    mov r2, #3
    swi 0x900004   @ OABI write
    mov r0, #0
    swi 0x900001   @ OABI exit
msg: .ascii "hi\\n"
"""


@pytest.mark.skipif("arm" not in LINUX_ARCHS, reason="no arm backend")
def test_an_oabi_call_is_refused_by_name(tmp_path: Path) -> None:
    """An OABI ``swi 0x9000NN`` would otherwise be taken for an EABI call with r7's number."""
    fixture = first_fixture("arm")
    cc = require_tool(fixture.compilers[0], fixture.libc_packages)
    src, exe = tmp_path / "oabi.S", tmp_path / "oabi"
    src.write_text(OABI)
    subprocess.run([cc, "-nostdlib", "-static", "-o", str(exe), str(src)], check=True, capture_output=True)
    with kpsdk.open(f"elf:{exe}") as s, pytest.raises(NotEmulatedError, match=r"OABI system call \(swi 0x900004"):
        s.run(timeout=60)
