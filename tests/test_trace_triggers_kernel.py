"""Hist and stacktrace triggers against the guest kernel's own, on one boot.

Debian's 6.1 amd64 kernel (CONFIG_HIST_TRIGGERS=y) boots once
(:mod:`kpsdk.fixtures.kernel`).  The guest defines the events in its own
``kprobe_events``, writes the same triggers into ``events/kprobes/EVENT/trigger``, runs
the default workload, and prints its ``hist`` files and its ``trace`` file (with the
``sym-offset`` option, so that stack frames print as ``sym+0xoff/0xsize``).  kpsdk traces
the same definitions with the same triggers from outside, through QEMU's gdbstub.

Every trigger is filtered on ``comm == "cat"``: the workload's three ``cat`` commands are
the only cats of the boot, so the guest (which enables its triggers just before the
workload) and kpsdk (which traces from early boot) count the same hits; the guest prints
its files with ``sed``, not ``cat``.  What must match:

- each ``hist`` file but its Totals' *Dropped* line... in full: the ``# trigger info``
  line as the kernel prints the trigger back, every entry line (keys, hitcount, sums),
  byte for byte and in the same order, and ``Hits``/``Entries``;
- each stack trace of a ``cat`` open: the frames kpsdk's backtrace finds are the guest's,
  from the caller of the probed function up; the kernel's own first frames (its kprobe
  handling, the probed function's ftrace site) are said in the test.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.fixtures import kernel
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

DEFINITIONS = [
    "p:myopen do_sys_openat2 dfd=$arg1",
    "r:myopenret do_sys_openat2 ret=$retval:s32",
]
CAT = 'if comm == "cat"'
TRIGGERS = [
    ("myopenret", f"hist:keys=common_pid.execname,ret:vals=hitcount:sort=common_pid,ret {CAT}"),
    ("myopenret", f"hist:keys=__probe_ret_ip.sym-offset,ret.log2:vals=hitcount:sort=ret {CAT}"),
    ("myopen", f"hist:keys=__probe_ip.sym:vals=hitcount,dfd:sort=hitcount.descending {CAT}"),
    ("myopen", f"stacktrace {CAT}"),
]
TRACING = "/sys/kernel/tracing"
SELF_TRACING = "\n".join([
    f"mount -t tracefs nodev {TRACING}",
    *(f"echo '{d}' >> {TRACING}/kprobe_events" for d in DEFINITIONS),
    *(f"echo '{t}' >> {TRACING}/events/kprobes/{e}/trigger" for e, t in TRIGGERS),
    f"echo 1 > {TRACING}/options/sym-offset",
    f"echo 1 > {TRACING}/events/kprobes/enable",
    kernel.DEFAULT_WORKLOAD.rstrip("\n"),
    f"echo 0 > {TRACING}/tracing_on",
    *(f"echo KPSDK-GUEST-HIST-BEGIN {e}\nsed -n p {TRACING}/events/kprobes/{e}/hist\necho KPSDK-GUEST-HIST-END"
      for e in ("myopen", "myopenret")),
    "echo KPSDK-GUEST-TRACE-BEGIN",
    f"sed -n p {TRACING}/trace",
    "echo KPSDK-GUEST-TRACE-END",
])


def hist_blocks(text: str) -> list[list[str]]:
    """Each ``# event histogram`` block of a hist file: its lines up to the Totals."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line == "# event histogram":
            blocks.append([])
        if blocks and line:
            blocks[-1].append(line)
    return [[line for line in b if not line.startswith("    Dropped")] for b in
            ([line for line in b if not line.startswith("==> ")] for b in blocks)]


def stacks(text: str) -> list[list[str]]:
    """The frames of each ``<stack trace>`` entry of a trace file."""
    out: list[list[str]] = []
    inside = False
    for line in text.splitlines():
        if line.endswith("<stack trace>"):
            out.append([])
            inside = True
        elif inside and line.startswith(" => "):
            out[-1].append(line[4:])
        else:
            inside = False
    return out


def between(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0]


def test_hist_and_stacktrace_triggers_match_the_guest_kernels_own(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload=SELF_TRACING)
    out = tmp_path / "trace.txt"
    args = ["trace", "qemu-system:x86_64", "--kernel", str(debian_kernel), "--initrd", str(initrd),
            "--console", "--duration", "300", "--out", str(out)]
    for d in DEFINITIONS:
        args += ["-e", d]
    for event, trigger in TRIGGERS:
        args += ["--trigger", f"{event}:{trigger}"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    console = result.stderr.replace("\r", "")
    assert "KPSDK-GUEST-TRACE-END" in console, console[-3000:]

    # the hist files: the guest's (myopen's, then myopenret's) against kpsdk's report, in
    # trigger order per event
    guest_hist = hist_blocks(between(console, "KPSDK-GUEST-HIST-BEGIN myopen\n", "KPSDK-GUEST-HIST-END")) + \
        hist_blocks(between(console, "KPSDK-GUEST-HIST-BEGIN myopenret\n", "KPSDK-GUEST-HIST-END"))
    ours_hist = hist_blocks(result.stdout)
    assert len(guest_hist) == len(ours_hist) == 3, console[-3000:] + result.stdout
    # kpsdk prints myopen's triggers first as well (the events' order)
    for guest, ours in zip(guest_hist, ours_hist, strict=True):
        assert guest == ours, "\n".join(["guest:", *guest, "kpsdk:", *ours])
    by_pid = guest_hist[1] if "execname" in guest_hist[1][2] else guest_hist[2]
    cats = [line for line in by_pid if line.startswith("{ common_pid: cat")]
    assert len(cats) >= 3, by_pid  # the workload's three cats, each seen by both

    # the stack traces of the cats' opens
    guest_stacks = stacks(between(console, "KPSDK-GUEST-TRACE-BEGIN\n", "KPSDK-GUEST-TRACE-END"))
    ours_stacks = stacks(out.read_text())
    assert guest_stacks and len(guest_stacks) == len(ours_stacks), (guest_stacks, ours_stacks)
    for guest, ours in zip(guest_stacks, ours_stacks, strict=True):
        # kpsdk's frames from the probed function's caller up are the guest's last frames
        callers = ours[1:]
        assert callers and guest[-len(callers):] == callers, (guest, ours)
        assert re.match(r"do_sys_openat2\+0x0/0x[0-9a-f]+$", ours[0]), ours
