"""A part of ``kpsdk demo``: a shell pipeline traced across its processes, as ``strace -f`` would.

The machine's own ``/bin/busybox`` (Debian's busybox-static: one static, stripped program)
runs ``sh -c 'echo hello | tr a-z A-Z'`` in the embedded default: the shell forks a child for
``echo`` and one that execs busybox again as ``tr``, a pipe between them.  Two probes see
them, and each hit prints the task it is in, ``comm-pid`` as a trace's prefix shows it:

- a uprobe at busybox's entry point, by file offset (``/bin/busybox:0xOFF``: the program has no
  symbols), fires in every process that starts busybox: the shell, then ``tr``;
- the system-call boundary (the ``kpsdk_syscall_entry`` hook, where a kernel's kprobe on
  ``__x64_sys_write`` fires) shows every process's ``write`` and ``exit_group``: ``echo``'s
  child writes ``hello``, ``tr`` writes ``HELLO``, and each of the three processes ends.

The output must equal the same command's run natively.  The part is skipped, with the
reason, where ``/bin/busybox`` is missing (``apt-get install busybox-static``) or is not
this machine's own code (then it cannot be run natively to compare).
"""

from __future__ import annotations

import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

import kpsdk
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.binfmt.symbols import shown_name
from kpsdk.demo.programs import ArchResult, heading
from kpsdk.errors import KpsdkError
from kpsdk.registry import hookimpl

if TYPE_CHECKING:
    from rich.console import Console

    from kpsdk.events import SyscallEvent
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

BUSYBOX = Path("/bin/busybox")
PIPELINE = "echo hello | tr a-z A-Z"
#: the name shown in the summary table's arch column
ROW = "busybox pipeline"
#: the system calls shown (every process of the pipeline ends with exit_group)
CALLS = ("write", "exit_group")
#: ELF machines this part compares natively, by the host's ``uname -m``
_HOST_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "riscv64": "EM_RISCV", "i686": "EM_386"}


@dataclass
class Hit:
    """One line of the trace: the task, and what it hit."""

    comm: str
    pid: int
    what: str


def task_of(s: Session) -> tuple[str, int]:
    """The task a hit is in (before the program's second task: the program's own name and pid)."""
    task = s.target.task_info()
    if task is not None:
        return task.comm, task.pid
    return BUSYBOX.name, s.target.program_pid() or 0


class _Calls:
    """The system calls of one session, recorded with their task (a plugin on the target events)."""

    def __init__(self, hits: list[Hit]) -> None:
        self.hits = hits

    @hookimpl
    def kpsdk_syscall_entry(self, session: Session, call: SyscallEvent) -> None:
        if call.name not in CALLS:
            return
        comm, pid = task_of(session)
        if call.name == "write":
            data = session.read_memory(call.args[1], min(call.args[2], 32))
            what = f"write({call.args[0]}, {data!r}, {call.args[2]})"
        else:
            what = f"exit_group({call.args[0]})"
        self.hits.append(Hit(comm, pid, what))


def skip_reason() -> str | None:
    """Why this machine cannot show the part, or None."""
    if not BUSYBOX.is_file():
        return f"{BUSYBOX} is not on this machine (apt-get install busybox-static)"
    try:
        image = load_elf(BUSYBOX)
    except KpsdkError as e:
        return f"{BUSYBOX} cannot be read: {e}"
    host = _HOST_MACHINES.get(platform.machine())
    if image.machine != host:
        return f"{BUSYBOX} is {image.machine} code, not this machine's: it cannot be run natively to compare"
    return None


def entry_offset(path: Path) -> int:
    """The file offset of a program's entry point (a uprobe's ``PATH:0xOFF``)."""
    image = load_elf(path)
    offset = image.vaddr_to_offset(image.entry)
    if offset is None:
        raise KpsdkError(f"{path}: its entry point {image.entry:#x} is in no segment of the file")
    return offset


def demo_pipeline(console: Console) -> ArchResult:
    """Run the pipeline in Unicorn with the probes, print each hit with its task, compare the
    output with a native run's."""
    res = ArchResult(ROW, real_program=True)
    why = skip_reason()
    heading(console, ROW, "a pipeline traced across its processes, in Unicorn" if why is None else "not run")
    if why is not None:
        console.print(Text(why + " (not a demo failure)", style="yellow"))
        return ArchResult(ROW, skipped=why, real_program=True)
    t0 = time.perf_counter()
    hits: list[Hit] = []
    where = f"{BUSYBOX}:{entry_offset(BUSYBOX):#x}"
    calls = _Calls(hits)
    registry = kpsdk.get_registry()
    registry.pm.register(calls)
    try:
        with kpsdk.open(f"elf:{BUSYBOX}", args=["sh", "-c", PIPELINE], env={"PATH": "/usr/bin:/bin"},
                        sysroot="/", cwd="/") as s:
            def on_start(p: Any, regs: PtRegs) -> int:
                comm, pid = task_of(s)
                hits.append(Hit(comm, pid, f"uprobe {where} (the entry point: busybox starts)"))
                return 0

            s.uprobe(where)(on_start)
            status = s.run()
            output = s.console
    finally:
        registry.pm.unregister(calls)
    native = subprocess.run([str(BUSYBOX), "sh", "-c", PIPELINE], capture_output=True, text=True, timeout=60,
                            check=False, cwd="/", env={"PATH": "/usr/bin:/bin"})
    res.hits = len(hits)
    ended = {h.pid for h in hits if h.what.startswith("exit_group")}
    started = [h for h in hits if h.what.startswith("uprobe")]
    res.observed_ok = len(ended) == 3 and len(started) == 2 and {h.pid for h in hits} == ended
    res.output_ok = status == native.returncode and output == native.stdout
    res.seconds = time.perf_counter() - t0
    console.print(Text("1. ", style="bold").append(f"{BUSYBOX} sh -c '{PIPELINE}'", style="yellow").append(
        "   the shell forks echo's child and tr's, a pipe between them", style="dim"), soft_wrap=True)
    console.print(Text("2. each hit with its task (comm-pid), as kpsdk trace's prefix and strace -f show it:",
                       style="bold"))
    for hit in hits:
        console.print(Text(f"   {shown_name(hit.comm)}-{hit.pid}".ljust(18), style="cyan").append(hit.what),
                      soft_wrap=True)
    console.print(Text("3. its output is what it prints run natively: ", style="bold").append(
        "yes" if res.output_ok else f"no (status {status} vs {native.returncode})",
        style="green" if res.output_ok else "red").append(f"   {output.strip()}", style="dim"), soft_wrap=True)
    console.print(Text(f"   the same from the command line: kpsdk trace -e 'p:start {where}' -- {BUSYBOX} sh -c "
                       f"'{PIPELINE}'", style="dim"), soft_wrap=True)
    if not res.output_ok:
        res.notes.append("the output differs from the native run's")
    if not res.observed_ok:
        res.notes.append("the probes did not see the pipeline's three processes")
    return res
