"""The registers a ``kpsdk probe`` hit prints (``--regs``), checked before anything runs.

A name is a register of the architecture (or an alias), a role (``ip``,
``sp``, ``return_value``) or ``argN``, the N-th argument by the session's
calling convention, counted from 1 as the kernel's ``$argN`` (``arg1`` is the first:
every name the CLI prints for an argument is numbered so).  Names are checked when the probes are registered, so a
typo is an error at once, never at the first hit.  A hit line starts with :func:`hit_head`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.text import Text

from kpsdk.binfmt.symbols import shown_name
from kpsdk.errors import TargetFault, UnknownNameError, shown

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: argument numbers (argN, --string-arg N) go from 1 to this: the kernel's $argN limit,
#: PARAM_MAX_STACK (kpsdk.trace.grammar), which no stack reaches
ARG_LIMIT = 2048


def default_regs(arch: Arch, abi_kind: str = "user") -> list[str]:
    """The first four arguments (by the session's ABI), the stack pointer and the return-value register."""
    args = list(arch.abi(abi_kind).args[:4]) or [f"arg{i}" for i in range(1, 5)]
    return list(dict.fromkeys([*args, arch.sp, arch.return_value]))


def arg_number(name: str) -> int | None:
    """N of ``argN`` (ASCII digits), else None; more digits than any argument number has
    gives one past :data:`ARG_LIMIT` (out of range), never a 5000-digit conversion."""
    digits = name[3:] if name.startswith("arg") else ""
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) if len(digits) <= 9 else ARG_LIMIT + 1


def check_reg_names(arch: Arch, names: list[str]) -> None:
    """Unknown names are an error; so is an argument number the kernel's ``$argN`` could not
    name either (``PARAM_MAX_STACK``, :data:`ARG_LIMIT`), read from beyond any stack at every hit."""
    roles = ("ip", "pc", "sp", "return_value")
    for n in names:
        number = arg_number(n)
        if number is not None:
            if not 1 <= number <= ARG_LIMIT:
                raise typer.BadParameter(f"{shown(n)}: arguments go from arg1 to arg{ARG_LIMIT}, numbered as the "
                                         "kernel's $argN", param_hint="--regs")
            continue
        if n in roles or arch.has_register(n):
            continue
        raise UnknownNameError(f"{arch.name} register", n, [*arch.register_names, *roles, "argN"])


def read_reg(regs: PtRegs, name: str) -> int:
    """The value of a checked name at a hit: ``argN`` by the ABI (``regs.arg`` counts from 0),
    anything else by attribute."""
    number = arg_number(name)
    if number is not None:
        return regs.arg(number - 1)
    return int(getattr(regs, name))


def show_reg(regs: PtRegs, name: str) -> str:
    """``name=0x..``, or ``name=(fault)`` for a stack argument that cannot be read (as the
    kernel prints a fetch it could not make); the hit goes on."""
    try:
        return f"{name}={read_reg(regs, name):#x}"
    except TargetFault:
        return f"{name}=(fault)"


def hit_head(s: Session, n: int) -> Text:
    """A hit line's start, ``[n] ``; in a Unicorn Linux program that has made a second task, the
    task the hit is in follows, ``comm-pid `` as a trace's prefix shows it (``sh-1001``: the
    processes of a pipeline told apart).  Live targets' lines keep ``[n]`` alone (their task is
    a guest memory read per hit)."""
    head = Text(f"[{n}] ", style="bold")
    from kpsdk.targets.unicorn.processes import TaskSupport

    if isinstance(s.target, TaskSupport):
        task = s.target.task_info()
        if task is not None:
            head.append(f"{shown_name(task.comm)}-{task.pid} ", style="dim")
    return head
