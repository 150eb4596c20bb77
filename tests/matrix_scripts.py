"""Scripts the matrix tests run on their targets: each target's process imports them by name
(``tests.matrix_scripts:faulty``), so they live in a module of their own, not in a test file."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

#: a libc uprobe and its return probe, for Debian's own programs on the Linux layer
LIBC_MALLOC = ("p:m libc.so.6:malloc size=$arg1:u64", "r:mr libc.so.6:malloc $retval:x64")


def traced(session: Any, target: Any) -> Any:
    """The same as the trace script of LIBC_MALLOC, written as a function."""
    trace = session.trace(list(LIBC_MALLOC))
    session.run(timeout=target.run_timeout)
    return trace


def faulty(session: Any, target: Any) -> Any:
    """A target that fails the way its name says; the others are traced as usual.

    - ``hang``: sleeps past its limit (SIGTERM stops it);
    - ``stubborn``: sleeps past its limit with SIGTERM blocked (SIGKILL stops it);
    - ``sigkill``: its process is killed by SIGKILL;
    - ``host-sigkill``: its worker (the fork host that forked it) is killed by SIGKILL;
    - ``raises``: the script raises.
    """
    name = target.name
    if name == "hang":
        time.sleep(3600)
    if name == "stubborn":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        time.sleep(3600)
    if name == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if name == "host-sigkill":
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(3600)  # the host's end takes this process with it
    if name == "raises":
        raise ZeroDivisionError("the script divided by zero")
    return traced(session, target)

