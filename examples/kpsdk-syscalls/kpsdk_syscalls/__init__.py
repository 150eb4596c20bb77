"""kpsdk-syscalls: an out-of-tree kpsdk plugin built on the target-event hooks.

It adds a **probe type**, ``syscallprobe``: a handler on a system call, by name
or number, at its entry and at its exit::

    import kpsdk

    s = kpsdk.open("elf:prog")
    sp = kpsdk.SyscallProbe(name="write", exit_handler=lambda sp, call: print(call.args, call.result))
    s.register_syscallprobe(sp)
    s.run()

and a **CLI command**, ``kpsdk strace TARGET``, which prints every system call
the program makes, the way strace does, then ``+++ exited with N +++``.

Nothing here reaches into a target: the calls come from the hooks
``kpsdk_syscall_entry``/``kpsdk_syscall_exit`` and ``kpsdk_program_exit``
(kpsdk/hookspecs.py), which any target emulating Linux fires.  Registered
probes are kept per session, outside kpsdk's probe manager, and shown by
``list()`` and ``profile()`` through the probe type's ``held`` field.
"""

# No ``from __future__ import annotations``: typer reads the CLI command's annotations.

import errno
import weakref
from collections.abc import Callable
from typing import Annotated, Any

from kpsdk import KprobeError, Probe, ProbeType, hookimpl
from kpsdk.events import SyscallEvent
from kpsdk.session import Session

__all__ = ["SYSCALLPROBE", "SyscallProbe"]

SyscallHandler = Callable[["SyscallProbe", SyscallEvent], Any]


class SyscallProbe(Probe):
    """A handler on one system call, by ``name`` (``"write"``) or ``number``.

    :param entry_handler: ``(sp, call)`` before the call runs.
    :param exit_handler: ``(sp, call)`` after it, ``call.result`` set.
    ``hits`` counts the calls seen.
    """

    letter = "s"

    def __init__(self, *, name: str | None = None, number: int | None = None,
                 entry_handler: SyscallHandler | None = None, exit_handler: SyscallHandler | None = None) -> None:
        super().__init__()
        self.syscall, self.number = name, number
        self.entry_handler, self.exit_handler = entry_handler, exit_handler
        self.label = f"syscall:{name if name is not None else number}"

    def matches(self, call: SyscallEvent) -> bool:
        return call.name == self.syscall if self.syscall is not None else call.number == self.number


#: the probes registered on each session
_registered: "weakref.WeakKeyDictionary[Session, list[SyscallProbe]]" = weakref.WeakKeyDictionary()


def register(session: Session, sp: SyscallProbe) -> None:
    if sp.registered:
        raise KprobeError(errno.EINVAL, f"{sp!r} is already registered")
    if (sp.syscall is None) == (sp.number is None):
        raise KprobeError(errno.EINVAL, "give exactly one of name and number")
    _registered.setdefault(session, []).append(sp)
    sp.session = session


def unregister(session: Session, sp: SyscallProbe) -> None:
    probes = _registered.get(session, [])
    if sp not in probes:
        raise KprobeError(errno.EINVAL, f"{sp!r} is not registered in this session")
    probes.remove(sp)
    sp.session = None


def _dispatch(session: Session, call: SyscallEvent, phase: str) -> None:
    for sp in _registered.get(session, ()):
        if not sp.disabled and sp.matches(call):
            handler = sp.entry_handler if phase == "entry" else sp.exit_handler
            sp.hits += phase == "entry"
            if handler is not None:
                handler(sp, call)


def _set_disabled(session: Session, sp: SyscallProbe, disabled: bool) -> None:
    sp.flags = sp.flags | 2 if disabled else sp.flags & ~2


SYSCALLPROBE = ProbeType(
    name="syscallprobe",
    probe_class=SyscallProbe,
    register=register,
    unregister=unregister,
    exports={"SyscallProbe": SyscallProbe},
    decorator_field="exit_handler",
    description="a handler on a system call's entry and exit",
    parse_location=lambda where: {"name": where} if isinstance(where, str) else {"number": where},
    set_disabled=_set_disabled,
    held=lambda session: [(0, sp) for sp in _registered.get(session, ())],
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [SYSCALLPROBE]


@hookimpl
def kpsdk_syscall_entry(session: Session, call: SyscallEvent) -> None:
    _dispatch(session, call, "entry")


@hookimpl
def kpsdk_syscall_exit(session: Session, call: SyscallEvent) -> None:
    _dispatch(session, call, "exit")


# -- kpsdk strace ------------------------------------------------------------------------------


def strace_line(call: SyscallEvent, nargs: int = 3) -> str:
    """``write(1, 0x401000, 6) = 6``: the call as strace prints it, arguments in hex past 9."""
    args = ", ".join(str(a) if a < 10 else hex(a) for a in call.args[:nargs])
    return f"{call.name}({args}) = {call.result}"


@hookimpl
def kpsdk_cli(app: Any) -> None:
    import typer

    @app.command("strace")
    def strace(target: Annotated[str, typer.Argument(help="An ELF run in Unicorn (a path, or a bundled "
                                                            "fixture's name: x86_64, arm...)")]) -> None:
        """Print every system call the program makes, then how it exited (as strace does)."""
        import kpsdk
        from kpsdk.fixtures import ARCHS, path

        spec = "elf:" + (str(path(target)) if target in ARCHS else target)
        with kpsdk.open(spec) as s:
            lines: list[str] = []
            s.register(SyscallProbe(name="write", exit_handler=lambda sp, call: lines.append(strace_line(call))))
            status = s.run()
            for line in lines:
                typer.echo(line)
            typer.echo(f"+++ exited with {status} +++")
