"""Trace output is written in blocks, and still all of it reaches the file: at the run's end,
on Ctrl-C, and when the run fails part way."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.errors import TargetError
from kpsdk.trace import runner as trace_run
from kpsdk.trace.output import WriterContext, make_writer

runner = CliRunner()
DEFS = ["-e", "p:put put name=+0(%di):string v=%si:s32", "-e", "r:fact fact n=$arg1:s64 ret=$retval:s64"]


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        super().flush()


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_writers_do_not_flush_per_record(fmt: str) -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        trace = s.trace(["p:loop inc x=%di:s32"])
        s.call("loop", 50)
    stream = CountingStream()
    writer = make_writer(fmt, stream, WriterContext())
    for record in trace.records:
        writer.write(record)
    assert stream.flushes == 0
    writer.close()
    assert stream.flushes == 1 and stream.getvalue().count("inc") >= 50


def lines_of(text: str, fmt: str) -> list[str]:
    if fmt == "perfetto":
        return [e["name"] for e in json.loads(text)["traceEvents"] if e["ph"] != "M"]
    if fmt == "jsonl":
        return [json.loads(line)["event"] for line in text.splitlines()[1:]]
    return [line.split(": ", 1)[-1] for line in text.splitlines() if not line.startswith("#")]


def traced(fmt: str, tmp_path: Path, name: str, to_file: bool, code: int = 0) -> str:
    """What ``kpsdk trace`` wrote, to ``--out`` or to stdout."""
    out = tmp_path / name
    result = runner.invoke(app, ["trace", "x86_64", *DEFS, "--output", fmt, *(["--out", str(out)] if to_file else [])])
    assert result.exit_code == code, result.output
    return out.read_text() if to_file else result.stdout


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
@pytest.mark.parametrize("ending", [KeyboardInterrupt, TargetError])
@pytest.mark.parametrize("to_file", [True, False])
def test_a_run_ending_early_still_writes_every_record(fmt: str, ending: type[BaseException], to_file: bool,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    want = lines_of(traced(fmt, tmp_path, "whole", to_file), fmt)
    original = trace_run._run

    def run_then_fail(*args: Any) -> None:
        original(*args)
        raise ending("stopped after the run" if ending is TargetError else None)  # type: ignore[call-arg]

    monkeypatch.setattr(trace_run, "_run", run_then_fail)
    got = lines_of(traced(fmt, tmp_path, "cut", to_file, 130 if ending is KeyboardInterrupt else 1), fmt)
    assert len(want) > 5
    assert got == want
