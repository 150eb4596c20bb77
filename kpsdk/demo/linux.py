"""The last part of ``kpsdk demo``: real Linux programs from the machine itself in Unicorn.

A pipeline of Debian's own programs (``/bin/sh -c 'ls DIR | sort -r | head -n 4'``, all
dynamically linked and stripped) runs in the embedded default in the caller's world (the
host's ``/``): the shell forks and execs each program, the real ``ld.so`` maps the real libc
in each, the pipes carry the bytes between them, and one uprobe on ``libc.so.6:malloc``
sees every allocation of every process, each hit naming its task (``comm[pid]``).  The
system calls are counted through the ``kpsdk_syscall_exit`` hook, and the output must equal
what the same command prints run natively on the same directory (kpsdk's own fixtures).  On
a machine whose ``/bin/sh`` is not x86_64 code the part is skipped with the reason: Unicorn
runs other architectures' programs from their sysroot (``kpsdk probe PROG --sysroot
/usr/TRIPLE``).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

import kpsdk
from kpsdk import fixtures
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.demo.programs import ArchResult, heading
from kpsdk.errors import KpsdkError
from kpsdk.registry import hookimpl

if TYPE_CHECKING:
    from rich.console import Console

    from kpsdk.events import SyscallEvent
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

PROGRAM = Path("/bin/sh")
#: the name shown in the summary table's arch column
ROW = "sh pipeline"


def command(where: str) -> str:
    """The pipeline the part runs (and runs natively to compare)."""
    return f"ls {where} | sort -r | head -n 4"


class _SyscallCounter:
    """Counts the system calls of one session (a plugin on the target events)."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def kpsdk_syscall_exit(self, session: Session, call: SyscallEvent) -> None:
        self.calls += 1


def skip_reason() -> str | None:
    """Why this machine cannot show the part, or None."""
    if not PROGRAM.is_file():
        return f"{PROGRAM} is not on this machine"
    try:
        image = load_elf(PROGRAM)
    except KpsdkError as e:
        return f"{PROGRAM} cannot be read: {e}"
    if image.machine != "EM_X86_64":
        return f"{PROGRAM} is {image.machine} code: this part shows an x86_64 host's own program"
    return None


def demo_real_program(console: Console) -> ArchResult:
    """Run the pipeline on kpsdk's fixtures directory in Unicorn, probed; compare with a native run."""
    res = ArchResult(ROW, real_program=True)
    why = skip_reason()
    heading(console, ROW, "real programs of this machine, a process each, in Unicorn" if why is None
            else "not run")
    if why is not None:
        console.print(Text(why + " (not a demo failure)", style="yellow"))
        return ArchResult(ROW, skipped=why, real_program=True)
    t0 = time.perf_counter()
    where = str(Path(fixtures.__file__).parent)
    line = command(where)
    sizes: list[int] = []
    by_task: dict[str, int] = {}

    counter = _SyscallCounter()
    registry = kpsdk.get_registry()
    registry.pm.register(counter)
    try:
        with kpsdk.open(f"elf:{PROGRAM}", args=["-c", line], sysroot="/", cwd="/") as s:
            def on_malloc(p: Any, regs: PtRegs) -> int:
                sizes.append(regs.arg(0))
                task = s.target.task_info()
                name = f"{task.comm}[{task.pid}]" if task is not None else f"sh[{s.target.program_pid()}]"
                by_task[name] = by_task.get(name, 0) + 1
                return 0

            # the session's decorator looks the bare name up in this session alone: another session
            # open in the same process (another arch's program, with its own libc.so.6) has no say
            s.uprobe("libc.so.6:malloc")(on_malloc)
            status = s.run()
            output = s.console
            libraries = sorted({mf.path.name for mf in s.target.mapped_files()})
    finally:
        registry.pm.unregister(counter)
    native = subprocess.run([str(PROGRAM), "-c", line], capture_output=True, text=True, timeout=60, check=False,
                            cwd="/")
    res.hits = len(sizes)
    res.observed_ok = bool(sizes) and all(n > 0 for n in sizes) and len(by_task) >= 3
    res.output_ok = status == native.returncode and output == native.stdout
    res.seconds = time.perf_counter() - t0
    console.print(Text("1. ", style="bold").append(f"{PROGRAM} -c '{line}'", style="yellow").append(
        f"   forked and exec'd by the shell, each mapped by its own ld.so: {', '.join(libraries)}", style="dim"),
        soft_wrap=True)
    shown = ", ".join(f"{name} {n}" for name, n in by_task.items())
    console.print(Text("2. one uprobe on libc.so.6:malloc, in every process: ", style="bold").append(
        f"{len(sizes)} calls ({shown})", style="yellow"), soft_wrap=True)
    console.print(Text("3. system calls run by kpsdk's Linux layer: ", style="bold").append(
        str(counter.calls), style="yellow").append("   (kpsdk probe PROG --strace prints each)", style="dim"))
    console.print(Text("4. its output is what it prints run natively: ", style="bold").append(
        "yes" if res.output_ok else f"no (status {status} vs {native.returncode})",
        style="green" if res.output_ok else "red"), soft_wrap=True)
    for shown_line in output.splitlines()[:4]:
        console.print(Text("   " + shown_line, style="dim"), soft_wrap=True)
    if not res.output_ok:
        res.notes.append("the output differs from the native run's")
    if not res.observed_ok:
        res.notes.append("the uprobe did not see the pipeline's processes")
    return res
