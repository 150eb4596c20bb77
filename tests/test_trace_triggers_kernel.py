"""Hist and stacktrace triggers against the guest kernel's own, on one boot.

Debian's 6.1 amd64 kernel (CONFIG_HIST_TRIGGERS=y) boots once
(:mod:`kpsdk.fixtures.kernel`).  The guest defines the events in its own
``kprobe_events``, writes the same triggers into ``events/kprobes/EVENT/trigger``, runs
the default workload, and prints its ``hist`` files and its ``trace`` file (with the
``sym-offset`` option, so that stack frames print as ``sym+0xoff/0xsize``).  kpsdk traces
the same definitions with the same triggers from outside, through QEMU's gdbstub, and
``--functions 'do_sys_open*' -e 'p:kfn/ $func'`` on the same run.

Triggers the kernel refuses are written first: kpsdk refuses them with the same
``error_log`` entries (or, where the kernel logs nothing, with its bare EINVAL).

Every trigger is filtered on ``comm == "cat"``: the workload's three ``cat`` commands are
the only cats of the boot, so the guest (which enables its triggers just before the
workload) and kpsdk (which traces from early boot) count the same hits; the guest prints
its files with ``sed``, not ``cat``.  What must match:

- each ``hist`` file in full: the ``# trigger info`` line as the kernel prints the trigger
  back, every entry line (keys, hitcount, sums), byte for byte and in the same order, and
  the Totals (blank lines aside);
- where a stack entry goes: right after its event's line, for a filtered trigger and for
  one without a filter;
- each stack trace of a ``cat`` open, printed right after its event's line: the frames
  kpsdk's backtrace finds are the guest's, in order, from the probed function's caller to
  the outermost frame.  What differs, and why, is said in the test: the guest's first
  frames are its own kprobe handling, and kpsdk's frame-pointer walk can miss a frame of a
  kernel built without frame pointers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk.cli import app
from kpsdk.errors import TriggerError
from kpsdk.fixtures import kernel
from kpsdk.trace.grammar import Parser
from kpsdk.trace.histtrigger import HistTrigger, register
from kpsdk.trace.triggers import parse_trigger
from tests.conftest import require_tool
from tests.kernel_trace import TRACING, define_events, trace_args

pytestmark = pytest.mark.kernel

DEFINITIONS = [
    "p:myopen do_sys_openat2 dfd=$arg1",
    "r:myopenret do_sys_openat2 ret=$retval:s32",
    "p:myclone kernel_clone",
]
CAT = 'if comm == "cat"'
TRIGGERS = [
    ("myopenret", f"hist:keys=common_pid.execname,ret:vals=hitcount:sort=common_pid,ret {CAT}"),
    ("myopenret", f"hist:keys=__probe_ret_ip.sym-offset,ret.log2:vals=hitcount:sort=ret {CAT}"),
    ("myopen", f"hist:keys=__probe_ip.sym:vals=hitcount,dfd:sort=hitcount.descending {CAT}"),
    # the common fields, in a key and a filter (common_type differs: the guest numbers its events itself)
    ("myopen", f"hist:keys=common_preempt_count:vals=hitcount {CAT} && common_pid > 1"),
    ("myopen", f"stacktrace {CAT}"),
    ("myclone", "stacktrace:1"),  # an event whose triggers are all unconditional: where its entry goes
]
#: triggers the kernel refuses: with an error_log entry (message, command, caret), or with
#: EINVAL alone (the last two)
BAD_TRIGGERS = [
    "hist:keys=nosuch",
    "hist:keys=ret.bogus",
    "hist:keys=ret:sort=nosuch",
    "hist:keys=ret:sort=ret.up",
    "hist:keys=ret:vals=ret.log2",
    "hist:keys=ret:sort=ret,hitcount,ret",
    "hist:keys=ret:size=64",
    "hist:vals=ret",
]


def self_tracing(definitions: Sequence[str], triggers: Sequence[tuple[str, str]], bad_triggers: Sequence[str] = (),
                 bad_event: str = "myopenret", setup: Sequence[str] = (),
                 late: Sequence[tuple[str, str]] = ()) -> str:
    """The guest's /init part: run ``setup``, define the events, write each refused trigger into
    ``bad_event``'s trigger file (and print its error_log), write the triggers, then each ``late``
    trigger (one refused because of those before it: its error_log too), run the workload with the
    events enabled (with ``sym-offset``, so that stack frames print as ``sym+0xoff/0xsize``), then
    print the hist files of the events with hist triggers and the trace file."""
    hist_events = list(dict.fromkeys(e for e, t in triggers if t.startswith("hist:")))

    def case(name: str, event: str, trigger: str) -> str:
        return (f"echo KPSDK-CASE-{name}\necho > {TRACING}/error_log\n"
                f"echo '{trigger}' >> {TRACING}/events/kprobes/{event}/trigger 2>/dev/null && echo KPSDK-ACCEPTED\n"
                f"sed -n p {TRACING}/error_log")

    return "\n".join([
        *setup,
        *define_events(definitions),
        *(case(str(i), bad_event, t) for i, t in enumerate(bad_triggers)),
        "echo KPSDK-CASES-END",
        *(f"echo '{t}' >> {TRACING}/events/kprobes/{e}/trigger" for e, t in triggers),
        *(case(f"LATE-{i}", e, t) for i, (e, t) in enumerate(late)),
        "echo KPSDK-LATE-END",
        f"echo 1 > {TRACING}/options/sym-offset",
        f"echo 1 > {TRACING}/events/kprobes/enable",
        kernel.DEFAULT_WORKLOAD.rstrip("\n"),
        f"echo 0 > {TRACING}/tracing_on",
        *(f"echo KPSDK-GUEST-HIST-BEGIN {e}\nsed -n p {TRACING}/events/kprobes/{e}/hist\necho KPSDK-GUEST-HIST-END"
          for e in hist_events),
        "echo KPSDK-GUEST-TRACE-BEGIN",
        f"sed -n p {TRACING}/trace",
        "echo KPSDK-GUEST-TRACE-END",
    ])


SELF_TRACING = self_tracing(DEFINITIONS, TRIGGERS, BAD_TRIGGERS)


def hist_blocks(text: str) -> list[list[str]]:
    """Each ``# event histogram`` block of a hist file: its lines up to the Totals."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line == "# event histogram":
            blocks.append([])
        if blocks and line:
            blocks[-1].append(line)
    return [[line for line in b if not line.startswith("==> ")] for b in blocks]


def same_hist_files(console: str, stdout: str, count: int) -> list[list[str]]:
    """The guest's hist files (myopen's, then myopenret's, as its /init printed them) and
    kpsdk's report: ``count`` blocks each, equal block by block; the guest's blocks."""
    guest_hist = hist_blocks(between(console, "KPSDK-GUEST-HIST-BEGIN myopen\n", "KPSDK-GUEST-HIST-END")) + \
        hist_blocks(between(console, "KPSDK-GUEST-HIST-BEGIN myopenret\n", "KPSDK-GUEST-HIST-END"))
    ours_hist = hist_blocks(stdout)
    assert len(guest_hist) == len(ours_hist) == count, console[-3000:] + stdout
    for guest, ours in zip(guest_hist, ours_hist, strict=True):
        assert guest == ours, "\n".join(["guest:", *guest, "kpsdk:", *ours])
    return guest_hist


def stacks(text: str, event: str) -> list[list[str]]:
    """The frames of each ``<stack trace>`` entry of a trace file that follows an ``event`` line."""
    out: list[list[str]] = []
    inside = False
    previous = ""
    for line in text.splitlines():
        if line.endswith("<stack trace>"):
            inside = f" {event}: (" in previous
            if inside:
                out.append([])
        elif inside and line.startswith(" => "):
            out[-1].append(line[4:])
        else:
            inside = False
        previous = line
    return out


def between(text: str, begin: str, end: str) -> str:
    return text.split(begin, 1)[1].split(end, 1)[0]


def guest_errors(console: str) -> dict[int, tuple[str, ...] | None]:
    """Case number -> the error_log's three lines without the timestamp, or None (no entry)."""
    out: dict[int, tuple[str, ...] | None] = {}
    for m in re.finditer(r"KPSDK-CASE-(\d+)\n(.*?)(?=KPSDK-CASE|KPSDK-CASES-END)", console, re.S):
        body = m[2].rstrip("\n")
        assert "KPSDK-ACCEPTED" not in body, (BAD_TRIGGERS[int(m[1])], body)
        lines = body.split("\n") if body else []
        assert len(lines) in (0, 3), body
        out[int(m[1])] = (re.sub(r"^\[\s*[\d.]+\] ", "", lines[0]), lines[1], lines[2]) if lines else None
    return out


def test_hist_and_stacktrace_triggers_match_the_guest_kernels_own(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload=SELF_TRACING)
    out = tmp_path / "trace.txt"
    args = trace_args("x86_64", debian_kernel, initrd, out, DEFINITIONS, TRIGGERS)
    # and kpsdk's --functions on the same run: one event per function the glob matches
    args += ["--functions", "do_sys_open*", "-e", "p:kfn/ $func"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    # the kernel's own messages on the serial console (a loaded host: "hrtimer: interrupt took
    # ... ns") can land between the guest's lines; error_log entries start "[time] hist:"
    console = "".join(line for line in result.stderr.replace("\r", "").splitlines(keepends=True)
                      if not re.match(r"\[\s*\d+\.\d+\] (?!hist:)", line))
    assert "KPSDK-GUEST-TRACE-END" in console, console[-3000:]

    # the refused triggers: the same error_log entries (message, command, caret), or none
    guest = guest_errors(console)
    assert sorted(guest) == list(range(len(BAD_TRIGGERS))), console[-3000:]
    definition = Parser(kpsdk.get_registry().arch("x86_64")).parse(DEFINITIONS[1])
    for i, bad in enumerate(BAD_TRIGGERS):
        with pytest.raises(TriggerError) as info:
            parse_trigger(bad, definition, 8)
        log = info.value.error_log
        assert (tuple(log.split("\n")) if log is not None else None) == guest[i], (bad, guest[i], log)
    assert sum(v is not None for v in guest.values()) == 6

    # the hist files: the guest's (myopen's, then myopenret's) against kpsdk's report, in
    # trigger order per event
    # kpsdk prints myopen's triggers first as well (the events' order)
    guest_hist = same_hist_files(console, result.stdout, 4)
    by_pid = next(block for block in guest_hist if "execname" in block[2])
    cats = [line for line in by_pid if line.startswith("{ common_pid: cat")]
    assert len(cats) >= 3, by_pid  # the workload's three cats, each seen by both

    # --functions: do_sys_openat2 and do_sys_open, each an event named as the kernel names it;
    # every open of a cat goes through do_sys_openat2, as the guest's myopen saw
    assert "--functions do_sys_open*: 2 functions" in console
    ours_lines = out.read_text().splitlines()
    guest_cat_opens = [line for line in between(console, "KPSDK-GUEST-TRACE-BEGIN\n", "KPSDK-GUEST-TRACE-END")
                       .splitlines() if " myopen: (" in line and "cat-" in line]
    kfn = [line for line in ours_lines if " p_do_sys_openat2_0: (do_sys_openat2+0x0/" in line and "cat-" in line]
    assert len(kfn) == len(guest_cat_opens) == 3, (kfn, guest_cat_opens)

    # the stack traces of the cats' opens: each right after its event's line, in both
    guest_trace = between(console, "KPSDK-GUEST-TRACE-BEGIN\n", "KPSDK-GUEST-TRACE-END")
    ours_trace = out.read_text()
    (tmp_path / "guest-trace.txt").write_text(guest_trace)  # kept by pytest for a failure's reader
    for text in (guest_trace, ours_trace):
        lines = text.splitlines()
        after = [lines[i - 1] for i, line in enumerate(lines) if line.endswith("<stack trace>")]
        # every stack entry right after its event's line: the filtered trigger's (myopen, the
        # cats) and the unfiltered one's (myclone)
        assert sum(" myopen: (" in line and "cat-" in line for line in after) == 3, (after, text[-6000:])
        assert sum(" myclone: (kernel_clone+0x0/" in line for line in after) == 1, (after, text[-6000:])
        assert len(after) == 4, (after, text[-6000:])
    guest_stacks, ours_stacks = stacks(guest_trace, "myopen"), stacks(ours_trace, "myopen")
    assert len(guest_stacks) == len(ours_stacks) == 3, (guest_stacks, ours_stacks)
    for guest, ours in zip(guest_stacks, ours_stacks, strict=True):
        # The guest's first frames are its own kprobe machinery (kprobe_trace_func ...
        # kprobe_ftrace_handler) and the probed function after its fentry call (+0x5);
        # kpsdk's first is the probed function's first byte, where its breakpoint is.
        probed = next(i for i, f in enumerate(guest) if f.startswith("do_sys_openat2+"))
        assert ours[0].startswith("do_sys_openat2+0x0/") and guest[probed].split("/")[1] == ours[0].split("/")[1]
        # Then kpsdk's callers are the guest's, in order, from the return address at the
        # entry to the last frame.  kpsdk's x86 walk follows the rbp chain; Debian's kernel is
        # built without frame pointers (ORC), so a frame whose function did not keep rbp
        # (do_syscall_64) can be missing, never one the guest does not have.
        callers, rest = ours[1:], iter(guest[probed + 1:])
        assert callers and callers[0] == guest[probed + 1], (guest, ours)
        assert callers[-1] == guest[-1], (guest, ours)
        assert all(frame in rest for frame in callers), (guest, ours)  # a subsequence


#: arm's 6.1 kernel refuses $argN (arch/arm has no HAVE_FUNCTION_ARG_ACCESS_API): registers by
#: the AAPCS.  The triggers need no task (the prefix has its own test): they count the
#: workload's opens by their file name (only the workload opens a name with "kpsdk" in it), and
#: the failed opens: the guest creates /var/log/wtmp first, so that poweroff's open of it (after
#: the guest printed its hist files) does not fail
ARM_DEFINITIONS = [
    "p:myopen do_sys_openat2 dfd=%r0:s32 name=+0(%r1):ustring",
    "r:myopenret do_sys_openat2 ret=$retval:s32",
]
ARM_SETUP = ["mkdir -p /var/log", ": > /var/log/wtmp"]
WORKLOAD_NAMES = 'if name ~ "*kpsdk*"'
ARM_TRIGGERS = [
    ("myopen", f"hist:keys=name,dfd:vals=hitcount:sort=name {WORKLOAD_NAMES}"),
    ("myopen", f"hist:keys=__probe_ip.sym-offset,dfd.hex:vals=hitcount,dfd {WORKLOAD_NAMES}"),
    ("myopenret", "hist:keys=ret,__probe_ret_ip.sym-offset:vals=hitcount:sort=ret.descending if ret < 0"),
    ("myopenret", "hist:keys=ret.log2:vals=hitcount,ret if ret < 0"),
    # one table for both events (name=), each with its own filter: 3 opens and 2 failures
    ("myopen", f"hist:name=kpsdkopens:keys=common_cpu:vals=hitcount {WORKLOAD_NAMES}"),
    ("myopenret", "hist:name=kpsdkopens:keys=common_cpu:vals=hitcount if ret < 0"),
    ("myopen", f"stacktrace {WORKLOAD_NAMES}"),
]
#: refused because of the triggers before them: a named table's name with other keys, a repeat
ARM_LATE = [
    ("myopenret", "hist:name=kpsdkopens:keys=ret:vals=hitcount"),
    ("myopenret", ARM_TRIGGERS[2][1]),
]


def late_errors(console: str) -> list[tuple[str, ...] | None]:
    """Each late case's error_log (three lines without the timestamp), or None (no entry)."""
    out: list[tuple[str, ...] | None] = []
    for m in re.finditer(r"KPSDK-CASE-LATE-(\d+)\n(.*?)(?=KPSDK-CASE-LATE|KPSDK-LATE-END)", console, re.S):
        body = m[2].rstrip("\n")
        assert "KPSDK-ACCEPTED" not in body, (m[1], body)
        lines = body.split("\n") if body else []
        out.append((re.sub(r"^\[\s*[\d.]+\] ", "", lines[0]), lines[1], lines[2]) if len(lines) == 3 else None)
    return out


def test_hist_triggers_match_the_guest_kernels_own_on_arm(
        arch_kernel: Callable[[str], Path], arch_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    """Debian's 6.1 armmp kernel (32-bit: a word of 4 bytes, so a negative s32 key is
    ``(u64)(unsigned long)``, 4294967294, and ``.log2`` of it ``2^32``): the hist files
    kpsdk prints are the guest's own, byte for byte (a table two events share with
    ``name=`` included), the triggers refused because of those before them are refused
    with the same error_log, and each stack entry follows its event."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    image = arch_kernel("arm")
    initrd = arch_initramfs("arm", self_tracing(ARM_DEFINITIONS, ARM_TRIGGERS, setup=ARM_SETUP, late=ARM_LATE))
    out = tmp_path / "trace.txt"
    result = CliRunner().invoke(app, trace_args("arm", image, initrd, out, ARM_DEFINITIONS, ARM_TRIGGERS))
    assert result.exit_code == 0, result.output[-3000:]
    console = "".join(line for line in result.stderr.replace("\r", "").splitlines(keepends=True)
                      if not re.match(r"\[\s*\d+\.\d+\] (?!hist:)", line))
    assert "KPSDK-GUEST-TRACE-END" in console, console[-3000:]
    guest_hist = same_hist_files(console, result.stdout, 6)
    # what the workload did, in the guest's own tables: its three opens, two failing, in one named table
    names = [line for line in guest_hist[0] if line.startswith("{ name: ")]
    assert [line.split()[2] for line in names] == ["/etc/kpsdk-hello", "/etc/kpsdk-hello/sub", "/kpsdk-missing"]
    failed = [line for line in guest_hist[3] if line.startswith("{ ret: ")]
    assert [line.split()[2].rstrip(",") for line in failed] == ["4294967294", "4294967276"], failed
    shared = [block for block in guest_hist if "name=kpsdkopens" in block[2]]
    assert len(shared) == 2 and all("    Hits: 5" in block for block in shared), shared

    # the triggers the guest refused once the others were there: kpsdk refuses them alike
    definitions = {d.event: d for d in map(Parser(kpsdk.get_registry().arch("arm")).parse, ARM_DEFINITIONS)}
    hists: dict[str, list[HistTrigger]] = {}
    named: dict[str, HistTrigger] = {}
    for event, text in ARM_TRIGGERS:
        trigger = parse_trigger(text, definitions[event], 4)
        if isinstance(trigger, HistTrigger):
            added = register(trigger, hists.setdefault(event, []), named, f"hist:kprobes:{event}")
            assert added is trigger
            hists[event].append(trigger)
    guest_late = late_errors(console)
    assert len(guest_late) == len(ARM_LATE) and all(guest_late), console[-3000:]
    for (event, text), guest_log in zip(ARM_LATE, guest_late, strict=True):
        with pytest.raises(TriggerError) as info:
            trigger = parse_trigger(text, definitions[event], 4)
            assert isinstance(trigger, HistTrigger)
            register(trigger, hists[event], named, f"hist:kprobes:{event}")
        log = info.value.error_log
        assert log is not None and tuple(log.split("\n")) == guest_log, (text, guest_log, log)

    # each stack entry right after its event's line, in both traces: the workload's three opens.
    # The guest's arm unwinder stops at its kprobe trampoline (" => 0xbf002030"); kpsdk's frames
    # are checked against the guest's own return events: the caller a call returns to is the
    # frame after the probed function
    guest_trace = between(console, "KPSDK-GUEST-TRACE-BEGIN\n", "KPSDK-GUEST-TRACE-END")
    ours_trace = out.read_text()
    (tmp_path / "guest-trace.txt").write_text(guest_trace)  # kept by pytest for a failure's reader
    for text in (guest_trace, ours_trace):
        lines = text.splitlines()
        after = [lines[i - 1] for i, line in enumerate(lines) if line.endswith("<stack trace>")]
        assert len(after) == 3 and all(" myopen: (" in line and "kpsdk" in line for line in after), \
            (after, text[-6000:])
    callers = {m[1] for m in re.finditer(r" myopenret: \((\S+) <- do_sys_openat2\)", guest_trace)}
    ours_stacks = stacks(ours_trace, "myopen")
    assert len(ours_stacks) == 3 and len(callers) == 1, (ours_stacks, callers)
    for ours in ours_stacks:
        assert ours[0].startswith("do_sys_openat2+0x0/") and ours[1] in callers, (ours, callers)
