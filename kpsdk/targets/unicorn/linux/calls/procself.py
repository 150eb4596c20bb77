"""The process's own ``/proc/self``: what its entries are, and the files kpsdk makes of them.

Not calls: what ``open``, ``stat``, ``readlink`` and ``chdir`` (:mod:`.fs`, :mod:`.filestat`)
ask when the path walk ends in the process's own /proc (``/proc/self``, ``/proc/thread-self``,
``/proc/PID``: :meth:`~kpsdk.targets.unicorn.linux.files.Sysroot.own`), or in another emulated
process's ``/proc/PID``: the calls then ask that process (:meth:`ProcSelf.proc_of`), whose
entries are made the same way from it.  The bytes of its files
are made by :mod:`kpsdk.targets.unicorn.linux.procfs`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Self

from kpsdk.targets.unicorn.linux import procfs
from kpsdk.targets.unicorn.linux.calls.core import PPID, ProcessCore
from kpsdk.targets.unicorn.linux.files import O_ACCMODE, OpenFile, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import MemDir, MemNode
from kpsdk.targets.unicorn.linux.memory import page_up
from kpsdk.targets.unicorn.linux.tasks import RUNNABLE, STOPPED
from kpsdk.targets.unicorn.linux.tree import FdTarget, Ref, proc_fd_number


def own_fd(entry: str) -> int:
    """N of the /proc/self entry ``fd/N`` (a name ``own_kind`` found a descriptor by)."""
    number = proc_fd_number(entry.partition("/")[2])
    if number is None:
        raise _GuestErrno(errno.ENOENT)
    return number


class ProcSelf(ProcessCore):
    """The entries of the process's own /proc, for the calls that walk paths."""

    #: the files of its own /proc/self kpsdk makes (:mod:`kpsdk.targets.unicorn.linux.procfs`)
    OWN_FILES = ("maps", "cmdline", "environ", "auxv", "comm", "stat", "status")

    def proc_of(self, ref: Ref) -> Self:
        """The process whose /proc a walk ended in (``ref.own`` set): this one, or the other
        emulated process of ``ref.pid`` (ENOENT once it is gone: reaped between walk and call)."""
        if ref.pid is None or ref.pid == self.pid:
            return self
        other = self.kernel.processes.get(ref.pid) if self.kernel is not None else None
        if not isinstance(other, type(self)):  # None: gone; else every process is a LinuxProcess
            raise _GuestErrno(errno.ENOENT)
        return other

    def proc_state(self) -> tuple[str, str]:
        """The process's state as /proc shows it: the letter and its name (fs/proc/array.c)."""
        if not self.threads or self.exit_status is not None:
            return "Z", "zombie"
        current = self.kernel.current if self.kernel is not None else None
        states = {task.state for task in self.threads}
        if current is not None and current in self.threads or RUNNABLE in states:
            return "R", "running"
        if STOPPED in states:
            return "T", "stopped"
        return "S", "sleeping"

    def proc_comm(self) -> str:
        """The name /proc/PID/comm shows: the thread-group leader's (``prctl(PR_SET_NAME)``'s)."""
        leader = self.threads[0] if self.threads else None
        return (leader.comm if leader is not None and leader.comm else None) or self.comm

    def own_kind(self, entry: str, verb: str) -> str:
        """What ``/proc/self/ENTRY`` is: ``dir`` (itself, ``fd``), ``link`` (``exe``, ``fd/N`` of an
        open descriptor) or ``file``; ENOENT, recorded under ``verb``, for what kpsdk does not make.
        A trailing ``/`` has gone with the walk; the callers check it."""
        if entry in ("", "fd"):
            return "dir"
        if entry == "exe":
            return "link"
        if entry in self.OWN_FILES:
            return "file"
        head, _, fd = entry.partition("/")
        if head == "fd" and "/" not in fd:
            if proc_fd_number(fd) in self.fds.fds:
                return "link"
            raise _GuestErrno(errno.ENOENT)  # a closed descriptor or no number: ENOENT on Linux too
        self.unimplemented[f"{verb} /proc/self/{entry}"] += 1
        raise _GuestErrno(errno.ENOENT)

    def own_bytes(self, entry: str) -> bytes:
        """The bytes of ``/proc/self/ENTRY`` (one of OWN_FILES), made now from the process."""
        if entry == "maps":
            names = dict(self.mem.names)
            if self.mem.brk_end > self.mem.brk_base:
                names[(self.mem.brk_base, page_up(self.mem.brk_end))] = ("[heap]", 0)
            if self.stack is not None:
                names[self.stack] = ("[stack]", 0)
            return procfs.maps(self.mem.table.regions(), names,
                               self.arch.word_size)
        if entry == "cmdline":
            return procfs.nul_separated(self.argv)
        if entry == "environ":
            return procfs.nul_separated(self.envp)
        if entry in ("comm", "stat", "status"):
            return self._proc_text(entry)
        return self.auxv

    def _proc_text(self, entry: str) -> bytes:
        """``comm``, ``stat`` and ``status`` of the process, in Linux's formats (procfs)."""
        comm = self.proc_comm()
        if entry == "comm":
            return f"{comm}\n".encode()
        letter, name = self.proc_state()
        ppid = self.parent.pid if self.parent is not None else PPID
        threads = max(len(self.threads), 1)
        if entry == "stat":
            vsize = sum(hi - lo for lo, hi, _ in self.mem.table.regions())
            return procfs.stat_line(self.pid, comm, letter, ppid, self.pgid, self.sid, threads, vsize,
                                    self.exit_signal)
        fds = max(self.fds.fds, default=0)
        return procfs.status(comm, self.umask, f"{letter} ({name})", self.pid, ppid, os.getuid(), os.getgid(),
                             fds, os.getgroups(), threads)  # the ids getuid, getgroups... answer

    def own_link(self, entry: str) -> str:
        """Where the link ``/proc/self/ENTRY`` points: the program, or an open descriptor's file."""
        if entry == "exe":
            return self.exe
        f = self.fds.get(own_fd(entry))
        if f.kind in ("stdin", "console", "pipe_r", "pipe_w"):
            return f"pipe:[{id(f) % 1000000}]"  # kpsdk's stdin, console and pipes
        node = f.node
        if isinstance(node, MemNode) and not isinstance(node, MemDir) and not node.nlink:
            return f"{f.path} (deleted)"  # removed, or O_TMPFILE's never named, as Linux says
        return f.path

    def open_own(self, entry: str, path: str, flags: int) -> OpenFile:
        """Open ``/proc/self/ENTRY``: a file of bytes made now (read-only); the program (``exe``);
        ``fd/N`` of kpsdk's stdin, console and pipes, or of ``/dev/null``: that description
        itself, for reading or writing as it allows (``/dev/stderr`` is ``fd/2``).  ``fd/N`` of
        a file the walk can reach does not come here: it followed it."""
        kind = self.own_kind(entry, "open")
        if kind == "dir":
            self.unimplemented[f"open /proc/self/{entry}".rstrip("/")] += 1  # its listing is not made
            raise _GuestErrno(errno.ENOENT)
        if path.endswith("/"):
            raise _GuestErrno(errno.ENOTDIR)
        if entry.startswith("fd/"):
            return self.fds.get(own_fd(entry))
        if flags & O_ACCMODE:  # Linux: the running program is ETXTBSY, its /proc files mode 0444
            raise _GuestErrno(errno.ETXTBSY if entry == "exe" else errno.EACCES)
        if kind == "file":
            return OpenFile("procfile", path=f"/proc/{self.pid}/{entry}", data=self.own_bytes(entry), flags=flags)
        try:
            fd = os.open(self.exe, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise _GuestErrno(e.errno or errno.ENOENT) from None
        return OpenFile("host", path=f"/proc/{self.pid}/exe", fd=self.root.host_fds.add(fd), flags=flags,
                        host=Path(self.exe), host_fds=self.root.host_fds)

    def fd_target(self, fd: int) -> FdTarget | None:
        """Where ``/proc/self/fd/N`` leads the path walk: the guest path of the file open on it
        (opened anew there, as Linux does) and, for a file of the overlay, its inode (reached
        even when it no longer has that name); None for kpsdk's stdin, console and pipes."""
        f = self.fds.fds.get(fd)
        if f is None or f.kind in ("stdin", "console", "pipe_r", "pipe_w") or not f.path.startswith("/"):
            return None
        node = f.node
        if isinstance(node, MemNode) and not isinstance(node, MemDir):
            return f.path, node
        if node is not None and f.kind in ("dir", "path"):
            return self.root.path_of(node, f.path), None
        return f.path, None
