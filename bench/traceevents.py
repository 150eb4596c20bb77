"""Bench rows T: a ``kpsdk trace`` event written to a file, per format, next to the raw API doing the same;
and (issue 38) the event run in C against the Python path, filtered out, and with a hist trigger.

The goal (issue 19, item 1c) is a trace event at <= 1.5x a kprobe whose
handler does the same reads by hand and writes the same line: what a user
would write without ``kpsdk trace``.  Both run on the x86_64 fixture's
``inc``, called by ``loop(n)``, in one session; each round runs every
configuration once, interleaved (the unprobed loop, the raw handler, and one
trace per format: ``text`` with the kernel's prefix, ``jsonl``, ``perfetto``),
each registered before its run and unregistered after it.  A run includes
the writer's ``close()`` (perfetto writes everything there) and the file's
flush.  Times are CPU time (``time.process_time``): the 2-core machine is
shared; the per-round ratio (event - unprobed) / (raw - unprobed) is given as
its median and range.  Called from ``bench/run.py``; the rows use its ``Row``.

The events run in C at the hit where they can (:mod:`kpsdk.trace.native`); the rows T38 put
each next to the same trace on the Python path (``kpsdk.trace.native.ENABLED = False``), in the
same rounds: text output (goal <= 1 us an event), a filter that rejects every hit (<= 0.3 us),
and a hist trigger ``hist:keys=x.log2`` with the text output (<= 0.5 us a hit).
"""

from __future__ import annotations

import gc
import io
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kpsdk
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.fixtures import path as fixture_path
from kpsdk.trace import native as trace_native
from kpsdk.trace.output import WriterContext, make_writer

FORMATS = ("text", "jsonl", "perfetto")
#: issue 38's configurations: (name, format, native, filter, triggers)
NATIVE_CASES = (("text-py", "text", False, None, ()),
                ("filtered", "text", True, "x > 100000000", ()), ("filtered-py", "text", False, "x > 100000000", ()),
                ("hist", "text", True, None, ("inc:hist:keys=x.log2",)),
                ("hist-py", "text", False, None, ("inc:hist:keys=x.log2",)))
#: a string of the fixture's .rodata the fetches read at every hit (what a name argument would be)
STRING = b"sum7\0"


def _string_address(elf: Path) -> int:
    for seg in load_elf(elf).segments:
        at = bytes(seg.data).find(STRING)
        if at >= 0:
            return int(seg.vaddr + at)
    raise SystemExit(f"{STRING!r} is not in {elf}")


class _Raw:
    """A kprobe whose pre_handler reads what the definition fetches and writes the text line."""

    def __init__(self, s: Any, path: str, string_at: int) -> None:
        self.s, self.path, self.string_at = s, path, string_at
        self.hits = 0
        self.probe: Any = None
        self.out: io.TextIOWrapper | None = None

    def on(self) -> None:
        s, at = self.s, self.string_at
        out = self.out = open(self.path, "w")  # noqa: SIM115 - closed in off()
        where = s.symbols.format(s.symbols.get("inc").address)
        start = time.perf_counter()

        def pre(p: Any, regs: Any) -> int:
            x = regs.rdi & 0xFFFFFFFF
            x = x - (1 << 32) if x >> 31 else x
            ra = s.target.read_word(regs.sp)
            name = s.read_string(at)
            t = time.perf_counter() - start
            out.write(f"{'fixture':>16}-{1:<7} [000] ..... {t:12.6f}: inc: ({where}) x={x} ra={ra:#x} "
                      f"s=\"{name}\"\n")
            return 0

        self.probe = kpsdk.Kprobe(symbol_name="inc", pre_handler=pre)
        s.register_kprobe(self.probe)

    def end(self) -> None:
        assert self.out is not None
        self.out.flush()

    def off(self) -> None:
        self.s.unregister_kprobe(self.probe)
        self.hits += self.probe.hits
        assert self.out is not None
        self.out.close()


class _Traced:
    """``s.trace()`` of the same reads, its records handed to a writer of ``fmt`` on a file."""

    def __init__(self, s: Any, fmt: str, path: str, string_at: int, native: bool = True,
                 filter_expr: str | None = None, triggers: tuple[str, ...] = ()) -> None:
        self.s, self.fmt, self.path = s, fmt, path
        self.definition = f"p:inc inc x=%di:s32 ra=$stack0:x64 s=@{string_at:#x}:string"
        self.native, self.filter, self.triggers = native, filter_expr, triggers
        self.records = 0
        self.hits = 0
        self.ran_native = False
        self.trace: Any = None
        self.writer: Any = None
        self.out: io.TextIOWrapper | None = None

    def on(self) -> None:
        self.out = open(self.path, "w")  # noqa: SIM115 - closed in off()
        self.writer = make_writer(self.fmt, self.out, WriterContext(process_name="bench", target="bench"))
        before = trace_native.ENABLED
        trace_native.ENABLED = self.native
        try:
            self.trace = self.s.trace(self.definition, sink=self.writer.write, filter=self.filter,
                                      triggers=self.triggers)
        finally:
            trace_native.ENABLED = before
        self.ran_native = self.trace.native is not None and self.trace.native.is_native(self.trace.events[0])

    def end(self) -> None:
        self.writer.close()

    def off(self) -> None:
        self.hits += self.trace.events[0].hits
        self.trace.close()
        self.records += self.trace.counts["inc"]
        assert self.out is not None
        self.out.close()


def bench_traceevents(reps: int, n: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Per-event costs (us, CPU time) of each format and of the raw handler, with per-round ratios."""
    elf = fixture_path("x86_64")
    s = kpsdk.open(f"elf:{elf}")
    at = _string_address(elf)
    log(f"trace events to a file ({', '.join(FORMATS)}) vs the raw API's same reads, x86_64 loop({n:,}), "
        f"{reps} interleaved rounds, CPU time")
    with tempfile.TemporaryDirectory(prefix="kpsdk-bench-trace-") as tmp:
        raw = _Raw(s, os.path.join(tmp, "raw.txt"), at)
        traced = {fmt: _Traced(s, fmt, os.path.join(tmp, f"trace.{fmt}"), at) for fmt in FORMATS}
        extra = {name: _Traced(s, fmt, os.path.join(tmp, f"{name}.{fmt}"), at, native, filt, trig)
                 for name, fmt, native, filt, trig in NATIVE_CASES}
        configs: dict[str, Any] = {"base": None, "raw": raw, **traced, **extra}
        times: dict[str, list[float]] = {name: [] for name in configs}
        enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(reps + 1):  # the first round warms up and is dropped
                for name, config in configs.items():
                    if config is not None:
                        config.on()
                    t0 = time.process_time()
                    s.call("loop", n)
                    if config is not None:
                        config.end()
                    t = time.process_time() - t0
                    if config is not None:
                        config.off()
                    times[name].append(t)
                gc.collect()
        finally:
            if enabled:
                gc.enable()
        lines = {fmt: Path(t.path).read_text().count("\n") for fmt, t in traced.items()}
    s.close()
    want = n * (reps + 1)
    if raw.hits != want or any(t.records != want for t in traced.values()) or \
            any(t.hits != want or t.records != (0 if t.filter else want) for t in extra.values()):
        raise SystemExit(f"trace bench: raw {raw.hits} hits, records "
                         f"{ {f: t.records for f, t in {**traced, **extra}.items()} }; expected {want} each")
    native_ran = {name: t.ran_native for name, t in {**traced, **extra}.items()}
    times = {name: v[1:] for name, v in times.items()}

    def per_event(name: str) -> list[float]:
        return sorted((t - b) / n * 1e6 for t, b in zip(times[name], times["base"], strict=True))

    out: dict[str, Any] = {"n": n, "rounds": reps, "last_run_lines": lines, "raw_us": _summary(per_event("raw")),
                           "native": native_ran}
    for name, *_ in NATIVE_CASES:
        out[name] = {"us": _summary(per_event(name))}
    for fmt in FORMATS:
        ratios = sorted((t - b) / (r - b) for t, r, b in zip(times[fmt], times["raw"], times["base"], strict=True)
                        if r > b)
        out[fmt] = {"us": _summary(per_event(fmt)), "ratio": _summary(ratios)}
    return out


def _summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"median": values[len(values) // 2], "min": values[0], "max": values[-1]}


def rows(raw: dict[str, Any], row: Callable[..., Any], us: Callable[[float], str],
         status: Callable[[bool], str]) -> list[Any]:
    """Rows T for the table: ``row`` is bench/run.py's ``Row``."""
    if "error" in raw:
        return [row("T", "trace event to a file vs the raw API", "n/a", "", "", "<= 1.5x", raw["error"])]
    ref = raw["raw_us"]["median"]
    out = []
    for fmt in FORMATS:
        r = raw[fmt]
        ratio = r["ratio"]
        out.append(row("T", f"`kpsdk trace` event to a file, {fmt}, vs a kprobe doing the same reads and writing "
                       f"the line (CPU time; per round: median {ratio['median']:.2f}x, "
                       f"{ratio['min']:.2f}-{ratio['max']:.2f}x)", us(r["us"]["median"]), f"raw {us(ref)}",
                       f"{ratio['median']:.2f}x", "<= 1.5x", status(ratio["median"] <= 1.5)))
    pairs = (("text", "text-py", "an event written as text", 1.0),
             ("filtered", "filtered-py", "an event filtered out", 0.3),
             ("hist", "hist-py", "a hist trigger's hit (keys=x.log2, with the text output)", 0.5))
    for name, python, what, goal in pairs:
        got, ref = raw[name]["us"], raw[python]["us"]
        out.append(row("T38", f"`kpsdk trace` {what}, run in C (native: {raw['native'].get(name)}), vs the Python "
                       f"path (CPU time per event; native {got['min']:.2f}-{got['max']:.2f} us over the rounds)",
                       us(got["median"]), f"Python {us(ref['median'])}", f"{ref['median'] / got['median']:.1f}x faster",
                       f"<= {goal:g} us", status(got["median"] <= goal)))
    return out


if __name__ == "__main__":
    import json
    import sys

    result = bench_traceevents(int(sys.argv[1]) if len(sys.argv) > 1 else 11,
                               int(sys.argv[2]) if len(sys.argv) > 2 else 2000,
                               lambda m: print(f"  .. {m}", file=sys.stderr))
    print(json.dumps(result, indent=1))
