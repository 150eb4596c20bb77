"""Private directories for QEMU's gdbstub sockets, and the removal of stale ones.

Each QEMU kpsdk starts listens on a unix socket in a directory only its user
can enter (``tempfile.mkdtemp``, mode 0700): nothing listens on the network,
no port can be taken.  The session removes the directory when it closes, but a
host process killed outright (``SIGKILL``) cannot, so the directory's name
carries the pid of the process that made it, ``kpsdk-PID-XXXXXXXX``, and every
new one first removes the stale ones: only the current user's own, only when
that pid is gone, never through a symlink.

What a stale check cannot see: a pid reused by an unrelated process keeps its
directory (a harmless leftover), and a process in another pid namespace that
shares this temporary directory looks gone.

The socket's path also reaches QEMU's ``-gdb unix:PATH,server=on`` (where a
comma starts an option) and gdb's ``target remote PATH`` (where ``:`` means
TCP and ``|`` a shell command), so the directory must have a plain path.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from kpsdk.errors import TargetError

PREFIX = "kpsdk-"
_STALE_NAME = re.compile(rf"{PREFIX}(\d+)-\w+")
#: characters QEMU's option parser and gdb's ``target remote`` both take as a plain path
_PLAIN_PATH = re.compile(r"[\w./+-]+")


def private_dir() -> tuple[Path, Callable[[], None]]:
    """A new private directory named after this process, and the function that removes it."""
    base = tempfile.gettempdir()
    if not _PLAIN_PATH.fullmatch(base):
        raise TargetError(f"the temporary directory {base!r} cannot hold QEMU's gdbstub socket: QEMU and gdb "
                          "take only letters, digits and ._/+- in its path (set TMPDIR to such a directory)")
    remove_stale(Path(base))
    tmp = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)
    return Path(tmp), lambda: shutil.rmtree(tmp, ignore_errors=True)


def remove_stale(base: Path) -> list[Path]:
    """Remove the directories in ``base`` that kpsdk processes of this user left behind
    when they died; returns them."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return []
    return [Path(entry.path) for entry in entries if _stale(entry) and _remove(entry.path)]


def _stale(entry: os.DirEntry[str]) -> bool:
    """A real directory (not a symlink) of this user, named after a process that is gone."""
    found = _STALE_NAME.fullmatch(entry.name)
    if found is None:
        return False
    try:
        if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
            return False
    except OSError:
        return False
    return not _alive(int(found.group(1)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's process has that pid; or no pid at all: not ours to judge
    return True


def _remove(path: str) -> bool:
    """rmtree, which on Linux works through directory fds and refuses a symlink at the top,
    so a swap under our feet cannot send it elsewhere."""
    try:
        shutil.rmtree(path)
    except OSError:
        return False
    return True
