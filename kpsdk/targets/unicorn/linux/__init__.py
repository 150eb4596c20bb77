"""A Linux user-mode layer for the Unicorn target: real programs run, with their processes,
threads, signals, pipes and sockets.

The parts, one job each:

* :mod:`.kernel`: every task of the session, which runs next (:mod:`.sched`: deterministic,
  quanta counted natively, the program's clock), blocking calls (:mod:`.waits`), futexes
  (:mod:`.futex`), timers;
* :mod:`.tasks`: a task (thread) and what a process's tasks share;
* :mod:`.lifecycle`: clone, fork, a process's end, wait4; :mod:`.execs`: execve;
* :mod:`.signaling`: sending, delivering and returning from signals, on each arch's frame
  (:mod:`.sigframes`);
* :mod:`.pipes`: pipes with Linux's capacity and blocking;
* :mod:`.fileobj`: descriptors that are kernel objects, and what every descriptor is ready
  for; :mod:`.epoll`: epoll instances; :mod:`.eventfds`: eventfd, timerfd, signalfd;
  :mod:`.net`: AF_UNIX sockets and TCP/UDP on a loopback between the session's processes
  (never the host's network);
* :mod:`.stack`: the initial stack (argc, argv, envp, the auxiliary vector);
* :mod:`.memory`: a process's address space (``brk``, ``mmap`` and friends) on its
  :class:`~kpsdk.targets.unicorn.space.Space`;
* :mod:`.files`: the open files and descriptors; the session's file system is :mod:`.tree`
  (the walk), :mod:`.overlay` (its changes), :mod:`.inodes` (what a name is) and
  :mod:`.binds` (host directories mapped in);
* :mod:`.structs`: the structures calls fill; :mod:`.procfs`: the files of its own /proc;
* :mod:`.calls`: the calls, one module per subsystem, each handler marked with its call's
  name and strace signature;
* :mod:`.syscalls`: :class:`LinuxProcess`, which combines them, and the dispatch by number.

:func:`check_options` checks what the user passed (``args``, ``env``, ``stdin``,
``sysroot``, ``cwd``, ``bind``) before anything is mapped; :func:`start_process` builds the
first process on a loaded Unicorn target (seen as
:class:`~kpsdk.targets.unicorn.host.LinuxHost`) and its kernel.  A dynamically linked program
starts in its ``PT_INTERP`` loader, mapped from the sysroot (:func:`load_interpreter`);
ld.so maps the libraries itself.  What is not emulated is an error naming it or ``ENOSYS``
recorded by name, never a silent wrong answer.  Files the program writes live in the
session's in-memory overlay, or on the host through a ``"rw"`` bind.
"""

from __future__ import annotations

import os
import struct
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.errors import ArgumentError, TargetError, UnsupportedTargetError
from kpsdk.targets.unicorn.linux.files import PATH_MAX, Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
from kpsdk.targets.unicorn.linux.memory import PAGE, AddressSpace, page_up
from kpsdk.targets.unicorn.linux.stack import ARG_MAX, ProcessImage, build_stack, stack_bytes
from kpsdk.targets.unicorn.linux.syscalls import PID, LinuxProcess
from kpsdk.targets.unicorn.linux.tasks import Task

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.targets.unicorn.host import LinuxHost

__all__ = ["LinuxProcess", "ProcessOptions", "check_options", "start_process"]


@dataclass(frozen=True)
class ProcessOptions:
    """The checked options of an ``elf:`` target's process."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    stdin: bytes = b""
    sysroot: Path | None = None
    cwd: str = "/"
    #: host directories mapped into the guest's tree: (host directory, guest path, writable)
    binds: tuple[tuple[Path, str, bool], ...] = ()


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"elf: {what} must be text, not {type(value).__name__}")
    if "\0" in value:
        raise ArgumentError(f"elf: {what} {value!r} holds a NUL, which no C string carries")
    return value


def check_binds(bind: object) -> tuple[tuple[Path, str, bool], ...]:
    """``bind=[(HOST_DIR, GUEST_DIR, "ro"|"rw"), ...]`` as (host directory, guest path, writable),
    or an :class:`~kpsdk.errors.ArgumentError` naming the first bad one."""
    if bind is None:
        return ()
    if isinstance(bind, str | bytes) or not isinstance(bind, Sequence):
        raise ArgumentError(f"elf: bind must be a list of (HOST_DIR, GUEST_DIR, \"ro\"|\"rw\") tuples, not "
                            f"{type(bind).__name__}")
    out: list[tuple[Path, str, bool]] = []
    for item in bind:
        if isinstance(item, str | bytes) or not isinstance(item, Sequence) or len(item) != 3:
            raise ArgumentError(f"elf: a bind is (HOST_DIR, GUEST_DIR, \"ro\"|\"rw\"), not {item!r}")
        host, guest, mode = item
        if not isinstance(host, str | os.PathLike) or "\0" in str(host):
            raise ArgumentError(f"elf: a bind's host directory must be a path, not {host!r}")
        _text(guest, "bind's guest directory")
        if mode not in ("ro", "rw"):
            raise ArgumentError(f"elf: a bind's mode is \"ro\" or \"rw\", not {mode!r}")
        if not os.path.isdir(host):
            raise ArgumentError(f"elf: the bind's host directory {str(host)!r} is not a directory")
        if not guest.startswith("/") or len(guest) >= PATH_MAX or ".." in guest.split("/"):
            raise ArgumentError(f"elf: a bind's guest directory {guest!r} must be an absolute path without '..'")
        where = os.path.normpath(guest)
        for other in out:
            if where == other[1] or where.startswith(other[1].rstrip("/") + "/") \
                    or other[1].startswith(where.rstrip("/") + "/"):
                raise ArgumentError(f"elf: the binds at {other[1]!r} and {where!r} overlap: one would hide the other")
        out.append((Path(host), where, mode == "rw"))
    return tuple(out)


def check_options(args: Sequence[str] | None, env: Mapping[str, str] | None, stdin: bytes | None,
                  sysroot: str | os.PathLike[str] | None, cwd: str | None, bind: object = None) -> ProcessOptions:
    """The options as :class:`ProcessOptions`, or an :class:`~kpsdk.errors.ArgumentError` /
    :class:`~kpsdk.errors.TargetError` naming the first bad one."""
    if args is None:
        args = ()
    if isinstance(args, str | bytes) or not isinstance(args, Sequence):
        raise ArgumentError(f"elf: args must be a list of strings, not {type(args).__name__}")
    checked_args = tuple(_text(a, "argument") for a in args)
    if env is None:
        env = {}
    if not isinstance(env, Mapping):
        raise ArgumentError(f"elf: env must be a mapping of names to values, not {type(env).__name__}")
    checked_env = []
    for key, value in env.items():
        _text(key, "environment variable name")
        _text(value, f"the value of {key!r}")
        if not key or "=" in key:
            raise ArgumentError(f"elf: cannot set the environment variable {key!r}: a name is non-empty text "
                                "without '='")
        checked_env.append((key, value))
    if stdin is None:
        stdin = b""
    if not isinstance(stdin, bytes | bytearray | memoryview):
        raise ArgumentError(f"elf: stdin must be bytes, not {type(stdin).__name__}")
    size = sum(len(s.encode("utf-8", "surrogateescape")) + 1 for s in checked_args) + \
        sum(len(f"{k}={v}".encode("utf-8", "surrogateescape")) + 1 for k, v in checked_env)
    if size > ARG_MAX:
        raise ArgumentError(f"elf: the arguments and environment take {size} bytes, more than the "
                            f"{ARG_MAX} the Unicorn target's stack gives them (E2BIG)")
    root = None
    if sysroot is not None:
        if not isinstance(sysroot, str | os.PathLike):
            raise ArgumentError(f"elf: sysroot must be a path, not {type(sysroot).__name__}")
        root = Path(sysroot)
        if "\0" in str(root) or not root.is_dir():
            raise TargetError(f"elf: the sysroot {str(root)!r} is not a directory")
    if cwd is None:
        cwd = "/"
    _text(cwd, "cwd")
    if not cwd.startswith("/") or len(cwd) >= PATH_MAX:
        raise ArgumentError(f"elf: cwd {cwd!r} must be an absolute path inside the sysroot")
    return ProcessOptions(checked_args, tuple(checked_env), bytes(stdin), root, os.path.normpath(cwd),
                          check_binds(bind))


def default_sysroot(target: LinuxHost) -> Path | None:
    """The root a program sees when none is given: its arch's Debian cross sysroot where it is
    installed (``/usr/TRIPLE``), else an empty tree: never the host's own ``/`` unless asked."""
    linux = target.arch.syscalls.linux if target.arch.syscalls else None
    if linux is not None and linux.sysroot is not None and Path(linux.sysroot).is_dir():
        return Path(linux.sysroot)
    return None


def start_process(target: LinuxHost, image: ElfImage, program: str, options: ProcessOptions,
                  stack_top: int, reserved: list[tuple[int, int]]) -> LinuxProcess:
    """Make ``target`` (``image`` loaded, kpsdk's area and the stack mapped) the process
    that ``execve(program, args, env)`` would start; its stack pointer is set."""
    arch = target.arch
    if arch.syscalls is None or arch.syscalls.linux is None:
        raise UnsupportedTargetError(f"the Unicorn target has no Linux layer for {arch.name} yet")
    linux = arch.syscalls.linux
    try:
        root = Sysroot(options.sysroot if options.sysroot is not None else default_sysroot(target), own_pid=PID,
                       binds=options.binds)
    except _GuestErrno as e:
        raise TargetError(f"elf: a bind cannot be made in the guest's tree ({os.strerror(e.errno)})") from None
    target.sysroot = root.root
    brk_base = page_up(reserved[0][1]) + PAGE  # after kpsdk's area, which sits right after the program
    if linux.vector_page is not None:  # ARM's kuser helpers: in every process, never the program's to unmap
        where, code = linux.vector_page
        target.map(where, len(code), "rx", shared=True)
        target.uc.mem_write(where, code)
        reserved = [*reserved, (where, where + len(code))]
    space = AddressSpace(target.space, 1 << (8 * arch.word_size) if arch.word_size == 4 else 1 << 47,
                         brk_base, reserved)
    interp_base = 0
    if image.interp is not None:
        interp_base, target.entry = load_interpreter(target, image, root, space)
    if linux.exec_state is not None:  # what the kernel sets from the ELFs (MIPS o32: the FPU mode)
        linux.exec_state(target.uc, image.path, Path(root.resolve(image.interp, "/")) if image.interp else None)
    exe = os.path.abspath(program)
    process = LinuxProcess(arch, target.uc, target.output, space, root, options.stdin, options.cwd, exe)
    process.on_file_map = lambda host, at, offset: library_mapped(target, host, at, offset)
    process.on_unmap = lambda start, end: target.unmapping(start, end)
    word = struct.Struct(("<" if arch.endian == "little" else ">") + ("Q" if arch.word_size == 8 else "I"))
    argv = [os.fsencode(program), *(a.encode("utf-8", "surrogateescape") for a in options.args)]
    envp = [f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in options.env]
    # AT_ENTRY is e_entry moved by the load bias, as the file has it: on ppc64 ELFv1 a function
    # descriptor, through which ld.so calls the program (glibc's _dl_start_user)
    info = ProcessImage(phdr=image.phdr[0], phent=image.phdr[1], phnum=image.phdr[2],
                        entry=image.raw_entry + image.bias,
                        base=interp_base, uid=os.getuid(), gid=os.getgid(), platform=linux.platform, hwcap=linux.hwcap,
                        hwcap2=linux.hwcap2)
    space.stack = next((lo, hi) for lo, hi in reserved if lo <= stack_top < hi)
    top_mapping = target.space.region_at(stack_top)
    assert top_mapping is not None, "the loader maps the stack's top first"
    space.stack_low = top_mapping.start
    space.grow_stack(stack_top - stack_bytes(argv, envp, argv[0], arch.word_size))  # room for the strings
    sp, auxv = build_stack(target.uc.mem_write, stack_top, word, argv, envp, argv[0], info, os.urandom(16))
    target.fast.write(target.arch.register(arch.sp), sp)
    # what its own /proc/self shows (kpsdk.targets.unicorn.linux.procfs)
    process.argv, process.envp = argv, envp
    process.auxv = b"".join(word.pack(w) for w in auxv)
    process.stack = space.stack
    process.mapped = list(target._files)
    kernel = LinuxKernel(target)  # type: ignore[arg-type]  # the target is the kernel's host too
    # a session dropped without close() gives its guest's host descriptors back when collected
    # (or at interpreter exit); the finalizer holds the record of them, never the kernel
    weakref.finalize(kernel, root.host_fds.close_all)
    kernel.first_id(PID)
    kernel.new_id()
    process.kernel = kernel
    kernel.start(Task(kernel, PID, process, comm=process.comm))
    target.kernel = kernel
    for mf, path in zip(target._files, (exe, image.interp or ""), strict=False):  # the program, its loader
        for seg in mf.image.segments:
            start = (mf.bias + seg.vaddr) & ~(PAGE - 1)
            space.name(start, page_up(mf.bias + seg.vaddr + len(seg.data)), path, seg.offset & ~(PAGE - 1))
    return process


def load_interpreter(target: LinuxHost, image: ElfImage, root: Sysroot, space: AddressSpace) -> tuple[int, int]:
    """Map ``image``'s PT_INTERP (the dynamic loader) from the sysroot, as Linux's
    load_elf_binary does: at a free base (an ET_DYN), its segments' bytes copied in.
    Returns its base (AT_BASE) and entry point, where the process starts; the loader then
    maps the libraries itself (openat, mmap)."""
    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.linux.images import images, map_image
    from kpsdk.targets.unicorn.loader import load_mappings

    assert image.interp is not None
    where = f"{image.path} is dynamically linked: its interpreter {image.interp}"
    if root.root is None:
        raise TargetError(f"{where} needs a sysroot holding it (--sysroot DIR, sysroot=DIR in Python; \"/\" for "
                          "the host's own)")
    try:
        host = root.resolve(image.interp, "/")
    except _GuestErrno as e:
        raise TargetError(f"{where} is not in the sysroot {root.root} ({os.strerror(e.errno)})") from None
    interp = images.load(host)
    if (interp.machine, interp.elf_class, interp.endian) != (image.machine, image.elf_class, image.endian) \
            or interp.kind != "ET_DYN" or interp.interp is not None:
        raise TargetError(f"{where} ({host}) is not a loader for this program")
    span = page_up(max(seg.vaddr + seg.memsz for seg in interp.segments)) - (interp.segments[0].vaddr & ~(PAGE - 1))
    base = space.find(span)
    placed = interp.relocated(base)
    kernel = target.kernel
    map_image(target, kernel.pages if kernel is not None else None, placed, interp.identity,
              load_mappings(placed, target.arch))
    arch = target.arch
    if arch.entry_registers is not None and interp.entry != interp.raw_entry:
        # ELFv1: the loader's e_entry is a function descriptor, as the file has it (ld.so
        # relocates itself later); Linux's start_thread adds the load bias to its words
        descriptor = target.read_memory(interp.raw_entry + base, 3 * arch.word_size)
        for name, value in arch.entry_registers(descriptor, base).items():
            target.fast.write(arch.register(name), value)
    if arch.entry_address_register is not None:  # ELFv2: start_thread's r12
        target.fast.write(arch.register(arch.entry_address_register), placed.entry)
    target._files = (*target._files, MappedFile.of(interp, base))  # reported with the program at session start
    return base, placed.entry


def library_mapped(target: LinuxHost, host: Path, at: int, offset: int, program: bool = False) -> None:
    """A file's start was mapped at ``at`` (ld.so maps a library's first segment, file offset 0,
    where its whole span goes): when it is an ELF object, plugins hear ``kpsdk_library_loaded``
    with its host path and load bias (the address minus its first PT_LOAD's) once its
    segments are mapped.  Each process keeps its own list (:attr:`ProcessCore.mapped`): the
    same library at another bias in another process (an exec'd program needs others before
    it) is announced again, at its bias; at a bias already announced it is not.  ``program``:
    an exec'd program's image (announced, its symbols not joined to the session's table)."""
    from kpsdk.errors import KpsdkError
    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.linux.images import images

    if offset:
        return
    kernel = target.kernel
    process = kernel.current.process if kernel is not None and kernel.current is not None else None
    try:
        st = os.stat(host)
        known_here = process.mapped if process is not None else [*target.pending_libraries, *target.mapped_files()]
        for known in known_here:
            start, end = known.span(PAGE)
            if known.identity == (st.st_dev, st.st_ino) and start <= at < end:
                return  # a later segment of an object already seen, whose file offset rounds down to 0
        with open(host, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return
        image = images.load(host)
    except (OSError, KpsdkError):
        return  # not an object ld.so could load either: it reports that itself
    mapped = MappedFile.of(image, at - (image.segments[0].vaddr & ~(PAGE - 1)))
    # Announced once its segments are in place, not now: ld.so maps the file's whole span
    # read-only first and then each segment over it with its own protection, so a uprobe
    # armed at this point would find its code not yet executable (SyscallGlue.syscall
    # announces it at the first system call that is not one of that mapping's).
    if process is not None:
        process.mapped.append(mapped)
    if any(mf.identity == mapped.identity and mf.bias == mapped.bias
           for mf in (*target.pending_libraries, *target.mapped_files())):
        return  # another process announced it at that bias already: its probes are there (processes.py)
    if program:
        target.libraries.programs.append(mapped)
    target.pending_libraries.append(mapped)
