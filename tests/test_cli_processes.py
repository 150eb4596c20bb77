"""A program's processes from the command line (issue 33): ``kpsdk probe`` and ``kpsdk trace`` on
the embedded default with no time limit, ``--bind``, ``--follow``/``--no-follow`` and ``--filter
'common_pid == N'`` on a pipeline.

Each test compares with the same program run natively: its output, the bytes it writes on the
host, its system calls as strace counts them per process (``-f`` or not).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.targets.unicorn.linux.syscalls import PID

runner = CliRunner()
BUSYBOX = Path("/bin/busybox")
SH = "/bin/sh"
WRITE = ["--uprobe", "libc.so.6:write"]


def need_busybox() -> None:
    if not BUSYBOX.exists():
        message = f"{BUSYBOX} not found: install the Debian package busybox-static"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def program_output(result) -> str:
    """``kpsdk probe``'s "program output" section, without the hit lines printed among its lines
    (as they happen)."""
    out = result.stdout
    start = out.index("program output")
    body = out[out.index("\n", start) + 1:]
    return "".join(line for line in body[:body.index("exit status")].splitlines(keepends=True)
                   if not re.match(r"\[\d+\] ", line))


def native(*argv: str, cwd: Path | None = None) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, cwd=cwd).stdout


# -- no time limit by default -----------------------------------------------------------------------

#: a shell loop of N turns
LOOP_OF = "i=0; while [ $i -lt {n} ]; do i=$((i+1)); done; echo $i"
LOOP = LOOP_OF.format(n=130000)


def _loop_lasting(seconds: float) -> str:
    """A shell loop that runs about ``seconds`` in kpsdk on this machine: its speed measured on a
    short one first (a fixed count took 9-11 s on a loaded 2-core machine, 4 s on an idle one)."""
    import kpsdk

    turns = 20000
    start = time.monotonic()
    with kpsdk.open(f"elf:{SH}", args=["-c", LOOP_OF.format(n=turns)]) as s:
        assert s.run() == 0
    per_turn = (time.monotonic() - start) / turns
    return LOOP_OF.format(n=int(seconds / per_turn))


def test_a_long_program_runs_to_its_end_without_a_time_limit() -> None:
    """The embedded default has no default time limit: a program that runs longer than 5 s
    ends as it does natively (exit 0, its output), where it was stopped before."""
    loop = _loop_lasting(9)
    start = time.monotonic()
    result = runner.invoke(app, ["probe", *WRITE, "--", SH, "-c", loop])
    took = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert program_output(result) == native(SH, "-c", loop)
    assert "did not exit" not in result.output
    assert took > 5, f"the loop took {took:.1f} s: make it longer, it must outlast the old 5 s default"


def test_timeout_still_stops_a_program() -> None:
    result = runner.invoke(app, ["probe", *WRITE, "--timeout", "0.5", "--", SH, "-c", LOOP])
    assert result.exit_code == 1, result.output
    assert "did not exit within 0.5 s" in result.output


def test_the_help_says_there_is_no_default_limit_in_unicorn() -> None:
    for command, option in (("probe", "--timeout"), ("trace", "--duration")):
        result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "300"})
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        assert "default: none in Unicorn" in text, (command, option)


# -- --bind -----------------------------------------------------------------------------------------

SCRIPT = "printf 'one\\ntwo\\0three' > {d}/out; echo more >> {d}/out; mkdir {d}/sub; cp {d}/out {d}/sub/copy"


def test_a_rw_bind_writes_the_same_bytes_as_a_native_run(tmp_path: Path) -> None:
    need_busybox()
    mine, theirs = tmp_path / "kpsdk", tmp_path / "native"
    mine.mkdir()
    theirs.mkdir()
    result = runner.invoke(app, ["probe", *WRITE, "--bind", f"{mine}:/out", "--",
                                 str(BUSYBOX), "sh", "-c", SCRIPT.format(d="/out")])
    assert result.exit_code == 0, result.output
    native(str(BUSYBOX), "sh", "-c", SCRIPT.format(d=str(theirs)))
    for name in ("out", "sub/copy"):
        assert (mine / name).read_bytes() == (theirs / name).read_bytes()
    assert sorted(p.name for p in mine.rglob("*")) == sorted(p.name for p in theirs.rglob("*"))


def test_a_ro_bind_refuses_writes_with_erofs(tmp_path: Path) -> None:
    """A write into a ``:ro`` bind fails with EROFS, as in a read-only bind mount; the host's
    directory is unchanged and its file is read as it is."""
    need_busybox()
    (tmp_path / "in.txt").write_bytes(b"host bytes\n")
    script = "cat /in/in.txt; echo x > /in/new; echo rc=$?"
    result = runner.invoke(app, ["probe", *WRITE, "--strace", "--bind", f"{tmp_path}:/in:ro", "--",
                                 str(BUSYBOX), "sh", "-c", script])
    assert result.exit_code == 0, result.output
    out = program_output(result)
    assert out.startswith("host bytes\n")
    assert "Read-only file system" in out and out.endswith("rc=1\n")
    assert re.search(r'open(at)?\(.*"/in/new", .*= -1 EROFS', result.stderr), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("value, words", [
    ("/no/such/dir:/x", "does not exist"),
    ("{d}", "want HOST_DIR:GUEST_DIR"),
    (":/x", "want HOST_DIR:GUEST_DIR"),
    ("{d}:", "want HOST_DIR:GUEST_DIR"),
    ("{d}:relative", "absolute path"),
    ("{d}:/a/../b", "absolute path"),
    ("{d}:/x:rx", "'rx' is not a mode"),
    ("{d}:/x:RO", "'RO' is not a mode"),
])
def test_a_bad_bind_is_a_usage_error(tmp_path: Path, value: str, words: str) -> None:
    result = runner.invoke(app, ["probe", *WRITE, "--bind", value.format(d=tmp_path), "--", "/bin/true"],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "--bind" in result.output and words in " ".join(result.output.split())


def test_a_host_directory_may_hold_colons(tmp_path: Path) -> None:
    from kpsdk.cli.parsing import parse_bind

    host = tmp_path / "a:b"
    host.mkdir()
    assert parse_bind(f"{host}:/x") == (str(host), "/x", "rw")
    assert parse_bind(f"{host}:/x:ro") == (str(host), "/x", "ro")
    (host / "f").write_bytes(b"through a colon\n")
    result = runner.invoke(app, ["probe", *WRITE, "--bind", f"{host}:/in:ro", "--", "/bin/cat", "/in/f"])
    assert result.exit_code == 0, result.output
    assert program_output(result) == native("/bin/cat", str(host / "f"))


def test_overlapping_binds_and_live_targets_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    nested = runner.invoke(app, ["probe", *WRITE, "--bind", f"{tmp_path}:/x", "--bind", f"{tmp_path}/in:/x/y",
                                 "--", "/bin/true"], env={"COLUMNS": "300"})
    assert nested.exit_code == 2 and "overlap" in nested.output, nested.output
    for target in ("qemu-user:/bin/true", "native:/bin/true", "unicorn:x86_64"):
        result = runner.invoke(app, ["probe", target, *WRITE, "--bind", f"{tmp_path}:/x"], env={"COLUMNS": "300"})
        assert result.exit_code == 2, (target, result.output)
        assert "--bind goes with an ELF run in Unicorn" in result.output


# -- -f / --follow, --no-follow ----------------------------------------------------------------------

#: the first process writes (a builtin echo), then a pipeline's two children and a third do
PIPELINE = "echo first; echo a | tr a-z A-Z; /bin/echo c; echo last"
HIT = re.compile(r"^\[\d+\] (?:(\S+)-(\d+) )?write\+0x0 ", re.M)


def hits_per_process(output: str) -> list[int]:
    """Hits per process, in the order the processes first hit (a hit before the program's second
    task has no comm-pid: it is the first process's, pid PID)."""
    counts: Counter[str] = Counter()
    for m in HIT.finditer(output):
        counts[m.group(2) or str(PID)] += 1
    return list(counts.values())


def strace_writes(follow: bool) -> list[int]:
    """write(2) calls per process of the pipeline, natively, as strace counts them (-f or not)."""
    tool = shutil.which("strace")
    if tool is None:
        pytest.skip("strace not found: install the Debian package strace")
    out = subprocess.run([tool, *(["-f"] if follow else []), "-qq", "-e", "trace=write", "-e", "signal=none",
                          SH, "-c", PIPELINE], capture_output=True, text=True, check=True).stderr
    counts: Counter[str] = Counter()
    for line in out.splitlines():
        m = re.match(r"(?:\[pid +(\d+)\] )?write\(", line)
        if m:
            counts[m.group(1) or "first"] += 1
    return list(counts.values())


def test_follow_is_the_default_and_counts_every_process_as_strace_f() -> None:
    result = runner.invoke(app, ["probe", *WRITE, "--", SH, "-c", PIPELINE])
    assert result.exit_code == 0, result.output
    assert program_output(result) == native(SH, "-c", PIPELINE)
    assert sorted(hits_per_process(result.stdout)) == sorted(strace_writes(follow=True))
    same = runner.invoke(app, ["probe", *WRITE, "--follow", "--", SH, "-c", PIPELINE])
    assert hits_per_process(same.stdout) == hits_per_process(result.stdout)
    assert len(hits_per_process(result.stdout)) == 4  # the shell, tr, echo's child... every process


def test_no_follow_fires_in_the_first_process_only_as_strace_without_f() -> None:
    result = runner.invoke(app, ["probe", *WRITE, "--no-follow", "--", SH, "-c", PIPELINE])
    assert result.exit_code == 0, result.output
    assert program_output(result) == native(SH, "-c", PIPELINE)  # the children still run
    assert {m.group(2) or str(PID) for m in HIT.finditer(result.stdout)} == {str(PID)}  # the first's only
    assert hits_per_process(result.stdout) == strace_writes(follow=False)
    assert re.search(r"u libc.so.6:write: 2 hits", result.stdout), result.stdout


def native_forks() -> int:
    """The processes the pipeline's shell itself makes by fork(3), natively (strace without -f: glibc's
    fork is a clone; dash's vfork of a simple command is another function)."""
    tool = shutil.which("strace")
    if tool is None:
        pytest.skip("strace not found: install the Debian package strace")
    out = subprocess.run([tool, "-qq", "-e", "trace=clone,clone3,fork", "-e", "signal=none", SH, "-c",
                          PIPELINE], capture_output=True, text=True, check=True).stderr
    return len(re.findall(r"^(clone3?|fork)\(", out, re.M))


def test_a_forks_return_in_the_child_is_followed_or_not() -> None:
    """A uretprobe on libc's fork: with -f its returns come from the shell (the child's pid) and
    from each child (0), the child returning through its copy of the call as Linux's
    uprobe_copy_process copies it; with --no-follow only the shell's, as many as it forks natively."""
    forks = native_forks()
    assert forks >= 2
    ret = re.compile(r"^\[\d+\] (\S+)-(\d+) r libc.so.6:fork ret=(\d+)$", re.M)
    followed = runner.invoke(app, ["probe", "--uretprobe", "libc.so.6:fork", "--", SH, "-c", PIPELINE])
    assert followed.exit_code == 0, followed.output
    returns = [(int(pid), int(value)) for _, pid, value in ret.findall(followed.stdout)]
    parent = [value for pid, value in returns if pid == PID]
    assert len(parent) == forks and all(value > PID for value in parent)
    assert sorted(pid for pid, value in returns if pid != PID) == sorted(parent)  # each child returns 0
    assert all(value == 0 for pid, value in returns if pid != PID)
    alone = runner.invoke(app, ["probe", "--no-follow", "--uretprobe", "libc.so.6:fork", "--", SH, "-c", PIPELINE])
    assert alone.exit_code == 0, alone.output
    assert [(int(pid), int(value)) for _, pid, value in ret.findall(alone.stdout)] == [(PID, v) for v in parent]
    assert f"{forks} returns" in alone.stdout


def test_no_follow_is_refused_on_a_live_target() -> None:
    result = runner.invoke(app, ["probe", "qemu-user:/bin/true", *WRITE, "--no-follow"], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert "--no-follow needs a program run in Unicorn" in " ".join(result.output.split())


def test_follow_false_in_the_api_filters_kretprobes_too() -> None:
    """``kpsdk.open(..., follow=False)``: a uretprobe's returns come from the first process only,
    as many as strace without -f counts its writes."""
    import kpsdk

    uretprobe = kpsdk.get_registry().probe_types["uretprobe"].probe_class
    for follow in (True, False):
        pids: Counter[int] = Counter()
        with kpsdk.open(f"elf:{SH}", args=["-c", PIPELINE], follow=follow) as s:
            def count(ri: object, regs: object, s: kpsdk.Session = s, pids: Counter[int] = pids) -> None:
                pids[s.target.current_task()] += 1

            s.register(uretprobe.parse("libc.so.6:write", handler=count))
            assert s.run(timeout=60) == 0
        assert sorted(pids.values()) == sorted(strace_writes(follow))


def test_follow_must_be_a_bool() -> None:
    import kpsdk

    with pytest.raises(kpsdk.ArgumentError, match="follow must be True or False"):
        kpsdk.open(f"elf:{SH}", follow="no")  # type: ignore[typeddict-item]


# -- kpsdk trace --filter 'common_pid == N' on a pipeline ----------------------------------------------

TRACE_WRITE = ["-e", "p:w libc.so.6:write fd=$arg1 n=$arg3:u64"]
RECORD = re.compile(r"^\s*(\S+)-(\d+)\s+\[\d+\] \S+\s+[\d.]+: (w: .*)$", re.M)


def trace_records(*options: str) -> list[tuple[str, int, str]]:
    """(comm, pid, event body) of each record of the pipeline's trace (the timestamp left out)."""
    result = runner.invoke(app, ["trace", *TRACE_WRITE, *options, "--", SH, "-c", PIPELINE])
    assert result.exit_code == 0, result.output
    return [(m.group(1), int(m.group(2)), m.group(3)) for m in RECORD.finditer(result.stdout)]


def strace_write_sizes() -> list[tuple[int, ...]]:
    """The sizes of each process's write(2) calls, natively (strace -f), one tuple per process."""
    tool = shutil.which("strace")
    if tool is None:
        pytest.skip("strace not found: install the Debian package strace")
    out = subprocess.run([tool, "-f", "-qq", "-e", "trace=write", "-e", "signal=none", SH, "-c", PIPELINE],
                         capture_output=True, text=True, check=True).stderr
    sizes: dict[str, list[int]] = {}
    for line in out.splitlines():
        m = re.match(r"(?:\[pid +(\d+)\] )?write\(\d+, .*, (\d+)\)", line)
        if m:
            sizes.setdefault(m.group(1) or "first", []).append(int(m.group(2)))
    return sorted(tuple(v) for v in sizes.values())


def test_a_pid_filter_keeps_exactly_that_processs_records() -> None:
    everything = trace_records()
    by_pid: dict[int, list[str]] = {}
    for _, pid, body in everything:
        by_pid.setdefault(pid, []).append(body)
    # the unfiltered trace shows each process's writes as the native run makes them
    assert sorted(tuple(int(b.rsplit("n=", 1)[1]) for b in bodies) for bodies in by_pid.values()) \
        == strace_write_sizes()
    assert len(by_pid) == 4
    for pid, bodies in by_pid.items():
        mine = trace_records("--filter", f"common_pid == {pid}")
        assert {p for _, p, _ in mine} == {pid}
        assert [b for _, _, b in mine] == bodies
    others = trace_records("--filter", f"common_pid != {PID}")
    assert [b for _, p, b in others] == [b for _, p, b in everything if p != PID]


# -- /proc/PID of every emulated process ---------------------------------------------------------------

PROC_SCRIPT = ("sleep 1 & p=$!; sleep 0.2; echo \"pid=$p ppid=$$\"; "
               "echo cmdline; tr '\\0' ' ' < /proc/$p/cmdline; echo; echo comm; cat /proc/$p/comm; "
               "echo status; tr '\\t' '|' < /proc/$p/status; echo stat; cat /proc/$p/stat; "
               "echo self; cat /proc/$$/comm; echo none; cat /proc/2147483646/status 2>&1; echo rc=$?; "
               "echo list; ls /proc | grep -E '^[0-9]+$'; wait")


def proc_sections(out: str) -> dict[str, str]:
    """The script's output cut at its section words (a line of one word, then what it printed)."""
    sections: dict[str, str] = {}
    name = "head"
    for line in out.splitlines():
        if line in ("cmdline", "comm", "status", "stat", "self", "none", "list"):
            name = line
            continue
        sections[name] = sections.get(name, "") + line + "\n"
    return sections


def test_a_process_reads_its_childs_proc_files_as_on_linux() -> None:
    """``/proc/$!/cmdline``, ``comm``, ``status`` and ``stat`` of a child the shell started, and
    ``/proc/$$`` of the shell itself: the same structure as natively, the same command line,
    name, state and parentage; a pid of no process is ENOENT; ``ls /proc`` lists the emulated
    processes."""
    need_busybox()
    result = runner.invoke(app, ["probe", "--strace", "--", str(BUSYBOX), "sh", "-c", PROC_SCRIPT])
    assert result.exit_code == 0, result.output
    mine = proc_sections(program_output(result))
    theirs = proc_sections(subprocess.run([str(BUSYBOX), "sh", "-c", PROC_SCRIPT], capture_output=True,
                                          text=True).stdout)
    for name in ("cmdline", "comm", "self"):
        assert mine[name] == theirs[name], name
    assert mine["cmdline"] == "sleep 1 \n"
    pid, ppid = (int(w.split("=")[1]) for w in mine["head"].split())

    def fields(text: str) -> dict[str, str]:
        return dict(line.split(":|", 1) for line in text.splitlines())  # tabs made '|' (the console expands tabs)

    status, native_status = fields(mine["status"]), fields(theirs["status"])
    keys = [k for k in native_status if k in status]
    assert keys == list(status), "the lines Linux has, in its order"
    assert {"Name", "State", "Pid", "PPid", "Tgid", "Uid", "Gid", "Threads"} <= set(status)
    for key in ("Name", "State", "Umask", "Ngid", "TracerPid", "Threads", "Uid", "Gid", "Groups"):
        assert status[key] == native_status[key], key
    assert (int(status["Pid"]), int(status["PPid"]), int(status["Tgid"])) == (pid, ppid, pid)
    stat, native_stat = mine["stat"].split(), theirs["stat"].split()
    assert len(stat) == len(native_stat) == 52
    assert stat[1:3] == native_stat[1:3] == ["(sleep)", "S"]
    assert (int(stat[0]), int(stat[3])) == (pid, ppid)
    assert mine["none"] == theirs["none"] \
        == "cat: can't open '/proc/2147483646/status': No such file or directory\nrc=1\n"  # ENOENT
    # /proc's listing: the shell, its child, and the lister's own processes (ls, grep), as natively;
    # only the emulated processes (the host's are not there)
    listed = {int(n) for n in mine["list"].split()}
    native_pid, native_ppid = (int(w.split("=")[1]) for w in theirs["head"].split())
    assert {native_pid, native_ppid} <= {int(n) for n in theirs["list"].split()}
    assert {pid, ppid} <= listed and len(listed) == 4 and all(PID <= n < PID + 20 for n in listed), listed
