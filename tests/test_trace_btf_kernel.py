"""BTF fetch arguments against the kernel itself: Debian 13's 6.12 amd64 kernel, two boots.

- The definitions: a boot of the guest alone writes each definition of :data:`CASES` into its own
  ``kprobe_events`` (one at a time, then cleared) and prints ``error_log``; kpsdk, with the
  version and the BTF it reads from the same ``vmlinuz``, must accept what the kernel accepted
  and refuse the rest with the same ``error_log`` lines (message, command, caret).  (The guest
  alone: with kpsdk's breakpoints on the opens each case costs seconds.)
- The events: the guest defines :data:`TRACED`, runs the default workload with its events
  enabled and prints its ``trace`` file, while ``kpsdk trace`` traces the same definitions from
  outside through QEMU's gdbstub: every event body the guest recorded must be in kpsdk's output,
  byte for byte, in the same order and with no line between them (parameter names and their BTF
  types, ``$arg*`` and ``$argN`` expanded to the parameters, ``->`` chains, ``:string`` on a
  ``char *`` and a ``char[]``, ``$retval`` typed by the function's return type, ``:%pd``).

Not compared, with the reason: a member read through a pointer that faults prints ``(fault)`` in
kpsdk and whatever the kernel's buffer held in the kernel (``$retval->f_mode`` of a failed open),
so no definition here dereferences an ``ERR_PTR``; two return probes on one function (the kernel
prints ``[unknown/kretprobe'd]`` for all but one caller); ``f:`` fprobe events (kpsdk refuses them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk.cli import app
from kpsdk.errors import TraceDefinitionError
from kpsdk.fixtures import kernel
from kpsdk.kernel.version import kernel_version
from kpsdk.trace.btfsyntax import kernel_btf_args
from kpsdk.trace.grammar import Parser
from tests.conftest import require_tool

pytestmark = pytest.mark.kernel

#: traced by the guest and by kpsdk in the same boot (at most one return probe per function)
TRACED = [
    "p:btf_names do_sys_openat2 dfd filename how",
    "p:btf_star do_sys_openat2 $arg*",
    "p:btf_argn do_sys_openat2 $arg2:ustring $arg1:x16 x=$arg3",
    "p:btf_members do_sys_openat2 how->flags how->mode:x32 fn=filename:ustring",
    "r:btf_ret do_sys_openat2 $retval filename:ustring how->flags",
    "p:btf_chain vfs_open path->dentry->d_name.name:string path->dentry->d_iname:string len=path->dentry->d_name.len",
    "p:btf_dentry vfs_open path->dentry:%pd file",
    "p:btf_filename do_filp_open pathname->name:string dfd",
    "r:btf_filp do_filp_open $retval",
]
#: written into the guest's kprobe_events one at a time: the same acceptance, the same error_log
CASES = [
    *TRACED,
    "p:c do_sys_openat2 nosuch", "p:c do_sys_openat2+4 filename", "p:c do_sys_openat2 $arg* $arg*",
    "p:c do_sys_openat2 x=$arg*", "p:c do_sys_openat2 $arg9", "p:c do_sys_openat2 how.flags",
    "p:c do_sys_openat2 how-flags", "p:c do_sys_openat2 dfd->x", "p:c do_sys_openat2 how->nosuch",
    "p:c do_sys_openat2 dfd:string", "r:c do_sys_openat2 $retval->x", "r:c kfree $retval",
    "p:c do_sys_openat2 $argx", "p:c do_sys_openat2 filename $arg*", "p:c schedule $arg*",
    "p:c do_sys_openat2 $arg1 $arg*", "p:c do_sys_openat2 $arg0", "p:c do_sys_openat2 $arg2x",
    "p:c do_sys_openat2 how->flags.x", "p:c vfs_read file->f_path.dentry.x", "p:c do_sys_openat2 how->",
    "p:c do_sys_openat2 filename $retval", "r:c do_sys_openat2 $retvalx", "p:c do_sys_openat2 $arg",
    "p:c do_sys_openat2+4 $arg*", "p:c do_sys_openat2 $arg1:string", "p:c do_sys_openat2 filename->x",
    "p:c do_sys_openat2 how->flags:string", "r:c do_sys_openat2 $retval:string",
    "p:c vfs_read file->f_path.dentry->d_name.name->x->y->z->aaaaaaaaaaaaaaaaaaaaa",
    "p:c kernel_clone args->kthread args->io_thread args->exit_signal", "p:c vfs_open file:%pD",
    "p:c do_sys_openat2 $arg*:x32", "p:c do_sys_openat2 %di filename", "p:c do_sys_openat2 $comm filename",
]
TRACING = "/sys/kernel/tracing"
BODY = re.compile(r"^\s*.+?-\d+\s+\[\d{3}\] \S{5}\s+\d+\.\d{6}: (?P<body>.*)$")


def cases_script() -> tuple[str, dict[str, str]]:
    """The guest's /init for the definitions: each case from a file (no shell quoting), its answer."""
    files = {f"/cases/{i}": case for i, case in enumerate(CASES)}
    lines = [f"mount -t tracefs nodev {TRACING}", "echo KPSDK-UNAME $(uname -r)"]
    for i in range(len(CASES)):
        lines += [f"echo KPSDK-CASE-{i}", f"echo > {TRACING}/error_log",
                  f"cat /cases/{i} >> {TRACING}/kprobe_events 2>/dev/null && echo KPSDK-ACCEPTED",
                  f"cat {TRACING}/error_log", f"echo > {TRACING}/kprobe_events"]
    return "\n".join([*lines, "echo KPSDK-CASES-END"]), files


def trace_script() -> tuple[str, dict[str, str]]:
    """The guest's /init for the events: define them, run the workload traced, print the trace file."""
    files = {f"/traced/{i}": d for i, d in enumerate(TRACED)}
    lines = [f"mount -t tracefs nodev {TRACING}", f"echo 0 > {TRACING}/tracing_on",
             *(f"cat /traced/{i} >> {TRACING}/kprobe_events" for i in range(len(TRACED))),
             f"echo 1 > {TRACING}/events/kprobes/enable", f"echo > {TRACING}/trace", f"echo 1 > {TRACING}/tracing_on",
             kernel.DEFAULT_WORKLOAD.rstrip("\n"), f"echo 0 > {TRACING}/tracing_on",
             "echo KPSDK-GUEST-TRACE-BEGIN", f"cat {TRACING}/trace", "echo KPSDK-GUEST-TRACE-END"]
    return "\n".join(lines), files


def guest_answers(console: str) -> dict[int, tuple[str, ...] | None]:
    """Case number -> None (accepted) or the error_log's three lines without the timestamp."""
    body = console.split("KPSDK-CASES-END", 1)[0]
    out: dict[int, tuple[str, ...] | None] = {}
    for m in re.finditer(r"KPSDK-CASE-(\d+)\n(.*?)(?=KPSDK-CASE-|\Z)", body, re.S):
        if "KPSDK-ACCEPTED" in m[2]:
            out[int(m[1])] = None
            continue
        lines = m[2].rstrip("\n").split("\n")
        assert len(lines) == 3, m[2]
        out[int(m[1])] = (re.sub(r"^\[\s*[\d.]+\] ", "", lines[0]), lines[1], lines[2])
    return out


def bodies(text: str) -> list[str]:
    return [m["body"] for line in text.splitlines() if (m := BODY.match(line))]


def test_definitions_are_taken_or_refused_as_6_12_does(debian_kernel_612: Path,
                                                       kernel_initramfs: Callable[..., Path]) -> None:
    """The guest alone (kpsdk's breakpoints on every open would cost seconds per case), then
    kpsdk's grammar with the version and BTF of the same image."""
    version = kernel_version(debian_kernel_612)
    assert version is not None and version >= (6, 12)
    script, files = cases_script()
    result = kernel.boot(debian_kernel_612, kernel_initramfs(workload=script, files=files), timeout=400)
    uname = re.search(r"KPSDK-UNAME (\d+)\.(\d+)", result.console)
    assert uname is not None and (int(uname[1]), int(uname[2])) == version, result.console[-2000:]
    guest = guest_answers(result.console)
    assert sorted(guest) == list(range(len(CASES))), result.console[-3000:]
    assert all(guest[i] is None for i in range(len(TRACED)))
    assert sum(answer is not None for answer in guest.values()) > 25
    arch = kpsdk.get_registry().arch("x86_64")
    parser = Parser(arch, kernel=version, btf=kernel_btf_args(debian_kernel_612, arch))
    for i, case in enumerate(CASES):
        try:
            parser.parse(case)
            ours = None
        except TraceDefinitionError as exc:
            ours = tuple(exc.error_log.rstrip("\n").split("\n")[-3:])
        assert ours == guest[i], (case, guest[i], ours)


def test_event_bodies_match_the_guests_own_trace(
        debian_kernel_612: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    script, files = trace_script()
    initrd = kernel_initramfs(workload=script, files=files)
    out = tmp_path / "trace.txt"
    args = ["trace", "qemu-system:x86_64", "--kernel", str(debian_kernel_612), "--initrd", str(initrd),
            "--console", "--duration", "600", "--no-prefix", "--out", str(out)]
    for d in TRACED:
        args += ["-e", d]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    console = result.stderr.replace("\r", "")
    assert "KPSDK-GUEST-TRACE-END" in console, console[-3000:]
    # the guest's bodies are one run of kpsdk's, in order, byte for byte
    guest_text = console.split("KPSDK-GUEST-TRACE-BEGIN\n", 1)[1].split("KPSDK-GUEST-TRACE-END", 1)[0]
    theirs = bodies(guest_text)
    ours_all = [line for line in out.read_text().splitlines() if line and not line.startswith("#")]
    events = {d.split()[0].split(":")[1] for d in TRACED}
    assert {b.split(":")[0] for b in theirs} == events, guest_text[-3000:]
    assert any('filename="/etc/kpsdk-hello"' in b for b in theirs) and any('"kpsdk-hello"' in b for b in theirs)
    starts = [i for i in range(len(ours_all) - len(theirs) + 1) if ours_all[i:i + len(theirs)] == theirs]
    assert len(starts) == 1, "\n".join(["guest:", *theirs, "--- kpsdk:", *ours_all])
