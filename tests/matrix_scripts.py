"""Scripts the matrix tests run on their targets: each target's process imports them by name
(``tests.matrix_scripts:faulty``), so they live in a module of their own, not in a test file;
and the program corpus tests/test_matrix.py and bench/matrix.py share."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

#: a libc uprobe and its return probe, for Debian's own programs on the Linux layer
LIBC_MALLOC = ("p:m libc.so.6:malloc size=$arg1:u64", "r:mr libc.so.6:malloc $retval:x64")
#: the corpus' input file (tests/test_matrix.py, bench/matrix.py)
TEXT = "banana\napple\ncherry\napple\n"


def corpus_programs(data: Path) -> list[tuple[str, list[str]]]:
    """Debian's programs and their arguments (``data`` a file of four lines)."""
    f = str(data)
    return [
        ("/bin/true", []), ("/bin/false", []), ("/bin/echo", ["hello", "world"]), ("/bin/ls", ["/"]),
        ("/usr/bin/sort", [f]), ("/bin/cat", [f]), ("/usr/bin/head", ["-n", "2", f]), ("/usr/bin/tail", ["-n", "2", f]),
        ("/usr/bin/wc", [f]), ("/usr/bin/uniq", ["-c", f]), ("/usr/bin/cut", ["-c1-3", f]),
        ("/usr/bin/basename", ["/a/b/c.txt"]), ("/usr/bin/expr", ["2", "+", "3"]), ("/usr/bin/seq", ["10"]),
        ("/bin/grep", ["an", f]), ("/bin/sed", ["s/a/o/g", f]), ("/usr/bin/md5sum", [f]), ("/usr/bin/od", ["-c", f]),
        ("/usr/bin/base64", [f]), ("/usr/bin/nl", [f]), ("/usr/bin/tac", [f]), ("/usr/bin/rev", [f]),
    ]


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

