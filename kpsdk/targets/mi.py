"""gdb as a subprocess, spoken to in gdb/MI, parsed with pygdbmi.

Only :mod:`pygdbmi.gdbmiparser` is used, not its ``GdbController``: in pygdbmi
0.11 ``write()`` sleeps 0.2 s after every command by default and reads by timed
polling.  Here every command carries a token and its ``^done``/``^error`` is
awaited with a blocking ``select`` bounded by a deadline; asynchronous records
(``*stopped``, ``*running``) are queued for whoever waits for them.

gdb is started with the settings the facts in design.md call for, before any
connection is made: ``mi-async on`` (must precede ``target remote``),
``auto-connect-native-target off`` (else, after a disconnect, gdb would run
the program natively on the host), no pagination, no confirmation.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from collections import deque
from typing import Any

from pygdbmi import gdbmiparser

from kpsdk.errors import TargetError, ToolMissingError

#: every MI command answers within this many seconds or the target is declared dead
COMMAND_TIMEOUT = 20.0


class GdbError(TargetError):
    """gdb answered ``^error`` to a command."""


class MiConnection:
    """One gdb process and its MI stream."""

    def __init__(self, gdb: str = "gdb-multiarch", pass_fds: tuple[int, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        path = shutil.which(gdb)
        if path is None:
            raise ToolMissingError(gdb, "gdb-multiarch")
        self.proc = subprocess.Popen(
            [path, "--interpreter=mi3", "--nx", "--quiet"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            pass_fds=pass_fds, env={**os.environ, **(env or {})}, start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin
        self._fd = self.proc.stdout.fileno()
        os.set_blocking(self._fd, False)
        self._partial = b""
        self._token = 0
        self.events: deque[dict[str, Any]] = deque()
        self.console: list[str] = []  # gdb's own console and log stream, for error messages
        for setting in ("mi-async on", "pagination off", "confirm off", "auto-connect-native-target off",
                        "width 0", "height 0", "print pretty off"):
            self.command(f"-gdb-set {setting}")

    @property
    def fileno(self) -> int:
        """The MI stream's fd, for a caller that selects on several sources."""
        return self._fd

    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- reading -----------------------------------------------------------------

    def pump(self, timeout: float | None) -> list[dict[str, Any]]:
        """Read what gdb wrote, waiting at most ``timeout`` seconds for something.

        Returns the parsed records; async ones are also queued on ``events``.
        Raises TargetError when gdb has exited.
        """
        if b"\n" not in self._partial:
            ready, _, _ = select.select([self._fd], [], [], timeout)
            if not ready:
                return []
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                return []
            if not chunk:
                self._dead()
            self._partial += chunk
        *lines, self._partial = self._partial.split(b"\n")
        records = []
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if not line or line == "(gdb) ":
                continue
            record = gdbmiparser.parse_response(line)
            kind = record["type"]
            if kind in ("console", "log", "output", "target"):
                if isinstance(record["payload"], str):
                    self.console.append(record["payload"])
                    del self.console[:-200]
                continue
            if kind == "notify":
                self.events.append(record)
            records.append(record)
        return records

    def _dead(self) -> None:
        try:
            status = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        tail = "".join(self.console[-5:]).strip()
        raise TargetError(f"gdb exited (status {status})" + (f": {tail}" if tail else ""))

    # -- commands ------------------------------------------------------------------

    def send(self, command: str) -> int:
        """Write one MI command with a fresh token; returns the token."""
        self._token += 1
        try:
            self._in.write(f"{self._token}{command}\n".encode())
            self._in.flush()
        except (BrokenPipeError, ValueError):
            self._dead()
        return self._token

    def command(self, command: str, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        """Run an MI command and return its result payload (``^done``/``^running``/``^connected``)."""
        token = self.send(command)
        return self.result(token, command, timeout)

    def result(self, token: int, command: str, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for record in self.pump(max(0.0, deadline - time.monotonic())):
                if record["type"] == "result" and record["token"] == token:
                    payload = record["payload"] or {}
                    if record["message"] == "error":
                        msg = payload.get("msg", "") if isinstance(payload, dict) else str(payload)
                        raise GdbError(f"gdb refused {command.split()[0]}: {msg}")
                    return payload if isinstance(payload, dict) else {}
            if time.monotonic() >= deadline:
                raise TargetError(f"gdb did not answer {command.split()[0]!r} within {timeout:g} s")

    def console_command(self, text: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """A CLI command through ``-interpreter-exec``; its console output."""
        start = len(self.console)
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        self.command(f'-interpreter-exec console "{escaped}"', timeout)
        return "".join(self.console[start:])

    def next_event(self, name: str, timeout: float) -> dict[str, Any] | None:
        """The next queued async record called ``name`` (``stopped``...), waiting up to ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            while self.events:
                record = self.events.popleft()
                if record["message"] == name:
                    return record
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.pump(remaining)

    def close(self) -> None:
        """End gdb: ask, then terminate, then kill; always reaped."""
        if self.proc.poll() is None:
            try:
                self._in.write(b"-gdb-exit\n")
                self._in.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
