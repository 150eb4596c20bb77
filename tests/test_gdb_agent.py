"""kpsdk's agent inside gdb (kpsdk/targets/gdb_agent.py), run against a stand-in ``gdb``
module: one execution of a probed instruction is reported once.

What it reproduces was seen in gdb's own log (``set debug infrun 1``, ``set debug remote 1``)
on an i386 kernel under qemu-system: after a hit, gdb removed the breakpoint and sent
``vCont;s``; QEMU answered ``T05`` with the same pc and the same ``g`` registers (the step
executed nothing), and gdb evaluated the breakpoint again, calling ``stop()`` a second
time for the same call of ``kernel_clone``: kpsdk counted two calls and, matching returns
by stack pointer, two returns.
"""

from __future__ import annotations

import importlib.util
import socket
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kpsdk.targets

AGENT = Path(kpsdk.targets.__file__).parent / "gdb_agent.py"


class _Reg:
    def __init__(self, name: str) -> None:
        self.name = name


class _Cpu:
    """The registers a stopped CPU shows, by name."""

    def __init__(self) -> None:
        self.regs = {"eax": 1, "ecx": 2, "edx": 3, "esp": 0xC8000F00, "eip": 0xC1023090, "eflags": 0x46, "cs": 0x60}

    def frame(self) -> Any:
        cpu = self
        arch = types.SimpleNamespace(registers=lambda group: [_Reg(n) for n in cpu.regs])
        return types.SimpleNamespace(architecture=lambda: arch,
                                     read_register=lambda r: cpu.regs[r.name if isinstance(r, _Reg) else r])


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, _Cpu, socket.socket]]:
    cpu = _Cpu()
    host, theirs = socket.socketpair()
    fake = types.ModuleType("gdb")

    class Breakpoint:
        def __init__(self, spec: str, **kw: Any) -> None:
            self.spec = spec

        def delete(self) -> None:
            pass

    fake.Breakpoint = Breakpoint  # type: ignore[attr-defined]
    fake.BP_BREAKPOINT, fake.BP_HARDWARE_BREAKPOINT = 1, 2  # type: ignore[attr-defined]
    fake.selected_frame = cpu.frame  # type: ignore[attr-defined]
    fake.selected_thread = lambda: types.SimpleNamespace(num=1)  # type: ignore[attr-defined]
    fake.parse_and_eval = lambda expr: cpu.regs[expr.lstrip("$")]  # type: ignore[attr-defined]

    def execute(cmd: str, to_string: bool = False) -> str:
        name, _, value = cmd.removeprefix("set var $").partition(" = ")
        cpu.regs[name] = int(value)
        return ""

    fake.execute = execute  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gdb", fake)
    monkeypatch.setenv("KPSDK_AGENT_FD", str(theirs.fileno()))
    spec = importlib.util.spec_from_file_location("kpsdk_test_gdb_agent", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    host.setblocking(False)
    yield module, cpu, host
    host.close()
    module._sock.close()


def _reports(host: socket.socket) -> list[str]:
    try:
        return host.recv(65536).decode().splitlines()
    except BlockingIOError:
        return []


def _hit(module: Any, bp: Any, host: socket.socket, answer: str = "c") -> tuple[bool, list[str]]:
    host.sendall(answer.encode() + b"\n")  # the host's answer, read by the agent after its report
    stopped = bp.stop()
    reports = _reports(host)
    if not reports:  # not reported: the answer is still unread; take it back
        module._recv_line()
    return stopped, reports


def test_a_step_that_executed_nothing_is_not_a_second_hit(agent: tuple[Any, _Cpu, socket.socket]) -> None:
    module, cpu, host = agent
    bp = module.KpsdkBreakpoint(0xC1023090, 1)
    assert _hit(module, bp, host) == (False, ["H c1023090 1 "])
    # gdb's step over the breakpoint came back at the same pc, nothing changed: gdb asks again
    assert _hit(module, bp, host) == (False, [])
    assert _hit(module, bp, host) == (False, [])  # and again, if QEMU does it twice
    assert module.kpsdk_agent.rereports() == 2
    # the function called again from the same frame: a register differs, a second hit
    cpu.regs["eax"] += 1
    assert _hit(module, bp, host) == (False, ["H c1023090 1 "])


def test_after_the_hosts_writes(agent: tuple[Any, _Cpu, socket.socket]) -> None:
    """The registers compared are those the CPU resumed with: a handler's writes included."""
    module, cpu, host = agent
    bp = module.KpsdkBreakpoint(0xC1023090, 1)
    assert _hit(module, bp, host, "c eax=2a") == (False, ["H c1023090 1 "])
    assert cpu.regs["eax"] == 0x2A
    assert _hit(module, bp, host) == (False, [])  # nothing executed since: the same hit


def test_another_breakpoint_between(agent: tuple[Any, _Cpu, socket.socket]) -> None:
    module, cpu, host = agent
    a, b = module.KpsdkBreakpoint(0xC1023090, 1), module.KpsdkBreakpoint(0xC1023095, 1)
    assert _hit(module, a, host) == (False, ["H c1023090 1 "])
    cpu.regs["eip"] = 0xC1023095
    assert _hit(module, b, host) == (False, ["H c1023095 1 "])
    cpu.regs["eip"] = 0xC1023090
    cpu.regs["eax"] += 1
    assert _hit(module, a, host) == (False, ["H c1023090 1 "])
