"""What a target reports to plugins besides probe hits: the ``kpsdk_*`` target events.

Targets say what happened; plugins decide what to do with it (a syscall probe
type, an ``strace``-like printer, a coverage recorder).  The hooks are in
:mod:`kpsdk.hookspecs`; a target fires them through :meth:`kpsdk.target.Target.emit`,
so an event with no plugin listening costs one empty pluggy call.

========================  ========================================================
hook                      when
========================  ========================================================
``kpsdk_syscall_entry``   a system call is about to run (Unicorn's Linux layer)
``kpsdk_syscall_exit``    it ran: :attr:`SyscallEvent.result` is set
``kpsdk_program_exit``    the program ended (``exit``/``exit_group``, QEMU exited)
``kpsdk_library_loaded``  an ELF object is mapped: the program when a session
                          opens, later its libraries where the target sees them
``kpsdk_library_unloaded``  an ELF object went away
``kpsdk_run_end``         a ``run()`` ended: the program exited, it was stopped
                          (``stop()``, a timeout) or an error ended it
========================  ========================================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SyscallEvent:
    """One system call, as the target's Linux layer saw it.

    :param number: the call's number in the architecture's table.
    :param name: its name (``write``), or ``syscall_N`` where the target's table has none.
    :param args: the six argument registers, in order.
    :param pc: where the trap instruction is.
    :param result: the value returned (negative errno on failure); None until the call ran.
    """

    number: int
    name: str
    args: tuple[int, ...]
    pc: int
    result: int | None = None


#: ``kpsdk_run_end``'s reasons
RUN_EXITED, RUN_STOPPED, RUN_ERROR = "exited", "stopped", "error"
