"""``kpsdk trace --functions GLOB -e 'p $func ARGS'``: one event per matching function.

``kprobe_events`` takes no wildcards; perf (``perf probe 'vfs_*'``) and bpftrace
(``kprobe:vfs_*``) expand them before they reach the kernel, and so does kpsdk: a
definition whose probe point is ``$func`` is a template, written once per function of
the target whose name matches the shell glob, ``$func`` replaced by the name.  Each
event gets the kernel's generated name (``p_vfs_read_0``, ``r_vfs_read_0``): a name
written in the template would repeat, so only a group may be given (``p:mygrp/ $func``).

Functions that cannot be probed (NOKPROBE symbols, a first instruction kpsdk refuses)
are left out and counted; more than :data:`MAX_FUNCTIONS` matches is an error that
says how many there were, before anything is registered (a kernel's ``*`` is 50,000
breakpoints).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from kpsdk.binfmt.symbols import did_you_mean, is_glob
from kpsdk.errors import FunctionsError, KprobeError

if TYPE_CHECKING:
    from kpsdk.binfmt.symbols import SymbolTable

#: the most functions one --functions glob may trace (as ``kpsdk probe --kprobe GLOB``)
MAX_FUNCTIONS = 1000
#: the placeholder: the probe point word of a template
PLACEHOLDER = "$func"
#: a template: ``p|r[MAXACTIVE][:[GRP/]]`` then ``$func`` (with an optional +offs or %return), then the rest
_TEMPLATE = re.compile(r"^(?P<head>[pr][0-9]*(?::\S*)?)\s+\$func(?P<tail>(?:\+\S*|%return)?)(?P<rest>(?:\s.*)?)$")


def is_template(definition: str) -> bool:
    """Whether a definition's probe point is ``$func``."""
    return _TEMPLATE.match(definition.strip()) is not None


def check_templates(definitions: list[str], pattern: str) -> None:
    """The templates make sense: at least one, none naming its event (it would repeat)."""
    if not isinstance(pattern, str) or not pattern or not is_glob(pattern) and not pattern.isidentifier():
        raise FunctionsError(f"--functions {pattern!r}: want a shell glob of function names ('vfs_*')")
    templates = [d for d in definitions if is_template(d)]
    if not templates:
        raise FunctionsError(f"--functions {pattern!r}: no definition probes $func (write -e 'p $func ARGS' "
                             "or -e 'r $func $retval')")
    for d in templates:
        head = _TEMPLATE.match(d.strip())["head"]  # type: ignore[index]
        _, colon, name = head.partition(":")
        if colon and name and not name.endswith(("/", ".")):
            raise FunctionsError(f"{d!r}: with --functions each function's event is named for it (p_vfs_read_0); "
                                 f"an event name would repeat: leave it out, or give the group only "
                                 f"('{head.partition(':')[0]}:{name.split('/')[0]}/ $func')")


def placeholder_definitions(definitions: list[str], name: str = "kpsdk_func") -> list[str]:
    """The templates with a stand-in function name: what the grammar check before the run parses."""
    return [substitute(d, name) if is_template(d) else d for d in definitions]


def substitute(template: str, function: str) -> str:
    m = _TEMPLATE.match(template.strip())
    if m is None:
        return template
    return f"{m['head']} {function}{m['tail']}{m['rest']}"


def matching_functions(pattern: str, table: SymbolTable,
                       probeable: Callable[[int], object] | None = None) -> tuple[list[str], int]:
    """The names of the functions matching ``pattern`` (one name per address), and how many
    were left out because ``probeable(addr)`` raised a :class:`~kpsdk.errors.KprobeError`."""
    matched = table.matching(pattern)
    if not matched:
        close = table.suggest(pattern.replace("*", "").replace("?", ""))
        raise FunctionsError(f"--functions {pattern!r}: no function in the target matches{did_you_mean(close)}")
    seen: set[int] = set()
    names: list[str] = []
    skipped = 0
    for sym in matched:
        if sym.address in seen:
            continue
        if probeable is not None:
            try:
                probeable(sym.address)
            except KprobeError:
                skipped += 1
                continue
        seen.add(sym.address)
        names.append(sym.name)
    if len(names) > MAX_FUNCTIONS:
        raise FunctionsError(f"--functions {pattern!r} matches {len(names)} functions; at most {MAX_FUNCTIONS}: "
                             "narrow the pattern (kpsdk list TARGET --functions PATTERN shows them)")
    if not names:
        raise FunctionsError(f"--functions {pattern!r}: the {skipped} matching functions cannot be probed")
    return names, skipped


def expand(definitions: list[str], functions: list[str]) -> list[str]:
    """Each template once per function, in the order of the functions; other definitions as they are."""
    out: list[str] = []
    for d in definitions:
        if is_template(d):
            out += [substitute(d, f) for f in functions]
        else:
            out.append(d)
    return out
