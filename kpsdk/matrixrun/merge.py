"""One result for the whole matrix: the targets' records merged, in the matrix's order.

Every output is the targets' own outputs, one after the other in the order the targets
were given, each target's records in the order they were made: so the same matrix gives
the same bytes whatever ran it and how many workers it had (the records' times aside:
they are each target's clock).  What each target writes is what ``kpsdk trace`` writes for
it alone, made by the same writers (:mod:`kpsdk.trace.output`):

- ``jsonl``: per target, the ``kpsdk-trace`` header line (its ``target`` the target's
  name), then its records, each with a ``target`` key first (:data:`MATRIX_JSONL_SCHEMA`);
- ``perfetto``: one Trace Event Format document, one process per target (its ``pid`` the
  target's place from 1, its name the target's), sorted in the matrix's order;
- ``text``: per target, a ``==> TARGET <==`` line (as ``head`` names files), then its trace file;
- ``trace-dat`` and the formats plugins add: one file per target in a directory
  (``0001-NAME.dat``), with ``index.json`` naming each target's file, status and counts.

Targets that failed before handing over records have no part in the merged records; the
summary and the index say what happened to them.
"""

from __future__ import annotations

import copy
import io
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from kpsdk.errors import KpsdkError
from kpsdk.matrixrun.result import TargetResult
from kpsdk.outputformat import WriterContext

#: the formats merged into one stream; any other is written one file per target
MERGED_FORMATS = ("text", "jsonl", "perfetto")
INDEX_NAME = "index.json"
INDEX_VERSION = 1


def matrix_jsonl_schema() -> dict[str, Any]:
    """JSON Schema of the merged ``jsonl``: ``kpsdk trace``'s lines with a ``target`` key."""
    from kpsdk.trace.output import JSONL_SCHEMA

    schema = copy.deepcopy(JSONL_SCHEMA)
    record = schema["oneOf"][1]
    record["required"] = ["target", *record["required"]]
    record["properties"]["target"] = {"type": "string"}
    return schema


def _trace_records(result: TargetResult, fmt: str) -> list[Any]:
    """The target's records for a writer: TraceRecords only (a function script's dicts are jsonl's)."""
    from kpsdk.trace.events import TraceRecord

    if any(not isinstance(r, TraceRecord) for r in result.records):
        raise KpsdkError(f"target {result.name!r}: its script returned records that are not TraceRecords "
                         f"(dicts?): only --output jsonl writes those, not {fmt}")
    return result.records


def _context(result: TargetResult) -> WriterContext:
    return WriterContext(process_name=result.name, target=result.name, notes=result.info.notes,
                         word_size=result.info.word_size, endian=result.info.endian)


def _with_records(results: Iterable[TargetResult]) -> Iterable[TargetResult]:
    """The targets with a part in merged records: those that handed any over, or ran to their end."""
    return (r for r in results if r.records or r.status in ("ok", "timeout"))


def write_jsonl(results: Iterable[TargetResult], stream: IO[str]) -> None:
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.output import JsonlWriter

    for result in _with_records(results):
        key = '{"target": ' + json.dumps(result.name, ensure_ascii=False)
        buffer = io.StringIO()
        writer = JsonlWriter(buffer, _context(result))
        for record in result.records:
            if isinstance(record, TraceRecord):
                writer.write(record)
            else:
                writer.close()  # the header, once
                buffer.write(json.dumps({"target": result.name, **dict(record)}, ensure_ascii=False) + "\n")
        writer.close()
        lines = buffer.getvalue().splitlines(keepends=True)
        stream.write(lines[0])
        for line in lines[1:]:
            stream.write(line if line.startswith('{"target": ') else key + ", " + line[1:])


def write_text(results: Iterable[TargetResult], stream: IO[str], prefix: bool = True) -> None:
    from kpsdk.trace.output import TextWriter

    first = True
    for result in _with_records(results):
        stream.write(("" if first else "\n") + f"==> {result.name} <==\n")
        first = False
        writer = TextWriter(stream, prefix=prefix, notes=result.info.notes)
        for record in _trace_records(result, "text"):
            writer.write(record)
        if prefix:
            writer.close()


def perfetto_document(results: Iterable[TargetResult]) -> dict[str, Any]:
    """The merged Trace Event Format object: each target a process of its own."""
    from kpsdk.trace.output import perfetto_trace

    events: list[dict[str, Any]] = []
    frames: dict[str, Any] = {}
    records = 0
    for result in _with_records(results):
        pid = result.index + 1
        document = perfetto_trace(_trace_records(result, "perfetto"), process_name=result.name)
        records += len(result.records)
        events.append({"ph": "M", "pid": pid, "tid": 0, "name": "process_sort_index", "args": {"sort_index": pid}})
        for event in document["traceEvents"]:
            event["pid"] = pid
            for stack_key in ("sf", "esf"):
                if stack_key in event:
                    event[stack_key] = f"{pid}.{event[stack_key]}"
            events.append(event)
        for frame_id, frame in document.get("stackFrames", {}).items():
            if "parent" in frame:
                frame["parent"] = f"{pid}.{frame['parent']}"
            frames[f"{pid}.{frame_id}"] = frame
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ns",
                           "otherData": {"generator": "kpsdk matrix", "records": records}}
    if frames:
        out["stackFrames"] = frames
    return out


def write_perfetto(results: Iterable[TargetResult], stream: IO[str]) -> None:
    stream.write(json.dumps(perfetto_document(results), ensure_ascii=False) + "\n")


def file_name(result: TargetResult, suffix: str) -> str:
    """A target's file in a per-target directory: its place and a tame form of its name."""
    slug = re.sub(r"[^A-Za-z0-9._+@-]+", "_", result.name).strip("._")[:80] or "target"
    return f"{result.index + 1:04d}-{slug}{suffix}"


def index_entry(result: TargetResult, file: str | None) -> dict[str, Any]:
    return {"target": result.name, "status": result.status, "error": result.error, "records": len(result.records),
            "hits": result.hits, "seconds": round(result.seconds, 3), "exit_status": result.exit_status,
            "cached": result.cached, "file": file}


def write_per_target(results: Iterable[TargetResult], fmt: str, directory: Path) -> Path:
    """One file per target in ``directory`` (made if missing) and ``index.json``; the index's path."""
    from kpsdk.trace.output import output_format

    form = output_format(fmt)
    directory.mkdir(parents=True, exist_ok=True)
    suffix = {"trace-dat": ".dat", "jsonl": ".jsonl", "perfetto": ".json", "text": ".txt"}.get(fmt, f".{fmt}")
    entries = []
    for result in results:
        name: str | None = None
        if result.records or result.status in ("ok", "timeout"):
            name = file_name(result, suffix)
            records = _trace_records(result, fmt)
            with (directory / name).open("wb" if form.binary else "w") as stream:
                writer = form.open(stream, _context(result))
                for record in records:
                    writer.write(record)
                writer.close()
        entries.append(index_entry(result, name))
    index = directory / INDEX_NAME
    index.write_text(json.dumps({"schema": "kpsdk-matrix-index", "version": INDEX_VERSION, "format": fmt,
                                 "targets": entries}, indent=1, ensure_ascii=False) + "\n")
    return index


def write_merged(results: Iterable[TargetResult], fmt: str, stream: IO[str], prefix: bool = True) -> None:
    """``results`` merged into one stream of format ``fmt`` (one of :data:`MERGED_FORMATS`)."""
    if fmt == "jsonl":
        write_jsonl(results, stream)
    elif fmt == "perfetto":
        write_perfetto(results, stream)
    elif fmt == "text":
        write_text(results, stream, prefix)
    else:
        raise KpsdkError(f"{fmt} is written one file per target: give a directory")
