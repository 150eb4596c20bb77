"""The return-hook core (kpsdk.rethook) driven the way a live target drives it.

A live target cannot write a trampoline: its ``hijack_return`` leaves the return
address alone and breaks at ``node.ret_addr``, and every pass through that
address stops there, hooked or not.  These tests play such a target with
registers and memory as plain Python values, on a link-register arch
(riscv64: the return sp is the entry sp) and on one where ``call`` pushes the
return address (x86_64: the return sp is the entry sp + 8).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import kpsdk
from kpsdk.rethook import RethookNode, ShadowStacks

MAIN, SITE = 0x1000, 0x2000  # two return addresses: in main, and inside the recursive function


class LiveLike:
    """The Target hooks as a gdb/MI target implements them: breakpoints at return addresses."""

    def __init__(self, arch: str) -> None:
        self.arch = kpsdk.get_registry().arch(arch)
        self.manager = SimpleNamespace(busy=False, task_filter=None)
        self.rethook: ShadowStacks | None = None
        self.memory: dict[int, int] = {}
        self.breakpoints: dict[int, int] = {}  # address -> nodes using it
        self.task = 0
        self.attached = 0

    def attach_rethook(self, core: ShadowStacks) -> None:
        self.attached += 1

    def detach_rethook(self) -> None:
        self.attached -= 1

    def hijack_return(self, regs: Any, node: RethookNode) -> int:
        self.breakpoints[node.ret_addr] = self.breakpoints.get(node.ret_addr, 0) + 1
        return node.ret_addr

    def release_return(self, node: RethookNode) -> None:
        self.breakpoints[node.ret_addr] -= 1
        if not self.breakpoints[node.ret_addr]:
            del self.breakpoints[node.ret_addr]

    def current_task(self) -> int:
        return self.task

    def settle_returns(self) -> None:
        """A live target hooks no entry by itself: nothing to report."""

    def read_word(self, addr: int) -> int:
        return self.memory[addr]


class Harness:
    def __init__(self, arch: str) -> None:
        self.target = LiveLike(arch)
        self.core = ShadowStacks.of(self.target)  # type: ignore[arg-type]
        self.returns: list[tuple[str, int]] = []
        self.pools = {name: self.core.rethook(name, self.handler, 4, 0) for name in ("f", "g")}
        self.link = self.target.arch.link
        self.pushes = self.target.arch.word_size if self.link is None else 0

    def handler(self, node: RethookNode, regs: Any) -> None:
        self.returns.append((str(node.rethook.owner), node.ret_addr))

    def regs(self, sp: int, ip: int, ra: int = 0) -> Any:
        regs = SimpleNamespace(sp=sp, ip=ip)
        if self.link:
            setattr(regs, self.link, ra)
        return regs

    def enter(self, name: str, caller_sp: int, ret: int, entry: int = 0x3000) -> RethookNode | None:
        """A call from a caller at ``caller_sp`` returning to ``ret``; the entry probe hooks it."""
        sp = caller_sp - self.pushes
        if self.link is None:
            self.target.memory[sp] = ret
        node = self.pools[name].try_get()
        if node is None:
            return None
        regs = self.regs(sp, entry, ret)
        self.core.prepare(node, regs)
        self.core.push(node, regs)
        return node

    def stop_at(self, pc: int, sp: int) -> int | None:
        """The CPU stops at a return-address breakpoint, with the caller's sp."""
        return self.core.on_return(self.regs(sp, pc), at_trampoline=False)


@pytest.fixture(params=["riscv64", "x86_64"])
def h(request: pytest.FixtureRequest) -> Harness:
    return Harness(str(request.param))


def test_recursion_matches_each_return_by_stack_pointer(h: Harness) -> None:
    h.enter("f", 1000, MAIN)
    h.enter("f", 900, SITE)
    h.enter("f", 800, SITE)
    assert h.target.breakpoints == {MAIN: 1, SITE: 2}
    assert h.stop_at(SITE, 700) is None  # a deeper, unhooked call (no free instance) passing SITE
    assert h.stop_at(SITE, 800) == SITE
    assert h.stop_at(SITE, 900) == SITE
    assert h.target.breakpoints == {MAIN: 1}
    assert h.stop_at(MAIN, 1000) == MAIN
    assert h.returns == [("f", SITE), ("f", SITE), ("f", MAIN)]
    assert h.target.breakpoints == {} and h.core.in_flight() == []


def test_a_pass_through_another_return_address_is_not_a_return(h: Harness) -> None:
    h.enter("f", 1000, MAIN)
    assert h.stop_at(SITE, 1000) is None  # right sp, wrong pc
    assert h.returns == [] and len(h.core.in_flight()) == 1


def test_frames_left_by_longjmp_are_dropped_without_handlers(h: Harness) -> None:
    h.enter("g", 1000, MAIN)
    h.enter("f", 900, SITE)
    h.enter("f", 800, SITE)
    assert h.stop_at(MAIN, 1000) == MAIN  # f's frames were abandoned: g returns
    assert h.returns == [("g", MAIN)]
    assert h.target.breakpoints == {} and len(h.pools["f"].free_nodes) == 4


def test_an_entry_at_the_depth_of_an_abandoned_call_drops_it(h: Harness) -> None:
    for i in range(10):  # four instances, ten escapes from one depth, each from another call site
        assert h.enter("f", 900, SITE + 4 * i) is not None  # (an escape: no return ever comes)
        assert len(h.core.in_flight()) == 1
    assert h.target.breakpoints == {SITE + 36: 1}


def test_without_a_trampoline_a_reentry_from_the_same_site_is_taken_for_a_tail_call(h: Harness) -> None:
    """The live targets' limit: same frame, same untouched return address, so it
    chains like a tail call (a trampoline would tell them apart).  The chain goes
    when a shallower hooked call returns, or at unwind."""
    h.enter("g", 1000, MAIN)
    for _ in range(3):
        h.enter("f", 900, SITE)
    assert [n.chained for n in h.core.in_flight()] == [False, False, True, True]
    assert h.stop_at(MAIN, 1000) == MAIN and h.returns == [("g", MAIN)]
    assert h.core.in_flight() == [] and h.target.breakpoints == {}


def test_a_tail_call_returns_through_the_hooked_return(h: Harness) -> None:
    g = h.enter("g", 1000, MAIN)
    f = h.enter("f", 1000, MAIN)  # g jumped to f: same frame, same return address
    assert g is not None and f is not None and f.chained and not g.chained
    assert h.target.breakpoints == {MAIN: 1}  # one breakpoint: f's return is g's
    assert h.stop_at(MAIN, 1000) == MAIN
    assert h.returns == [("f", MAIN), ("g", MAIN)]  # newest first
    assert h.target.breakpoints == {}


def test_tasks_have_their_own_calls_and_unwind_drops_them(h: Harness) -> None:
    h.enter("f", 1000, MAIN)
    h.target.task = 7
    h.enter("f", 1000, MAIN)
    h.enter("f", 900, SITE)
    assert [n.task for n in h.core.in_flight(7)] == [7, 7]
    h.core.unwind(7, below=950)  # task 7's call at 900 is gone
    assert [n.frame for n in h.core.in_flight(7)] == [1000 - h.pushes]
    h.core.unwind(7)  # task 7 ended
    h.target.task = 0
    assert h.stop_at(MAIN, 1000) == MAIN and h.returns == [("f", MAIN)]
    assert h.target.breakpoints == {}


def test_handlers_run_as_reentrant_and_unregistered_pools_run_none(h: Harness) -> None:
    busy: list[bool] = []
    h.pools["g"].handler = lambda node, regs: busy.append(h.target.manager.busy)
    h.enter("g", 1000, MAIN)
    h.enter("f", 900, SITE)
    h.pools["f"].free()  # unregistered with a call in flight
    assert h.stop_at(SITE, 900) == SITE and h.returns == []
    assert h.stop_at(MAIN, 1000) == MAIN and busy == [True] and h.target.manager.busy is False
    h.pools["g"].free()
    assert h.target.attached == 0  # nothing registered, nothing in flight: detached


def test_a_callee_that_pops_its_arguments() -> None:
    """x86 ``ret 4`` (stdcall, i386 struct returns): the caller's sp ends above the return sp."""
    h = Harness("x86_64")
    h.enter("f", 1000, MAIN)
    assert h.stop_at(MAIN, 1004) == MAIN and h.returns == [("f", MAIN)]
