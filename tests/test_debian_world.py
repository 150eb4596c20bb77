"""Debian's own programs of other architectures, in the ways a shell runs them, on the embedded
default and under qemu-user: the bytes written to stdout and to stderr and the exit status must
be the same.

tests/test_debian_userland.py runs one program at a time; here ``bash -c`` starts the others,
so the Linux layer's fork, execve of another Debian program from the sysroot, pipes (more than
a pipe's 64 KiB buffer through them), ``$(...)``, wait4, threads (``sort --parallel=2``,
``xz -T2``), temporary files (sort's, with ``-S 1M``), writes in the session's overlay (tar's
archive, written by gzip, a child of tar started through ``/bin/sh -c``) and floating point
(sqlite3: i386's x87) run for i386, arm (Thumb-2), riscv64, ppc64le and aarch64 with Debian's
libc and loader.  The sysroot of each arch is made of Debian's packages (bash, coreutils, sed,
tar, gzip, findutils, xz-utils, sqlite3 and what they depend on), fetched through kpsdk's
private apt configuration and kept in kpsdk's cache (:mod:`tests.debian_roots`).  On arm, a
child of bash that waits on a full pipe (sort and xz writing to md5sum) is resumed by kpsdk in its
Thumb code: it once went on in ARM state, as the first program's symbols had it at that address.

The ground truth is qemu-user, which runs Linux's own system calls, in that sysroot.  A
``qemu-ARCH -L SYSROOT`` process cannot run the programs bash starts (Linux itself runs the
file ``execve`` names, as the host's program or not at all), so the reference run is made the
way a foreign-architecture chroot is: in a new user and mount namespace (nothing outside it
changes, no privilege is needed), binfmt_misc (its own instance in that namespace, Linux 6.7 and
later) hands every ELF of the arch to qemu-user, and the program runs chrooted in an overlay of
the sysroot (the sysroot itself stays as it was), with the host's libraries qemu-user needs
bound in.
"""

from __future__ import annotations

import io
import os
import random
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.binfmt.elfimage import parse_elf
from kpsdk.errors import TargetError
from tests import debian_roots
from tests.conftest import REGISTERED_ARCHS, require_tool

#: the arches (kpsdk's names) whose Debian programs run here
ARCHS = ("i386", "arm", "riscv64", "ppc64le", "aarch64")
#: kpsdk's arch -> Debian's architecture, the suite that has it, the qemu-user binary, the ELF class
#: and machine number binfmt_misc matches
PORTS = {a.name: (a.debian.arch, a.debian.suite, a.qemu_user, a.elf_class,
                  {"EM_386": 3, "EM_ARM": 40, "EM_PPC64": 21, "EM_AARCH64": 183, "EM_RISCV": 243}[a.elf_machine])
         for a in REGISTERED_ARCHS if a.name in ARCHS and a.debian is not None}
#: what the sysroot is made of, with the packages they depend on (Debian's index says which)
PACKAGES = ("bash", "coreutils", "sed", "tar", "gzip", "findutils", "xz-utils", "sqlite3")
#: part of each sysroot's name: a change to :func:`_finish` or to :data:`PACKAGES`' resolution takes a new one
LAYOUT = "world1"
ENV = {"LC_ALL": "C", "PATH": "/usr/bin:/bin"}


def _finish(root: Path) -> None:
    """As dpkg would have left the sysroot, and ``/bin/sh`` (tar runs its compressor through
    ``sh -c``): bash, as where dash is not installed (dash's own link is made by its
    maintainer script, which does not run here)."""
    debian_roots.merge_usr_and_relink(root)
    if not os.path.lexists(root / "bin" / "sh"):
        os.symlink("bash", root / "bin" / "sh")


@pytest.fixture(scope="module")
def world() -> Callable[[str], Path]:
    """``world(arch)``: the sysroot of kpsdk's ``arch`` (fetched once: ~15 MB of packages an arch).
    Skips locally, fails on CI, when Debian's registry cannot be reached."""
    require_tool("dpkg-deb", "dpkg")
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            debian_arch, suite = PORTS[arch][:2]
            try:
                made[arch] = debian_roots.build(debian_arch, suite, PACKAGES, LAYOUT, _finish, resolve=True)
            except TargetError as e:
                message = f"cannot fetch Debian's {debian_arch} packages: {e}"
                if os.environ.get("CI"):
                    pytest.fail(message)
                pytest.skip(message)
        return made[arch]

    return get


# -- the reference run: qemu-user in a chroot of the sysroot ------------------------------------------

#: run in the new namespaces as ``sh -c CHROOT sh ROOT QEMU RULE SCRATCH LOADER ARGV...``: the
#: arch's ELF files go to QEMU (binfmt_misc's F flag: the interpreter is opened now, from the
#: host's tree; P: the program's argv[0] stays its own), an overlay of ROOT in the SCRATCH tmpfs
#: becomes ``/``, and QEMU's own LOADER (the host's, "" for a static QEMU) and the libraries
#: beside it are bound into it beside the sysroot's own
CHROOT = r"""set -eu
trap 'echo "kpsdk-chroot: cannot be made" >&2' EXIT
root=$1 qemu=$2 rule=$3 scratch=$4 loader=$5
shift 5
mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
printf '%s' "$rule" > /proc/sys/fs/binfmt_misc/register
mount -t tmpfs tmpfs "$scratch"
mkdir "$scratch/upper" "$scratch/work" "$scratch/root"
mount -t overlay overlay -o "lowerdir=$root,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root"
new=$scratch/root
if [ -n "$loader" ]; then
    libs=$(dirname "$(readlink -f "$loader")")
    mkdir -p "$new$libs" "$new$(dirname "$loader")"
    : > "$new$loader"
    mount --bind "$libs" "$new$libs"
    mount --bind "$loader" "$new$loader"
fi
mkdir -p "$new/proc" "$new/dev" "$new/tmp"
mount --rbind /proc "$new/proc"
mount --rbind /dev "$new/dev"
chmod 1777 "$new/tmp"
trap - EXIT
exec /usr/bin/env -i LC_ALL=C PATH=/usr/bin:/bin /usr/sbin/chroot "$new" "$@"
"""


def _rule(arch: str, qemu: str) -> str:
    """The binfmt_misc rule for ``arch``'s ELF executables and shared objects (qemu's own
    qemu-binfmt-conf.sh rule: the ELF class, little-endian, version 1, ET_EXEC or ET_DYN, the
    machine; the OS ABI byte ignored)."""
    elf_class, machine = PORTS[arch][3:]
    magic = b"\x7fELF" + bytes([1 if elf_class == 32 else 2, 1, 1, 0]) + bytes(8) + b"\x02\x00" \
        + machine.to_bytes(2, "little")
    mask = b"\xff" * 7 + b"\x00" + b"\xff" * 8 + b"\xfe\xff\xff\xff"
    hexed = lambda raw: "".join(f"\\x{b:02x}" for b in raw)  # noqa: E731
    return f":kpsdk-{arch}:M::{hexed(magic)}:{hexed(mask)}:{qemu}:PF"


def qemu_chroot(arch: str, root: Path, argv: list[str], stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    """``argv`` run in ``root`` under qemu-user, as in a chroot of it (see the module's text);
    ``argv[0]`` is the file run and what the program sees as its name, as kpsdk's elf: gives it."""
    qemu = os.path.realpath(require_tool(PORTS[arch][2], "qemu-user"))
    unshare = require_tool("unshare", "util-linux")
    with tempfile.TemporaryDirectory(prefix="kpsdk-chroot-") as scratch:
        # bash's exec -a: the program's own argv[0], the host path kpsdk gives it too
        run = ["/bin/bash", "-c", 'exec -a "$0" "$@"', argv[0], argv[0].removeprefix(str(root)), *argv[1:]]
        loader = parse_elf(Path(qemu).read_bytes(), Path(qemu)).interp or ""
        proc = subprocess.run([unshare, "--user", "--map-root-user", "--mount", "sh", "-c", CHROOT, "sh",
                               str(root), qemu, _rule(arch, qemu), scratch, loader, *run],
                              input=stdin, capture_output=True, timeout=300, check=False)
    if b"kpsdk-chroot: cannot be made" in proc.stderr or proc.stderr.startswith(b"unshare:"):
        message = f"no chroot for qemu-user (a user namespace with its own binfmt_misc): {proc.stderr.decode()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return proc


# -- the runs ---------------------------------------------------------------------------------------------

#: each script's stderr goes to a file the script prints after a marker line, on both sides, so
#: that kpsdk's console (the program's stdout and stderr as one stream) splits into the two
STDERR_MARK = b"\n--- stderr ---\n"
WRAP = "{{\n{body}\n}} 2>/tmp/.stderr\nstatus=$?\nprintf '\\n--- stderr ---\\n'\ncat /tmp/.stderr\nexit $status\n"


def run_both(arch: str, root: Path, body: str, stdin: bytes = b"",
             handled: frozenset[str] = frozenset()) -> tuple[bytes, bytes, int]:
    """``bash -c BODY`` in ``root``, on kpsdk's embedded default and under qemu-user: the same
    stdout, stderr and exit status; kpsdk answered ENOSYS to no call but those of ``handled``."""
    argv = [str(root / "bin" / "bash"), "-c", WRAP.format(body=body)]
    native = qemu_chroot(arch, root, argv, stdin)
    assert native.stderr == b"", native.stderr.decode(errors="replace")  # all of it went to the marker
    console = io.BytesIO()  # the whole output (s.console keeps its last console_limit bytes)
    with kpsdk.open(f"elf:{argv[0]}", args=argv[1:], env=ENV, stdin=stdin, sysroot=str(root), cwd="/",
                    stdout=console, stderr=console) as s:
        status = s.run(timeout=600)
        emulated = console.getvalue()
        unimplemented = dict(s.syscalls_unimplemented)
    out, mark, err = emulated.rpartition(STDERR_MARK)
    native_out, _, native_err = native.stdout.rpartition(STDERR_MARK)
    assert mark, f"kpsdk's run did not finish its script: {emulated[-2000:]!r}"
    assert (out, err, status) == (native_out, native_err, native.returncode)
    assert set(unimplemented) <= handled, f"calls kpsdk does not implement: {unimplemented}"
    return native_out, native_err, native.returncode


def _lines(count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return "".join(f"{rng.randrange(10**12):012d} {rng.choice(('apple', 'pear', 'fig'))} {i}\n"
                   for i in range(count)).encode()


PIPELINE = r"""x=$(echo abc | tr a-z A-Z); echo "$x" | sed 's/\(.\)\(.\)\(.\)/\3\2\1/'
echo "$(echo nested $(echo deeper | tr a-z A-Z))"
seq 1 20 | sort -rn | head -3
(echo one; echo two) | wc -l
false || echo "false: $?"
ls /nonexistent
echo end; (exit 3)"""

#: sort with two threads and a 1 MiB buffer, so that it spills to temporary files in /tmp
SORT = "sort --parallel=2 -S 1M | md5sum; echo \"sort: ${PIPESTATUS[0]}\""

#: tar runs gzip (through /bin/sh -c) as its child on a pipe; the archive is written in /tmp
#: (kpsdk: the session's overlay), then listed and read back through gzip -d
TAR = r"""mkdir /tmp/t && cd /tmp/t
seq 1 500 > a.txt; printf 'b%.0s' $(seq 1 300) > b.txt
tar czf out.tgz a.txt b.txt && tar tzf out.tgz
tar xzOf out.tgz | md5sum
gzip -dc out.tgz | wc -c"""

#: find's own order is the directory's: sorted afterwards (kpsdk's overlay lists a directory sorted)
FIND = r"""mkdir -p /tmp/f/sub && cd /tmp/f
echo one > a.txt; echo two > sub/b.txt; echo three > c.log; echo four > sub/d.txt
find /tmp/f -name '*.txt' -exec cat {} + | sort
find . -name '*.log' -exec wc -c {} \;"""

SQLITE = r"""sqlite3 :memory: 'select 999*0.5, sum(x), avg(x), 1.0/3, round(2.5), 1e308*10, -0.0, 7/2, 2.0/7*7
  from (select 250250.75 as x union all select 0.125 union all select -3.5e-7)'
sqlite3 :memory: 'select printf("%.17g|%e", 0.1+0.2, 6.02214076e23)'"""

#: xz with two threads of 1 MiB from stdin: four blocks of 256 KiB (the default block, three
#: times the preset's dictionary, would hold the whole input: one thread would compress it all),
#: compressed two at a time and written in order; preset 3 (6's deeper match search takes
#: ten seconds on these digits under qemu-user)
XZ = "xz -T2 -3 --block-size=256KiB -c | md5sum; echo \"xz: ${PIPESTATUS[0]}\""

CASES: dict[str, tuple[str, Callable[[], bytes]]] = {
    "pipeline": (PIPELINE, lambda: b""),
    "sort-parallel": (SORT, lambda: _lines(125_000, 3)),
    "tar-czf-tzf": (TAR, lambda: b""),
    "find-exec": (FIND, lambda: b""),
    "sqlite3-floats": (SQLITE, lambda: b""),
    "xz-T2": (XZ, lambda: _lines(45_000, 5)[:1 << 20]),
}

#: calls a case's programs make that kpsdk answers ENOSYS, after which they do what they do on a
#: kernel without them: Debian 13's xz (riscv64) asks for a Landlock sandbox and runs without one
HANDLED = {"xz-T2": frozenset({"landlock_create_ruleset"})}
#: (arch, case) -> why kpsdk's run differs from qemu-user's (a bug found, not fixed)
XFAIL: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("arch", [a for a in ARCHS if a in PORTS])
def test_debian_programs_run_as_under_qemu_user(arch: str, case: str, world: Callable[[str], Path]) -> None:
    why = XFAIL.get((arch, case))
    if why is not None:
        pytest.xfail(why)
    require_tool(PORTS[arch][2], "qemu-user")
    body, stdin = CASES[case]
    out, err, status = run_both(arch, world(arch), body, stdin(), HANDLED.get(case, frozenset()))
    if case == "pipeline":  # what the comparison rests on: each stream and the status apart
        assert (out.splitlines()[:2], err, status) == ([b"CBA", b"nested DEEPER"], b"ls: cannot access "
                                                       b"'/nonexistent': No such file or directory\n", 3)


def test_the_sort_input_is_past_a_pipe_and_the_buffer() -> None:
    """The sizes the cases rely on: sort's input is past its 1 MiB buffer (temporary files) and
    every input is past a pipe's 64 KiB (a writer waits for its reader)."""
    assert len(_lines(125_000, 3)) > 3_000_000
    assert len(CASES["xz-T2"][1]()) == 1 << 20
