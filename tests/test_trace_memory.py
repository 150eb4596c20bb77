"""Outputs and reports that stream (issue 36, item 8): a trace's memory does not grow with its
length.  ``-o trace-dat`` kept ~0.75 KB per event and ``-o perfetto`` ~1 KB until the end (222 and
271 MB at 200,000 events), ``--hist`` 168 MB; the text and JSON lines outputs always streamed.

Each case runs in a fresh interpreter that writes N records (entries and returns of one
function, as ``kpsdk trace -e 'p:e inc x=%di' -e 'r:r inc ret=$retval'`` makes them, with a few
tasks and CPUs) and prints its peak resident memory (``VmHWM``); 200,000 records may not take
more than a few MB above 20,000.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: what the peak may grow from 20,000 to 200,000 records (MB): a flat writer's noise, far
#: below what keeping 180,000 records costs (~130 MB and more)
SLACK_MB = 12

PROGRAM = textwrap.dedent("""
    import io, os, sys
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.grammar import parse
    from kpsdk.trace.hist import HistogramSet
    from kpsdk.trace.output import WriterContext, make_writer

    def hwm():
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])

    fmt, count = sys.argv[1], int(sys.argv[2])
    entry = parse("p:e inc x=%di:s32 name=+0(%si):string")
    ret = parse("r:r inc ret=$retval:s32")
    sink = open(os.devnull, "wb" if fmt == "trace-dat" else "w")
    if fmt == "hist":
        writer = HistogramSet(["x", "ret"], True, [("x", 0, 1000, 10)])
        write = writer.append
    else:
        writer = make_writer(fmt, sink, WriterContext())
        write = writer.write
    for i in range(count // 2):
        t = i * 1e-6
        task, cpu = 1 + i % 3, i % 2
        write(TraceRecord("e", "kprobes", "p", t, 0x401000, "inc+0x0/0x10", {"x": i, "name": "n%d" % (i % 97)},
                          task=task, definition=entry, entry_sp=0x7ff000, comm="prog", pid=100 + task, cpu=cpu,
                          event_id=1000))
        write(TraceRecord("r", "kprobes", "r", t + 5e-7, 0x401000, "loop+0x1c/0x40 <- inc", {"ret": i + 1},
                          caller=0x401100, func="inc", entry_time=t, task=task, definition=ret, entry_sp=0x7ff000,
                          comm="prog", pid=100 + task, cpu=cpu, event_id=1001))
    if fmt != "hist":
        writer.close()
    print(hwm())
""")


def _peak_kb(fmt: str, count: int) -> int:
    proc = subprocess.run([sys.executable, "-c", PROGRAM, fmt, str(count)], capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[-1])


@pytest.mark.parametrize("fmt", ["trace-dat", "perfetto", "hist", "text", "jsonl"])
def test_memory_stays_flat_from_20k_to_200k_events(fmt: str) -> None:
    small, large = _peak_kb(fmt, 20_000), _peak_kb(fmt, 200_000)
    assert large - small < SLACK_MB * 1024, f"{fmt}: {small} KB at 20k events, {large} KB at 200k"


SYSTEM_MAP = textwrap.dedent("""
    import gc, os, random, sys, time
    from kpsdk.kernel.kallsyms import load_kernel_symbols

    def rss():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

    path, count = sys.argv[1], int(sys.argv[2])
    random.seed(1)
    with open(path, "w") as f:
        address = 0xffffffff81000000
        for i in range(count):
            address += random.randint(1, 64)
            kind = random.choice("TtTtDdBbRrAW")
            suffix = random.choice(["", "", ".isra.0"])
            f.write("%016x %s sym_%d_%x%s\\n" % (address, kind, i, random.getrandbits(30), suffix))
    gc.collect()
    before = rss()
    start = time.perf_counter()
    table = load_kernel_symbols(path)
    took = time.perf_counter() - start
    gc.collect()
    print(len(table), rss() - before, took)
""")


def test_a_big_system_map_is_kept_lean(tmp_path: Path) -> None:
    """A System.map of 300,000 lines: its table keeps ~100 bytes a symbol (its name's characters
    and a few array slots), not a Symbol object, an int, a name string and a dict entry each
    (~475 bytes: 1.3 GB for 3M lines)."""
    proc = subprocess.run([sys.executable, "-c", SYSTEM_MAP, str(tmp_path / "System.map"), "300000"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    symbols, kept_kb, seconds = proc.stdout.split()
    per_symbol = int(kept_kb) * 1024 / int(symbols)
    assert int(symbols) > 250_000 and per_symbol < 160, (symbols, kept_kb, seconds)


def test_a_small_reorder_window_writes_the_same_events() -> None:
    """Events beyond the reorder window are written as they complete, out of time order: the same
    events, slices still paired with their entries (a recursion deeper than the window)."""
    import json

    from kpsdk.trace import output
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.grammar import parse

    entry, ret, other = parse("p:e fact n=%di:s32"), parse("r:r fact ret=$retval:s32"), parse("p:o put v=%si:s32")
    records: list[TraceRecord] = []
    t = 0.0
    for depth in range(6):  # fact(6) .. fact(1), a put inside each
        t += 1e-6
        records.append(TraceRecord("e", "kprobes", "p", t, 0x1000, "fact+0x0/0x20", {"n": 6 - depth},
                                   definition=entry, entry_sp=0x8000 - 64 * depth))
        t += 1e-6
        records.append(TraceRecord("o", "kprobes", "p", t, 0x2000, "put+0x0/0x20", {"v": depth}, definition=other,
                                   entry_sp=0x7000))
    for depth in reversed(range(6)):
        t += 1e-6
        records.append(TraceRecord("r", "kprobes", "r", t, 0x1000, "main+0x4/0x40 <- fact", {"ret": depth},
                                   caller=0x3004, func="fact", entry_time=(2 * depth + 1) * 1e-6,
                                   definition=ret, entry_sp=0x8000 - 64 * depth))

    def events(window: int) -> list[str]:
        made: list[object] = []
        maker = output._PerfettoEvents("p", made.append, as_text=False, window=window)
        for record in records:
            maker.add(record)
        maker.finish()
        return [json.dumps(e, sort_keys=True) for e in made]

    full, small = events(4096), events(2)
    assert sorted(full) == sorted(small) and full != small
    slices = [json.loads(e) for e in small if '"ph": "X"' in e]
    assert sorted(s["args"]["entry"]["n"] for s in slices) == [1, 2, 3, 4, 5, 6]
    instants = [json.loads(e) for e in full if '"ph": "i"' in e]
    assert [e["args"]["v"] for e in instants] == [0, 1, 2, 3, 4, 5]
