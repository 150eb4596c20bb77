"""Which session a probe is being made for, while one of that session's verbs makes it.

A probe object is made before it is registered, so what it names by a bare name (a
uprobe's ``libc.so.6``) is looked up among every open session: with a riscv64 program
and an x86_64 one open, each maps a different ``libc.so.6``.  A session's decorator
(``@s.uprobe("libc.so.6:malloc")``) makes the probe for that session alone, so it
says so here while it makes it, and lookups ask :func:`lookup_sessions` which sessions
count.  A context variable, not a global: another thread making its own probe at the
same time keeps its own answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.session import Session

_making_for: ContextVar[Session | None] = ContextVar("kpsdk_making_for", default=None)


@contextmanager
def making_for(session: Session) -> Iterator[None]:
    """Within the block, probes are being made for ``session`` only."""
    token = _making_for.set(session)
    try:
        yield
    finally:
        _making_for.reset(token)


def lookup_sessions(open_sessions: Iterable[Session]) -> list[Session]:
    """The sessions a name is looked up in: the one a probe is being made for, else all of ``open_sessions``."""
    session = _making_for.get()
    return [session] if session is not None else list(open_sessions)
