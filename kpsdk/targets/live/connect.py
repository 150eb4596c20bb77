"""gdb set up for a live target: its settings, the program file, the remote, kpsdk's agent.

What reaches gdb unquoted (the remote, gdb's architecture name, register names from
arch plugins) must be a plain word (:func:`check_gdb_words`); file names travel as
one MI c-string (:func:`kpsdk.targets.live.mi.c_string`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError
from kpsdk.targets.live.limits import ATTACH_TIMEOUT, STALL_MARGIN
from kpsdk.targets.live.mi import GdbError, c_string

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.targets.live.mi import MiConnection

#: the agent gdb sources once attached (it runs inside gdb's Python)
AGENT = Path(__file__).with_name("gdb_agent.py")
#: what gdb may be given as an architecture, a register name, a remote
_GDB_ARCH = re.compile(r"[\w:.+-]+")
_GDB_REGISTER = re.compile(r"\w+")
_REMOTE = re.compile(r"[\w.:/+\[\]-]+")


def check_gdb_words(arch: Arch, remote: str) -> None:
    """What goes into gdb commands unquoted is a plain word (a backstop: launchers check
    user input with better messages, and arch plugins supply the names)."""
    bad = [f"remote {remote!r}"] if not _REMOTE.fullmatch(remote) else []
    if not _GDB_ARCH.fullmatch(arch.gdb_arch):
        bad.append(f"gdb architecture {arch.gdb_arch!r}")
    bad += [f"register {r.gdb!r}" for r in arch.registers if not _GDB_REGISTER.fullmatch(r.gdb)]
    if bad:
        raise TargetError(f"cannot give gdb {', '.join(bad)}: not a plain name")


def attach(mi: MiConnection, arch: Arch, abi_kind: str, image: ElfImage | None, remote: str,
           stall_limit: float) -> dict[str, int]:
    """Set gdb up for ``arch``, attach it to the stub at ``remote`` and load the agent;
    gdb's register numbers by name.  A stub that does not answer is a TargetError."""
    mi.command(f"-gdb-set architecture {arch.gdb_arch}")
    # fail fast on a dead or mute stub: gdb's defaults retry for ~15 s
    mi.command("-gdb-set tcp connect-timeout 3")
    mi.command("-gdb-set remotetimeout 3")
    # gdb's byte order follows a loaded file, else the architecture's default (big for
    # powerpc): say it, so that ppc64le's registers and memory read the right way round
    mi.command(f"-gdb-set endian {arch.endian}")
    if abi_kind == "kernel" and arch.gdb_linux_steps_in_software:
        # a kernel is no Linux process: with gdb's Linux ABI, riscv64 steps by planting a
        # breakpoint on the next instruction and continuing, so a pending interrupt runs
        # first (a post_handler ran in the timer's code, and the probed instruction again
        # after it: a second hit).  With none, gdb asks the stub to step, and QEMU steps
        # with interrupts held off, as the kernel's kprobes step with them disabled.
        mi.command("-gdb-set osabi none")
    if image is not None:
        path = os.path.abspath(image.path)  # gdb would expand a leading ~
        mi.command(f"-file-exec-and-symbols {c_string(path, 'the program file')}")
    try:
        mi.command(f"-target-select remote {remote}", timeout=ATTACH_TIMEOUT)
    except GdbError as exc:
        raise TargetError(f"cannot attach to the gdbstub at {remote}: {exc}") from exc
    except TargetError as exc:
        raise TargetError(f"cannot attach to the gdbstub at {remote}: it does not answer the gdb remote "
                          f"protocol ({exc})") from exc
    # attached: from now on a stub that freezes is waited for, not sent the packet again
    # (which puts gdb out of step with it), until kpsdk's own stall checks have acted
    mi.command(f"-gdb-set remotetimeout {math.ceil(stall_limit + STALL_MARGIN)}")
    mi.console_command(f"source {AGENT}")
    names = mi.command("-data-list-register-names").get("register-names", [])
    mi.events.clear()
    mi.trouble = None  # what the handshake said is past: runs watch for new complaints
    return {n: i for i, n in enumerate(names) if n}
