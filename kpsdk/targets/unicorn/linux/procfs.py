"""The program's own ``/proc/self``: its maps, command line, environment, auxv and executable;
its ``comm``, ``stat`` and ``status``.  Every emulated process's ``/proc/PID`` is made the same
way from that process.

With the host's root as the sysroot, ``/proc/self`` would be kpsdk's own Python process:
a program reading ``/proc/self/maps`` (glibc's ``pthread_getattr_np`` does, to find the
main thread's stack: GNU grep's stack-overflow guard calls it at start-up) got the host
interpreter's memory map, and ``/proc/self/environ`` the host's environment.  So the
process's own entries (``/proc/self``, ``/proc/thread-self``, ``/proc/PID``) are made
here from the emulated process, whatever the sysroot and however a path reaches them (a
link such as ``/dev/stdin``, a ``chdir`` into ``/proc/self``: the sysroot's path walk,
:meth:`.files.Sysroot.walk`, never looks them up on the host); an entry not made here is
ENOENT, recorded with the calls kpsdk does not emulate, never the host process's.  Other
``/proc`` files (``cpuinfo``, ``meminfo``...) are the sysroot's, as any file.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: what Linux's ``/proc/PID/maps`` pads a line to before the name (fs/proc/task_mmu.c:
#: ``25 + sizeof(void *) * 6 - 1`` columns), by word size
_NAME_COLUMN = {4: 25 + 4 * 6 - 1, 8: 25 + 8 * 6 - 1}
#: Unicorn's permission bits
_READ, _WRITE, _EXEC = 1, 2, 4


@dataclass
class _Line:
    start: int
    end: int
    perms: int
    offset: int
    name: str


def maps(regions: Iterable[tuple[int, int, int]], names: dict[tuple[int, int], tuple[str, int]],
         word_size: int) -> bytes:
    """``/proc/self/maps`` of ``regions`` (start, end, Unicorn permissions), each split where
    ``names`` (by range: a name and the file offset at the range's start) changes; adjacent
    lines of the same permissions and name merged as Linux merges its areas (a file's only
    where the offsets run on)."""
    cuts = sorted(names)
    lines: list[_Line] = []
    for lo, hi, perms in sorted(regions):
        at = lo
        while at < hi:
            name, offset, end = "", 0, hi
            for start, stop in cuts:
                if start <= at < stop:
                    name, base = names[(start, stop)]
                    offset, end = base + (at - start), min(hi, stop)
                    break
                if at < start < end:
                    end = start
            last = lines[-1] if lines else None
            if last is not None and last.end == at and last.perms == perms and last.name == name \
                    and (not name.startswith("/") or last.offset + (at - last.start) == offset):
                last.end = end
            else:
                lines.append(_Line(at, end, perms, offset, name))
            at = end
    width = _NAME_COLUMN[word_size]
    out = []
    for line in lines:
        flags = "".join(c if line.perms & bit else "-" for c, bit in (("r", _READ), ("w", _WRITE), ("x", _EXEC)))
        head = f"{line.start:08x}-{line.end:08x} {flags}p {line.offset:08x} 00:00 0 "  # Linux's trailing space
        out.append(f"{head.ljust(width)} {line.name}" if line.name else head)
    return "".join(f"{line}\n" for line in out).encode()


def nul_separated(items: Iterable[bytes]) -> bytes:
    """``cmdline`` and ``environ``: each string followed by a NUL."""
    return b"".join(item + b"\0" for item in items)


#: /proc/PID/stat's fields (fs/proc/array.c, do_task_stat): 52 of them since Linux 3.5
STAT_FIELDS = 52
#: PF_RANDOMIZE... what a user process's flags show at rest (PF_RANDOMIZE only: 0x400000)
_PF_FLAGS = 0x400000
#: RLIM_INFINITY as rsslim prints it
_RLIM_INFINITY = 2**64 - 1


def stat_line(pid: int, comm: str, state: str, ppid: int, pgid: int, sid: int, threads: int, vsize: int,
              exit_signal: int) -> bytes:
    """``/proc/PID/stat``: one line of 52 fields as Linux writes it; what kpsdk does not keep
    (fault counts, times, addresses of the image) is 0, as for a process that hides them."""
    fields: list[object] = [pid, f"({comm})", state, ppid, pgid, sid, 0, -1, _PF_FLAGS,
                            0, 0, 0, 0, 0, 0, 0, 0, 20, 0, threads, 0, 0, vsize, 0, _RLIM_INFINITY]
    fields += [0] * (STAT_FIELDS - len(fields))
    fields[37] = exit_signal  # the 38th, exit_signal
    return (" ".join(str(f) for f in fields) + "\n").encode()


def status(comm: str, umask: int, state: str, pid: int, ppid: int, uid: int, gid: int, max_fd: int,
           groups: list[int], threads: int) -> bytes:
    """``/proc/PID/status``: the lines kpsdk knows, in Linux's order and format (tab after the
    colon; FDSize the descriptor table's size, 64 and doubled as Linux grows it; Groups each
    supplementary group, a space after the list)."""
    fdsize = 64
    while fdsize <= max_fd:
        fdsize *= 2
    lines = [("Name", comm), ("Umask", f"{umask:04o}"), ("State", state), ("Tgid", pid), ("Ngid", 0),
             ("Pid", pid), ("PPid", ppid), ("TracerPid", 0), ("Uid", "\t".join([str(uid)] * 4)),
             ("Gid", "\t".join([str(gid)] * 4)), ("FDSize", fdsize),
             ("Groups", " ".join(str(g) for g in groups) + " "), ("Threads", threads)]
    return "".join(f"{key}:\t{value}\n" for key, value in lines).encode()
