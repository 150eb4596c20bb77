"""A Unicorn program's output is streamed as written, and its host files end with the session
(issue 36, items 5 and 9).

The host's busybox writes 200 MB to its standard output through the Linux layer: the bytes
reach the caller's file as the native run's do (the same SHA-256), the Python process grows
by far less than the output, and ``s.console`` keeps only the last ``console_limit`` bytes.
A session dropped without ``close()`` gives its guest's host descriptors back when it is
garbage collected.
"""

from __future__ import annotations

import gc
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kpsdk
from kpsdk.errors import ArgumentError
from kpsdk.targets.unicorn.output import CONSOLE_LIMIT
from tests.conftest import require_tool
from tests.test_linux_programs import COMPILERS

MIB = 1 << 20
X86_64_HOST = os.uname().machine == "x86_64"
needs_host_busybox = pytest.mark.skipif(not X86_64_HOST, reason="runs the host's x86_64 busybox")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(MIB):
            h.update(chunk)
    return h.hexdigest()


@needs_host_busybox
def test_200_mb_of_output_streams_to_the_callers_file_and_the_console_keeps_a_tail(tmp_path: Path) -> None:
    busybox = require_tool("busybox", "busybox-static")
    args = ["dd", "if=/dev/zero", "bs=1M", "count=200"]
    native = tmp_path / "native"
    with native.open("wb") as out:
        subprocess.run([busybox, *args], stdout=out, stderr=subprocess.DEVNULL, check=True)
    streamed, errors = tmp_path / "streamed", tmp_path / "errors"
    gc.collect()
    before = rss_kib()
    with streamed.open("wb") as out, errors.open("wb") as err:
        s = kpsdk.open(f"elf:{busybox}", args=args, sysroot="/", stdout=out, stderr=err)
        try:
            assert s.run(timeout=300) == 0
            grown = rss_kib() - before
            tail = s.console_bytes
        finally:
            s.close()
    assert streamed.stat().st_size == native.stat().st_size == 200 * MIB
    assert sha256_of(streamed) == sha256_of(native)
    assert errors.read_bytes().startswith(b"200+0 records in\n200+0 records out\n")
    # the session itself (Unicorn, the program's memory) costs some 50 MiB; the output none of it
    assert grown < 120 * 1024, f"the Python process grew by {grown} KiB for 200 MB of output"
    assert len(tail) == CONSOLE_LIMIT  # the last MiB written: zeros, then dd's report on stderr
    assert tail.endswith(b"\x00200+0 records in\n200+0 records out\n")


@needs_host_busybox
def test_the_console_keeps_the_last_console_limit_bytes_and_streams_to_a_descriptor(tmp_path: Path) -> None:
    busybox = require_tool("busybox", "busybox-static")
    r, w = os.pipe()
    try:
        s = kpsdk.open(f"elf:{busybox}", args=["seq", "1", "3000"], sysroot="/", stdout=w, console_limit=10)
        try:
            assert s.run(timeout=60) == 0
            assert s.console == "2999\n3000\n"
        finally:
            s.close()
        os.close(w)
        w = -1
        with os.fdopen(r, "rb") as f:
            r = -1
            assert f.read() == b"".join(b"%d\n" % n for n in range(1, 3001))
    finally:
        for fd in (r, w):
            if fd >= 0:
                os.close(fd)


@needs_host_busybox
def test_without_a_destination_the_output_is_the_console_alone_and_a_text_file_gets_its_bytes() -> None:
    busybox = require_tool("busybox", "busybox-static")
    s = kpsdk.open(f"elf:{busybox}", args=["echo", "hi"], sysroot="/")
    try:
        assert s.run(timeout=60) == 0 and s.console == "hi\n"
    finally:
        s.close()
    text = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    text.write("before ")
    s = kpsdk.open(f"elf:{busybox}", args=["echo", "hi"], sysroot="/", stdout=text, console_limit=0)
    try:
        assert s.run(timeout=60) == 0 and s.console == ""
    finally:
        s.close()
    assert text.buffer.getvalue() == b"before hi\n"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("option", "value"), [
    ("console_limit", -1), ("console_limit", 1.5), ("console_limit", True), ("stdout", -3), ("stdout", "out.txt"),
    ("stderr", object()), ("stdout", False),
])
def test_bad_output_options_are_refused(option: str, value: object) -> None:
    from kpsdk.fixtures import path

    with pytest.raises(ArgumentError, match=option):
        kpsdk.open(f"elf:{path('x86_64')}", **{option: value})  # type: ignore[arg-type]


MANY_FILES = r"""
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(void) {
    int n = 0;
    while (open("/etc/hostname", O_RDONLY) >= 0)
        n++;
    printf("%d\n", n);
    fflush(stdout);
    for (;;)
        getppid();  /* never exits: the session is dropped while its files are open */
}
"""


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def run_and_drop(exe: Path) -> None:
    s = kpsdk.open(f"elf:{exe}", sysroot="/")
    assert s.run(timeout=1) is None  # still running: its 1021 files open
    assert s.console == "1021\n"  # 1024 (RLIMIT_NOFILE) less 0, 1 and 2


@needs_host_busybox
def test_a_session_dropped_without_close_gives_its_guests_host_descriptors_back(tmp_path: Path) -> None:
    cc, package = COMPILERS["x86_64"]
    require_tool(cc, package)
    (tmp_path / "many.c").write_text(MANY_FILES)
    exe = tmp_path / "many"
    subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(tmp_path / "many.c")], check=True, capture_output=True)
    run_and_drop(exe)  # the first run's own descriptors (the Ctrl-C pipe) stay for the process
    gc.collect()
    before = open_fds()
    for _ in range(3):
        run_and_drop(exe)
    gc.collect()
    assert open_fds() == before  # was 3 * 1021 more: the last session kept by the timer thread, too


#: runs its arguments with standard output to the file named first; prints the child's peak RSS (KiB)
PEAK_RSS = """
import resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL, check=True)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


@needs_host_busybox
def test_kpsdk_probe_prints_the_programs_output_as_it_writes_it(tmp_path: Path) -> None:
    """200 MB through ``kpsdk probe``: all of it printed (beyond console_limit), in a process
    that never holds it (its peak RSS is the session's, some 85 MiB; the whole held was 470 MiB)."""
    busybox = require_tool("busybox", "busybox-static")
    out = tmp_path / "out"
    peak = subprocess.run([sys.executable, "-c", PEAK_RSS, str(out), sys.executable, "-m", "kpsdk", "probe", busybox,
                           "--sysroot", "/", "--strace", "--", "dd", "if=/dev/zero", "bs=1M", "count=200"],
                          capture_output=True, text=True, check=True, timeout=300)
    heading = "── program output ".encode()
    with out.open("rb") as f:
        head = f.read(200)
        f.seek(-100, os.SEEK_END)
        tail = f.read()
    assert head.startswith(b"0 probe(s) on x86_64: \n" + heading) and head.endswith(b"\0" * 50)
    assert tail.endswith(b"\x00200+0 records in\n200+0 records out\nexit status 0\n")
    assert out.stat().st_size > 200 * MIB
    assert int(peak.stdout) < 150 * 1024, f"kpsdk probe peaked at {peak.stdout.strip()} KiB"
