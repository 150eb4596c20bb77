"""``kpsdk trace`` as a shell command: what it leaves behind when things go wrong.

- ``--out FILE`` is opened (and truncated) only once the definitions, the target and every
  report option were found good: a mistake leaves the file as it was.
- A reader that goes away (``| head``) ends the trace quietly, as ``kpsdk list | head`` does.
- SIGTERM is Ctrl-C: the records so far, the reports (``--profile``, ``--hist``) and the
  console are written, the target (QEMU, gdb, their socket directory) closed, exit 130.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.cli.exits import INTERRUPTED
from tests.conftest import require_tool

runner = CliRunner()
KPSDK = [sys.executable, "-m", "kpsdk.cli"]


@pytest.mark.parametrize("definition", [
    "p:add add a=%di b=$arg0",       # refused by the grammar (Invalid argument number)
    "p:add no_such_function a=%di",  # refused once the target's symbols are known
])
def test_out_is_not_truncated_by_a_run_that_fails(tmp_path: Path, definition: str) -> None:
    out = tmp_path / "trace.txt"
    out.write_text("an earlier trace\n")
    result = runner.invoke(app, ["trace", "x86_64", "-e", definition, "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert out.read_text() == "an earlier trace\n"


def test_an_out_path_that_cannot_be_written_is_a_usage_error_before_the_run(tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "no-such-dir" / "t.txt"):
        result = runner.invoke(app, ["trace", "x86_64", "-e", "p add", "--out", str(path)])
        assert result.exit_code == 2, result.output
        assert "--out" in result.stderr


def test_out_is_refused_when_it_is_an_input(tmp_path: Path) -> None:
    """--out onto the program, a hard or symbolic link to it, a -f file, a file a definition
    probes or a kernel is a usage error before anything is written (issue 36, item 3: --out prog
    turned the program into 706 bytes of text); --plot onto --out's file likewise."""
    from kpsdk.fixtures import path as fixture_path

    prog = tmp_path / "prog"
    prog.write_bytes(fixture_path("x86_64").read_bytes())
    before = prog.read_bytes()
    (tmp_path / "hard").hardlink_to(prog)
    (tmp_path / "soft").symlink_to(prog)
    defs = tmp_path / "defs.txt"
    defs.write_text("p:add add a=%di:s32\n")
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"not really a kernel")
    cases = [
        (["trace", str(prog), "-e", "p add", "--out", str(prog)], "the program"),
        (["trace", str(prog), "-e", "p add", "--out", str(tmp_path / "hard")], "the program"),
        (["trace", str(prog), "-e", "p add", "--out", str(tmp_path / "soft")], "the program"),
        (["trace", str(prog), "-f", str(defs), "--out", str(defs)], "a definitions file"),
        (["trace", str(prog), "-e", f"p {prog}:add", "--out", str(prog)], "the program"),
        (["trace", "x86_64", "-e", f"p:u {tmp_path / 'hard'}:add", "--out", str(prog)], "a file the definitions probe"),
        (["trace", "--target", "qemu-system:x86_64", "--kernel", str(kernel), "-e", "p do_sys_openat2",
          "--out", str(kernel)], "the kernel"),
        (["trace", str(prog), "-e", "p add", "--out", str(tmp_path / "new.png"), "--plot", str(tmp_path / "new.png"),
          "--latency"], "the --out file"),
    ]
    for args, what in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        said = " ".join(result.stderr.replace("│", " ").split())  # the error's box unwrapped
        assert f"is {what}" in said and ("--out" in said or "--plot" in said), said
    assert prog.read_bytes() == before
    assert defs.read_text() == "p:add add a=%di:s32\n"
    assert kernel.read_bytes() == b"not really a kernel"
    assert not (tmp_path / "new.png").exists()
    ok = runner.invoke(app, ["trace", str(prog), "-e", "p add", "--call", "add 2 3", "--out", str(tmp_path / "t.txt")])
    assert ok.exit_code == 0, ok.output
    assert "add" in (tmp_path / "t.txt").read_text()


def test_a_closed_pipe_ends_the_trace_quietly() -> None:
    """20000 lines (a probe in loop's body), far more than a pipe holds: the reader takes one line
    and goes away, and kpsdk stops with no error line and no traceback (exit 1, as click's EPIPE)."""
    proc = subprocess.Popen([*KPSDK, "trace", "x86_64", "-e", "p:it loop+0x26 v=%ax:s32", "--call", "loop 20000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 1
    assert first.startswith(b"# tracer: nop")
    assert err == "", err


def descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (from /proc: QEMU and gdb run in sessions of their own)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier} - out
        out |= frontier
    return out


def test_sigterm_writes_the_reports_and_closes_the_target(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    """A kernel traced until SIGTERM: the lines so far, the kprobe_profile table and the console
    are there, QEMU and gdb are gone, and so is kpsdk's socket directory."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload="while true; do cat /etc/kpsdk-hello; done")
    out = tmp_path / "trace.txt"
    env = {**os.environ, "TMPDIR": str(tmp_path), "COLUMNS": "200"}
    proc = subprocess.Popen([*KPSDK, "trace", "qemu-system:x86_64", "--kernel", str(debian_kernel),
                             "--initrd", str(initrd), "-e", "p:myopen do_sys_openat2 name=+0($arg2):ustring",
                             "--out", str(out), "--profile", "--console", "--duration", "600"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 240
        while not (out.exists() and "cat-" in out.read_text()):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no record from the workload in 240 s"
            time.sleep(0.5)
        children = descendants(proc.pid)
        assert len(children) >= 2, children  # QEMU and gdb
        assert [p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("kpsdk")]  # the socket's
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == INTERRUPTED, stderr.decode()[-2000:]
    assert "kprobe_profile" in stdout.decode() and "myopen" in stdout.decode()
    assert "KPSDK-BEGIN" in stderr.decode()  # the console, printed at the end
    assert "cat-" in out.read_text() and 'name="/etc/kpsdk-hello"' in out.read_text()
    time.sleep(1)
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()], children
    assert not [p for p in tmp_path.iterdir() if p.is_dir() and p.name.startswith("kpsdk")], list(tmp_path.iterdir())


@pytest.mark.parametrize(("definition", "hist", "code", "expect"), [
    ("p:o do_sys_opnat2 name=+0($arg2):ustring", "name", 1, "unknown symbol 'do_sys_opnat2'"),
    ("p:o do_sys_openat2 name=+0($arg2):ustrin", "name", 1, "Unknown type"),
    ("p:o do_sys_openat2 name=+0($arg2):ustring", "name", 2, "histogram needs integers"),
    ("p:o do_sys_openat2 dfd=$arg1:s32", "nosuch", 2, "no event's field"),
])
def test_a_kernel_definition_or_report_option_is_refused_before_qemu_starts(
        debian_kernel: Path, tmp_path: Path, definition: str, hist: str, code: int, expect: str) -> None:
    """With no QEMU on PATH, what the run would reach first is "qemu-system-x86_64 not found":
    getting the definition's (or --hist's) error instead shows it was checked before."""
    env = {**os.environ, "PATH": str(tmp_path), "COLUMNS": "200"}
    proc = subprocess.run([*KPSDK, "trace", "qemu-system:x86_64", "--kernel", str(debian_kernel), "-e", definition,
                           "--hist", hist], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == code, proc.stderr
    assert expect in proc.stderr and "not found" not in proc.stderr, proc.stderr
    if code == 1:  # the kernel's error_log, with its caret
        assert "Command: " + definition in proc.stderr and "^" in proc.stderr


def test_plot_format_follows_the_suffix(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    base = ["trace", "x86_64", "-e", "p:put put v=%si:s64", "--hist", "v", "--no-prefix"]
    svg, pdf, gif = tmp_path / "h.svg", tmp_path / "h.pdf", tmp_path / "h.gif"
    assert runner.invoke(app, [*base, "--plot", str(svg)]).exit_code == 0
    assert runner.invoke(app, [*base, "--plot", str(pdf)]).exit_code == 0
    assert svg.read_text().lstrip().startswith("<?xml") and "<svg" in svg.read_text()
    assert pdf.read_bytes().startswith(b"%PDF-")
    refused = runner.invoke(app, [*base, "--plot", str(gif)])
    assert refused.exit_code == 2 and not gif.exists() and refused.stdout == ""  # refused before the run
