"""A Linux user-mode layer for the Unicorn target: real programs (static glibc, busybox) run.

The parts, one job each:

* :mod:`.stack`: the initial stack (argc, argv, envp, the auxiliary vector);
* :mod:`.memory`: the address space (``brk``, ``mmap`` and friends);
* :mod:`.files`: the read-only sysroot and the file descriptors;
* :mod:`.structs`: the structures calls fill;
* :mod:`.syscalls`: the calls, by name.

:func:`check_options` checks what the user passed (``args``, ``env``, ``stdin``,
``sysroot``, ``cwd``) before anything is mapped; :func:`start_process` builds
the process on a loaded :class:`~kpsdk.targets.unicorn.UnicornTarget`.
What is not emulated (yet): signal delivery, threads, ``fork``/``exec``, writes to
files (``EROFS``); each is an error naming it, never a silent wrong answer.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.errors import ArgumentError, TargetError, UnsupportedTargetError
from kpsdk.targets.linux.files import PATH_MAX, Sysroot
from kpsdk.targets.linux.memory import PAGE, AddressSpace, page_up
from kpsdk.targets.linux.stack import ARG_MAX, ProcessImage, build_stack
from kpsdk.targets.linux.syscalls import LinuxProcess

if TYPE_CHECKING:
    from kpsdk.elfimage import ElfImage
    from kpsdk.targets.unicorn import UnicornTarget

__all__ = ["LinuxProcess", "ProcessOptions", "check_options", "start_process"]


@dataclass(frozen=True)
class ProcessOptions:
    """The checked options of an ``elf:`` target's process."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    stdin: bytes = b""
    sysroot: Path | None = None
    cwd: str = "/"


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise ArgumentError(f"elf: {what} must be text, not {type(value).__name__}")
    if "\0" in value:
        raise ArgumentError(f"elf: {what} {value!r} holds a NUL, which no C string carries")
    return value


def check_options(args: Sequence[str] | None, env: Mapping[str, str] | None, stdin: bytes | None,
                  sysroot: str | os.PathLike[str] | None, cwd: str | None) -> ProcessOptions:
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
    return ProcessOptions(checked_args, tuple(checked_env), bytes(stdin), root, os.path.normpath(cwd))


def default_sysroot(target: UnicornTarget) -> Path | None:
    """The root a program sees when none is given: its arch's Debian cross sysroot where it is
    installed (``/usr/TRIPLE``), else an empty tree: never the host's own ``/`` unless asked."""
    linux = target.arch.syscalls.linux if target.arch.syscalls else None
    if linux is not None and linux.sysroot is not None and Path(linux.sysroot).is_dir():
        return Path(linux.sysroot)
    return None


def start_process(target: UnicornTarget, image: ElfImage, program: str, options: ProcessOptions,
                  stack_top: int, reserved: list[tuple[int, int]]) -> LinuxProcess:
    """Make ``target`` (``image`` loaded, kpsdk's area and the stack mapped) the process
    that ``execve(program, args, env)`` would start; its stack pointer is set."""
    arch = target.arch
    if arch.syscalls is None or arch.syscalls.linux is None:
        raise UnsupportedTargetError(f"the Unicorn target has no Linux layer for {arch.name} yet")
    linux = arch.syscalls.linux
    if image.interp is not None:
        raise UnsupportedTargetError(
            f"{image.path} is dynamically linked (its interpreter is {image.interp}): the Unicorn target runs "
            "statically linked programs only (not yet dynamic ones); build it with -static, or run it with "
            "--target qemu-user")
    sysroot = options.sysroot if options.sysroot is not None else default_sysroot(target)
    brk_base = page_up(reserved[0][1]) + PAGE  # after kpsdk's area, which sits right after the program
    space = AddressSpace(target.uc, 1 << (8 * arch.word_size) if arch.word_size == 4 else 1 << 47,
                         brk_base, reserved)
    exe = os.path.abspath(program)
    process = LinuxProcess(arch, target.uc, target._console, space, Sysroot(sysroot), options.stdin,
                           options.cwd, exe)
    word = struct.Struct(("<" if arch.endian == "little" else ">") + ("Q" if arch.word_size == 8 else "I"))
    argv = [os.fsencode(program), *(a.encode("utf-8", "surrogateescape") for a in options.args)]
    envp = [f"{k}={v}".encode("utf-8", "surrogateescape") for k, v in options.env]
    info = ProcessImage(phdr=image.phdr[0], phent=image.phdr[1], phnum=image.phdr[2], entry=image.entry,
                        base=0, uid=os.getuid(), gid=os.getgid(), platform=linux.platform, hwcap=linux.hwcap,
                        hwcap2=linux.hwcap2)
    sp, _ = build_stack(target.uc.mem_write, stack_top, word, argv, envp, argv[0], info, os.urandom(16))
    target.fast.write(target.arch.register(arch.sp), sp)
    return process
