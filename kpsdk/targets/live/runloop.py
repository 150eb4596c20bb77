"""A live target's run: resume, serve hits until the run ends, handle the stops gdb reports.

run() resumes the CPU and waits on the agent's socket and gdb's MI stream at once.
Hits go to the hit dispatch (:mod:`.hits`); gdb's ``*stopped`` ends the run, finishes
a step the slow way (``stepi``, then the post_handlers), or raises an error a hit left.
Whenever no hit came for ``poll_seconds``, and only then, the loop checks that the run
can go on (:meth:`RunLoop._check_progress`, :mod:`.stalls`), and ends it at its timeout or
at ``stop()`` (a target that does not halt within ``HALT_TIMEOUT`` ends the session).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.errors import TargetError, TargetExited, TargetFault, TargetStalled
from kpsdk.targets.live.limits import HALT_TIMEOUT, NEXT_HIT_SPIN, POLL_SECONDS
from kpsdk.targets.live.mi import GdbError
from kpsdk.targets.live.state import LiveState

if TYPE_CHECKING:
    from kpsdk.manager import ProbePoint

#: how gdb words a gdbstub that went away (a closed socket, or a reset one)
_DISCONNECTED = ("connection closed", "target disconnected", "connection reset")


class _Ended(Exception):  # noqa: N818 - control flow, never seen by users
    """The target ended while kpsdk waited: run() returns the status."""

    def __init__(self, status: int | None) -> None:
        self.status = status


class _Running:
    """Marker: the target was resumed and the run goes on."""


_RUNNING = _Running()


class RunLoop(LiveState):
    """Runs, stops and the program's end (a part of GdbTarget: see :mod:`.state`)."""

    #: how long run()'s loop waits for a hit before its other work (a subclass with hits of
    #: its own to collect, kpsdk.targets.live.tcg.target, wakes more often)
    poll_seconds = POLL_SECONDS

    def stop(self) -> None:
        """Stop the run: at the end of the current hit, or by interrupting the target."""
        self._stop_requested = True

    def _interrupt(self) -> None:
        if self._interrupt_fn is not None:
            self._interrupt_fn()
        else:
            self._mi().send("-exec-interrupt")

    def run(self, timeout: float | None = None) -> int | None:
        if self._exit_status is not None:
            return self._exit_status
        try:
            return self._run(timeout)
        except _Ended as end:
            return end.status

    def _run(self, timeout: float | None) -> int | None:
        mi = self._mi()
        self._stop_requested = self._stopping = False
        self._deadline = time.monotonic() + timeout if timeout else None
        self._stalls.reset()
        if self._dormant:
            self._dormant = False
            mi.console_command("python kpsdk_agent.purge()")
        self._resume("-exec-continue")
        link = self.link
        while True:
            line = link.wait_line(self.poll_seconds, spin=NEXT_HIT_SPIN, also=mi.fileno)
            if line is not None:
                self._agent_line(line)
                continue
            result = self._between_hits()
            if result is not _RUNNING:
                return result  # type: ignore[return-value]

    def _between_hits(self) -> object:
        """The run loop's work when no hit came: a stop to handle, a target that died or
        stalled, the timeout or stop().  ``_RUNNING`` while the run goes on."""
        self._mi().pump(0)
        stopped = self._take_stopped()
        if stopped is not None:
            return self._on_stopped(stopped)
        self._check_alive()
        self._check_progress()
        if self._stopping:
            return _RUNNING  # a hit told gdb to stop: its *stopped is on the way
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return self._halt("the timeout")
        if self._stop_requested:
            return self._halt("stop()")
        return _RUNNING

    def run_to(self, addr: int, timeout: float) -> None:
        """Run until the CPU reaches ``addr`` (probes fire on the way); TargetError if it does not."""
        mi = self._mi()
        number = mi.command(f"-break-insert -t *{addr:#x}").get("bkpt", {}).get("number")
        self._until_breakpoint = True
        try:
            status = self.run(timeout)
        finally:
            self._until_breakpoint = False
            if number is not None and self._exit_status is None and mi.alive():
                try:
                    mi.command(f"-break-delete {number}")
                except GdbError:
                    pass  # a temporary breakpoint that was hit is already gone
        pc = self.mi_read_register(self._pc.gdb) if status is None else None
        if pc != addr:
            where = self.symbols.format(addr)
            raise TargetError(f"the target did not reach {where} within {timeout:g} s"
                              + (f" (it exited with status {status})" if status is not None else ""))

    def _resume(self, command: str) -> None:
        self._io.cache.clear()
        self._regs._reset(None)
        self.running_now = True
        try:
            self._mi().command(command)
        except GdbError as exc:
            if "exited" in str(exc) or "not being run" in str(exc):
                raise TargetExited(f"the target is not running: {exc}") from exc
            raise

    # -- gdb's *stopped ------------------------------------------------------------------

    def _take_stopped(self) -> dict[str, Any] | None:
        mi = self._mi()
        while mi.events:
            record = mi.events.popleft()
            if record["message"] == "stopped":
                self.running_now = False
                return record.get("payload") or {}
        return None

    def _await_stop(self, timeout: float) -> dict[str, Any] | None:
        """Serve hits until gdb reports ``*stopped``; its payload, or None after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.link.wait_line(0.05, spin=0, also=self._mi().fileno)
            if line is not None:
                self._agent_line(line)
            self._mi().pump(0)
            stopped = self._take_stopped()
            if stopped is not None:
                return stopped
            self._check_alive()
            self._check_progress()
        return None

    def _halt(self, why: str) -> int | None:
        """Interrupt a running target and wait (briefly: a healthy one stops in
        milliseconds) until it reports the stop; a target that cannot be halted
        ends the session, so ``run(timeout=...)`` returns or raises on time."""
        frozen = self._procs.frozen()
        if frozen is not None:
            raise self._abandon(TargetStalled(f"{frozen} is stopped (SIGSTOP?): it cannot be halted for {why}"))
        self._interrupt()
        stopped = self._await_stop(HALT_TIMEOUT)
        if stopped is None:
            raise self._abandon(TargetStalled(f"the target did not stop within {HALT_TIMEOUT:g} s after {why}"))
        result = self._on_stopped(stopped, halting=True)
        return None if result is _RUNNING else result  # type: ignore[return-value]

    def _on_stopped(self, payload: dict[str, Any], halting: bool = False) -> object:
        """React to ``*stopped``: exit, a step to finish, an error to raise, or the stop asked for."""
        self._stopping = False
        reason = payload.get("reason", "")
        if reason in ("exited", "exited-normally", "exited-signalled"):
            code = payload.get("exit-code")
            return self._program_exited(int(code, 8) if code else (0 if reason == "exited-normally" else 128))
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            self._pending_step = None
            raise error
        if self._pending_step is not None:
            point, self._pending_step = self._pending_step, None
            self._step_and_post(point)
            if self._stop_requested or halting:
                return None
            self._resume("-exec-continue")
            return _RUNNING
        if reason == "signal-received" and payload.get("signal-name") not in ("SIGINT", "SIGTRAP", "0"):
            pc = int(payload.get("frame", {}).get("addr", "0"), 16)
            raise TargetFault(f"the target received {payload.get('signal-name')} "
                              f"({payload.get('signal-meaning', '')})", pc, self.symbols.format(pc))
        if self._stop_requested or halting:
            return None
        if reason == "breakpoint-hit" and self._until_breakpoint:
            return None
        # a stop kpsdk did not cause (a breakpoint someone set in gdb): keep going
        self._resume("-exec-continue")
        return _RUNNING

    def _step_and_post(self, point: ProbePoint) -> None:
        """K3 on a live target: execute the probed instruction with ``stepi``, then the post_handlers.

        A step landing on another kpsdk breakpoint is reported as that breakpoint's hit
        before the ``*stopped``: the step is pending for every address, so that hit runs
        these post_handlers first (K3's order), as an agent-ended step does."""
        thread = self._thread
        following: ProbePoint | None = point
        while following is not None:
            point, self._pending_step = following, None
            self._steps.pending[thread] = (point, None)
            self._resume("-exec-step-instruction")
            stopped = self._await_stop(self.stall_limit)
            if stopped is None:
                raise self._abandon(TargetStalled(f"single-stepping {self.symbols.format(point.addr)} did not "
                                                  f"finish within {self.stall_limit:g} s"))
            self._stopping = False  # a hit on the way that asked for a stop had it: this one
            if str(stopped.get("reason", "")).startswith("exited"):
                self._on_stopped(stopped)
                return
            step = self._steps.pending.get(thread)
            if step is not None and step[0] is point:
                del self._steps.pending[thread]
                self.manager.post(point, self._regs, self.mi_read_register(self._pc.gdb))
            # a hit on the way that wants its own step the slow way: the CPU is already stopped there
            following = self._pending_step

    # -- the end of gdb, QEMU or the program -----------------------------------------------

    def _check_alive(self) -> None:
        """Raise when gdb or QEMU died; return quietly while both live.

        A QEMU that exited with a status (the program ended, or a guest powered
        off) ends the run normally: :class:`_Ended` carries the status.  One
        killed by a signal is an error.
        """
        mi = self._mi()
        if not mi.alive():
            tail = "".join(mi.console[-3:]).strip()
            raise TargetExited("gdb exited while the target was running" + (f": {tail}" if tail else ""))
        for proc in self.processes:
            status = proc.poll()
            if status is None:
                continue
            name = Path(str(proc.args[0])).name  # type: ignore[index]
            if status < 0:
                raise TargetExited(f"{name} was killed by signal {-status} while the target was running")
            # gdb reports the end itself (with the program's status) unless QEMU went first
            stopped = mi.next_event("stopped", 1.0)
            if stopped is not None and str(stopped.get("payload", {}).get("reason", "")).startswith("exited"):
                self._on_stopped(stopped["payload"])
            else:
                self._program_exited(status)
            raise _Ended(self._exit_status)

    def _program_exited(self, status: int) -> int:
        """The program ended with ``status``: hooked calls that never returned are dropped
        (nothing leaks), QEMU's last output collected, plugins told."""
        self._exit_status = status
        self._steps.clear()
        if self.rethook is not None:
            self.rethook.unwind()
        self._procs.drain()
        self.emit("program_exit", status=status)
        return status

    # -- stalls: checked between hits, never on a hit's path ---------------------------------

    def _check_progress(self) -> None:
        """Raise (gdb killed, session closed) when the run cannot go on although gdb and QEMU live.

        A broken agent conversation, gdb's word that it lost step with the stub,
        a QEMU stopped for longer than ``stall_limit``, or gdb not answering a
        ping for that long (it is waiting for a stub that does not reply).
        """
        mi = self._mi()
        if self.link.broken is not None:
            raise self._abandon(self.link.broken)
        if mi.trouble is not None:
            self._lost_step(mi.trouble)
        stalled = self._stalls.check(mi, self.stall_limit)
        if stalled is not None:
            raise self._abandon(stalled)

    def _lost_step(self, message: str) -> None:
        """gdb complained about the remote protocol.  A QEMU that exited closes the
        connection too, and its exit is the news; otherwise the session is over."""
        for proc in self.processes:
            try:
                proc.wait(timeout=HALT_TIMEOUT)
            except subprocess.TimeoutExpired:
                continue
        self._check_alive()
        if any(words in message.lower() for words in _DISCONNECTED):
            raise self._abandon(TargetExited(f"the gdbstub closed the connection: {message}"))
        raise self._abandon(TargetError(f"gdb lost step with the gdbstub ({message}); what it would report "
                                        "next cannot be trusted, so the session was closed"))
