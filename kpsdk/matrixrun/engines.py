"""Where the targets run: a local pool of fork hosts, or a Dask cluster.

An engine takes the jobs (:class:`~kpsdk.matrixrun.child.Job`) and yields each one's
:class:`~kpsdk.matrixrun.result.TargetResult` as it completes, in whatever order; the
caller (:mod:`kpsdk.matrixrun.api`) puts them back in the matrix's order.  Every target
runs in a process of its own, forked by a fork host (:mod:`kpsdk.matrixrun.forkhost`)
that stops it at its limit; so a target that hangs or crashes costs only itself,
whichever engine runs it.

- :class:`LocalPool` (the default): ``concurrent.futures.ThreadPoolExecutor`` with one
  fork host per thread: the threads only wait for their host's answer, the work is in the
  hosts' children, ``workers`` of them at a time.  (A ``ProcessPoolExecutor`` is not used:
  one worker killed by SIGKILL breaks the whole pool, every target in flight failing with
  ``BrokenProcessPool``, and a hung worker cannot be stopped.)
- :class:`DaskEngine` (``pip install 'kpsdk[dask]'``, ``--scheduler tcp://HOST:PORT``): each
  job is a task of the cluster (:func:`run_remote`), which runs it in a fork host of the
  worker process that took it (one per worker thread, kept between tasks).  Dask moves
  the jobs and the results; the large inputs (kernels, sysroots) are paths, read by the
  workers from kpsdk's cache directory or a sysroot they share with the client (see
  :func:`kpsdk.matrixrun.targets.resolve_kernels`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from types import TracebackType
from typing import Any, Protocol

from kpsdk.errors import ArgumentError, KpsdkError, shown
from kpsdk.matrixrun.child import Job
from kpsdk.matrixrun.forkhost import ForkHost
from kpsdk.matrixrun.result import TargetResult, describe, failure

#: seconds between SIGTERM (the target's limit) and SIGKILL
GRACE = 10.0
#: how long the client waits to reach a Dask scheduler
CONNECT_TIMEOUT = 30.0


class Engine(Protocol):
    """What runs a matrix's jobs."""

    #: how many targets run at once (for reports)
    workers: int

    def run(self, jobs: Sequence[Job]) -> Iterator[TargetResult]:
        """Each job's result, as it completes."""
        ...

    def close(self) -> None:
        """Release the engine's processes (fork hosts, the connection to a cluster)."""
        ...


def check_workers(workers: int | None) -> int:
    """``workers``: a positive int; None: the CPUs this process may use."""
    if workers is None:
        return max(1, len(os.sched_getaffinity(0)))
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ArgumentError(f"workers={shown(workers)}: want a positive int")
    return workers


class LocalPool:
    """``workers`` targets at a time on this machine, each forked by one of ``workers`` fork hosts.

    Usable for several matrices in a row (``with LocalPool(2) as pool: kpsdk.matrix(..., engine=pool)``):
    the hosts are started once."""

    def __init__(self, workers: int | None = None, grace: float = GRACE) -> None:
        self.workers = check_workers(workers)
        self.grace = grace
        self._local = threading.local()
        self._hosts: list[ForkHost] = []
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(self.workers, thread_name_prefix="kpsdk-matrix")

    def _host(self) -> ForkHost:
        host = getattr(self._local, "host", None)
        if host is None:
            host = self._local.host = ForkHost()
            with self._lock:
                self._hosts.append(host)
        return host  # type: ignore[no-any-return]

    def _run_one(self, job: Job) -> TargetResult:
        return self._host().run(job, job.target.hard_limit, self.grace)

    def run(self, jobs: Sequence[Job]) -> Iterator[TargetResult]:
        futures: dict[Future[TargetResult], Job] = {self._executor.submit(self._run_one, job): job for job in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield _outcome(future, futures[future])

    def close(self) -> None:
        with self._lock:
            hosts, self._hosts = self._hosts, []
        for host in hosts:  # a host's end unblocks the thread waiting for it
            host.close()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _outcome(future: Future[TargetResult], job: Job) -> TargetResult:
    """A future's result; the exception it ended with (a bug in kpsdk, a fork host that could
    not start) as that target's ``crashed`` result, named with its type and message."""
    exc = future.exception()
    if exc is not None:
        return failure(job.index, job.target.name, "crashed", f"its worker failed: {describe(exc)}")
    return future.result()


# --------------------------------------------------------------------------- Dask

#: the fork hosts of this (Dask worker) process, one per worker thread
_REMOTE = threading.local()


def run_remote(job: Job, grace: float = GRACE) -> TargetResult:
    """A Dask task: run ``job`` in a fork host of this worker thread (started on the first task,
    kept for the next ones; it leaves with the worker process)."""
    host = getattr(_REMOTE, "host", None)
    if host is None:
        host = _REMOTE.host = ForkHost()
    result: TargetResult = host.run(job, job.target.hard_limit, grace)
    return result


class DaskEngine:
    """The jobs as tasks of a Dask cluster: ``scheduler`` is its address (``tcp://HOST:PORT``) or
    a ``distributed.Client`` already connected."""

    def __init__(self, scheduler: Any, grace: float = GRACE) -> None:
        try:
            import distributed
        except ImportError:
            raise KpsdkError("--scheduler needs Dask's distributed: pip install 'kpsdk[dask]'") from None
        self._distributed = distributed
        self.grace = grace
        self._own = not isinstance(scheduler, distributed.Client)
        if self._own:
            try:
                self.client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise KpsdkError(f"cannot reach the Dask scheduler at {scheduler}: {describe(exc)}") from None
        else:
            self.client = scheduler
        threads = self.client.nthreads()
        self.workers = max(1, sum(threads.values()))

    def run(self, jobs: Sequence[Job]) -> Iterator[TargetResult]:
        if not jobs:
            return
        futures = {}
        for job in jobs:
            future = self.client.submit(run_remote, job, self.grace, pure=False, retries=0,
                                        key=f"kpsdk-matrix-{job.index}-{job.key[:16]}-{time.monotonic_ns()}")
            futures[future.key] = (future, job)
        # every target is bounded by its own limit; the whole run, by their sum (one worker at a time)
        bound = sum(job.target.hard_limit + self.grace for job in jobs) + 60.0
        finished = self._distributed.as_completed([f for f, _ in futures.values()], loop=self.client.loop,
                                                  timeout=bound)
        left = dict(futures)
        try:
            for future in finished:
                _, job = left.pop(future.key)
                exc = future.exception()
                if exc is not None:  # the task itself failed: a worker that died (KilledWorker), a lost task
                    yield failure(job.index, job.target.name, "crashed", f"its Dask task failed: {describe(exc)}")
                else:
                    yield future.result()
        except TimeoutError:  # the cluster lost its workers, or never had any
            for _, job in left.values():
                yield failure(job.index, job.target.name, "crashed", f"the Dask cluster gave no result within "
                              f"{bound:g} s")
        finally:
            for future, _ in futures.values():
                future.release()

    def close(self) -> None:
        if self._own:
            self.client.close(timeout=CONNECT_TIMEOUT)


def make_engine(workers: int | None = None, scheduler: Any = None) -> Engine:
    """The engine for ``workers`` local processes, or for the Dask cluster at ``scheduler``."""
    if scheduler is not None:
        if workers is not None:
            raise ArgumentError("workers= is the local pool's; a Dask cluster has its own workers")
        return DaskEngine(scheduler)
    return LocalPool(workers)
