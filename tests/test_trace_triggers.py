"""Hist and stacktrace triggers, ``--stack``, ``--functions`` and ``--lhist`` on Unicorn.

The ground truth is the fixture program itself: ``main`` prints ``name=value`` for each
``put(name, value)`` it makes (kpsdk/fixtures/src/prog.c), ``fact(5)`` recurses down to
``fact(1)`` returning ``n!``, and the call chain of each ``fact`` call is read from the
program's own code (the ``call fact`` instructions, decoded with capstone).  The kernel's
side of the same triggers is tests/test_trace_triggers_kernel.py.
"""

from __future__ import annotations

import math
import re
from typing import Any

import capstone
import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.cli import app
from kpsdk.errors import TriggerError
from kpsdk.trace.functions import MAX_FUNCTIONS
from kpsdk.trace.histtrigger import log2_key

PROG = fixtures.path("x86_64")
runner = CliRunner()


def printed(arch: str = "x86_64") -> list[tuple[str, int]]:
    """``(name, value)`` of each line the program prints when it runs (its own report)."""
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        s.run(timeout=10)
        out = s.console
    return [(n, int(v)) for n, v in re.findall(r"^(\w+)=(-?\d+)$", out, re.M)]


def trace_hists(arch: str, definitions: list[str], triggers: list[str]) -> Any:
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        trace = s.trace(definitions, triggers=triggers)
        s.run(timeout=10)
    return trace


def entry_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{ ")]


@pytest.mark.parametrize("arch", ["x86_64", "riscv64", "arm"])
def test_hist_of_put_is_what_the_program_printed(arch: str) -> None:
    args = {"x86_64": ("%di", "%si"), "riscv64": ("%a0", "%a1"), "arm": ("%r0", "%r1")}[arch]
    trace = trace_hists(arch, [f"p:put put name=+0({args[0]}):string v={args[1]}:s64"],
                        ["put:hist:keys=name:vals=hitcount,v:sort=v.descending"])
    assert trace.hist_text().startswith("==> events/kprobes/put/hist <==\n# event histogram\n")
    text = trace.hists()[0][1].render()
    report = printed(arch)
    expected = [f"{{ name: {n:<50} }} hitcount: {1:>10}  v: {v & (2**64 - 1):>10}"
                for n, v in sorted(report, key=lambda p: -p[1])]
    assert entry_lines(text) == expected
    assert text.startswith("# event histogram\n#\n# trigger info: "
                           "hist:keys=name:vals=hitcount,v:sort=v.descending:size=2048 [active]\n#\n\n")
    assert text.endswith(f"\nTotals:\n    Hits: {len(report)}\n    Entries: {len(report)}\n    Dropped: 0\n")


def test_hist_keys_log2_buckets_execname_and_sums_of_fact() -> None:
    """fact(5) recurses to fact(1): each n once, returning n!; keys by the kernel's modifiers."""
    trace = trace_hists("x86_64", ["r:fact fact n=$arg1:s64 ret=$retval:s64"], [
        "fact:hist:keys=n:vals=ret:sort=n.descending",
        "fact:hist:keys=n.log2:vals=hitcount,ret:sort=n",
        "fact:hist:keys=common_pid.execname,n.buckets=2:sort=n,hitcount",
        "fact:hist:keys=n.hex:vals=ret.hex if n >= 3",
    ])
    by_n, by_log2, by_bucket, hexed = [entry_lines(h.render()) for _, h in trace.hists()]
    ns = range(5, 0, -1)
    assert by_n == [f"{{ n: {n:>10} }} hitcount: {1:>10}  ret: {math.factorial(n):>10}" for n in ns]
    # ilog2(roundup_pow_of_two(n)): the exponent of the next power of two, 0 for 1
    expo = {n: 0 if n <= 1 else math.ceil(math.log2(n)) for n in ns}
    want = {e: (sum(1 for n in ns if expo[n] == e), sum(math.factorial(n) for n in ns if expo[n] == e))
            for e in sorted(set(expo.values()))}
    assert by_log2 == [f"{{ n: ~ 2^{e:<2} }} hitcount: {c:>10}  ret: {r:>10}" for e, (c, r) in want.items()]
    comm = "prog-x86_64.elf"
    buckets = {b: sum(1 for n in ns if n // 2 * 2 == b) for b in sorted({n // 2 * 2 for n in ns})}
    pid = 1000  # the pid kpsdk's Linux layer tells the program (tests/test_linux_programs.py: its getpid())
    assert by_bucket == [f"{{ common_pid: {comm:<16}[{pid:>10}], n: ~ {b}-{b + 1} }} hitcount: {c:>10}"
                         for b, c in buckets.items()]
    assert sorted(hexed) == sorted(f"{{ n: {n:x} }} hitcount: {1:>10}  ret: {math.factorial(n):>10x}"
                                   for n in ns if n >= 3)
    assert "if n >= 3 [active]" in trace.hists()[3][1].render()


def test_hist_sym_keys_and_a_full_table_drops() -> None:
    fact = next(s for s in load_elf(PROG).symbols if s.name == "fact")
    trace = trace_hists("x86_64", ["p:f fact n=%di:s64", "r:fr fact"], [
        "f:hist:keys=__probe_ip.sym,common_cpu:vals=hitcount",
        "fr:hist:keys=__probe_ret_ip.sym-offset:sort=hitcount.descending",
    ])
    (_, by_ip), (_, by_ret) = trace.hists()
    assert entry_lines(by_ip.render()) == [
        f"{{ __probe_ip: [{fact.address:x}] {'fact':<45}, common_cpu: {0:>10} }} hitcount: {5:>10}"]
    # four returns into fact itself (after its call), one into main
    lines = entry_lines(by_ret.render())
    assert [re.sub(r"\[\w+\] ", "", line).split("}")[1] for line in lines] == \
        [f" hitcount: {4:>10}", f" hitcount: {1:>10}"]
    assert "fact+0x" in lines[0] and "main+0x" in lines[1]
    # size=100 rounds up to 128, the smallest table: inc's 100 distinct arguments fit
    with kpsdk.open(f"elf:{PROG}") as s:
        trace = s.trace(["p:i inc x=%di:s32"], triggers=["i:hist:keys=x:size=100"])
        s.run(timeout=10)
    (_, h), = trace.hists()
    assert ":size=128 [active]" in h.render()
    # main's loop(100) calls inc(0..99), twice(5) calls inc(10)
    assert (h.hits, len(h.entries), h.dropped) == (101, 100, 0)


def test_a_full_table_drops_new_keys() -> None:
    """A hit on a new key once the table holds size entries is Dropped (counted in Hits)."""
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.grammar import Parser
    from kpsdk.trace.histtrigger import HistTrigger, event_fields, parse_hist

    definition = Parser(kpsdk.get_registry().arch("x86_64")).parse("p:i inc x=%di:s32")
    h = HistTrigger(parse_hist("keys=x:size=128", event_fields(definition, 8)))
    for x in [*range(200), 5]:
        h.hit(TraceRecord("i", "kprobes", "p", 0.0, 0, "inc+0x0/0x4", {"x": x}))
    text = h.render()
    assert (h.hits, len(h.entries), h.dropped) == (201, 128, 72)
    assert text.endswith("Totals:\n    Hits: 201\n    Entries: 128\n    Dropped: 72\n")


def call_sites(callee: str) -> dict[str, set[int]]:
    """The return addresses of each ``call callee`` in the program, by calling function: the
    program's own code, decoded here with capstone."""
    image = load_elf(PROG)
    funcs = [s for s in image.symbols if s.kind == "func" and s.size]
    target = next(s.address for s in funcs if s.name == callee)
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    out: dict[str, set[int]] = {}
    for sym in funcs:
        seg = next(g for g in image.segments if g.vaddr <= sym.address < g.vaddr + len(g.data))
        code = seg.data[sym.address - seg.vaddr:sym.address - seg.vaddr + sym.size]
        for insn in md.disasm(code, sym.address):
            if insn.mnemonic == "call" and insn.op_str == hex(target):
                out.setdefault(sym.name, set()).add(insn.address + insn.size)
    return out


def test_stacktrace_trigger_follows_the_recursion_through_return_probes() -> None:
    """At fact(n)'s entry the stack is fact, (5-n) returns into fact, one into main, then _start;
    a return probe on fact (its trampoline in the stack) changes nothing."""
    sites = call_sites("fact")
    with kpsdk.open(f"elf:{PROG}") as s:
        symbols = s.symbols
        trace = s.trace(["p:f fact n=%di:s64", "r:fr fact"], triggers=["f:stacktrace:4"])
        s.run(timeout=10)
    fact_hits = [r for r in trace.records if r.event == "f"]
    assert [r.stack is not None for r in fact_hits] == [True] * 4 + [False]  # stacktrace:4
    for r in fact_hits[:4]:
        n = int(r.fields["n"])
        frames = list(r.stack or ())
        assert frames[0] == f"fact+0x0/{symbols.lookup(symbols.resolve('fact'))[2]:#x}"
        inner = [symbols.resolve(f.split("/")[0]) for f in frames[1:1 + 5 - n]]
        assert set(inner) <= sites["fact"] and len(inner) == 5 - n, frames
        assert symbols.resolve(frames[1 + 5 - n].split("/")[0]) in sites["main"], frames
        assert frames[2 + 5 - n].startswith("_start+"), frames
        assert len(frames) == 3 + 5 - n


def test_cli_stack_prints_ftraces_stack_entry_after_each_line() -> None:
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact", "--stack", "--count", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "f: (fact+0x0/" in line)
    prefix = lines[at].split("f: (fact")[0]
    assert lines[at + 1] == prefix + "<stack trace>"
    assert lines[at + 2].startswith(" => fact+0x0/") and lines[at + 3].startswith(" => main+0x")


def test_a_stacktrace_entry_follows_its_event_filtered_or_not() -> None:
    """As the kernel writes them (tests/test_trace_triggers_kernel.py): after the event's line,
    one entry per trigger that fired."""
    for triggers, entries in ((["f:stacktrace:1"], 1), (["f:stacktrace:1 if n > 0"], 1),
                              (["f:stacktrace:1", "f:stacktrace if n > 4"], 2)):
        args = [a for t in triggers for a in ("--trigger", t)]
        result = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact n=%di:s64", *args, "--no-prefix",
                                     "--count", "1"])
        assert result.exit_code == 0, result.output
        lines = [line for line in result.stdout.splitlines() if not line.startswith(" => ")]
        assert lines == ["f: (fact+0x0/0x2b) n=5", *["<stack trace>"] * entries], result.stdout


def test_cli_trigger_prints_the_hist_file_and_refuses_like_the_kernel() -> None:
    ok = runner.invoke(app, ["trace", "x86_64", "-e", "p:put put name=+0(%di):string v=%si:s64",
                             "--trigger", "put:hist:keys=v.log2:vals=hitcount", "--no-prefix"])
    assert ok.exit_code == 0, ok.output
    assert "# trigger info: hist:keys=v.log2:vals=hitcount:sort=hitcount:size=2048 [active]" in ok.stdout
    bad = runner.invoke(app, ["trace", "x86_64", "-e", "p:put put v=%si:s64",
                              "--trigger", "put:hist:keys=v:sort=v.up"])
    assert bad.exit_code == 1
    assert bad.stderr.splitlines()[-3:] == ["hist:kprobes:put: error: Invalid sort modifier",
                                            "  Command: hist:keys=v:sort=v.up",
                                            "                              ^"]
    nothing = runner.invoke(app, ["trace", "x86_64", "-e", "p:put put", "--trigger", "get:stacktrace"])
    assert nothing.exit_code == 1 and "no event 'get'" in nothing.stderr


@pytest.mark.parametrize(("trigger", "code", "word"), [
    ("hist:keys=nosuch", "FIELD_NOT_FOUND", "nosuch"),
    ("hist:keys=n.bogus", "BAD_FIELD_MODIFIER", "bogus"),
    ("hist:keys=n.execname", "BAD_FIELD_MODIFIER", "execname"),
    ("hist:keys=n:vals=n.log2", "BAD_FIELD_MODIFIER", "n.log2"),
    ("hist:keys=n.buckets=0", "BAD_FIELD_MODIFIER", "buckets=0"),
    ("hist:keys=n:sort=nosuch", "INVALID_SORT_FIELD", "nosuch"),
    ("hist:keys=n:sort=n,hitcount,n", "TOO_MANY_SORT_FIELDS", "sort="),
    ("hist:keys=n:sort=", "EMPTY_ASSIGNMENT", "sort="),
    ("hist:keys=n:sort=,n", "EMPTY_SORT_FIELD", "sort="),
    ("hist:vals=n", "EINVAL", None),
    ("hist:keys=n,n,n,n", "EINVAL", None),
    ("hist:keys=n:vals=n,n,n", "EINVAL", None),
    ("hist:keys=n:size=64", "EINVAL", None),
    ("hist:keys=n:bogus", "EINVAL", None),
    ("hist:keys=n:onmax($x).save(n)", "UNSUPPORTED", None),
    ("hist:keys=n+1", "UNSUPPORTED", None),
    ("traceon", "UNSUPPORTED", None),
    ("stacktrace:x", "EINVAL", None),
    ("nosuch", "EINVAL", None),
])
def test_a_bad_trigger_is_refused_as_the_kernel_refuses_it(trigger: str, code: str, word: str | None) -> None:
    with kpsdk.open(f"elf:{PROG}") as s:
        with pytest.raises(TriggerError) as info:
            s.trace(["p:f fact n=%di:s64"], triggers=[f"f:{trigger}"])
        assert s.list() == ""  # nothing left registered
    err = info.value
    assert err.code == code
    if word is not None:
        # the kernel's err_pos: the first occurrence of the word in "hist:..." gets the caret
        assert err.column == err.command.find(word)
        assert err.error_log is not None and err.error_log.splitlines()[1] == f"  Command: {err.command}"


def test_functions_glob_one_event_per_function() -> None:
    image = load_elf(PROG)
    names = sorted({s.name for s in image.symbols if s.kind == "func" and re.fullmatch(r"[a-f].*", s.name)})
    result = runner.invoke(app, ["trace", "x86_64", "--functions", "[a-f]*", "-e", "p $func", "--no-prefix",
                                 "--profile"])
    assert result.exit_code == 0, result.output
    events = {line.split(":")[0] for line in result.stdout.splitlines() if ": (" in line}
    # every function the program calls shows; events named as the kernel names them
    assert events <= {f"p_{n}_0" for n in names}
    assert {"p_add_0", "p_bump_0", "p_check_0", "p_fact_0", "p_escape_0", "p_escapes_0"} <= events
    assert f"--functions [a-f]*: {len(names)} functions" in result.stderr  # more than one


@pytest.mark.parametrize(("args", "message"), [
    (["--functions", "zz*", "-e", "p $func"], "no function in the target matches"),
    (["--functions", "a*", "-e", "p:named $func"], "an event name would repeat"),
    (["--functions", "a*", "-e", "p add"], "no definition probes $func"),
])
def test_functions_errors(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["trace", "x86_64", *args])
    assert result.exit_code in (1, 2) and message in " ".join(result.stderr.split()), result.output


def test_functions_limit_is_said_with_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import kpsdk.trace.functions as functions

    monkeypatch.setattr(functions, "MAX_FUNCTIONS", 3)
    result = runner.invoke(app, ["trace", "x86_64", "--functions", "*", "-e", "p $func"])
    assert result.exit_code == 1 and "at most 3" in result.stderr
    assert MAX_FUNCTIONS == 1000


def test_lhist_is_bpftraces_linear_histogram() -> None:
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:put put v=%si:s64", "--lhist", "v,0,10,5",
                                 "--no-prefix"])
    assert result.exit_code == 0, result.output
    values = [v for _, v in printed()]
    body = result.stdout.split("@v[put]:\n", 1)[1].splitlines()
    counts = {"[0, 5)": sum(0 <= v < 5 for v in values), "[5, 10)": sum(5 <= v < 10 for v in values),
              "[10, ...)": sum(v >= 10 for v in values)}
    assert [(line[:20].strip(), int(line[20:28])) for line in body[:3]] == list(counts.items())
    bad = runner.invoke(app, ["trace", "x86_64", "-e", "p:put put v=%si:s64", "--lhist", "v,10,0,1"])
    assert bad.exit_code == 2 and "MIN < MAX" in bad.stderr


def test_log2_key_is_the_kernels_ilog2_of_roundup() -> None:
    """The exponent of the next power of two; 0 and values above 2**63 (negative fields) are
    2^64, as the kernel prints a negative return value (tests/test_trace_triggers_kernel.py)."""
    for v in (1, 2, 3, 4, 5, 1023, 1024, 1025, 2**63):
        assert log2_key(v) == math.ceil(math.log2(v))
    for v in (0, 2**63 + 1, 2**64 - 2, 2**64 - 20):
        assert log2_key(v) == 64
    # a 32-bit arm kernel: 1UL << 32 is 0 there and ilog2(0) is -1 (the guest's own hist in
    # tests/test_trace_triggers_kernel.py); below the overflow, the exponent
    arm = kpsdk.get_registry().arch("arm").kernel_log2_overflow
    assert arm == 2**64 - 1
    for v in (0, 2**31 + 1, 2**32 - 2):
        assert log2_key(v, 4, arm) == 2**64 - 1
    for v in (1, 3, 2**31):
        assert log2_key(v, 4, arm) == math.ceil(math.log2(v))


# -- name=: one table shared by several events ------------------------------------------------------

def test_a_named_table_is_the_sum_of_its_events_own_tables() -> None:
    """``name=t`` on add and sub: one table, each event's hits in it (through its own filter),
    printed in full in both events' hist files; per event, the same trigger without a name
    counts that event alone, and the shared entries are their sums."""
    trace = trace_hists("x86_64", ["p:a add x=%di:s32", "p:s sub x=%di:s32"], [
        "a:hist:keys=x:vals=hitcount:sort=x", "s:hist:keys=x:vals=hitcount:sort=x",
        "a:hist:name=t:keys=x:vals=hitcount:sort=x", "s:hist:name=t:keys=x:vals=hitcount:sort=x if x > 0"])
    (_, own_a), (_, shared_a), (_, own_s), (_, shared_s) = trace.hists()
    sums: dict[tuple[int | str, ...], int] = {}
    for own in (own_a, own_s):
        for key, entry in own.entries.items():
            if own is own_a or int(key[0]) > 0:
                sums[key] = sums.get(key, 0) + entry.sums[0]
    assert {k: e.sums[0] for k, e in shared_a.entries.items()} == sums and len(sums) >= 2
    assert shared_a.hits == shared_s.hits == sum(sums.values())
    text_a, text_s = shared_a.render().splitlines(), shared_s.render().splitlines()
    assert text_a[2] == "# trigger info: hist:name=t:keys=x:vals=hitcount:sort=x:size=2048 [active]"
    assert text_s[2] == "# trigger info: hist:name=t:keys=x:vals=hitcount:sort=x:size=2048 if x > 0 [active]"
    assert text_a[3:] == text_s[3:]  # one table: the same entries and Totals in both files


@pytest.mark.parametrize(("triggers", "code", "column"), [
    (["a:hist:name=t:keys=x", "s:hist:name=t:keys=x.hex"], "NAMED_MISMATCH", 5),
    (["a:hist:name=t:keys=x", "s:hist:name=t:keys=x:vals=hitcount,x"], "NAMED_MISMATCH", 5),
    (["a:hist:name=t:keys=x", "s:hist:name=t:keys=x:sort=x"], "NAMED_MISMATCH", 5),
    (["a:hist:name=t:keys=x", "s:hist:name=t:keys=y"], "NAMED_MISMATCH", 5),  # s32 x, u64 y: other fields
    (["a:hist:keys=x if x > 1", "a:hist:keys=x if x > 1"], "TRIGGER_EEXIST", 0),
    (["a:hist:name=t:keys=x", "a:hist:name=t:keys=x"], "TRIGGER_EEXIST", 0),
])
def test_named_and_repeated_triggers_are_refused_as_the_kernel_refuses_them(
        triggers: list[str], code: str, column: int) -> None:
    with kpsdk.open(f"elf:{PROG}") as s, pytest.raises(TriggerError) as info:
        s.trace(["p:a add x=%di:s32", "p:s sub x=%di:s32 y=%si:u64"], triggers=triggers)
    assert info.value.code == code and info.value.column == column, info.value
    assert info.value.error_log is not None
    # and before the target starts, as kpsdk trace checks everything it can
    args = [a for t in triggers for a in ("--trigger", t)]
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:a add x=%di:s32", "-e", "p:s sub x=%di:s32 y=%si:u64",
                                 *args])
    assert result.exit_code == 1 and info.value.message in result.stderr, result.output


def test_a_repeated_trigger_with_pause_pauses_the_first() -> None:
    """``existing_hist_update_only``: the same trigger with ``:pause`` pauses the one there."""
    trace = trace_hists("x86_64", ["p:a add x=%di:s32"], ["a:hist:keys=x", "a:hist:keys=x:pause"])
    ((_, hist),) = trace.hists()
    assert hist.hits == 0 and hist.render().splitlines()[2].endswith(" [paused]")
