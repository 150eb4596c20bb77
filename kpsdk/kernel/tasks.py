"""Which task a hit ran in: the ``comm-pid [cpu] flags`` of the kernel's trace line.

The kernel prints, for every trace entry, the task's ``comm`` and ``pid`` (``current``
when the event fired), the CPU, and the irq/preempt flags (``trace_print_context`` in
kernel/trace/trace_output.c).  Each target answers :meth:`Target.task_info
<kpsdk.target.Target.task_info>` with what it can know:

- a live kernel (qemu-system): ``current`` read from the guest at the hit.  The per-cpu
  pointer's offset comes from the kernel's symbols (``current_task``, an absolute per-cpu
  symbol in kallsyms), the offsets of ``task_struct.pid`` and ``task_struct.comm`` from
  the kernel's own BTF (the ``.BTF`` section of the vmlinux inside ``vmlinuz``, read by
  :mod:`kpsdk.kernel.btf`): no debug package, no guessing.  Where that is missing (no BTF, a
  ``System.map`` only) the prefix says ``<...>-0``, as the kernel does for a task whose
  name it lost.  The per-cpu base and the irq flag come from the arch's
  :class:`~kpsdk.arch.KernelTasks` (x86_64: ``gs_base``, ``eflags.IF``).
- a program under qemu-user: its name (``comm`` is the file name, at most 15 bytes, as
  ``execve`` sets it) and the thread id gdb's stub reports (qemu-user runs each guest
  thread as a host thread with the same id).
- Unicorn: a fixed name and pid the user can set (``kpsdk trace --comm --pid``).

A kernel built without BTF (Debian's i386, armhf and ppc64el kernels) shows the same facts in
its code: :func:`code_task_layout` reads them where ``dump_stack_print_info`` loads current
and prints its pid and comm (:mod:`kpsdk.kernel.taskcode`), at the first hit.

The layout found for a kernel image is cached by the image's sha256 under kpsdk's cache
directory, so only the first trace of an image pays for decompressing it and reading BTF;
so is the reason an image has none (no BTF: 8 s of unpacking Debian's i386 ``vmlinuz``
under load, 0.06 s from the cache).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.errors import ArgumentError, TargetError, shown
from kpsdk.kernel.btf import Btf, Member

if TYPE_CHECKING:
    from kpsdk.arch import Arch, KernelTasks

#: TASK_COMM_LEN (include/linux/sched.h): comm is at most 15 bytes and a NUL
TASK_COMM_LEN = 16
#: PID_MAX_LIMIT (include/linux/threads.h): the largest pid a 64-bit kernel hands out
PID_MAX_LIMIT = 4 * 1024 * 1024
#: pid and comm are read together when they are at most this many bytes apart
MAX_JOINED_READ = 1024
#: what the kernel prints for a task whose comm it does not know (trace_find_cmdline)
UNKNOWN_COMM = "<...>"
CACHE_DIR = "tasks"
_CACHE_VERSION = 2
#: the cache file saying why an image has no task layout (no BTF...)
_MISSING = "{digest}.{arch}.v" + str(_CACHE_VERSION) + ".missing"


#: include/linux/preempt.h: the fields of preempt_count()
PREEMPT_MASK, SOFTIRQ_MASK, HARDIRQ_MASK, NMI_MASK = 0xFF, 0xFF00, 0xF0000, 0xF00000
SOFTIRQ_SHIFT, SOFTIRQ_OFFSET = 8, 0x100
#: the five flag characters when nothing is known: what a program's trace line shows
NO_FLAGS = "....."


@dataclass(frozen=True)
class TaskInfo:
    """The task a hit ran in, as the trace line's prefix shows it: comm, pid, CPU and the
    five flag characters (:func:`lat_flags`)."""

    comm: str
    pid: int
    cpu: int = 0
    flags: str = NO_FLAGS


def lat_flags(irqs_off: bool, preempt_count: int = 0, need_resched: bool = False,
              preempt_resched: bool = False, migration_disabled: int = 0) -> str:
    """The five flag characters, as the kernel's ``trace_print_lat_fmt``
    (kernel/trace/trace_output.c) prints those ``tracing_gen_ctx_irq_test``
    (kernel/trace/trace.c) recorded: irqs-off/BH-disabled, need-resched,
    hardirq/softirq, preempt depth, migrate-disable."""
    nmi, hardirq = preempt_count & NMI_MASK, preempt_count & HARDIRQ_MASK
    softirq = preempt_count & SOFTIRQ_OFFSET
    bh_off = (preempt_count & SOFTIRQ_MASK) >> (SOFTIRQ_SHIFT + 1)
    irq = "D" if irqs_off and bh_off else "d" if irqs_off else "b" if bh_off else "."
    resched = {(True, True): "N", (True, False): "n", (False, True): "p"}.get((need_resched, preempt_resched), ".")
    hardsoft = ("Z" if nmi and hardirq else "z" if nmi else "H" if hardirq and softirq else "h" if hardirq
                else "s" if softirq else ".")
    depth = min(preempt_count & PREEMPT_MASK, 0xF)
    migrate = min(migration_disabled, 0xF)
    return f"{irq}{resched}{hardsoft}{f'{depth:x}' if depth else '.'}{f'{migrate:x}' if migrate else '.'}"


@dataclass(frozen=True)
class TaskLayout:
    """Where a kernel keeps ``current`` and what of it the prefix reads.

    :param current: the per-cpu offset of the ``struct task_struct *`` of the running task.
    :param pid: byte offset of ``task_struct.pid``; ``comm`` that of ``task_struct.comm``.
    :param how: where these came from, said in the trace header.
    :param preempt_count: the per-cpu offset of the preempt count (None: unknown).
    :param ti_flags: ``task_struct.thread_info.flags`` (None: unknown);
        ``migration_disabled`` likewise, and its size.
    """

    current: int
    pid: int
    comm: int
    comm_size: int
    how: str
    preempt_count: int | None = None
    ti_flags: int | None = None
    migration_disabled: int | None = None
    migration_disabled_size: int = 2

    def read(self, read: Callable[[int, int], bytes], percpu_base: int, word: int, endian: Literal["little", "big"],
             irqs_off: bool, tasks: KernelTasks, current: int | None = None) -> tuple[str, int, str]:
        """``(comm, pid, flags)`` of the running task: ``read(addr, size)`` reads guest memory
        (one read for the per-cpu words, one per task_struct field).  ``current``: the task
        itself, where a register holds it (:attr:`KernelTasks.current_register`)."""

        def number(raw: bytes) -> int:
            return int.from_bytes(raw, endian)

        if current is not None:
            count = 0
        elif self.preempt_count is not None:
            lo = min(self.current, self.preempt_count)
            raw = read(percpu_base + lo, max(self.current + word, self.preempt_count + 4) - lo)
            current = number(raw[self.current - lo:self.current - lo + word])
            count = number(raw[self.preempt_count - lo:self.preempt_count - lo + 4])
        else:  # a 32-bit kernel's per-cpu address wraps (i386: %fs base + the variable's address)
            current, count = number(read((percpu_base + self.current) & ((1 << 8 * word) - 1), word)), 0
        # pid and comm in one read where they are close (each read is a round trip to the stub;
        # both lie inside the one task_struct)
        lo, hi = min(self.pid, self.comm), max(self.pid + 4, self.comm + self.comm_size)
        if hi - lo <= MAX_JOINED_READ:
            raw = read(current + lo, hi - lo)
            raw_pid = raw[self.pid - lo:self.pid - lo + 4]
            raw_comm = raw[self.comm - lo:self.comm - lo + self.comm_size]
        else:
            raw_pid, raw_comm = read(current + self.pid, 4), read(current + self.comm, self.comm_size)
        pid = int.from_bytes(raw_pid, endian, signed=True)
        comm = raw_comm.split(b"\0", 1)[0].decode("utf-8", "replace")
        need_resched = preempt_resched = False
        if tasks.preempt_need_resched_inverted:
            preempt_resched = not count & tasks.preempt_need_resched_inverted
            count &= ~tasks.preempt_need_resched_inverted
        if self.ti_flags is not None and tasks.need_resched_bit is not None:
            need_resched = bool(number(read(current + self.ti_flags, 8 if word == 8 else 4))
                                >> tasks.need_resched_bit & 1)
        migrate = 0
        if self.migration_disabled is not None:
            migrate = number(read(current + self.migration_disabled, self.migration_disabled_size))
        return comm, pid, lat_flags(irqs_off, count, need_resched, preempt_resched, migrate)


def kernel_task_layout(image: str | os.PathLike[str], arch: Arch) -> TaskLayout:
    """The :class:`TaskLayout` of the kernel in ``image`` (a vmlinuz or vmlinux).

    Raises :class:`~kpsdk.errors.TargetError` saying what is missing: the arch does not
    say where ``current`` is, the image has no BTF, or its symbols lack the per-cpu
    variable.
    """
    tasks = arch.kernel_tasks
    if tasks is None:
        raise TargetError(f"{arch.name}: kpsdk does not know where its kernel keeps the current task")
    path = Path(image)
    from kpsdk.binfmt.files import read_regular

    try:
        data = read_regular(path)[0]
    except OSError as exc:
        raise TargetError(f"cannot read the kernel image {path}: {exc.strerror}") from exc
    digest = hashlib.sha256(data).hexdigest()
    cached = _read_cache(digest, arch.name)
    if cached is not None:
        return cached
    directory = private_dir(CACHE_DIR)
    missing = _MISSING.format(digest=digest, arch=arch.name)
    # an image without BTF says so once: unpacking it again (seconds) would find the same
    known = read_private(directory, missing, 4096) if directory is not None else None
    if known is not None:
        raise TargetError(f"{path}: {known.decode('utf-8', 'replace')}")
    try:
        layout = _layout_of(data, path, arch)
    except TargetError as exc:
        if directory is not None:
            write_private(directory, missing, str(exc).removeprefix(f"{path}: ").encode())
        raise
    _write_cache(digest, arch.name, layout)
    return layout


def code_task_layout(read: Callable[[int, int], bytes], function: tuple[int, int], arch: Arch) -> TaskLayout:
    """The :class:`TaskLayout` of a running kernel without BTF, from the code of
    :attr:`TaskCode.function <kpsdk.arch.TaskCode.function>` at ``function`` (address, size),
    read from the guest (:mod:`kpsdk.kernel.taskcode`).  The flags are irqs-off only."""
    from kpsdk.kernel.taskcode import code_layout

    found = code_layout(read, function, arch)
    return TaskLayout(found.current, found.pid, found.comm, TASK_COMM_LEN, code_tasks_note(arch))


def code_tasks_note(arch: Arch) -> str:
    """The trace header's line for a kernel whose task layout comes from its code."""
    tasks = arch.kernel_tasks
    assert tasks is not None and tasks.code is not None
    where = f"the {tasks.current_register} register" if tasks.current_register else \
        f"{tasks.percpu_register} + the offset its code reads"
    irqs = f"irqs-off from {tasks.flags_register}" if tasks.flags_register else "not known (all '.')"
    return (f"comm-pid: current from {where}, task_struct.pid and .comm where {tasks.code.function} reads them "
            f"(the kernel has no BTF; its code is read at the first hit); flags: {irqs}")


def image_btf(data: bytes, path: Path, arch: Arch) -> Btf:
    """The BTF of the kernel image ``data`` (read from ``path``): the ``.BTF`` section of an ELF
    vmlinux, or the bytes between ``__start_BTF`` and ``__stop_BTF`` of a raw image
    (:func:`kpsdk.kernel.image_btf.raw_btf`)."""
    from kpsdk.kernel.image_btf import raw_btf

    raw = raw_btf(data, path)
    btf = Btf(raw, f"{path} .BTF")
    btf.pointer_size = arch.word_size
    return btf


def _layout_of(data: bytes, path: Path, arch: Arch) -> TaskLayout:
    from kpsdk.kernel.kallsyms import image_entries

    tasks = arch.kernel_tasks
    assert tasks is not None
    btf = image_btf(data, path, arch)
    try:
        pid = btf.member("task_struct", "pid")
        comm = btf.member("task_struct", "comm")
    except LookupError as exc:
        raise TargetError(f"{path}: {exc}") from None
    ti_flags = _optional_member(btf, "thread_info.flags")
    migration = _optional_member(btf, "migration_disabled")
    if tasks.current_register is not None:  # the register is current: no per-cpu data to find
        return TaskLayout(0, pid.offset, comm.offset, min(comm.size, TASK_COMM_LEN),
                          f"comm-pid: current from the {tasks.current_register} register, task_struct.pid and .comm "
                          f"from the kernel's BTF; flags: irqs-off from {tasks.flags_register}",
                          None, ti_flags.offset if ti_flags is not None else None,
                          migration.offset if migration is not None else None,
                          migration.size if migration is not None else 2)
    percpu = {e.name: e.address for e in image_entries(data, path)}
    current = _percpu(btf, percpu, tasks.current)
    if current is None:
        raise TargetError(f"{path}: its symbols have none of {', '.join(tasks.current)}")
    preempt = _percpu(btf, percpu, tasks.preempt_count)
    how = (f"comm-pid: current from the per-cpu {current[0]}, task_struct.pid and .comm from the kernel's BTF; "
           f"flags: irqs-off from {tasks.flags_register}")
    if preempt is not None:
        how += f", the rest from the per-cpu {preempt[0]}, thread_info.flags and migration_disabled"
    return TaskLayout(current[1], pid.offset, comm.offset, min(comm.size, TASK_COMM_LEN), how,
                      preempt[1] if preempt is not None else None,
                      ti_flags.offset if ti_flags is not None else None,
                      migration.offset if migration is not None else None,
                      migration.size if migration is not None else 2)


def _percpu(btf: Btf, percpu: dict[str, int], specs: tuple[str, ...]) -> tuple[str, int] | None:
    """The first of ``specs`` (``SYM`` or ``SYM.member``) the kernel has, and its per-cpu offset."""
    for spec in specs:
        name, _, member = spec.partition(".")
        if name not in percpu:
            continue
        offset = percpu[name]
        if member:
            try:
                offset += btf.member(name, member).offset
            except LookupError:
                continue
        return spec, offset
    return None


def _optional_member(btf: Btf, path: str) -> Member | None:
    try:
        return btf.member("task_struct", path)
    except LookupError:
        return None


def _cache_name(digest: str, arch: str) -> str:
    return f"{digest}.{arch}.json"


def _read_cache(digest: str, arch: str) -> TaskLayout | None:
    directory = private_dir(CACHE_DIR)
    raw = read_private(directory, _cache_name(digest, arch), 4096) if directory is not None else None
    if raw is None:
        return None
    try:
        obj = json.loads(raw)
        if obj.pop("version") != _CACHE_VERSION:
            return None
        layout = TaskLayout(**obj)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    fields = (layout.current, layout.pid, layout.comm, layout.comm_size, layout.migration_disabled_size,
              *(v for v in (layout.preempt_count, layout.ti_flags, layout.migration_disabled) if v is not None))
    if not all(isinstance(v, int) and 0 <= v < 1 << 64 for v in fields) or not isinstance(layout.how, str) \
            or not 0 < layout.comm_size <= TASK_COMM_LEN or layout.migration_disabled_size not in (1, 2, 4):
        return None
    return layout


def _write_cache(digest: str, arch: str, layout: TaskLayout) -> None:
    directory = private_dir(CACHE_DIR)
    if directory is not None:
        write_private(directory, _cache_name(digest, arch),
                      json.dumps({"version": _CACHE_VERSION, **asdict(layout)}).encode())


def program_comm(path: str | os.PathLike[str]) -> str:
    """A program's ``comm``: its file name's first 15 bytes, as ``execve`` sets it."""
    name = os.fsencode(Path(path).name)[:TASK_COMM_LEN - 1]
    return name.decode("utf-8", "replace")


def check_comm(comm: object) -> str:
    """A user's fixed ``comm``: 1 to 15 bytes (TASK_COMM_LEN), printable, no blanks (the
    prefix is split on them)."""
    if not isinstance(comm, str):
        raise ArgumentError(f"comm={shown(comm)}: want a str")
    size = len(comm.encode("utf-8", "surrogateescape"))
    if not 0 < size < TASK_COMM_LEN or not comm.isprintable() or any(c.isspace() for c in comm):
        raise ArgumentError(f"comm={shown(comm)}: want 1 to {TASK_COMM_LEN - 1} bytes, printable and without "
                            "blanks (the kernel's TASK_COMM_LEN)")
    return comm


def check_pid(pid: object) -> int:
    """A user's fixed ``pid``: 0 (the idle task) to PID_MAX_LIMIT."""
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 <= pid <= PID_MAX_LIMIT:
        raise ArgumentError(f"pid={shown(pid)}: want an int from 0 to {PID_MAX_LIMIT} (PID_MAX_LIMIT)")
    return pid
