"""Any gdbstub, not only QEMU's: gdbserver behind gdb://, native:PROG, pid:PID, a bare-metal board.

Ground truth is each program itself or another target running the same program: Debian's
own /bin/ls and python3 counted against the same runs under qemu-user; programs built
here (tests/gdbstubs/) print what they did (per-thread call counts, a running sum), and
the probes must see the same.  A process kpsdk attached to must go on running after the
detach, its output unchanged and its code bytes identical (read through /proc/PID/mem).
The bare-metal board is QEMU's Cortex-M3 lm3s6965evb, started paused with its gdbstub on
loopback and reached only through gdb://.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import kpsdk
from kpsdk.plugins import uprobes as uprobes_plugin
from kpsdk.targets.live.gdbserver import ptrace_problem
from tests.conftest import require_tool

HERE = Path(__file__).parent / "gdbstubs"
LIBPROGS = Path(__file__).parent / "libprogs"


@pytest.fixture(autouse=True)
def _no_system_wide_leftovers() -> Iterator[None]:
    yield
    for up in list(uprobes_plugin._system.values()):
        kpsdk.unregister_uprobe(up)


def tools() -> None:
    require_tool("gdbserver", "gdbserver")
    require_tool("gdb-multiarch", "gdb-multiarch")


def build(tmp: Path, name: str, *sources: Path, flags: tuple[str, ...] = ()) -> Path:
    out = tmp / name
    cmd = [require_tool("gcc", "gcc"), "-O0", "-g", "-o", str(out), *map(str, sources), *flags]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


class Gdbserver:
    """A gdbserver the test starts itself on loopback (as a user would on a board), for gdb://."""

    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen([require_tool("gdbserver", "gdbserver"), "--once", "127.0.0.1:0", *argv],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        said = b""
        deadline = time.monotonic() + 10
        assert self.proc.stderr is not None
        while b"Listening on port" not in said and time.monotonic() < deadline:
            said += self.proc.stderr.read1(256)
        match = re.search(rb"Listening on port (\d+)", said)
        assert match, said
        self.spec = f"gdb://127.0.0.1:{int(match.group(1))}"

    def output(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)


def count_calls(spec: str, location: str, **options: object) -> tuple[int, kpsdk.Session]:
    hits = [0]
    s = kpsdk.open(spec, **options)  # type: ignore[arg-type]
    s.uprobe(location)(lambda p, r: hits.__setitem__(0, hits[0] + 1))
    assert s.run(timeout=60) == 0
    return hits[0], s


# -- gdbserver behind gdb:// and native:, against qemu-user ------------------------------------------------------


@pytest.mark.parametrize(("argv", "location"), [
    (["/bin/ls", "/usr"], "libc.so.6:malloc"),
    (["/usr/bin/python3", "-S", "-c", "open('/etc/hostname').close();open('/etc/passwd').close()"],
     "libc.so.6:open"),
])
def test_debian_programs_on_gdbserver_count_like_qemu_user(argv: list[str], location: str) -> None:
    """`kpsdk probe --target gdb://HOST:PORT --uprobe libc.so.6:malloc` on a gdbserver running
    Debian's /bin/ls: no --symbols, the program and its bias and libraries learned from the stub."""
    tools()
    require_tool("qemu-x86_64", "qemu-user")
    server = Gdbserver(*argv)
    try:
        remote, s = count_calls(server.spec, location)
        assert s.target.abi_kind == "user" and s.target.real_traps and not s.target.hardware
        main = s.target.mapped_files()[0]
        assert (main.bias != 0) == (main.image.kind == "ET_DYN")  # /bin/ls is a PIE, python3 is not
        assert Path(main.image.path).resolve() == Path(argv[0]).resolve()
        s.close()
    finally:
        server.close()
    native, s = count_calls(f"native:{argv[0]}", location, args=argv[1:])
    s.close()
    emulated, s = count_calls(f"qemu-user:{argv[0]}", location, args=argv[1:])
    s.close()
    assert remote == native == emulated > 0


def test_pie_kprobes_by_symbol_and_a_dlopened_library(tmp_path: Path) -> None:
    """calls.c, a PIE built here: kprobes by symbol in the main program (the bias applied) and a
    uprobe in the library it dlopens, each seen exactly as the program reports."""
    tools()
    prog = build(tmp_path, "calls", LIBPROGS / "calls.c", flags=("-fno-builtin", "-ldl"))
    lib = tmp_path / "libmix.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(LIBPROGS / "mix.c")], check=True, timeout=120)
    server = Gdbserver(str(prog), str(lib))
    try:
        s = kpsdk.open(server.spec, symbols=str(prog))
        notes: list[int] = []
        mixes: list[tuple[int, int]] = []
        s.kprobe("note")(lambda p, r: notes.append(1))
        s.uprobe(f"{lib}:lib_mix")(lambda p, r: mixes.append((r.arg(0), r.arg(1))))
        assert s.target.mapped_files()[0].bias  # a PIE, moved by the stub's auxv
        assert s.run(timeout=60) == 0
        s.close()
        out = server.output()
    finally:
        server.close()
    reported = [tuple(map(int, line.split()[1:3])) for line in out.splitlines() if line.startswith("lib_mix ")]
    assert mixes == reported == [(1, 10), (2, 20), (3, 30)]
    assert len(notes) == len([line for line in out.splitlines() if line != "hello"])  # a note() per line


def test_threads_carry_their_id_and_own_return_instances(tmp_path: Path) -> None:
    """Four threads call work() 5, 10, 15 and 20 times: the hits grouped by the thread id the
    stub reports, entries and returns alike, equal what each thread printed."""
    tools()
    prog = build(tmp_path, "threads", HERE / "threads.c", flags=("-pthread",))
    s = kpsdk.open(f"native:{prog}")
    entries: Counter[int] = Counter()
    returns: Counter[int] = Counter()
    names: set[str] = set()

    def entry(p: kpsdk.Kprobe, r: kpsdk.PtRegs) -> None:
        info = s.target.task_info()
        assert info is not None
        entries[info.pid] += 1
        names.add(info.comm)

    def ret(ri: object, r: kpsdk.PtRegs) -> None:
        info = s.target.task_info()
        assert info is not None
        returns[info.pid] += 1

    s.kprobe("work")(entry)
    s.kretprobe("work")(ret)
    assert s.run(timeout=60) == 0
    printed = {int(tid): int(times) for _, tid, times, _ in (line.split() for line in s.console.splitlines()
                                                             if line.startswith("thread "))}
    s.close()
    assert sorted(printed.values()) == [5, 10, 15, 20]
    assert dict(entries) == dict(returns) == printed
    assert names == {"threads"}


def test_trace_prefix_names_each_thread(tmp_path: Path) -> None:
    """s.trace() on native: each record's TASK-PID is the thread's comm and its own id, as the
    program printed them, and the returns pair with their own thread's entries."""
    tools()
    prog = build(tmp_path, "threads", HERE / "threads.c", flags=("-pthread",))
    s = kpsdk.open(f"native:{prog}")
    try:
        t = s.trace(["p:work work n=%di:s64", "r:workret work r=$retval:s64"])
        assert s.run(timeout=60) == 0
        printed = {int(line.split()[1]): int(line.split()[2]) for line in s.console.splitlines()
                   if line.startswith("thread ")}
    finally:
        s.close()
    by_thread = Counter((r.comm, r.pid) for r in t.records)
    assert by_thread == Counter({("threads", tid): 2 * times for tid, times in printed.items()})


# -- pid: a running process, left running and unmodified ----------------------------------------------------------


def _text_of(pid: int) -> dict[int, bytes]:
    """Every executable mapping of the process, read through /proc/PID/mem."""
    out = {}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "x" in perms and "[vsyscall]" not in line:
                start, end = (int(x, 16) for x in span.split("-"))
                mem.seek(start)
                out[start] = mem.read(end - start)
    return out


def _ticks(text: str) -> list[tuple[int, int]]:
    rows = (line.split() for line in text.splitlines() if line.startswith("tick "))
    return [(int(i), int(acc)) for _, i, acc in rows]


def test_pid_probes_a_running_process_and_leaves_it_as_it_was(tmp_path: Path) -> None:
    tools()
    prog = build(tmp_path, "tick", HERE / "tick.c")
    out = tmp_path / "out"
    with open(out, "wb") as sink:
        proc = subprocess.Popen([str(prog)], stdout=sink, start_new_session=True)
    try:
        time.sleep(0.3)
        before = _text_of(proc.pid)
        s = kpsdk.open(f"pid:{proc.pid}")
        seen: list[int] = []
        returns: list[int] = []
        s.kprobe("step")(lambda p, r: seen.append(r.arg(0)))
        s.kretprobe("step")(lambda ri, r: returns.append(r.return_value))
        s.uprobe("libc.so.6:usleep")(lambda p, r: None)
        assert s.run(timeout=1.5) is None  # still running
        detach = s.target._detach
        s.close()
        assert detach is not None and detach.error is None and detach.checked >= 3
        assert seen == list(range(seen[0], seen[0] + len(seen))) and len(seen) > 50
        assert returns == [3 * i + 1 for i in seen[: len(returns)]] and len(returns) >= len(seen) - 1
        assert proc.poll() is None and "TracerPid:\t0" in Path(f"/proc/{proc.pid}/status").read_text()
        assert _text_of(proc.pid) == before  # every trap removed
        time.sleep(0.5)  # it goes on, its output as without kpsdk
        ticks = _ticks(out.read_text())
        assert ticks[-1][0] > seen[-1]
        assert all(acc == 3 * i * (i + 1) // 2 + i + 1 for i, acc in ticks)
        assert [i for i, _ in ticks] == list(range(0, ticks[-1][0] + 1, 100))
    finally:
        proc.kill()
        proc.wait()


def test_pid_refusals_say_why_and_how() -> None:
    assert "no process 99999999" in (ptrace_problem(99999999) or "")
    me = os.getpid()
    scope1 = ptrace_problem(me, scope=1, euid=os.geteuid() or 4242)
    if os.geteuid() == 0:  # a root test run: another uid is "not yours"
        assert "belongs to uid 0" in (scope1 or "")
        assert ptrace_problem(me, scope=1) is None
    assert "ptrace_scope is 3" in (ptrace_problem(me, scope=3) or "")
    with pytest.raises(kpsdk.TargetError, match="process id"):
        kpsdk.open("pid:12ab")
    with pytest.raises(kpsdk.TargetError, match="own process"):
        kpsdk.open(f"pid:{me}")
    with pytest.raises(kpsdk.TargetError, match="whitespace"):
        kpsdk.open("native:/bin/true", args=["a b"])


def test_scope_one_as_a_plain_user_names_the_sysctl() -> None:
    message = ptrace_problem(os.getpid(), scope=1, euid=os.stat(f"/proc/{os.getpid()}").st_uid or 0)
    if os.geteuid() != 0:
        assert message is not None and "sysctl kernel.yama.ptrace_scope=0" in message and "PR_SET_PTRACER" in message


def test_cli_pid_detaches_at_ctrl_c(tmp_path: Path) -> None:
    tools()
    prog = build(tmp_path, "tick", HERE / "tick.c")
    proc = subprocess.Popen([str(prog)], stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.2)
        before = _text_of(proc.pid)
        cli = subprocess.Popen(["kpsdk", "probe", "--pid", str(proc.pid), "--kprobe", "step"], text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, "PATH": f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"})
        assert cli.stdout is not None
        deadline = time.monotonic() + 60
        lines = []
        while time.monotonic() < deadline and len([x for x in lines if "step+0x0" in x]) < 20:
            lines.append(cli.stdout.readline())
        cli.send_signal(signal.SIGINT)
        rest, _ = cli.communicate(timeout=30)
        assert cli.returncode == 130, "".join(lines) + rest
        assert proc.poll() is None and _text_of(proc.pid) == before
    finally:
        proc.kill()
        proc.wait()


# -- a bare-metal board: no auxv, no libraries, symbols at link addresses --------------------------------------------


def test_bare_metal_cortex_m_through_gdb(tmp_path: Path) -> None:
    qemu = require_tool("qemu-system-arm", "qemu-system-arm")
    cc = require_tool("arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf")
    require_tool("gdb-multiarch", "gdb-multiarch")
    payload = tmp_path / "cortexm.elf"
    subprocess.run([cc, "-mcpu=cortex-m3", "-mthumb", "-mfloat-abi=soft", "-O1", "-nostdlib", "-ffreestanding",
                    "-fno-pic", "-static", "-Wl,--build-id=none", "-T", str(HERE / "cortexm.ld"), "-o", str(payload),
                    str(HERE / "cortexm.c")], check=True, timeout=120)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    board = subprocess.Popen([qemu, "-M", "lm3s6965evb", "-kernel", str(payload), "-display", "none", "-monitor",
                              "none", "-serial", "null", "-S", "-gdb", f"tcp:127.0.0.1:{port}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(0.5)
        s = kpsdk.open(f"gdb://127.0.0.1:{port}", arch="arm", symbols=str(payload))
        assert s.target.abi_kind == "kernel" and s.target.hardware and s.target.mapped_files() == []
        seen: list[int] = []
        returns: list[int] = []

        @s.kprobe("step")
        def entry(p: kpsdk.Kprobe, r: kpsdk.PtRegs) -> None:
            seen.append(r.arg(0))
            if len(seen) == 10:
                s.stop()

        s.kretprobe("step")(lambda ri, r: returns.append(r.return_value))
        assert s.run(timeout=30) is None
        calls = int.from_bytes(s.read_memory(s.symbols.resolve("calls"), 4), "little")
        s.close()
        assert seen == list(range(10)) and returns == [3 * i + 1 for i in range(9)] and calls == 9
    finally:
        board.kill()
        board.wait()
