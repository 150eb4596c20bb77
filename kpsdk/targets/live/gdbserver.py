"""``native:PROG`` and ``pid:PID``: the host's own processes, through Debian's ``gdbserver``.

``native:PROG`` runs PROG under ``gdbserver`` (the host executes it natively: the ground
truth other targets are compared with, at gdb's speed per hit); ``pid:PID`` attaches
``gdbserver --attach`` to a process that is already running, as ``strace -p`` does, and
leaves it running, unmodified, when the session closes (:mod:`kpsdk.targets.live.detach`).

gdbserver listens on loopback only (``127.0.0.1``, a port the kernel picks) and takes one
connection (``--once``): kpsdk's gdb, which connects as soon as gdbserver says its port.  It
starts programs without a shell (``--no-startup-with-shell``: arguments are argv words),
and is reaped with the session.  Attaching needs ptrace permission: the same user (or root)
and Yama's ``ptrace_scope`` allowing it; :func:`ptrace_problem` says what forbids it and how
to allow it before gdbserver is even started.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import TargetError
from kpsdk.options import STALL_LIMIT
from kpsdk.targets.live.detach import Detach
from kpsdk.targets.live.mi import check_text
from kpsdk.targets.live.processes import reap
from kpsdk.targets.live.qemu import _directory, _input, _need, choose_sysroot
from kpsdk.targets.live.userstub import place_program

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.targets.live.target import GdbTarget

#: how long gdbserver gets to start the program (or attach) and say its port
STARTUP_TIMEOUT = 10.0
#: what gdbserver prints once it listens, and when it started or attached the process
_LISTENING = re.compile(rb"Listening on port (\d+)")
_PROCESS = re.compile(rb"(?:created|Attached); pid = (\d+)")
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")


def _start_gdbserver(cmd: list[str], stdin: Any = subprocess.DEVNULL,
                     cwd: Path | None = None, env: dict[str, str] | None = None
                     ) -> tuple[subprocess.Popen[bytes], int, int]:
    """Start gdbserver in its own process group; wait until it listens.  The process, the
    port and the program's pid.  Its early messages are read here; what follows (the
    program's own output, for ``native:``) is the target's ``console``."""
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=cwd, env=env)
    assert proc.stderr is not None
    said = b""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while (port := _LISTENING.search(said)) is None:
        remaining = deadline - time.monotonic()
        ready = select.select([proc.stderr.fileno()], [], [], max(remaining, 0))[0] if remaining > 0 else []
        chunk = os.read(proc.stderr.fileno(), 4096) if ready else b""
        if not chunk:
            status = proc.poll()
            reap(proc)
            text = said.decode(errors="replace").strip()
            if status is None and remaining <= 0:
                raise TargetError(f"gdbserver did not start listening within {STARTUP_TIMEOUT:g} s"
                                  + (f": {text}" if text else ""))
            raise TargetError(f"gdbserver failed (status {proc.returncode})" + (f": {text}" if text else ""))
        said += chunk
    pid = _PROCESS.search(said)
    return proc, int(port.group(1)), int(pid.group(1)) if pid else 0


def open_native(rest: str, registry: Registry, args: list[str] | tuple[str, ...] = (),
                env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
                stdin: bytes | str | os.PathLike[str] | None = None, sysroot: str | os.PathLike[str] | None = None,
                hardware_breakpoints: bool = False, stall_limit: float = STALL_LIMIT,
                **options: Any) -> GdbTarget:
    """``native:PROG``: run PROG natively under gdbserver and attach (stopped at its entry
    point, its libraries loaded, as ``qemu-user:``)."""
    from kpsdk.binfmt.elfimage import load_elf

    if options:
        raise TargetError(f"native: unknown options {', '.join(options)} (known: args, env, cwd, stdin, "
                          "sysroot, hardware_breakpoints, stall_limit)")
    prog = Path(rest)
    check_text(os.path.abspath(prog), "the program file")
    image = load_elf(prog)
    arch = registry.archs.by_elf(image.machine, image.elf_class, image.endian)
    gdbserver = _need("gdbserver", "gdbserver")
    _need("gdb-multiarch", "gdb-multiarch")
    workdir = _directory(cwd, "cwd") if cwd is not None else Path.cwd()
    root = choose_sysroot(image, arch, sysroot)
    program = str(prog.absolute()) if cwd is not None or str(prog).startswith("-") else str(prog)
    environ = dict(os.environ)
    for key, value in (env or {}).items():
        if not (isinstance(key, str) and isinstance(value, str)) or not key or "=" in key or "\0" in key + value:
            raise TargetError(f"native: cannot set the environment variable {key!r}={value!r}")
        environ[key] = value
    for arg in map(str, args):
        if not arg or any(c.isspace() for c in arg) or "\0" in arg:
            raise TargetError(f"native: cannot pass the argument {arg!r}: gdbserver without a shell (kpsdk never "
                              "starts one) takes no empty argument and none holding whitespace")
    cmd = [gdbserver, "--once", "--no-startup-with-shell", "--no-disable-randomization", "127.0.0.1:0",
           program, *map(str, args)]
    with _input(stdin) as source:
        proc, port, pid = _start_gdbserver(cmd, source, workdir if cwd is not None else None, environ)
    target = _attach(arch, port, proc, image, pid, hardware=hardware_breakpoints, stall_limit=stall_limit)
    try:
        target.sysroot = root
        place_program(target, image, root, workdir)
    except BaseException:
        target.close()
        raise
    return target


def open_pid(rest: str, registry: Registry, sysroot: str | os.PathLike[str] | None = None,
             hardware_breakpoints: bool = False, stall_limit: float = STALL_LIMIT, **options: Any) -> GdbTarget:
    """``pid:PID``: attach to a running process with ``gdbserver --attach``; closing the
    session detaches and leaves it running (every trap checked gone)."""
    from kpsdk.binfmt.elfimage import load_elf

    if options:
        raise TargetError(f"pid: unknown options {', '.join(options)} (known: sysroot, hardware_breakpoints, "
                          "stall_limit)")
    if not re.fullmatch(r"[1-9][0-9]{0,9}", rest):
        raise TargetError(f"pid: wants a process id (pid:1234), not {rest!r}")
    pid = int(rest)
    if pid == os.getpid():
        raise TargetError("pid: cannot attach to kpsdk's own process")
    problem = ptrace_problem(pid)
    if problem is not None:
        raise TargetError(problem)
    image = load_elf(_program_of(pid))
    arch = registry.archs.by_elf(image.machine, image.elf_class, image.endian)
    gdbserver = _need("gdbserver", "gdbserver")
    _need("gdb-multiarch", "gdb-multiarch")
    root = choose_sysroot(image, arch, sysroot)
    proc, port, _ = _start_gdbserver([gdbserver, "--once", "--attach", "127.0.0.1:0", str(pid)])
    target = _attach(arch, port, proc, image, pid, detach=Detach(pid), hardware=hardware_breakpoints,
                     stall_limit=stall_limit)
    try:
        target.sysroot = root
        place_program(target, image, root, Path(os.readlink(f"/proc/{pid}/cwd")))
    except BaseException:
        target.close()
        raise
    return target


def _attach(arch: Any, port: int, proc: subprocess.Popen[bytes], image: ElfImage, pid: int,
            detach: Detach | None = None, hardware: bool = False, stall_limit: float = STALL_LIMIT) -> GdbTarget:
    """gdb attached to the gdbserver on ``port``; a stop is asked of the process itself (a
    SIGINT to it alone, which gdb keeps from it: gdbserver's own interrupt signals the
    process's whole group)."""
    from kpsdk.targets.live.target import GdbTarget

    def interrupt() -> None:
        if pid:
            os.kill(pid, signal.SIGINT)

    target = GdbTarget(arch, f"127.0.0.1:{port}", abi_kind="user", image=image, processes=[proc],
                       interrupt=interrupt if pid else None, hardware_breakpoints=hardware,
                       stall_limit=stall_limit, real_traps=True, files=False, detach=detach)
    target.process_id = pid or None
    return target


def _program_of(pid: int) -> Path:
    """The running program's file: its path when that is still the same file, else
    ``/proc/PID/exe`` (deleted or replaced since it started)."""
    exe = Path(f"/proc/{pid}/exe")
    try:
        path = Path(os.readlink(exe))
        if path.is_file() and os.stat(path).st_ino == os.stat(exe).st_ino:
            return path
    except OSError as exc:
        raise TargetError(f"pid: cannot see process {pid}'s program: {exc.strerror}") from exc
    return exe


def ptrace_problem(pid: int, scope: int | None = None, euid: int | None = None) -> str | None:
    """Why this process may not attach to ``pid`` with ptrace (and how to allow it), or None.

    Checked: the process exists, belongs to this user (or kpsdk runs as root), is not traced
    already (a debugger, strace), and Yama's ``kernel.yama.ptrace_scope`` lets a process that
    is not its ancestor attach (0; 1 and 2 only with CAP_SYS_PTRACE, which root has; 3 never).
    """
    status = Path(f"/proc/{pid}/status")
    try:
        text = status.read_text()
    except FileNotFoundError:
        return f"pid: there is no process {pid}"
    except OSError as exc:
        return f"pid: cannot read {status}: {exc.strerror}"
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    euid = os.geteuid() if euid is None else euid
    owner = int(fields.get("Uid", "0").split()[1])  # the effective uid
    if euid != 0 and owner != euid:
        return (f"pid: process {pid} belongs to uid {owner}, not to you (uid {euid}): only its owner or root "
                "may attach to it (run kpsdk as that user, or as root)")
    tracer = int(fields.get("TracerPid", "0").strip() or 0)
    if tracer:
        return (f"pid: process {pid} is already traced by process {tracer} (a debugger or strace): only one "
                "tracer at a time; end that one first")
    if scope is None:
        try:
            scope = int(YAMA.read_text())
        except (OSError, ValueError):
            scope = 0  # no Yama: the classic rule (same user, or root) is all
    if scope >= 3:
        return ("pid: kernel.yama.ptrace_scope is 3: no process may attach to another until the next reboot "
                "(this setting cannot be lowered while the system runs)")
    if scope >= 1 and euid != 0:
        who = "its ancestors" if scope == 1 else "root (CAP_SYS_PTRACE)"
        return (f"pid: kernel.yama.ptrace_scope is {scope}: only {who} may attach to process {pid}.  Run kpsdk "
                "as root, or allow it for everyone until the next reboot: sudo sysctl kernel.yama.ptrace_scope=0"
                + (" (or have the program allow its tracer: prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY))"
                   if scope == 1 else ""))
    return None
