"""Histograms the way bpftrace prints them: ``--hist FIELD`` and ``--latency``.

Values go into power-of-two buckets (bpftrace's ``hist()``): ``(..., 0)`` for
negative values, ``[0]``, ``[1]``, then ``[2, 4)``, ``[4, 8)``... with K, M, G
for powers of 1024, and a bar of ``@`` scaled to the fullest bucket.
``--latency`` makes one histogram per return event from the time between each
call's entry and its return, in microseconds.  ``--plot out.png`` draws the
same buckets with matplotlib (the optional extra ``kpsdk[plot]``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpsdk.errors import KpsdkError
from kpsdk.trace.numbers import parse_ascii_int

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord

BAR_WIDTH = 52
NEGATIVE = -1


def log2_bucket(value: int) -> int:
    """The bucket of a value: -1 below zero, 0 for 0, 1 for 1, k+1 for [2**k, 2**(k+1))."""
    if value < 0:
        return NEGATIVE
    return value.bit_length()


def _size(n: int) -> str:
    for suffix, shift in (("E", 60), ("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def bucket_label(bucket: int) -> str:
    """``(..., 0)``, ``[0]``, ``[1]``, ``[2, 4)``, ``[1K, 2K)``."""
    if bucket == NEGATIVE:
        return "(..., 0)"
    if bucket <= 1:
        return f"[{bucket}]"
    low = 1 << (bucket - 1)
    return f"[{_size(low)}, {_size(low * 2)})"


@dataclass
class Histogram:
    """Counts per log2 bucket for one key (an event, a function)."""

    title: str
    buckets: Counter[int] = field(default_factory=Counter)
    total: int = 0

    def add(self, value: int) -> None:
        self.buckets[log2_bucket(value)] += 1
        self.total += 1

    def rows(self) -> list[tuple[str, int]]:
        """Every bucket from the lowest to the highest seen, empty ones included (as bpftrace)."""
        if not self.buckets:
            return []
        low, high = min(self.buckets), max(self.buckets)
        return [(bucket_label(b), self.buckets.get(b, 0)) for b in range(low, high + 1)]

    def render(self) -> str:
        rows = self.rows()
        top = max((c for _, c in rows), default=0)
        lines = [f"{self.title}:"]
        for label, count in rows:
            bar = "@" * (count * BAR_WIDTH // top if top else 0)
            lines.append(f"{label:<20}{count:>8} |{bar:<{BAR_WIDTH}}|")
        return "\n".join(lines) + "\n"


def _add_field(hists: dict[str, Histogram], record: TraceRecord, field_name: str) -> None:
    value = record.fields.get(field_name)
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, int) and not isinstance(v, bool):
            hist = hists.get(record.event)
            if hist is None:
                hist = hists[record.event] = Histogram(f"@{field_name}[{record.event}]")
            hist.add(v)


def field_histograms(records: Iterable[TraceRecord] | HistogramSet, field_name: str) -> list[Histogram]:
    """``--hist FIELD``: one histogram per event that has the field (integer values only)."""
    if isinstance(records, HistogramSet):
        return records.field(field_name)
    hists: dict[str, Histogram] = {}
    for record in records:
        _add_field(hists, record, field_name)
    return list(hists.values())


@dataclass
class LinearHistogram(Histogram):
    """bpftrace's ``lhist(v, min, max, step)``: buckets ``[min + k*step, min + (k+1)*step)``, one below
    ``min`` (``(..., min)``) and one from ``max`` up (``[max, ...)``)."""

    low: int = 0
    high: int = 100
    step: int = 10

    def add(self, value: int) -> None:
        if value < self.low:
            bucket = -1
        elif value >= self.high:
            bucket = (self.high - self.low + self.step - 1) // self.step
        else:
            bucket = (value - self.low) // self.step
        self.buckets[bucket] += 1
        self.total += 1

    def label(self, bucket: int) -> str:
        if bucket < 0:
            return f"(..., {self.low})"
        start = self.low + bucket * self.step
        if start >= self.high:
            return f"[{self.high}, ...)"
        return f"[{start}, {min(start + self.step, self.high)})"

    def rows(self) -> list[tuple[str, int]]:
        if not self.buckets:
            return []
        low, high = min(self.buckets), max(self.buckets)
        return [(self.label(b), self.buckets.get(b, 0)) for b in range(low, high + 1)]


def parse_lhist(spec: str) -> tuple[str, int, int, int]:
    """``--lhist FIELD,MIN,MAX,STEP`` (bpftrace's ``lhist()`` arguments): MIN < MAX, STEP > 0."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) != 4 or not parts[0]:
        raise KpsdkError(f"--lhist {spec!r}: want FIELD,MIN,MAX,STEP (as bpftrace's lhist(v, 0, 100, 10))")
    numbers = [parse_ascii_int(p) for p in parts[1:]]
    if None in numbers:  # ASCII digits only: int() would take other scripts' digits too
        raise KpsdkError(f"--lhist {spec!r}: MIN, MAX and STEP are integers")
    low, high, step = (n for n in numbers if n is not None)
    if step <= 0 or low >= high:
        raise KpsdkError(f"--lhist {spec!r}: want MIN < MAX and STEP > 0")
    if (high - low) // step > 10_000:
        raise KpsdkError(f"--lhist {spec!r}: {(high - low) // step} buckets; at most 10000")
    return parts[0], low, high, step


def _add_linear(hists: dict[str, Histogram], record: TraceRecord, field_name: str, low: int, high: int,
                step: int) -> None:
    value = record.fields.get(field_name)
    for v in value if isinstance(value, list) else [value]:
        if isinstance(v, int) and not isinstance(v, bool):
            hist = hists.get(record.event)
            if hist is None:
                hist = hists[record.event] = LinearHistogram(f"@{field_name}[{record.event}]", low=low, high=high,
                                                             step=step)
            hist.add(v)


def linear_histograms(records: Iterable[TraceRecord] | HistogramSet, field_name: str, low: int, high: int,
                      step: int) -> list[Histogram]:
    """``--lhist FIELD,MIN,MAX,STEP``: one linear histogram per event that has the field."""
    if isinstance(records, HistogramSet):
        return records.linear(field_name, low, high, step)
    hists: dict[str, Histogram] = {}
    for record in records:
        _add_linear(hists, record, field_name, low, high, step)
    return list(hists.values())


def _add_latency(hists: dict[str, Histogram], record: TraceRecord) -> None:
    if record.kind == "r" and record.duration is not None:
        key = f"{record.event}" if record.func is None else f"{record.func}"
        hist = hists.get(key)
        if hist is None:
            hist = hists[key] = Histogram(f"@latency_us[{key}]")
        hist.add(int(record.duration * 1e6))


def latency_histograms(records: Iterable[TraceRecord] | HistogramSet) -> list[Histogram]:
    """``--latency``: per return event, entry-to-return time in microseconds."""
    if isinstance(records, HistogramSet):
        return records.latency()
    hists: dict[str, Histogram] = {}
    for record in records:
        _add_latency(hists, record)
    return list(hists.values())


class HistogramSet:
    """The histograms ``kpsdk trace`` prints at the end (``--hist``, ``--lhist``, ``--latency``),
    filled as the records come: :meth:`append` counts a record into their buckets and keeps
    nothing else, so memory is the buckets' however long the trace (it kept every record before:
    168 MB at 200,000).  It stands where the run kept a list of records (``append``), and the
    functions above take it in place of the records."""

    def __init__(self, fields: Iterable[str] = (), latency: bool = False,
                 linear: Iterable[tuple[str, int, int, int]] = ()) -> None:
        self._fields: dict[str, dict[str, Histogram]] = {name: {} for name in fields}
        self._latency: dict[str, Histogram] | None = {} if latency else None
        self._linear: dict[tuple[str, int, int, int], dict[str, Histogram]] = {spec: {} for spec in linear}

    def append(self, record: TraceRecord) -> None:
        for name, hists in self._fields.items():
            _add_field(hists, record, name)
        for (name, low, high, step), hists in self._linear.items():
            _add_linear(hists, record, name, low, high, step)
        if self._latency is not None:
            _add_latency(self._latency, record)

    def field(self, name: str) -> list[Histogram]:
        return list(self._fields.get(name, {}).values())

    def linear(self, name: str, low: int, high: int, step: int) -> list[Histogram]:
        return list(self._linear.get((name, low, high, step), {}).values())

    def latency(self) -> list[Histogram]:
        return list((self._latency or {}).values())


#: what ``--plot FILE`` writes, by the file's suffix (formats matplotlib's Agg backend writes itself)
PLOT_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def plot(histograms: list[Histogram], path: str, xlabel: str = "value", fmt: str = "png") -> None:
    """Save the histograms as bar charts in one image of format ``fmt`` (png, svg, pdf; needs
    matplotlib: ``pip install 'kpsdk[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise KpsdkError("--plot needs matplotlib: pip install 'kpsdk[plot]'") from exc
    if not histograms:
        raise KpsdkError(f"nothing to plot into {path}: no event had a value for the histogram")
    fig, axes = plt.subplots(len(histograms), 1, figsize=(9, 2.8 * len(histograms)), squeeze=False)
    for ax, hist in zip(axes[:, 0], histograms, strict=True):
        rows = hist.rows()
        ax.bar(range(len(rows)), [c for _, c in rows], color="#4c72b0")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([label for label, _ in rows], rotation=30, ha="right", fontsize=8)
        ax.set_title(f"{hist.title} ({hist.total} values)")
        ax.set_ylabel("count")
        ax.set_xlabel(xlabel)
    fig.tight_layout()
    fig.savefig(path, format=fmt)
    plt.close(fig)
