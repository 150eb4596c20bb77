"""Debian's own dynamically linked programs, with Debian's own libc, on the embedded default.

For each foreign architecture Debian builds for (armhf, i386, ppc64el, arm64, mipsel and
mips64el from Debian 12, riscv64 from Debian 13), a sysroot is made of Debian's packages,
fetched through kpsdk's private apt configuration (:mod:`kpsdk.debian`) and unpacked, never installed:
``libc6``, ``coreutils`` and the libraries coreutils links, gzip, bzip2, xz, perl, sed,
grep and mawk.  Each program runs twice, in
Unicorn under kpsdk (``elf:PROG`` with that sysroot) and under qemu-user (``-L SYSROOT``,
which runs Linux's own system calls), and the bytes they print and their exit status must
be the same.  Nothing here was built by kpsdk: the loader, libc, libgmp, libcrypto and the
programs are Debian's.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.errors import TargetError
from tests import debian_roots
from tests.conftest import DEBIAN_ARCHS, REGISTERED_ARCHS, require_tool
from tests.debian_roots import merge_usr_and_relink

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
#: (arch family, program) -> why it cannot run on Unicorn: MIPS's hash loops are straight-line
#: runs of ~190 instructions, past what Unicorn 2.1.4's MIPS translator survives (a TCG temp
#: leaked per instruction: test_mips.py's test_unicorns_mips_translator_runs_out_of_temps_on_long_blocks);
#: the process would die, so they are not run (qemu-user runs them: kpsdk's qemu-user target)
UNICORN_CANNOT = {("mips", "md5sum"): "Unicorn 2.1.4's MIPS translator dies on md5's unrolled rounds",
                  ("mips", "sha512sum"): "Unicorn 2.1.4's MIPS translator dies on sha512's unrolled rounds"}


def _finish(root: Path) -> None:
    """The sysroot as dpkg would have left it (:func:`tests.debian_roots.merge_usr_and_relink`),
    and the programs' input."""
    merge_usr_and_relink(root)
    (root / "work").mkdir()
    (root / "work" / "in.txt").write_bytes(INPUT)


#: part of each sysroot's name: a change to how one is made (:func:`_finish`) makes new ones
LAYOUT = 1


def build_userland(debian_arch: str, suite: str) -> Path:
    """The sysroot of ``debian_arch``: :data:`PACKAGES` of its suite and :data:`MORE_PACKAGES`,
    made once per set of package versions in kpsdk's cache (:func:`tests.debian_roots.build`)."""
    return debian_roots.build(debian_arch, suite, PACKAGES[suite] + MORE_PACKAGES, f"v{LAYOUT}", _finish)


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
    why = UNICORN_CANNOT.get((arch[:4], program))
    if why is not None:
        pytest.skip(why)
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
