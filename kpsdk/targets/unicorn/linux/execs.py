"""``execve``: a new program image in the same process (fs/exec.c, fs/binfmt_elf.c, binfmt_script.c).

The call is done in two halves.  Inside the system call (:func:`execve`) everything that can
fail is checked while the old image is still there to return an error to: the path is walked
in the program's file system, the file must be a regular file with an execute bit, a ``#!``
script names its interpreter (up to four levels, as Linux's BINPRM_MAX_RECURSION), the ELF
must be this arch's; the arguments and environment are copied out.  Then the engine is stopped
and, between two runs (:func:`finish_exec`), the point of no return: the other threads end,
the process gets a fresh address space (kpsdk's own area carried over: it is in every
process), the program and its ``PT_INTERP`` loader are loaded as at ``kpsdk.open``, a new stack
with its arguments, environment and auxiliary vector is built, the CPU's registers are reset,
signal handlers go back to SIG_DFL (ignored signals stay ignored), ``FD_CLOEXEC`` descriptors
close, and a vfork parent waiting for this child goes on.  The probes of every file the new
image maps come with it (U1: :mod:`kpsdk.targets.unicorn.processes`).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from kpsdk.errors import KpsdkError
from kpsdk.targets.unicorn.linux.calls.core import AT_FDCWD
from kpsdk.targets.unicorn.linux.files import PATH_MAX, _GuestErrno
from kpsdk.targets.unicorn.linux.images import map_image
from kpsdk.targets.unicorn.linux.memory import PAGE, AddressSpace, page_up
from kpsdk.targets.unicorn.linux.stack import ARG_MAX, ProcessImage, build_stack, stack_bytes

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.tasks import Task

#: how many ``#!`` interpreters one execve follows (BINPRM_MAX_RECURSION)
MAX_SCRIPTS = 4
#: the most bytes of a ``#!`` line Linux reads (BINPRM_BUF_SIZE)
SHEBANG_MAX = 256


@dataclass
class ExecPlan:
    """What :func:`finish_exec` loads: checked, nothing of the old image changed yet."""

    guest_path: str  #: the program file, as the program's file system names it (links followed)
    host: Path  #: that file on the host
    image: ElfImage  #: its ELF, not placed yet
    argv: list[bytes]
    envp: list[bytes]
    filename: str  #: the path the caller gave (AT_EXECFN, and the name comm takes)


def _strings(process: ProcessCore, addr: int) -> list[bytes]:
    """A NULL-terminated array of C strings (argv, envp), ARG_MAX bytes at most (E2BIG)."""
    out: list[bytes] = []
    total = 0
    if not addr:
        return out
    while True:
        ptr = process.read_word(addr + len(out) * process.word.size)
        if not ptr:
            return out
        text = os.fsencode(process.string(ptr, ARG_MAX))
        total += len(text) + 1 + process.word.size
        if total > ARG_MAX:
            raise _GuestErrno(errno.E2BIG)
        out.append(text)


def _shebang(head: bytes) -> tuple[str, bytes | None] | None:
    """A ``#!`` line's interpreter and optional argument (one, the rest of the line), else None."""
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].strip(b" \t")
    if not line:
        raise _GuestErrno(errno.ENOEXEC)
    interp, _, arg = line.replace(b"\t", b" ").partition(b" ")
    arg = arg.strip(b" \t")
    return os.fsdecode(interp), (arg or None)


def execve(process: ProcessCore, path_addr: int, argv_addr: int, envp_addr: int) -> int | None:
    """The first half (see the module's docstring): ``-errno`` when the call fails, else None,
    the engine stopped for :func:`finish_exec`."""
    from kpsdk.targets.unicorn.linux.images import images
    from kpsdk.targets.unicorn.linux.kernel import EXEC

    filename = process.string(path_addr, PATH_MAX)
    argv = _strings(process, argv_addr)
    envp = _strings(process, envp_addr)
    path = filename
    for _ in range(MAX_SCRIPTS + 1):
        parts = process.root.walk(path, process.base(AT_FDCWD, path))
        own = process.root.own(parts)
        guest = "/" + "/".join(parts)
        if own == "exe":  # /proc/self/exe: the process's own program, wherever it is on the host
            host = Path(process.exe)
            guest = process.exe  # what the link names (the file's probes follow it, not /proc/PID/exe)
        else:
            host = process.root.host(parts)
        try:
            st = os.stat(host)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None
        if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o111:
            raise _GuestErrno(errno.EACCES)
        try:
            with open(host, "rb") as f:
                head = f.read(SHEBANG_MAX)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.EACCES) from None
        script = _shebang(head)
        if script is None:
            break
        interp, arg = script
        argv = [os.fsencode(interp), *([arg] if arg else []), os.fsencode(path), *argv[1:]]
        path = interp
    else:
        raise _GuestErrno(errno.ELOOP)
    if not head.startswith(b"\x7fELF"):
        raise _GuestErrno(errno.ENOEXEC)
    try:
        image = images.load(host)
    except (KpsdkError, OSError):
        raise _GuestErrno(errno.ENOEXEC) from None
    arch = process.arch
    if (image.machine, image.elf_class, image.endian) != (arch.elf_machine, arch.elf_class, arch.endian) \
            or image.kind not in ("ET_EXEC", "ET_DYN"):
        raise _GuestErrno(errno.ENOEXEC)
    task = process.task
    task.exec_plan = ExecPlan(guest, host, image, argv, envp, filename)
    process.kernel.stop(EXEC)
    return None


def finish_exec(kernel: LinuxKernel, task: Task) -> None:
    """The second half, between two runs of the engine, ``task`` the current task."""
    from kpsdk.target import MappedFile
    from kpsdk.targets.unicorn.layout import AREA_SIZE, STACK_INITIAL, STACK_SIZE, STACK_TOP
    from kpsdk.targets.unicorn.linux import library_mapped, load_interpreter
    from kpsdk.targets.unicorn.loader import load_mappings, pie_base
    from kpsdk.targets.unicorn.space import Space

    plan = task.exec_plan
    assert plan is not None
    task.exec_plan = None
    process = task.process
    target = kernel.host
    arch = kernel.arch
    for other in list(process.threads):  # de_thread: the other threads end
        if other is not task:
            kernel.exit_task(other, 0)
    old = process.mem
    area = target.sentinel  # type: ignore[attr-defined]
    table = Space(kernel.uc, old.table.parking)
    for region in old.table:  # kpsdk's own area and the arch's vector page: in every process
        if region.shared and any(lo <= region.start < hi for lo, hi in old.reserved):
            table.map(region.start, region.end, region.prot, region.buf, region.offset, shared=True)
    old.release()
    target.switch_space(table)
    kernel.uc.context_restore(target.fresh_context)  # type: ignore[attr-defined]
    # the program where Linux puts it (a PIE at the base gdb shows), unless kpsdk's area is there
    bias = pie_base(plan.image.elf_class) if plan.image.kind == "ET_DYN" else 0
    placed = plan.image.relocated(bias)
    mappings = load_mappings(placed, arch)
    top = max(start + size for start, size, _ in mappings)
    if bias and mappings[0][0] < area + AREA_SIZE and area < top:
        bias = (area + AREA_SIZE + 0x100000) & ~0xFFFFF
        placed = plan.image.relocated(bias)
        mappings = load_mappings(placed, arch)
        top = max(start + size for start, size, _ in mappings)
    map_image(target, kernel.pages, placed, plan.image.identity, mappings)
    target.setup_stack(STACK_INITIAL)  # type: ignore[attr-defined]
    reserved = old.reserved
    limit = 1 << (8 * arch.word_size) if arch.word_size == 4 else 1 << 47
    # the heap after the program, or after kpsdk's area when that sits right above the program
    # (as at kpsdk.open: the area was placed after the first program, and this one may be there too)
    brk_base = page_up(area + AREA_SIZE) if 0 <= area - top < 1 << 30 else page_up(top)
    mem = AddressSpace(table, limit, brk_base + PAGE, reserved, old.on_unmap)
    process.mem = mem
    target.new_space(mem)
    files = [MappedFile.of(plan.image, bias)]
    entry = placed.entry
    interp_base = 0
    if placed.interp is not None:
        saved_files = target._files  # type: ignore[attr-defined]
        try:
            interp_base, entry = load_interpreter(target, placed, process.root, mem)  # type: ignore[arg-type]
        except KpsdkError:
            kernel.exit_group(process, 9)  # past the point of no return: SIGKILL, as Linux's failed load
            return
        files.append(target._files[-1])  # type: ignore[attr-defined]
        target._files = saved_files  # type: ignore[attr-defined]
    fast = target.fast
    if arch.entry_registers is not None:
        descriptor = placed.raw_entry + bias
        if placed.interp is None and descriptor != placed.entry:
            words = target.read_memory(descriptor, 3 * arch.word_size)  # type: ignore[attr-defined]
            for name, value in arch.entry_registers(words, bias).items():
                fast.write(arch.register(name), value)
    if arch.entry_address_register is not None and placed.interp is None:
        fast.write(arch.register(arch.entry_address_register), entry)
    linux = kernel.abi
    word = struct.Struct(("<" if arch.endian == "little" else ">") + ("Q" if arch.word_size == 8 else "I"))
    info = ProcessImage(phdr=placed.phdr[0], phent=placed.phdr[1], phnum=placed.phdr[2],
                        entry=placed.raw_entry + bias, base=interp_base, uid=os.getuid(), gid=os.getgid(),
                        platform=linux.platform, hwcap=linux.hwcap, hwcap2=linux.hwcap2)
    mem.stack, mem.stack_low = (STACK_TOP - STACK_SIZE, STACK_TOP), STACK_TOP - STACK_INITIAL
    mem.grow_stack(STACK_TOP - 0x10 - stack_bytes(plan.argv, plan.envp, os.fsencode(plan.filename), arch.word_size))
    sp, auxv = build_stack(kernel.uc.mem_write, STACK_TOP - 0x10, word, plan.argv, plan.envp,
                           os.fsencode(plan.filename), info, os.urandom(16))
    fast.write(arch.register(arch.sp), sp)
    target.begin_at(entry)  # type: ignore[attr-defined]
    for mf, path in zip(files, (plan.guest_path, placed.interp or ""), strict=False):
        for seg in mf.image.segments:
            start = (mf.bias + seg.vaddr) & ~(PAGE - 1)
            mem.name(start, page_up(mf.bias + seg.vaddr + len(seg.data)), path, seg.offset & ~(PAGE - 1))
            target.file_mapped(mem, start, page_up(mf.bias + seg.vaddr + len(seg.data)))
    # what the process is now
    process.exe = str(plan.host) if process.root.root is None else plan.guest_path
    process.comm = task.comm = PurePosixPath(plan.filename).name[:15]
    process.argv, process.envp = plan.argv, plan.envp
    process.auxv = b"".join(word.pack(w) for w in auxv)
    process.stack = (STACK_TOP - STACK_SIZE, STACK_TOP)
    process.gdt = 0
    process.itimer = process.itimer  # ITIMER_REAL lives on across execve
    if any(p is not process and p.sighand is process.sighand for p in kernel.processes.values()):
        process.sighand = process.sighand.copy()
    process.sighand.reset_for_exec()
    if process.fds.users > 1:  # CLONE_FILES: the table is unshared first (unshare_files)
        process.fds.users -= 1
        process.fds = process.fds.fork()
    process.fds.close_on_exec()
    task.altstack = (0, 0, 2)
    task.robust_list = 0
    task.saved_mask = None
    process.vfork_done.wake()
    process.mapped = []
    for i, mf in enumerate(files):  # plugins (uprobes) hear of the new image's objects; ld.so's libraries follow
        library_mapped(target, mf.image.path, mf.span(PAGE)[0], 0, program=i == 0)  # type: ignore[arg-type]
