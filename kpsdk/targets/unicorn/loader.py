"""The Unicorn target kinds, ``elf:PATH`` and ``unicorn:ARCH``: loading an executable's
segments (or none) into a new :class:`~kpsdk.targets.unicorn.target.UnicornTarget`, and the
``kpsdk_targets`` hook that names them (this module is the ``unicorn`` entry point).

Its own module because loading is done once, before any probe, and owns nothing afterwards:
where the program goes (a PIE's base, whole-page mappings, a bound on what is mapped), where
kpsdk's area and the stack go around it, and handing the result to the Linux layer
(:func:`kpsdk.targets.unicorn.linux.start_process`).  The Linux layer loads ld.so with
:func:`load_mappings` too.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from kpsdk import hookimpl
from kpsdk.errors import ArgumentError, ImageFormatError, TargetError
from kpsdk.target import MappedFile, TargetKind
from kpsdk.targets.unicorn.layout import AREA_SIZE, BARE_STACK, PAGE, STACK_INITIAL, STACK_SIZE, STACK_TOP, align_up
from kpsdk.targets.unicorn.linux import check_options, start_process
from kpsdk.targets.unicorn.linux.images import PageCache, map_image
from kpsdk.targets.unicorn.output import CONSOLE_LIMIT, check_destination, check_limit
from kpsdk.targets.unicorn.target import UnicornTarget

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel

#: where a ``unicorn:`` target puts kpsdk's area (an ``elf:`` one puts it above the program)
BLANK_AREA = 0x76000000
#: the most memory an elf: target maps for a program's segments (page-rounded, overlaps once):
#: 1 GiB, more than any program emulated function by function needs; a larger p_memsz is
#: refused at once instead of being mapped and written
MAX_LOAD = 1 << 30
#: load bases of an ET_DYN (PIE) executable, as Linux with ASLR off (see pie_base)
PIE_BASE_64 = 0x555555554000
PIE_BASE_32 = 0x56555000


def pie_base(elf_class: int) -> int:
    """Where a position-independent executable is loaded: the base Linux gives a PIE
    with address randomization off (what gdb shows), so addresses look familiar."""
    return PIE_BASE_64 if elf_class == 64 else PIE_BASE_32


def open_elf(rest: str, registry: Registry, abi: str = "user", args: Sequence[str] | None = None,
             env: Mapping[str, str] | None = None, stdin: bytes | None = None,
             sysroot: str | os.PathLike[str] | None = None, cwd: str | None = None,
             bind: Sequence[tuple[str | os.PathLike[str], str, str]] | None = None,
             schedule_seed: int | None = None, follow: bool = True, stdout: int | IO[Any] | None = None,
             stderr: int | IO[Any] | None = None, console_limit: int = CONSOLE_LIMIT,
             **options: Any) -> UnicornTarget:
    """``elf:PATH``: load an executable's PT_LOAD segments into Unicorn, as the Linux process
    ``execve(PATH, [PATH, *args], env)`` starts (:mod:`kpsdk.targets.unicorn.linux`): ``stdin`` its
    standard input, ``sysroot`` the directory it sees as ``/`` (read-only, under the session's
    in-memory overlay), ``cwd`` its working directory in there, ``bind`` host directories
    mapped into its tree; ``follow=False`` lets probes fire in the first process only, not in
    the processes it forks (strace without ``-f``; its threads and what it execs stay followed);
    ``stdout``/``stderr`` where its output is streamed as written, of which ``s.console`` keeps
    the last ``console_limit`` bytes (:mod:`kpsdk.targets.unicorn.output`)."""
    from kpsdk.binfmt.elfimage import load_elf  # pyelftools loads when first used (start-up time)

    if options:
        raise TargetError(f"elf: unknown options {', '.join(options)} (known: abi, args, env, stdin, sysroot, cwd, "
                          "bind, schedule_seed, follow, stdout, stderr, console_limit)")
    if schedule_seed is not None and (not isinstance(schedule_seed, int) or isinstance(schedule_seed, bool)):
        raise ArgumentError(f"elf: schedule_seed must be an int or None, not {type(schedule_seed).__name__}")
    if not isinstance(follow, bool):
        raise ArgumentError(f"elf: follow must be True or False, not {type(follow).__name__}")
    check_options(args, env, stdin, sysroot, cwd, bind)  # bad options first, before the file is read
    limit = check_limit(console_limit)
    out, err = check_destination(stdout, "stdout"), check_destination(stderr, "stderr")
    linked = load_elf(Path(rest))
    arch = registry.archs.by_elf(linked.machine, linked.elf_class, linked.endian)
    if sysroot is None and runs_natively(arch):
        # a program of the host's own arch runs in the caller's world: the host's files (read
        # only, the writes in the session's overlay), the caller's environment and directory
        sysroot = "/"
        env = dict(os.environ) if env is None else env
        cwd = os.getcwd() if cwd is None else cwd
    process = check_options(args, env, stdin, sysroot, cwd, bind)
    bias = (arch.pie_base or pie_base(linked.elf_class)) if linked.kind == "ET_DYN" else 0
    image = linked.relocated(bias)  # a PIE at a Linux-like base, its symbols with it
    mappings = load_mappings(image, arch)
    target = UnicornTarget(arch, abi_kind=abi)
    target.output.configure(limit, out, err)
    target._files = (MappedFile.of(linked, bias),)
    linux = arch.syscalls is not None and arch.syscalls.linux is not None
    # a Linux program's read-only pages join its kernel's page cache: the processes that exec
    # it again share them (and the code Unicorn translated from them)
    pages = PageCache() if linux else None
    map_image(target, pages, image, linked.identity, mappings)
    top = max(start + size for start, size, _ in mappings)
    try:
        target.setup_area(align_up(top, 0x10000) + 0x10000)  # near the code: riscv jal reaches +-1 MiB
        target.setup_stack(STACK_INITIAL if linux else BARE_STACK)  # a Linux program's grows on demand
    except TargetError as e:
        raise ImageFormatError(image.path, f"its segments leave no room for kpsdk's area and stack: {e}") from e
    target.symbols = image.symbols
    target.entry = image.entry
    descriptor = image.raw_entry + bias
    if arch.entry_registers is not None and descriptor != image.entry:  # e_entry is a function descriptor
        for name, value in arch.entry_registers(target.read_memory(descriptor, 3 * arch.word_size), bias).items():
            target.fast.write(arch.register(name), value)
    if arch.entry_address_register is not None:
        target.fast.write(arch.register(arch.entry_address_register), image.entry)
    if not follow and not linux:
        raise ArgumentError(f"elf: follow=False chooses a Linux program's processes; {arch.name} programs run "
                            "without the Linux layer (one task)")
    if linux:
        area = target.sentinel
        reserved = [(area, area + AREA_SIZE), (STACK_TOP - STACK_SIZE, STACK_TOP)]
        target.linux = start_process(target, image, rest, process, STACK_TOP - 0x10, reserved)
        assert target.kernel is not None and pages is not None
        target.kernel.pages = pages
        target.kernel.sched.reseed(schedule_seed)
        if not follow:
            target.manager.set_task_filter(first_process_only(target.kernel))
        target.call_sp = min(target.call_sp, target.fast.read(arch.register(arch.sp)) - 0x100)
    return target


def first_process_only(kernel: LinuxKernel) -> Callable[[], bool]:
    """The probes' task filter of ``follow=False``: the task running is one of the first
    process's (the one the session started; its pid is kept across its execve)."""
    current = kernel.current
    assert current is not None
    pid = current.process.pid

    def followed() -> bool:
        task = kernel.current
        return task is None or task.process.pid == pid

    return followed


def runs_natively(arch: Arch) -> bool:
    """Whether ``arch``'s programs are the host's own (its Linux ``uname -m`` is this machine's)."""
    linux = arch.syscalls.linux if arch.syscalls is not None else None
    return linux is not None and linux.machine == platform.machine()


def load_mappings(image: ElfImage, arch: Arch) -> list[tuple[int, int, str]]:
    """``(start, size, perms)`` of the memory an image's segments need, checked against what
    the target maps.

    Segments are widened to whole pages; a page two segments share gets both's permissions,
    and adjacent pages with the same permissions become one mapping (one ``mem_map`` for a
    large bss, where page by page took minutes).  The whole must lie in the architecture's
    address space with room for kpsdk's area above it, and add up to at most
    :data:`MAX_LOAD` bytes.
    """
    edges: list[tuple[int, int, int]] = []  # (address, +1 starts / -1 ends, PF_ flags)
    for seg in image.segments:
        edges += [(seg.vaddr & ~(PAGE - 1), 1, seg.flags & 7), (align_up(seg.vaddr + seg.memsz), -1, seg.flags & 7)]
    edges.sort()
    active = [0] * 8  # segments covering the current page, by flags
    out: list[tuple[int, int, str]] = []
    for i, (addr, step, flags) in enumerate(edges):
        active[flags] += step
        if i + 1 == len(edges) or edges[i + 1][0] == addr or not any(active):
            continue
        prot = 0
        for f, n in enumerate(active):
            prot |= f if n else 0
        perms = "".join(c for c, bit in (("r", 4), ("w", 2), ("x", 1)) if prot & bit) or "r"
        end = edges[i + 1][0]
        if out and out[-1][0] + out[-1][1] == addr and out[-1][2] == perms:
            addr = out.pop()[0]
        out.append((addr, end - addr, perms))
    total = sum(size for _, size, _ in out)
    if total > MAX_LOAD:
        raise ImageFormatError(image.path, f"its PT_LOAD segments need {total:#x} bytes of memory, more than an "
                                           f"elf: target maps ({MAX_LOAD:#x})")
    space = 1 << (8 * arch.word_size)
    top = out[-1][0] + out[-1][1]
    if align_up(top, 0x10000) + 0x10000 + AREA_SIZE > space:
        raise ImageFormatError(image.path, f"its segments (loaded at bias {image.bias:#x}) end at {top:#x}, leaving "
                                           f"no room for kpsdk's area in the {8 * arch.word_size}-bit address space")
    return out


def open_blank(rest: str, registry: Registry, abi: str = "user", **options: Any) -> UnicornTarget:
    """``unicorn:ARCH``: an empty CPU with a stack; map and write code yourself."""
    if options:
        raise TargetError(f"unicorn: unknown options {', '.join(options)}")
    arch = registry.arch(rest)
    # a name that is an instruction set (``unicorn:thumb``) makes it the default for code without symbols
    iset = rest if any(i.name == rest for i in arch.isets) else None
    target = UnicornTarget(arch, abi_kind=abi, default_iset=iset)
    target.setup_area(BLANK_AREA)
    target.setup_stack()
    return target


@hookimpl
def kpsdk_targets() -> list[TargetKind]:
    return [
        TargetKind("elf", open_elf, "an ELF executable run in Unicorn (elf:PATH)"),
        TargetKind("unicorn", open_blank, "a blank Unicorn CPU (unicorn:ARCH)"),
    ]
