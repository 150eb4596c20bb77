"""Launchers for live targets: ``qemu-user:`` and ``qemu-system:`` (``gdb://`` is
:mod:`kpsdk.targets.live.gdbremote`'s, ``native:`` and ``pid:`` :mod:`kpsdk.targets.live.gdbserver`'s).

Each starts what it needs (QEMU with its gdbstub on a unix socket in a private
temporary directory, :mod:`kpsdk.targets.live.sockdir`: nothing listens on the
network, no port can be taken), then hands over to
:class:`~kpsdk.targets.live.target.GdbTarget`, which owns and reaps the processes.
qemu-user's gdbstub accepts exactly one connection, so readiness is the socket
file appearing, never a probing connect.

What a user passes travels as data, never as a command: QEMU gets an argv list
(no shell), gdb gets files as quoted MI arguments, and a ``gdb://`` remote is
checked to be exactly ``HOST:PORT`` before gdb sees it (gdb's ``target remote``
would run ``|cmd`` in a shell).  Whatever cannot be carried that way is refused
with a TargetError that names it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk import hookimpl
from kpsdk.binfmt.files import read_regular
from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import SymbolError, TargetError, ToolMissingError
from kpsdk.options import STALL_LIMIT
from kpsdk.target import TargetKind
from kpsdk.targets.live.mi import check_text
from kpsdk.targets.live.processes import reap
from kpsdk.targets.live.sockdir import private_dir
from kpsdk.targets.live.userstub import place_program

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.targets.live.target import GdbTarget
    from kpsdk.targets.live.tcg.launch import PluginLaunch

#: how long QEMU gets to create its gdbstub socket
STARTUP_TIMEOUT = 10.0
#: qemu-system: how long the kernel gets to reach the symbol it is stopped at
BOOT_TIMEOUT = 120.0
#: the kernel function a qemu-system session stops at before handing over:
#: from here on the kernel's text is mapped at its link address
KERNEL_READY_SYMBOL = "start_kernel"
#: the kernel command line besides the console: image addresses are runtime addresses (no
#: KASLR), and a panic ends QEMU at once (with ``-no-reboot``)
DEFAULT_APPEND = "nokaslr panic=-1"


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ToolMissingError(tool, package)
    return path


def _start(cmd: list[str], sock: Path, stdin: Any = subprocess.DEVNULL,
           cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start QEMU in its own process group and wait for its gdbstub socket."""
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=cwd)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not sock.exists():
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
            raise TargetError(f"{Path(cmd[0]).name} exited with status {proc.returncode} before its gdbstub "
                              f"was up" + (f": {err}" if err else ""))
        if time.monotonic() > deadline:
            reap(proc)
            raise TargetError(f"{Path(cmd[0]).name} did not open its gdbstub within {STARTUP_TIMEOUT:g} s")
        time.sleep(0.01)
    return proc


def load_symbols(path: str | Path) -> tuple[SymbolTable, ElfImage | None]:
    """Symbols from a file of any kind kpsdk reads, and the ELF image when it is one.

    An ELF (a program, or a vmlinux with its ``.symtab``) goes through
    :func:`~kpsdk.binfmt.elfimage.load_elf` (Thumb bits, ppc64 descriptors); anything
    else (a kernel-space ELF without symbols too: MIPS's self-extracting ``vmlinuz``) is a
    kernel's ``System.map``, ``/proc/kallsyms`` dump or image, which
    :func:`kpsdk.kernel.kallsyms.load_kernel_symbols` tells apart by content.
    """
    from kpsdk.binfmt.elfimage import parse_elf  # pyelftools loads when first used (start-up time)

    try:
        raw, st = read_regular(path)
    except OSError as exc:
        raise SymbolError(f"cannot read symbols from {path}: {exc.strerror}") from exc
    if raw[:4] == b"\x7fELF":
        image = parse_elf(raw, Path(path), (st.st_dev, st.st_ino))
        if len(image.symbols) or image.kind != "ET_EXEC" or image.entry < 1 << (image.elf_class - 1):
            return image.symbols, image
        # a kernel-space ELF without symbols: a self-extracting kernel (MIPS's vmlinuz), whose
        # kernel and kallsyms are inside it
    from kpsdk.kernel.kallsyms import kernel_symbols_of

    return kernel_symbols_of(raw, path), None


def open_qemu_user(rest: str, registry: Registry, args: list[str] | tuple[str, ...] = (), abi: str = "user",
                   hardware_breakpoints: bool = False, env: dict[str, str] | None = None,
                   stall_limit: float = STALL_LIMIT, sysroot: str | os.PathLike[str] | None = None,
                   cwd: str | os.PathLike[str] | None = None,
                   stdin: bytes | str | os.PathLike[str] | None = None,
                   **options: Any) -> GdbTarget:
    """``qemu-user:PROG``: run PROG under ``qemu-<arch>`` (picked from its ELF header) and attach.

    A dynamically linked program opens stopped at its entry point, its libraries
    loaded (:mod:`kpsdk.targets.live.solibs`); they are looked up in ``sysroot`` first
    (QEMU's ``-L``; by default Debian's cross sysroot ``/usr/<triple>`` for a program
    of another architecture).  ``cwd``: its working directory; ``stdin``: its standard input, bytes or a
    file to read (else none).
    """
    from kpsdk.binfmt.elfimage import load_elf
    from kpsdk.targets.live.target import GdbTarget

    if options:
        raise TargetError(f"qemu-user: unknown options {', '.join(options)} (known: args, abi, "
                          "hardware_breakpoints, env, stall_limit, sysroot, cwd, stdin)")
    prog = Path(rest)
    check_text(os.path.abspath(prog), "the program file")  # gdb is given it, and cannot take a line break
    image = load_elf(prog)
    arch = registry.archs.by_elf(image.machine, image.elf_class, image.endian)
    qemu = _need(arch.qemu_user, "qemu-user")
    _need("gdb-multiarch", "gdb-multiarch")
    workdir = _directory(cwd, "cwd") if cwd is not None else Path.cwd()
    root = choose_sysroot(image, arch, sysroot)
    cmd = [qemu, *_env_options(env or {}), *(["-L", str(root)] if root is not None else [])]
    tmp, cleanup = private_dir()
    sock = tmp / "gdb.sock"
    # a program named like an option would be taken for one by qemu-user
    program = f"./{prog}" if str(prog).startswith("-") else str(prog)
    if cwd is not None and not prog.is_absolute():
        program = str(prog.absolute())  # QEMU runs in cwd; the path was the caller's
    try:
        with _input(stdin) as source:
            proc = _start([*cmd, "-g", str(sock), program, *map(str, args)], sock, source,
                          workdir if cwd is not None else None)
    except BaseException:
        cleanup()
        raise

    def interrupt() -> None:
        # qemu-user's gdbstub ignores gdb's interrupt; a SIGINT to QEMU is
        # reported to gdb as the guest's stop (and gdb does not pass it on)
        os.kill(proc.pid, signal.SIGINT)

    target = GdbTarget(arch, str(sock), abi_kind=abi, image=image, processes=[proc], interrupt=interrupt,
                       hardware_breakpoints=hardware_breakpoints, cleanup=cleanup, stall_limit=stall_limit)
    target.hw_watchpoints = False  # qemu-user's gdbstub answers Z2/Z3/Z4 as unsupported
    target.sysroot = root
    try:
        place_program(target, image, root, workdir)
    except BaseException:
        target.close()
        raise
    return target


def _directory(value: str | os.PathLike[str], option: str) -> Path:
    path = Path(os.fspath(value)) if isinstance(value, (str, os.PathLike)) else None
    if path is None or "\0" in str(path) or not path.is_dir():
        raise TargetError(f"qemu-user: {option}={value!r} is not a directory")
    return path


@contextlib.contextmanager
def _input(stdin: bytes | str | os.PathLike[str] | None) -> Iterator[Any]:
    """The program's standard input: ``stdin``'s bytes (through an unnamed temporary file, so
    a program that reads late never blocks QEMU's start), the file ``stdin`` names (opened for
    reading), else none."""
    if stdin is None:
        yield subprocess.DEVNULL
        return
    if isinstance(stdin, bytes | bytearray | memoryview):
        with tempfile.TemporaryFile() as data:
            data.write(stdin)
            data.seek(0)
            yield data
        return
    path = Path(os.fspath(stdin)) if isinstance(stdin, (str, os.PathLike)) else None
    if path is None or "\0" in str(path):
        raise TargetError(f"qemu-user: stdin={stdin!r} is not a file name")
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed once QEMU has its own copy
    except OSError as exc:
        raise TargetError(f"qemu-user: cannot read stdin={stdin!r}: {exc.strerror}") from exc
    with f:
        yield f


def choose_sysroot(image: ElfImage, arch: Arch, sysroot: str | os.PathLike[str] | None) -> Path | None:
    """The directory qemu-user looks up the program's loader and libraries in first (``-L``).

    Given: it must be a directory.  Otherwise, for a dynamically linked program whose
    loader (``PT_INTERP``) the host does not have for this architecture, Debian's cross
    sysroot ``/usr/<triple>``; if that is missing too, a :class:`ToolMissingError`
    naming its package.  Static programs and the host's own need none.
    """
    if sysroot is not None:
        return _directory(sysroot, "sysroot")
    if image.interp is None or _runs_natively(image):
        return None
    root = Path("/usr") / arch.multiarch if arch.multiarch else None
    if root is not None and (root / image.interp.lstrip("/")).is_file():
        return root
    if not arch.cross_libc_package:
        raise TargetError(f"{image.path} needs the loader {image.interp}, which this host does not have for "
                          f"{arch.name}: pass sysroot=DIR (--sysroot), a directory holding it")
    raise ToolMissingError(f"the {arch.name} loader {image.interp} (sysroot {root})", arch.cross_libc_package)


def _runs_natively(image: ElfImage) -> bool:
    """Whether the host has the program's loader, built for the program's machine."""
    assert image.interp is not None
    try:
        with open(image.interp, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    machine = int.from_bytes(head[18:20], "little" if head[5:6] == b"\x01" else "big")
    return head[:4] == b"\x7fELF" and head[4] == (1 if image.elf_class == 32 else 2) and \
        ELF_MACHINES.get(image.machine) == machine


#: e_machine numbers of the machines kpsdk's architectures name (the gABI's table)
ELF_MACHINES = {"EM_386": 3, "EM_PPC64": 21, "EM_ARM": 40, "EM_X86_64": 62, "EM_RISCV": 243}


def _env_options(env: dict[str, str]) -> list[str]:
    """qemu-user's ``-E NAME=VALUE`` options, which it splits at commas: a comma (or a NUL,
    which no argv carries) cannot be passed, and is refused rather than set other variables."""
    options = []
    for key, value in env.items():
        if not (isinstance(key, str) and isinstance(value, str)) or "=" in key or not key \
                or any(c in key + value for c in ",\0"):
            raise TargetError(f"qemu-user: cannot set the environment variable {key!r}={value!r}: a name must be "
                              "non-empty text without '=', and neither may hold ',' (qemu-user's -E splits there)")
        options += ["-E", f"{key}={value}"]
    return options


#: QEMU's accelerator for qemu-system targets: TCG with one thread for every vCPU (round-robin).
#: QEMU's default for x86, arm, riscv64 and ppc64 guests is one thread per vCPU (MTTCG), and there
#: gdbstub's single-step flag SSTEP_NOTIMER is not applied (only the round-robin loop stops the
#: virtual clock while stepping): a timer interrupt raised in the main loop during gdb's step over
#: a breakpoint exits the step's translation block before it executes anything, QEMU still reports
#: the step as done (``cpu_tb_exec``), and gdb evaluates the same breakpoint a second time, so one
#: call was reported twice (docs/api/kernels.md, "Kernels on each architecture").  With ``-smp 1`` one thread is
#: what MTTCG would run anyway.
TCG_ACCEL = "tcg,thread=single"


def open_qemu_system(rest: str, registry: Registry, kernel: str | None = None, initrd: str | None = None,
                     append: str = DEFAULT_APPEND, symbols: str | None = None, memory: str | None = None,
                     smp: int = 1, qemu_args: list[str] | tuple[str, ...] = (), abi: str = "kernel",
                     hardware_breakpoints: bool = False, ready_symbol: str | None = KERNEL_READY_SYMBOL,
                     boot_timeout: float = BOOT_TIMEOUT, stall_limit: float = STALL_LIMIT,
                     mechanism: str = "gdb", **options: Any) -> GdbTarget:
    """``qemu-system:ARCH``: boot a kernel under TCG and attach.

    Symbols come from ``symbols`` (ELF, vmlinux, System.map, kallsyms dump) or
    else from the kernel image's own kallsyms table.  With a kernel, the
    session opens stopped at ``ready_symbol`` (``start_kernel``), when the
    kernel's text is mapped: probes are validated against live memory.
    ``mechanism="plugin"``: kprobes without post_handlers are served by kpsdk's TCG plugin
    (:mod:`kpsdk.targets.live.tcg.target`), with no gdb stop per hit.
    """
    from kpsdk.targets.live.target import GdbTarget

    if options:
        raise TargetError(f"qemu-system: unknown options {', '.join(options)}")
    extra = check_qemu_args(qemu_args)
    arch = registry.arch(rest)
    board = arch.qemu_system
    if board is None:
        raise TargetError(f"no qemu-system machine is known for {arch.name}")
    launch = _plugin_launch(arch, mechanism)
    qemu = str(launch.qemu.binary) if launch is not None else _need(board.binary, board.package)
    _need("gdb-multiarch", "gdb-multiarch")
    source = symbols or kernel
    table, image = load_symbols(source) if source else (SymbolTable(), None)
    tmp, cleanup = private_dir()
    sock = tmp / "gdb.sock"
    cmd = [qemu, *board.command(), "-accel", TCG_ACCEL, "-m", memory or board.memory, "-smp", str(smp),
           "-display", "none",
           "-monitor", "none", "-serial", "stdio", "-no-reboot", "-S", "-gdb", f"unix:{sock},server=on,wait=off"]
    if kernel:
        cmd += ["-kernel", str(kernel), "-append", with_console(append, board.console)]
    if initrd:
        cmd += ["-initrd", str(initrd)]
    cmd += extra
    try:
        cmd += launch.arguments(tmp) if launch is not None else []
        proc = _start(cmd, sock)
    except BaseException:
        cleanup()
        raise
    make = launch.target if launch is not None else GdbTarget
    target = make(arch, str(sock), abi_kind=abi, symbols=table, processes=[proc],
                  hardware_breakpoints=hardware_breakpoints, cleanup=cleanup, stall_limit=stall_limit)
    target.kernel_image = kernel or symbols  # where the trace prefix finds the kernel's BTF
    target.symbols_file = str(source) if image is not None else None  # a vmlinux: its DWARF (kpsdk.debuginfo)
    target.board = board  # its counters: the trace's guest clock (kpsdk/kernel/guestclock.py)
    if kernel and ready_symbol and ready_symbol in table:
        try:
            target.run_to(ready_address(arch, table, image, ready_symbol), boot_timeout)
        except BaseException:
            target.close()
            raise
    return target


def _plugin_launch(arch: Arch, mechanism: object) -> PluginLaunch | None:
    """What ``mechanism=`` asks for: None for gdb's breakpoints, the plugin's launch for ``"plugin"``."""
    from kpsdk.targets.live.tcg.launch import MECHANISMS, PluginLaunch

    if mechanism not in MECHANISMS:
        raise TargetError(f"qemu-system: mechanism={mechanism!r} is not one of {', '.join(MECHANISMS)}")
    return PluginLaunch(arch) if mechanism == "plugin" else None


def ready_address(arch: Arch, table: SymbolTable, image: ElfImage | None, name: str) -> int:
    """Where the session waits for the kernel: ``name``'s entry as a direct call reaches it.

    On ppc64 ELFv2 (ppc64le kernels) a ``bl`` from the same module lands on the local entry,
    past the two instructions that set up r2, so a breakpoint on the symbol's own address is
    never passed by ``start_kernel``'s caller.  The code is not in memory before the boot
    (the firmware loads it), so the local entry is read from the kernel ELF's bytes; without
    them (symbols from a System.map) the symbol's address is all there is.
    """
    address = table.get(name).address
    code = image.read(address, 8) if image is not None and arch.local_entry is not None else None
    if code is None or arch.local_entry is None:
        return address
    return address + arch.local_entry(code)


#: QEMU options kpsdk sets itself (the gdbstub, the console, the monitor, the start paused):
#: another value would cut kpsdk off from the guest, so ``qemu_args`` may not name them
OWNED_QEMU_OPTIONS = frozenset({"-gdb", "-s", "-S", "-serial", "-monitor", "-qmp", "-daemonize", "-nographic",
                                "-kernel", "-initrd", "-append", "-no-reboot", "-display"})


def check_qemu_args(qemu_args: object) -> list[str]:
    """``qemu_args`` as QEMU's extra argv words: a list or tuple of text, each one word that an
    argv can carry (no NUL), none of the options kpsdk owns (:data:`OWNED_QEMU_OPTIONS`, also
    in their ``--opt`` and ``-opt=value`` forms).  No shell ever sees them."""
    if isinstance(qemu_args, str) or not isinstance(qemu_args, (list, tuple)):
        raise TargetError(f"qemu_args must be a list of QEMU arguments, not {type(qemu_args).__name__}")
    out: list[str] = []
    for arg in qemu_args:
        if not isinstance(arg, str):
            raise TargetError(f"qemu_args: {arg!r} is not text")
        if "\0" in arg:
            raise TargetError(f"qemu_args: {arg!r} holds a NUL byte, which no command-line argument can carry")
        option = "-" + arg.lstrip("-").split("=", 1)[0] if arg.startswith("-") else ""
        if option in OWNED_QEMU_OPTIONS:
            raise TargetError(f"qemu_args: {arg!r} would change what kpsdk sets itself ({option}): use the "
                              "session's own options (kernel=, initrd=, append=) or leave it to kpsdk")
        out.append(arg)
    return out


def with_console(append: str, console: str) -> str:
    """The kernel command line ``append``, with ``console=CONSOLE`` (the board's serial
    console) added unless it names a console itself: without one the kernel prints
    nothing kpsdk can show (``s.console`` would stay empty)."""
    if any(word.startswith("console=") for word in append.split()):
        return append
    return f"console={console} {append}".strip()


@hookimpl
def kpsdk_targets() -> list[TargetKind]:
    from kpsdk.targets.live.gdbremote import open_gdb
    from kpsdk.targets.live.gdbserver import open_native, open_pid

    return [
        TargetKind("qemu-user", open_qemu_user, "a program under qemu-user, through gdb (qemu-user:PROG)"),
        TargetKind("qemu-system", open_qemu_system, "a kernel booted in qemu-system, through gdb (qemu-system:ARCH)"),
        TargetKind("gdb", open_gdb, "an existing gdbstub (gdb://HOST:PORT): a process behind gdbserver, a kernel, "
                   "a board"),
        TargetKind("native", open_native, "a program run natively under gdbserver (native:PROG)"),
        TargetKind("pid", open_pid, "a running process, attached with gdbserver --attach (pid:PID)"),
    ]
