"""epoll, eventfd, timerfd, signalfd and sockets on the embedded default, against a native run.

tests/programs/sockets.c exercises one thing per mode between a parent, its forked children
and threads (epoll's triggers, ready-list order, nesting, fork sharing and signals; eventfd's
counter and semaphore; timerfd on three clocks; signalfd's records and pending sets; AF_UNIX
stream, datagram and seqpacket sockets with Linux's buffer limits, names in the file system,
abstract names and SCM_RIGHTS; TCP and UDP on the loopback with refusals, resets, non-blocking
connects, IPv6 and dual-stack) and prints only what Linux decides: the same text on every
arch.  The ground truth is the x86_64 build run natively on this machine; every arch's build
under kpsdk must print it byte for byte.  qemu-user is no oracle here: it takes a 4-byte
signalfd mask and a socket type of 99, never sets MSG_CTRUNC, and runs slowly enough to
change what a periodic timer counts (checked for i386, arm, riscv64, ppc64, aarch64, ppc64le).

Real programs: busybox ``httpd`` serves a file to busybox ``wget`` over the emulated
loopback in one session; python3's ``socket.socketpair``, a threaded TCP echo server,
``create_connection`` (a non-blocking connect and poll) and ``selectors`` (epoll) print what
they print natively.  And what a guest never reaches: another host's address, netlink, a
listening socket file of the host; and random arguments to every call, which must end in a
result or an errno.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from tests.conftest import REGISTERED_ARCHS, native_outputs, require_tool, static_builds

SOURCE = Path(__file__).parent / "programs" / "sockets.c"
#: the arches the Linux layer runs and kpsdk builds for
#: (MIPS's Linux ABI lists none of these calls yet: its O_NONBLOCK, and so SOCK_NONBLOCK, EFD_NONBLOCK and
#: TFD_NONBLOCK, and its socket types are other numbers; docs/api/linux.md's limitations say so)
LINUX_ARCHS = tuple(a.name for a in REGISTERED_ARCHS
                    if a.syscalls is not None and a.syscalls.linux is not None and a.toolchain is not None
                    and not a.unicorn_unsupported and "socket" in a.syscalls.linux.calls)
MODES = ("epoll", "eventfd", "timerfd", "signalfd", "unix", "tcp", "udp")

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="the native ground truth is an x86_64 run")


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build(arch)``: sockets.c, static with -pthread, for ``arch`` (once per module)."""
    return static_builds(tmp_path_factory, SOURCE, "sockets")


@pytest.fixture(scope="module")
def native(build: Callable[[str], Path]) -> Callable[[str], tuple[str, int]]:
    """The x86_64 build's output and status, run natively: what every arch must print."""
    return native_outputs(build)


def emulated(exe: Path, args: list[str]) -> tuple[str, int | None]:
    with kpsdk.open(f"elf:{exe}", args=args) as s:
        status = s.run(timeout=600)
        return s.console, status


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_sockets_print_what_linux_decides(build: Callable[[str], Path], native: Callable[[str], tuple[str, int]],
                                          arch: str, mode: str) -> None:
    expected, status = native(mode)
    assert status == 0 and expected  # the ground truth itself ran
    assert emulated(build(arch), [mode]) == (expected, status)


def test_a_guest_never_reaches_the_hosts_network(build: Callable[[str], Path], tmp_path: Path) -> None:
    """Every address off the loopback is unreachable, netlink and packet sockets do not exist
    (and are recorded), and a host's listening socket file refuses: the guest's sockets are
    the session's alone."""
    path = tmp_path / "host.sock"
    host = socket.socket(socket.AF_UNIX)
    host.bind(str(path))
    host.listen()
    try:
        with kpsdk.open(f"elf:{build('x86_64')}", args=["offline", str(path)]) as s:
            assert s.run(timeout=120) == 0
            assert s.console == ("TCP to 8.8.8.8: ENETUNREACH; UDP to 192.168.1.1: ENETUNREACH; "
                                 "TCP to 2001:db8::1: ENETUNREACH\n"
                                 "AF_NETLINK: EAFNOSUPPORT; AF_PACKET: EAFNOSUPPORT\n"
                                 "a host's listening socket file: ECONNREFUSED\n")
            assert s.syscalls_unimplemented == {"socket(AF_NETLINK)": 1, "socket(AF_PACKET)": 1}
    finally:
        host.close()


@pytest.mark.parametrize(("arch", "seed"), [("x86_64", "1"), ("i386", "2")])
def test_random_arguments_end_in_results_or_errnos(build: Callable[[str], Path], arch: str, seed: str) -> None:
    """3,000 socket, epoll, eventfd, timerfd and signalfd calls with random arguments (bad
    addresses, lengths, flags, descriptors; i386's through socketcall): every one returns, no
    Python error escapes the layer, nothing waits."""
    if arch not in LINUX_ARCHS:
        pytest.skip(f"{arch} is not built here")
    with kpsdk.open(f"elf:{build(arch)}", args=["fuzz", seed]) as s:
        assert s.run(timeout=900) == 0
        assert s.console == "fuzzed\n"


def busybox() -> str:
    found = shutil.which("busybox", path="/usr/bin:/bin")
    if found is None:
        require_tool("busybox", "busybox-static")
    assert found is not None
    return os.path.realpath(found)


def test_busybox_httpd_serves_a_file_to_wget(tmp_path: Path) -> None:
    """httpd listens on 127.0.0.1:8080 in the background, wget fetches the file: the bytes
    the program writes are the file's (served with sendfile to the socket)."""
    served = tmp_path / "www"
    served.mkdir()
    data = os.urandom(20000).hex().encode()
    (served / "file").write_bytes(data)
    script = (f"busybox httpd -f -p 127.0.0.1:8080 -h {served} & sleep 0.1; "
              "busybox wget -q -O - http://127.0.0.1:8080/file; kill %1")
    with kpsdk.open(f"elf:{busybox()}", args=["sh", "-c", script]) as s:
        assert s.run(timeout=600) == 0
        assert bytes(s.target._console) == data  # type: ignore[attr-defined]
        assert not s.syscalls_unimplemented


PYTHON = r'''
import errno, selectors, socket, threading
a, b = socket.socketpair()
a.sendall(b"over the pair")
print(b.recv(100))
a.close()
print(b.recv(100), b.family.name, b.type.name)
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen()
port = srv.getsockname()[1]
def serve():
    for _ in range(2):
        c, addr = srv.accept()
        with c:
            while data := c.recv(1024):
                c.sendall(data.upper())
t = threading.Thread(target=serve)
t.start()
for msg in (b"hello", b"world"):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
        peer = c.getpeername()
        c.sendall(msg)
        c.shutdown(socket.SHUT_WR)
        print(c.recv(100), peer[0], peer[1] == port)
t.join()
srv.close()
try:
    socket.create_connection(("127.0.0.1", port), timeout=5)
except ConnectionRefusedError as e:
    print("refused", e.errno == errno.ECONNREFUSED)
sel = selectors.DefaultSelector()
r, w = socket.socketpair()
sel.register(r, selectors.EVENT_READ)
w.send(b"x")
print(type(sel).__name__, [(k.fileobj is r, m) for k, m in sel.select(1)])
'''


def test_python_socketpair_and_a_threaded_tcp_echo_server() -> None:
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        require_tool("python3", "python3")
    assert python is not None
    python = os.path.realpath(python)
    with kpsdk.open(f"elf:{python}", args=["-c", PYTHON]) as s:
        status = s.run(timeout=900)
        emulated_out = bytes(s.target._console)  # type: ignore[attr-defined]
    native_run = subprocess.run([python, "-c", PYTHON], capture_output=True, timeout=120, check=False)
    assert emulated_out == native_run.stdout + native_run.stderr
    assert status == native_run.returncode == 0
