"""``--strace`` (kpsdk.cli.strace.StracePrinter) against the real strace(1) and qemu-user's ``-strace``.

Ground truth: the same static program (tests/programs/linuxprog.c, built here) run
natively under Debian's strace, with the same arguments, input and file, must print
the same lines for the calls whose text does not depend on where memory is (open,
read, write, close, exit), byte for byte.  On the other architectures qemu-user's own
``-strace`` decodes the open flags of each architecture: kpsdk must name the same ones.
"""

from __future__ import annotations

import ast
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kpsdk
from kpsdk.cli.strace import STRING_LIMIT, StracePrinter, quoted
from kpsdk.events import SyscallEvent
from tests.conftest import QEMU, require_tool
from tests.test_linux_programs import BUSYBOX, LINUX_ARCHS, build  # noqa: F401 - the module fixture

#: the calls compared with strace: their text holds no address
COMPARED = ("openat", "read", "write", "close", "exit_group")
#: bytes strace escapes each its own way (octal short and long, C escapes, quote, backslash)
AWKWARD = b'one\ttwo "quoted" back\\slash\x01\x7f9\x00\xc3\xa9\x1b7\nthe second line is longer than 32 bytes\n'


def kpsdk_strace(prog: Path, args: list[str], stdin: bytes, sysroot: str) -> tuple[list[str], kpsdk.Session]:
    out = io.StringIO()
    printer = StracePrinter(out)
    registry = kpsdk.get_registry()
    registry.pm.register(printer)
    try:
        with kpsdk.open(f"elf:{prog}", args=args, stdin=stdin, sysroot=sysroot) as s:
            s.run(timeout=60)
    finally:
        registry.pm.unregister(printer)
    return out.getvalue().splitlines(), s


def need_busybox() -> None:
    if not BUSYBOX.exists():
        message = f"{BUSYBOX} not found: install the Debian package busybox-static"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def only(lines: list[str], names: tuple[str, ...]) -> list[str]:
    return [line for line in lines if line.split("(", 1)[0] in names or line.startswith("+++")]


def test_lines_equal_the_real_strace(build, tmp_path: Path) -> None:  # noqa: F811
    strace = require_tool("strace", "strace")
    prog = build("x86_64")
    data = tmp_path / "data.txt"
    data.write_bytes(AWKWARD)
    args, stdin = [str(data), "2"], b"a line of input\n\x02\n"
    log = tmp_path / "strace.log"
    native = subprocess.run([strace, "-q", "-s", str(STRING_LIMIT), "-e", "trace=" + ",".join(COMPARED), "-o",
                             str(log), str(prog), *args], input=stdin, capture_output=True, timeout=60, check=False)
    assert native.returncode == 42, native.stderr
    expected = only(log.read_text().splitlines(), COMPARED)
    seen, _ = kpsdk_strace(prog, args, stdin, "/")
    assert only(seen, COMPARED) == expected
    assert any(line.startswith(f'openat(AT_FDCWD, "{data}", O_RDONLY) = 3') for line in seen)
    assert seen[-1] == "+++ exited with 42 +++"


#: calls whose arguments the decoded comparison checks but not their result, and why: the Linux
#: layer answers them otherwise than this host's kernel
ARGS_ONLY = {
    "socket": "the layer makes no socket: ENOSYS",
}
HEX = re.compile(r"\b0x[0-9a-f]{5,}\b")


def calls_section(lines: list[str], data: Path, pids: dict[str, str]) -> list[str]:
    """linuxprog's ``calls`` part of a trace (from its open of ``data`` to that descriptor's
    close), with what differs between two runs made alike: addresses (``0x...``, five hex
    digits or more) and the pids (``pids``: the number -> a name), signal deliveries (strace's
    ``---`` lines) left out, and the result cut off where :data:`ARGS_ONLY` says."""
    start = lines.index(f'openat(AT_FDCWD, "{data}", O_RDONLY) = 3')
    end = lines.index("close(3)                                = 0", start)
    out = []
    for line in lines[start:end + 1]:
        if line.startswith("---"):
            continue
        for number, name in pids.items():
            line = re.sub(rf"\b{number}\b", name, line)
        text, _, result = HEX.sub("0xADDR", line).rpartition(" = ")
        if any(text.startswith(key + ("(" if "(" not in key else "")) for key in ARGS_ONLY):
            result = "..."
        out.append(f"{text.rstrip()} = {result}")  # the column moved with the addresses' lengths
    return out


def test_decoded_calls_equal_the_real_strace(build, tmp_path: Path) -> None:  # noqa: F811
    """What --strace decodes as strace does (issue 36, item 19), line for line against the real
    strace running the same static program natively: the stat family's struct stat and AT_*
    flags, access modes, open modes in octal, mmap and mprotect flags, fcntl commands and
    results, ioctl requests (named and _IOC), signals, signal sets and struct sigaction, clone's
    flags, wait statuses and options, socket families, types and protocols."""
    strace = require_tool("strace", "strace")
    prog = build("x86_64")
    data = tmp_path / "data.txt"
    data.write_bytes(b"one line\n")
    data.chmod(0o644)
    args = [str(data), "1", "calls"]
    log = tmp_path / "strace.log"
    native = subprocess.run([strace, "-q", "-s", str(STRING_LIMIT), "-o", str(log), str(prog), *args], input=b"",
                            capture_output=True, timeout=60, check=False)
    assert native.returncode == 42, native.stderr

    def pids(output: str) -> dict[str, str]:
        said = dict(line.split(" ", 1) for line in output.splitlines() if line.startswith(("pid ", "child ")))
        return {said["pid"]: "PID", said["child"]: "CHILD"}

    expected = calls_section(log.read_text().splitlines(), data, pids(native.stdout.decode()))
    seen, s = kpsdk_strace(prog, args, b"", "/")
    ours = calls_section(seen, data, pids(s.console))
    assert ours == expected
    assert len(expected) > 50
    for decoded in ("{st_mode=S_IFREG|0644, st_size=9, ...}, AT_EMPTY_PATH) = 0",
                    "AT_SYMLINK_NOFOLLOW|AT_NO_AUTOMOUNT", "R_OK", "F_OK", "AT_EACCESS",
                    "O_WRONLY|O_CREAT|O_EXCL, 0600) = -1 EEXIST", "O_NOFOLLOW, 04751", "umask(022) = 027",
                    "MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE|MAP_STACK", "PROT_NONE", "PROT_READ|PROT_EXEC",
                    "= 0x1 (flags FD_CLOEXEC)", "= 0x8800 (flags O_RDONLY|O_NONBLOCK|O_LARGEFILE)",
                    "F_DUPFD_CLOEXEC", "TCGETS", "TIOCGWINSZ", "_IOC(_IOC_NONE, 0x56",
                    "sa_mask=[TERM RT_4], sa_flags=SA_RESTORER|SA_RESTART", "~[RTMIN RT_1]", "kill(PID, SIGUSR2)",
                    "flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD", "[{WIFEXITED(s) && WEXITSTATUS(s) == 3}]",
                    "WNOHANG", "socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP)"):
        assert any(decoded in line for line in ours), decoded


def test_results_the_layer_gives_otherwise_print_as_strace_prints_them() -> None:
    """The results :data:`ARGS_ONLY` leaves out of the comparison, fed to the printer as the host's
    kernel answered them; the expected lines are the real strace's (6.1, the run above)."""
    out = io.StringIO()
    printer = StracePrinter(out)
    call = SyscallEvent(0, "socket", (2, 0x80001, 0, 0, 0, 0), 0)
    session = kpsdk.open("unicorn:x86_64")
    try:
        printer.kpsdk_syscall_entry(session, call)
        call.result = 4
        printer.kpsdk_syscall_exit(session, call)
    finally:
        session.close()
    assert out.getvalue().splitlines() == ["socket(AF_INET, SOCK_STREAM|SOCK_CLOEXEC, IPPROTO_IP) = 4"]


def test_busybox_ls_lines_equal_the_real_strace(tmp_path: Path) -> None:
    """opendir's flags (O_DIRECTORY...), a failed open and its errno text, close and exit."""
    strace = require_tool("strace", "strace")
    need_busybox()
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "f").write_text("x")
    args = ["ls", "-l", str(tmp_path / "d"), str(tmp_path / "missing")]
    log = tmp_path / "strace.log"
    names = ("openat", "close", "exit_group")
    subprocess.run([strace, "-q", "-e", "trace=" + ",".join(names), "-o", str(log), str(BUSYBOX), *args],
                   capture_output=True, timeout=60, check=False)
    expected = only(log.read_text().splitlines(), names)
    seen, s = kpsdk_strace(BUSYBOX, args, b"", "/")
    assert only(seen, names) == expected
    assert any("ENOENT (No such file or directory)" in line for line in seen)
    assert any(line.startswith("getdents64(3, ") for line in seen)
    assert "sub" in s.console


QEMU_OPENAT = re.compile(r'\d+ openat\(AT_FDCWD,"(?P<path>[^"]*)",(?P<flags>[A-Z_|]+)')


@pytest.mark.parametrize("arch", [a for a in LINUX_ARCHS if a != "x86_64"])
def test_open_flags_are_the_architectures_own(arch: str, build, tmp_path: Path) -> None:  # noqa: F811
    """qemu-user -strace names each architecture's O_* bits (arm and powerpc differ from
    asm-generic, 32-bit glibc adds O_LARGEFILE): kpsdk names the same for the same open."""
    qemu = require_tool(QEMU[arch], "qemu-user")
    prog = build(arch)
    root = tmp_path / "root"
    root.mkdir()
    (root / "data.txt").write_text("one line\n")
    traced = subprocess.run([qemu, "-strace", "-L", str(root), str(prog), "/data.txt", "1"], input=b"",
                            capture_output=True, timeout=60, check=False)
    theirs = [m.group("flags") for m in QEMU_OPENAT.finditer(traced.stderr.decode() + traced.stdout.decode())
              if m.group("path") == "/data.txt"]
    assert len(theirs) == 1, traced.stderr.decode()[-2000:]
    seen, _ = kpsdk_strace(prog, ["/data.txt", "1"], b"", str(root))
    ours = [line for line in seen if line.startswith('openat(AT_FDCWD, "/data.txt", ')]
    assert len(ours) == 1, seen
    flags = ours[0].split(", ")[2].split(")")[0]
    assert set(flags.split("|")) == set(theirs[0].split("|"))
    assert ours[0].endswith(") = 3")


def test_cli_prints_calls_to_stderr_and_needs_no_probe(tmp_path: Path) -> None:
    need_busybox()
    (tmp_path / "hello").write_text("hi")
    done = subprocess.run([sys.executable, "-m", "kpsdk", "probe", str(BUSYBOX), "--arg", "cat", "--arg", "/hello",
                           "--sysroot", str(tmp_path), "--strace"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r'^openat\(AT_FDCWD, "/hello", O_RDONLY\) +\= 3$', done.stderr, re.M), done.stderr
    assert "hi" in done.stdout and "openat(" not in done.stdout
    assert "+++ exited with 0 +++" in done.stderr


def test_cli_refuses_strace_on_a_live_target() -> None:
    done = subprocess.run([sys.executable, "-m", "kpsdk", "probe", "--target", "qemu-user:/bin/true", "--strace"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})
    assert done.returncode == 2
    assert "--strace needs a program run in Unicorn" in done.stderr
    assert "Traceback" not in done.stderr


@given(st.binary(max_size=80))
def test_quoted_strings_read_back_as_the_same_bytes(data: bytes) -> None:
    """Every escape strace's quoting makes is a C (and Python bytes) escape: read back, the
    text is the bytes shown, and ``...`` says exactly when some were left out."""
    text = quoted(data)
    more = text.endswith("...")
    body = text[:-3] if more else text
    assert ast.literal_eval("b" + body) == data[:STRING_LIMIT]
    assert more == (len(data) > STRING_LIMIT)
    assert os.linesep not in body
