"""Bad input a user types: each becomes a kpsdk error naming the input, never a raw exception.

One test per way in (probe fields, locations, filters, timeouts, fetches, the CLI);
tests/test_fuzz_inputs.py throws generated input at the same doors.
"""

from __future__ import annotations

import errno
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.probe import location_fields
from kpsdk.session import check_timeout
from kpsdk.targets.unicorn.running import USEC_MAX, timeout_usec
from kpsdk.trace.filter import MAX_FILTER_DEPTH, MAX_FILTER_LEN, FilterError, parse_filter

runner = CliRunner()
PROG = str(fixtures.path("x86_64"))


@pytest.fixture
def s() -> Iterator[kpsdk.Session]:
    session = kpsdk.open(f"elf:{PROG}")
    yield session
    session.close()


def nothing(*_: object) -> int:
    return 0


# -- 1. probe fields ---------------------------------------------------------------------------------------


WRONG_TYPES = [
    ("Kprobe", {"symbol_name": "add", "offset": "4"}, "offset"),
    ("Kprobe", {"addr": True}, "addr"),
    ("Kprobe", {"addr": "0x401000"}, "addr"),
    ("Kprobe", {"symbol_name": 5}, "symbol_name"),
    ("Kprobe", {"symbol_name": "add", "pre_handler": 5}, "pre_handler"),
    ("Kprobe", {"symbol_name": "add", "post_handler": "print"}, "post_handler"),
    ("Kprobe", {"symbol_name": "add", "flags": "x"}, "flags"),
    ("Kretprobe", {"symbol_name": "add", "maxactive": "3"}, "maxactive"),
    ("Kretprobe", {"symbol_name": "add", "data_size": 1.5}, "data_size"),
    ("Kretprobe", {"symbol_name": "add", "entry_handler": 1}, "entry_handler"),
    ("Watchpoint", {"symbol_name": "counter", "length": "4"}, "length"),
    ("Watchpoint", {"symbol_name": "counter", "length": 4, "type": 5}, "type"),
    ("Watchpoint", {"symbol_name": "counter", "length": 4, "priority": "x"}, "priority"),
    ("Watchpoint", {"symbol_name": "counter", "length": 4, "strict": "no"}, "strict"),
    ("Uprobe", {"path": 5, "offset": 0}, "path"),
    ("Uprobe", {"path": PROG, "offset": True}, "offset"),
    ("Uprobe", {"path": PROG, "offset": 0x1F9, "pre_handler": 3}, "pre_handler"),
    ("Uretprobe", {"path": PROG, "offset": 0x1F9, "maxactive": "x"}, "maxactive"),
]


@pytest.mark.parametrize(("cls", "fields", "field"), WRONG_TYPES, ids=[f"{c}-{f}" for c, _, f in WRONG_TYPES])
def test_a_field_of_the_wrong_type_is_einval_naming_it(cls: str, fields: dict[str, Any], field: str) -> None:
    with pytest.raises(kpsdk.FieldTypeError) as info:
        getattr(kpsdk, cls)(**fields)
    e = info.value
    assert e.errno == errno.EINVAL and isinstance(e, TypeError) and isinstance(e, kpsdk.KprobeError)
    assert e.field == field and f"field {field}=" in str(e)


def test_a_field_set_after_construction_is_checked_at_registration(s: kpsdk.Session) -> None:
    kp = kpsdk.Kprobe(symbol_name="add")
    kp.offset = "4"  # type: ignore[assignment]
    with pytest.raises(kpsdk.FieldTypeError, match="offset='4'"):
        s.register_kprobe(kp)
    wp = kpsdk.Watchpoint(symbol_name="counter", length=4)
    wp.length = 4.0  # type: ignore[assignment]
    with pytest.raises(kpsdk.FieldTypeError, match="length=4.0"):
        s.register_watchpoint(wp)
    assert not kp.registered and not wp.registered and s.list() == ""


@pytest.mark.parametrize("make", [
    lambda: kpsdk.Kprobe(addr=2**70),
    lambda: kpsdk.Kprobe(addr=-1),
    lambda: kpsdk.Kretprobe(addr=2**64),
    lambda: kpsdk.Watchpoint(addr=2**70, length=4),
    lambda: kpsdk.Watchpoint(addr=2**64 - 2, length=8, strict=False),
], ids=["kprobe-huge", "kprobe-negative", "kretprobe-2**64", "watchpoint-huge", "watchpoint-wraps"])
def test_an_address_beyond_the_word_is_einval(s: kpsdk.Session, make: Callable[[], Any]) -> None:
    with pytest.raises(kpsdk.KprobeError, match="outside x86_64's 64-bit address space") as info:
        s.register(make())
    assert info.value.errno == errno.EINVAL


def test_a_32_bit_word_bounds_addresses_too() -> None:
    with kpsdk.open(f"elf:{fixtures.path('i386')}") as s:
        with pytest.raises(kpsdk.KprobeError, match="outside i386's 32-bit address space"):
            s.register_kprobe(kpsdk.Kprobe(addr=2**32 + s.symbols.resolve("add")))


def test_kretprobe_data_size_has_the_kernels_limit(s: kpsdk.Session) -> None:
    for size in (kpsdk.KRETPROBE_MAX_DATA_SIZE + 1, 2**40, 2**80):
        with pytest.raises(kpsdk.KprobeError, match="data_size") as info:
            s.register_kretprobe(kpsdk.Kretprobe(symbol_name="add", data_size=size))
        assert info.value.errno == errno.E2BIG
    rp = kpsdk.Kretprobe(symbol_name="add", data_size=kpsdk.KRETPROBE_MAX_DATA_SIZE)
    s.register_kretprobe(rp)
    assert rp.registered


def test_a_uretprobe_pool_is_checked_when_it_registers_not_when_a_session_runs_it() -> None:
    for fields, err in (({"maxactive": 2**80}, errno.E2BIG), ({"data_size": -1}, errno.EINVAL)):
        rp = kpsdk.Uretprobe(PROG, 0x1F9, **fields)
        try:  # no session runs the file: only registration can tell
            with pytest.raises(kpsdk.KprobeError) as info:
                kpsdk.register_uprobe(rp)
            assert info.value.errno == err
        finally:
            if rp.registered:
                kpsdk.unregister_uprobe(rp)


def test_a_uprobe_path_with_a_nul_byte_is_einval() -> None:
    for make in (lambda: kpsdk.Uprobe("prog\0", 0), lambda: kpsdk.Uprobe.parse("prog\0:add")):
        with pytest.raises(kpsdk.LocationError, match="NUL byte") as info:
            make()
        assert info.value.errno == errno.EINVAL


# -- locations -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "  ", "add+", "add+0x", "+", "0x", "9" * 5000, "add+zz", True, 4.0, None, [1]])
def test_a_location_that_does_not_parse_is_a_location_error(text: Any) -> None:
    with pytest.raises(kpsdk.LocationError) as info:
        location_fields(text)
    assert info.value.errno == errno.EINVAL and isinstance(info.value, ValueError)
    assert len(str(info.value)) < 200  # names the input without copying 5000 digits


def test_locations_that_parse() -> None:
    assert location_fields("add") == {"symbol_name": "add", "offset": 0}
    assert location_fields(" add + 0x4 ") == {"symbol_name": "add", "offset": 4}
    assert location_fields("0x401000") == {"addr": 0x401000}
    assert location_fields(0x401000) == {"addr": 0x401000}


def test_the_decorator_refuses_a_trailing_plus(s: kpsdk.Session) -> None:
    with pytest.raises(kpsdk.LocationError, match="offset after '\\+' is missing"):
        s.kprobe("add+")(nothing)
    assert s.list() == ""


# -- 2. filters ---------------------------------------------------------------------------------------


def test_deep_nesting_is_refused_at_parse_time_pointing_at_the_level() -> None:
    for expr in ("(" * 330 + "a == 1" + ")" * 330, "!" * 988 + "a == 1"):
        with pytest.raises(FilterError, match=f"deeper than {MAX_FILTER_DEPTH}") as info:
            parse_filter(expr)
        assert info.value.column == MAX_FILTER_DEPTH


def test_nesting_up_to_the_limit_works() -> None:
    f = parse_filter("(" * MAX_FILTER_DEPTH + "a == 1" + ")" * MAX_FILTER_DEPTH)
    assert f({"a": 1}) and not f({"a": 2})
    g = parse_filter("!" * MAX_FILTER_DEPTH + "a == 1")  # an even number of '!'
    assert g({"a": 1}) and not g({"a": 2})


def test_a_filter_longer_than_the_kernels_page_is_refused(s: kpsdk.Session) -> None:
    expr = " && ".join(["a == 2"] * 995)
    with pytest.raises(FilterError, match=f"at most {MAX_FILTER_LEN}"):
        s.trace("p add a=%di", filter=expr)
    assert s.list() == ""


def at_depth(depth: int, fn: Callable[[], bool]) -> bool:
    """``fn()`` called ``depth`` frames down, as a hit deep in a handler's own stack is."""
    return fn() if depth == 0 else at_depth(depth - 1, fn)


def test_a_long_chain_costs_no_stack_at_a_hit() -> None:
    terms = (MAX_FILTER_LEN + 2) // len("a==1&&")
    chain = parse_filter("&&".join(["a==1"] * terms))
    either = parse_filter("||".join(["a==9"] * (terms - 1)) + "||a==1")
    assert len(chain.expr) <= MAX_FILTER_LEN and len(either.expr) <= MAX_FILTER_LEN
    room = sys.getrecursionlimit() - 2 * terms // 3  # fewer frames left than the chain has terms
    assert at_depth(room, lambda: chain({"a": 1}) and not chain({"a": 2}))
    assert at_depth(room, lambda: either({"a": 1}) and not either({"a": 2}))


def test_a_number_beyond_64_bits_is_an_error_not_a_string() -> None:
    with pytest.raises(FilterError, match="out of range"):
        parse_filter("a == " + "9" * 30)
    assert parse_filter("name == abc12")({"name": "abc12"})


# -- 4. timeouts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, -1, -math.inf, 0, 0.0, "5", True, [1]])
def test_a_timeout_that_means_nothing_is_an_argument_error(s: kpsdk.Session, bad: Any) -> None:
    with pytest.raises(kpsdk.ArgumentError, match="timeout=") as info:
        s.run(timeout=bad)
    assert isinstance(info.value, ValueError)
    assert s.run(timeout=30) == 0  # nothing ran before the error: the program still runs to its end


@pytest.mark.parametrize("none", [None, math.inf, 10**400])
def test_inf_and_beyond_any_float_mean_no_limit(s: kpsdk.Session, none: Any) -> None:
    assert check_timeout(none) is None
    assert s.run(timeout=none) == 0


def test_unicorn_gets_a_timeout_it_can_hold() -> None:
    assert timeout_usec(None) == 0  # Unicorn's "no limit"
    assert timeout_usec(1e-9) == 1  # was int(1e-3) == 0: no limit
    assert timeout_usec(2.5) == 2_500_000
    assert timeout_usec(1e300) == USEC_MAX  # ctypes would have wrapped it


# -- 5. fetches at a return --------------------------------------------------------------------------


def test_an_unreadable_arg_at_a_return_prints_fault_as_at_an_entry(s: kpsdk.Session) -> None:
    ret = s.trace("r:ret add $arg2048 a=$arg1")
    entry = s.trace("p:ent add $arg2048")
    assert s.run(timeout=30) == 0
    assert [r.fields for r in ret.records] == [{"arg1": None, "a": 2}]
    assert [r.fields for r in entry.records] == [{"arg1": None}]


# -- arguments of other API calls ------------------------------------------------------------------


@pytest.mark.parametrize("call", [
    lambda s: s.register_kprobe(object()),
    lambda s: s.register_kprobes(5),
    lambda s: s.unregister_kprobes("add"),
    lambda s: s.call("add", "2", 3),
    lambda s: s.call("add", 2, 3, restype="double"),
    lambda s: s.call(1.5),
    lambda s: s.trace(5),
    lambda s: s.trace([b"p add"]),
    lambda s: s.trace("p add", filter=5),
    lambda s: s.trace("p add", sink=5),
    lambda s: kpsdk.unregister_uprobe(5),
    lambda s: kpsdk.register_uretprobe(kpsdk.Uprobe(PROG, 0x1F9)),
    lambda s: kpsdk.open(5),
    lambda s: kpsdk.open(f"elf:{PROG}\0"),
    lambda s: s.read_memory("add", 4),
    lambda s: s.read_memory(-5, 4),
    lambda s: s.read_memory(1 << 64, 4),
    lambda s: s.read_memory(s.symbols.resolve("add"), -1),
    lambda s: s.read_memory(s.symbols.resolve("add"), 1 << 34),
    lambda s: s.read_memory(s.symbols.resolve("add"), 4.0),
    lambda s: s.write_memory(s.symbols.resolve("counter"), "text"),
    lambda s: s.write_memory(s.symbols.resolve("counter"), 5),
    lambda s: s.read_string(None),
    lambda s: s.read_int(s.symbols.resolve("counter"), -1),
    lambda s: s.read_int(s.symbols.resolve("counter"), 4, signed="yes"),
    lambda s: s.backtrace(limit="all"),
    lambda s: s.real_return_address("0x10"),
    lambda s: s.symbols.lookup("add"),
    lambda s: s.symbols.format(None),
    lambda s: s.symbols.containing(1.5),
    lambda s: s.symbols.get(5),
    lambda s: s.symbols.resolve(None),
    lambda s: s.symbols.matching(b"a*"),
    lambda s: s.symbols.matching("a*", kind=1),
], ids=["register-object", "batch-int", "batch-str", "call-str-arg", "call-restype", "call-float", "trace-int",
        "trace-bytes", "filter-int", "sink-int", "unregister-uprobe-int", "uretprobe-uprobe", "open-int", "open-nul",
        "read-name", "read-negative", "read-beyond-word", "read-size-negative", "read-size-huge", "read-size-float",
        "write-str", "write-int", "string-none", "int-size-negative", "int-signed-str", "backtrace-limit-str",
        "real-return-str", "lookup-name", "format-none", "containing-float", "get-int", "resolve-none",
        "matching-bytes", "matching-kind-int"])
def test_an_argument_of_the_wrong_kind_is_an_argument_error(s: kpsdk.Session, call: Callable[[Any], Any]) -> None:
    with pytest.raises(kpsdk.ArgumentError) as info:
        call(s)
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert s.list() == "" and s.run(timeout=30) == 0  # nothing registered, nothing half-run


def test_memory_that_is_not_there_names_its_address_not_a_pc(s: kpsdk.Session) -> None:
    with pytest.raises(kpsdk.TargetFault) as info:
        s.read_memory(0x10, 4)
    assert info.value.address == 0x10 and info.value.pc is None
    assert str(info.value).endswith(" at 0x10") and "pc=" not in str(info.value)  # no symbol holds it
    assert s.symbols.lookup(-1) is None and s.symbols.format(-1) == "-0x1" and 5 not in s.symbols
    counter = s.symbols.resolve("counter")
    assert s.read_int(counter, 0) == s.read_int(counter) == s.read_int(counter, None)  # 0 and None: a word
    assert s.read_int(counter, 4, signed=1) == s.read_int(counter, 4, signed=True)


@pytest.mark.parametrize(("text", "offset"), [("0x401000", None), ("add+0x4", 4), ("add+12", 12), ("add+0", 0),
                                              ("add-4", -4), ("add + 0X10", 16)])
def test_address_expressions_read_numbers_as_locations_do(s: kpsdk.Session, text: str, offset: int | None) -> None:
    """``0x`` hex, else decimal (as ``kpsdk.probe.location_fields``), a number alone as an address."""
    add = s.symbols.get("add").address
    assert s.symbols.resolve(text) == (0x401000 if offset is None else add + offset)


@pytest.mark.parametrize("text", ["add+09", "add+010", "+08", "add+", "0x", "add+\u0663", "0x10+4", "", "add+0xg"])
def test_an_address_expression_that_does_not_parse_is_a_symbol_error(s: kpsdk.Session, text: str) -> None:
    with pytest.raises(kpsdk.SymbolError, match="cannot parse address expression"):
        s.symbols.resolve(text)


# -- 3 and 6. the CLI ---------------------------------------------------------------------------------

CLI_BAD = [
    (["probe", "x86_64", "--kprobe", ""], 2),
    (["probe", "x86_64", "--kprobe", "add+"], 2),
    (["probe", "x86_64", "--kprobe", "add+0x"], 2),
    (["probe", "x86_64", "--kretprobe", "fact+"], 2),
    (["probe", "x86_64", "--kprobe", "0x" + "f" * 40], 1),
    (["probe", "x86_64", "--kprobe", "add", "--string-arg", "-1"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--string-arg", "99999"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--string-arg", "0"], 2),  # arguments count from 1, as $argN
    (["probe", "x86_64", "--kprobe", "add", "--regs", "arg0"], 2),
    (["probe", "x86_64", "--kretprobe", "add", *[a for n in range(1, 18) for a in ("--string-arg", str(n))]], 2),
    (["probe", "x86_64", "--kprobe", "add", "--regs", "nosuch"], 1),
    (["probe", "x86_64", "--kprobe", "add", "--regs", "arg99999"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--regs", "arg" + "9" * 5000], 2),
    (["probe", "x86_64", "--kprobe", "add", "--call", "add '2"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--call", "add " + "9" * 5000], 2),
    (["probe", "x86_64", "--kprobe", "add", "--timeout", "nan"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--timeout", "-1"], 2),
    (["probe", "x86_64", "--kprobe", "add", "--timeout", "0"], 2),
    (["probe", "x86_64", "--uprobe", "\0:add"], 1),
    (["probe", "\0", "--kprobe", "add"], 2),
    (["list", "\0"], 2),
    (["disasm", "x86_64", ""], 1),
    (["disasm", "prog\0", "add"], 2),
    (["trace", "x86_64", "-e", ""], 1),
    (["trace", "x86_64", "-e", "p add", "--call", "add '2"], 2),
    (["trace", "x86_64", "-e", "p add", "--duration", "nan"], 2),
    (["trace", "x86_64", "-e", "p add", "--duration", "-5"], 2),
    (["trace", "x86_64", "-e", "p add a=%di", "--filter", "(" * 330 + "a==1" + ")" * 330], 1),
    (["trace", "x86_64", "-e", "p add a=%di", "--filter", "!" * 988 + "a==1"], 1),
    (["trace", "x86_64", "-e", "p " + "9" * 5000], 1),
]


def error_lines(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize(("argv", "code"), CLI_BAD, ids=[" ".join(a)[:60] for a, _ in CLI_BAD])
def test_the_cli_answers_bad_input_with_one_line(argv: list[str], code: int) -> None:
    result = runner.invoke(app, argv)
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if code == 1:
        assert len(error_lines(result)) == 1 and len(error_lines(result)[0]) < 1000, result.stderr


def test_an_unreadable_register_argument_prints_fault() -> None:
    result = runner.invoke(app, ["probe", "x86_64", "--kprobe", "add", "--regs", "arg1,arg2048"])
    assert result.exit_code == 0, result.output
    assert "arg1=0x2 arg2048=(fault)" in result.stdout


def test_cli_inf_is_no_limit() -> None:
    for argv in (["probe", "x86_64", "--kprobe", "add", "--timeout", "inf"],
                 ["trace", "x86_64", "-e", "p add", "--duration", "inf"]):
        result = runner.invoke(app, argv)
        assert result.exit_code == 0, result.output
