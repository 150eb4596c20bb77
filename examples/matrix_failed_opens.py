"""The README's failed opens, on Debian's kernel of any architecture: a script for ``kpsdk matrix``.

``kpsdk matrix --kernels x86_64,i386,arm,riscv64,ppc64le --script examples/matrix_failed_opens.py:failed_opens``
boots each kernel in its own process and calls :func:`failed_opens` with its session.  A trace
definition names the file name by the kernel's own spelling: ``$arg2`` where the kernel takes
``$argN`` in probe events (x86_64, i386, riscv64), the argument's register where it refuses
them (arm, ppc64le: see ``kpsdk archs``); that choice is why this is a function and not
``-e`` definitions.  Each target's process imports this file by its path.
"""

from __future__ import annotations

from typing import Any

#: the register of do_sys_openat2's second argument (the file name) on the kernels that refuse $argN
ARG2_REGISTER = {"arm": "%r1", "ppc64le": "%r4"}


def failed_open_definitions(arch: str) -> list[str]:
    """Each open's file name at the entry, each return's value: with the filter ``ret < 0``,
    the returns kept are the failed opens, each after its open."""
    arg2 = ARG2_REGISTER.get(arch, "$arg2")
    return [f"p:openat do_sys_openat2 name=+0({arg2}):ustring", "r:open do_sys_openat2 ret=$retval:s32"]


def failed_opens(session: Any, target: Any) -> Any:
    """Trace the opens of ``session``'s kernel until the guest powers off (or the target's timeout)."""
    trace = session.trace(failed_open_definitions(session.arch.name), filter="ret < 0")
    session.run(timeout=target.run_timeout)
    return trace
