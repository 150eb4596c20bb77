"""kpsdk's agent inside gdb: per-hit dispatch without a round trip through MI.

gdb sources this file (``source .../gdb_agent.py``); it runs in gdb's own
Python, never in kpsdk's process, so it uses only the standard library and the
``gdb`` module.  Why it exists: a breakpoint stop reported over MI, parsed by
the host and resumed with ``-exec-continue`` costs ~2.7 ms; a Python
``gdb.Breakpoint.stop()`` that returns False costs ~1 ms, the same as gdb's
own ``commands; continue; end`` loop.  So every kpsdk breakpoint is one of the
:class:`KpsdkBreakpoint` below, and ``stop()`` asks the host, over a socket
pair inherited by gdb (fd in ``KPSDK_AGENT_FD``), what to do.

The protocol is one line per message, space-separated, integers in hex:

agent -> host
    ``H ADDR THREAD [NAME=VALUE ...]``  a hit on the breakpoint at ADDR, with
    the registers the host asked to have sent with every hit of it.
    ``v [VALUE]`` / ``e MESSAGE``  the answer to a request.
host -> agent (during a hit; the CPU is stopped)
    ``r NAME``  read a register; ``m ADDR SIZE``  read memory (hex bytes back);
    ``p ADDR SIZE``  read physical memory (QEMU's ``Qqemu.PhyMemMode``);
    ``w ADDR HEXBYTES``  write memory; ``b ADDR HW`` / ``d ADDR``  insert or
    delete a breakpoint; then one final
    ``c|s [NAME=VALUE ...] [+NAME ...]``  write registers, add NAMEs to this
    breakpoint's prefetch list, and continue (``c``) or stop for real (``s``:
    gdb then reports a ``*stopped`` over MI and the host takes over).

When the CPU is stopped under MI the host calls :func:`insert`, :func:`delete`
and :func:`prefetch` with ``-interpreter-exec console "python ..."``.

Waiting for the host spins for a short while before blocking: the host answers
in tens of microseconds, and waking a blocked process here costs ~0.3 ms,
which would be a third of the cost of a hit.  Each turn of the spin yields the
CPU (``sched_yield``): on a busy machine the host it waits for may need it.
"""

import os
import socket
import time
import types

import gdb  # type: ignore[import-not-found]  # only exists inside gdb

SPIN_SECONDS = 0.002

_sock = socket.socket(fileno=int(os.environ["KPSDK_AGENT_FD"]))
_sock.setblocking(False)
_buf = b""
_breakpoints: dict = {}
_in_stop = False


def _recv_line():
    """The next line from the host: spin briefly, then block."""
    global _buf
    deadline = time.perf_counter() + SPIN_SECONDS
    while b"\n" not in _buf:
        try:
            chunk = _sock.recv(65536)
        except BlockingIOError:
            if time.perf_counter() < deadline:
                os.sched_yield()
                continue
            _sock.setblocking(True)
            try:
                chunk = _sock.recv(65536)
            finally:
                _sock.setblocking(False)
        if not chunk:
            raise EOFError("kpsdk went away")
        _buf += chunk
    line, _, _buf = _buf.partition(b"\n")
    return line.decode()


def _send(text):
    _sock.sendall(text.encode() + b"\n")


def _read_register(name):
    return int(gdb.parse_and_eval("$" + name)) & ((1 << 64) - 1)


def _write_register(name, value):
    gdb.execute(f"set var ${name} = {value}", to_string=True)


def insert(addr, hardware=0):
    """Put a kpsdk breakpoint at ``addr`` (idempotent; wakes a dormant one)."""
    bp = _breakpoints.get(addr)
    if bp is None:
        _breakpoints[addr] = KpsdkBreakpoint(addr, bool(hardware))
    else:
        bp.dormant = False


def delete(addr):
    """Remove the breakpoint at ``addr``.

    Inside a ``stop()`` gdb must not lose a breakpoint (deleting the one
    being processed crashes gdb 13), so there it only goes dormant: it stays
    inserted, ``stop()`` returns False at once, and :func:`purge` deletes it
    once the CPU is stopped under MI.
    """
    bp = _breakpoints.get(addr)
    if bp is None:
        return
    if _in_stop:
        bp.dormant = True
    else:
        del _breakpoints[addr]
        bp.delete()


def purge():
    """Delete the dormant breakpoints (called through MI while the CPU is stopped)."""
    for addr in [a for a, bp in _breakpoints.items() if bp.dormant]:
        _breakpoints.pop(addr).delete()


def prefetch(addr, names):
    """Send these registers with every hit of the breakpoint at ``addr``."""
    bp = _breakpoints.get(addr)
    if bp is not None:
        bp.prefetch = [n for n in names.split(",") if n]


def _phys_mode(on):
    """QEMU's gdbstub reads physical memory while PhyMemMode is 1 (QEMU's
    docs/system/gdb.rst); gdb's memory cache is flushed both ways, since the same
    numbers name other bytes in the other mode."""
    out = gdb.execute(f"maintenance packet Qqemu.PhyMemMode:{1 if on else 0}", to_string=True)
    gdb.execute("maintenance flush dcache", to_string=True)
    if '"OK"' not in out:
        raise ValueError("the gdbstub has no physical memory mode (not QEMU's)")


def _read_physical(addr, size):
    """``size`` bytes at physical address ``addr``; virtual mode again afterwards."""
    _phys_mode(True)
    try:
        return bytes(gdb.selected_inferior().read_memory(addr, size))
    finally:
        _phys_mode(False)


def _serve(cmd):
    """One request during a hit; the answer line."""
    op, _, rest = cmd.partition(" ")
    try:
        if op == "r":
            return f"v {_read_register(rest):x}"
        if op == "m":
            addr, size = (int(x, 16) for x in rest.split())
            return "v " + bytes(gdb.selected_inferior().read_memory(addr, size)).hex()
        if op == "p":
            addr, size = (int(x, 16) for x in rest.split())
            return "v " + _read_physical(addr, size).hex()
        if op == "w":
            addr, data = rest.split()
            gdb.selected_inferior().write_memory(int(addr, 16), bytes.fromhex(data))
            return "v"
        if op == "b":
            addr, hw = rest.split()
            insert(int(addr, 16), int(hw))
            return "v"
        if op == "d":
            delete(int(rest, 16))
            return "v"
        if op == "t":  # the stub's id of the hit's thread (qemu-user: the guest's thread id)
            thread = gdb.selected_thread()
            ptid = thread.ptid if thread is not None else (0, 0, 0)
            return f"v {(ptid[1] or ptid[0]):x}"
        return "e unknown request " + op
    except (gdb.error, gdb.MemoryError, ValueError) as exc:
        return "e " + str(exc).replace("\n", " ")


def _converse(report, prefetch):
    """Send a hit's report, serve the host's requests until its final ``c|s`` line,
    apply the register writes that line carries and say whether to stop.

    ``+NAME`` words ask for that register with the point's later hits (``prefetch``,
    a breakpoint's list; None for watchpoints, which send no registers)."""
    _send(report)
    while True:
        line = _recv_line()
        if line[:1] in ("c", "s"):
            break
        _send(_serve(line))
    for word in line[2:].split():
        if word[0] == "+":
            if prefetch is not None and word[1:] not in prefetch:
                prefetch.append(word[1:])
        else:
            name, _, value = word.partition("=")
            _write_register(name, int(value, 16))
    return line[0] == "s"


class KpsdkBreakpoint(gdb.Breakpoint):
    """A kpsdk probe point: ``stop()`` hands the hit to the host."""

    def __init__(self, addr, hardware):
        kind = gdb.BP_HARDWARE_BREAKPOINT if hardware else gdb.BP_BREAKPOINT
        super().__init__(f"*{addr:#x}", type=kind, internal=True)
        self.addr = addr
        self.prefetch = []
        self.dormant = False

    def stop(self):
        global _in_stop
        if self.dormant:
            return False
        _in_stop = True
        try:
            thread = gdb.selected_thread()
            tid = thread.num if thread is not None else 0
            regs = " ".join(f"{n}={_read_register(n):x}" for n in self.prefetch)
            return _converse(f"H {self.addr:x} {tid:x} {regs}", self.prefetch)
        except EOFError:
            return True
        finally:
            _in_stop = False


#: what the host calls through MI (``python kpsdk_agent.insert(0x401000, 0)``)
kpsdk_agent = types.SimpleNamespace(insert=insert, delete=delete, purge=purge, prefetch=prefetch)


# -- watchpoints (kpsdk.targets.livewatch) ---------------------------------------------------
#
# A hit is reported as ``W ID THREAD KIND OLDHEX NEWHEX`` (``-`` for no bytes), then
# served exactly like a breakpoint hit (requests, then ``c|s [NAME=VALUE ...]``).

_watches: dict = {}


def watch(wid, addr, length, kind, software=0):
    """Watch ``length`` bytes at ``addr`` (``kind`` w, r, rw; x: a hardware breakpoint).

    ``software``: gdb's software watchpoints (it single-steps the program and
    compares the value after each instruction), for stubs without Z2-Z4.  gdb
    decides hardware or software whenever it re-inserts a watchpoint, so the
    setting stays off for the rest of the session.
    """
    if software:
        gdb.execute("set can-use-hw-watchpoints 0", to_string=True)
    _watches[wid] = KpsdkWatchpoint(wid, addr, length, kind)


def unwatch(wid):
    wp = _watches.pop(wid, None)
    if wp is not None:
        wp.delete()


class KpsdkWatchpoint(gdb.Breakpoint):
    """A kpsdk watchpoint: ``stop()`` reports the bytes before and after to the host.

    gdb does not say what the CPU accessed, so "before" is what this watchpoint saw
    last (when it was set, then at each hit), and an access watchpoint whose bytes
    did not change is reported as a read.
    """

    def __init__(self, wid, addr, length, kind):
        if kind == "x":
            super().__init__(f"*{addr:#x}", type=gdb.BP_HARDWARE_BREAKPOINT, internal=True)
        else:
            wp_class = {"w": gdb.WP_WRITE, "r": gdb.WP_READ, "rw": gdb.WP_ACCESS}[kind]
            super().__init__(f"*(unsigned char (*)[{length}]) {addr:#x}", type=gdb.BP_WATCHPOINT,
                             wp_class=wp_class, internal=True)
        self.wid, self.addr, self.length, self.kind = wid, addr, length, kind
        self.last = self._bytes() if kind != "x" else b""

    def _bytes(self):
        return bytes(gdb.selected_inferior().read_memory(self.addr, self.length))

    def stop(self):
        global _in_stop
        _in_stop = True
        try:
            thread = gdb.selected_thread()
            tid = thread.num if thread is not None else 0
            kind, old, new = "x", b"", b""
            if self.kind != "x":
                old, new = self.last, self._bytes()
                self.last = new
                kind = "w" if new != old or self.kind == "w" else "r"
            return _converse(f"W {self.wid:x} {tid:x} {kind} {old.hex() or '-'} {new.hex() or '-'}", None)
        except EOFError:
            return True
        finally:
            _in_stop = False


#: what the host calls through MI for watchpoints (``python kpsdk_watch.watch(1, 0x4c0000, 4, "w")``)
kpsdk_watch = types.SimpleNamespace(watch=watch, unwatch=unwatch)
