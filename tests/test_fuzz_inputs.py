"""Fuzz tests of every door a user's input comes in by (hypothesis; tests/test_bad_input.py has
the cases found so far, one by one).

Each property is the same promise: the input either works, or kpsdk raises one of its own errors
(a :class:`kpsdk.KpsdkError`, or an ``OSError`` carrying an errno) naming it; never another
exception type, never a failure later at every hit, never a hang (the profile's deadline), and
nothing left registered after an error.  The CLI answers with exit 0, one ``error:`` line and
exit 1, or a usage error (exit 2); never a traceback.

Inputs are built from pieces (a probe's fields, a definition's words, a command's options): each
piece has good values and bad ones, and an example takes the good value of every piece but at
most one (:func:`one_wrong`), so that most examples get past the first check to the deeper
ones.  ``--hypothesis-show-statistics`` shows how far they got.

Budget: see tests/conftest.py (``fuzz_examples``); ``nox -s fuzz`` runs these with the large
profile.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.binfmt.symbols import shown_name
from kpsdk.cli import app
from kpsdk.probe import location_fields
from kpsdk.trace.filter import Filter, FilterError, parse_filter
from kpsdk.trace.grammar import Parser, ProbeDef, TraceDefinitionError
from tests.conftest import fuzz_examples, require_tool

pytestmark = pytest.mark.fuzz

PROG = str(fixtures.path("x86_64"))
ARCHS = [kpsdk.get_registry().archs.get(name) for name in ("x86_64", "i386", "arm", "riscv64", "ppc64")]
FUNCTIONS = ["add", "sub", "fact", "main", "check", "put", "loop", "bump", "_start"]
#: a piece: its name, its good values, its bad ones
Piece = tuple[str, st.SearchStrategy[Any], st.SearchStrategy[Any]]
runner = CliRunner()


@pytest.fixture(scope="module")
def s() -> Iterator[kpsdk.Session]:
    """One Unicorn session for a whole property: every example must leave it as it found it."""
    session = kpsdk.open(f"elf:{PROG}")
    yield session
    session.close()


def expect_kpsdk_error(exc: BaseException) -> None:
    """``exc`` is one of kpsdk's own error types, what a bad input may raise."""
    if not (isinstance(exc, kpsdk.KpsdkError) or (isinstance(exc, OSError) and exc.errno is not None)):
        raise AssertionError(f"{type(exc).__name__} escaped: {exc}") from exc
    event(f"refused: {type(exc).__name__}")  # --hypothesis-show-statistics: how far inputs get


def assert_clean(s: kpsdk.Session) -> None:
    """Nothing left registered: no probe, no watchpoint, no trampoline."""
    assert s.list() == "", s.list()


def register_or_refuse(s: kpsdk.Session, register: Callable[[], Any]) -> Any:
    """What ``register()`` registered, or None when it raised one of kpsdk's errors and left
    nothing registered."""
    try:
        probe = register()
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        assert_clean(s)
        return None
    event("registered")
    return probe


@st.composite
def one_wrong(draw: st.DrawFn, pieces: list[Piece]) -> list[tuple[str, Any]]:
    """Every piece's good value, but (in about half the examples) one piece's bad value."""
    wrong = draw(st.one_of(st.none(), st.integers(0, len(pieces) - 1))) if pieces else None
    return [(name, draw(bad if i == wrong else good, label=name)) for i, (name, good, bad) in enumerate(pieces)]


def some_of(pieces: list[Piece], at_least: int = 0) -> st.SearchStrategy[list[tuple[str, Any]]]:
    """The first ``at_least`` pieces, and some of the others, in their order, with :func:`one_wrong`."""
    fixed, optional = pieces[:at_least], pieces[at_least:]
    chosen = st.lists(st.sampled_from(optional), unique=True, max_size=len(optional)) if optional else st.just([])
    return chosen.flatmap(lambda more: one_wrong(fixed + more))


# -- values -------------------------------------------------------------------------------------------

#: integers where the bugs live: around 0, the word sizes, beyond any word
edge_ints = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 2**64 - 1, 2**64, 2**70, 2**80, -2**64, 10**400]),
    st.integers(),
)
#: text a hostile user types: NUL bytes, line breaks, unicode, shell and gdb metacharacters, long runs
nasty_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="\0\n\r\t $`'\"\\;|&<>*?()[]{}!#%@+-=:/,.0x9aZé中\u202e", max_size=40),
    st.sampled_from(["", " ", "\0", "-1", "0x", "nan", "inf", "$(id)", "`id`", "; rm -rf /", "%n%s", "a" * 5000,
                     "9" * 5000, "../../../etc/passwd"]),
)
#: numbers as text, in every spelling a parser may meet
numbers = st.one_of(edge_ints.map(str), edge_ints.map(lambda n: hex(n) if n >= 0 else str(n)),
                    st.sampled_from(["0x", "08", "1e3", "-0", "0777", "1_000", " 7 "]))
#: values of any type, for any field
wrong_values = st.one_of(
    st.none(), st.booleans(), edge_ints, st.floats(), st.binary(max_size=8), nasty_text,
    st.lists(st.integers(), max_size=2), st.just(object()), st.just(print), st.just(len),
)


def nothing(*_: object) -> int:
    return 0


good_handlers = st.sampled_from([None, nothing])
instruction_addrs = st.sampled_from([0x4001F9, 0x4001FD, 0x400202, 0x400205, 0x4002C3, 0x4002C4, 0x40038C])
small_ints = st.integers(-8, 64)
bad_ints = st.one_of(edge_ints, wrong_values)


# -- probe fields ----------------------------------------------------------------------------------------

#: where a kprobe goes; the bad values of each piece include the wrong types, "both" and "neither"
BY_SYMBOL: list[Piece] = [
    ("symbol_name", st.sampled_from(FUNCTIONS), st.one_of(wrong_values, st.sampled_from(["nosuch", "counter", ""]))),
    ("offset", st.integers(0, 12), st.one_of(small_ints, bad_ints)),
    ("addr", st.none(), st.one_of(instruction_addrs, wrong_values)),
]
BY_ADDR: list[Piece] = [("addr", instruction_addrs, st.one_of(bad_ints, st.just(0x401500)))]
COMMON: list[Piece] = [
    ("flags", st.sampled_from([0, kpsdk.KPROBE_FLAG_DISABLED]), st.one_of(st.sampled_from([2**80, -1]), wrong_values)),
    ("fault_handler", good_handlers, wrong_values),
]
RETURN: list[Piece] = [
    ("handler", good_handlers, wrong_values), ("entry_handler", good_handlers, wrong_values),
    ("maxactive", st.integers(-2, 64), bad_ints), ("data_size", st.integers(0, 4096), bad_ints),
]
PROBE_HANDLERS: list[Piece] = [("pre_handler", good_handlers, wrong_values),
                               ("post_handler", good_handlers, wrong_values)]
WATCHED: list[Piece] = [
    ("symbol_name", st.just("counter"), st.one_of(wrong_values, st.sampled_from(FUNCTIONS))),
    ("length", st.sampled_from([1, 2, 4]), st.one_of(st.sampled_from([None, 3, 0, -1, 2**64]), wrong_values)),
]
WATCH_FIELDS: list[Piece] = [
    ("type", st.sampled_from(["w", "r", "rw"]), st.one_of(st.sampled_from(["x", "", "W"]), wrong_values)),
    ("handler", good_handlers, wrong_values), ("priority", st.integers(-3, 3), bad_ints),
    ("strict", st.booleans(), wrong_values), ("software", st.just(False), wrong_values),
    ("on_preempt", good_handlers, wrong_values), ("on_rearm", good_handlers, wrong_values),
]
IN_FILE: list[Piece] = [
    ("path", st.sampled_from([PROG, fixtures.path("x86_64")]),
     st.one_of(st.sampled_from(["/nonexistent", "/etc", "", "/dev/null"]), wrong_values)),
    ("offset", st.sampled_from([0x1F9, 0x1FD, 0x202]), st.one_of(st.sampled_from([0x1FA, 0, -1, 2**64]), bad_ints)),
]
PROBES: dict[str, tuple[list[list[Piece]], list[Piece]]] = {
    # class: (the ways to say where, required; its other fields, optional)
    "Kprobe": ([BY_SYMBOL[:1], BY_SYMBOL, BY_ADDR], COMMON + PROBE_HANDLERS),
    "Kretprobe": ([BY_SYMBOL[:1], BY_SYMBOL, BY_ADDR], COMMON + RETURN),
    "Watchpoint": ([WATCHED], COMMON + WATCH_FIELDS),
    "Uprobe": ([IN_FILE], COMMON + PROBE_HANDLERS),
    "Uretprobe": ([IN_FILE], COMMON + RETURN),
}


def probe_fields(cls: str) -> st.SearchStrategy[dict[str, Any]]:
    ways, others = PROBES[cls]
    return st.sampled_from(ways).flatmap(lambda where: some_of(where + others, at_least=len(where))).map(dict)


# -- the trace grammar and filters -------------------------------------------------------------------

identifiers = st.sampled_from(["ev", "my_probe", "a", "_x1", "grp"])
bad_identifiers = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{63,80}", fullmatch=True), nasty_text,
                            st.sampled_from(["1ev", "e-v", "", "common_pid"]))
heads = st.builds(lambda op, name: op + name, st.sampled_from(["p", "r", "r4"]),
                  st.one_of(st.just(""), identifiers.map(":".__add__),
                            st.tuples(identifiers, identifiers).map(lambda g: f":{g[0]}/{g[1]}")))
bad_heads = st.one_of(
    st.builds(lambda op, maxact, name: f"{op}{maxact}{name}", st.sampled_from(["p", "r", "-", "x", "P", ""]),
              st.one_of(st.just(""), numbers), st.one_of(st.just(""), bad_identifiers.map(":".__add__))),
    nasty_text)
places = st.one_of(st.sampled_from(FUNCTIONS), st.tuples(st.sampled_from(FUNCTIONS), st.integers(0, 12).map(str))
                   .map("+".join), st.sampled_from([f"{PROG}:0x1f9", f"{PROG}:0x202", "0x4001f9", "add%return"]))
#: where a kprobe goes, as the decorator and --kprobe take it
kprobe_places = st.one_of(st.sampled_from(FUNCTIONS), st.tuples(st.sampled_from(FUNCTIONS), st.integers(0, 12).map(str))
                          .map("+".join), instruction_addrs.map(hex))
bad_places = st.one_of(numbers, st.tuples(st.sampled_from(FUNCTIONS + ["nosuch"]), numbers).map("+".join),
                       st.tuples(st.sampled_from([PROG, "/nonexistent", "/etc", "./rel"]), numbers).map(":".join),
                       places.map(lambda p: p + "%bad"), nasty_text)
fetch_leaves = st.sampled_from(["%di", "%si", "%ax", "%rdi", "$stack", "$stack0", "$stack3", "$arg1", "$arg2",
                                "$arg9", "$arg2048", "$comm", "@counter", "@counter+4", "@0x401500", '\\"text"',
                                "\\42"])
bad_fetch_leaves = st.one_of(
    st.sampled_from(["%r3", "%nosuch", "%", "$retval", "$stack99999", "$arg0", "$arg2049", "$COMM", "$bad",
                     "@counter-8", "@nosuch", "@0", "@+0x10", '\\"open', "\\-1", "\\x", "+0(", "+0()", "(%di)"]),
    numbers.map("@".__add__), numbers.map("\\".__add__), nasty_text)


def derefs(leaves: st.SearchStrategy[str], offsets: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``+OFF(FETCH)`` around leaves, nested: the kernel allows a few levels, kpsdk must refuse more."""
    return st.recursive(leaves, lambda inner: st.tuples(st.sampled_from(["+", "-", "+u"]), offsets, inner).map(
        lambda t: f"{t[0]}{t[1]}({t[2]})"), max_leaves=20)


fetches = derefs(fetch_leaves, st.integers(0, 16).map(str))
bad_fetches = st.one_of(derefs(bad_fetch_leaves, st.integers(0, 16).map(str)), derefs(fetch_leaves, numbers))
types = st.sampled_from(["", ":u8", ":s16", ":x32", ":s64", ":char", ":string", ":ustring", ":symbol", ":symstr",
                         ":b4@2/8", ":u8[4]", ":string[2]"])
bad_types = st.one_of(st.sampled_from([":b9@0/8", ":u32[65]", ":u8[", ":bad", ":", ":u8[0]", ":b0@0/8"]),
                      numbers.map(lambda n: f":u8[{n}]"), nasty_text.map(":".__add__))
FILTER_FIELDS = ["a", "b", "name", "ret", "_x", "common_type", "common_flags", "common_preempt_count", "common_pid",
                 "comm", "CPU"]


def fetch_arg(names: st.SearchStrategy[str]) -> Piece:
    """``NAME=FETCH:TYPE``; bad when one of the three parts is."""
    def arg(name: str, fetch: str, t: str) -> str:
        return f"{name}={fetch}{t}" if name else f"{fetch}{t}"

    return ("arg", st.builds(arg, names, fetches, types),
            st.one_of(st.builds(arg, bad_identifiers, fetches, types), st.builds(arg, names, bad_fetches, types),
                      st.builds(arg, names, fetches, bad_types)))


#: fetch-argument names: none (arg1, arg2...) or a name
arg_names = st.one_of(st.just(""), identifiers)


def definitions(names: st.SearchStrategy[str] = arg_names) -> st.SearchStrategy[str]:
    """A kprobe_events line from its words: head, place, up to four fetch arguments."""
    words: list[Piece] = [("head", heads, bad_heads), ("place", places, bad_places)]
    return st.integers(0, 4).flatmap(lambda n: one_wrong(words + [fetch_arg(names)] * n)).map(
        lambda pieces: " ".join(value for _, value in pieces))


filter_leaves = st.builds("{} {} {}".format, st.sampled_from(FILTER_FIELDS),
                          st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "&", "~"]),
                          st.one_of(st.integers(-9, 99).map(str), st.sampled_from(['"/etc/*"', "'x'", "abc", "*"])))
bad_filter_leaves = st.one_of(
    st.builds("{} {} {}".format, st.sampled_from(["1a", "", "a b", "a"]),
              st.sampled_from(["=", "&&", "!", "<>", "==", "<"]), st.one_of(numbers, nasty_text)),
    nasty_text)


def nest(leaves: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Expressions over ``leaves``: ``&&``, ``||``, ``!``, parentheses, sometimes deeper than allowed."""
    return st.recursive(leaves, lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["&&", "||"]), inner).map(" ".join),
        inner.map("({})".format), inner.map("!".__add__),
        st.tuples(st.integers(1, 80), inner).map(lambda t: "(" * t[0] + t[1] + ")" * t[0]),
        st.tuples(st.integers(1, 80), inner).map(lambda t: "!" * t[0] + t[1]),
    ), max_leaves=12)


filters = st.one_of(nest(filter_leaves), nest(st.one_of(filter_leaves, bad_filter_leaves)))
field_values = st.dictionaries(st.sampled_from(FILTER_FIELDS), st.one_of(
    st.none(), edge_ints, st.text(max_size=10), st.lists(st.integers(), max_size=3)))


# -- the trace grammar -----------------------------------------------------------------------------------


def parse_or_refuse(arch: Any, text: str) -> ProbeDef | None:
    """A definition parses, or is a TraceDefinitionError: one line, and a caret on the line."""
    try:
        definition = Parser(arch).parse(text)
    except TraceDefinitionError as e:
        assert 0 <= e.column <= len(text) + 1 and len(e.error_log.splitlines()) == 3, e.error_log
        assert isinstance(e, kpsdk.KpsdkError) and "\n" not in str(e)
        event(f"refused: {e.code}")
        return None
    event("parsed")
    return definition


@settings(max_examples=fuzz_examples(150))
@given(arch=st.sampled_from(ARCHS), text=st.one_of(st.text(), nasty_text))
def test_the_grammar_takes_any_text(arch: Any, text: str) -> None:
    parse_or_refuse(arch, text)


@settings(max_examples=fuzz_examples(400))
@given(arch=st.sampled_from(ARCHS), text=definitions())
def test_the_grammar_takes_any_definition_built_from_its_pieces(arch: Any, text: str) -> None:
    parse_or_refuse(arch, text)


@settings(max_examples=fuzz_examples(200))
@given(text=st.one_of(definitions(), definitions(st.sampled_from(FILTER_FIELDS))),
       filter_expr=st.one_of(st.none(), filters))
def test_a_trace_registers_or_refuses_and_its_hits_never_fail(s: kpsdk.Session, text: str,
                                                               filter_expr: str | None) -> None:
    try:
        trace = s.trace(text, filter=filter_expr)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        assert_clean(s)
        return
    event("traced" + (" with a filter" if filter_expr is not None else ""))
    try:
        s.call("add", 2, 3)
        s.call("fact", 3)
        for record in trace.records:
            assert all(v is None or isinstance(v, int | str | list) for v in record.fields.values())
    finally:
        trace.close()
    assert_clean(s)


# -- event triggers (hist, stacktrace) -------------------------------------------------------------------

TRIGGER_DEFS = ["p:f fact n=%di:s64 name=+0(%di):string", "r:fr fact ret=$retval:s32"]
hist_keys = st.sampled_from(["n", "common_pid", "common_pid.execname", "n.log2", "n.buckets=4", "name",
                             "__probe_ip.sym", "n.hex", "common_cpu", "__probe_ip.sym-offset", "n,common_pid",
                             "common_type", "common_flags.hex", "common_preempt_count,common_type.log2"])
trigger_pieces: list[Piece] = [
    ("event", st.sampled_from(["f", "kprobes/f", "kprobes.f"]), st.one_of(nasty_text, st.just("fr"))),
    ("keys", hist_keys.map(lambda k: f"keys={k}"), st.one_of(nasty_text.map(lambda t: f"keys={t}"),
                                                            st.sampled_from(["keys=", "key=n,n,n,n", "vals=n"]))),
    ("vals", st.sampled_from(["vals=hitcount", "vals=n", "vals=hitcount,n", "values=n.hex"]),
     st.one_of(nasty_text.map(lambda t: f"vals={t}"), st.sampled_from(["vals=name", "vals=n,n,n", "vals=n.log2"]))),
    ("sort", st.sampled_from(["sort=hitcount", "sort=n.descending", "sort=n,hitcount", "sort=hitcount.ascending"]),
     st.one_of(nasty_text.map(lambda t: f"sort={t}"), st.sampled_from(["sort=", "sort=n,n,n", "sort=n.up"]))),
    ("size", st.sampled_from(["size=128", "size=2048", "size=0x1000"]),
     st.one_of(numbers.map(lambda t: f"size={t}"), st.just("size="))),
    ("name", st.sampled_from(["name=t", "name=u"]), st.one_of(nasty_text.map(lambda t: f"name={t}"),
                                                             st.just("name="))),
]


@st.composite
def triggers(draw: st.DrawFn) -> str:
    """``EVENT:hist:ATTRS [if FILTER]`` or ``EVENT:stacktrace[:N] [if FILTER]`` from their pieces."""
    pieces = dict(draw(one_wrong(trigger_pieces)))
    tail = draw(st.one_of(st.just(""), filters.map(lambda f: f" if {f}"), st.sampled_from([" if", " if ("])))
    if draw(st.booleans()):
        count = draw(st.one_of(st.just(""), st.integers(0, 9).map(lambda n: f":{n}"), nasty_text))
        return f"{pieces['event']}:stacktrace{count}{tail}"
    attrs = [pieces["keys"]] + [pieces[k] for k in ("vals", "sort", "size", "name") if draw(st.booleans())]
    return f"{pieces['event']}:hist:{':'.join(attrs)}{tail}"


@settings(max_examples=fuzz_examples(200))
@given(text=st.one_of(triggers(), nasty_text))
def test_a_trigger_is_taken_or_refused_and_its_hits_never_fail(s: kpsdk.Session, text: str) -> None:
    """``s.trace(..., triggers=[TEXT])``: the events with the trigger, or one of kpsdk's errors with
    nothing left registered; a hist that takes hits renders."""
    try:
        trace = s.trace(TRIGGER_DEFS, triggers=[text])
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        error_log = getattr(e, "error_log", None)
        assert error_log is None or len(error_log.splitlines()) == 3, error_log
        assert "\n" not in str(e)
        assert_clean(s)
        return
    run_triggered(s, trace)


def run_triggered(s: kpsdk.Session, trace: Any) -> None:
    """A trace the triggers were accepted on: the fixture runs, each hist renders, and
    closing the trace leaves nothing registered."""
    event("triggered")
    try:
        s.call("fact", 3)
        for _, hist in trace.hists():
            assert hist.render().startswith("# event histogram\n")
    finally:
        trace.close()
    assert_clean(s)


@settings(max_examples=fuzz_examples(150))
@given(texts=st.lists(st.one_of(triggers(), triggers().map(lambda t: t.replace("f:", "fr:", 1))), min_size=2,
                      max_size=4))
def test_several_triggers_share_named_tables_or_are_refused(s: kpsdk.Session, texts: list[str]) -> None:
    """Triggers on two events, named tables among them (``name=t``): taken together, or one of
    kpsdk's errors (a named table that does not match, a repeat) with nothing registered."""
    try:
        trace = s.trace(TRIGGER_DEFS, triggers=texts)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        event(f"refused: {getattr(e, 'code', type(e).__name__)}")
        assert_clean(s)
        return
    run_triggered(s, trace)


# -- filters ---------------------------------------------------------------------------------------------


def filter_or_refuse(text: str) -> Filter | None:
    try:
        f = parse_filter(text)
    except FilterError as e:
        assert 0 <= e.column <= len(text) and len(e.error_log.splitlines()) == 3, e.error_log
        assert isinstance(e, kpsdk.KpsdkError) and "\n" not in str(e)
        event("refused")
        return None
    event("parsed")
    return f


@settings(max_examples=fuzz_examples(150))
@given(text=st.one_of(st.text(), nasty_text, st.text(alphabet="()!&|=<>~ab1\"' ", max_size=300)))
def test_a_filter_parses_or_is_refused(text: str) -> None:
    filter_or_refuse(text)


@settings(max_examples=fuzz_examples(150))
@given(text=filters, values=st.lists(field_values, max_size=4))
def test_a_filter_that_parses_never_fails_at_a_hit(text: str, values: list[dict[str, Any]]) -> None:
    f = filter_or_refuse(text)
    if f is not None:
        for fields in values:
            assert isinstance(f(fields), bool)


# -- locations -------------------------------------------------------------------------------------------


@settings(max_examples=fuzz_examples(200))
@given(where=st.one_of(kprobe_places, instruction_addrs, bad_places,
                       wrong_values, st.sampled_from(FUNCTIONS).map(lambda n: n + "+")))
def test_a_location_registers_or_is_refused(s: kpsdk.Session, where: Any) -> None:
    probe = register_or_refuse(s, lambda: s.kprobe(where)(nothing))
    if probe is not None:
        assert probe.registered and probe.symbol_name == location_fields(where).get("symbol_name")
        s.unregister_kprobe(probe)
        assert_clean(s)


@settings(max_examples=fuzz_examples(100))
@given(text=st.one_of(
    st.tuples(st.sampled_from([PROG, "/etc", "/nonexistent", ""]),
              st.one_of(st.sampled_from(FUNCTIONS), st.sampled_from(["0x1f9", "0x202", "add+4"]), numbers, nasty_text))
    .map(":".join), nasty_text))
def test_a_uprobe_location_registers_or_is_refused(s: kpsdk.Session, text: str) -> None:
    probe = register_or_refuse(s, lambda: s.uprobe(text)(nothing))
    if probe is not None:
        s.unregister_uprobe(probe)
        assert_clean(s)


# -- probe fields ------------------------------------------------------------------------------------


@settings(max_examples=fuzz_examples(400))
@given(data=st.data(), cls=st.sampled_from(sorted(PROBES)))
def test_probe_fields_are_taken_or_refused_at_construction_or_registration(s: kpsdk.Session, data: st.DataObject,
                                                                          cls: str) -> None:
    fields = data.draw(probe_fields(cls), label="fields")
    try:
        probe = getattr(kpsdk, cls)(**fields)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        return
    try:
        s.register(probe)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        assert not probe.registered
        assert_clean(s)
        return
    event(f"registered: {cls}")
    try:
        s.call("fact", 3)  # the hits of a probe that registered never fail for its fields
        s.call("bump", 2)
    except kpsdk.ProbeHandlerError as e:  # a handler such as len() raised at run time: not its fields
        assert not isinstance(e.__cause__, kpsdk.KpsdkError), e
        event("a handler raised")
    finally:
        s.unregister(probe)
    assert_clean(s)


# -- memory and symbol calls --------------------------------------------------------------------------

#: the calls whose first argument is an address: a function's name drawn for them is turned into its address
ADDRESS_CALLS = {"read_memory", "read_string", "read_int", "write_memory (what was read)", "symbols.lookup",
                 "symbols.format", "symbols.containing", "real_return_address"}
MEMORY_CALLS: dict[str, Callable[[kpsdk.Session, Any, Any], Any]] = {
    "read_memory": lambda s, a, b: s.read_memory(a, b),
    "read_string": lambda s, a, b: s.read_string(a, b),
    "read_int": lambda s, a, b: s.read_int(a, b),
    "write_memory (what was read)": lambda s, a, b: s.write_memory(a, s.read_memory(a, len(b)) if isinstance(b, bytes)
                                                                   else b),
    "symbols.lookup": lambda s, a, b: s.symbols.lookup(a),
    "symbols.format": lambda s, a, b: s.symbols.format(a),
    "symbols.containing": lambda s, a, b: s.symbols.containing(a),
    "symbols.resolve": lambda s, a, b: s.symbols.resolve(a),
    "symbols.get": lambda s, a, b: s.symbols.get(a),
    "symbols.matching": lambda s, a, b: s.symbols.matching(a, b),
    "backtrace": lambda s, a, b: s.backtrace(limit=a),
    "real_return_address": lambda s, a, b: s.real_return_address(a, b),
}


@settings(max_examples=fuzz_examples(400))
@given(call=st.sampled_from(sorted(MEMORY_CALLS)),
       first=st.one_of(st.sampled_from(FUNCTIONS), st.integers(min_value=0, max_value=1 << 64), wrong_values),
       second=st.one_of(st.integers(min_value=0, max_value=64), st.binary(max_size=8), st.none(), wrong_values))
def test_memory_and_symbol_calls_answer_or_refuse_any_argument(s: kpsdk.Session, call: str, first: Any,
                                                              second: Any) -> None:
    """Any value for an address, a size, a name or the bytes to write: an answer, or one of
    kpsdk's errors (ArgumentError for the wrong kind of value, TargetFault for memory that
    is not there, SymbolError for an unknown name); the program still runs as before."""
    if call in ADDRESS_CALLS and first in FUNCTIONS:
        first = s.symbols.resolve(first)
    try:
        MEMORY_CALLS[call](s, first, second)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        if isinstance(e, kpsdk.ArgumentError):  # it names the call and the argument
            assert re.match(r"(symbols\.)?[a-z_]+: [a-z]+=", str(e)), e
    assert s.call("fact", 5) == 120


# -- timeouts -------------------------------------------------------------------------------------


@settings(max_examples=fuzz_examples(40))
@given(timeout=st.one_of(wrong_values, st.floats(max_value=1e-3), st.just(math.inf)))
def test_a_timeout_runs_or_is_refused(timeout: Any) -> None:
    with kpsdk.open(f"elf:{PROG}") as s:
        try:
            status = s.run(timeout=timeout)
        except kpsdk.ArgumentError:
            event("refused")
            return
        event("ran to the end" if status == 0 else "stopped")
        assert status in (0, None)


# -- the CLI ----------------------------------------------------------------------------------------

seconds = st.sampled_from(["5", "0.5", "inf", "1e-9"])
bad_seconds = st.one_of(st.floats().map(str), st.sampled_from(["nan", "-inf", "-1", "0", "x", "", "1e309"]))
cli_text = st.one_of(nasty_text, numbers)


def option(name: str, good: st.SearchStrategy[str], bad: st.SearchStrategy[str] = cli_text) -> Piece:
    """``NAME VALUE`` on the command line."""
    return (name, good.map(lambda v: [name, v]), bad.map(lambda v: [name, v]))


def positional(name: str, good: st.SearchStrategy[str], bad: st.SearchStrategy[str]) -> Piece:
    """An argument: ``VALUE``."""
    return (name, good.map(lambda v: [v]), bad.map(lambda v: [v]))


def command(base: list[str], required: list[Piece], optional: list[Piece],
            flags: tuple[str, ...] = ()) -> st.SearchStrategy[list[str]]:
    """``base``, then the required options and some optional ones (one of them maybe wrong), then flags."""
    chosen_flags = st.lists(st.sampled_from(flags), unique=True) if flags else st.just([])
    return st.tuples(some_of(required + optional, at_least=len(required)), chosen_flags).map(
        lambda t: [*base, *(a for _, pair in t[0] for a in pair), *t[1]])


ELF = positional("ELF", st.just("x86_64"), st.one_of(st.sampled_from(["", "nosuch", "/etc", "/dev/null"]), nasty_text))
commands = st.one_of(
    command(["probe"], [ELF, option("--kprobe", kprobe_places,
                                    st.one_of(bad_places, cli_text))], [
        option("--kretprobe", st.sampled_from(["add", "fact", "sub"])),
        option("--uprobe", st.sampled_from([f"{PROG}:add", f"{PROG}:0x1f9"])),
        option("--uretprobe", st.sampled_from([f"{PROG}:fact"])),
        option("--string-arg", st.integers(1, 4).map(str)),
        option("--regs", st.sampled_from(["rdi,rsi", "arg1,arg2", "ip,sp", "arg2048", "rax"])),
        option("--call", st.sampled_from(["add 2 3", "fact(4)", "sub 3 -5", "bump 0x10"])),
        option("--restype", st.sampled_from(["long", "ulong", "int", "uint"])),
        option("--maxactive", st.integers(0, 8).map(str)),
        option("--timeout", seconds, bad_seconds),
        option("--noprobe", st.sampled_from(["sub", "sub,check"])),
        option("--target", st.sampled_from([f"elf:{PROG}"])),
        option("--bind", st.sampled_from(["/tmp:/out", "/etc:/in:ro", "/tmp:/t:rw"]),
               st.one_of(cli_text, st.sampled_from(["/tmp", "/tmp:rel", "/tmp:/x:rx", "/nosuch:/x", ":/x"]))),
    ], flags=("--post", "--failed", "--no-optimize", "--no-follow")),
    command(["trace", "x86_64"], [option("-e", definitions(), st.one_of(definitions(), nasty_text))], [
        option("--filter", nest(filter_leaves), st.one_of(filters, nasty_text)),
        option("--duration", seconds, bad_seconds),
        option("--count", st.integers(1, 5).map(str)),
        option("--output", st.sampled_from(["text", "jsonl", "perfetto", "trace-dat"])),
        option("--hist", st.sampled_from(FILTER_FIELDS)),
        option("--call", st.sampled_from(["add 2 3", "fact 4"])),
        option("--noprobe", st.sampled_from(["sub"])),
        option("--comm", st.sampled_from(["cat", "a-b", "x" * 15])),
        option("--pid", st.sampled_from(["0", "85", "4194304"])),
        option("--trigger", triggers()),
        option("--lhist", st.sampled_from([f"{f},0,100,10" for f in FILTER_FIELDS]),
               st.one_of(cli_text, st.sampled_from(["a,1,0,1", "a,0,10,0", "a,0,1e9,1", "a"]))),
        option("--functions", st.sampled_from(["a*", "[a-f]*", "fact"])),
    ], flags=("--latency", "--profile", "--console", "--no-prefix", "--stack")),
    command(["disasm"], [ELF, positional("SYM", st.sampled_from(FUNCTIONS + ["add+4", "fact+0x3"]), cli_text)],
            [option("-n", st.integers(1, 20).map(str))]),
    command(["list"], [ELF], [option("--noprobe", st.sampled_from(["add", "add,sub"]))], flags=("--all",)),
    command(["demo"], [option("--arch", st.sampled_from(["x86_64", "thumb", "riscv64"]))], []),
)


def check_cli_result(argv: list[str], code: int, stderr: str, output: str) -> None:
    assert code in (0, 1, 2), (argv, code, output)
    assert "Traceback" not in output, (argv, output)
    if code == 1:
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (argv, stderr)


@settings(max_examples=fuzz_examples(300))
@given(argv=commands)
def test_every_command_answers_any_option_value(argv: list[str]) -> None:
    result = runner.invoke(app, argv)
    event(f"{argv[0]}: exit {result.exit_code}")
    assert result.exception is None or isinstance(result.exception, SystemExit), (argv, repr(result.exception))
    check_cli_result(argv, result.exit_code, result.stderr, result.output)


def no_nul(raw: bytes) -> bytes:
    """A NUL cannot reach argv at all (exec refuses it): the bytes up to it."""
    return raw.split(b"\0")[0] or b"x"


@settings(max_examples=fuzz_examples(6), deadline=None)
@given(raw=st.lists(st.binary(min_size=1, max_size=12).map(no_nul), min_size=2, max_size=2))
def test_the_console_script_answers_bytes_no_text_decodes(raw: list[bytes]) -> None:
    """Bytes that are not UTF-8 reach argv as surrogate escapes, which CliRunner cannot pass."""
    argv = [b"probe", b"x86_64", b"--kprobe", raw[0], b"--regs", raw[1], b"--call", b"add 2 3"]
    proc = subprocess.run([sys.executable.encode(), b"-m", b"kpsdk.cli", *argv], capture_output=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})
    check_cli_result([a.decode(errors="replace") for a in argv], proc.returncode,
                     proc.stderr.decode(errors="replace"), (proc.stdout + proc.stderr).decode(errors="replace"))



# --- qemu-system's extra QEMU arguments and the kernel fixtures' --arch --------------------------

qemu_arg_values = st.one_of(
    st.lists(st.one_of(st.text(max_size=20), st.sampled_from(
        ["-gdb", "--serial=stdio", "-S", "-monitor", "-smp", "2", "-cpu=max", "-append", "-kernel=/x"]))),
    st.tuples(st.text(max_size=8)), st.text(max_size=8), st.integers(), st.none(),
    st.lists(st.one_of(st.integers(), st.binary(max_size=4)), min_size=1, max_size=3),
)


@settings(max_examples=fuzz_examples(200))
@given(value=qemu_arg_values)
def test_qemu_args_are_argv_words_or_refused(value: Any) -> None:
    from kpsdk.targets.live.qemu import OWNED_QEMU_OPTIONS, check_qemu_args

    try:
        out = check_qemu_args(value)
    except kpsdk.TargetError:
        event("refused")
        return
    event("taken")
    assert out == list(value)  # taken as given: one argv word each, no shell, no splitting
    for arg in out:
        assert isinstance(arg, str) and "\0" not in arg
        if arg.startswith("-"):
            assert "-" + arg.lstrip("-").split("=", 1)[0] not in OWNED_QEMU_OPTIONS


@settings(max_examples=fuzz_examples(30), deadline=None)
@given(value=st.lists(st.sampled_from(["-gdb", "tcp::1", "--monitor=stdio", "-S", "a\0b"]), min_size=1,
                      max_size=3).filter(lambda v: any(a.startswith("-") or "\0" in a for a in v)))
def test_refused_qemu_args_start_no_qemu(value: list[str]) -> None:
    """Refused before anything starts: no kernel is needed to see the error."""
    with pytest.raises(kpsdk.TargetError, match="qemu_args"):
        kpsdk.open("qemu-system:x86_64", qemu_args=value)


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(value=st.one_of(st.text(max_size=12), st.sampled_from(["GDB", "Plugin", "plugin ", "tcg", ""]),
                       st.integers(), st.none(), st.lists(st.text(max_size=4), max_size=2))
       .filter(lambda v: v not in ("gdb", "plugin")))
def test_an_unknown_mechanism_starts_no_qemu(value: Any) -> None:
    """qemu-system's ``mechanism=`` is ``"gdb"`` or ``"plugin"``; anything else is refused,
    naming both, before QEMU (or a download of QEMU 10) starts."""
    with pytest.raises(kpsdk.TargetError, match="mechanism=.* is not one of gdb, plugin"):
        kpsdk.open("qemu-system:x86_64", mechanism=value)


def test_qemu_arg_option_reaches_qemu_args() -> None:
    from kpsdk.cli.options import given_target_options
    from kpsdk.cli.target_choice import choose_target

    given = given_target_options(None, "vmlinuz", None, None, None, None, ["-smp", "2"])
    choice = choose_target(None, "qemu-system:x86_64", given)
    assert choice.options["qemu_args"] == ["-smp", "2"]
    # a probe by address: by name, qemu-system without --kernel is a usage error first (nothing to look it up in)
    result = runner.invoke(app, ["probe", "--target", "qemu-system:x86_64", "--qemu-arg=-gdb",
                                 "--qemu-arg", "tcp::1", "--kprobe", "0x100000"])
    assert result.exit_code == 1 and "qemu_args: '-gdb' would change what kpsdk sets itself" in result.stderr


mechanism_values = st.one_of(st.sampled_from(["gdb", "plugin", "GDB", "Plugin", "plugin ", "tcg", "", "-e"]),
                             cli_text)


@settings(max_examples=fuzz_examples(100), deadline=None)
@given(value=mechanism_values, command_name=st.sampled_from(["trace", "probe"]),
       target=st.sampled_from(["qemu-system:x86_64", "qemu-user:x86_64", "gdb://localhost:1", None]))
def test_the_mechanism_option_is_a_choice_for_qemu_system_or_a_usage_error(value: str, command_name: str,
                                                                          target: str | None) -> None:
    """``--mechanism gdb|plugin`` goes with qemu-system only; anything else is exit 2 naming the
    option, before a target (or a download of QEMU 10) starts: ``choose_target`` alone decides."""
    import typer

    from kpsdk.cli.options import given_target_options
    from kpsdk.cli.target_choice import choose_target

    elf = PROG if target is None else None
    try:
        given = given_target_options(None, None, None, None, None, None, None, mechanism=value)
        choice = choose_target(elf, target, given)
    except typer.BadParameter as exc:
        assert exc.param_hint == "--mechanism", exc
        event("refused")
        assert value not in ("gdb", "plugin") or target != "qemu-system:x86_64"
        return
    event("taken")
    assert target == "qemu-system:x86_64" and choice.options["mechanism"] == value in ("gdb", "plugin")


@settings(max_examples=fuzz_examples(20), deadline=None)
@given(value=mechanism_values, command_name=st.sampled_from(["trace", "probe"]))
def test_the_mechanism_option_answers_any_value_on_the_command_line(value: str, command_name: str) -> None:
    argv = [command_name, "x86_64", "--mechanism", value,
            *(["-e", "p add"] if command_name == "trace" else ["--kprobe", "add"])]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and "--mechanism" in result.output, (argv, result.output)
    check_cli_result(argv, result.exit_code, result.stderr, result.output)


bind_values = st.one_of(
    cli_text,
    st.lists(st.sampled_from(["/tmp", "", ":", "/x", "ro", "rw", "RO", "..", "/", "a", "\0", "::", ":ro", "/tmp/"]),
             max_size=6).map("".join))


@settings(max_examples=fuzz_examples(300), deadline=None)
@given(text=bind_values)
def test_a_bind_parses_or_is_a_usage_error(text: str) -> None:
    """``--bind HOST_DIR:GUEST_DIR[:ro|rw]``: three fields (an existing host directory, an absolute
    guest path without '..', ro or rw) that give back the text, or a usage error naming --bind;
    never another exception."""
    import typer

    from kpsdk.cli.parsing import parse_bind, parse_binds

    try:
        host, guest, mode = parse_bind(text)
    except typer.BadParameter as e:
        assert e.param_hint == "--bind"
        event("refused")
        return
    event("taken")
    assert os.path.isdir(host) and guest.startswith("/") and ".." not in guest.split("/") and mode in ("ro", "rw")
    assert text in (f"{host}:{guest}", f"{host}:{guest}:{mode}")
    assert parse_binds([text]) == [(host, guest, mode)]  # one bind alone: kpsdk.open's checks pass too


@settings(max_examples=fuzz_examples(40), deadline=None)
@given(values=st.lists(bind_values, min_size=1, max_size=3), command_name=st.sampled_from(["trace", "probe"]))
def test_any_bind_on_the_command_line_is_a_usage_error_or_reaches_the_kind_check(values: list[str],
                                                                               command_name: str) -> None:
    """Whatever --bind's values, the command answers exit 2 naming --bind before anything starts:
    a malformed one, or (all well formed) --bind on a qemu-user target, which takes none."""
    binds = [w for v in values for w in ("--bind", v)]
    argv = [command_name, "--target", "qemu-user:/bin/true", *binds,
            *(["-e", "p add"] if command_name == "trace" else ["--kprobe", "add"])]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2 and "--bind" in result.output, (argv, result.output)
    check_cli_result(argv, result.exit_code, result.stderr, result.output)


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(arch=st.sampled_from(ARCHS), texts=st.lists(st.one_of(nasty_text, st.sampled_from(
    ["+0(%si):string", "+8(%sp):u64", "+0(+0(%si)):string", "@jiffies", "$stack2", "$arg3", "+0($arg2):ustring",
     "%si:string", "$comm", "\\x", "+0(%si):u8[4]", "+0(%si):string[2]", "+1(+2(+3(%di))):x16",
     "-8(%sp):u32", "-4(+0(%sp)):x32", "+0(+0(%ax)):string"])), max_size=4)
    | st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=8), st.sets(st.text(max_size=4), max_size=2)))
def test_plugin_memory_declarations_plan_or_are_refused(arch: Any, texts: Any) -> None:
    """What a handler declares for the plugin to read (``s.target.declare_memory``): kprobe_events
    fetch arguments that parse and plan into the plugin's reads, or a typed error."""
    from kpsdk.targets.live.tcg.fetch import Planner, parse_fetches
    from kpsdk.targets.live.tcg.plugin import MAX_MEM, MAX_MEM_SIZE

    index = {r.gdb: i for i, r in enumerate(arch.registers)}
    try:
        planner = Planner(arch, arch.abi("kernel"), index.get)
        for fetch, argtype in parse_fetches(arch, texts):
            planner.add(fetch, argtype, lambda node: 0x1000)
    except kpsdk.KpsdkError as exc:
        assert "\n" not in str(exc)
        event(f"refused: {type(exc).__name__}")
        return
    event(f"planned {len(planner.reads)} reads")
    assert len(planner.reads) <= MAX_MEM
    for i, read in enumerate(planner.reads):
        assert 0 < read.size <= MAX_MEM_SIZE and -(1 << 63) <= read.offset < 1 << 63
        assert read.reg in index.values() or read.reg == -1 or -2 - i < read.reg <= -2
        # offsets sign-extended from the guest's word, which the plugin wraps at (32-bit guests)
        assert read.word32 == (arch.word_size == 4)
        assert read.word32 <= (-(1 << 31) <= read.offset < 1 << 31)


@settings(max_examples=fuzz_examples(200))
@given(name=st.one_of(st.text(max_size=12), st.sampled_from(["arm", "ARM", "ppc64le", "ppc64el", "x86_64",
                                                              "riscv64", "thumb", "ppc64", "i686", "arm "])),
       release=st.one_of(st.none(), st.sampled_from(["6.1", "6.12", "6.5", "6.12 ", ""]), st.text(max_size=8)))
def test_kernel_fixture_arch_is_a_known_name_or_refused(name: str, release: str | None) -> None:
    from kpsdk.fixtures import kernel

    try:
        canonical, port = kernel._port(name, release)
    except (kpsdk.UnknownNameError, kpsdk.UnsupportedTargetError) as e:
        event(type(e).__name__)
        return
    assert canonical in kpsdk.get_registry().archs.names() and port.arch in (
        "amd64", "i386", "armhf", "riscv64", "ppc64el")
    assert port.suite == {None: port.suite, "6.1": "bookworm", "6.12": "trixie"}[release]


# -- trace output formats ------------------------------------------------------------------------

@settings(max_examples=fuzz_examples(60))
@given(name=st.one_of(st.sampled_from(["text", "jsonl", "perfetto", "trace-dat"]), nasty_text, st.text(max_size=40)))
def test_an_output_format_name_is_a_format_or_a_usage_error(name: str) -> None:
    """``--output NAME``: a loaded format runs; anything else is exit 2 listing the formats."""
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:add add a=%di:s32", "--output", name])
    check_cli_result(["--output", name], result.exit_code, result.stderr, result.output)
    if name in kpsdk.get_registry().trace_formats:
        assert result.exit_code == 0, result.output
    else:
        flat = "".join(result.stderr.replace("│", "").split())  # rich wraps the message in a box
        assert result.exit_code == 2 and "wantoneofjsonl,perfetto,text,trace-dat" in flat, result.output


@settings(max_examples=fuzz_examples(100))
@given(names=st.lists(st.one_of(st.text(max_size=40), nasty_text), max_size=4))
def test_format_names_a_plugin_gives_are_checked(names: list[str]) -> None:
    """What a plugin's ``kpsdk_trace_formats`` returns is taken or refused with a KpsdkError."""
    from kpsdk.trace.output import FORMAT_NAME, OutputFormat, TextWriter, check_formats

    formats = [OutputFormat(n, lambda stream, ctx: TextWriter(stream)) for n in names]
    try:
        got = check_formats([formats])
    except kpsdk.KpsdkError:
        assert len(set(names)) < len(names) or not all(FORMAT_NAME.match(n) for n in names)
        return
    assert list(got) == names and all(re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,31}", n) for n in names)


@settings(max_examples=fuzz_examples(80))
@given(comm=st.one_of(st.text(max_size=20), nasty_text), pid=st.one_of(st.integers(-5, 5_000_000), st.text(max_size=8)))
def test_a_fixed_comm_and_pid_are_taken_or_refused(comm: str, pid: Any) -> None:
    """``--comm NAME --pid N``: the prefix shows exactly them, or it is a usage error (exit 2)."""
    from kpsdk.kernel.tasks import PID_MAX_LIMIT, TASK_COMM_LEN

    argv = ["trace", "x86_64", "-e", "p:add add a=%di:s32", "--comm", comm, "--pid", str(pid)]
    result = runner.invoke(app, argv)
    check_cli_result(argv, result.exit_code, result.stderr, result.output)
    good_comm = 0 < len(comm.encode("utf-8", "surrogateescape")) < TASK_COMM_LEN and comm.isprintable() \
        and not any(c.isspace() for c in comm)
    try:
        number: int | None = int(str(pid))  # what click's INT makes of the text
    except ValueError:
        number = None
    good_pid = number is not None and 0 <= number <= PID_MAX_LIMIT
    if good_comm and good_pid:
        assert result.exit_code == 0, result.output
        line = result.stdout.splitlines()[-1]
        assert line.startswith(f"{shown_name(comm):>16}-{number:<7} [000] ....."), line  # escaped as names are
    else:
        assert result.exit_code == 2, result.output


@settings(max_examples=fuzz_examples(60))
@given(name=st.one_of(st.text(max_size=30), nasty_text, st.sampled_from(["", ".", "..", "a/b", "x.svg", "x.PNG",
                                                                          "x.gif", "\x00", "/", "/dev/full"])),
       option_name=st.sampled_from(["--out", "--plot", "--out trace-dat"]))
def test_an_output_path_is_written_or_refused(tmp_path_factory: pytest.TempPathFactory, name: str,
                                              option_name: str) -> None:
    """``--out PATH``/``--plot PATH``, and ``--out PATH`` of the binary ``trace-dat``: written, or a
    usage error (2) / one error line (1) with nothing created; never a traceback."""
    base = tmp_path_factory.mktemp("out")
    path = name if name.startswith("/") else str(base / name) if name else name
    option, _, fmt = option_name.partition(" ")
    argv = ["trace", "x86_64", "-e", "p:put put v=%si:s64", "--hist", "v", option, path,
            *(["--output", fmt] if fmt else [])]
    result = runner.invoke(app, argv)
    check_cli_result(argv, result.exit_code, result.stderr, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        assert list(base.iterdir()) == [] or name in ("", ".", ".."), list(base.iterdir())
    if fmt and result.exit_code == 0:
        assert Path(path).read_bytes()[:10] == b"\x17\x08\x44tracing"  # the whole trace.dat, not text


@settings(max_examples=fuzz_examples(80))
@given(pattern=st.one_of(st.text(max_size=20), nasty_text,
                         st.sampled_from(["*", "s*", "[", "[!a]*", "**", "?", "a[b"])),
       command_name=st.sampled_from(["list", "probe"]))
def test_a_symbol_glob_matches_or_is_refused(pattern: str, command_name: str) -> None:
    """``kpsdk list X --functions GLOB`` and ``kpsdk probe X --kprobe GLOB``: a listing or probes
    (exit 0), or one error line / a usage error; never a traceback, never a hang."""
    argv = (["list", "x86_64", "--functions", pattern] if command_name == "list"
            else ["probe", "x86_64", "--kprobe", pattern, "--regs", "rdi"])
    result = runner.invoke(app, argv)
    check_cli_result(argv, result.exit_code, result.stderr, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if command_name == "list" and result.exit_code == 0:
        from kpsdk.binfmt.elfimage import load_elf

        names = {s.name for s in load_elf(PROG).symbols if s.kind == "func"}
        expected = {n for n in names if re.fullmatch(fnmatch_translate(pattern), n)}
        assert all(n in result.stdout for n in expected)


def fnmatch_translate(pattern: str) -> str:
    import fnmatch

    return fnmatch.translate(pattern)


# -- a Linux program's inputs on the Unicorn target: args, env, stdin, sysroot, cwd -----------------

#: text a C string can carry (no NUL); surrogates are not text a program is given
c_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30)
process_pieces: list[Piece] = [
    ("args", st.lists(c_text, max_size=5), st.one_of(wrong_values, st.lists(nasty_text, min_size=1, max_size=3),
                                                     st.lists(st.binary(max_size=4), min_size=1, max_size=2))),
    ("env", st.dictionaries(c_text.filter(lambda k: k and "=" not in k), c_text, max_size=4),
     st.one_of(wrong_values, st.dictionaries(nasty_text, nasty_text, min_size=1, max_size=2),
               st.just({"A": 1}), st.just({1: "a"}))),
    ("stdin", st.binary(max_size=600), st.one_of(wrong_values.filter(lambda v: not isinstance(v, bytes)),
                                                 st.text(max_size=4))),
    ("sysroot", st.sampled_from([None, "/usr/i686-linux-gnu", "/tmp"]),
     st.one_of(wrong_values, st.sampled_from(["/nonexistent/root", "/etc/hostname", "", "a\0b"]))),
    ("cwd", st.sampled_from(["/", "/usr", "/a/../b/./c"]), st.one_of(wrong_values, st.sampled_from(
        ["", "relative", "a\0b", "/" + "x" * 5000]))),
]


@settings(max_examples=fuzz_examples(150))
@given(data=st.data())
def test_elf_process_options_open_or_are_refused(data: st.DataObject) -> None:
    options = dict(data.draw(one_wrong(process_pieces)))
    try:
        s = kpsdk.open(f"elf:{PROG}", **options)
    except Exception as e:  # noqa: BLE001 - the property is which exceptions
        expect_kpsdk_error(e)
        return
    with s:
        event("opened")
        assert s.run(timeout=5) == 0  # the freestanding fixture runs as ever, whatever it was given


@pytest.fixture(scope="module")
def linuxprog(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/programs/linuxprog.c, static, for x86_64 (see tests/test_linux_programs.py)."""
    from tests.test_linux_programs import SOURCE

    cc = require_tool("x86_64-linux-gnu-gcc", "gcc libc6-dev")
    exe = tmp_path_factory.mktemp("fuzz-linuxprog") / "linuxprog"
    subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
    return str(exe)


@settings(max_examples=fuzz_examples(25), deadline=None)
@given(args=st.lists(c_text, max_size=4), greeting=c_text, stdin=st.binary(max_size=2000))
def test_a_programs_args_env_and_stdin_arrive_as_under_qemu_user(linuxprog: str, args: list[str], greeting: str,
                                                                  stdin: bytes) -> None:
    """What the program prints of its argv, GREETING and stdin is what it prints under qemu-user."""
    args = ["/no-file", "0", "500", *args]  # no mallocs, an ENOSYS call, no file: it prints its inputs, exits 3
    qemu = require_tool("qemu-x86_64", "qemu-user")
    env = {"GREETING": greeting}
    expected = subprocess.run([qemu, linuxprog, *args], input=stdin, env=env, capture_output=True, timeout=60,
                              check=False)
    with kpsdk.open(f"elf:{linuxprog}", args=args, env=env, stdin=stdin) as s:
        status = s.run(timeout=60)
        assert (s.console, status) == (expected.stdout.decode("utf-8", "replace"), expected.returncode)


# -- BTF fetch arguments (kernels since 6.5) on a synthetic BTF ---------------------------------------

#: the pieces of BTF arguments: tests/btfsynth.py's target(int dfd, char *name, struct outer *obj)
BTF_PIECES = ["dfd", "name", "obj", "->", ".", "-", "in", "next", "len", "tag", "flags", "mode", "bit", "bits",
              "$arg*", "$arg", "$arg1", "$arg3", "$arg0", "$arg9", "$retval", "$retvalx", ":string", ":ustring",
              ":u32", ":x16", ":%pd", ":%pD", "x=", "+0(", ")", "nosuch", "_", "$comm", "%di", "[2]"]
btf_chains = st.builds(lambda var, steps, t: var + "".join(steps) + t,
                       st.sampled_from(["dfd", "name", "obj", "$retval", "$arg3", "x=obj", "+0(obj"]),
                       st.lists(st.builds(lambda sep, name: sep + name, st.sampled_from(["->", ".", "-"]),
                                          st.sampled_from(["in", "next", "len", "tag", "name", "flags", "bit", ""])),
                                max_size=4),
                       st.sampled_from(["", ":string", ":ustring", ":u32", ":%pd", ":%pD", ")", "):string"]))
btf_args = st.one_of(btf_chains, st.lists(st.sampled_from(BTF_PIECES), min_size=1, max_size=8).map("".join))
btf_definitions = st.builds(lambda head, place, args: " ".join([head, place, *args]),
                            st.sampled_from(["p:e", "r:e", "p", "r5:g/e"]),
                            st.sampled_from(["target"] * 6 + ["target+4", "none", "nosuchfunc", "0x1000",
                                                              "target%return"]),
                            st.lists(st.one_of(btf_args, nasty_text), max_size=5))


@settings(max_examples=fuzz_examples(400))
@given(text=st.one_of(btf_definitions, st.text()), kernel=st.sampled_from([(6, 1), (6, 5), (6, 12)]))
def test_btf_arguments_parse_or_are_refused_with_the_kernels_errors(text: str, kernel: tuple[int, int]) -> None:
    """Whatever a user writes with BTF names, ``->``, ``$arg*`` and ``%pd``: a definition, or the
    kernel's error with its caret on the line; its arguments are named as C identifiers."""
    from kpsdk.trace.btfargs import BtfArgs
    from tests.btfsynth import synthetic_btf

    parser = Parser(kpsdk.get_registry().arch("x86_64"), kernel=kernel, btf=BtfArgs(synthetic_btf(), 64))
    try:
        definition = parser.parse(text)
    except TraceDefinitionError as e:
        assert 0 <= e.column <= len(text) + 1 and len(e.error_log.splitlines()) == 3, e.error_log
        assert "\n" not in str(e)
        event(f"refused: {e.code}")
        return
    event("parsed" + (" with BTF" if any(a.fetch.btf for a in definition.args) else ""))
    assert all(re.fullmatch(r"[A-Za-z_]\w*", a.name) for a in definition.args)
    assert len({a.name for a in definition.args}) == len(definition.args)
