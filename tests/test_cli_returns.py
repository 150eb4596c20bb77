"""``kpsdk probe --failed``: an errno name only for the kernel's convention (issue 36, item 16).

A kernel function returns ``-ENOENT``; a C library function returns -1 and sets the thread's
``errno``.  ``ret=-1 (EPERM)`` read the second as the first.  Ground truth: tests/libprogs/fails.c,
dynamically linked, prints what its failed ``open`` and ``close`` returned and the errno each set;
kpsdk must print the same return and errno (glibc's TLS ``errno``, read through libc's TPOFF
slot and the thread pointer) on each architecture the Unicorn target runs.
"""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk import fixtures
from kpsdk.cli import app
from tests.conftest import require_tool
from tests.test_libraries import COMPILERS

SOURCE = Path(__file__).parent / "libprogs" / "fails.c"
#: the Unicorn target's dynamically linked arches, and the sysroot of each (Debian's cross libc)
SYSROOTS = {"x86_64": "/", "i386": "/usr/i686-linux-gnu", "arm": "/usr/arm-linux-gnueabihf",
            "riscv64": "/usr/riscv64-linux-gnu", "aarch64": "/usr/aarch64-linux-gnu"}


def lines(out: str, start: str) -> list[str]:
    return [line.split("] ", 1)[1] for line in out.splitlines() if line.startswith("[") and "] " + start in line]


@pytest.mark.parametrize("arch", sorted(SYSROOTS))
def test_a_c_library_failure_prints_the_threads_errno(arch: str, tmp_path: Path) -> None:
    cc, package, flags = COMPILERS[arch]
    prog = tmp_path / f"fails-{arch}"
    subprocess.run([require_tool(cc, package), *flags, "-O1", "-o", str(prog), str(SOURCE)], check=True,
                   capture_output=True, timeout=120)
    result = CliRunner().invoke(app, ["probe", str(prog), "--sysroot", SYSROOTS[arch], "--kretprobe", "open",
                                      "--kretprobe", "close", "--failed", "--restype", "int"])
    assert result.exit_code == 0, result.output
    told = {w[0]: (int(w[1]), int(w[2])) for w in (line.split() for line in result.stdout.splitlines())
            if w[:1] in (["open"], ["close"]) and len(w) == 3}
    assert told == {"open": (-1, errno.ENOENT), "close": (-1, errno.EBADF)}, result.stdout
    assert lines(result.stdout, "r open") == ["r open ret=-1 errno=ENOENT"]
    assert lines(result.stdout, "r close") == ["r close ret=-1 errno=EBADF"]
    assert "(EPERM)" not in result.stdout


def test_a_user_function_without_a_c_library_gets_no_errno_name() -> None:
    """The static fixture has no libc errno to read: sub(3, 5) is -2, and no more is said."""
    result = CliRunner().invoke(app, ["probe", str(fixtures.path("x86_64")), "--kretprobe", "sub", "--restype", "int",
                                      "--failed", "--call", "sub", "3", "5"])
    assert result.exit_code == 0, result.output
    assert lines(result.stdout, "r sub") == ["r sub ret=-2"]


def test_an_errno_name_is_for_the_kernels_convention_only() -> None:
    from kpsdk.cli.returns import failure_text

    assert failure_text(-2, kernel=True, thread_errno=None) == " (ENOENT)"
    assert failure_text(-512, kernel=True, thread_errno=None) == " (ERESTARTSYS)"
    assert failure_text(-4095, kernel=True, thread_errno=None) == ""  # no errno has that number
    assert failure_text(-5000, kernel=True, thread_errno=None) == ""  # past MAX_ERRNO: a plain negative
    assert failure_text(-1, kernel=False, thread_errno=None) == ""
    assert failure_text(-1, kernel=False, thread_errno=errno.ENOENT) == " errno=ENOENT"
    assert failure_text(-1, kernel=False, thread_errno=4242) == " errno=4242"
