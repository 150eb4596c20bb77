"""Real Linux programs on the Unicorn target (``elf:``), against qemu-user as ground truth.

tests/programs/linuxprog.c, built statically with each cross compiler, reads its
arguments, environment, standard input and a file of the sysroot, mallocs and
exits 42; Debian's busybox-static runs applets.  Each runs under kpsdk's Linux
layer and under qemu-user with the same arguments, environment, input and
sysroot: the output and exit status must be identical.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile

import kpsdk
from kpsdk.targets.unicorn.linux.files import Sysroot, _GuestErrno
from tests.conftest import DEBIAN_ARCHS, QEMU, REGISTERED_ARCHS, first_fixture, require_tool

SOURCE = Path(__file__).parent / "programs" / "linuxprog.c"
#: the arches the Linux layer runs programs of (Arch.syscalls.linux) and kpsdk builds for (Arch.toolchain)
LINUX_ARCHS = tuple(a.name for a in REGISTERED_ARCHS
                    if a.syscalls is not None and a.syscalls.linux is not None and a.toolchain is not None)
#: the cross compiler of each, and the Debian packages with it and its static libc
COMPILERS = {arch: (first_fixture(arch).compilers[0], first_fixture(arch).libc_packages) for arch in LINUX_ARCHS}
BUSYBOX = Path("/bin/busybox")
DATA = "the sysroot's file\nits second line\n"


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build(arch)``: linuxprog.c, statically linked for ``arch`` (built once per module)."""
    out = tmp_path_factory.mktemp("linuxprog")
    built: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in built:
            cc, package = COMPILERS[arch]
            require_tool(cc, package)
            exe = out / f"linuxprog-{arch}"
            subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
            built[arch] = exe
        return built[arch]

    return make


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    (root / "data.txt").write_text(DATA)
    return root


def under_qemu(arch: str, exe: Path, args: list[str], env: dict[str, str], stdin: bytes,
               root: Path | None = None, stderr_too: bool = False) -> tuple[str, int]:
    """The program's stdout (and stderr, interleaved, as kpsdk's console has both) and exit
    status under qemu-user (``-L root``: absolute paths are looked up there first), with
    exactly ``env`` as its environment."""
    qemu = require_tool(QEMU[arch], "qemu-user")
    cmd = [qemu, *(["-L", str(root)] if root is not None else []), str(exe), *args]
    proc = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE, env=env, timeout=60,
                          check=False)
    return proc.stdout.decode(), proc.returncode


def under_kpsdk(exe: Path, args: list[str], env: dict[str, str], stdin: bytes,
                root: Path | None = None) -> tuple[str, int | None, kpsdk.Session]:
    s = kpsdk.open(f"elf:{exe}", args=args, env=env, stdin=stdin, sysroot=root)
    status = s.run(timeout=60)
    return s.console, status, s


CASES = {
    "reads-the-file": (["/data.txt", "4"], {"GREETING": "hi there"}, b"one\ntwo\nthree\n"),
    "no-such-file": (["/missing.txt", "2"], {"GREETING": "x=y", "OTHER": ""}, b""),
    "long-stdin": (["/data.txt", "1"], {}, b"".join(b"line %d\n" % i for i in range(3000))),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_static_program_matches_qemu_user(build: Callable[[str], Path], sysroot: Path, arch: str,
                                          case: str) -> None:
    exe = build(arch)
    args, env, stdin = CASES[case]
    expected = under_qemu(arch, exe, args, env, stdin, sysroot)
    out, status, s = under_kpsdk(exe, args, env, stdin, sysroot)
    assert (out, status) == expected
    assert expected[1] in (3, 42)  # the program ran to its end (42), or told it could not open (3)
    assert s.syscalls_unimplemented == {}


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_unknown_system_call_is_enosys_and_recorded(build: Callable[[str], Path], sysroot: Path,
                                                     arch: str) -> None:
    exe = build(arch)
    args = ["/data.txt", "1", "500"]  # 500: no call has that number on any of these arches
    expected = under_qemu(arch, exe, args, {}, b"", sysroot)
    out, status, s = under_kpsdk(exe, args, {}, b"", sysroot)
    assert (out, status) == expected
    assert f"syscall 500 -> -1 errno={arch_errno(arch, errno.ENOSYS)}" in out
    assert s.syscalls_unimplemented == {"syscall_500": 1}


def arch_errno(arch: str, number: int) -> int:
    """An errno as the arch numbers it (MIPS's own: LinuxAbi.errnos)."""
    syscalls = kpsdk.get_registry().arch(arch).syscalls
    assert syscalls is not None and syscalls.linux is not None
    return dict(syscalls.linux.errnos).get(number, number)


def acct(arch: str) -> tuple[int, str]:
    """A call the Linux layer does not emulate (process accounting): its number on ``arch``, from the
    kernel's table, and its name there."""
    syscalls = kpsdk.get_registry().arch(arch).syscalls
    assert syscalls is not None
    return syscalls.calls["acct"], "acct"


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_an_unemulated_call_is_recorded_by_its_real_name(build: Callable[[str], Path], sysroot: Path,
                                                          arch: str) -> None:
    """The arch's whole table names every number: acct is not ``syscall_163``."""
    nr, name = acct(arch)
    out, status, s = under_kpsdk(build(arch), ["/data.txt", "1", str(nr)], {}, b"", sysroot)
    assert f"syscall {nr} -> -1 errno={arch_errno(arch, errno.ENOSYS)}" in out and status == 42
    assert s.syscalls_unimplemented == {name: 1}


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_a_grown_file_mapping_holds_the_files_next_bytes(build: Callable[[str], Path], sysroot: Path,
                                                           arch: str) -> None:
    """``mremap`` growing a private file mapping, in place and by moving it: the new pages hold
    the file's next bytes (then zeros past its end) and ``/proc/self/maps`` names them after
    the file, as under qemu-user (which runs Linux's own mremap).  They were zeros before."""
    exe = build(arch)
    (sysroot / "big.bin").write_bytes(bytes((i * 7 + i // 251) & 0xFF for i in range(10000)))
    args = ["/big.bin", "1", "mremap"]
    expected = under_qemu(arch, exe, args, {}, b"", sysroot)
    out, status, s = under_kpsdk(exe, args, {}, b"", sysroot)
    assert (out, status) == expected
    assert "grown: the file's bytes 1, zeros after them 1, byte 4096 " in out
    assert "grown: big.bin\nmoved: moved 1\nmoved: the file's bytes 1, zeros after them 1" in out
    assert "moved: big.bin\npart: moved 1\npart: the file's bytes 1, zeros after them 1" in out
    assert out.endswith("part: big.bin\n")
    assert s.syscalls_unimplemented == {}


@pytest.mark.parametrize("mode", ["sockets", "proc", "statfs"])
@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_sockets_and_own_proc_match_qemu_user(build: Callable[[str], Path], sysroot: Path, arch: str,
                                              mode: str) -> None:
    """``sockets``: getpeername/getsockname/getsockopt of stdin, stdout, stderr are ENOTSOCK and
    of a closed descriptor EBADF (i386 and ppc64 through socketcall); ``proc``: the program's
    own /proc/self (its cmdline, the maps lines holding its stack and its data, the link
    /proc/self), as qemu-user shows them, with a sysroot that has no /proc at all; ``statfs``:
    the sysroot's file system (statfs, or statfs64 with its size on i386, arm and ppc64)."""
    exe = build(arch)
    args, env = ["/data.txt", "1", mode], {"GREETING": mode}
    expected = under_qemu(arch, exe, args, env, b"", sysroot)
    out, status, s = under_kpsdk(exe, args, env, b"", sysroot)
    assert (out, status) == expected
    assert {"sockets": "getpeername(99) -> -1 errno=9", "statfs": "statfs / -> 0 type=",
            "proc": "environ from /proc/self as cwd: GREETING=proc;\nthen .. is /proc\n"}[mode] in out
    if mode == "proc":
        assert f"readlink /proc/self/ -> -1 errno={errno.EINVAL}; lstat: a directory 1" in out
        assert f"readlink /proc/self/exe/ -> -1 errno={errno.ENOTDIR}" in out and ": the sysroot's file\n" in out
    assert s.syscalls_unimplemented == {}


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_sysinfo_is_the_machines_memory_and_one_process(build: Callable[[str], Path], sysroot: Path,
                                                        arch: str) -> None:
    """sysinfo(2): the host's memory (on 32-bit arches in pages, mem_unit 4096, where the bytes
    do not fit a word: Linux's rule), the one process kpsdk runs, an uptime."""
    out, status, s = under_kpsdk(build(arch), ["/data.txt", "1", "sysinfo"], {}, b"", sysroot)
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert f"sysinfo -> 0 totalram={total} freeram<=totalram=1 procs=1 uptime>0=1\n" in out, out
    assert status == 42 and s.syscalls_unimplemented == {}


@pytest.mark.parametrize("arch", ["x86_64", "riscv64"])
def test_a_trace_names_the_pid_the_program_is_told(build: Callable[[str], Path], sysroot: Path, arch: str) -> None:
    """The trace prefix's task is the process the program says it is: its getpid() and
    gettid(), as ftrace and the program agree on a real system (and ``--pid`` still wins)."""
    for chosen in (None, 85):
        s = kpsdk.open(f"elf:{build(arch)}", args=["/data.txt", "1", "pid"], sysroot=sysroot)
        records: list[Any] = []
        s.trace("p:m main", sink=records, pid=chosen)
        assert s.run(timeout=60) == 42
        told = next(line.split() for line in s.console.splitlines() if line.startswith("pid "))
        assert told[1] == told[3], told  # one thread: its tid is the pid
        assert [r.pid for r in records] == [chosen if chosen is not None else int(told[1])]
        s.close()


#: applets of Debian's busybox-static run on every arch Debian builds it for (its own binary,
#: not one built here): the shell, text tools, checksums, compression, its own /proc/self
DEBIAN_BUSYBOX_APPLETS = [["sh", "-c", "echo $((6*7)); for i in 1 2 3; do echo $i; done"], ["sort", "-r"], ["wc"],
                          ["sed", "s/o/0/g"], ["awk", "{n+=NF} END {print n}"], ["od", "-c"], ["uniq", "-c"],
                          ["sha256sum"], ["gzip", "-c"], ["cat", "/proc/self/cmdline"], ["ls", "-l", "etc"],
                          ["ls", "-la", "etc/sub"],
                          ["cat", "etc/passwd/"]]


@pytest.mark.parametrize("arch", DEBIAN_ARCHS)
def test_debians_busybox_of_each_arch_matches_qemu_user(arch: str, tmp_path: Path) -> None:
    """Debian's own busybox-static for i386, armhf, riscv64 (Debian 13's) and ppc64el, fetched as
    the kernel tests fetch it: each applet's bytes and status as under qemu-user, with the
    same input, in the same tree, nothing left unemulated."""
    from kpsdk.errors import TargetError
    from kpsdk.fixtures import kernel

    try:
        busybox = kernel.fetch_busybox(arch)
    except TargetError as e:
        if os.environ.get("CI"):
            pytest.fail(f"cannot fetch Debian's {arch} busybox-static: {e}")
        pytest.skip(f"cannot fetch Debian's {arch} busybox-static: {e}")
    root = make_tree(tmp_path / "tree")
    stdin = b"one two\nthree\nfour five six\nsix\nsix\n"
    for argv in DEBIAN_BUSYBOX_APPLETS:
        qemu = require_tool(QEMU[arch], "qemu-user")
        expected = subprocess.run([qemu, str(busybox), *argv], input=stdin, capture_output=True, env={},
                                  timeout=60, check=False, cwd=root)  # ls's relative path: the tree's etc
        s = kpsdk.open(f"elf:{busybox}", args=argv, stdin=stdin, sysroot=str(root))
        try:
            status = s.run(timeout=60)
            assert (s.console_bytes, status) == (expected.stdout + expected.stderr, expected.returncode), argv
            assert s.syscalls_unimplemented == {}, argv
        finally:
            s.close()


def test_own_proc_is_the_program_not_kpsdks_process(tmp_path: Path) -> None:
    """With the host's root as the sysroot, /proc/self is still the program: its environment,
    not the Python process running kpsdk; a /proc/self file kpsdk does not make is ENOENT and
    said so, never the host process's."""
    if not BUSYBOX.exists():
        message = f"{BUSYBOX} not found: install the Debian package busybox-static"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    out, status, s = under_kpsdk(BUSYBOX, ["cat", "/proc/self/environ", "/proc/self/limits"],
                                 {"ONLY": "this"}, b"", Path("/"))
    assert out == "ONLY=this\0cat: can't open '/proc/self/limits': No such file or directory\n"
    assert status == 1
    assert s.syscalls_unimplemented == {"open /proc/self/limits": 1}
    # /dev/stdin is a link to /proc/self/fd/0: the program's own standard input, not kpsdk's; and
    # /dev/stderr, /dev/stdout lead to its console, also for writing
    out, status, s = under_kpsdk(BUSYBOX, ["cat", "/dev/stdin"], {}, b"piped in\n", Path("/"))
    assert (out, status, s.syscalls_unimplemented) == ("piped in\n", 0, {})
    out, status, s = under_kpsdk(BUSYBOX, ["sh", "-c", "echo to-err >/dev/stderr; echo to-out >>/dev/stdout"], {}, b"",
                                 Path("/"))
    assert (out, status, s.syscalls_unimplemented) == ("to-err\nto-out\n", 0, {})
    # /proc/thread-self/... is /proc/PID/task/PID/...: the one thread's, the process's
    out, status, s = under_kpsdk(BUSYBOX, ["cat", "/proc/thread-self/cmdline"], {}, b"", Path("/"))
    assert (out, status, s.syscalls_unimplemented) == (f"{BUSYBOX}\0cat\0/proc/thread-self/cmdline\0", 0, {})


def test_debians_bash_runs_a_command_as_natively(tmp_path: Path) -> None:
    """Debian's /bin/bash -c: it asks getpeername(0) at start-up and, on any answer but
    ENOTSOCK, takes its input for a network connection and runs ~/.bashrc, whose command
    substitutions start processes; so the answer decides whether it runs here at all."""
    bash = Path("/bin/bash")
    if os.uname().machine != "x86_64" or not bash.exists():
        pytest.skip("this compares the x86_64 host's own /bin/bash")
    script = 'echo "$0 $# $1" $((6 * 7)); while read -r line; do echo "read: $line"; done'
    args = ["-c", script, "kp", "one"]
    native = subprocess.run([str(bash), *args], input=b"a\nb\n", capture_output=True, timeout=60, check=False,
                            env={"LC_ALL": "C"})
    out, status, s = under_kpsdk(bash, args, {"LC_ALL": "C"}, b"a\nb\n", Path("/"))
    assert (out, status) == (native.stdout.decode(), native.returncode)
    assert out == "kp 1 one 42\nread: a\nread: b\n"


#: Debian's own programs, each with what it needs of the layer: find goes back to where it started
#: with fchdir; gzip writes binary output (console_bytes); sort and gzip advise on their input
#: (fadvise64: no warning for it); python3 imports a C extension (json's, dlopen'ed)
DEBIAN_PROGRAMS = {
    "find": ["/usr/bin/find", "etc", "-name", "*.txt"],
    "gzip": ["/usr/bin/gzip", "-n", "-c", "etc/sub/deep.txt"],
    "sort": ["/usr/bin/sort", "-r", "etc/passwd"],
    "sed": ["/usr/bin/sed", "-n", "s/:x:/ /p", "etc/passwd"],
    # grep's stack-overflow guard finds its stack in /proc/self/maps (glibc's pthread_getattr_np)
    "grep": ["/usr/bin/grep", "-n", "kp", "etc/passwd"],
    "python3": ["/usr/bin/python3", "-c", "import _json, json, os; print(json.dumps(sorted(os.listdir('etc'))))"],
    # a path relative to a directory descriptor opened before a chdir: the directory, not the new cwd
    "python3-dirfd": ["/usr/bin/python3", "-c", "import os; d = os.open('etc/sub', os.O_RDONLY); os.chdir('/'); "
                      "print(len(open('deep.txt', opener=lambda p, f: os.open(p, f, dir_fd=d)).read()))"],
    # compressors and checksums: long runs of guest stores to a few pages (Unicorn's store fast path,
    # kpsdk.targets.unicorn.tlb), binary output
    "xz": ["/usr/bin/xz", "-T1", "-c", "etc/passwd"],  # one thread: a newer xz starts some
    "bzip2": ["/usr/bin/bzip2", "-c", "etc/passwd"],
    "sha512sum": ["/usr/bin/sha512sum", "etc/passwd", "etc/sub/deep.txt"],
    "od": ["/usr/bin/od", "-An", "-tx1", "etc/group"],
    "factor": ["/usr/bin/factor", "600851475143", "18446744073709551557"],
    "awk": ["/usr/bin/awk", "-F:", "{ n += length($0); print NR, $1 } END { print n }", "etc/passwd"],
    "perl": ["/usr/bin/perl", "-ne", "s/(\\w+)/\\U$1/; print if /:x:/", "etc/passwd"],
}


#: the Debian package of each of those programs that a minimal system may lack (.ci/run installs them)
DEBIAN_PROGRAM_PACKAGES = {"/usr/bin/python3": "python3", "/usr/bin/xz": "xz-utils", "/usr/bin/bzip2": "bzip2"}


@pytest.mark.parametrize("program", DEBIAN_PROGRAMS)
def test_debians_programs_give_the_bytes_of_a_native_run(program: str, tmp_path: Path) -> None:
    argv = DEBIAN_PROGRAMS[program]
    if os.uname().machine != "x86_64":
        pytest.skip(f"this compares the x86_64 host's own {argv[0]}")
    if not Path(argv[0]).exists():
        message = f"{argv[0]} not found: install the Debian package {DEBIAN_PROGRAM_PACKAGES.get(argv[0], program)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = make_tree(tmp_path / "tree")
    native = subprocess.run(argv, capture_output=True, timeout=60, check=False, cwd=root, env={"LC_ALL": "C"})
    s = kpsdk.open(f"elf:{argv[0]}", args=argv[1:], env={"LC_ALL": "C"}, sysroot="/", cwd=str(root))
    try:
        status = s.run(timeout=60)
        assert (s.console_bytes, status) == (native.stdout + native.stderr, native.returncode)
        assert native.stdout and not {"fchdir", "fadvise64"} & set(s.syscalls_unimplemented)
    finally:
        s.close()


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_a_forked_child_runs_on_as_under_qemu(build: Callable[[str], Path], sysroot: Path, arch: str) -> None:
    """fork() gives a second process that runs the rest of main() too: both write the same
    lines after the fork (their order is the schedulers', so the lines are compared sorted)."""
    exe = build(arch)
    args = ["/data.txt", "1", "fork"]
    s = kpsdk.open(f"elf:{exe}", args=args, sysroot=sysroot)
    status = s.run(timeout=120)
    expected, qemu_status = under_qemu(arch, exe, args, {}, b"", sysroot)
    assert sorted(s.console.splitlines()) == sorted(expected.splitlines())
    assert s.console.count("fork -> 1") == 2 and status == qemu_status


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_kprobe_on_malloc_sees_the_programs_sizes_in_order(build: Callable[[str], Path], sysroot: Path,
                                                          arch: str) -> None:
    exe = build(arch)
    s = kpsdk.open(f"elf:{exe}", args=["/data.txt", "5"], sysroot=sysroot)
    sizes: list[int] = []
    s.register_kprobe(kpsdk.Kprobe(symbol_name="malloc",
                                   pre_handler=lambda p, regs: sizes.append(regs.arg(0)) or 0))
    assert s.run(timeout=60) == 42
    printed = [int(line.split()[1]) for line in s.console.splitlines() if line.startswith("malloc ")]
    assert len(printed) == 5
    # the program's own mallocs, in the order it printed them, among libc's own (stdio buffers)
    mine = [size for size in sizes if size in printed]
    assert mine == printed
    assert len(sizes) > len(printed)  # stdio's buffers and the FILE of fopen are malloc'd too


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_call_strlen_resolves_the_ifunc(build: Callable[[str], Path], arch: str) -> None:
    s = kpsdk.open(f"elf:{build(arch)}")
    greeting = s.symbols.resolve("greeting")
    assert s.call("strlen", greeting) == len("hello, world")
    s.write_memory(greeting, b"kprobes outside the kernel\0")
    assert s.call("strlen", greeting) == len("kprobes outside the kernel")


APPLETS = {
    "echo": (["echo", "hi", "there"], b""),
    "sort": (["sort"], b"".join(b"%d\n" % ((i * 7919) % 1000) for i in range(1000))),
    "wc": (["wc"], b"one two\nthree\n\nfour five six\n"),
    "sh": (["sh", "-c", "echo $((6*7))"], b""),
    "sh-exit": (["sh", "-c", "echo out; exit 7"], b""),
}


@pytest.mark.parametrize("applet", APPLETS)
def test_busybox_matches_qemu_user(applet: str) -> None:
    if not BUSYBOX.exists():
        message = f"{BUSYBOX} not found: install the Debian package busybox-static"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    args, stdin = APPLETS[applet]
    expected = under_qemu("x86_64", BUSYBOX, args, {}, stdin)
    out, status, s = under_kpsdk(BUSYBOX, args, {}, stdin)
    assert (out, status) == expected
    assert out  # every applet here prints something


#: directory-reading applets, run in a small tree with its own passwd and group (qemu-user's
#: ``-L`` would otherwise fall back to the host's, the sysroot never does)
DIRECTORY_APPLETS = {
    "ls": ["ls", "/etc"],
    "ls-l": ["ls", "-l", "/etc"],
    # not -a on the sysroot's top: its link count holds kpsdk's /tmp, /dev and /proc, which this tree lacks
    "ls-la": ["ls", "-la", "/etc/sub"],
    "find": ["find", "/etc"],
    "ls-missing": ["ls", "/nonexistent"],
    "ls-file": ["ls", "-l", "/etc/passwd"],
    "cat": ["cat", "/etc/passwd", "/etc/sub/deep.txt"],  # sendfile
}


def make_tree(root: Path) -> Path:
    (root / "etc" / "sub").mkdir(parents=True)
    me = f"kp:x:{os.getuid()}:{os.getgid()}::/:/bin/sh\n"
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n" + me)
    (root / "etc" / "group").write_text("root:x:0:\n")
    (root / "etc" / "sub" / "deep.txt").write_text("x" * 100)
    (root / "etc" / "link").symlink_to("passwd")
    os.mkfifo(root / "etc" / "fifo")
    return root


@pytest.mark.parametrize("applet", DIRECTORY_APPLETS)
def test_busybox_reads_directories_as_qemu_user_does(applet: str, tmp_path: Path) -> None:
    """getdents64: ``ls`` (short and long form, with types, links and owners), ``find`` (in
    kpsdk's order: by name) and the errors for a missing path and a file print what they print
    under qemu-x86_64."""
    if not BUSYBOX.exists():
        message = f"{BUSYBOX} not found: install the Debian package busybox-static"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = make_tree(tmp_path / "root")
    args = DIRECTORY_APPLETS[applet]
    expected = under_qemu("x86_64", BUSYBOX, args, {}, b"", root, stderr_too=True)
    out, status, s = under_kpsdk(BUSYBOX, args, {}, b"", root)
    if applet == "find":  # find prints in the directory's order: kpsdk's is by name, the host's its own
        assert (sorted(out.splitlines()), status) == (sorted(expected[0].splitlines()), expected[1])
        assert out.splitlines() == ["/etc", "/etc/fifo", "/etc/group", "/etc/link", "/etc/passwd", "/etc/sub",
                                    "/etc/sub/deep.txt"]
    else:
        assert (out, status) == expected
    assert not s.syscalls_unimplemented


# -- the sysroot: a guest never escapes it ----------------------------------------------------------


def test_paths_resolve_inside_the_sysroot(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "motd").write_text("inside")
    (tmp_path / "secret").write_text("outside")
    (root / "abs").symlink_to("/etc/motd")  # absolute: starts again at the sysroot
    (root / "up").symlink_to("../../../../secret")  # climbs no higher than the sysroot
    (root / "loop").symlink_to("loop")
    sr = Sysroot(root)
    real = Path(os.path.realpath(root))
    assert sr.resolve("/abs", "/") == real / "etc" / "motd"
    assert sr.resolve("../../etc/motd", "/etc") == real / "etc" / "motd"
    assert sr.resolve("/etc/", "/") == sr.resolve("/etc/.", "/") == real / "etc"
    for path, code in (("/up", errno.ENOENT), ("/../secret", errno.ENOENT), ("/loop", errno.ELOOP),
                       ("/etc/motd/x", errno.ENOTDIR), ("", errno.ENOENT),
                       ("/etc/motd/", errno.ENOTDIR), ("/abs/", errno.ENOTDIR)):  # a trailing / names a directory
        with pytest.raises(_GuestErrno) as info:
            sr.resolve(path, "/")
        assert info.value.errno == code, path
    assert sr.walk("/abs", "/") == ["etc", "motd"]  # where the walk ended: what /proc/self/maps and paths use
    with pytest.raises(_GuestErrno) as info:
        Sysroot(None).resolve("/etc/motd", "/")
    assert info.value.errno == errno.ENOENT


def test_a_program_cannot_read_outside_its_sysroot(build: Callable[[str], Path], tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("must not be read\n")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    exe = build("x86_64")
    for path in ("/link.txt", "/../secret.txt", f"/../../..{tmp_path}/secret.txt"):
        out, status, _ = under_kpsdk(exe, [path, "1"], {}, b"", root)
        assert status == 3, path
        assert "must not be read" not in out


# -- the CLI -----------------------------------------------------------------------------------------


def kpsdk_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kpsdk.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_cli_probe_runs_a_program_with_its_arguments_input_and_sysroot(build: Callable[[str], Path],
                                                                       sysroot: Path, tmp_path: Path) -> None:
    exe = build("arm")
    stdin = tmp_path / "input.txt"
    stdin.write_bytes(b"a\nbb\nccc\n")
    expected, status = under_qemu("arm", exe, ["/data.txt", "2"], {}, stdin.read_bytes(), sysroot)
    proc = kpsdk_cli("probe", str(exe), "--arg", "/data.txt", "--arg", "2", "--stdin", str(stdin),
                     "--sysroot", str(sysroot), "--kprobe", "main", "--regs", "arg1")
    assert proc.returncode == 0, proc.stderr
    assert "[1] main+0x0" in proc.stdout and "arg1=0x3" in proc.stdout  # argc: the path and two arguments
    assert expected in proc.stdout
    assert f"exit status {status}" in proc.stdout
    assert "warning" not in proc.stderr


def test_cli_warns_once_of_unimplemented_calls(build: Callable[[str], Path], sysroot: Path) -> None:
    proc = kpsdk_cli("probe", str(build("x86_64")), "--arg", "/data.txt", "--arg", "1", "--arg", "500",
                     "--sysroot", str(sysroot), "--kprobe", "main")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: the program asked for what kpsdk does not emulate (a system call answered "
                        "-ENOSYS, a /proc/self file ENOENT): syscall_500 (1x)"]


def test_cli_warns_of_an_unemulated_call_by_its_name_and_straces_it(build: Callable[[str], Path],
                                                                     sysroot: Path) -> None:
    proc = kpsdk_cli("probe", str(build("arm")), "--arg", "/data.txt", "--arg", "1", "--arg", "51",
                     "--sysroot", str(sysroot), "--strace")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: the program asked for what kpsdk does not emulate (a system call answered "
                        "-ENOSYS, a /proc/self file ENOENT): acct (1x)"]
    assert re.search(r"^acct\((0x[0-9a-f]+, ){5}0x[0-9a-f]+\) += -1 ENOSYS \(Function not implemented\)$",
                     proc.stderr, re.M), proc.stderr


def test_cli_sysroot_goes_with_a_program_only(sysroot: Path) -> None:
    """--sysroot is for a program (an ELF in Unicorn, qemu-user's -L), never a kernel target."""
    proc = kpsdk_cli("probe", "--target", "qemu-system:x86_64", "--kernel", "vmlinuz", "--sysroot", str(sysroot),
                     "--kprobe", "do_sys_openat2")
    assert proc.returncode == 2
    assert "--sysroot goes with" in proc.stderr


# -- dynamically linked programs: the sysroot's ld.so maps libc ----------------------------------------

#: the sysroot each architecture's dynamic program runs in (x86_64: the host's own, given explicitly),
#: and a text file in it to read
DYNAMIC = {
    "x86_64": ("/", "/usr/include/stdio.h"),
    "i386": ("/usr/i686-linux-gnu", "/include/stdio.h"),
    "arm": ("/usr/arm-linux-gnueabihf", "/include/stdio.h"),
    "riscv64": ("/usr/riscv64-linux-gnu", "/include/stdio.h"),
    "ppc64": ("/usr/powerpc64-linux-gnu", "/include/stdio.h"),
    "ppc64le": ("/usr/powerpc64le-linux-gnu", "/include/stdio.h"),
}


@pytest.fixture(scope="module")
def build_dynamic(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build_dynamic(arch)``: linuxprog.c, dynamically linked (the compiler's default)."""
    out = tmp_path_factory.mktemp("linuxprog-dyn")

    def make(arch: str) -> Path:
        cc, package = COMPILERS[arch]
        require_tool(cc, package)
        exe = out / f"linuxprog-{arch}"
        if not exe.exists():
            subprocess.run([cc, "-O1", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
        return exe

    return make


def interpreter_of(exe: Path) -> Path:
    """The program's PT_INTERP, read with pyelftools directly (ld-linux-*.so.*, ppc64's ld64.so.1)."""
    with open(exe, "rb") as f:
        interp = next(seg for seg in ELFFile(f).iter_segments() if seg["p_type"] == "PT_INTERP")
        return Path(interp.get_interp_name())


@pytest.mark.parametrize("arch", sorted(DYNAMIC))
def test_dynamic_program_matches_qemu_user(build_dynamic: Callable[[str], Path], arch: str) -> None:
    exe = build_dynamic(arch)
    root, text = DYNAMIC[arch]
    args, env, stdin = [text, "3"], {"GREETING": "dynamic"}, b"in\nput\n"
    expected = under_qemu(arch, exe, args, env, stdin, Path(root) if root != "/" else None)
    seen: list[tuple[str, int]] = []

    class Listener:
        @kpsdk.hookimpl
        def kpsdk_library_loaded(self, session: kpsdk.Session, library: Any) -> None:
            seen.append((library.path.name, library.bias))

    listener = Listener()
    kpsdk.get_registry().pm.register(listener)
    try:
        out, status, s = under_kpsdk(exe, args, env, stdin, Path(root))
    finally:
        kpsdk.get_registry().pm.unregister(listener)
    assert (out, status) == expected
    assert status == 42 and out.count("file: ") > 100  # it read the whole header
    names = [name for name, _ in seen]
    assert names[0] == exe.name and names[1] == interpreter_of(exe).name and "libc.so.6" in names
    assert all(bias % 0x1000 == 0 for _, bias in seen)
    assert s.syscalls_unimplemented == {}


def test_dynamic_program_without_its_loader_is_refused(build_dynamic: Callable[[str], Path], tmp_path: Path) -> None:
    exe = build_dynamic("arm")
    with pytest.raises(kpsdk.TargetError, match="ld-linux-armhf.so.3 is not in the sysroot"):
        kpsdk.open(f"elf:{exe}", sysroot=tmp_path)


def test_debians_own_ls_long_listing_equals_a_native_run(tmp_path: Path) -> None:
    """GNU ls (dynamic, stripped; Debian's) with -l: ld.so and its libraries from "/", the
    directory read with getdents64, owners from /etc/passwd, ACLs asked with lgetxattr, the
    times and sizes with statx: the same lines as /bin/ls run natively."""
    ls = Path("/bin/ls")
    if os.uname().machine != "x86_64" or not ls.exists():
        pytest.skip("this compares the x86_64 host's own /bin/ls")
    root = make_tree(tmp_path / "tree")
    args = ["-la", "--time-style=full-iso", str(root / "etc"), str(root / "etc" / "sub")]
    native = subprocess.run([str(ls), *args], capture_output=True, text=True, timeout=60, check=False,
                            env={"LC_ALL": "C"})
    out, status, s = under_kpsdk(ls, args, {"LC_ALL": "C"}, b"", Path("/"))
    assert (out, status) == (native.stdout, native.returncode)
    assert not {"getxattr", "lgetxattr", "getdents64"} & set(s.syscalls_unimplemented)
