"""``--output trace-dat``: trace-cmd's own reader prints what kpsdk's text output prints.

Each test writes kpsdk's trace.dat and runs Debian's ``trace-cmd report`` on it: the
events (name, task, pid, CPU, time), the probed addresses and every field's value
must be those of the same records in kpsdk's text output.  ``trace-cmd`` is the
ground truth of the file format: a file it misreads is kpsdk's bug.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.cli import app
from kpsdk.fixtures import kernel
from kpsdk.trace.events import TraceRecord
from kpsdk.trace.grammar import Parser
from kpsdk.trace.output import TextWriter, WriterContext, format_prefix, format_text, make_writer
from tests.conftest import require_tool

FIXTURES = Path(kpsdk.__file__).parent / "fixtures" / "bin"
runner = CliRunner()

#: trace-cmd report's line: COMM-PID [CPU] SECS.USECS: EVENT: BODY (the event name padded)
REPORT_LINE = re.compile(r"^\s*(?P<comm>.+)-(?P<pid>\d+)\s+\[(?P<cpu>\d{3})\]\s+(?P<ts>\d+\.\d{6}):\s+"
                         r"(?P<event>[^:\s]+):\s+(?P<body>.*)$")
#: kpsdk's text line with its prefix
TEXT_LINE = re.compile(r"^\s*(?P<comm>.+)-(?P<pid>\d+)\s+\[(?P<cpu>\d{3})\] (?P<flags>\S{5})\s+"
                       r"(?P<ts>\d+\.\d{6}): (?P<event>[^:]+): \((?P<where>[^)]*)\)(?P<fields>.*)$")

DEFINITIONS = {
    "x86_64": ["p:put put name=+0(%di):string v=%si:s64 c=+0(%di):char[3] w=+0(%di):x16[2]",
               "r:fact fact ret=$retval:s32 n=$arg1:u8", "p add ra=$stack0:symbol"],
    "arm": ["p:put put name=+0(%r0):string v=%r1:s32 two=+0(%r0):string[2] first=+0(%r0):char",
            "r:fact fact ret=$retval:s32"],
    "ppc64": ["p:put put name=+0(%r3):string v=%r4:s64 lo=+0(%r3):b4@0/8", "r:fact fact ret=$retval:s16"],
    "riscv64": ["p:put put name=+0(%a0):string v=%a1:s64", "r:fact fact $retval"],
}


def report(path: Path) -> list[re.Match[str]]:
    """``trace-cmd report FILE``'s event lines, parsed (its first line is ``cpus=N``)."""
    tool = require_tool("trace-cmd", "trace-cmd")
    proc = subprocess.run([tool, "report", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and lines[0].startswith("cpus="), proc.stdout[:500]
    parsed = [REPORT_LINE.match(line) for line in lines[1:]]
    assert all(parsed), [line for line, m in zip(lines[1:], parsed, strict=True) if m is None][:3]
    assert "FAILED TO PARSE" not in proc.stdout and "UNKNOWN EVENT" not in proc.stdout, proc.stdout[:2000]
    return [m for m in parsed if m is not None]


def resolve(where: str, prog: Path) -> int:
    """``sym+0xoff/0xsize`` (kpsdk's text) as the address it names, from the ELF's own symbols."""
    name, _, rest = where.partition("+")
    offset = int(rest.split("/")[0], 16) if rest else 0
    symbols = {s.name: s.address for s in load_elf(str(prog)).symbols if s.name}
    return symbols[name] + offset


def the_same(text_lines: list[str], got: list[re.Match[str]], prog: Path, times: bool = True) -> None:
    """Each text line and the report's line for it say the same thing."""
    assert len(got) == len(text_lines) > 0
    for text, rep in zip(text_lines, got, strict=True):
        m = TEXT_LINE.match(text)
        assert m is not None, text
        assert (rep["comm"].strip(), rep["pid"], rep["cpu"], rep["event"]) == \
            (m["comm"].strip(), m["pid"], m["cpu"], m["event"]), (text, rep.string)
        if times:
            assert rep["ts"] == m["ts"], (text, rep.string)
        addrs = re.fullmatch(r"\((\w+)(?: <- (\w+))?\) ?(.*)", rep["body"])
        assert addrs is not None, rep.string
        if " <- " in m["where"]:  # kpsdk: (caller+off/size <- func); the kernel's format: (func <- ret_ip)
            caller, func = m["where"].split(" <- ")
            assert int(addrs[1], 16) == resolve(func, prog), (text, rep.string)
            assert int(addrs[2], 16) == resolve(caller, prog), (text, rep.string)
        else:
            assert int(addrs[1], 16) == resolve(m["where"], prog), (text, rep.string)
        assert addrs[3] == m["fields"].strip(), (text, rep.string)


@pytest.mark.parametrize("arch", sorted(DEFINITIONS))
def test_trace_cmd_reads_the_records_kpsdk_printed(arch: str, tmp_path: Path) -> None:
    """The same records through the text writer and the trace-dat writer: 64- and 32-bit, little
    and big endian (ppc64), returns, strings, arrays, chars, bitfields, symbols."""
    prog = FIXTURES / f"prog-{arch}.elf"
    with kpsdk.open(f"elf:{prog}") as s:
        trace = s.trace(DEFINITIONS[arch])
        s.run(timeout=10)
        context = WriterContext(word_size=s.arch.word_size, endian=s.arch.endian)
    records = trace.records
    path = tmp_path / "trace.dat"
    with path.open("wb") as f:
        writer = make_writer("trace-dat", f, context)
        for r in records:
            writer.write(r)
        writer.close()
    assert path.read_bytes()[:10] == b"\x17\x08\x44tracing" and path.read_bytes()[10:12] == b"6\0"
    text = [format_prefix(r) + format_text(r) for r in records]
    assert {r.kind for r in records} == {"p", "r"}
    the_same(text, report(path), prog)


def test_the_cli_writes_a_file_trace_cmd_reads(tmp_path: Path) -> None:
    """``kpsdk trace ... -o trace-dat --out FILE`` against ``kpsdk trace ...`` (text) of the same
    program: the same events, tasks, addresses and values (two runs: the times differ)."""
    prog = FIXTURES / "prog-x86_64.elf"
    defs = ["-e", "p:put put name=+0(%di):string v=%si:s64", "-e", "r fact $retval:s64"]
    path = tmp_path / "out.dat"
    result = runner.invoke(app, ["trace", "x86_64", *defs, "-o", "trace-dat", "--out", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = runner.invoke(app, ["trace", "x86_64", *defs])
    assert text.exit_code == 0, text.output
    lines = [line for line in text.stdout.splitlines() if not line.startswith("#")]
    the_same(lines, report(path), prog, times=False)


def _record(definition: str, when: float, cpu: int, pid: int, comm: str, **fields: object) -> TraceRecord:
    parsed = Parser(None).parse(definition)
    return TraceRecord(event=parsed.event, group=parsed.group, kind=parsed.op, time=when, ip=0x1000 + cpu,
                       where="f+0x0/0x10", fields=dict(fields), definition=parsed, comm=comm, pid=pid, cpu=cpu,
                       caller=0x2000 if parsed.op == "r" else None, func="f" if parsed.op == "r" else None)


def test_pages_long_records_gaps_cpus_and_unknown_tasks(tmp_path: Path) -> None:
    """Records that fill many ring-buffer pages, strings longer than a small entry holds,
    gaps beyond the 27-bit time delta (time extends), four CPUs, and a task without a name:
    trace-cmd prints every one, in time order, with its values."""
    records = []
    for i in range(3000):
        when = i * 0.0007 + (5.0 if i > 1500 else 0.0)  # a 5 s gap: deltas over 2**27 ns
        name = "x" * (i % 300)  # up to 299 bytes: entries with type_len 0
        records.append(_record("p:grp/ev1 f s=+0(%ax):string n=%bx:s32 u=%cx:u64", when, i % 4, 100 + i % 7,
                               f"task{i % 7}" if i % 7 else "<...>", s=name, n=-i, u=2**64 - 1 - i))
        if i % 10 == 0:
            records.append(_record("r:ret f v=%ax:x8", when + 0.0001, i % 4, 100, "task0", v=i % 256))
    path = tmp_path / "big.dat"
    with path.open("wb") as f:
        writer = make_writer("trace-dat", f, WriterContext())
        for r in records:
            writer.write(r)
        writer.close()
    got = report(path)
    ordered = sorted(records, key=lambda r: r.time)  # trace-cmd merges the CPUs by time
    assert len(got) == len(ordered)
    for rec, rep in zip(ordered, got, strict=True):
        assert rep["event"] == rec.event and int(rep["cpu"]) == rec.cpu and int(rep["pid"]) == rec.pid
        assert rep["ts"] == format_prefix(rec).rsplit(" ", 2)[-2].rstrip(":")
        if rec.comm != "<...>":
            assert rep["comm"].strip() == rec.comm
        body = format_text(rec).split(") ", 1)[1]
        assert rep["body"].split(") ", 1)[1] == body


def test_an_empty_trace_is_a_file_trace_cmd_reads(tmp_path: Path) -> None:
    path = tmp_path / "empty.dat"
    with path.open("wb") as f:
        make_writer("trace-dat", f).close()
    assert report(path) == []


def test_text_writer_unchanged_for_comparison() -> None:
    """The text the comparisons above use is the writer's own line (format_prefix + format_text)."""
    import io

    rec = _record("p:e f a=%ax:s32", 1.5, 0, 7, "sh", a=-3)
    out = io.StringIO()
    TextWriter(out, prefix=True).write(rec)
    assert out.getvalue().splitlines()[-1] == format_prefix(rec) + format_text(rec)


@pytest.mark.kernel
def test_trace_cmd_reads_a_kernel_trace_as_the_guest_recorded_it(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    """One boot of Debian's 6.1 kernel tracing itself (test_trace_prefix_kernel.py's workload and
    definitions) while ``kpsdk trace -o trace-dat`` traces it from outside: every line of the
    guest's own trace file is in ``trace-cmd report``'s output of kpsdk's file, in order and
    contiguous: task, pid, CPU, event, where (the report's addresses named with the kernel's
    own symbols) and each field; a faulted string is the kernel's empty one."""
    from kpsdk.kernel.kallsyms import load_kernel_symbols
    from tests.test_trace_prefix_kernel import DEFINITIONS, SELF_TRACING, entries

    require_tool("gdb-multiarch", "gdb-multiarch")
    initrd = kernel_initramfs(workload=SELF_TRACING)
    out = tmp_path / "kernel.dat"
    args = ["trace", "qemu-system:x86_64", "--kernel", str(debian_kernel), "--initrd", str(initrd),
            "--console", "--duration", "300", "-o", "trace-dat", "--out", str(out)]
    for d in DEFINITIONS:
        args += ["-e", d]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output[-3000:]
    console = result.stderr.replace("\r", "")
    guest_text = console.split("KPSDK-GUEST-TRACE-BEGIN\n", 1)[1].split("KPSDK-GUEST-TRACE-END", 1)[0]
    guest = [(comm.strip(), pid, cpu, body) for comm, pid, cpu, _flags, body in entries(guest_text)]
    assert len(guest) > 5, guest_text[-2000:]
    symbols = load_kernel_symbols(debian_kernel)

    def named(addr: str) -> str:
        found = symbols.lookup(int(addr, 16))
        assert found is not None, addr
        return f"{found[0]}+{found[1]:#x}/{found[2]:#x}"

    ours = []
    for m in report(out):
        addrs = re.fullmatch(r"\((\w+)(?: <- (\w+))?\)(.*)", m["body"])
        assert addrs is not None, m.string
        # the kernel's format prints (func <- ret_ip); its text (caller+off/size <- func)
        where = f"{named(addrs[2])} <- {named(addrs[1]).split('+')[0]}" if addrs[2] else named(addrs[1])
        ours.append((m["comm"].strip(), m["pid"], m["cpu"], f"{m['event']}: ({where}){addrs[3]}"))
    spawned = {mk.fields["pid"]: Path(mk.fields["cmd"]).name for mk in kernel.parse_markers(console)
               if mk.action == "spawn"}

    def same(g: tuple[str, ...], o: tuple[str, ...]) -> bool:
        body = g[3].replace("=(fault)", '=""')  # the kernel records a faulted string as an empty one
        # a forked child's comm: the guest prints the one it recorded last (test_trace_prefix_kernel.py)
        return (g[1:3], body) == (o[1:3], o[3]) and (g[0] == o[0] or spawned.get(g[1]) == g[0])

    starts = [i for i in range(len(ours) - len(guest) + 1)
              if all(same(g, o) for g, o in zip(guest, ours[i:i + len(guest)], strict=True))]
    assert len(starts) == 1, "\n".join(map(str, guest + ["--- trace-cmd report of kpsdk's file:"] + ours))


def test_a_record_longer_than_a_page_is_cut_or_dropped(tmp_path: Path) -> None:
    """An entry lives in one ring-buffer page: three 4000-byte strings are cut to share it (each
    a prefix of its value), and a record whose fixed part alone is larger (64 u64[64] arrays) is
    dropped, as the kernel's ring buffer drops an event it cannot reserve; the rest are intact."""
    strings = _record("p:big f a=+0(%ax):string b=+0(%bx):string c=+0(%cx):string", 1.0, 0, 5, "sh",
                      a="a" * 4000, b="b" * 4000, c="c" * 10)
    wide_def = "p:wide f " + " ".join(f"v{i}=+0(%ax):u64[64]" for i in range(64))
    wide = _record(wide_def, 1.5, 0, 5, "sh", **{f"v{i}": list(range(64)) for i in range(64)})
    after = _record("p:small f n=%ax:s32", 2.0, 0, 5, "sh", n=-7)
    path = tmp_path / "long.dat"
    with path.open("wb") as f:
        writer = make_writer("trace-dat", f, WriterContext())
        for r in (strings, wide, after):
            writer.write(r)
        writer.close()
    got = report(path)
    assert [m["event"] for m in got] == ["big", "small"]
    cut = re.fullmatch(r'\(\w+\) a="(a*)" b="(b*)" c="(c*)"', got[0]["body"])
    assert cut is not None, got[0]["body"]
    assert 1000 < len(cut[1]) < 4000 and 1000 < len(cut[2]) < 4000 and cut[3] == "c" * 10
    assert got[1]["body"].endswith(" n=-7")
