"""What runs in a target's own process: open the target, run the script, close, hand over the result.

:func:`run_target` is the whole of one target's work.  It reports the target's result
to a callback, also when the target fails (then it re-raises: nothing is swallowed;
the process that runs it ends there).  The time limit arrives as SIGTERM from the
process's parent (:mod:`kpsdk.matrixrun.forkhost`): :func:`stop_on_sigterm` turns it
into :class:`_LimitReached`, raised wherever the target is (in a run, in a script's own
code), so that the session is closed (QEMU and gdb reaped) and the records so far are
handed over as a ``timeout``.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kpsdk.matrixrun.result import OutputInfo, TargetResult, describe
from kpsdk.matrixrun.script import RunState, Script, TraceScript

if TYPE_CHECKING:
    from kpsdk.matrixrun.targets import MatrixTarget
    from kpsdk.session import Session


@dataclass(frozen=True)
class Job:
    """One target's work, as sent to the process that runs it.

    :param index: the target's place in the matrix.
    :param key: the result's cache key (the target's and the script's digests).
    """

    index: int
    target: MatrixTarget
    script: Script
    key: str = ""


class _LimitReached(BaseException):
    """The target's time limit came (its parent's SIGTERM).  Not an ``Exception``: a script's
    ``except Exception`` must not keep the target running past its limit."""


def stop_on_sigterm() -> None:
    """SIGTERM raises :class:`_LimitReached` once (a second one, while the target closes, is ignored)."""

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _LimitReached

    signal.signal(signal.SIGTERM, handler)


def worker_name() -> str:
    """``host:pid``: where a target ran, for reports."""
    return f"{socket.gethostname()}:{os.getpid()}"


def run_target(job: Job, report: Callable[[TargetResult], None]) -> None:
    """Run ``job`` and ``report`` its result; a failure is reported, then raised again."""
    import kpsdk

    target = job.target
    state = RunState()
    start = time.monotonic()
    session: Session | None = None
    info = OutputInfo()
    hists: list[Any] = []
    notes: tuple[str, ...] = ()
    hits = 0
    try:
        try:
            session = kpsdk.open(target.spec, **target.open_options())
            info = OutputInfo(word_size=session.arch.word_size, endian=session.arch.endian)
            job.script.execute(session, target, state)
        finally:
            try:
                hists, notes, hits = _harvest(state)
            finally:
                if session is not None:
                    session.close()
    except BaseException as exc:
        error: str | None
        status = "timeout" if isinstance(exc, _LimitReached) else "error"
        error = (f"its limit of {target.hard_limit:g} s was reached (stopped)" if isinstance(exc, _LimitReached)
                 else describe(exc))
        report(_result(job, status, error, state, info, notes, hists, hits, start,
                       "" if isinstance(exc, _LimitReached) else traceback.format_exc()))
        raise
    status = "timeout" if state.timed_out else "ok"
    error = None if not state.timed_out else f"its run's time limit of {target.run_timeout:g} s was reached"
    report(_result(job, status, error, state, info, notes, hists, hits, start, ""))


def _harvest(state: RunState) -> tuple[list[Any], tuple[str, ...], int]:
    """The trace's hist tables, notes and hits, before its session closes."""
    trace = state.trace
    if trace is None:
        return [], (), len(state.records)
    from kpsdk.matrixrun.hists import snapshot

    return snapshot(trace), (trace.time_note, trace.tasks_note), sum(e.hits for e in trace.events)


def _result(job: Job, status: Any, error: str | None, state: RunState, info: OutputInfo, notes: tuple[str, ...],
            hists: list[Any], hits: int, start: float, trace_text: str) -> TargetResult:
    info.notes = notes
    return TargetResult(job.index, job.target.name, status, error=error, records=state.records, hits=hits,
                        seconds=time.monotonic() - start, exit_status=state.exit_status, info=info, hists=hists,
                        worker=worker_name(), traceback=trace_text or None)


def run_here(job: Job) -> TargetResult:
    """Run ``job`` in this process (a bare run: no isolation, no limit but the run's own);
    its result, or the target's exception."""
    box: list[TargetResult] = []
    run_target(job, box.append)
    return box[0]


def describe_script(script: Script) -> str:
    """One line for the summary's title."""
    return ("trace: " if isinstance(script, TraceScript) else "script: ") + script.describe()

