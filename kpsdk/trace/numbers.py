"""Numbers in a user's text, ASCII digits only, as the kernel reads them.

Python's ``str.isdigit``, ``str.isdecimal``, ``int()`` and the regular expression ``\\d`` take
every Unicode decimal digit: ``"٣".isdigit()`` is True and ``int("٣")`` is 3, while
``"²".isdigit()`` is True and ``int("²")`` raises ValueError.  The kernel's ``kstrtoul`` and
the tracing grammar it serves take ``0``-``9`` (and hex letters after ``0x``) and nothing
else, so every number the trace package parses from a definition, a trigger or an option
goes through these checks first (kpsdk.trace.grammar.parse_uint is ``kstrtoul`` itself).
"""

from __future__ import annotations

from kpsdk.argcheck import parse_number


def ascii_digits(text: str) -> bool:
    """``text`` is one or more of ``0``-``9``: ``str.isdigit`` without Unicode's other digits."""
    return text.isascii() and text.isdigit()


def is_ascii_digit(char: str) -> bool:
    """One character of ``0``-``9`` (the start of a number, as the kernel's ``isdigit``)."""
    return len(char) == 1 and "0" <= char <= "9"


def parse_ascii_int(text: str) -> int | None:
    """``int(text, 0)`` for ASCII text only: an optional sign, then decimal, ``0x``, ``0o`` or
    ``0b`` digits; None for anything else (Unicode digits, ``_``, blanks, ``010``)."""
    return parse_number(text)
