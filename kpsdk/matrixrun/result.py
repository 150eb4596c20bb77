"""What one target of a matrix gave: its status, its records, and what the outputs need to know.

A :class:`TargetResult` travels from the target's process to the engine's caller (a
pickle through a pipe, or Dask's own transport) and into the result cache, so it holds
plain data: the records (:class:`~kpsdk.trace.events.TraceRecord`, or dicts from a
function script), the writers' context (word size, byte order, notes), snapshots of
the hist triggers (:class:`~kpsdk.matrixrun.hists.HistSnapshot`) and the counts.

The statuses:

- ``ok``: the target ran to its end (the program exited, the guest powered off, the
  function returned);
- ``timeout``: its time limit came first: the run's (the records so far are kept), or the
  whole target's, when its process was stopped;
- ``error``: opening the target, the script or the run raised; ``error`` names the
  exception's type and message;
- ``crashed``: its process died without handing over a result (a signal: SIGKILL,
  SIGSEGV), or its engine lost it (a Dask worker that died).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kpsdk.matrixrun.hists import HistSnapshot

Status = Literal["ok", "timeout", "error", "crashed"]
STATUSES: tuple[Status, ...] = ("ok", "timeout", "error", "crashed")


@dataclass
class OutputInfo:
    """What a writer needs besides the records (:class:`kpsdk.outputformat.WriterContext`'s
    fields that depend on the target)."""

    notes: tuple[str, ...] = ()
    word_size: int = 8
    endian: Literal["little", "big"] = "little"


@dataclass
class TargetResult:
    """One target's result.

    :param index: the target's place in the matrix (outputs are in this order).
    :param name: the target's name.
    :param status: ``ok``, ``timeout``, ``error`` or ``crashed`` (see the module's docstring).
    :param error: ``TypeName: message`` for ``error`` and ``crashed``, and what stopped a ``timeout``.
    :param records: the target's records, in the order they were made.
    :param hits: probe hits on the target (every probe's, filtered ones included).
    :param seconds: the target's wall-clock time in its process (open, run, close).
    :param exit_status: the program's exit status (or the guest's), None when it did not end.
    :param cached: the result came from the cache, not from a run.
    :param worker: where it ran (``host:pid``), for reports only.
    :param traceback: the Python traceback of an ``error``, or what a crashed process wrote on
        stderr last (for ``--verbose`` reports; not in the outputs).
    """

    index: int
    name: str
    status: Status
    error: str | None = None
    records: list[Any] = field(default_factory=list)
    hits: int = 0
    seconds: float = 0.0
    exit_status: int | None = None
    info: OutputInfo = field(default_factory=OutputInfo)
    hists: list[HistSnapshot] = field(default_factory=list)
    cached: bool = False
    worker: str = ""
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def failure(index: int, name: str, status: Status, error: str, seconds: float = 0.0,
            worker: str = "") -> TargetResult:
    """A result without records: a target that failed before it could hand any over."""
    return TargetResult(index, name, status, error=error, seconds=seconds, worker=worker)


def describe(exc: BaseException) -> str:
    """``TypeName: message`` (the type alone when there is no message)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
