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

Everything that can be wrong with a filter is found when it is parsed, never
at a hit: it is at most :data:`MAX_FILTER_LEN` bytes (the kernel's own limit)
and nests ``(`` and ``!`` at most :data:`MAX_FILTER_DEPTH` deep; a chain of
``&&`` or ``||`` is evaluated as a list, so its length costs no stack.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kpsdk.errors import FilterError
from kpsdk.trace.grammar import parse_int

_OPS = ("==", "!=", "<=", ">=", "<", ">", "&&", "||", "&", "~", "!", "(", ")")
#: longest filter in bytes: the kernel's event_filter_write refuses PAGE_SIZE or more
MAX_FILTER_LEN = 4095
#: deepest nesting of ``(`` and ``!``.  The kernel's parser keeps an explicit stack, bounded only
#: by the length; this one recurses, and a hit evaluates one Python call per level inside the
#: handler's own stack, so it stops far below Python's recursion limit (1000) and far above any
#: filter a person writes.
MAX_FILTER_DEPTH = 64


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
#: the parsed expression as data (:data:`kpsdk.fetchprog.FilterNode`): what the native path
#: compiles to C, the predicate's twin
Tree = tuple[Any, ...]


@dataclass
class Filter:
    """A parsed filter: call it with an event's fields; ``fields`` are the names it reads."""

    expr: str
    fields: frozenset[str]
    predicate: Predicate
    #: the same expression as a tree: ("or"|"and", [trees]), ("not", tree), ("cmp", field, op,
    #: int | str), ("glob", field, pattern)
    tree: Tree | None = None

    def applies_to(self, names: set[str] | frozenset[str]) -> bool:
        return self.fields <= set(names)

    def __call__(self, values: dict[str, Any]) -> bool:
        return self.predicate(values)


class _Parser:
    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.tokens = tokenize(expr)
        self.i = 0
        self.depth = 0
        self.fields: set[str] = set()

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at_op(self, text: str) -> bool:
        tok = self.peek()
        return tok.kind == "op" and tok.text == text

    def error(self, message: str, tok: Token) -> FilterError:
        return FilterError(message, self.expr, tok.column)

    def parse(self) -> tuple[Predicate, Tree]:
        pred = self.or_expr()
        tok = self.peek()
        if tok.kind != "end":
            raise self.error(f"unexpected {tok.text!r}", tok)
        return pred

    def or_expr(self) -> tuple[Predicate, Tree]:
        terms = [self.and_expr()]
        while self.at_op("||"):
            self.next()
            terms.append(self.and_expr())
        return _chain([p for p, _ in terms], True), terms[0][1] if len(terms) == 1 else ("or", [t for _, t in terms])

    def and_expr(self) -> tuple[Predicate, Tree]:
        terms = [self.unary()]
        while self.at_op("&&"):
            self.next()
            terms.append(self.unary())
        return _chain([p for p, _ in terms], False), terms[0][1] if len(terms) == 1 else ("and", [t for _, t in terms])

    def unary(self) -> tuple[Predicate, Tree]:
        tok = self.peek()
        if tok.kind != "op" or tok.text not in ("!", "("):
            return self.predicate()
        self.next()
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            raise self.error(f"'(' and '!' nest deeper than {MAX_FILTER_DEPTH} levels", tok)
        if tok.text == "!":
            inner, inner_tree = self.unary()
            result: Predicate = lambda v: not inner(v)
            tree: Tree = ("not", inner_tree)
        else:
            result, tree = self.or_expr()
            close = self.next()
            if close.text != ")":
                raise self.error("')' expected", close)
        self.depth -= 1
        return result, tree

    def predicate(self) -> tuple[Predicate, Tree]:
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
        if number is None and value_tok.kind == "word" and _INTEGER.fullmatch(value_tok.text):
            raise self.error("an integer out of range (64 bits) or not a number", value_tok)
        if op.text == "~":
            pattern = value_tok.text
            return (lambda v: isinstance(v.get(name), str) and fnmatch.fnmatchcase(v[name], pattern),
                    ("glob", name, pattern))
        if op.text in ("<", "<=", ">", ">=", "&") and number is None:
            raise self.error(f"{op.text} compares numbers", value_tok)
        want = number if number is not None else value_tok.text
        return _compare(name, op.text, want), ("cmp", name, op.text, want)


def _chain(terms: list[Predicate], decides: bool) -> Predicate:
    """``||`` (``decides=True``: the first true term decides) or ``&&`` (the first false one) over
    ``terms``, as one loop: a chain of any length costs one stack frame at a hit."""
    if len(terms) == 1:
        return terms[0]
    if len(terms) == 2:  # the common case, without the loop's overhead at every hit
        first, second = terms
        return (lambda v: first(v) or second(v)) if decides else (lambda v: first(v) and second(v))

    def chain(values: dict[str, Any]) -> bool:
        for term in terms:
            if term(values) == decides:
                return decides
        return not decides

    return chain


#: a word written as an integer: one :func:`parse_int` refuses (beyond 64 bits, 089) is an error,
#: as the kernel's "Illegal integer value", not a bare string
_INTEGER = re.compile(r"[+-]?(0[xX][0-9a-fA-F]+|[0-9]+)")


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
    size = len(expr.encode("utf-8", "surrogatepass"))
    if size > MAX_FILTER_LEN:
        raise FilterError(f"the filter is {size} bytes; at most {MAX_FILTER_LEN} (the kernel's limit)", expr, 0)
    parser = _Parser(expr)
    predicate, tree = parser.parse()
    return Filter(expr, frozenset(parser.fields), predicate, tree)
