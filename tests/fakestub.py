"""Hostile gdbstubs for the live-target tests: a TCP server on loopback that answers gdb
with garbage, with nothing, or closes at once; a stub that gets through gdb's handshake
and then answers a continue with an error; and a proxy in front of a real qemu-user
gdbstub that can be told, mid-run, to freeze, to garble what the stub says, or to close.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from pathlib import Path

#: what a FakeStub does with a connection
STUB_MODES = ("garbage", "silent", "close")
#: what a StubProxy does with the traffic (switch with ``proxy.mode = ...``)
PROXY_MODES = ("pass", "freeze", "garbage", "error", "close")


class _Server:
    """A loopback TCP server that hands each connection to ``serve`` on its own thread."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def serve(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self._closed.set()
        self.listener.close()
        for conn in self.connections:
            conn.close()


class FakeStub(_Server):
    """Not a gdbstub: ``garbage`` answers every read with random bytes (and speaks first),
    ``silent`` reads and never answers, ``close`` closes each connection at once."""

    def __init__(self, mode: str) -> None:
        assert mode in STUB_MODES
        self.mode = mode
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        if self.mode == "close":
            conn.close()
            return
        try:
            if self.mode == "garbage":
                conn.sendall(os.urandom(64))
            while conn.recv(4096):
                if self.mode == "garbage":
                    conn.sendall(os.urandom(64))
        except OSError:
            pass


def packet(payload: bytes) -> bytes:
    """One remote-protocol packet: ``$payload#checksum``."""
    return b"$" + payload + b"#" + b"%02x" % (sum(payload) & 0xFF)


class ErrorStub(_Server):
    """An x86_64 gdbstub that answers gdb's handshake like a stopped target, then
    answers every continue or step with an error (``E01``) where a stop reply belongs."""

    ANSWERS = {b"qSupported": b"PacketSize=4000;vContSupported+", b"vMustReplyEmpty": b"", b"qTStatus": b"",
               b"?": b"S05", b"qAttached": b"1", b"H": b"OK", b"qfThreadInfo": b"m1", b"qsThreadInfo": b"l",
               b"qC": b"QC1", b"qOffsets": b"", b"qSymbol": b"OK", b"g": b"00" * 560, b"m": b"00" * 8,
               b"vCont?": b"vCont;c;C;s;S", b"vCont;": b"E01", b"c": b"E01", b"s": b"E01", b"p": b"00" * 8}

    def serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while data := conn.recv(4096):
                buf += data
                while b"#" in buf[buf.find(b"$"):]:
                    start = buf.find(b"$")
                    end = buf.index(b"#", start)
                    payload, buf = buf[start + 1:end], buf[end + 3:]
                    answer = next((v for k, v in self.ANSWERS.items() if payload.startswith(k)), b"")
                    conn.sendall(b"+" + packet(answer))
        except OSError:
            pass


class StubProxy(_Server):
    """Forwards gdb's connection to the gdbstub on the unix socket ``upstream``.

    ``mode`` may change at any time: ``freeze`` holds both directions (a stub
    that stopped answering), ``garbage`` replaces what the stub says with
    bytes that are not the remote protocol, ``close`` drops both ends.
    """

    def __init__(self, upstream: Path) -> None:
        self.upstream = upstream
        self.mode = "pass"
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        stub = socket.socket(socket.AF_UNIX)
        stub.connect(str(self.upstream))
        peer = {conn: stub, stub: conn}
        try:
            while self.mode != "close":
                ready, _, _ = select.select([conn, stub], [], [], 0.05)
                if self.mode == "freeze":
                    continue
                for end in ready:
                    data = end.recv(65536)
                    if not data:
                        return
                    if end is stub and self.mode == "garbage":
                        data = os.urandom(len(data)).replace(b"#", b"?")
                    if end is conn and self.mode == "error" and b"$g#" in data:
                        conn.sendall(b"+$E22#ad")  # an error where the stub's stop reply belongs
                        continue
                    peer[end].sendall(data)
        except (OSError, ValueError):  # ValueError: the test closed the proxy under select()
            pass
        finally:
            conn.close()
            stub.close()
