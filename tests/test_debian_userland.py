"""Debian's own dynamically linked programs, with Debian's own libc, on the embedded default.

For each foreign architecture Debian builds for (armhf, i386 and ppc64el from Debian 12,
riscv64 from Debian 13), a sysroot is made of Debian's packages, fetched through kpsdk's
private apt configuration (:mod:`kpsdk.debian`) and unpacked, never installed:
``libc6``, ``coreutils`` and the libraries coreutils links, gzip, bzip2, xz, perl, sed,
grep and mawk.  Each program runs twice, in
Unicorn under kpsdk (``elf:PROG`` with that sysroot) and under qemu-user (``-L SYSROOT``,
which runs Linux's own system calls), and the bytes they print and their exit status must
be the same.  Nothing here was built by kpsdk: the loader, libc, libgmp, libcrypto and the
programs are Debian's.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.arch import DebianPort
from kpsdk.cache import cache_root
from kpsdk.errors import TargetError
from tests.conftest import DEBIAN_ARCHS, REGISTERED_ARCHS, require_tool

#: kpsdk's arch -> Debian's architecture, the suite that has it, the qemu-user binary (every arch
#: Debian builds a port of besides the host's: Arch.debian)
PORTS = {a.name: (a.debian.arch, a.debian.suite, a.qemu_user)
         for a in REGISTERED_ARCHS if a.name in DEBIAN_ARCHS and a.debian is not None}
#: what coreutils needs, per suite (Debian 13 renamed libssl3 for its 64-bit time_t; its libcrypto
#: links zlib and zstd, its ls libcap)
PACKAGES = {
    "bookworm": ("libc6", "coreutils", "libacl1", "libattr1", "libselinux1", "libpcre2-8-0", "libgmp10", "libssl3"),
    "trixie": ("libc6", "coreutils", "libacl1", "libattr1", "libselinux1", "libpcre2-8-0", "libgmp10",
               "libssl3t64", "zlib1g", "libzstd1", "libcap2"),
}
#: and the other programs, in both suites: compressors, perl, sed, grep, awk
MORE_PACKAGES = ("gzip", "bzip2", "libbz2-1.0", "xz-utils", "liblzma5", "perl-base", "libcrypt1", "sed", "grep",
                 "mawk")
INPUT = b"banana\napple\ncherry\napple\n42\n7\n"
#: the programs and their arguments: sorting, hashing (libcrypto), big numbers (libgmp), number
#: and date formatting, directory listing with owners from the sysroot's /etc/passwd
PROGRAMS = {
    "sort": ["/usr/bin/sort", "work/in.txt"],
    "sort-u-r": ["/usr/bin/sort", "-u", "-r", "work/in.txt"],
    "uniq": ["/usr/bin/uniq", "-c", "work/in.txt"],
    "wc": ["/usr/bin/wc", "work/in.txt"],
    "md5sum": ["/usr/bin/md5sum", "work/in.txt"],
    "sha512sum": ["/usr/bin/sha512sum", "work/in.txt"],
    "base64": ["/usr/bin/base64", "work/in.txt"],
    "od": ["/usr/bin/od", "-An", "-tx1", "work/in.txt"],
    "factor": ["/usr/bin/factor", "1234567", "600851475143", "18446744073709551557"],
    "seq": ["/usr/bin/seq", "1", "3", "20"],
    "ls": ["/bin/ls", "-l", "--time-style=+%Y", "work"],
    "printf": ["/usr/bin/printf", "%05d|%x|%s\\n", "42", "255", "hi"],
    "tac": ["/usr/bin/tac", "work/in.txt"],
    "stat": ["/usr/bin/stat", "-c", "%s %n", "work/in.txt"],
    "numfmt": ["/usr/bin/numfmt", "--to=iec", "123456789"],
    "date": ["/bin/date", "-u", "-d", "@1700000000"],
    "missing-file": ["/bin/cat", "work/nothing.txt"],
    # Thumb-2 code with IT blocks on armhf: a TLB miss inside one corrupted bzip2's stream and
    # stopped xz at an invalid instruction while kpsdk filled Unicorn's TLB on ARM (tests/test_uctlb.py)
    "gzip": ["/bin/gzip", "-c", "-n", "-9", "work/in.txt"],
    "bzip2": ["/bin/bzip2", "-c", "work/in.txt"],
    "xz": ["/usr/bin/xz", "-T1", "-c", "work/in.txt"],  # one thread: kpsdk runs no threads (xz 5.8 starts some)
    "perl": ["/usr/bin/perl", "-e", "my %h = (a => 1, b => 2); print join(',', map { $_ * $_ } 1..10), ' ', "
             "join('|', sort keys %h), ' ', sprintf('%.3f', atan2(1, 1) * 4), qq(\\n)"],
    "sed": ["/bin/sed", "-n", "s/a/A/gp", "work/in.txt"],
    "grep": ["/bin/grep", "-c", "-E", "^(a|b)", "work/in.txt"],
    "awk": ["/usr/bin/mawk", "-F", "a", "{ n += NF } END { print n, NR }", "work/in.txt"],
}


#: calls a program makes that kpsdk answers ENOSYS (and records), after which it does what it does
#: on a kernel without them: the same bytes as under qemu-user
UNIMPLEMENTED_BUT_HANDLED = {"ls": {"socket"}, "xz": {"landlock_create_ruleset"}}


def _finish(root: Path) -> None:
    """What dpkg and base-files would have done: Debian 13's merged /usr links (``/lib`` is
    ``usr/lib``), absolute links made relative (qemu's ``-L`` does not follow an absolute link
    inside its prefix; kpsdk does), and the files the programs read."""
    for top in ("bin", "sbin", "lib", "lib64"):
        if not os.path.lexists(root / top) and (root / "usr" / top).is_dir():
            os.symlink(f"usr/{top}", root / top)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            link = Path(dirpath) / name
            if link.is_symlink() and os.readlink(link).startswith("/"):
                target = root / os.readlink(link).lstrip("/")
                link.unlink()
                link.symlink_to(os.path.relpath(target, link.parent))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
    (root / "work").mkdir()
    (root / "work" / "in.txt").write_bytes(INPUT)


#: part of each sysroot's name: a change to how one is made (:func:`_finish`) makes new ones
LAYOUT = 1
#: a sysroot of older package versions is removed once it is this old (seconds): a test run
#: started before Debian's update may still be using it
STALE_AFTER = 3600


def build_userland(debian_arch: str, suite: str) -> Path:
    """The sysroot of ``debian_arch``, made once per set of package versions in kpsdk's cache.

    One builder at a time (a lock file: pytest-xdist workers, two test runs, and the private
    apt configuration's package lists are shared).  Offline, the last sysroot made is used."""
    from kpsdk.debian import PrivateApt

    home = cache_root() / "userland"
    home.mkdir(parents=True, exist_ok=True)
    prefix = f"{suite}-{debian_arch}-v{LAYOUT}-"
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        apt = PrivateApt(DebianPort(debian_arch, suite, "coreutils"))
        try:
            pkgs = [apt.show(name) for name in PACKAGES[suite] + MORE_PACKAGES]
        except TargetError:
            made = sorted(home.glob(f"{prefix}*/.complete"), key=lambda p: p.stat().st_mtime)
            if made:
                return made[-1].parent
            raise
        key = hashlib.sha256(" ".join(f"{p.name}={p.version}" for p in pkgs).encode()).hexdigest()[:16]
        dest = home / f"{prefix}{key}"
        if (dest / ".complete").exists():
            return dest
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            root = Path(tmp) / "root"
            root.mkdir()
            for pkg in pkgs:
                deb = apt.download(pkg, Path(tmp))
                subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True)
            _finish(root)
            (root / ".complete").touch()
            if dest.exists():  # an unfinished one (a build killed before its rename): made again
                shutil.rmtree(dest)
            root.rename(dest)
        for old in home.glob(f"{prefix}*"):
            if old != dest and time.time() - old.stat().st_mtime > STALE_AFTER:
                shutil.rmtree(old, ignore_errors=True)
        return dest


@pytest.fixture(scope="module")
def userland() -> Callable[[str], Path]:
    """``userland(arch)``: the Debian sysroot of kpsdk's ``arch`` (fetched once: ~11 MB an arch).
    Skips locally, fails on CI, when Debian's registry cannot be reached."""
    require_tool("dpkg-deb", "dpkg")
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            debian_arch, suite, _ = PORTS[arch]
            try:
                made[arch] = build_userland(debian_arch, suite)
            except TargetError as e:
                message = f"cannot fetch Debian's {debian_arch} packages: {e}"
                if os.environ.get("CI"):
                    pytest.fail(message)
                pytest.skip(message)
        return made[arch]

    return get


@pytest.mark.parametrize("program", PROGRAMS)
@pytest.mark.parametrize("arch", PORTS)
def test_debians_programs_of_each_arch_match_qemu_user(arch: str, program: str,
                                                      userland: Callable[[str], Path]) -> None:
    qemu = require_tool(PORTS[arch][2], "qemu-user")
    root = userland(arch)
    argv = PROGRAMS[program]
    env = {"LC_ALL": "C"}
    native = subprocess.run([qemu, "-L", str(root), str(root / argv[0].lstrip("/")), *argv[1:]],
                            capture_output=True, cwd=root, env=env, timeout=60, check=False)
    with kpsdk.open(f"elf:{root / argv[0].lstrip('/')}", args=argv[1:], env=env, sysroot=str(root),
                    cwd="/") as s:
        status = s.run(timeout=120)
        assert (s.console_bytes, status) == (native.stdout + native.stderr, native.returncode)
        # ls asks nscd for the owners' names first (a socket kpsdk does not make), then reads
        # the sysroot's /etc/passwd, as glibc does where nscd does not run; Debian 13's xz asks
        # for a Landlock sandbox (landlock_create_ruleset, 444) and runs without one
        assert set(s.syscalls_unimplemented) <= UNIMPLEMENTED_BUT_HANDLED.get(program, set())
    assert native.stdout or native.stderr
    assert (native.returncode != 0) == (program == "missing-file")
