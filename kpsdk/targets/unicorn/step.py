"""Software single-step on Unicorn with persistent successor hooks.

A post_handler runs once the probed instruction has executed (K3).  Unicorn
has no single-step trap a hook can ask for, so kpsdk steps in software, as gdb
does on ARM and RISC-V: the arch backend's ``successors()`` says where the
instruction can go from the registers now, and a code hook at each of those
addresses runs the post_handlers at the first one reached.

Those hooks used to be one-shot: added at each hit and deleted at the next
instruction.  In Unicorn 2.1.4 ``uc_hook_del`` only marks a hook; it is freed
when the outermost ``uc_emu_start`` returns, and until then every translated
instruction and every later ``uc_hook_del`` walks the growing list, so the
n-th hit of a run cost O(n) and a run was quadratic (``uc.c``,
``uc_hook_del`` and ``clear_deleted_hooks``; docs/performance.md).

Here a successor's hook is added the first time that address is a successor
and then stays for as long as a point stepping there is armed: a hit only sets
:attr:`SoftStep.pending` (which point, which addresses), and the hook, reached
with nothing pending or for another point's step, returns at once.  No hook is
added or deleted per hit, and no translation is dropped once every successor
has its hook, so a post_handler hit costs two hook callbacks and flat with the
number of hits.

``successors()`` is evaluated per hit (a ``ret`` goes where the stack says) but
memoized per instruction on the registers and memory words it read: replaying
those reads and finding the same values gives the same answer, since the
backend's function depends on nothing else.  A fall-through instruction reads
nothing, so its answer is computed once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import capstone

    from kpsdk.manager import ProbePoint
    from kpsdk.targets.unicorn.host import UnicornHost

#: the most answers memoized per instruction (a ``ret`` seen from many call sites stops memoizing)
MEMO_LIMIT = 64
#: the most successor addresses one point keeps hooked (a ``ret`` reached from many call sites):
#: every code hook costs each hooked hit a bounds check in Unicorn (bench rows U: 1,000 hooks
#: make a hooked hit ~20x dearer), so a successor past these gets a one-shot hook, deleted when
#: the step ends, as every successor did before
HOOKS_PER_POINT = 16


class _Reads(Exception):
    """An instruction's successors depend on registers or memory (see :meth:`SoftStep.prepare`)."""


def _refuse_register(name: str) -> int:
    raise _Reads


def _refuse_memory(addr: int, size: int) -> bytes:
    raise _Reads


class SuccessorMemo:
    """``successors()`` of one instruction, memoized on what it read.

    ``reads`` is the first evaluation's sequence of reads (``("r", name)`` or
    ``("m", addr, size)``); an answer is stored under the values those reads
    gave, and only for evaluations that made exactly those reads, so replaying
    them and finding a stored key is the same as evaluating again.
    """

    __slots__ = ("insn", "reads", "memo")

    def __init__(self, insn: capstone.CsInsn) -> None:
        self.insn = insn
        self.reads: tuple[tuple[object, ...], ...] | None = None
        self.memo: dict[tuple[object, ...], frozenset[int] | None] = {}


class SoftStep:
    """The persistent successor hooks of one Unicorn target and the one pending step."""

    def __init__(self, host: UnicornHost, hook_points: Mapping[int, ProbePoint]) -> None:
        self._host = host
        self._hook_points = hook_points  # the host's hook-path points, by address
        self._hooks: dict[int, int] = {}  # successor address (no Thumb bit) -> hook handle
        self._users: dict[int, set[int]] = {}  # successor address -> ids of the points stepping there
        self._used: dict[int, set[int]] = {}  # id(point) -> the successor addresses it added
        self._transient: list[int] = []  # one-shot hooks of the pending step (past HOOKS_PER_POINT)
        #: the step under way: the point whose instruction runs, and where it may arrive
        self.pending: tuple[ProbePoint, frozenset[int]] | None = None
        self._callback_made: Callable[[int, int, int, int], None] | None = None

    @property
    def _callback(self) -> Callable[[int, int, int, int], None]:
        """The successor hook's callback (:meth:`_on_successor`), made once."""
        if self._callback_made is None:
            self._callback_made = self._on_successor()
        return self._callback_made

    @property
    def hooked(self) -> int:
        """How many successor addresses have a persistent hook now."""
        return len(self._hooks)

    # -- successors ------------------------------------------------------------------------------

    def successors(self, point: ProbePoint, insn: capstone.CsInsn) -> frozenset[int] | None:
        """Where ``insn`` (the point's instruction) can go now, without Thumb bits."""
        memo = point.state.get("succ_memo")
        if not isinstance(memo, SuccessorMemo):
            memo = SuccessorMemo(insn)
            point.state["succ_memo"] = memo
        reads = memo.reads
        if reads is not None:
            key = self._replay(reads)
            if key in memo.memo:
                return memo.memo[key]
        log: list[tuple[object, ...]] = []
        values: list[object] = []
        answer = self._evaluate(insn, log, values)
        if reads is None:
            memo.reads = reads = tuple(log)
        if tuple(log) == reads and len(memo.memo) < MEMO_LIMIT:
            memo.memo[tuple(values)] = answer
        return answer

    def _replay(self, reads: tuple[tuple[object, ...], ...]) -> tuple[object, ...]:
        if not reads:
            return ()
        host = self._host
        fast, arch, uc = host.fast, host.arch, host.uc
        out: list[object] = []
        for r in reads:
            if r[0] == "r":
                out.append(fast.read(arch.register(str(r[1]))))
            else:
                out.append(bytes(uc.mem_read(int(r[1]), int(r[2]))))  # type: ignore[call-overload]
        return tuple(out)

    def _evaluate(self, insn: capstone.CsInsn, log: list[tuple[object, ...]],
                  values: list[object]) -> frozenset[int] | None:
        host = self._host
        fast, arch, uc = host.fast, host.arch, host.uc

        def reg(name: str) -> int:
            value = fast.read(arch.register(name))
            log.append(("r", name))
            values.append(value)
            return value

        def mem(addr: int, size: int) -> bytes:
            data = bytes(uc.mem_read(addr, size))
            log.append(("m", addr, size))
            values.append(data)
            return data

        return self._successors(insn, reg, mem)

    def _successors(self, insn: capstone.CsInsn, reg: Callable[[str], int],
                    mem: Callable[[int, int], bytes]) -> frozenset[int] | None:
        """The backend's ``successors()`` of ``insn`` through ``reg``/``mem``, Thumb bits off."""
        arch = self._host.arch
        succ = arch.insn.successors(insn, reg, mem, arch.word_size)
        if succ is None:
            return None
        strip = ~1 if arch.has_thumb else ~0
        return frozenset(a & strip for a in succ)

    # -- the step ----------------------------------------------------------------------------------

    def start(self, point: ProbePoint, insn: capstone.CsInsn) -> bool | None:
        """Make ``point``'s step pending (its instruction ``insn`` is about to run).

        Returns True when a successor got its first hook (the caller must then re-enter
        the instruction so that the translation that runs sees it), False when the
        hooks were all there, None when the backend cannot follow the instruction.
        An instruction whose successors read nothing (no branch) keeps them in
        ``point.state["step_fixed"]`` once hooked: its hits only assign :attr:`pending`.
        """
        fixed = point.state.get("step_fixed")
        if fixed is not None:
            self.pending = fixed  # type: ignore[assignment]
            return False
        succ = self.successors(point, insn)
        if succ is None:
            return None
        fresh = self.arm(point, succ)
        memo = point.state.get("succ_memo")
        if isinstance(memo, SuccessorMemo) and memo.reads == () and not self._transient:
            point.state["step_fixed"] = (point, succ)  # the pending step of every later hit
        return fresh

    def arm(self, point: ProbePoint, succ: frozenset[int]) -> bool:
        """Make ``point``'s step pending, its post_handlers to run at the first of ``succ``
        reached.  Returns True when a successor got its first hook (see :meth:`start`)."""
        fresh = False
        host = self._host
        self._drop_transient()
        used = self._used.get(id(point))
        if used is None:
            used = self._used[id(point)] = set()
        for a in succ:
            if a in used:
                continue
            if a not in self._hooks and len(used) >= HOOKS_PER_POINT:
                self._transient.append(host.hooks.code(self._callback, a, a))
                host.uc.ctl_remove_cache(a, a + 1)
                fresh = True
                continue
            if self._keep(point, used, a):
                host.uc.ctl_remove_cache(a, a + 1)
                fresh = True
        self.pending = (point, succ)
        return fresh

    def _keep(self, point: ProbePoint, used: set[int], a: int) -> bool:
        """``point`` steps to ``a`` from now on: its persistent hook (True when made here)."""
        made = a not in self._hooks
        if made:
            self._hooks[a] = self._host.hooks.code(self._callback, a, a)
        used.add(a)
        self._users.setdefault(a, set()).add(id(point))
        return made

    def prepare(self, point: ProbePoint, insn: capstone.CsInsn) -> list[int]:
        """Hook the successors of ``point``'s instruction ``insn`` as the point is armed, when
        they depend on nothing (no register or memory read: no branch, or one to a fixed
        address); returns the addresses that got their first hook, whose translations the
        caller drops.  The first hit then only assigns :attr:`pending`, as every later one:
        learning them there cost a re-entry and new translations inside the run (a 500-hit
        run's post_handler hit went from 3.2-3.3 us to 2.8-3.0 us, docs/performance.md).
        Other instructions learn at their hits."""
        if point.state.get("step_fixed") is not None:
            return []
        try:
            succ = self._successors(insn, _refuse_register, _refuse_memory)
        except _Reads:
            return []
        if succ is None:
            return []
        used = self._used.setdefault(id(point), set())
        if len(used | succ) > HOOKS_PER_POINT:
            return []
        fresh = [a for a in succ if a not in used and self._keep(point, used, a)]
        point.state["step_fixed"] = (point, succ)
        return fresh

    def _drop_transient(self) -> None:
        """Delete the one-shot hooks of the step that ended (or never will)."""
        while self._transient:
            self._host.hooks.delete(self._transient.pop())

    def reached(self, addr: int) -> None:
        """The CPU is about to run ``addr``: if that ends the pending step, run its post_handlers
        (K3: regs show the state after the instruction, ``regs.ip`` is ``addr``)."""
        step = self.pending
        if step is not None and addr in step[1]:
            self.pending = None
            self._post(step[0], addr)

    def _post(self, point: ProbePoint, addr: int) -> None:
        """End the pending step of ``point`` at ``addr``: its post_handlers.  The successor
        hook inlines this body (:meth:`_on_successor`): a change here goes there too."""
        if self._transient:
            self._drop_transient()
        run_post = point.run_post
        if run_post is not None:  # None: the point lost its post_handlers while the step was pending
            run_post(self._host.hit_regs, addr)

    def _on_successor(self) -> Callable[[int, int, int, int], None]:
        """The successor hook, one closure for all successors (made at the first hook, when
        the target has its manager): a step ends here.  :meth:`_post` inlined, and for a
        point with one active probe the manager's ``post_function`` body too (K3, K4
        through the manager's ``_fault``, K6), as the hook path's ``on_hit`` inlines its
        pre: each Python frame a hit does not enter is ~0.1 us of a ~2.8 us hit
        (docs/performance.md).  A change to either body goes here too."""
        stepper, host = self, self._host
        hook_points, regs, manager, fail = self._hook_points, host.hit_regs, host.manager, host.fail
        hit = regs._hit

        def on_successor(handle: int, addr: int, size: int, user: int) -> None:
            try:
                step = stepper.pending
                if step is None or addr not in step[1]:
                    return
                here = hook_points.get(addr)
                if here is not None and not here.internal and here.mechanism != "native":
                    return  # its own hook runs the step first (see reached); a native trace hook does not

                stepper.pending = None
                if stepper._transient:
                    stepper._drop_transient()
                point = step[0]
                if point.run_post is None:  # the point lost its post_handlers while the step was pending
                    return
                only = point.only
                if only is None:
                    point.run_post(regs, addr)
                    return
                p, me = only  # ProbeManager.post_function's body for one probe, inlined
                handler = p.post_handler
                if handler is None or manager.busy:
                    return
                manager.busy = True
                hit[0] = None
                hit[1] = addr
                hit[2] = None
                try:
                    handler(me, regs, 0)
                except Exception as exc:  # noqa: BLE001 - K4: fault_handler or re-raised
                    manager._fault(p, point, regs, exc, "post_handler")
                finally:
                    manager.busy = False
            except BaseException as exc:  # noqa: BLE001 - stored and re-raised by run()/call()
                fail(exc)

        return on_successor

    def holds(self, point: ProbePoint) -> bool:
        """Whether ``point`` keeps successor hooks or a learned step (see :meth:`release`)."""
        return id(point) in self._used or "step_fixed" in point.state or "succ_memo" in point.state

    def release(self, point: ProbePoint) -> None:
        """``point`` no longer steps (disarmed, or its post_handlers are gone): delete the
        successor hooks no other point uses.  Registration time, not hit time."""
        if self.pending is not None and self.pending[0] is point:
            self.pending = None
            self._drop_transient()
        point.state.pop("succ_memo", None)
        point.state.pop("step_fixed", None)
        host = self._host
        for a in self._used.pop(id(point), ()):
            users = self._users.get(a)
            if users is None:
                continue
            users.discard(id(point))
            if not users:
                del self._users[a]
                handle = self._hooks.pop(a, None)
                if handle is not None:
                    host.hooks.delete(handle)
                    host.uc.ctl_remove_cache(a, a + 1)

    def clear(self) -> None:
        """Forget the pending step (the run ended with an error inside it)."""
        self.pending = None
        self._drop_transient()

