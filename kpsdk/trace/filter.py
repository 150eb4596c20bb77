"""``--filter``: the kernel's event-filter expressions on fetched values.

``events/kprobes/EVENT/filter`` takes ``FIELD OP VALUE`` predicates joined by
``&&`` and ``||``, with ``!`` and parentheses.  OP is one of ``== != < <= > >=``,
``&`` (any bit in common) and ``~`` (a glob, strings only).  VALUE is an
integer (``0x..``, negative) or a string, quoted or bare::

    ret < 0 && name ~ "/etc/*"
    (a == 2 || a == 7) && !(b & 1)

A tokenizer and a recursive-descent parser build a small tree; nothing is
``eval``'d.  A filter only applies to the events that have every field it
names (as a filter on the group ``events/kprobes/filter`` does); the others
pass unfiltered.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kpsdk.errors import KpsdkError
from kpsdk.trace.grammar import parse_int

_OPS = ("==", "!=", "<=", ">=", "<", ">", "&&", "||", "&", "~", "!", "(", ")")


class FilterError(KpsdkError, ValueError):
    """A filter expression that does not parse: ``column`` (0-based) points at the problem."""

    def __init__(self, message: str, expr: str, column: int) -> None:
        self.expr, self.column, self.reason = expr, column, message
        super().__init__(f"filter: {message} at column {column + 1} of {expr!r}")

    @property
    def error_log(self) -> str:
        prefix = "  Command: "
        return f"filter: error: {self.reason}\n{prefix}{self.expr}\n{' ' * (len(prefix) + self.column)}^"


@dataclass(frozen=True)
class Token:
    kind: str  # "op", "word", "string", "end"
    text: str
    column: int


def tokenize(expr: str) -> list[Token]:
    tokens: list[Token] = []
    i, n = 0, len(expr)
    while i < n:
        c = expr[i]
        if c.isspace():
            i += 1
            continue
        op = next((o for o in _OPS if expr.startswith(o, i)), None)
        if op is not None:
            tokens.append(Token("op", op, i))
            i += len(op)
            continue
        if c in "\"'":
            end = expr.find(c, i + 1)
            if end < 0:
                raise FilterError("the string is not closed", expr, i)
            tokens.append(Token("string", expr[i + 1:end], i))
            i = end + 1
            continue
        start = i
        while i < n and not expr[i].isspace() and not any(expr.startswith(o, i) for o in _OPS):
            i += 1
        tokens.append(Token("word", expr[start:i], start))
    tokens.append(Token("end", "", n))
    return tokens


Predicate = Callable[[dict[str, Any]], bool]


@dataclass
class Filter:
    """A parsed filter: call it with an event's fields; ``fields`` are the names it reads."""

    expr: str
    fields: frozenset[str]
    predicate: Predicate

    def applies_to(self, names: set[str] | frozenset[str]) -> bool:
        return self.fields <= set(names)

    def __call__(self, values: dict[str, Any]) -> bool:
        return self.predicate(values)


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0
        self.fields: set[str] = set()

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def error(self, message: str, tok: Token) -> FilterError:
        return FilterError(message, self.expr, tok.column)

    def parse(self) -> Predicate:
        pred = self.or_expr()
        tok = self.peek()
        if tok.kind != "end":
            raise self.error(f"unexpected {tok.text!r}", tok)
        return pred

    def or_expr(self) -> Predicate:
        left = self.and_expr()
        while self.peek().text == "||" and self.peek().kind == "op":
            self.next()
            right = self.and_expr()
            left = (lambda a, b: lambda v: a(v) or b(v))(left, right)
        return left

    def and_expr(self) -> Predicate:
        left = self.unary()
        while self.peek().text == "&&" and self.peek().kind == "op":
            self.next()
            right = self.unary()
            left = (lambda a, b: lambda v: a(v) and b(v))(left, right)
        return left

    def unary(self) -> Predicate:
        tok = self.peek()
        if tok.kind == "op" and tok.text == "!":
            self.next()
            inner = self.unary()
            return lambda v: not inner(v)
        if tok.kind == "op" and tok.text == "(":
            self.next()
            inner = self.or_expr()
            close = self.next()
            if close.text != ")":
                raise self.error("')' expected", close)
            return inner
        return self.predicate()

    def predicate(self) -> Predicate:
        field = self.next()
        if field.kind != "word" or not (field.text[:1].isalpha() or field.text[:1] == "_"):
            raise self.error("a field name expected", field)
        op = self.next()
        if op.kind != "op" or op.text not in ("==", "!=", "<", "<=", ">", ">=", "&", "~"):
            raise self.error("an operator expected (== != < <= > >= & ~)", op)
        value_tok = self.next()
        if value_tok.kind not in ("word", "string"):
            raise self.error("a value expected", value_tok)
        name = field.text
        self.fields.add(name)
        number = parse_int(value_tok.text) if value_tok.kind == "word" else None
        if op.text == "~":
            pattern = value_tok.text
            return lambda v: isinstance(v.get(name), str) and fnmatch.fnmatchcase(v[name], pattern)
        if op.text in ("<", "<=", ">", ">=", "&") and number is None:
            raise self.error(f"{op.text} compares numbers", value_tok)
        return _compare(name, op.text, number if number is not None else value_tok.text)


def _compare(name: str, op: str, want: int | str) -> Predicate:
    def test(values: dict[str, Any]) -> bool:
        got = values.get(name)
        if got is None or isinstance(got, list):
            return False
        if isinstance(want, int) and not isinstance(got, int):
            return op == "!=" if op in ("==", "!=") else False
        if op == "==":
            return bool(got == want)
        if op == "!=":
            return bool(got != want)
        if op == "&":
            return bool(int(got) & int(want))
        if op == "<":
            return bool(got < want)
        if op == "<=":
            return bool(got <= want)
        if op == ">":
            return bool(got > want)
        return bool(got >= want)

    return test


def parse_filter(expr: str) -> Filter:
    """Parse ``expr``; a :class:`FilterError` points at the column that is wrong."""
    parser = _Parser(expr)
    predicate = parser.parse()
    return Filter(expr, frozenset(parser.fields), predicate)
