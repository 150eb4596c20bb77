"""Numbers in trace definitions, triggers and options are ASCII digits only, as the kernel's
``kstrtoul`` reads them (issue 36, item 11).

Python's ``str.isdigit`` and ``int()`` take every Unicode decimal digit (``int("٣") == 3``)
and some that ``int()`` then refuses (``"²".isdigit()`` but ``int("²")`` raises ValueError):
``-t 'f:stacktrace:²'`` was a ValueError's traceback and ``stacktrace:٣`` a count of 3.  Every
parser of a number in kpsdk/trace/ gets, at each place a number goes, a digit from another
script (or a superscript): the answer is the parser's own typed error, never a Python
exception and never the number.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kpsdk
from kpsdk.errors import FilterError, KpsdkError, TraceDefinitionError, TriggerError
from kpsdk.trace.filter import parse_filter
from kpsdk.trace.grammar import Parser, parse
from kpsdk.trace.hist import parse_lhist
from kpsdk.trace.numbers import ascii_digits, parse_ascii_int
from kpsdk.trace.triggers import StackTrigger, parse_trigger

#: every character Python's str.isdigit takes that is not 0-9: other scripts' decimal digits
#: (Arabic-Indic, Devanagari, fullwidth...), superscripts, circled digits
OTHER_DIGITS = [chr(i) for i in range(0x80, 0x110000) if chr(i).isdigit()]
UNICODE_DIGITS = st.sampled_from(OTHER_DIGITS)

#: each place a number goes, as a template: {} is the number
DEFINITIONS = ["r{}:e fact", "p:e fact x=$arg{}", "p:e fact x=$stack{}", "p:e fact x=@{}", "p:e fact x=+{}(%sp)",
               "p:e fact x=\\{}", "p:e fact x=\\-{}", "p:e fact x=%ax:b{}@0/32", "p:e fact x=%ax:b4@{}/32",
               "p:e fact x=%ax:b4@0/{}", "p:e fact x=%ax:u8[{}]", "p:e fact+{}", "p:e 0x{}", "p:e /bin/ls:{}",
               "p:e /bin/ls:0x1 x=@+{}"]
TRIGGERS = ["stacktrace:{}", "stacktrace:{} if x > 1", "hist:keys=x:size={}", "hist:keys=x.buckets={}",
            "hist:keys=x:size=20{}"]


@pytest.fixture(scope="module")
def x86_64() -> kpsdk.Arch:
    return kpsdk.get_registry().arch("x86_64")


def _digits(draw: st.DrawFn) -> str:
    """One to three digits, at least one of them not ASCII."""
    ascii_part = draw(st.text(alphabet="0123456789", max_size=2))
    odd = draw(UNICODE_DIGITS)
    at = draw(st.integers(min_value=0, max_value=len(ascii_part)))
    return ascii_part[:at] + odd + ascii_part[at:]


@st.composite
def numbers(draw: st.DrawFn) -> str:
    return _digits(draw)


@settings(max_examples=300, deadline=None)
@given(number=numbers(), template=st.sampled_from(DEFINITIONS), kernel=st.sampled_from([None, (6, 1), (6, 12)]))
def test_definitions_take_no_other_digits(x86_64: kpsdk.Arch, number: str, template: str,
                                          kernel: tuple[int, int] | None) -> None:
    text = template.format(number)
    try:
        Parser(x86_64, kernel=kernel).parse(text)
    except TraceDefinitionError:
        return
    raise AssertionError(f"{text!r} was accepted")


@settings(max_examples=300, deadline=None)
@given(number=numbers(), template=st.sampled_from(TRIGGERS))
def test_triggers_take_no_other_digits(x86_64: kpsdk.Arch, number: str, template: str) -> None:
    definition = parse("p:e fact x=%ax:u32", x86_64)
    command = template.format(number)
    with pytest.raises(TriggerError):
        parse_trigger(command, definition, 8)


@settings(max_examples=200, deadline=None)
@given(number=numbers(), place=st.integers(min_value=1, max_value=3))
def test_lhist_takes_no_other_digits(number: str, place: int) -> None:
    parts = ["v", "0", "100", "10"]
    parts[place] = number
    with pytest.raises(KpsdkError, match="integers"):
        parse_lhist(",".join(parts))


@settings(max_examples=200, deadline=None)
@given(number=numbers())
def test_filters_take_no_other_digits(number: str) -> None:
    """A filter's number is kstrtoll's: a word of other digits is no number (a string compared
    with a number field is the kernel's error), and never equals the number it looks like."""
    try:
        matches = parse_filter(f"x == {number}")
    except FilterError:
        return
    value = int(unicodedata.numeric(number[0])) if len(number) == 1 else 0
    assert not matches({"x": value}), number


def test_the_reported_cases() -> None:
    definition = parse("p:f fact n=%di:s32")
    for command in ("stacktrace:²", "stacktrace:٣", "stacktrace:３", "stacktrace:1٣"):
        with pytest.raises(TriggerError, match="the count is a number"):
            parse_trigger(command, definition, 8)
    trigger = parse_trigger("stacktrace:0x10", definition, 8)  # kstrtoul(number, 0): hex and octal too
    assert isinstance(trigger, StackTrigger) and trigger.count == 16
    assert parse_trigger("stacktrace:3", definition, 8).count == 3  # type: ignore[union-attr]
    for text in ("p:e fact x=$arg²", "p:e fact x=$stack²", "p:e fact x=$arg٣"):
        with pytest.raises(TraceDefinitionError, match="BAD_VAR|Invalid"):
            parse(text)


@given(st.text(max_size=6))
def test_the_checks_are_ascii(text: str) -> None:
    assert ascii_digits(text) == (text != "" and all(c in "0123456789" for c in text))
    value = parse_ascii_int(text)
    if value is not None:
        assert text.isascii() and "_" not in text and text.strip() == text and value == int(text, 0)


@settings(max_examples=200, deadline=None)
@given(number=numbers())
def test_call_arguments_and_probe_locations_take_no_other_digits(number: str) -> None:
    """The same rule where kpsdk reads a number for itself: --call's arguments, a probe's
    location (``0x...``, ``SYM+OFF``) and kpsdk.argcheck.parse_number under them."""
    import typer

    from kpsdk.argcheck import parse_number
    from kpsdk.cli.parsing import parse_call
    from kpsdk.errors import LocationError
    from kpsdk.probe import location_fields

    assert parse_number(number) is None and parse_number("-" + number) is None
    with pytest.raises(typer.BadParameter, match="not an integer"):
        parse_call(f"loop {number}")
    for where in (number, f"add+{number}"):
        with pytest.raises(LocationError):
            location_fields(where)


def test_int_forms_kept() -> None:
    from kpsdk.argcheck import parse_number

    assert [parse_number(t) for t in ("0x1F", "-5", "+7", "0o17", "0b101", "0", "00")] == [31, -5, 7, 15, 5, 0, 0]
    assert [parse_number(t) for t in ("010", "1_000", " 5", "5 ", "", "0x", "٣")] == [None] * 7
