"""Debian's own programs that start processes and threads, on the embedded default, against
the same commands run natively: the bytes they write and their exit status must be the same.

They run as a user's shell would run them (``kpsdk.open("elf:PROG")`` of a host-arch program
with no sysroot: the host's files read-only, the caller's environment and directory): bash
and busybox sh with pipelines, command substitution, subshells, traps, background jobs and
``wait``; make -j2; python3 with threading, subprocess and signal.alarm; xz with two threads;
sqlite3's floating point (x87 on i386, SSE here); find -exec.  What each program prints must
not depend on the scheduler: where a native run's order could vary, the script orders it.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kpsdk
from tests.conftest import require_tool

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="the host programs are x86_64")


def both(argv: list[str], stdin: bytes = b"", cwd: Path | None = None) -> tuple[bytes, int | None, bytes, int]:
    """(kpsdk's output, status, the native output, status) of ``argv``; kpsdk's output is
    stdout and stderr together (its console), compared with the native stdout + stderr."""
    out = io.BytesIO()  # all of it: s.console keeps the last console_limit bytes only
    with kpsdk.open(f"elf:{argv[0]}", args=argv[1:], stdin=stdin, stdout=out, stderr=out,
                    **({"cwd": str(cwd)} if cwd is not None else {})) as s:
        status = s.run(timeout=600)
    emulated = out.getvalue()
    native = subprocess.run(argv, input=stdin, capture_output=True, timeout=600, cwd=cwd, check=False)
    return emulated, status, native.stdout + native.stderr, native.returncode


def program(name: str, package: str) -> str:
    """Debian's own ``name`` (from /usr/bin or /bin, never a wrapper earlier on PATH)."""
    found = shutil.which(name, path="/usr/bin:/bin")
    if found is None:
        require_tool(name, package)  # skips, or fails on CI
    assert found is not None
    return os.path.realpath(found)


def assert_same(argv: list[str], stdin: bytes = b"", cwd: Path | None = None) -> None:
    emulated, status, native, native_status = both(argv, stdin, cwd)
    assert emulated == native
    assert status == native_status


BASH_SCRIPT = r"""
echo hello | tr a-z A-Z
x=$(echo sub | sed s/s/S/); echo "$x"
seq 1 20 | sort -rn | head -3
(echo one; echo two) | wc -l
trap 'echo trapped USR1' USR1; kill -USR1 $$
for i in 1 2 3; do (sleep 0.01; echo job $i) & done; wait
echo "$(echo nested $(echo deeper))"
false || echo "false failed: $?"
ls /usr/bin/env /usr/bin/true | xargs -n1 basename
echo end
"""


def test_bash_pipelines_substitutions_traps_and_jobs() -> None:
    bash = program("bash", "bash")
    emulated, status, native, native_status = both([bash, "-c", BASH_SCRIPT])
    # the three background jobs may finish in any order natively: compare their lines as a set
    def split(out: bytes) -> tuple[list[bytes], list[bytes]]:
        lines = out.splitlines()
        return [ln for ln in lines if not ln.startswith(b"job ")], sorted(ln for ln in lines if ln.startswith(b"job "))
    assert split(emulated) == split(native)
    assert status == native_status == 0


BUSYBOX_SCRIPT = r"""
echo hello | busybox tr a-z A-Z
echo $(busybox echo sub)
for i in 3 1 2; do echo $i; done | busybox sort
(echo a; echo b) | busybox wc -l
trap 'echo caught' TERM; kill -TERM $$
busybox true && echo and || echo or
echo 1 2 3 | busybox xargs -n1 echo item
busybox sh -c 'exit 7'; echo "status $?"
busybox sleep 0 & wait $!; echo "waited $?"
"""


def test_busybox_sh_scripts() -> None:
    busybox = program("busybox", "busybox-static")
    assert_same([busybox, "sh", "-c", BUSYBOX_SCRIPT])


def test_make_runs_two_jobs(tmp_path: Path) -> None:
    make = program("make", "make")
    (tmp_path / "Makefile").write_text("all: a b c\n\t@echo all\na:\n\t@echo A\nb:\n\t@echo B\nc: a b\n\t@echo C\n")
    emulated, status, native, native_status = both([make, "-j2", "-s", "all"], cwd=tmp_path)
    assert sorted(emulated.splitlines()[:2]) == sorted(native.splitlines()[:2]) == [b"A", b"B"]
    assert emulated.splitlines()[2:] == native.splitlines()[2:] == [b"C", b"all"]
    assert status == native_status == 0


PYTHON = """
import signal, subprocess, threading
out = []
def work(i):
    out.append(sum(range(i * 1000)))
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(sorted(out))
print(subprocess.run(["echo", "from a child"], capture_output=True, text=True).stdout, end="")
signal.signal(signal.SIGALRM, lambda s, f: print("alarm"))
signal.alarm(1)
signal.pause()
print("done")
"""


def test_python_threads_subprocess_and_alarm() -> None:
    assert_same([program("python3", "python3"), "-c", PYTHON])


def test_xz_with_two_threads_gives_the_same_bytes() -> None:
    xz = program("xz", "xz-utils")
    data = Path(program("python3", "python3")).read_bytes()[:400_000]
    assert_same([xz, "-T2", "-c"], stdin=data)


def test_sqlite3_floats() -> None:
    sqlite3 = program("sqlite3", "sqlite3")
    assert_same([sqlite3, ":memory:"], stdin=b"select 999*0.5; select sum(x) from (select 250250.75 as x);\n"
                                             b"select 1.0/3;\n")


def test_find_exec(tmp_path: Path) -> None:
    for name in ("a.txt", "b.txt", "c.log"):
        (tmp_path / name).write_text(name)
    find = program("find", "findutils")
    emulated, status, native, native_status = both([find, str(tmp_path), "-name", "*.txt", "-exec", "cat", "{}",
                                                    ";"])
    assert sorted(emulated.split(b".txt")) == sorted(native.split(b".txt"))
    assert status == native_status == 0


def test_sort_in_parallel_with_a_small_buffer_spills_to_temporary_files() -> None:
    """sort --parallel=2 -S 1M on 3 MB: two threads, temporary files in /tmp (the session's overlay)."""
    rng = __import__("random").Random(3)
    data = "".join(f"{rng.randrange(10**12):012d} {i}\n" for i in range(160_000)).encode()
    assert len(data) > 3_000_000
    assert_same([program("sort", "coreutils"), "--parallel=2", "-S", "1M"], stdin=data)


def test_tar_czf_then_tzf_through_gzip(tmp_path: Path) -> None:
    """tar runs gzip as a child through a pipe, writes the archive in the overlay, then lists it."""
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name * 100)
    program("tar", "tar")  # required: skipped with the package to install where it is missing
    script = f"cd {tmp_path} && tar czf out.tgz a.txt b.txt && tar tzvf out.tgz | awk '{{print $3, $6}}'"
    emulated, status, native, native_status = both([program("bash", "bash"), "-c", script])
    assert emulated == native and status == native_status == 0
    assert b"a.txt" in emulated and b"b.txt" in emulated
