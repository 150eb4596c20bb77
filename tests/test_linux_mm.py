"""The memory calls on the embedded default, against a native run: at scale and at their edges.

tests/programs/mm.c, built statically for x86_64 and i386, runs natively on this machine (a
64-bit kernel: the i386 build is a compat task, whose lengths do not wrap at 2**32) and on
kpsdk; each mode prints only what Linux decides (errno names, fault codes, sums), so the two
outputs must be identical.  The fuzz test calls mmap/munmap/mprotect/mremap/brk/madvise through
the Linux layer's call entry with arguments of every size: each must answer a Linux errno or
succeed, never raise.
"""

from __future__ import annotations

import errno
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk.targets.unicorn.linux.files import _GuestErrno
from kpsdk.targets.unicorn.linux.syscalls import LinuxProcess
from tests.conftest import first_fixture, fuzz_examples, require_tool

SOURCE = Path(__file__).parent / "programs" / "mm.c"
ARCHS = ("x86_64", "i386")
DATA = "the sysroot's file\n"

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the native ground truth is an x86_64 run")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build(arch)``: mm.c, static, for ``arch`` (once per module)."""
    out = tmp_path_factory.mktemp("mm")
    built: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in built:
            fixture = first_fixture(arch)
            cc = require_tool(fixture.compilers[0], fixture.libc_packages)
            exe = out / f"mm-{arch}"
            subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
            built[arch] = exe
        return built[arch]

    return make


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sysroot with the file the errnos mode maps."""
    path = tmp_path_factory.mktemp("mmroot")
    (path / "data.txt").write_text(DATA)
    return path


def native(exe: Path, args: list[str]) -> tuple[str, int]:
    proc = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120, check=False)
    return proc.stdout, proc.returncode


def emulated(exe: Path, args: list[str], **options: object) -> tuple[str, int | None]:
    with kpsdk.open(f"elf:{exe}", args=args, **options) as s:  # type: ignore[arg-type]
        status = s.run(timeout=600)
        return s.console, status


@pytest.mark.parametrize("arch", ARCHS)
def test_the_memory_calls_answer_what_linux_answers(build: Callable[[str], Path], root: Path, arch: str) -> None:
    """mmap, munmap, mprotect, mremap, madvise and brk at their edges (zero, unaligned and
    huge lengths, holes, bad flags, advice and descriptors, an offset past a page, a shared
    writable mapping of a read-only file): each answer is the native kernel's.  mremap's
    zero old length raised IndexError, a huge one UcError; munmap's huge length was taken."""
    exe = build(arch)
    expected, status = native(exe, ["errnos", str(root / "data.txt")])
    assert status == 0 and "EFAULT" in expected  # the ground truth itself ran
    assert emulated(exe, ["errnos", "/data.txt"], sysroot=root) == (expected, 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_small_mappings_fault_as_linux_s_do(build: Callable[[str], Path], arch: str) -> None:
    """Small anonymous mappings side by side (which share one engine mapping, an arena): a page
    unmapped between two, a read-only one and an inaccessible one fault with Linux's codes, a
    page mapped again reads zeros, one made executable keeps its bytes, a fork's child has its
    own copies."""
    exe = build(arch)
    expected, status = native(exe, ["holes"])
    assert status == 0 and "SEGV_MAPERR" in expected
    assert emulated(exe, ["holes"]) == (expected, 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_refused_huge_mapping_leaves_the_program_running(build: Callable[[str], Path], arch: str) -> None:
    """mmap of 2**46 bytes (2**31 on i386) read-write: refused or not as natively, and the
    program goes on mapping and exits normally with the same output."""
    exe = build(arch)
    expected, status = native(exe, ["huge"])
    assert status == 0
    assert emulated(exe, ["huge"]) == (expected, 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_engine_allocates_no_memory_during_a_run(build: Callable[[str], Path], arch: str) -> None:
    """Every mapping a program makes is kpsdk's host buffer given to the engine (mem_map_ptr),
    never memory Unicorn allocates (mem_map): Unicorn 2.1.4 records its own failed allocation
    in a field its run returns at its end (``invalid_error``, set by ``ram_block_add``), so a
    refused huge mmap inside a run, answered ENOMEM, made the program's exit fail with
    UC_ERR_NOMEM (issue 36, item 7).  A buffer the host refuses is ENOMEM before the engine is
    asked."""
    exe = build(arch)
    with kpsdk.open(f"elf:{exe}", args=["huge"]) as s:
        uc = s.target.uc  # type: ignore[attr-defined]
        allocating = uc.mem_map
        made: list[tuple[int, int]] = []

        def mem_map(address: int, size: int, perms: int = 7) -> None:
            made.append((address, size))
            allocating(address, size, perms)

        uc.mem_map = mem_map
        assert s.run(timeout=300) == 0
        assert s.console == native(exe, ["huge"])[0]
    assert made == []


def test_many_small_mappings_take_linear_time(build: Callable[[str], Path]) -> None:
    """20,000 anonymous 4 KiB mmaps, every other one unmapped, each page left written and read:
    the output is the native one, and the time grows linearly (it was quadratic and worse:
    Unicorn rebuilds its view of memory at each engine mapping; 4,000 took 245 s)."""
    exe = build("x86_64")
    times = {}
    for n in (2000, 20000):
        expected, status = native(exe, ["many", str(n)])
        assert status == 0
        start = time.perf_counter()
        assert emulated(exe, ["many", str(n)]) == (expected, 0)
        times[n] = time.perf_counter() - start
    # ten times the calls: well under a hundred times the time (a quadratic cost)
    assert times[20000] < 25 * max(times[2000], 0.5), times


# -- no Python exception escapes a memory call -------------------------------------------------

#: lengths and addresses around the edges: zero, unaligned, a page, the 32-bit and 47-bit limits,
#: the word's top, and values near them
EDGES = [0, 1, 0xFFF, 0x1000, 0x1001, 0x2000, 0x10000, 1 << 20, 0x40000000, 0x7FFFF000, 0x80000000,
         0xFFFFE000, 0xFFFFF000, 0xFFFFFFFF, 1 << 32, 1 << 46, (1 << 47) - 0x1000, 1 << 47, 1 << 63,
         (1 << 64) - 0x2000, (1 << 64) - 0x1000, (1 << 64) - 1]
#: page counts a length is often made of
PAGES = [0, 1, 2, 3, 16]


def _calls(bits: int, base: int) -> st.SearchStrategy[list[tuple[str, tuple[int, ...]]]]:
    """Lists of calls whose addresses are mostly near ``base`` (where the process maps) and
    whose lengths are mostly a few pages or an edge; any word now and then."""
    mask = (1 << bits) - 1
    anything = st.integers(0, mask)
    near = st.integers(-4, 32).map(lambda i: (base + i * 0x1000) & mask)
    addr = st.one_of(near, near, st.sampled_from(EDGES), anything).map(lambda v: v & mask)
    size = st.one_of(st.sampled_from(PAGES).map(lambda n: n * 0x1000), st.sampled_from(EDGES),
                     anything).map(lambda v: v & mask)
    prot = st.one_of(st.integers(0, 7), anything)
    mflags = st.one_of(st.sampled_from([0x22, 0x21, 0x32, 0x12, 0x02, 0x01, 0x03, 0x100022, 0x20, 0x0F]),
                       anything)
    fd = st.sampled_from([mask, 0, 1, 2, 3, 999])
    one = st.one_of(
        st.tuples(st.just("mmap"), st.tuples(addr, size, prot, mflags, fd, st.one_of(size, anything))),
        st.tuples(st.just("munmap"), st.tuples(addr, size)),
        st.tuples(st.just("mprotect"), st.tuples(addr, size, prot)),
        st.tuples(st.just("mremap"), st.tuples(addr, size, size, st.one_of(st.integers(0, 8), anything), addr)),
        st.tuples(st.just("brk"), st.tuples(st.one_of(addr, size))),
        st.tuples(st.just("madvise"), st.tuples(addr, size, st.one_of(st.integers(0, 30), anything))),
    )
    return st.lists(one, min_size=1, max_size=12)


@pytest.fixture(scope="module")
def processes(build: Callable[[str], Path], root: Path) -> dict[str, tuple[LinuxProcess, dict[str, int], int, int]]:
    """A stopped session per arch (mm.c loaded, /data.txt open as descriptor 3): its process,
    its call numbers, its word size and where it maps memory.  The calls change the process's
    memory from example to example (a fuzzer's state, as a program's would be)."""
    out = {}
    sessions = []
    for arch in ARCHS:
        s = kpsdk.open(f"elf:{build(arch)}", args=["holes"], sysroot=root)
        sessions.append(s)
        kernel = s.target.kernel  # type: ignore[attr-defined]
        process = next(iter(kernel.tasks.values())).process
        bits = 8 * s.target.arch.word_size
        page = process.mem.mmap(0, 0x1000, 3, 0x22)  # the path, for openat to read
        process.write(page, b"/data.txt\0")
        assert process.sys_openat(-100 & ((1 << bits) - 1), page, 0, 0) == 3  # AT_FDCWD, O_RDONLY
        calls = s.target.arch.syscalls.calls  # type: ignore[union-attr]
        out[arch] = (process, calls, bits, page)
    yield out  # type: ignore[misc]
    for s in sessions:
        s.close()


@pytest.mark.parametrize("arch", ARCHS)
@settings(max_examples=fuzz_examples(60))
@given(data=st.data())
def test_no_python_exception_escapes_a_memory_call(
        processes: dict[str, tuple[LinuxProcess, dict[str, int], int, int]], arch: str, data: st.DataObject) -> None:
    """Each call answers a Linux errno or succeeds (an address, 0): mremap's zero old length
    raised IndexError, its huge new one UcError, an offset of -4096 OverflowError."""
    process, numbers, bits, base = processes[arch]
    for name, args in data.draw(_calls(bits, base)):
        if name == "mmap" and "mmap" not in numbers:
            name, args = "mmap2", (*args[:5], args[5] >> 12)
        handler = process.handlers.lookup(numbers[name], name)[1]
        assert handler is not None
        try:
            result = handler(*args)
        except _GuestErrno as e:
            result = -e.errno
        assert isinstance(result, int)
        if result < 0:
            assert -result in errno.errorcode, (name, args, result)
        elif name in ("munmap", "mprotect", "madvise"):
            assert result == 0
