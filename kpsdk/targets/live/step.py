"""post_handlers on live targets without an MI stop: successor breakpoints armed by the agent.

K3 wants the post_handlers to run once the probed instruction has executed.
The slow way is a real stop: the hit answers ``s``, gdb reports ``*stopped``
over MI, the host sends ``-exec-step-instruction``, waits for the next
``*stopped``, runs the post_handlers and sends ``-exec-continue`` (~5 ms a
hit).  But gdb already single-steps the probed instruction whenever it
resumes from a breakpoint (it removes the breakpoint, steps, puts it back),
and a step that lands on an inserted breakpoint is that breakpoint's hit.
So here a hit only says where the instruction can go (the arch backend's
``successors()``, as kpsdk's software step on Unicorn does) and asks the
agent, on the hit's final line, to report the next hit of this thread at
each of those addresses (``t:ADDR:HW``, :mod:`kpsdk.targets.live.gdb_agent`).
That hit is the end of the step: the post_handlers run there, with the
instruction's effects visible, before any probe on that address (the order
the kernel gives).  A post_handler hit is then two agent round trips and no
MI traffic.

The slow way remains for instructions the backend cannot follow (a trap or
a system call, an arithmetic write to the pc) and for a hit that also ends
the run (``stop()``, the run's timeout): run() returns with the instruction
executed and its post_handlers run, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import capstone

    from kpsdk.arch import Arch
    from kpsdk.manager import ProbePoint
    from kpsdk.regs import PtRegs


#: read to decode an instruction that changed under a probe: x86's longest is 15 bytes
MAX_INSN_BYTES = 16


class LiveStep:
    """Pending single-steps of one live target, one per gdb thread."""

    def __init__(self, arch: Arch, hardware: bool) -> None:
        self.arch = arch
        self._hw = int(hardware)
        self._strip = ~1 if arch.has_thumb else ~0
        #: gdb thread -> the point whose instruction it executes and where it can arrive
        #: (None: anywhere, a step through MI)
        self._it: dict[int, bool] = {}  # Thumb addresses known to hold (or not) an it instruction
        self.pending: dict[int, tuple[ProbePoint, frozenset[int] | None]] = {}

    def follow_code(self, point: ProbePoint, now: bytes, read: Callable[[int, int], bytes]) -> None:
        """Decode the point's instruction again when ``now`` (the bytes there at this hit)
        differ from the ones its successors come from.

        A kernel rewrites its own code after kpsdk registered (at boot, before any
        probe of the kernel's own could be: ftrace's entry nops, alternatives; later,
        jump labels and static calls).  On riscv64 the four compressed nops of a
        function's entry become two 4-byte ones: a successor computed from the first
        (+2) is never reached, and the post_handler never ran.
        """
        decoded = point.state.get("live_raw", point.insn.raw)
        assert isinstance(decoded, bytes)
        same = min(len(decoded), len(now))
        if decoded[:same] == now[:same]:
            return
        insn = next(self.arch.disassembler(point.iset).disasm(read(point.addr, MAX_INSN_BYTES), point.addr), None)
        point.state.pop("live_succ", None)
        if insn is None:  # not an instruction now: the slow way (a real step) follows it
            point.state["cs"] = None
            point.state["live_raw"] = now
            return
        point.state["cs"] = insn
        point.state["live_raw"] = bytes(insn.bytes)

    def _insn(self, point: ProbePoint) -> capstone.CsInsn:
        insn = point.state.get("cs")
        if insn is None:
            insn = next(self.arch.disassembler(point.iset).disasm(point.insn.raw, point.addr))
            point.state["cs"] = insn
        return insn  # type: ignore[return-value]

    def successors(self, point: ProbePoint, reg: Callable[[str], int],
                   mem: Callable[[int, int], bytes]) -> frozenset[int] | None:
        """Where the point's instruction can go from the registers now (no Thumb bits);
        None when the backend cannot follow it.  An instruction whose answer read
        nothing (no branch) keeps it in ``point.state``: later hits ask nothing."""
        fixed = point.state.get("live_succ")
        if fixed is not None:
            return fixed  # type: ignore[return-value]
        if "cs" in point.state and point.state["cs"] is None:
            return None  # the code there no longer decodes (follow_code)
        reads = 0

        def counted_reg(name: str) -> int:
            nonlocal reads
            reads += 1
            return reg(name)

        def counted_mem(addr: int, size: int) -> bytes:
            nonlocal reads
            reads += 1
            return mem(addr, size)

        succ = self.arch.insn.successors(self._insn(point), counted_reg, counted_mem, self.arch.word_size)
        if succ is None:
            return None
        strip = self._strip
        answer = frozenset(a & strip for a in succ)
        if self.arch.has_thumb:
            answer |= {(a & ~1) + 2 for a in succ if a & 1 and self._is_it(a & ~1, mem)}
        if not reads:
            point.state["live_succ"] = answer
        return answer

    def _is_it(self, addr: int, mem: Callable[[int, int], bytes]) -> bool:
        """Whether the Thumb instruction at ``addr`` is an ``it``: QEMU executes it with the
        instruction before it in one step, so a step arriving there ends after it.
        Each address is read once: code rewritten there later is not followed."""
        known = self._it.get(addr)
        if known is None:
            half = int.from_bytes(mem(addr, 2), "little")
            known = self._it[addr] = half & 0xFF00 == 0xBF00 and half & 0xF != 0
        return known

    def start(self, thread: int, point: ProbePoint, succ: frozenset[int]) -> list[str]:
        """Make ``thread``'s step of ``point`` pending; the final-line words that arm its end."""
        self.pending[thread] = (point, succ)
        return [f"t:{a:x}:{self._hw}" for a in succ]

    def reached(self, thread: int, addr: int, regs: PtRegs) -> None:
        """A hit of ``thread`` at ``addr``: when it ends that thread's step, run the post_handlers.

        A hit elsewhere (a signal handler ran first) leaves the step pending.
        """
        step = self.pending.get(thread)
        if step is None or (step[1] is not None and addr not in step[1]):
            return
        del self.pending[thread]
        run_post = step[0].run_post
        if run_post is not None:  # None: the point lost its post_handlers while the step was pending
            regs._reset(addr)
            run_post(regs, addr)

    def clear(self) -> None:
        """Forget every pending step (the program ended)."""
        self.pending.clear()
