"""A live target's hit dispatch: one line from the agent in, handlers run, one line back.

The agent reports a hit as ``H ADDR THREAD NAME=HEX... @ADDR=HEX...`` (the registers
and memory it learned the point's handlers read; a watchpoint's is ``W ...``).  The hit
runs, in the kernel's order, the end of this thread's pending single-step (K3,
:mod:`.step`), a stop hook, a return (the rethook), then the point's pre_handlers, and
answers ``c`` with the registers written, the names learned and the breakpoint changes
made (gdb resumes without an MI stop), or ``s`` for a real stop that the run loop
handles from the MI stream (:mod:`.runloop`).

This is the per-hit path: no call is added here that a hit does not need.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kpsdk.errors import TargetError, TargetFault
from kpsdk.targets.live.state import LiveState

if TYPE_CHECKING:
    from kpsdk.manager import ProbePoint


class HitDispatch(LiveState):
    """The agent's hits served (a part of GdbTarget: see :mod:`.state`)."""

    def _agent_line(self, line: str) -> None:
        """A line the agent sent unasked: a hit, or a breakpoint change it could not make
        (``E MESSAGE``; the agent stops the CPU, and run() raises it at that stop)."""
        if line.startswith(("H ", "W ")):
            self._hit(line)
        elif line.startswith("E "):
            self._pending_error = TargetError(f"gdb: {line[2:]}")
            self._stopping = True

    def _hit(self, line: str) -> None:
        """One probe hit reported by the agent; always answers it.

        ``W ID THREAD KIND OLD NEW`` is a watchpoint's (:mod:`kpsdk.targets.live.watch`).
        """
        parts = line.split()
        watch = parts[3:6] if parts[0] == "W" else None
        if watch is not None:
            parts = parts[:3]
        addr = int(parts[1], 16)
        io = self._io
        cache = io.cache
        cache.clear()
        io.writes.clear()
        io.learned.clear()
        if io.memory:
            io.memory.clear()
        for word in parts[3:]:
            name, _, value = word.partition("=")
            if name[0] == "@":
                io.memory[int(name[1:], 16)] = bytes.fromhex(value)
            else:
                cache[name] = int(value, 16)
        verdict = "c"
        point = self.manager.points.get(addr) if watch is None else None
        thread = self._thread = int(parts[2], 16)
        changes = self._changes
        changes.clear()
        self.in_hit = True
        try:
            if watch is not None:
                self.watch_engine().hit(addr, watch, self._regs)
            else:
                if self._steps.pending:  # the end of this thread's single-step comes first (K3)
                    self._steps.reached(thread, addr, self._regs)
                if self._stop_hooks and addr in self._stop_hooks:
                    self._regs._reset(addr)
                    self._stop_hooks[addr]()
            if watch is None and addr in self._return_bps and self.rethook is not None:
                self._regs._reset(addr)
                resume = self.rethook.on_return(self._regs, False)
                if resume is not None and resume & ~1 != addr:
                    io.writes[self._pc.gdb] = resume
            if point is not None and point.active and (
                    point.insn.condition is None or self._condition_passes(point)):
                new = self.manager.pre(point, self._regs)
                if new is not None:
                    io.writes[self._pc.gdb] = new
                elif point.needs_step:
                    verdict = self._start_step(thread, point)
        except BaseException as exc:  # noqa: BLE001 - raised from run() once gdb reports the stop
            self._pending_error = exc
            verdict = "s"
        finally:
            self.in_hit = False
        if self._ending():
            self._stop_requested = True
            verdict = "s"
        if verdict == "s":
            self._stopping = True
        words = [verdict, *(f"{n}={v & ((1 << 64) - 1):x}" for n, v in io.writes.items()),
                 *(f"+{n}" for n in io.learned), *changes]
        self.link.send(" ".join(words))
        cache.clear()

    def _ending(self) -> bool:
        """Whether the run ends at this hit (stop(), or the run's timeout passed)."""
        return self._stop_requested or (self._deadline is not None and time.monotonic() >= self._deadline)

    def _condition_passes(self, point: ProbePoint) -> bool:
        arch = self.arch
        cond = point.insn.condition
        assert arch.conditions is not None and cond is not None, "only conditional instructions get here"
        return bool(arch.conditions.passes(cond, lambda n: self._io.read(arch.register(n))))

    # -- K3: the step after a hit ---------------------------------------------------------

    #: post_handler steps end in the agent (kpsdk.targets.live.step); False: every step
    #: through MI, the slow way (tests compare the two)
    agent_steps = True

    def _start_step(self, thread: int, point: ProbePoint) -> str:
        """K3 for this hit: the verdict, ``c`` with the step's end armed in the agent
        (:mod:`kpsdk.targets.live.step`), or ``s`` for the slow way through MI, taken
        when the backend cannot follow the instruction or the run ends here (run()
        then returns with the post_handlers run)."""
        if self.agent_steps and not self._ending():
            arch = self.arch
            if self.abi_kind == "kernel":
                self._steps.follow_code(point, self._code_now(point), self._read_code)
            succ = self._steps.successors(point, lambda name: self._io.read(arch.register(name)), self.read_memory)
            if succ is not None:
                self._changes += self._steps.start(thread, point, succ)
                return "c"
        self._pending_step = point
        return "s"

    def _code_now(self, point: ProbePoint) -> bytes:
        """The bytes at ``point`` now, as long as the instruction it was last decoded as
        (at registration, or again by :meth:`LiveStep.follow_code`: a longer one's tail may
        change too): sent with the point's later hits, learned as a register is when the
        agent did not send them (the agent's list of a breakpoint made again is empty)."""
        live_raw = point.state.get("live_raw")
        size = max(len(point.insn.raw), len(live_raw) if isinstance(live_raw, bytes) else 0)
        sent = self._io.memory.get(point.addr) if self._io.memory else None
        if sent is not None and len(sent) >= size:
            return sent[:size]
        self._io.learned.append(f"@{self._pc.gdb}:0:{size:x}")
        try:
            return bytes.fromhex(self.link.request(f"m {point.addr:x} {size:x}"))
        except TargetFault:  # not readable now: the decode at registration is all there is
            return point.insn.raw
