"""The kpsdk hook specifications (pluggy).

Everything kpsdk can do beyond its core comes from a plugin implementing these
hooks: architectures, target kinds, probe types, CLI commands and
``kpsdk trace`` output formats; and what a
target reports besides probe hits (system calls, program exit, libraries,
the end of a run) reaches plugins through the target-event hooks at the end.  Built-in ones
are plugins like any other and load through the same ``kpsdk`` entry-point
group, so a third-party package gets exactly the same powers.

A plugin is any module or object with functions named like these, decorated
with :data:`kpsdk.hookimpl`.  The set is kept small on purpose: a hook grows by
gaining keyword arguments (pluggy lets an implementation accept any subset), not
by adding new hooks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.events import SyscallEvent
    from kpsdk.outputformat import OutputFormat
    from kpsdk.probe import ProbeType
    from kpsdk.session import Session
    from kpsdk.target import MappedFile, TargetKind

hookspec = pluggy.HookspecMarker("kpsdk")


@hookspec
def kpsdk_archs() -> list[Arch]:
    """Return the architectures this plugin provides.

    Called once, when the first architecture is looked up.  Each :class:`~kpsdk.arch.Arch`
    is mostly data: registers, roles, calling conventions, breakpoint encodings.
    Two plugins returning the same architecture name is an error.
    """


@hookspec
def kpsdk_targets() -> list[TargetKind]:
    """Return the target kinds this plugin provides.

    A target kind is selected by the scheme of the string given to
    :func:`kpsdk.open` (``"unicorn:riscv64"`` selects the kind named ``unicorn``).
    """


@hookspec
def kpsdk_probe_types() -> list[ProbeType]:
    """Return the probe types this plugin provides.

    A probe type named ``kprobe`` gives every session ``register_kprobe``,
    ``register_kprobes``, ``unregister_kprobe(s)``, ``enable_kprobe``,
    ``disable_kprobe`` and the decorator ``s.kprobe(...)``, and puts the names in
    its ``exports`` (such as ``Kprobe``) into the ``kpsdk`` namespace.
    """


@hookspec
def kpsdk_session_start(session: Session) -> None:
    """Called when a session has been opened, before it is returned to the user.

    :param session: the new session; plugins may register probes on it (the
        way system-wide probes reach sessions opened later).
    """


@hookspec
def kpsdk_session_finish(session: Session) -> None:
    """Called when a session is closed, before its target is released.

    :param session: the session being closed.
    """


@hookspec
def kpsdk_cli(app: Any) -> None:
    """Add commands to the ``kpsdk`` command line.

    :param app: the root :class:`typer.Typer`; call ``app.command()(func)`` or
        ``app.add_typer(sub)``.  Only ``kpsdk/cli/exits.py`` turns exceptions
        into exit codes, so commands should simply raise kpsdk errors.
    """


@hookspec
def kpsdk_trace_formats() -> list[OutputFormat[Any]]:
    """Return the output formats this plugin gives ``kpsdk trace --output NAME``
    (and :func:`kpsdk.trace.output.make_writer`).

    Each :class:`~kpsdk.outputformat.OutputFormat` names a format and a factory
    that makes a :class:`~kpsdk.trace.output.Writer` for a stream: the writer is
    handed every :class:`~kpsdk.trace.events.TraceRecord` as it is made, then
    closed once.  kpsdk's own ``text``, ``jsonl`` and ``perfetto`` come through
    this hook too.  Two plugins returning the same format name is an error.
    """


# -- target events (kpsdk/events.py): called by targets, with the CPU stopped ------------------


@hookspec
def kpsdk_syscall_entry(session: Session, call: SyscallEvent) -> None:
    """A system call is about to run (the targets that emulate Linux: Unicorn).

    :param session: the session whose program made it.
    :param call: number, name, arguments and pc; ``result`` is None.  Read the
        registers with ``session.regs()``; changes to ``call`` are not seen by
        the target.
    """


@hookspec
def kpsdk_syscall_exit(session: Session, call: SyscallEvent) -> None:
    """The system call of the matching :func:`kpsdk_syscall_entry` ran.

    :param session: the session whose program made it.
    :param call: the same event, with ``result`` set (negative errno on failure).
        Not called for ``exit``/``exit_group``: :func:`kpsdk_program_exit` is.
    """


@hookspec
def kpsdk_program_exit(session: Session, status: int) -> None:
    """The program ended (``exit``/``exit_group`` on Unicorn, QEMU exiting on live targets).

    :param session: its session.
    :param status: the exit status.
    """


@hookspec
def kpsdk_library_loaded(session: Session, library: MappedFile) -> None:
    """An ELF object is mapped into the target: the program itself when a session
    opens (after :func:`kpsdk_session_start`), then each library the target sees
    being loaded.

    :param session: the session.
    :param library: its path, identity (device, inode), load bias and image.
    """


@hookspec
def kpsdk_library_unloaded(session: Session, library: MappedFile) -> None:
    """An ELF object reported by :func:`kpsdk_library_loaded` is no longer mapped.

    :param session: the session.
    :param library: what :func:`kpsdk_library_loaded` was given.
    """


@hookspec
def kpsdk_run_end(session: Session, reason: str, status: int | None) -> None:
    """A :meth:`Session.run <kpsdk.session.Session.run>` ended.

    :param session: the session.
    :param reason: ``"exited"`` (the program ended), ``"stopped"`` (``stop()`` or the
        timeout; the program can go on) or ``"error"`` (the run raised).
    :param status: the exit status when the program exited, else None.
    """
