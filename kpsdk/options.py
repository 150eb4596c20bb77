"""``OpenOptions``: the keyword options :func:`kpsdk.open` takes for the built-in target kinds.

Each option goes to the target kind named by the spec's scheme, which refuses
options it does not know.  The TypedDict is what type checkers see, so a
misspelled option (``kernal=``) is found before anything runs;
``tests/test_public_api.py`` keeps it equal to the built-in openers'
parameters.  A third-party target kind's own options are passed as usual and
type-check through ``typing.cast`` (or ``**dict``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any, TypedDict

#: default ``stall_limit``: how long QEMU may stay stopped, or gdb stuck on the stub,
#: before a run ends with TargetStalled (here, not in kpsdk.targets.live.target, so that the
#: launchers' signatures name it without importing the live target at start-up)
STALL_LIMIT = 20.0


class OpenOptions(TypedDict, total=False):
    """Keyword options of :func:`kpsdk.open`; which kinds take each is in brackets."""

    #: calling convention of the probed code: ``"user"`` or ``"kernel"`` [all]
    abi: str
    #: symbols that may not be probed (the kernel's NOKPROBE_SYMBOL) [all]
    noprobe: Iterable[str]
    #: directories searched first for separate debug files (``.build-id/xx/yyyy.debug``, a
    #: ``.gnu_debuglink`` name), before ``/usr/lib/debug``: source probe points, ``regs.var``,
    #: CFI backtraces [all]
    debug_dir: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
    #: the program's arguments (``argv[1:]``; ``argv[0]`` is its path) [qemu-user, elf]
    args: Sequence[str]
    #: environment variables for the program (nothing else is in its environment) [qemu-user, elf]
    env: Mapping[str, str]
    #: the program's standard input: its bytes [elf, qemu-user], or a file it reads [qemu-user]
    stdin: bytes | str | os.PathLike[str]
    #: where the program's standard output is streamed as it writes it: a host file descriptor
    #: (an int, left open) or a binary file object (``sys.stdout.buffer``, ``open(p, "wb")``;
    #: a text file's ``.buffer``); default None: only ``s.console`` keeps it (its tail) [elf]
    stdout: int | IO[Any] | None
    #: the same for its standard error (default None); fds 1 and 2 share one open description
    #: when both go to the same place [elf]
    stderr: int | IO[Any] | None
    #: how many bytes of the program's output (stdout and stderr as written, interleaved)
    #: ``s.console`` keeps: the last ones; the rest was streamed (or dropped). Default 1 MiB [elf]
    console_limit: int
    #: the directory the program sees as ``/``, read-only (default: the arch's Debian cross
    #: sysroot ``/usr/TRIPLE`` where installed, else an empty tree; ``"/"`` for the host's) [elf];
    #: where the program's loader and libraries are looked up first (QEMU's ``-L``; default:
    #: ``/usr/<triple>`` for another architecture's dynamically linked program) [qemu-user]
    sysroot: str | os.PathLike[str]
    #: the program's working directory (elf: inside the sysroot, default ``/``) [elf, qemu-user]
    cwd: str | os.PathLike[str]
    #: host directories mapped into the program's tree: ``[(HOST_DIR, GUEST_DIR, "ro"|"rw")]``; ``"rw"``
    #: writes through to the host, the only way a program's files reach it [elf]
    bind: Sequence[tuple[str | os.PathLike[str], str, str]]
    #: the order the program's tasks run in: None (the default) runs them deterministically (the
    #: same interleaving, output and probe hits every run); an int picks another order and other
    #: quanta, reproducibly for the same int (a way to hunt races) [elf]
    schedule_seed: int | None
    #: whether probes fire in every process of the program (True, the default, as strace -f) or only
    #: in the first one, the process the session started (its threads, and what it execs, included;
    #: not the processes it forks) [elf]
    follow: bool
    #: gdb hardware breakpoints for probes [qemu-user, qemu-system, gdb]
    hardware_breakpoints: bool
    #: seconds a stalled QEMU or gdb is waited for before the run fails [qemu-user, qemu-system, gdb]
    stall_limit: float
    #: the kernel image to boot [qemu-system]
    kernel: str
    #: the initramfs [qemu-system]
    initrd: str
    #: the kernel command line (the board's ``console=`` is added unless it names one) [qemu-system]
    append: str
    #: symbols from an ELF (vmlinux), System.map or a kallsyms dump [qemu-system, gdb]
    symbols: str
    #: guest memory (``"512M"``) [qemu-system]
    memory: str
    #: virtual CPUs [qemu-system]
    smp: int
    #: more QEMU arguments [qemu-system]
    qemu_args: Sequence[str]
    #: the kernel function the session opens stopped at (``start_kernel``) [qemu-system]
    ready_symbol: str | None
    #: seconds the kernel gets to reach ``ready_symbol`` [qemu-system]
    boot_timeout: float
    #: how probes trap: ``"gdb"`` (breakpoints, the default) or ``"plugin"`` (kpsdk's QEMU TCG plugin for
    #: kprobes without post_handlers: no stop per hit; needs QEMU >= 10.0, fetched when older) [qemu-system]
    mechanism: str
    #: the architecture, when ``symbols`` is not an ELF file that says it [gdb]
    arch: str
