"""gdb as a subprocess, spoken to in gdb/MI, parsed with pygdbmi.

Only :mod:`pygdbmi.gdbmiparser` is used, not its ``GdbController``: in pygdbmi
0.11 ``write()`` sleeps 0.2 s after every command by default and reads by timed
polling.  Here every command carries a token and its ``^done``/``^error`` is
awaited with a blocking ``select`` bounded by a deadline; asynchronous records
(``*stopped``, ``*running``) are queued for whoever waits for them.

gdb is started with these settings, before any connection is made:
``mi-async on`` (must precede ``target remote``),
``auto-connect-native-target off`` (else, after a disconnect, gdb would run
the program natively on the host), no pagination, no confirmation.

Nothing a user passes reaches gdb as a command: a file name travels as one
MI c-string argument (:func:`c_string`), and no command may hold a line
break, which would end it and start another.

Two things tell a caller that gdb is in trouble while the target runs, at no
cost per probe hit (MI is silent during hits): :attr:`MiConnection.trouble`,
the first message in which gdb says it lost step with the gdbstub, and
:meth:`MiConnection.ping`, a harmless question whose answer proves gdb still
serves its event loop (it does not while it waits for a stub's reply).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from collections import deque
from typing import Any

from pygdbmi import gdbmiparser

from kpsdk.errors import GdbError, TargetError, TargetStalled, ToolMissingError

#: every MI command answers within this many seconds or gdb is declared stuck (and killed)
COMMAND_TIMEOUT = 20.0

#: gdb's words for losing step with the gdbstub: a packet that timed out, a reply that
#: made no sense, a connection that went away.  After one, gdb's view of the target
#: (registers, breakpoints, where it stopped) cannot be trusted.
REMOTE_TROUBLE = re.compile(r"(warning: )?(Ignoring packet error|Remote failure reply|Could not read registers|"
                            r"Remote connection closed|Remote communication error|Invalid remote reply|"
                            r"Reply contains invalid hex digit|Remote replied unexpectedly|"
                            r"Remote 'g' packet reply is too long|Watchdog timeout|Timed out)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def c_string(text: str, what: str) -> str:
    """``text`` as one quoted MI argument, for a command that takes a file name.

    MI's c-strings and the argument splitting of the CLI commands some MI
    commands stand for (``-file-exec-and-symbols`` is ``file``) agree on
    backslash escapes, so spaces, quotes, ``$``, ``|`` and backticks arrive
    as themselves.  A control character cannot be carried (a newline would
    end the command): refused, naming ``what``.
    """
    check_text(text, what)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_text(text: str, what: str) -> None:
    """Refuse text gdb cannot be given: a control character (a newline would end the command)."""
    if _CONTROL.search(text):
        raise TargetError(f"{what} {text!r} holds a control character (a line break?), which gdb cannot be given")


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
        self.trouble: str | None = None  # gdb's first message about losing step with the stub
        self._ping: tuple[int, float] | None = None  # (token, sent at) of an unanswered ping
        self._pinged = 0.0
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
                    self._note(record["payload"], gdb_said=kind in ("console", "log"))
                continue
            if kind == "result" and self._ping is not None and record["token"] == self._ping[0]:
                self._ping = None
                continue
            if kind == "notify":
                self.events.append(record)
            records.append(record)
        return records

    def _note(self, text: str, gdb_said: bool) -> None:
        """Keep the console text (for messages); spot gdb's first remote-protocol complaint."""
        self.console.append(text)
        del self.console[:-200]
        if gdb_said and self.trouble is None and REMOTE_TROUBLE.match(text.lstrip()):
            self.trouble = text.strip()[:200]

    def _dead(self) -> None:
        try:
            status = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            status = None
        tail = "".join(self.console[-5:]).strip()
        raise TargetError(f"gdb exited (status {status})" + (f": {tail}" if tail else ""))

    # -- commands ------------------------------------------------------------------

    def send(self, command: str) -> int:
        """Write one MI command with a fresh token; returns the token.

        A line break would end the command and make the rest another one:
        refused (callers check user input earlier, with a better message).
        """
        if _CONTROL.search(command):
            raise TargetError(f"refusing to send gdb a command holding a control character: {command!r}")
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
                self.kill()
                raise TargetStalled(f"gdb did not answer {command.split()[0]!r} within {timeout:g} s "
                                    "(it was killed)")

    def console_command(self, text: str, timeout: float = COMMAND_TIMEOUT) -> str:
        """A CLI command through ``-interpreter-exec``; its console output."""
        start = len(self.console)
        self.command(f"-interpreter-exec console {c_string(text, 'the gdb command')}", timeout)
        return "".join(self.console[start:])

    def ping(self, interval: float) -> None:
        """Ask gdb a harmless question, at most every ``interval`` s and one at a time.

        gdb answers between target events while the target runs, but not
        while it waits for a stub's reply: :meth:`unanswered_for` grows then.
        """
        now = time.monotonic()
        if self._ping is None and now - self._pinged >= interval:
            self._ping = (self.send("-gdb-show remotetimeout"), now)
            self._pinged = now

    def unanswered_for(self) -> float:
        """Seconds since the pending ping was sent (0 when none is pending)."""
        return 0.0 if self._ping is None else time.monotonic() - self._ping[1]

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

    def kill(self) -> None:
        """End a gdb that is stuck or spinning at once (it would not answer ``-gdb-exit``)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=5)

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
