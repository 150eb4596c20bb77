"""What a matrix shows while it runs, and its summary table.

Each target's row (target, status, hits, records, time, a program's non-zero exit status) is printed as the target
completes, in the order they complete, above a rich progress bar (targets done of all,
elapsed time, an estimate of the rest) on a terminal; elsewhere the rows alone, one a
line.  At the end, :func:`summary_table` lists every target in the matrix's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from kpsdk.matrixrun.result import TargetResult

STYLES = {"ok": "green", "timeout": "yellow", "error": "red", "crashed": "bold red"}


def status_text(result: TargetResult) -> Text:
    label = result.status + (" (cached)" if result.cached else "")
    return Text(label, style=STYLES.get(result.status, ""))


def row(result: TargetResult, width: int = 40) -> Text:
    """One completed target's line."""
    text = Text.assemble((f"{result.name[:width]:<{width}} ", "bold"), status_text(result),
                         f"  {result.hits} hits  {len(result.records)} records  {result.seconds:.2f} s")
    if result.exit_status:
        text.append(f"  exit status {result.exit_status}")
    if result.error and not result.ok:
        text.append(f"  {result.error}", style="dim")
    return text


def summary_table(results: Sequence[TargetResult], title: str = "kpsdk matrix") -> Table:
    """Every target, in the matrix's order: status, hits, records, time, exit status, error."""
    table = Table(title=title, title_justify="left")
    table.add_column("target", style="bold", overflow="fold")
    table.add_column("status")
    table.add_column("hits", justify="right")
    table.add_column("records", justify="right")
    table.add_column("time (s)", justify="right")
    table.add_column("exit", justify="right")
    table.add_column("error", overflow="fold")
    for result in results:
        table.add_row(escape(result.name), status_text(result), str(result.hits), str(len(result.records)),
                      f"{result.seconds:.2f}", "" if result.exit_status is None else str(result.exit_status),
                      escape(result.error or ""))
    return table


def counts_line(results: Sequence[TargetResult], seconds: float, workers: int) -> str:
    """``25 targets in 31.2 s on 2 workers: 23 ok, 1 timeout, 1 error (3 cached)`` (no workers: all cached)."""
    by_status: dict[str, int] = {}
    for result in results:
        by_status[result.status] = by_status.get(result.status, 0) + 1
    parts = ", ".join(f"{n} {status}" for status, n in by_status.items())
    cached = sum(r.cached for r in results)
    where = f" on {workers} worker{'' if workers == 1 else 's'}" if workers else ""
    return (f"{len(results)} target{'' if len(results) == 1 else 's'} in {seconds:.1f} s{where}: {parts}"
            + (f" ({cached} cached)" if cached else ""))


class ProgressDisplay:
    """Rows as targets complete, above a progress bar on a terminal (``console`` is stderr's)."""

    def __init__(self, console: Console, total: int, title: str = "targets") -> None:
        self.console = console
        self.total = total
        self.title = title
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(), console=self.console,
                                      transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.title, total=self.total)
        return self

    def __call__(self, result: TargetResult) -> None:
        self.console.print(row(result), soft_wrap=True, highlight=False)
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> Any:
        if self._progress is not None:
            self._progress.__exit__(kind, exc, tb)
        return None
