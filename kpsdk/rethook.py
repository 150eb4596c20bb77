"""Return hooks: the calls in flight under a return probe, on any target (the kernel's rethook).

A return probe needs three things, and only the first depends on the target:

1. **hijack** a call's return at its entry, so that control comes back to kpsdk:
   the Unicorn target replaces the return address with a trampoline in
   kpsdk's own area; a live target puts a temporary breakpoint at the real
   return address instead (:meth:`kpsdk.target.Target.hijack_return`);
2. **remember**, per task, the hooked calls in flight, newest last: the real
   return address and the stack pointer at entry (the *frame*).  This is the
   shadow stack (:class:`ShadowStacks`);
3. when a hooked return happens, **find** which call returns, run its
   handlers and tell the target where to resume.

Matching is by stack pointer, not by return address: in a recursion every
inner call returns to the same address.  A return leaves the stack pointer
where the caller had it, which is the entry sp plus the word the call pushed
where calls push the return address (x86: ``ret`` pops it), and the entry sp
itself where a link register holds it (ARM, RISC-V, ppc64).  Both facts come
from the arch data (``Arch.link``), never from the arch's name.

What the kernel leaves to chance is handled here:

* a frame left without returning (``longjmp``, an exception, a program that
  ends inside it) would leak its instance for good.  Any frame the stack
  pointer has moved above is gone, so entries and returns drop the stale
  nodes they find on top, and targets drop what is left when a call or the
  program ends (:meth:`ShadowStacks.unwind`); nothing runs their handlers;
* a tail call (``jmp`` to another function) re-enters with the return already
  hooked: the new node is *chained* to the hooked one and both return at once,
  as does a second return probe on the same function;
* stack traces read the trampoline where a return is hooked:
  :meth:`ShadowStacks.real_return_address` maps it back.

Nodes of a return probe that was unregistered live until their call returns,
then go away without running a handler, as in the kernel.

One limit where the target leaves the return address in place (a live target
breaking at ``ret_addr``): a call abandoned by ``longjmp`` and a new call from
the same call site at the same depth look the same as a tail call (same frame,
same return address), so the new node is chained to the old one rather than
replacing it; the pair goes when a shallower hooked call returns, or at
:meth:`ShadowStacks.unwind`.  A trampoline tells them apart.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from kpsdk.regs import PtRegs
    from kpsdk.target import Target

#: ``(node, regs) -> None``: what a return runs for each of its nodes.
ReturnHandler = Callable[["RethookNode", "PtRegs"], Any]


class Direct(NamedTuple):
    """What a rethook's ``handler`` and ``entry`` wrappers do, said as data, so that a
    target's hot path can do it in its own frame instead of calling them: a hit that
    takes one Python frame less is ~0.1 us cheaper, a fifth of a kprobe hit.

    The wrappers call ``probe.handler(node, regs)`` at a return and
    ``probe.entry_handler(node, regs)`` at an entry (each read at the hit: the user
    may change or clear them after registration; a truthy result of the entry's
    vetoes the call), and hand an ``Exception`` either raises to
    ``fault(probe, regs, exc, "handler" | "entry_handler")`` (K4: it returns
    when the fault_handler claims it and raises otherwise).  An entry keeps its
    call hooked only while the rethook is not freed."""

    probe: Any
    fault: Callable[[Any, PtRegs, Exception, str], None]


class RethookNode:
    """One hooked call, in flight or waiting in its pool (``struct rethook_node``).

    Handlers see it as the kernel's ``kretprobe_instance``: ``ret_addr`` (the
    real return address, Thumb bit included), ``task``, ``data`` (a bytearray
    of the pool's ``data_size``, shared by the entry and return handlers and,
    as in the kernel, not cleared between uses).  ``frame`` is the stack
    pointer at entry; ``slot`` the value the return address now holds (the
    trampoline, or ``ret_addr`` where the target breaks there instead).
    """

    __slots__ = ("rethook", "ret_addr", "frame", "task", "slot", "chained", "data", "spare")

    def __init__(self, rethook: Rethook, data_size: int) -> None:
        self.rethook = rethook
        self.ret_addr = 0
        self.frame = 0
        self.task = 0
        self.slot = 0
        #: this call's return was hooked already (a tail call, or a second
        #: return probe on the function): no hijack of its own
        self.chained = False
        self.data = bytearray(data_size)
        #: made outside the pool (a forked child's copy, :meth:`ShadowStacks.fork`): it goes
        #: when given back instead of joining the pool
        self.spare = False

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} ret_addr={self.ret_addr:#x} frame={self.frame:#x} "
                f"task={self.task}{' chained' if self.chained else ''}>")


class Rethook:
    """One return-probe user's pool of nodes and return handler (``struct rethook``).

    ``count`` nodes are made up front, because a hit must not depend on how
    many are free: when none is, the call goes unhooked and the user counts a
    miss (the kernel's ``nmissed``).
    """

    def __init__(self, shadow: ShadowStacks, owner: object, handler: ReturnHandler | None, count: int,
                 data_size: int, node_class: type[RethookNode] = RethookNode) -> None:
        self.shadow = shadow
        self.owner = owner
        self.handler = handler
        self.count = count
        self.free_nodes: list[RethookNode] = [node_class(self, data_size) for _ in range(count)]
        self._node_class, self._data_size = node_class, data_size
        self.freed = False
        #: told of every node given back, where the target keeps its own count of
        #: free nodes (entries hooked by guest code, :meth:`ShadowStacks.entered`)
        self.mirror: Callable[[Rethook], None] | None = None
        #: the user's entry handler for a target that hooks entries itself:
        #: ``(node, regs) -> keep``, False when the call must go unhooked (vetoed,
        #: or the user unregistered meanwhile); None when there is none to run
        self.entry: Callable[[RethookNode, PtRegs], bool] | None = None
        #: ``handler`` and ``entry`` as data (:class:`Direct`), where their owner says
        #: what they do; None where a target must call them
        self.direct: Direct | None = None

    def try_get(self) -> RethookNode | None:
        """A free node, or None when all ``count`` are in flight."""
        return self.free_nodes.pop() if self.free_nodes else None

    def spare(self) -> RethookNode:
        """A node outside the pool, for a call that is already hooked (a forked child's copy
        of its parent's): the pool's limit is on new entries, not on copies."""
        node = self._node_class(self, self._data_size)
        node.spare = True
        return node

    def recycle(self, node: RethookNode) -> None:
        """Give a node back; the nodes of a freed rethook just go away."""
        if not self.freed and not node.spare:
            self.free_nodes.append(node)
            if self.mirror is not None:
                self.mirror(self)

    def free(self) -> None:
        """The user unregistered: no handler runs from now on, in-flight nodes
        stay hooked until their calls return (``rethook_free``)."""
        self.freed = True
        self.handler = None
        self.free_nodes.clear()
        self.shadow.remove(self)

    @property
    def in_flight(self) -> int:
        self.shadow.settle()
        return sum(1 for stack in self.shadow.stacks.values() for n in stack if n.rethook is self)


class ShadowStacks:
    """The hooked calls in flight on one target, per task, newest last.

    Created by :meth:`of` when the first return probe registers on a target,
    which attaches it (:meth:`Target.attach_rethook`); detached again when no
    rethook is registered and no call is in flight.
    """

    def __init__(self, target: Target) -> None:
        arch = target.arch
        self.target = target
        self._link = arch.link
        self._read_word = target.read_word
        self._task = target.current_task
        self._release = target.release_return
        #: puts calls the target hooked by itself on the stacks (see :meth:`entered`)
        self.settle = target.settle_returns
        self._thumb_mask = ~1 if arch.has_thumb else ~0
        #: return sp - entry sp: a ``ret`` that pops the return address leaves the caller one word up
        self.ret_sp_offset = 0 if arch.link else arch.word_size
        #: how much further a callee may pop (x86 ``ret imm16``, for stdcall and i386 struct returns)
        self.callee_pop_max = 0 if arch.link else 0xFFFF
        self.stacks: dict[int, list[RethookNode]] = {}
        self.rethooks: list[Rethook] = []
        #: slot values that are not real return addresses (the target's trampolines)
        self.trampolines: set[int] = set()
        self.attached = False

    @classmethod
    def of(cls, target: Target) -> ShadowStacks:
        """The target's shadow stacks, made on first use."""
        if target.rethook is None:
            target.rethook = cls(target)
        return target.rethook

    # -- users ------------------------------------------------------------------------

    def rethook(self, owner: object, handler: ReturnHandler | None, count: int, data_size: int,
                node_class: type[RethookNode] = RethookNode) -> Rethook:
        """A new pool for ``owner``; attaches to the target first if needed (it may refuse
        with :class:`~kpsdk.errors.TargetError`).  The pool is made before anything
        is attached, so a pool that cannot be made leaves the target as it was."""
        rh = Rethook(self, owner, handler, count, data_size, node_class)
        if not self.attached:
            try:
                self.target.attach_rethook(self)
            except BaseException:
                self.target.detach_rethook()  # what it set up before it failed
                raise
            self.attached = True
        self.rethooks.append(rh)
        return rh

    def remove(self, rh: Rethook) -> None:
        if rh in self.rethooks:
            self.rethooks.remove(rh)
        self._maybe_detach()

    def _maybe_detach(self) -> None:
        if self.attached and not self.rethooks and not any(self.stacks.values()):
            self.attached = False
            self.trampolines.clear()
            self.target.detach_rethook()

    # -- entry --------------------------------------------------------------------------

    def prepare(self, node: RethookNode, regs: PtRegs) -> None:
        """Fill in a node at its function's entry, before the entry handler sees it.

        The return address comes from the link register, else from the word at
        sp.  When it is already hooked, by the same slot at the same frame (a
        tail call into this function, or another return probe on it), the node
        is chained to that call and takes its real return address.

        Calls the target hooked by itself come first (:meth:`entered`): an
        entry on the hook path nested in a detoured call must find that call
        below it on the stack, not after it.
        """
        self.settle()
        sp = regs.sp
        self._prepare(node, sp, getattr(regs, self._link) if self._link is not None else self._read_word(sp))

    def _prepare(self, node: RethookNode, frame: int, ra: int) -> None:
        node.task = task = self._task()
        node.frame = frame
        stack = self.stacks.get(task)
        if stack and stack[-1].frame == frame and stack[-1].slot == ra:
            top = stack[-1]
            node.chained, node.ret_addr, node.slot = True, top.ret_addr, top.slot
        else:
            node.chained, node.ret_addr = False, ra

    def reclaim(self, regs: PtRegs) -> None:
        """Drop the current task's stale nodes, as an entry with these registers
        would (see :meth:`push`): a pool that seems empty may be held by frames
        a ``longjmp`` left.  Called at an entry that found no free node."""
        self.settle()
        stack = self.stacks.get(self._task())
        if not stack:
            return
        sp = regs.sp
        ra = getattr(regs, self._link) if self._link is not None else self._read_word(sp)
        while stack and (stack[-1].frame < sp or (stack[-1].frame == sp and stack[-1].slot != ra)):
            self._drop(stack.pop())

    def push(self, node: RethookNode, regs: PtRegs | None, slot: int | None = None) -> None:
        """Hook a prepared node's return and put it on its task's shadow stack.

        Nodes on top whose frame is at or below this entry's sp were left
        without returning (the sp is back above them, or another call now
        lives at the same depth): they are dropped, so a function that keeps
        escaping by ``longjmp`` does not use up its pool.
        """
        stack = self.stacks.get(node.task)
        if stack is None:
            stack = self.stacks[node.task] = []
        if not node.chained:
            frame = node.frame
            while stack and stack[-1].frame <= frame:
                self._drop(stack.pop())
            if slot is None:
                assert regs is not None
                slot = self.target.hijack_return(regs, node)
            node.slot = slot
            if slot != node.ret_addr:
                self.trampolines.add(slot)
        stack.append(node)

    def entered(self, node: RethookNode, frame: int, ra: int, slot: int) -> None:
        """A call whose return the target hooked by itself: guest code at the
        function entry took a node's place in the target's own count, saved the
        return address ``ra`` and the entry sp ``frame``, and wrote ``slot`` (a
        trampoline) over the return address.  The target reports it from
        :meth:`Target.settle_returns <kpsdk.target.Target.settle_returns>`, in
        entry order and before any return is looked at, so this does what
        :meth:`prepare` and :meth:`push` would have done at the entry."""
        self._prepare(node, frame, ra)
        self.push(node, None, slot)

    def fork(self, parent: int, child: int) -> None:
        """Task ``child`` runs on a copy of task ``parent``'s stack (a fork): the hooked calls
        the parent has in flight are the child's too, and each returns through its hook in
        either, so the child gets a copy of each node (``data`` and all), as uprobes'
        ``uprobe_copy_process`` copies the return instances."""
        self.settle()
        copies = []
        for node in self.stacks.get(parent, ()):
            twin = node.rethook.spare()
            twin.ret_addr, twin.frame, twin.slot, twin.chained = node.ret_addr, node.frame, node.slot, node.chained
            twin.task = child
            twin.data[:] = node.data
            copies.append(twin)
        if copies:
            self.stacks[child] = copies

    # -- return -------------------------------------------------------------------------

    def on_return(self, regs: PtRegs, at_trampoline: bool) -> int | None:
        """A hooked return may have happened: run its handlers, give the address to resume at.

        Targets call this when their trampoline (``at_trampoline=True``) or a
        return-address breakpoint is hit, with the registers of that moment,
        after settling the calls they hooked by themselves (:meth:`entered`).
        The returning call is the shallowest node on top of the task's shadow
        stack whose return sp is at or below the current sp (newer nodes
        above it are deeper frames, left without returning: dropped).  At a
        return-address breakpoint, which any pass through that address hits,
        the pc must also be the node's return address; otherwise this is not
        a hooked return and None is returned (resume where the CPU is).

        The handlers of the node and of the nodes chained to it run newest
        first, with ``regs.ip`` the real return address; the nodes are off the
        shadow stack by then, so a backtrace taken in a handler is that of
        the caller.
        """
        stack = self.stacks.get(self._task())
        if not stack:
            return None
        sp = regs.sp
        base = stack[-1]
        ret = base.ret_addr
        if base.frame + self.ret_sp_offset == sp and not base.chained:  # the usual case: the newest call returns
            if not at_trampoline and regs.ip & self._thumb_mask != ret & self._thumb_mask:
                return None
            stack.pop()
            if at_trampoline:
                regs.ip = ret
            self._finish(base, regs)
            return ret
        found = self._returning(stack, sp, regs.ip if not at_trampoline else None)
        if found is None:
            return None
        group, base, ret = found
        if at_trampoline:
            regs.ip = ret
        manager = self.target.manager
        busy, manager.busy = manager.busy, True
        followed = manager.task_filter is None or manager.task_filter()
        try:
            for node in reversed(group):
                handler = node.rethook.handler
                if handler is not None and followed:
                    handler(node, regs)
        finally:
            manager.busy = busy
            for node in group:
                if not node.chained:
                    self._release(node)
                node.rethook.recycle(node)
            if not self.rethooks:
                self._maybe_detach()
        return ret

    def _finish(self, node: RethookNode, regs: PtRegs) -> None:
        """Run the handler of a returning node that is off the stack and chains nothing,
        and give the node back."""
        rh = node.rethook
        manager = self.target.manager
        busy, manager.busy = manager.busy, True  # a handler's own calls into probed code are reentrant (K6)
        try:  # a forked child returning through its copy of a call (fork) that follow=False does not follow
            if rh.handler is not None and (manager.task_filter is None or manager.task_filter()):
                rh.handler(node, regs)
        finally:
            manager.busy = busy
            self._release(node)
            rh.recycle(node)
            if not self.rethooks:
                self._maybe_detach()

    def _returning(self, stack: list[RethookNode], sp: int,
                   pc: int | None) -> tuple[list[RethookNode], RethookNode, int] | None:
        """The general case of :meth:`on_return`: deeper stale nodes on top, a
        callee that popped its arguments, chained nodes.  Takes the returning
        group off the stack (dropping the stale nodes above it) and returns
        it, its base node and the return address; None when no node returns
        at ``sp`` (or, at a return-address breakpoint, at ``pc``)."""
        off = self.ret_sp_offset
        i = len(stack)
        while i and stack[i - 1].frame + off <= sp:
            i -= 1
        if i == len(stack):
            return None
        base = stack[i]
        if sp - (base.frame + off) > self.callee_pop_max:
            return None
        ret = base.ret_addr
        if pc is not None and pc & self._thumb_mask != ret & self._thumb_mask:
            return None
        j = i + 1
        while j < len(stack) and stack[j].chained and stack[j].frame == base.frame:
            j += 1
        group = stack[i:j]
        for node in stack[j:]:
            self._drop(node)
        del stack[i:]
        return group, base, ret

    # -- unwinding ----------------------------------------------------------------------

    def unwind(self, task: int | None = None, below: int | None = None) -> None:
        """Calls that will never return through their hook: drop them, no handler runs.

        ``below``: the nodes whose entry sp is below it (a call or a nested
        run left that part of the stack); None: all (the program ended).
        ``task`` None: every task.
        """
        self.settle()
        for t in list(self.stacks):
            if task is not None and t != task:
                continue
            stack = self.stacks[t]
            while stack and (below is None or stack[-1].frame < below):
                self._drop(stack.pop())
        self._maybe_detach()

    def _drop(self, node: RethookNode) -> None:
        if not node.chained:
            self.target.release_return(node)
        node.rethook.recycle(node)

    # -- queries ------------------------------------------------------------------------

    def in_flight(self, task: int | None = None) -> list[RethookNode]:
        """The hooked calls in flight, oldest first (of one task, or of all)."""
        self.settle()
        if task is not None:
            return list(self.stacks.get(task, ()))
        return [n for stack in self.stacks.values() for n in stack]

    def real_return_address(self, addr: int, sp: int | None = None, task: int | None = None) -> int:
        """``addr`` itself, or the real return address when ``addr`` is a trampoline.

        ``sp``: where the value was read (a stack slot) or the stack pointer
        of the frame that read it; the innermost hooked call whose frame is at
        or above it is the one.  None: the innermost hooked call.
        """
        self.settle()
        if addr not in self.trampolines:
            return addr
        stack = self.stacks.get(self._task() if task is None else task, [])
        for node in reversed(stack):
            if not node.chained and node.slot == addr and (sp is None or node.frame >= sp):
                return node.ret_addr
        return addr
