"""One process per target, at the cost of a fork: a fork host with kpsdk already imported.

A target runs in its own process so that one that hangs can be stopped and one that
crashes (SIGKILL, a segfault in native code) takes nothing else with it.  Starting a
Python process and importing kpsdk, Unicorn and the trace machinery costs more than a
second, a run of a small program less; so each engine worker keeps a *fork host*: a
single-threaded process (:data:`HOST_COMMAND`) that imports all that once,
then forks one child per target (:func:`serve`).  The child runs the target
(:func:`kpsdk.matrixrun.child.run_target`) and writes its result to the host's stdout; the
host enforces the target's limit and reports how the child ended.

The host, not its client, owns the child, so:

- the limit is the host's to enforce: at ``limit`` seconds it sends SIGTERM (the child
  closes its session and hands over a ``timeout`` result), ``grace`` seconds later SIGKILL;
- it is a child subreaper (``PR_SET_CHILD_SUBREAPER``): QEMU and gdb, which a session starts
  in sessions of their own, come back to it when a child dies without closing them, and
  are killed and reaped before the next target;
- when its client goes away (its stdin closes), it kills the running child and exits.

The protocol, on the host's stdin and stdout, is frames (:func:`write_frame`): the client
sends ``J`` (a pickled :class:`~kpsdk.matrixrun.child.Job`, the limit and the grace), the
child answers ``R`` (its pickled :class:`~kpsdk.matrixrun.result.TargetResult`), the host
then ``X`` (how the child ended: a :class:`ChildEnd`).  The client is :class:`ForkHost`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any

from kpsdk.errors import KpsdkError, TargetError
from kpsdk.matrixrun.result import TargetResult, describe, failure

#: what the host imports before its first fork (each child inherits them, imported)
PRELOAD = ("kpsdk.session", "kpsdk.registry", "kpsdk.targets.unicorn.target", "kpsdk.targets.unicorn.linux",
           "kpsdk.targets.unicorn.linux.syscalls", "kpsdk.targets.unicorn.linux.procfs",
           "kpsdk.targets.unicorn.detour", "kpsdk.targets.unicorn.step", "kpsdk.targets.unicorn.watch",
           "kpsdk.targets.live.qemu", "kpsdk.targets.live.target", "kpsdk.trace.events", "kpsdk.trace.output",
           "kpsdk.trace.tracedat", "kpsdk.trace.formats", "kpsdk.trace.compile", "kpsdk.plugins.kprobes",
           "kpsdk.plugins.kretprobes", "kpsdk.plugins.uprobes", "kpsdk.plugins.watchpoints",
           "kpsdk.binfmt.elfimage", "kpsdk.kernel.btf", "kpsdk.matrixrun.child", "kpsdk.matrixrun.hists")
#: the host's warm-up before its first fork: this machine's /bin/true in Unicorn, with uprobes in libc
WARM_UP_PROGRAM = "/bin/true"
WARM_UP = ("p:kpsdk_warm_up libc.so.6:malloc size=$arg1:u64", "r:kpsdk_warm_up_ret libc.so.6:malloc $retval")
WARM_UP_TIMEOUT = 20.0
#: how long a host may take to start (its imports), and to leave when told
START_TIMEOUT = 120.0
CLOSE_TIMEOUT = 10.0
#: after SIGKILL, how long the host waits for the child to go (it cannot refuse; this bounds a D state)
KILL_WAIT = 30.0
#: what the client allows beyond limit + grace + KILL_WAIT for the host's answer (reaping, the result's bytes)
ANSWER_MARGIN = 60.0
#: the bytes of a crashed child's stderr kept for its report
STDERR_TAIL = 4096
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
#: the host's command (``-c``, not ``-m``: its classes must pickle under this module's name, not ``__main__``)
HOST_COMMAND = "from kpsdk.matrixrun.forkhost import serve; serve()"
_HEADER = struct.Struct("<cQ")


@dataclass
class ChildEnd:
    """How a target's process ended, as its host saw it.

    :param status: the exit status (None when a signal ended it).
    :param signal: the signal that ended it (None when it exited).
    :param limit_reached: the host stopped it at its limit.
    :param stderr: the last bytes it wrote on stdout and stderr (for a crash's report).
    """

    status: int | None
    signal: int | None
    limit_reached: bool
    stderr: str
    seconds: float


# --------------------------------------------------------------------------- frames


def write_frame(fd: int, kind: bytes, payload: bytes) -> None:
    """One frame: its kind (a byte), its length, its bytes; all written (a pipe takes it in parts)."""
    data = memoryview(_HEADER.pack(kind, len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    """``size`` bytes from ``fd``; None at end of file; TimeoutError past ``deadline``."""
    chunks: list[bytes] = []
    left = size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None) -> tuple[bytes, bytes] | None:
    """The next frame's kind and bytes; None at end of file."""
    head = _read_exact(fd, _HEADER.size, deadline)
    if head is None:
        return None
    kind, size = _HEADER.unpack(head)
    body = _read_exact(fd, size, deadline)
    return None if body is None else (kind, body)


# --------------------------------------------------------------------------- the host


def preload() -> None:
    """Import what targets use, and let the plugins' hooks run once (they import on first use)."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # a module moved: its children import it themselves, later
            warnings.warn(f"kpsdk matrix: fork host could not preload {name}: {exc}", stacklevel=1)
    from kpsdk.registry import get_registry

    registry = get_registry()
    loaded = (registry.archs, registry.targets, registry.probe_types, registry.trace_formats)
    del loaded
    _warm_up()


def _warm_up() -> None:
    """Run one small traced program here, before any fork: what a session makes on first use
    (an architecture's disassembler, the loader's and libc's parsed images...) is then made
    once for every child, as a run after the first in one process finds it."""
    from kpsdk.matrixrun.child import Job, run_here
    from kpsdk.matrixrun.script import TraceScript
    from kpsdk.matrixrun.targets import MatrixTarget

    if not os.path.exists(WARM_UP_PROGRAM):
        return
    job = Job(0, MatrixTarget(f"elf:{WARM_UP_PROGRAM}", sysroot="/", timeout=WARM_UP_TIMEOUT), TraceScript(WARM_UP))
    try:
        run_here(job)
    except (KpsdkError, OSError) as exc:  # the children will do without: only slower
        warnings.warn(f"kpsdk matrix: the fork host's warm-up run failed: {describe(exc)}", stacklevel=1)


def _subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        warnings.warn("kpsdk matrix: not a child subreaper: a crashed target's QEMU may outlive it", stacklevel=1)


def _children() -> list[int]:
    """This (single-threaded) process's children, from procfs."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _reap_orphans() -> None:
    """Kill and reap what a child left behind (QEMU, gdb: reparented here), for at most KILL_WAIT."""
    deadline = time.monotonic() + KILL_WAIT
    while time.monotonic() < deadline:
        pids = _children()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG) == (0, 0):
                    time.sleep(0.01)  # SIGKILL takes effect when the process next runs


def _die_with_parent(host: int) -> None:
    """SIGKILL when the host dies (``PR_SET_PDEATHSIG``): a child never outlives the host that
    enforces its limit."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != host:  # the host died before the call
        os._exit(1)


def _child(job: bytes, out: int, err: int, host: int) -> None:
    """In the forked child: run the job, write its result as an R frame, leave (never returns)."""
    code = 1
    try:
        _die_with_parent(host)
        devnull = os.open(os.devnull, os.O_RDWR)
        proto = os.dup(out)  # not inherited by what the target starts (QEMU, gdb)
        os.dup2(devnull, 0)
        os.dup2(err, 1)  # a script's prints and warnings: the tail of a crash's report
        os.dup2(err, 2)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
        from kpsdk.matrixrun.child import run_target, stop_on_sigterm

        stop_on_sigterm()
        the_job = pickle.loads(job)

        def send(result: TargetResult) -> None:
            try:
                data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                data = pickle.dumps(failure(result.index, result.name, "error",
                                            f"its result cannot be sent back: {describe(exc)}", result.seconds,
                                            result.worker))
            write_frame(proto, b"R", data)

        run_target(the_job, send)
        code = 0
    except BaseException:  # reported by run_target already, if it got that far; its traceback for the host
        logging.getLogger(__name__).exception("kpsdk matrix: the target's process failed")
    finally:
        os._exit(code)


def _wait(pid: int, limit: float, grace: float) -> tuple[int | None, bool]:
    """Wait for the child: SIGTERM at ``limit``, SIGKILL ``grace`` later; a closed stdin (the
    client gone) kills it at once.  Its wait status (None: it did not go within KILL_WAIT of
    its SIGKILL, a process stuck in the kernel), and whether the limit stopped it."""
    pidfd = os.pidfd_open(pid)
    try:
        deadline = time.monotonic() + limit
        stage = 0
        limit_reached = False
        while True:
            wait = max(0.0, deadline - time.monotonic())
            ready = select.select([pidfd, 0], [], [], wait)[0]
            if pidfd in ready:
                return os.waitpid(pid, 0)[1], limit_reached
            if 0 in ready and stage < 2:  # the client never writes during a job: this is its end of file
                os.kill(pid, signal.SIGKILL)
                stage, deadline = 2, time.monotonic() + KILL_WAIT
            elif 0 in ready:
                time.sleep(min(wait, 0.1))  # end of file stays readable: do not spin
            elif stage == 0:
                limit_reached = True
                os.kill(pid, signal.SIGTERM)
                stage, deadline = 1, time.monotonic() + grace
            elif stage == 1:
                os.kill(pid, signal.SIGKILL)
                stage, deadline = 2, time.monotonic() + KILL_WAIT
            else:
                return None, limit_reached
    finally:
        os.close(pidfd)


def _run_one(job: bytes, limit: float, grace: float, out: int) -> ChildEnd:
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        host = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(job, out, err.fileno(), host)
        status, limit_reached = _wait(pid, limit, grace)
        _reap_orphans()
        size = err.seek(0, os.SEEK_END)
        err.seek(max(0, size - STDERR_TAIL))
        tail = err.read().decode(errors="replace")
    if status is None:
        return ChildEnd(None, None, limit_reached, f"it did not end within {KILL_WAIT:g} s of SIGKILL\n" + tail,
                        time.monotonic() - start)
    return ChildEnd(os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                    os.WTERMSIG(status) if os.WIFSIGNALED(status) else None, limit_reached, tail,
                    time.monotonic() - start)


def serve() -> None:
    """The host's loop: preload, then one child per ``J`` frame until stdin closes.

    The frames go out on a copy of stdout; stdout itself becomes stderr, so that nothing an
    imported module prints can break a frame."""
    out = os.dup(1)
    os.dup2(2, 1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    preload()
    _subreaper()
    write_frame(out, b"H", pickle.dumps(os.getpid()))
    while True:
        frame = read_frame(0)
        if frame is None:
            return
        job, limit, grace = pickle.loads(frame[1])
        end = _run_one(job, limit, grace, out)
        write_frame(out, b"X", pickle.dumps(end))


# --------------------------------------------------------------------------- the client


class ForkHost:
    """A client's fork host: :meth:`run` one job at a time (not thread-safe: one per thread)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None

    def start(self) -> None:
        """Start the host and wait for it to have imported kpsdk (bounded)."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))}
        self.proc = subprocess.Popen([sys.executable, "-c", HOST_COMMAND], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        assert self.proc.stdout is not None
        try:
            frame = read_frame(self.proc.stdout.fileno(), time.monotonic() + START_TIMEOUT)
        except TimeoutError:
            self.close()
            raise TargetError(f"the fork host did not start within {START_TIMEOUT:g} s") from None
        if frame is None or frame[0] != b"H":
            self.close()
            raise TargetError(f"the fork host exited at its start (status {self.proc.returncode})")
        self.pid = pickle.loads(frame[1])

    def run(self, job: Any, limit: float, grace: float) -> TargetResult:
        """Run ``job`` (a :class:`~kpsdk.matrixrun.child.Job`) in a child of the host."""
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        proc = self.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        index, name = job.index, job.target.name
        payload = pickle.dumps((pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL), limit, grace))
        started = time.monotonic()
        try:
            write_frame(proc.stdin.fileno(), b"J", payload)
        except BrokenPipeError:
            self.close()
            return failure(index, name, "crashed", "its worker's fork host had died", 0.0)
        deadline = started + limit + grace + KILL_WAIT + ANSWER_MARGIN
        result: TargetResult | None = None
        try:
            while True:
                frame = read_frame(proc.stdout.fileno(), deadline)
                if frame is None:
                    self.close()
                    return result or failure(index, name, "crashed", _host_death(proc), time.monotonic() - started)
                kind, body = frame
                if kind == b"R":
                    result = pickle.loads(body)
                elif kind == b"X":
                    return _settle(result, pickle.loads(body), index, name, limit)
        except TimeoutError:
            self.close()
            return failure(index, name, "crashed", f"its worker's fork host did not answer within "
                           f"{deadline - started:g} s", time.monotonic() - started)

    def close(self) -> None:
        """Tell the host to leave (it kills a running child), wait for it, kill it if it must."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            proc.wait(CLOSE_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(CLOSE_TIMEOUT)


def _host_death(proc: subprocess.Popen[bytes]) -> str:
    try:
        code = proc.wait(CLOSE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "its worker's fork host stopped answering"
    return f"its worker process died ({_signal_text(-code) if code < 0 else f'exit status {code}'})"


def _signal_text(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _settle(result: TargetResult | None, end: ChildEnd, index: int, name: str, limit: float) -> TargetResult:
    """The target's result from what its child sent and how it ended."""
    if result is not None:
        if end.limit_reached and result.status != "timeout":
            result.status, result.error = "timeout", f"its limit of {limit:g} s was reached (stopped)"
        return result
    tail = end.stderr.strip().splitlines()[-1:] if end.stderr.strip() else []
    if end.limit_reached:
        return failure(index, name, "timeout", f"its limit of {limit:g} s was reached (killed)", end.seconds)
    how = f"killed by {_signal_text(end.signal)}" if end.signal is not None else f"exit status {end.status}"
    crash = failure(index, name, "crashed", f"its process ended without a result ({how})"
                    + (f": {tail[0]}" if tail else ""), end.seconds)
    crash.traceback = end.stderr or None
    return crash
