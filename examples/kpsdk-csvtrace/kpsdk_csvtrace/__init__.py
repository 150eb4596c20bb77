"""kpsdk-csvtrace: an out-of-tree kpsdk plugin adding a ``csv`` output format to ``kpsdk trace``.

::

    kpsdk trace x86_64 -e 'p:add add a=%di:s32 b=%si:s32' --output csv

prints one CSV row per trace record: ``event,kind,time,where`` and then one
``name=value`` cell per fetch argument, each value printed the way the
kernel's trace file prints it (:func:`kpsdk.trace.output.format_value`), so a
row holds exactly what the ``text`` line does, in cells a spreadsheet opens.

This module is a pluggy plugin loaded from the ``kpsdk`` entry-point group under
the name ``csvtrace``: it implements ``kpsdk_trace_formats``, the hook through
which kpsdk's own ``text``, ``jsonl`` and ``perfetto`` formats arrive too.
"""

from __future__ import annotations

import csv
from typing import IO, TYPE_CHECKING

import kpsdk
from kpsdk.trace.output import OutputFormat, Writer, WriterContext, format_value

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord

HEADER = ["event", "kind", "time", "where"]


class CsvWriter(Writer):
    """Rows as records come; the header first, so a reader knows the columns."""

    def __init__(self, stream: IO[str], context: WriterContext) -> None:
        # lineterminator "\n": the rows go to a text stream, which translates newlines itself
        self.csv = csv.writer(stream, lineterminator="\n")
        self.stream = stream
        self.csv.writerow(HEADER)

    def write(self, record: TraceRecord) -> None:
        types = {a.name: a.type for a in record.definition.args} if record.definition is not None else {}
        cells = [f"{name}={format_value(value, types.get(name))}" for name, value in record.fields.items()]
        self.csv.writerow([record.event, record.kind, f"{record.time:.6f}", record.where, *cells])
        self.stream.flush()  # a row as soon as its record is made, as the text format does


def _open(stream: IO[str], context: WriterContext) -> CsvWriter:
    return CsvWriter(stream, context)


@kpsdk.hookimpl
def kpsdk_trace_formats() -> list[OutputFormat]:
    return [OutputFormat("csv", _open, "one CSV row a record: event,kind,time,where,name=value...")]
