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
    ``H ADDR THREAD [NAME=VALUE ...] [@ADDR=HEX ...]``  a hit on the breakpoint
    at ADDR, with the registers the host asked to have sent with every hit of it,
    and the memory (``+@REG:OFF:SIZE``: SIZE bytes at register REG + OFF).
    ``v [VALUE]`` / ``e MESSAGE``  the answer to a request.
host -> agent (during a hit; the CPU is stopped)
    ``r NAME``  read a register; ``m ADDR SIZE``  read memory (hex bytes back);
    ``p ADDR SIZE``  read physical memory (QEMU's ``Qqemu.PhyMemMode``);
    ``W NAME VALUE``  write a register now (kpsdk puts the old value back itself);
    ``w ADDR HEXBYTES``  write memory; ``b ADDR HW`` / ``d ADDR``  insert or
    delete a breakpoint; ``a ADDR``  report its every hit again (:func:`always`); then one final
    ``c|s [NAME=VALUE ...] [+NAME ...] [OP:ADDR[:HW] ...]``  write registers,
    add NAMEs to this breakpoint's prefetch list, change breakpoints, and
    continue (``c``) or stop for real (``s``: gdb then reports a ``*stopped``
    over MI and the host takes over).  The breakpoint changes: ``b:ADDR:HW``
    insert (as ``b``), ``d:ADDR`` delete (as ``d``), ``a:ADDR`` (as ``a``), ``t:ADDR:HW`` report the
    next hit at ADDR of this hit's thread only (the end of a single-step: a
    post_handler's successor, see below).  Carried by the final line, they cost
    no round trip; one that gdb refuses is reported as ``E MESSAGE`` and the
    CPU stops for real.

Single-step for post_handlers (K3) without an MI stop: gdb cannot step from
inside ``stop()``, but resuming from a breakpoint it steps over the probed
instruction anyway (breakpoint removed, one ``stepi``, breakpoint back), and a
step that lands on an address with an inserted breakpoint counts as that
breakpoint's hit.  So the host arms a breakpoint on each successor the
instruction can reach (``t:ADDR``): the hit there is the end of the step, one
round trip and no ``*stopped``.  A successor breakpoint nobody else wants is
disabled in its own ``stop()`` (removed from the stub at the next resume), so
code reached otherwise does not trap.

When the CPU is stopped under MI the host calls :func:`insert`, :func:`delete`
and :func:`prefetch` with ``-interpreter-exec console "python ..."``.

Waiting for the host spins for a short while before blocking: the host answers
in tens of microseconds, and waking a blocked process here costs ~0.3 ms,
which would be a third of the cost of a hit.  Each turn of the spin yields the
CPU (``sched_yield``): on a busy machine the host it waits for may need it.
It spins only while a CPU is free (:func:`_cpu_to_spare`): on a machine with
more runnable tasks than CPUs a spinning gdb cost 2-4x in hits per second
(docs/performance.md), since the scheduler then counts gdb as a CPU hog and
its every wake-up (QEMU's answers) waits longer.
"""

import os
import socket
import time
import types

import gdb  # type: ignore[import-not-found]  # only exists inside gdb

SPIN_SECONDS = 0.002
#: how often the agent looks again at how many tasks are runnable
LOAD_CHECK_SECONDS = 0.1

_sock = socket.socket(fileno=int(os.environ["KPSDK_AGENT_FD"]))
_sock.setblocking(False)
_buf = b""
_breakpoints: dict = {}
_in_stop = False


_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_spin_ok = True
_spin_checked = -LOAD_CHECK_SECONDS


def _cpu_to_spare():
    """Whether a CPU is free now: fewer runnable tasks than CPUs, this one not counted
    (``/proc/loadavg``'s running count), looked at every LOAD_CHECK_SECONDS at most."""
    global _spin_ok, _spin_checked
    now = time.monotonic()
    if now - _spin_checked >= LOAD_CHECK_SECONDS:
        _spin_checked = now
        try:
            with open("/proc/loadavg", "rb") as f:
                running = int(f.read().split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            running = 1  # not Linux: spin, as before
        _spin_ok = running - 1 < _cpus
    return _spin_ok


def _recv_line():
    """The next line from the host: spin briefly while a CPU is free, then block."""
    global _buf
    deadline = time.perf_counter() + (SPIN_SECONDS if _cpu_to_spare() else 0.0)
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
        bp.dormant = bp.transient = False
        bp.wake()


def arm_step(addr, hardware, thread):
    """Report the next hit at ``addr`` of gdb's thread ``thread``: the end of its
    single-step (a breakpoint is made, dormant for every other hit, if none is there)."""
    bp = _breakpoints.get(addr)
    if bp is None:
        bp = _breakpoints[addr] = KpsdkBreakpoint(addr, bool(hardware))
        bp.dormant = bp.transient = True
    bp.steps.add(thread)
    bp.wake()


def delete(addr):
    """Remove the breakpoint at ``addr``.

    Inside a ``stop()`` gdb must not lose a breakpoint (deleting the one
    being processed crashes gdb 13), so there it only goes dormant: it stays
    inserted, ``stop()`` returns False at once, and :func:`purge` deletes it
    once the CPU is stopped under MI.  It stays enabled: a kretprobe's return
    breakpoint goes dormant at each return and wakes at the next entry, and
    disabling it in between would cost gdb two more packets a call.
    """
    bp = _breakpoints.get(addr)
    if bp is None:
        return
    if _in_stop:
        bp.dormant = True
    else:
        del _breakpoints[addr]
        bp.delete()


def only_when(addr, where, size, value, big_endian):
    """Report the breakpoint at ``addr`` only when the ``size``-byte integer at ``where`` is
    ``value``; its other hits continue here, at no cost to the host.  For kpsdk's stop on the
    loader's ``r_brk``: glibc calls it before a change (``r_state`` RT_ADD or RT_DELETE) and
    after it (RT_CONSISTENT), and only the second one has news (kpsdk.targets.live.solibs)."""
    bp = _breakpoints.get(addr)
    if bp is not None:
        bp.only_when = (where, size, value, "big" if big_endian else "little")


def always(addr):
    """Report every hit of the breakpoint at ``addr`` again (a probe was put there)."""
    bp = _breakpoints.get(addr)
    if bp is not None:
        bp.only_when = None


def purge():
    """Delete the dormant breakpoints (called through MI while the CPU is stopped)."""
    for addr in [a for a, bp in _breakpoints.items() if bp.dormant and not bp.steps]:
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
        if op == "W":
            name, value = rest.split()
            _write_register(name, int(value, 16))
            return "v"
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
        if op == "a":
            always(int(rest, 16))
            return "v"
        if op == "t":  # the stub's id of the hit's thread (the guest's or the process's thread id), its name
            thread = gdb.selected_thread()
            ptid = thread.ptid if thread is not None else (0, 0, 0)
            name = (thread.name or "") if thread is not None else ""
            return f"v {(ptid[1] or ptid[0]):x} {name.replace(' ', '_')}".rstrip()
        return "e unknown request " + op
    except (gdb.error, gdb.MemoryError, ValueError) as exc:
        return "e " + str(exc).replace("\n", " ")


def _converse(report, prefetch, thread):
    """Send a hit's report, serve the host's requests until its final ``c|s`` line,
    apply the register writes and breakpoint changes that line carries and say
    whether to stop.

    ``+NAME`` words ask for that register with the point's later hits (``prefetch``,
    a breakpoint's list; None for watchpoints, which send no registers)."""
    _send(report)
    while True:
        line = _recv_line()
        if line[:1] in ("c", "s"):
            break
        _send(_serve(line))
    stop = line[0] == "s"
    for word in line[2:].split():
        if word[0] == "+":
            if prefetch is not None and word[1:] not in prefetch:
                prefetch.append(word[1:])
        elif "=" in word:
            name, _, value = word.partition("=")
            _write_register(name, int(value, 16))
        else:
            try:
                _change(word, thread)
            except (gdb.error, RuntimeError, ValueError) as exc:
                _send("E " + f"breakpoint change {word}: {exc}".replace("\n", " "))
                stop = True
    return stop


def _change(word, thread):
    """One breakpoint change of a final line: ``b:ADDR:HW``, ``d:ADDR``, ``a:ADDR`` or ``t:ADDR:HW``."""
    op, addr, *hw = word.split(":")
    if op == "b":
        insert(int(addr, 16), int(hw[0]))
    elif op == "d":
        delete(int(addr, 16))
    elif op == "a":
        always(int(addr, 16))
    elif op == "t":
        arm_step(int(addr, 16), int(hw[0]), thread)
    else:
        raise ValueError("unknown change")


def _prefetched(names):
    """The words a hit carries: ``NAME=VALUE`` for a register, ``@ADDR=HEX`` for the
    memory a ``@REG:OFF:SIZE`` entry names (left out if unreadable)."""
    values = {}
    words = []
    for name in names:
        if name[0] != "@":
            values[name] = value = _read_register(name)
            words.append(f"{name}={value:x}")
            continue
        reg, off, size = name[1:].split(":")
        base = values.get(reg)
        if base is None:
            base = values[reg] = _read_register(reg)
        addr = (base + int(off, 16)) & ((1 << 64) - 1)
        try:
            data = bytes(gdb.selected_inferior().read_memory(addr, int(size, 16)))
        except (gdb.error, gdb.MemoryError):
            continue
        words.append(f"@{addr:x}={data.hex()}")
    return " ".join(words)


class KpsdkBreakpoint(gdb.Breakpoint):
    """A kpsdk probe point: ``stop()`` hands the hit to the host."""

    def __init__(self, addr, hardware):
        kind = gdb.BP_HARDWARE_BREAKPOINT if hardware else gdb.BP_BREAKPOINT
        super().__init__(f"*{addr:#x}", type=kind, internal=True)
        self.addr = addr
        self.prefetch = []
        #: no hit is reported but a step's end (deleted during a hit, or a successor only)
        self.dormant = False
        #: gdb's threads whose single-step ends here: their next hit is reported
        self.steps = set()
        #: made for steps only (a successor nobody probes): disabled while no step ends here
        self.transient = False
        #: (where, size, value, byte order): report a hit only when that memory holds value
        self.only_when: tuple | None = None

    def wake(self):
        if not self.enabled:  # type: ignore[has-type]  # gdb.Breakpoint's, untyped
            self.enabled = True

    def rest(self):
        """Disable a successor breakpoint no step ends at, so that it no longer traps."""
        if self.transient and not self.steps and self.enabled:
            self.enabled = False

    def _filtered(self):
        """Whether :func:`only_when`'s condition says this hit is not reported."""
        if self.only_when is None:
            return False
        where, size, value, order = self.only_when
        try:
            now = int.from_bytes(bytes(gdb.selected_inferior().read_memory(where, size)), order)
        except gdb.MemoryError:
            return False  # unreadable: let the host see the stop
        return now != value

    def stop(self):
        global _in_stop
        thread = gdb.selected_thread()
        tid = thread.num if thread is not None else 0
        if self.steps and tid in self.steps:
            self.steps.discard(tid)
        elif self.dormant or (self.only_when is not None and self._filtered()):  # no call on a probe's hit
            self.rest()
            return False
        _in_stop = True
        try:
            return _converse(f"H {self.addr:x} {tid:x} {_prefetched(self.prefetch)}", self.prefetch, tid)
        except EOFError:
            return True
        finally:
            _in_stop = False
            self.rest()


def forget():
    """Delete every breakpoint and watchpoint of kpsdk's (called through MI, the CPU stopped,
    before detaching from a process that goes on running)."""
    for bp in list(_breakpoints.values()) + list(_watches.values()):
        bp.delete()
    _breakpoints.clear()
    _watches.clear()


#: what the host calls through MI (``python kpsdk_agent.insert(0x401000, 0)``)
kpsdk_agent = types.SimpleNamespace(insert=insert, delete=delete, purge=purge, prefetch=prefetch,
                                    only_when=only_when, always=always, forget=forget)


# -- watchpoints (kpsdk.targets.live.watch) ---------------------------------------------------
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
            return _converse(f"W {self.wid:x} {tid:x} {kind} {old.hex() or '-'} {new.hex() or '-'}", None, tid)
        except EOFError:
            return True
        finally:
            _in_stop = False


#: what the host calls through MI for watchpoints (``python kpsdk_watch.watch(1, 0x4c0000, 4, "w")``)
kpsdk_watch = types.SimpleNamespace(watch=watch, unwatch=unwatch)
