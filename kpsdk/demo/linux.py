"""The last part of ``kpsdk demo``: a real Linux program from the machine itself in Unicorn.

Debian's own ``/bin/ls`` (dynamically linked, stripped) runs in the embedded
default with the host's ``/`` as its sysroot: the real ``ld.so`` maps the real
libc, a uprobe on ``libc.so.6:malloc`` sees every allocation, the program's
system calls are counted through the ``kpsdk_syscall_exit`` hook, and its output
must equal what ``/bin/ls`` prints run natively on the same directory (kpsdk's
own fixtures).  On a machine whose ``/bin/ls`` is not x86_64 code the part is
skipped with the reason: Unicorn runs other architectures' programs from their
sysroot (``kpsdk probe PROG --sysroot /usr/TRIPLE``).
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

PROGRAM = Path("/bin/ls")
#: the name shown in the summary table's arch column
ROW = "/bin/ls"


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
    """Run ``/bin/ls`` on kpsdk's fixtures directory in Unicorn, probed; compare with a native run."""
    res = ArchResult(ROW, real_program=True)
    why = skip_reason()
    heading(console, ROW, "a real program of this machine, dynamically linked, in Unicorn" if why is None
            else "not run")
    if why is not None:
        console.print(Text(why + " (not a demo failure)", style="yellow"))
        return ArchResult(ROW, skipped=why, real_program=True)
    t0 = time.perf_counter()
    where = str(Path(fixtures.__file__).parent)
    sizes: list[int] = []

    def on_malloc(p: Any, regs: PtRegs) -> int:
        sizes.append(regs.arg(0))
        return 0

    counter = _SyscallCounter()
    registry = kpsdk.get_registry()
    registry.pm.register(counter)
    try:
        with kpsdk.open(f"elf:{PROGRAM}", args=[where], sysroot="/") as s:
            # the session's decorator looks the bare name up in this session alone: another session
            # open in the same process (another arch's program, with its own libc.so.6) has no say
            s.uprobe("libc.so.6:malloc")(on_malloc)
            status = s.run(timeout=60)
            output = s.console
            libraries = [mf.path.name for mf in s.target.mapped_files()]
    finally:
        registry.pm.unregister(counter)
    native = subprocess.run([str(PROGRAM), where], capture_output=True, text=True, timeout=60, check=False)
    res.hits = len(sizes)
    res.observed_ok = bool(sizes) and all(n > 0 for n in sizes)
    res.output_ok = status == native.returncode and output == native.stdout
    res.seconds = time.perf_counter() - t0
    console.print(Text("1. ", style="bold").append(f"{PROGRAM} {where}", style="yellow").append(
        f"   mapped by its own ld.so: {', '.join(libraries)}", style="dim"), soft_wrap=True)
    shown = ", ".join(map(str, sizes[:8])) + (", ..." if len(sizes) > 8 else "")
    console.print(Text("2. a uprobe on libc.so.6:malloc: ", style="bold").append(
        f"{len(sizes)} calls, sizes {shown}", style="yellow"), soft_wrap=True)
    console.print(Text("3. system calls run by kpsdk's Linux layer: ", style="bold").append(
        str(counter.calls), style="yellow").append("   (kpsdk probe PROG --strace prints each)", style="dim"))
    console.print(Text("4. its output is what it prints run natively: ", style="bold").append(
        "yes" if res.output_ok else f"no (status {status} vs {native.returncode})",
        style="green" if res.output_ok else "red"), soft_wrap=True)
    for line in output.splitlines()[:4]:
        console.print(Text("   " + line, style="dim"), soft_wrap=True)
    if not res.output_ok:
        res.notes.append("the output differs from the native run's")
    return res
