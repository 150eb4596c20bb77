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


def check_gdb_words(arch: Arch | None, remote: str) -> None:
    """What goes into gdb commands unquoted is a plain word (a backstop: launchers check
    user input with better messages, and arch plugins supply the names)."""
    bad = [f"remote {remote!r}"] if not _REMOTE.fullmatch(remote) else []
    if arch is not None and not _GDB_ARCH.fullmatch(arch.gdb_arch):
        bad.append(f"gdb architecture {arch.gdb_arch!r}")
    bad += [f"register {r.gdb!r}" for r in (arch.registers if arch is not None else ())
            if not _GDB_REGISTER.fullmatch(r.gdb)]
    if bad:
        raise TargetError(f"cannot give gdb {', '.join(bad)}: not a plain name")


def attach(mi: MiConnection, arch: Arch, abi_kind: str, image: ElfImage | None, remote: str,
           stall_limit: float) -> dict[str, int]:
    """Set gdb up for ``arch``, attach it to the stub at ``remote`` and load the agent;
    gdb's register numbers by name.  A stub that does not answer is a TargetError."""
    select_remote(mi, arch, abi_kind, image, remote)
    return finish_attach(mi, stall_limit)


#: gdb's sysroot for stubs whose files kpsdk finds itself (``files=False``): a directory that
#: does not exist, so that gdb reads no program or library of its own, neither from the host
#: nor over the remote protocol (``target:``, megabytes per library)
NO_SYSROOT = "/nonexistent/kpsdk-finds-the-files"


def select_remote(mi: MiConnection, arch: Arch | None, abi_kind: str | None, image: ElfImage | None,
                  remote: str, files: bool = True) -> None:
    """Set gdb up and connect it to the stub at ``remote`` (the first half of :func:`attach`).

    ``arch`` None: gdb takes the architecture from the stub's target description (a
    ``gdb://`` stub nobody named the program of).  ``files=False``: gdb loads no file and
    no library symbols by itself (kpsdk reads the program and its libraries, and says
    where they are; gdb's own copies would only cost time).
    """
    if arch is not None:
        mi.command(f"-gdb-set architecture {arch.gdb_arch}")
    # fail fast on a dead or mute stub: gdb's defaults retry for ~15 s, a refused connection
    # included (reported as "Connection timed out" once the time is up); with auto-retry off a
    # refusal is reported at once.  No probe connection is made first: qemu-user's stub and
    # gdbserver --once take the first connection as the debugger's and go on without one when
    # it closes
    mi.command("-gdb-set tcp auto-retry off")
    mi.command("-gdb-set tcp connect-timeout 3")
    mi.command("-gdb-set remotetimeout 3")
    if not files:
        mi.command(f"-gdb-set sysroot {NO_SYSROOT}")
        mi.command("-gdb-set auto-solib-add off")
        mi.command("-gdb-set exec-file-mismatch off")
    if arch is not None:
        # gdb's byte order follows a loaded file, else the architecture's default (big for
        # powerpc): say it, so that ppc64le's registers and memory read the right way round
        mi.command(f"-gdb-set endian {arch.endian}")
        if abi_kind == "kernel":
            kernel_osabi(mi, arch)
    if image is not None:
        path = os.path.abspath(image.path)  # gdb would expand a leading ~
        mi.command(f"-file-exec-and-symbols {c_string(path, 'the program file')}")
    try:
        mi.command(f"-target-select remote {remote}", timeout=ATTACH_TIMEOUT)
    except GdbError as exc:
        if "Connection refused" in str(exc):
            raise TargetError(f"cannot attach to the gdbstub at {remote}: the connection was refused (nothing "
                              "listens there: is the stub running, on that host and port?)") from exc
        raise TargetError(f"cannot attach to the gdbstub at {remote}: {exc}") from exc
    except TargetError as exc:
        raise TargetError(f"cannot attach to the gdbstub at {remote}: it does not answer the gdb remote "
                          f"protocol ({exc})") from exc


def kernel_osabi(mi: MiConnection, arch: Arch) -> None:
    """A kernel is no Linux process: with gdb's Linux ABI, riscv64 steps by planting a
    breakpoint on the next instruction and continuing, so a pending interrupt runs first
    (a post_handler ran in the timer's code, and the probed instruction again after it: a
    second hit).  With none, gdb asks the stub to step, and QEMU steps with interrupts held
    off, as the kernel's kprobes step with them disabled."""
    if arch.gdb_linux_steps_in_software:
        mi.command("-gdb-set osabi none")


def finish_attach(mi: MiConnection, stall_limit: float) -> dict[str, int]:
    """The second half of :func:`attach`: gdb's patience raised, the agent loaded; gdb's
    register numbers by name."""
    # attached: from now on a stub that freezes is waited for, not sent the packet again
    # (which puts gdb out of step with it), until kpsdk's own stall checks have acted
    mi.command(f"-gdb-set remotetimeout {math.ceil(stall_limit + STALL_MARGIN)}")
    mi.console_command(f"source {AGENT}")
    names = mi.command("-data-list-register-names").get("register-names", [])
    mi.events.clear()
    mi.trouble = None  # what the handshake said is past: runs watch for new complaints
    return {n: i for i, n in enumerate(names) if n}


_CURRENT_ARCH = re.compile(r'\(currently "([^"]+)"\)')
_SET_ARCH = re.compile(r'set to "([^"]+)"')
_CURRENT_ENDIAN = re.compile(r"(little|big) endian")


def stub_architecture(mi: MiConnection) -> tuple[str, str]:
    """gdb's name of the architecture the connected stub described, and its byte order."""
    shown = mi.console_command("show architecture")
    arch = _CURRENT_ARCH.search(shown) or _SET_ARCH.search(shown)
    endian = _CURRENT_ENDIAN.search(mi.console_command("show endian"))
    if arch is None or endian is None:
        raise TargetError("the gdbstub did not say its architecture: give arch=... (--arch) or symbols=... "
                          "(--symbols) an ELF file")
    return arch.group(1), endian.group(1)
