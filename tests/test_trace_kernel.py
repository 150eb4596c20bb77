"""The real-kernel test as one ``kpsdk trace`` command: Debian's amd64 kernel under
qemu-system-x86_64, file names and failed opens from ``do_sys_openat2``.

The workload's own ``KPSDK open path=... ret=...`` lines on the serial console are the truth
(see :mod:`kpsdk.fixtures.kernel`); the trace must show each file name, and exactly the failed
ones with their negative errno (-2 ENOENT, -20 ENOTDIR).
"""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel


def test_kpsdk_trace_on_a_real_kernel(debian_kernel: Path, kernel_initramfs: Callable[..., Path]) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs()
    result = CliRunner().invoke(app, [
        "trace", "qemu-system:x86_64", "--kernel", str(debian_kernel), "--initrd", str(initrd), "--console",
        "--duration", "300", "--output", "jsonl", "--filter", "ret < 0",
        # (int dfd, const char __user *filename, struct open_how *how): the name at the entry; the return
        # has only $retval, as 6.1 allows ($argN in a return probe is "Invalid $-variable specified")
        "-e", "p:open do_sys_openat2 dfd=$arg1:s32 name=+0($arg2):ustring",
        "-e", "r:openret do_sys_openat2 ret=$retval:s64",
    ])
    assert result.exit_code == 0, result.output[-3000:]
    head, *records = [json.loads(line) for line in result.stdout.splitlines()]
    assert head["schema"] == "kpsdk-trace" and any("BTF" in note for note in head["notes"])
    markers = kernel.parse_markers(result.stderr)
    assert "BEGIN" in [m.action for m in markers] and "POWEROFF" in [m.action for m in markers], result.stderr[-2000:]
    opens = {m.fields["path"]: m.fields["ret"] for m in markers if m.action == "open"}
    assert opens == {"/etc/kpsdk-hello": "ok", "/kpsdk-missing": "-2", "/etc/kpsdk-hello/sub": "-20"}
    names = {r["fields"]["name"] for r in records if r["event"] == "open"}
    # each return belongs to its task's latest open (the guest runs one CPU: a task's open and its
    # return have no other open of that task between them)
    latest: dict[int, str | None] = {}
    failed: set[tuple[str | None, int]] = set()
    for r in records:
        if r["event"] == "open":
            latest[r["pid"]] = r["fields"]["name"]
        elif r["event"] == "openret":
            failed.add((latest.get(r["pid"]), r["fields"]["ret"]))
    assert all(r["fields"]["ret"] < 0 for r in records if r["event"] == "openret")  # --filter 'ret < 0'
    for path, ret in opens.items():
        assert path in names
        if ret == "ok":
            assert all(name != path for name, _ in failed)
        else:
            assert (path, int(ret)) in failed
    assert ("/kpsdk-missing", -errno.ENOENT) in failed and ("/etc/kpsdk-hello/sub", -errno.ENOTDIR) in failed
    first = next(r for r in records if r["event"] == "openret")
    assert first["func"] == "do_sys_openat2" and first["where"].endswith(" <- do_sys_openat2")
    # 64-bit kernel addresses as hex strings (a double would round them), and the task of each
    assert int(first["ip"], 16) >= 1 << 63 and int(first["caller"], 16) >= 1 << 63
    assert {(r["comm"], r["fields"]["name"]) for r in records if r["event"] == "open"} >= {
        ("cat", "/kpsdk-missing"), ("cat", "/etc/kpsdk-hello/sub")}
