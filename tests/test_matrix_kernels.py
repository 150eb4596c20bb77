"""The README's failed opens on Debian's kernels of five architectures, through ``kpsdk.matrix``.

One matrix boots x86_64, i386, arm, riscv64 and ppc64le (the kernels and busybox initramfs
of :mod:`kpsdk.fixtures.kernel`, fetched into kpsdk's cache once, before any target runs)
on two workers, each kernel in its own process, with each open's file name and each failed
open's return value (``examples/matrix_failed_opens.py``, the page docs/matrix.md shows).  Each
target's part of the merged ``jsonl`` must equal what ``kpsdk trace`` writes for that kernel
alone with the same definitions, in what does not depend on the guest's timing (each boot's
clock, its pids, kpsdk's task numbers, whether a reschedule was pending at the hit: the
``flags``); and the failed opens must be the initramfs workload's two and busybox poweroff's,
on every architecture.

It boots ten kernels (a few minutes on two cores): the ``kernel`` marker (``nox -s kernel``;
CI runs it in the full suite).
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk.matrixrun import FunctionScript, kernels
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "matrix_failed_opens.py"
#: the fields that depend on the guest's timing: the clock, pids (kthreads made as the boot goes), the
#: tasks (kpsdk's number per kernel stack, in the order they are seen), the flags (need-resched) at the hit
TIMING_KEYS = ("time", "entry_time", "duration", "flags", "pid", "task")
#: the initramfs workload's failed opens (kpsdk.fixtures.kernel.DEFAULT_WORKLOAD), then poweroff's
FAILED = [("/kpsdk-missing", -2), ("/etc/kpsdk-hello/sub", -20), ("/var/log/wtmp", -2)]


def _lines(text: str, drop_target: bool) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        obj = json.loads(line)
        for key in TIMING_KEYS:
            obj.pop(key, None)
        if drop_target and "schema" not in obj:
            obj.pop("target")
        out.append(obj)
    return out


def _failed(lines: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """(file name, errno) of each failed open: a return record and the open record before it."""
    out = []
    for before, line in zip(lines, lines[1:], strict=False):
        if line.get("event") == "open":
            assert before.get("event") == "openat", (before, line)
            out.append((before["fields"]["name"], line["fields"]["ret"]))
    return out


def test_failed_opens_on_five_kernels_equal_single_runs() -> None:
    for tool, package in (("qemu-system-x86_64", "qemu-system-x86"), ("qemu-system-arm", "qemu-system-arm"),
                          ("qemu-system-riscv64", "qemu-system-misc"), ("qemu-system-ppc64", "qemu-system-ppc"),
                          ("gdb-multiarch", "gdb-multiarch")):
        require_tool(tool, package)
    targets = kernels(["x86_64", "i386", "arm", "riscv64", "ppc64le"])
    try:
        result = kpsdk.matrix(FunctionScript(f"{SCRIPT}:failed_opens"), targets, workers=2, cache=False)
    except kpsdk.TargetError as exc:  # a kernel that cannot be fetched: as the other kernel tests
        if os.environ.get("CI"):
            pytest.fail(f"cannot fetch Debian's kernels: {exc}")
        pytest.skip(f"cannot fetch Debian's kernels: {exc}")
    assert [r.status for r in result] == ["ok"] * 5, [(r.name, r.error) for r in result.failed]
    failed_open_definitions = runpy.run_path(str(SCRIPT))["failed_open_definitions"]
    merged = _lines(result.jsonl(), drop_target=True)
    for target, res in zip(targets, result, strict=True):
        arch = target.kernel.arch  # type: ignore[union-attr]
        part = [line for line in _lines(result.jsonl(), drop_target=False) if line["target"] == res.name]
        part = [{k: v for k, v in line.items() if k != "target" or "schema" in line} for line in part]
        image, initrd = kernel_files(arch)
        definitions = [a for d in failed_open_definitions(arch) for a in ("-e", d)]
        alone = subprocess.run([sys.executable, "-m", "kpsdk.cli", "trace", f"qemu-system:{arch}", "--kernel", image,
                                "--initrd", initrd, *definitions, "--filter", "ret < 0", "-o", "jsonl"],
                               capture_output=True, text=True, timeout=900)
        assert alone.returncode == 0, alone.stderr[-3000:]
        assert part == _lines(alone.stdout, drop_target=False), arch
        assert _failed(part) == FAILED, arch
    assert len(merged) == sum(len(r.records) + 1 for r in result)


def kernel_files(arch: str) -> tuple[str, str]:
    """The kernel and initramfs the matrix booted for ``arch`` (the fixtures' cached ones)."""
    from kpsdk.fixtures import kernel

    return str(kernel.fetch_arch_kernel(arch)), str(kernel.initramfs_for(arch))
