"""``kpsdk.matrix(script, targets)``: one probe script over many targets, one merged result.

The steps, each in a module of its own:

1. the script (:mod:`~kpsdk.matrixrun.script`) and the targets
   (:mod:`~kpsdk.matrixrun.targets`) are checked, and the kernels the targets name are
   fetched into kpsdk's cache, once each, before anything runs;
2. each target's result is looked up in the cache (:mod:`~kpsdk.matrixrun.resultcache`) by
   the target's and the script's digests;
3. the others run on an engine (:mod:`~kpsdk.matrixrun.engines`: the local pool, or a Dask
   cluster), each in a process of its own, and are reported as they complete
   (``on_result``; the CLI's progress display, :mod:`~kpsdk.matrixrun.progress`);
4. the :class:`MatrixResult` holds the results in the matrix's order and writes the merged
   outputs (:mod:`~kpsdk.matrixrun.merge`, :mod:`~kpsdk.matrixrun.hists`).
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from kpsdk.errors import ArgumentError, MatrixError, shown
from kpsdk.matrixrun.child import Job
from kpsdk.matrixrun.engines import Engine, make_engine
from kpsdk.matrixrun.result import TargetResult
from kpsdk.matrixrun.resultcache import ResultCache
from kpsdk.matrixrun.resultcache import key as cache_key
from kpsdk.matrixrun.script import Script, as_script
from kpsdk.matrixrun.targets import MatrixTarget, as_target, check_names, digest, resolve_kernels


@dataclass
class MatrixResult:
    """Every target's result, in the matrix's order (``results[i]`` is the i-th target's).

    :param seconds: the matrix's wall-clock time; ``workers``: how many targets ran at once.
    """

    results: list[TargetResult]
    script: Script
    seconds: float = 0.0
    workers: int = 1

    def __iter__(self) -> Iterator[TargetResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    def __getitem__(self, item: int | str) -> TargetResult:
        """A result by place or by target name."""
        if isinstance(item, str):
            for result in self.results:
                if result.name == item:
                    return result
            raise KeyError(item)
        return self.results[item]

    @property
    def failed(self) -> list[TargetResult]:
        """The targets that did not run to their end (``timeout``, ``error``, ``crashed``)."""
        return [r for r in self.results if not r.ok]

    def records(self) -> Iterator[tuple[str, Any]]:
        """``(target name, record)`` for every record, in the matrix's order."""
        for result in self.results:
            for record in result.records:
                yield result.name, record

    def write(self, fmt: str, out: IO[str] | str | os.PathLike[str]) -> Path | None:
        """Write the merged records: ``text``, ``jsonl`` or ``perfetto`` to a stream or a file;
        ``trace-dat`` (and formats plugins add) one file per target into the directory ``out``,
        with ``index.json`` (its path is returned)."""
        from kpsdk.matrixrun import merge

        if fmt not in merge.MERGED_FORMATS:
            if not isinstance(out, str | os.PathLike):
                raise ArgumentError(f"{fmt} is written one file per target: give a directory, not {shown(out)}")
            return merge.write_per_target(self.results, fmt, Path(out))
        if isinstance(out, str | os.PathLike):
            with open(out, "w") as stream:
                merge.write_merged(self.results, fmt, stream)
            return Path(out)
        merge.write_merged(self.results, fmt, out)
        return None

    def jsonl(self) -> str:
        """The merged ``jsonl`` as a str."""
        buffer = io.StringIO()
        self.write("jsonl", buffer)
        return buffer.getvalue()

    def hist_text(self, per_target: bool = True) -> str:
        """The hist triggers' tables: each target's (``per_target``), then each merged over the targets."""
        from kpsdk.matrixrun.hists import hist_text

        return hist_text(self.results, per_target)

    def check(self) -> MatrixResult:
        """``self`` when every target ran to its end; else :class:`~kpsdk.MatrixError` naming the others."""
        failed = self.failed
        if failed:
            shown_names = ", ".join(f"{r.name} ({r.status})" for r in failed[:5]) + (", ..." if len(failed) > 5 else "")
            raise MatrixError(f"{len(failed)} of {len(self.results)} targets did not run to their end: {shown_names}",
                              self)
        return self


def matrix(script: Any, targets: Iterable[MatrixTarget | str | os.PathLike[str]], *,
           workers: int | None = None, scheduler: Any = None, engine: Engine | None = None,
           cache: bool | str | os.PathLike[str] = True, timeout: float | None = None, limit: float | None = None,
           on_result: Callable[[TargetResult], None] | None = None,
           log: Callable[[str], None] | None = None) -> MatrixResult:
    """Run ``script`` on every target, each in a process of its own; the results in the targets' order.

    :param script: trace definitions (a str, one a line, or a list of str), a function
        ``fn(session)`` defined at a module's top level (it runs the session and returns a
        ``Trace``, records, or None), or a :class:`~kpsdk.matrixrun.TraceScript` /
        :class:`~kpsdk.matrixrun.FunctionScript`.
    :param targets: :class:`~kpsdk.matrixrun.MatrixTarget` objects, specs (``elf:PATH``,
        ``qemu-user:PATH``, ``qemu-system:ARCH[@RELEASE][+FLAVOUR]``: Debian's kernel from the
        fixtures) or programs' paths.
    :param workers: targets at once on this machine (default: its CPUs).
    :param scheduler: a Dask scheduler's address (``tcp://HOST:PORT``) or a ``distributed.Client``,
        instead of the local pool.
    :param engine: an engine to use (and leave open): a :class:`~kpsdk.matrixrun.LocalPool` shared
        by several matrices.
    :param cache: reuse and keep results (True: in kpsdk's cache directory; a path: there);
        False: run every target.
    :param timeout: the run's time limit of each target that gives none; ``limit``: the whole
        target's (see :class:`~kpsdk.matrixrun.MatrixTarget`).
    :param on_result: called with each target's result as it completes.
    :param log: called with progress messages (kernels being fetched).

    A target that fails, hangs or crashes has its status and error in its result; the
    others run on.  :meth:`MatrixResult.check` raises when any did not run to its end.
    """
    the_script = as_script(script)
    fields: dict[str, Any] = {k: v for k, v in (("timeout", timeout), ("limit", limit)) if v is not None}
    the_targets = [_with_limits(as_target(item), fields) for item in targets]
    check_names(the_targets)
    the_targets = resolve_kernels(the_targets, log)
    script_digest = the_script.digest()
    jobs = [Job(i, t, the_script, cache_key(digest(t), script_digest)) for i, t in enumerate(the_targets)]
    store = None if cache is False else ResultCache(None if cache is True else Path(cache))
    results: list[TargetResult | None] = [None] * len(jobs)
    start = time.monotonic()
    to_run = []
    for job in jobs:
        hit = store.get(job.key, job.index, job.target.name) if store is not None else None
        if hit is None:
            to_run.append(job)
            continue
        results[job.index] = hit
        if on_result is not None:
            on_result(hit)
    the_engine = engine if engine is not None else make_engine(workers, scheduler) if to_run else None
    try:
        for result in the_engine.run(to_run) if the_engine is not None else ():
            results[result.index] = result
            if store is not None:
                store.put(jobs[result.index].key, result)
            if on_result is not None:
                on_result(result)
    finally:
        if engine is None and the_engine is not None:
            the_engine.close()
    done = [r for r in results if r is not None]
    assert len(done) == len(results), "an engine lost a target"
    return MatrixResult(done, the_script, time.monotonic() - start,
                        the_engine.workers if the_engine is not None else 0)


def _with_limits(target: MatrixTarget, fields: dict[str, Any]) -> MatrixTarget:
    """The matrix's ``timeout``/``limit`` for a target that gives none of its own."""
    missing = {k: v for k, v in fields.items() if getattr(target, k) is None}
    return replace(target, **missing) if missing else target
