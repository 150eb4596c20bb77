"""The Linux layer's non-memory system calls answer any arguments with a Linux errno or a
result, never a Python exception (issue 36, item 10).

Each example makes one call, through the process's own dispatch (``LinuxProcess.syscall``,
as the kernel runs it for the current task), with registers drawn from what a buggy or
hostile program passes: descriptors open, closed, negative, with high bits set; pointers to
a page of fuzzed bytes (paths, timespecs, buffers), misaligned, at the end of the page,
NULL, unmapped, in the kernel's half; counts and offsets huge, negative, near ``LLONG_MAX``.
The answer must be a result (an int >= 0), ``-errno`` of a real errno, or a wait (the
handler's ``_Block``: the kernel would park the task).  The sessions (x86_64, i386 32-bit,
mips 32-bit big-endian, ppc64 64-bit big-endian) are never run: the calls are the whole test.
After each example the descriptors are put back as they were, so examples do not drift.

The fixed cases of issue 36 are then compared with the native kernel: ``programs/badargs.c``
prints each call's result or errno name, run natively (x86_64, RLIMIT_NOFILE 1024 as kpsdk's)
and on kpsdk: the same lines.
"""

from __future__ import annotations

import errno
import os
import resource
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk.fixtures import path as fixture_path
from kpsdk.targets.unicorn.linux.files import OpenFile
from kpsdk.targets.unicorn.linux.syscalls import signature
from kpsdk.targets.unicorn.linux.waits import _Block
from tests.conftest import fuzz_examples, require_tool

pytestmark = pytest.mark.fuzz

ARCHS = ("x86_64", "i386", "mips", "ppc64")
#: the calls fuzzed, by the arch's names (those an arch lacks are left out for it)
CALLS = (
    "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2",
    "lseek", "_llseek", "open", "openat", "close", "stat", "lstat", "fstat", "newfstatat", "stat64", "lstat64",
    "fstat64", "fstatat64", "statx", "fcntl", "fcntl64", "dup", "dup2", "dup3", "nanosleep", "clock_nanosleep",
    "clock_nanosleep_time64", "clock_gettime", "clock_gettime64", "clock_getres", "gettimeofday", "time",
    "pipe", "pipe2", "poll", "ppoll", "ppoll_time64", "getdents64", "readlink", "readlinkat", "access",
    "faccessat", "ftruncate", "ftruncate64", "truncate", "fsync", "getcwd", "chdir", "fchdir", "sendfile",
    "sendfile64", "timerfd_create", "timerfd_settime", "timerfd_gettime", "eventfd2", "futex",
    "setitimer", "getitimer", "alarm", "select", "_newselect", "pselect6", "epoll_create1", "epoll_ctl",
    "epoll_pwait2", "rt_sigtimedwait", "utimensat", "getrandom", "copy_file_range", "fallocate", "fadvise64",
    "fadvise64_64", "flock", "fdatasync", "getdents", "fchmod", "fchown", "fchmodat", "uname", "sysinfo",
    "getrlimit", "prlimit64", "sched_getaffinity", "rename", "renameat2", "unlink", "unlinkat", "mkdirat",
    "symlinkat", "linkat", "readahead", "splice", "tee", "ioctl", "statfs", "fstatfs", "getxattr", "fgetxattr",
)
SCRATCH_SIZE = 0x2000
#: paths a program may pass, the odd ones issue 36 named among them
PATHS = ("/proc/self/fd/3", "/proc/self/fd/\u00b2", "/proc/self/fd/\u0663", "/proc/self/fd/03", "/proc/self/fd/+3",
         "/proc/self/cmdline", "/proc/self/fd", "/proc/self/exe", "/tmp", "/tmp/f", "/tmp/f/", "/dev/null",
         "/mnt/host", "/mnt", "/dev/zero", "/", "", ".", "..", "/nonexistent", "a" * 300, "/" + "x/" * 2100,
         "/proc/self/fd/99999999999")


class Guest:
    """One never-run session and what the examples share: a scratch region of the program's,
    the descriptors open at the start (kept referenced, so that a call closing one never
    releases it), and the calls of the arch."""

    def __init__(self, arch: str, bound: Path) -> None:
        (bound / "host").write_bytes(b"a host file\n" * 10)
        self.session = kpsdk.open(f"elf:{fixture_path(arch)}", bind=[(bound, "/mnt", "rw")])
        target: Any = self.session.target
        self.linux = target.linux
        self.linux.root.counter.capacity = 1 << 20  # the overlay's size: a huge ftruncate is ENOSPC, not GBs
        self.calls = {name: nr for name, nr in target.arch.syscalls.calls.items() if name in CALLS}
        self.mask = target.arch.word_mask
        self.bits = 8 * target.arch.word_size
        self.order = "<" if target.arch.endian == "little" else ">"
        self.scratch = self.linux.mem.mmap(0, SCRATCH_SIZE, 3, 0x22)
        assert 0 < self.scratch < self.mask - SCRATCH_SIZE, hex(self.scratch)
        self.put(0, b"/tmp/f\0")
        at = -100 & self.mask
        opened = [self.call("openat", at, self.scratch, 0o102, 0o644)]  # O_RDWR | O_CREAT
        self.put(0, b"0123456789" * 10)
        assert self.call("write", opened[0], self.scratch, 100) == 100
        for name in (b"/proc/self/cmdline\0", b"/tmp\0", b"/dev/null\0", b"/mnt/host\0"):
            self.put(0, name)
            opened.append(self.call("openat", at, self.scratch, 0o200000 if name == b"/tmp\0" else 2 if
                                    name == b"/mnt/host\0" else 0))
        pipe_nr = "pipe2" if "pipe2" in self.calls else "pipe"
        assert self.call(pipe_nr, self.scratch, 0) == 0
        opened += list(struct.unpack(self.order + "ii", self.read(0, 8)))
        assert all(fd >= 3 for fd in opened), opened
        #: descriptor -> its description, as every example starts
        self.table: dict[int, OpenFile] = dict(self.linux.fds.fds)
        for f in self.table.values():
            f.refs += 1  # held by the test too: a close or dup2 over it never releases it
        self.fds = sorted(self.table)

    def put(self, offset: int, data: bytes) -> None:
        self.linux.uc.mem_write(self.scratch + offset, data)

    def read(self, offset: int, size: int) -> bytes:
        return bytes(self.linux.uc.mem_read(self.scratch + offset, size))

    def call(self, name: str, *args: int) -> int:
        result = self.linux.syscall(self.calls[name], tuple(a & self.mask for a in (*args, 0, 0, 0, 0, 0, 0)[:6]))
        assert isinstance(result, int)
        return result

    def restore(self) -> None:
        """The descriptors as they were: the ones an example made closed, the first ones back."""
        fds = self.linux.fds
        for fd in [fd for fd in fds.fds if fd not in self.table]:
            fds.close(fd)
        for fd, f in self.table.items():
            if fds.fds.get(fd) is not f:
                fds.install(f, fd)
        fds.cloexec.clear()
        self.linux.cwd = "/"


@pytest.fixture(scope="module", params=ARCHS)
def guest(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guest]:
    g = Guest(request.param, tmp_path_factory.mktemp("bound"))
    try:
        yield g
    finally:
        g.session.close()


def words(bits: int) -> st.SearchStrategy[int]:
    """Numbers a register holds: small, at the edges of int and long, and anything."""
    top = (1 << bits) - 1
    return st.one_of(
        st.integers(-8, 4200),
        st.sampled_from([-100, 1 << 31, (1 << 31) - 1, 1 << 32, (1 << 32) + 3, (1 << 63) - 1, 1 << 63, top,
                         (1 << 63) - 5, -(1 << 31), 999_999_999, 1_000_000_000]),
        st.integers(0, top),
    )


#: strace's kinds of argument (kpsdk.targets.unicorn.linux.calls.declare) that are descriptors, and pointers
FD_KINDS = frozenset({"fd", "dirfd"})
NUMBER_KINDS = frozenset({"d", "ld", "u", "x", "mode", "oflags", "oflagsonly", "atflags", "amode", "whence",
                          "fcntlcmd", "fcntlarg", "statxflags", "statxmask", "faflags", "pgoff"})
OFFSETS = (-1, -4, (1 << 63) - 1, (1 << 63) - 5, 1 << 62, 0, 5, 4096, 1 << 32)


@st.composite
def registers(draw: st.DrawFn, g: Guest, name: str) -> tuple[int, ...]:
    """Six argument registers, each drawn as the call's argument there is (strace's kinds: a
    descriptor, a pointer, an offset, a number), now and then anything instead."""
    pointers = st.sampled_from([g.scratch, g.scratch + 0x800, g.scratch + 0x1000, g.scratch + 1, g.scratch + 3,
                                g.scratch + SCRATCH_SIZE - 3, g.scratch + SCRATCH_SIZE, 0, 0x1000, g.mask & ~0xFFF,
                                1 << (g.bits - 1)])
    descriptors = st.one_of(*[st.sampled_from(g.fds)] * 6, st.sampled_from([-1, -100, 1023, 1024, 5000]),
                            st.sampled_from(g.fds).map(lambda fd: fd + (1 << 32)))
    offsets = st.sampled_from(OFFSETS) | st.integers(-(1 << 63), (1 << 63) - 1)
    anything = descriptors | pointers | words(g.bits)
    out: list[int] = []
    for kind in signature(name) or ():
        if kind in FD_KINDS:
            strategy = descriptors
        elif kind in ("off64", "llseekoff") and g.bits == 32:  # two registers (three: an aligned pair's pad)
            out += [draw(offsets) & g.mask for _ in range(3 if kind == "off64" else 2)]
            continue
        elif kind == "off64":
            strategy = offsets
        elif kind in NUMBER_KINDS:
            strategy = words(g.bits)
        else:  # a path, a buffer, a structure
            strategy = pointers
        out.append(draw(anything if draw(st.integers(0, 7)) == 0 else strategy))
    while len(out) < 6:
        out.append(draw(anything))
    return tuple(out[:6])


@st.composite
def scratch_bytes(draw: st.DrawFn, g: Guest) -> tuple[bytes, bytes, bytes]:
    """What the scratch page holds: a path (at 0), timespecs (at 0x800: four 64-bit pairs, which
    the arch's own layout reads as it reads them), an iovec array (at 0x1000), random bytes (0x1800)."""
    path = draw(st.sampled_from(PATHS) | st.text(max_size=40)).encode("utf-8", "surrogatepass") + b"\0"
    numbers = draw(st.lists(words(64), min_size=8, max_size=8))
    spec = b"".join(struct.pack(g.order + "Q", n & (2**64 - 1)) for n in numbers)
    iov = b"".join(struct.pack(g.order + ("Q" if g.bits == 64 else "I"), n & g.mask)
                   for n in (g.scratch + 0x1800, draw(words(g.bits)), draw(words(g.bits)), draw(words(g.bits))))
    return path[:0x800], spec, iov + draw(st.binary(max_size=64))


def errno_or_result(result: int) -> bool:
    return result >= 0 or -result in errno.errorcode


@pytest.mark.parametrize("name", CALLS)
@settings(max_examples=fuzz_examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_non_memory_calls_answer_an_errno_or_a_result_whatever_their_arguments(guest: Guest, name: str,
                                                                              data: st.DataObject) -> None:
    if name not in guest.calls:
        pytest.skip(f"no {name} on this arch")
    path, spec, rest = data.draw(scratch_bytes(guest), label="scratch")
    guest.put(0, path)
    guest.put(0x800, spec)
    guest.put(0x1000, rest)
    args = data.draw(registers(guest, name), label="args")
    kinds = signature(name) or ()
    at = next((i for i, kind in enumerate(kinds) if kind in FD_KINDS), None)
    # the call on each kind of description (a file of the overlay, of the host, /proc, a pipe...),
    # in the descriptor it takes first, and with the descriptor drawn
    for fd in (*guest.fds, None) if at is not None else (None,):
        chosen = args if fd is None or at is None else (*args[:at], fd, *args[at + 1:])
        regs = tuple(a & guest.mask for a in chosen)
        try:
            result = guest.linux.syscall(guest.calls[name], regs)
        except _Block:
            continue  # the call waits: the kernel would park the task (a sleep, an empty pipe's read)
        finally:
            guest.restore()
        assert isinstance(result, int) and errno_or_result(result), (name, [hex(r) for r in regs], result)


# -- the cases of issue 36 against the native kernel ------------------------------------------------------

BADARGS = Path(__file__).parent / "programs" / "badargs.c"


def test_the_fixed_cases_answer_as_the_native_kernel(tmp_path: Path) -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("compares the x86_64 host's kernel")
    cc = require_tool("gcc", "gcc")
    exe = tmp_path / "badargs"
    subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(BADARGS)], check=True, capture_output=True)

    def as_kpsdk() -> None:  # kpsdk's RLIMIT_NOFILE: fcntl(F_DUPFD) above it is EINVAL
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))

    native = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False,
                            preexec_fn=as_kpsdk, stdin=subprocess.DEVNULL)
    assert native.returncode == 0, native.stderr
    s = kpsdk.open(f"elf:{exe}", sysroot="/")
    try:
        assert s.run(timeout=60) == 0
        assert s.console.splitlines() == native.stdout.splitlines()
        assert s.syscalls_unimplemented == {}
    finally:
        s.close()


def test_a_sleep_past_the_clocks_end_never_ends_and_the_clock_stays_in_range(tmp_path: Path) -> None:
    """``nanosleep({LLONG_MAX, 999999999})`` sleeps for ever on Linux (its timer at KTIME_MAX never
    fires): on kpsdk, alone, the program is deadlocked, and the clock it reads never passed
    KTIME_MAX (it moved by the one sleep a signal ended)."""
    from kpsdk.targets.unicorn.linux.sched import KTIME_MAX

    g = Guest("x86_64", tmp_path)
    try:
        clock = g.linux.kernel.clock
        g.put(0x100, struct.pack("<qq", (1 << 63) - 1, 999_999_999))
        with pytest.raises(_Block) as info:
            g.call("nanosleep", g.scratch + 0x100, 0)
        assert info.value.deadline is not None and info.value.deadline > clock.limit
        timers = len(g.linux.kernel._timers)
        g.linux.kernel.at(info.value.deadline, lambda: None)
        assert len(g.linux.kernel._timers) == timers  # a timer at KTIME_MAX: never set
        clock.advance_to(info.value.deadline)  # even were the clock asked to go there
        assert clock.now(True) <= KTIME_MAX and clock.now(False) <= KTIME_MAX
        assert g.call("clock_gettime", 0, g.scratch) == 0
        sec, nsec = struct.unpack("<qq", g.read(0, 16))
        assert sec * 10**9 + nsec <= KTIME_MAX
    finally:
        g.session.close()
