"""The kernel's trace line, prefix and all, against the guest kernel's own ftrace.

One boot of Debian's amd64 kernel (:mod:`kpsdk.fixtures.kernel`): the guest defines the same
events in its own ``/sys/kernel/tracing/kprobe_events``, runs the default workload, stops
tracing and prints its ``trace`` file on the console, while ``kpsdk trace`` traces the same
definitions from outside through QEMU's gdbstub.  Every line the guest recorded must be in
kpsdk's output, in the same order and without a line between them: the event body
byte for byte, the task's comm and pid (read from ``current`` through the kernel's BTF),
the CPU and the flags, and ``$comm`` in the body.  The timestamps differ (kpsdk does not read the guest's clock, and
says so in its header) and are not compared; nor is the need-resched flag (``N``): the
timer interrupt sets it at any instant, and the guest's handler runs some instructions
after kpsdk's breakpoint (after the kernel's return trampoline, for a return), so the two
can see it differently in the same boot.  And the kernel prints each pid with the comm it
recorded last (saved_cmdlines), kpsdk with the comm at the event: the only lines allowed to
differ in comm are those of the workload's forked children, which may print as the program
they exec'd afterwards (the workload's own markers say which).
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
from tests.kernel_trace import trace_args

pytestmark = pytest.mark.kernel

DEFINITIONS = [
    "p:myopen do_sys_openat2 dfd=$arg1 filename=+0($arg2):ustring",
    "r:myopenret do_sys_openat2 ret=$retval:s32",
    "p:myclone kernel_clone comm=$comm",  # current->comm, read as the prefix reads it
]
TRACING = "/sys/kernel/tracing"
#: the guest traces itself: define, enable, run the workload, stop, print the trace file
SELF_TRACING = "\n".join([
    f"mount -t tracefs nodev {TRACING}",
    *(f"echo '{d}' >> {TRACING}/kprobe_events" for d in DEFINITIONS),
    f"echo 1 > {TRACING}/events/kprobes/enable",
    kernel.DEFAULT_WORKLOAD.rstrip("\n"),
    f"echo 0 > {TRACING}/tracing_on",
    "echo KPSDK-GUEST-TRACE-BEGIN",
    f"cat {TRACING}/trace",
    "echo KPSDK-GUEST-TRACE-END",
])
#: comm-pid [cpu] flags timestamp: body (trace_print_context, kernel/trace/trace_output.c)
LINE = re.compile(r"^\s*(?P<comm>.+?)-(?P<pid>\d+)\s+\[(?P<cpu>\d{3})\] (?P<flags>\S{5})\s+"
                  r"(?P<time>\d+\.\d{6}): (?P<body>.*)$")


def entries(text: str) -> list[tuple[str, ...]]:
    """``(comm, pid, cpu, flags but need-resched, body)`` of each trace line (header and other
    lines skipped)."""
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            flags = m["flags"][0] + m["flags"][2:]
            out.append((m["comm"], m["pid"], m["cpu"], flags, m["body"]))
    return out


def header(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#")]


def test_prefix_and_bodies_match_the_guest_kernels_own_trace(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload=SELF_TRACING)
    out = tmp_path / "trace.txt"
    result = CliRunner().invoke(app, trace_args("x86_64", debian_kernel, initrd, out, DEFINITIONS))
    assert result.exit_code == 0, result.output[-3000:]
    console = result.stderr.replace("\r", "")
    assert "KPSDK-GUEST-TRACE-END" in console, console[-3000:]
    guest_text = console.split("KPSDK-GUEST-TRACE-BEGIN\n", 1)[1].split("KPSDK-GUEST-TRACE-END", 1)[0]
    guest = entries(guest_text)
    ours_text = out.read_text()
    ours = entries(ours_text)

    # the guest saw the workload: its opens (cat's) and its forks
    assert any(c == "cat" and "/etc/kpsdk-hello" in body for c, _, _, _, body in guest), guest_text[-2000:]
    assert sum(body.startswith("myclone:") for *_, body in guest) >= kernel.SPAWN_COUNT
    # kpsdk traced from before the guest enabled its events until after it stopped them: the
    # guest's lines are one run of kpsdk's, in the same order, prefixes (but the time) and bodies equal
    # the kernel prints a pid's comm as it last recorded it (saved_cmdlines, refreshed at each
    # context switch while tracing), kpsdk the comm at the event: a child forked by the workload
    # that then exec'd /bin/true may print as "true" in the guest for its events from before the
    # exec.  The workload's markers name those children and their programs.
    spawned = {m.fields["pid"]: Path(m.fields["cmd"]).name for m in kernel.parse_markers(console)
               if m.action == "spawn"}
    assert len(spawned) == kernel.SPAWN_COUNT, console[-2000:]

    def same(g: tuple[str, ...], o: tuple[str, ...]) -> bool:
        return g[1:] == o[1:] and (g[0] == o[0] or spawned.get(g[1]) == g[0])

    starts = [i for i in range(len(ours) - len(guest) + 1)
              if all(same(g, o) for g, o in zip(guest, ours[i:i + len(guest)], strict=True))]
    assert len(starts) == 1, "\n".join(map(str, guest + ["--- ours:"] + ours))
    matched = ours[starts[0]:starts[0] + len(guest)]
    assert sum(g[0] == o[0] for g, o in zip(guest, matched, strict=True)) >= len(guest) - kernel.SPAWN_COUNT * 2
    assert len({(c, p) for c, p, *_ in guest}) > 3  # several tasks: init, each cat, each forked child

    # the kernel's header: "# tracer: nop" and the column legend; where the kernel counts the
    # entries, kpsdk says where its columns come from
    guest_header, ours_header = header(guest_text), header(ours_text)
    assert guest_header[:2] == ours_header[:2] == ["# tracer: nop", "#"]
    assert len(guest_header) > 8 and ours_header[-8:] == guest_header[-8:]
    assert any("BTF" in line for line in ours_header)
    # and the widths: the same columns as the kernel's (compare one line of each, but the time)
    g_line = next(line for line in guest_text.splitlines() if LINE.match(line))
    o_line = next(line for line in ours_text.splitlines() if LINE.match(line))
    assert g_line.index("[") == o_line.index("[") and g_line.index(": ") == o_line.index(": ")
