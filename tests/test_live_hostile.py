"""Live targets under hostile conditions.

A QEMU that stalls (``SIGSTOP``) or recovers, gdbstubs that answer garbage, go
silent or close, user input that tries to reach gdb or a shell as a command,
file names gdb must carry as they are, and the socket directories of host
processes that were killed.  Each ends in the run going on or in a typed error
within a bounded time, with gdb and QEMU reaped.

The stall tests stop QEMU from inside a probe handler: gdb is then waiting for
QEMU in the middle of the hit's packet exchange, the moment that used to put
gdb out of step with qemu-user for good.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.targets.live.target import HALT_TIMEOUT, GdbTarget
from tests.conftest import require_tool
from tests.fakestub import ErrorStub, FakeStub, StubProxy
from tests.test_live import children_of_this_process, open_live

#: what a user might slip into a spec, a path or an option, hoping for a shell or a gdb command
INJECTIONS = ("| touch F", ";touch F", "\nshell touch F", "`touch F`", "$(touch F)")


def args_on_unicorn(name: str) -> list[int]:
    """The first argument of every call of ``name``, seen on Unicorn: what a live run must see too."""
    seen: list[int] = []
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        s.register_kprobe(kpsdk.Kprobe(symbol_name=name, pre_handler=lambda p, r: seen.append(r.arg(0))))
        assert s.run(timeout=30) == 0
    return seen


@pytest.fixture
def thaw() -> Iterator[list[threading.Timer]]:
    """Timers that continue a stopped QEMU; cancelled when the test ends."""
    timers: list[threading.Timer] = []
    yield timers
    for timer in timers:
        timer.cancel()


def freeze_qemu(s: kpsdk.Session, at_hit: int, seen: list[int], thaw_after: float | None = None,
                timers: list[threading.Timer] | None = None) -> kpsdk.Probe:
    """A kprobe on inc that records its argument and stops QEMU (SIGSTOP) at hit ``at_hit``;
    with ``thaw_after``, a timer continues QEMU that many seconds later."""
    qemu = s.target.processes[0]

    def pre(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        seen.append(regs.arg(0))
        if p.hits == at_hit:
            os.kill(qemu.pid, signal.SIGSTOP)
            if thaw_after is not None and timers is not None:
                timers.append(threading.Timer(thaw_after, os.kill, (qemu.pid, signal.SIGCONT)))
                timers[-1].start()
        return 0

    return s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=pre))


# -- a target that stalls: resume, or a typed error within the stall limit or the timeout ------------


def test_a_target_frozen_for_less_than_the_stall_limit_resumes(thaw: list[threading.Timer]) -> None:
    """7 s is more than gdb's old 3 s packet timeout: gdb sent the packet again and lost step."""
    expected = args_on_unicorn("inc")
    seen: list[int] = []
    with open_live("x86_64") as s:
        freeze_qemu(s, 3, seen, thaw_after=7.0, timers=thaw)
        started = time.monotonic()
        assert s.run(timeout=25) == 0
        assert time.monotonic() - started < 20
        assert seen == expected
        assert s.console == fixtures.EXPECTED_OUTPUT


def test_a_target_frozen_longer_than_the_stall_limit_fails_and_is_reaped() -> None:
    before = children_of_this_process()
    s = open_live("x86_64", stall_limit=2)
    freeze_qemu(s, 3, [])
    started = time.monotonic()
    with pytest.raises(kpsdk.TargetStalled, match=r"qemu-x86_64 \(pid \d+\) has been stopped"):
        s.run()  # no timeout: the stall limit bounds it
    assert time.monotonic() - started < 2 + 3
    assert children_of_this_process() <= before  # gdb killed, QEMU reaped
    with pytest.raises(kpsdk.TargetError, match="closed"):
        s.run()
    s.close()


def test_run_timeout_is_kept_while_the_target_is_frozen() -> None:
    before = children_of_this_process()
    s = open_live("x86_64")  # the default stall limit is far longer than the timeout
    freeze_qemu(s, 3, [])
    started = time.monotonic()
    with pytest.raises(kpsdk.TargetStalled, match="cannot be halted for the timeout"):
        s.run(timeout=2)
    assert time.monotonic() - started < 2 + 3  # no halt is tried on a stopped QEMU: teardown only
    assert children_of_this_process() <= before
    s.close()


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "5", True])
def test_a_stall_limit_that_is_not_a_positive_number_is_refused(bad: object) -> None:
    before = children_of_this_process()
    with pytest.raises(kpsdk.TargetError, match="stall_limit must be a positive number"):
        open_live("x86_64", stall_limit=bad)
    assert children_of_this_process() <= before  # the QEMU already started is reaped


# -- gdbstubs that misbehave ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["garbage", "silent", "close"])
def test_a_stub_that_is_not_one_fails_within_seconds(mode: str) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    stub = FakeStub(mode)
    before = children_of_this_process()
    started = time.monotonic()
    with pytest.raises(kpsdk.TargetError, match="cannot attach to the gdbstub"):
        kpsdk.open(f"gdb://127.0.0.1:{stub.port}", arch="x86_64")
    assert time.monotonic() - started < 15
    assert children_of_this_process() <= before
    stub.close()


def test_a_stub_that_answers_a_continue_with_an_error_ends_the_run() -> None:
    """gdb reports a stop nobody caused after each error reply; resuming it looped forever."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    stub = ErrorStub()
    before = children_of_this_process()
    s = kpsdk.open(f"gdb://127.0.0.1:{stub.port}", arch="x86_64")
    started = time.monotonic()
    with pytest.raises(kpsdk.TargetError, match="lost step with the gdbstub .*Remote failure reply: E01"):
        s.run()
    assert time.monotonic() - started < 10
    assert children_of_this_process() <= before
    s.close()
    stub.close()


@pytest.fixture
def proxied_qemu(tmp_path: Path) -> Iterator[StubProxy]:
    """qemu-user running the x86_64 fixture, its gdbstub reached through a StubProxy."""
    qemu = require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    sock = tmp_path / "gdb.sock"
    proc = subprocess.Popen([qemu, "-g", str(sock), str(fixtures.path("x86_64"))], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not sock.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    proxy = StubProxy(sock)
    yield proxy
    proxy.close()
    proc.kill()
    proc.wait(timeout=10)


def open_proxied(proxy: StubProxy, **options: object) -> kpsdk.Session:
    return kpsdk.open(f"gdb://127.0.0.1:{proxy.port}", symbols=str(fixtures.path("x86_64")), abi="user",
                      **options)


def turn_at_hit(s: kpsdk.Session, proxy: StubProxy, mode: str) -> None:
    """At inc's third hit the proxy starts to ``mode`` the traffic."""

    def pre(p: kpsdk.Probe, regs: kpsdk.regs.PtRegs) -> int:
        if p.hits == 3:
            proxy.mode = mode
        return 0

    s.register_kprobe(kpsdk.Kprobe(symbol_name="inc", pre_handler=pre))


@pytest.mark.parametrize(("options", "timeout", "error"), [
    ({"stall_limit": 2}, None, "gdb has not answered for 2 s"),  # gdb stuck on the stub: the ping goes unanswered
    ({}, 2, "did not stop within"),  # the timeout comes first
])
def test_a_stub_that_freezes_mid_hit_fails_within_bounds(proxied_qemu: StubProxy, options: dict[str, object],
                                                         timeout: float | None, error: str) -> None:
    before = children_of_this_process()
    s = open_proxied(proxied_qemu, **options)
    gdb = s.target.mi.proc
    turn_at_hit(s, proxied_qemu, "freeze")
    started = time.monotonic()
    with pytest.raises(kpsdk.TargetStalled, match=error):
        s.run(timeout=timeout)
    # the stall limit, then a ping and a last wait; or the timeout, then the halt's wait: and a
    # teardown that takes ~0.5 s on an idle machine, seconds on a loaded 2-core one
    limit = 2 + 5 if timeout is None else 2 + HALT_TIMEOUT + 2
    assert time.monotonic() - started < limit
    assert gdb.poll() is not None and children_of_this_process() <= before
    s.close()


@pytest.mark.parametrize(("mode", "error"), [("garbage", kpsdk.TargetError), ("close", kpsdk.TargetExited)])
def test_a_stub_that_garbles_or_closes_mid_run_fails_within_seconds(proxied_qemu: StubProxy, mode: str,
                                                                   error: type[Exception]) -> None:
    before = children_of_this_process()
    s = open_proxied(proxied_qemu, stall_limit=2)
    turn_at_hit(s, proxied_qemu, mode)
    started = time.monotonic()
    with pytest.raises(error):
        s.run()
    assert time.monotonic() - started < 2 + 5
    assert children_of_this_process() <= before
    s.close()


# -- nothing a user passes reaches a shell or gdb as a command ---------------------------------------


@pytest.mark.parametrize("injection", INJECTIONS)
def test_a_gdb_spec_must_be_exactly_host_and_port(injection: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    monkeypatch.chdir(tmp_path)  # where gdb's shell would create F
    for spec in (f"gdb://{injection}", f"gdb://127.0.0.1:1234{injection}", f"gdb://localhost{injection}:1234"):
        with pytest.raises(kpsdk.TargetError, match=r"gdb:// wants HOST:PORT"):
            kpsdk.open(spec, arch="x86_64")
    assert not (tmp_path / "F").exists()


@pytest.mark.parametrize("remote", ["127.0.0.1:0", "127.0.0.1:65536", "[::1%eth0]:1234", "[::1]x:1234",
                                    "1.2.3:1234", "-host:1234", "host:+1234", ":1234", "host:"])
def test_a_gdb_spec_with_a_bad_host_or_port_is_refused(remote: str) -> None:
    with pytest.raises(kpsdk.TargetError, match="gdb:// wants HOST:PORT"):
        kpsdk.open(f"gdb://{remote}", arch="x86_64")


@pytest.mark.parametrize("remote", ["localhost", "127.0.0.1", "[::1]"])
def test_a_gdb_spec_with_a_good_host_reaches_gdb(remote: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing listens on port 1: the error is gdb's failure to connect, not the check's (the
    look at this host's listening ports is skipped, so that gdb is asked)."""
    require_tool("gdb-multiarch", "gdb-multiarch")
    monkeypatch.setattr("kpsdk.targets.live.gdbremote.loopback_listeners", lambda: None)
    with pytest.raises(kpsdk.TargetError, match=re.escape(f"cannot attach to the gdbstub at {remote}:1")):
        kpsdk.open(f"gdb://{remote}:1", arch="x86_64")


def copy_fixture(directory: Path, name: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(fixtures.path("x86_64"), path)
    return path


@pytest.mark.parametrize("injection", INJECTIONS)
def test_a_program_path_is_data_for_qemu_and_gdb(injection: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A program with such a name runs like any other; a line break cannot be given to gdb at all."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(kpsdk.TargetError, match="cannot read|control character"):
        kpsdk.open(f"qemu-user:./none{injection}")
    prog = copy_fixture(tmp_path / "bin", f"prog{injection}")
    if "\n" in injection:
        with pytest.raises(kpsdk.TargetError, match="control character"):
            kpsdk.open(f"qemu-user:{prog}")
    else:
        run_fact(f"qemu-user:{prog}")
    assert not (tmp_path / "F").exists() and not (tmp_path / "bin" / "F").exists()


def run_fact(spec: str) -> None:
    """Open ``spec`` (the x86_64 fixture), probe fact and check what the run saw."""
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    with kpsdk.open(spec) as s:
        seen: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=lambda p, r: seen.append(r.arg(0))))
        assert s.run(timeout=30) == 0
        assert seen == [5, 4, 3, 2, 1]
        assert s.console == fixtures.EXPECTED_OUTPUT


@pytest.mark.parametrize("name", ["dir with space/prog.elf", "it's \"quoted\" \\ too/prog $x.elf",
                                  "-starts-like-an-option"])
def test_program_paths_with_spaces_and_quotes_work(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    copy_fixture(tmp_path, name)
    run_fact(f"qemu-user:{name}")  # relative, as a user types it


@pytest.mark.parametrize("injection", INJECTIONS)
def test_a_symbol_file_path_is_data_for_gdb(injection: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_tool("gdb-multiarch", "gdb-multiarch")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("kpsdk.targets.live.gdbremote.loopback_listeners", lambda: None)  # gdb is asked
    symbols = copy_fixture(tmp_path, f"syms{injection}")
    # gdb loads the symbols before it connects: nothing listens on port 1, so attaching fails after that
    with pytest.raises(kpsdk.TargetError, match="cannot attach|control character"):
        kpsdk.open("gdb://127.0.0.1:1", symbols=str(symbols))
    assert not (tmp_path / "F").exists()


def test_qemu_system_options_are_argv_not_a_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kernel=, initrd= and append= travel in QEMU's argv: QEMU refuses the junk kernel, nothing runs."""
    require_tool("qemu-system-x86_64", "qemu-system-x86")
    require_tool("gdb-multiarch", "gdb-multiarch")
    monkeypatch.chdir(tmp_path)
    system_map = tmp_path / "System.map"
    system_map.write_text("ffffffff81000000 T start_kernel\n")
    for injection in INJECTIONS:
        kernel = tmp_path / f"vmlinuz{injection}"
        kernel.write_bytes(b"not a kernel")
        with pytest.raises(kpsdk.TargetError, match="exited with status"):
            kpsdk.open("qemu-system:x86_64", kernel=str(kernel), initrd=str(kernel), append=f"quiet {injection}",
                       symbols=str(system_map))
    assert not (tmp_path / "F").exists()


@pytest.mark.parametrize("env", [{"A": "1,LD_PRELOAD=/tmp/x.so"}, {"A,B": "1"}, {"A=B": "1"}, {"": "1"}])
def test_qemu_user_env_that_qemu_would_split_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(kpsdk.TargetError, match="cannot set the environment variable"):
        kpsdk.open(f"qemu-user:{fixtures.path('x86_64')}", env=env)


def test_names_from_an_arch_plugin_that_are_not_plain_are_refused() -> None:
    """Register and architecture names come from plugins and go into gdb commands unquoted."""
    arch = kpsdk.get_registry().arch("x86_64")
    bad_reg = dataclasses.replace(arch.registers[0], gdb="rax\nshell touch F")
    for bad in (dataclasses.replace(arch, registers=(bad_reg, *arch.registers[1:])),
                dataclasses.replace(arch, gdb_arch="i386:x86-64\nshell touch F")):
        with pytest.raises(kpsdk.TargetError, match="not a plain name"):
            GdbTarget(bad, "127.0.0.1:1")


def test_the_cli_refuses_a_gdb_spec_with_a_shell_command(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kpsdk.cli", "probe", "--target", "gdb://| touch F", "--arch",
                           "x86_64", "--kprobe", "add"], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "error: gdb:// wants HOST:PORT, not '| touch F' (HOST: a host name, an IPv4 address or an [IPv6] "
        "address; PORT: 1-65535)"]
    assert not (tmp_path / "F").exists()


# -- socket directories left by killed processes -------------------------------------------------


def spawn(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True, **kwargs)  # type: ignore[call-overload]


@pytest.fixture
def own_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of its own for this process and its children (TMPDIR)."""
    base = tmp_path / "tmp"
    base.mkdir()
    monkeypatch.setenv("TMPDIR", str(base))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    return base


def killed_session_dir(base: Path) -> tuple[Path, int]:
    """Open a qemu-user session in another process and SIGKILL that process: its socket
    directory stays.  Returns the directory and the dead process's pid."""
    code = ("import os, sys, time, kpsdk; s = kpsdk.open('qemu-user:' + sys.argv[1]); "
            "print(s.target.mi.proc.pid, s.target.processes[0].pid, flush=True); time.sleep(60)")
    host = spawn([sys.executable, "-c", code, str(fixtures.path("x86_64"))],
                 cwd=Path(__file__).resolve().parents[1])
    assert host.stdout is not None
    orphans = [int(pid) for pid in host.stdout.readline().split()]
    host.kill()
    host.wait(timeout=10)
    end_processes(orphans)  # its gdb and QEMU, which outlive it
    left = list(base.glob(f"kpsdk-{host.pid}-*"))
    assert len(left) == 1, sorted(p.name for p in base.iterdir())
    return left[0], host.pid


def end_processes(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_socket_directories_of_killed_sessions_are_removed_at_the_next_start(own_tmpdir: Path) -> None:
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    stale, dead = killed_session_dir(own_tmpdir)
    sleeper = subprocess.Popen(["sleep", "60"])
    kept: list[Path] = []
    try:
        kept.append(own_tmpdir / f"kpsdk-{sleeper.pid}-live")  # a running process's: in use
        kept[-1].mkdir()
        victim = own_tmpdir / "victim"  # a symlink named like a stale directory is not followed
        victim.mkdir()
        (victim / "keep").write_text("x")
        kept.append(own_tmpdir / f"kpsdk-{dead}-link")
        kept[-1].symlink_to(victim)
        if os.getuid() == 0:  # another user's directory (only root can make one here)
            kept.append(own_tmpdir / f"kpsdk-{dead}-other")
            kept[-1].mkdir()
            os.chown(kept[-1], 65534, 65534)
        with open_live("x86_64") as s:
            assert not stale.exists()
            assert all(os.path.lexists(path) for path in kept) and (victim / "keep").exists()
            mine = list(own_tmpdir.glob(f"kpsdk-{os.getpid()}-*"))
            assert len(mine) == 1 and (mine[0] / "gdb.sock").exists()
            assert s.run(timeout=30) == 0
        assert not mine[0].exists()  # a session removes its own when it closes
    finally:
        sleeper.kill()
        sleeper.wait()

