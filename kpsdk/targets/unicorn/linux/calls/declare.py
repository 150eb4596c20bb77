"""How a handler says which system calls it answers, and how ``--strace`` prints their arguments.

A handler is a method marked ``@syscall(NAME, args=KINDS)``, once per call it answers
(``getuid``, ``geteuid``, ``getuid32``... are one method with four marks).  The name is
the kernel's, as the arch's table spells it (:mod:`kpsdk.arch_backends.syscall_numbers`);
the kinds are what strace(1) shows of each argument, read by
:class:`kpsdk.cli.strace.StracePrinter`.  Keeping both at the handler is the point: a new
call is one method, its name and its arguments in one place, and the printer never lists
calls of its own.

The kinds, one word per argument, in order, each printed as strace prints that argument
(:mod:`kpsdk.cli.strace`): numbers ``d`` (int), ``ld`` (long), ``u``, ``x`` (hex), ``p``
(pointer: NULL or hex), ``off64`` (a 64-bit offset: two registers on a 32-bit arch),
``llseekoff`` (_llseek's high and low words), ``pgoff`` (mmap2's offset, in pages),
``mode`` (octal); descriptors ``fd``, ``dirfd`` (AT_FDCWD); strings ``path`` (read at
entry), ``wbuf`` (the next argument's count of bytes, read at entry), ``rbuf`` (as many
bytes as the call returned, read at exit), ``opath`` (a path the call writes); flags
``oflags`` (with a mode after it when O_CREAT/O_TMPFILE), ``oflagsonly``, ``prot``,
``mflags``, ``amode``, ``atflags``, ``faflags`` (faccessat2's), ``statxflags``,
``statxmask``, ``waitopts``, ``mclflags``, ``grndflags``; constants ``whence``,
``fcntlcmd`` and ``fcntlarg`` (as the command wants it), ``ioreq`` and ``ioarg`` (as the
request wants it), ``signo``, ``sighow``, ``fadvice``, ``rlimit``, ``archprctl``,
``sockfamily``, ``socktype``, ``sockproto`` (by the family), ``socklevel``, ``sockopt``
(by the level); structures, read at exit unless said: ``stat``, ``stat64``, ``statx``,
``sigaction`` (read at entry), ``osigaction``, ``sigset`` (read at entry), ``osigset``,
``wstatus``, ``fdpair``, ``dirents``, ``intout`` and ``loffout`` (``[N]``), ``inoutint``
(``[N]``, or ``[N => M]`` when the call changed it); ``clone`` (first: the call prints as
strace's clone, its arguments named).  ``args=""``: a call without arguments; no ``args``:
strace prints the six argument registers in hex (a call not decoded yet).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

#: the argument kinds :class:`kpsdk.cli.strace.StracePrinter` formats
KINDS = frozenset({
    "d", "ld", "u", "x", "p", "off64", "llseekoff", "pgoff", "mode", "fd", "dirfd", "path", "wbuf", "rbuf", "opath",
    "oflags", "oflagsonly", "prot", "mflags", "amode", "atflags", "faflags", "statxflags", "statxmask", "waitopts",
    "mclflags", "grndflags", "whence", "fcntlcmd", "fcntlarg", "ioreq", "ioarg", "signo", "sighow", "fadvice",
    "rlimit", "archprctl", "sockfamily", "socktype", "sockproto", "socklevel", "sockopt", "stat", "stat64", "statx",
    "sigaction", "osigaction", "sigset", "osigset", "wstatus", "fdpair", "dirents", "intout", "loffout", "inoutint",
    "clone",
})
#: where the marks are kept on a handler function
MARKS = "__kpsdk_syscalls__"

F = TypeVar("F", bound=Callable[..., "int | None"])


@dataclass(frozen=True)
class Declared:
    """One call a handler answers: its name and, when strace decodes it, its argument kinds."""

    name: str
    args: tuple[str, ...] | None


def _kinds(name: str, args: str | None) -> tuple[str, ...] | None:
    if args is None:
        return None
    kinds = tuple(args.split())
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"@syscall({name!r}): unknown argument kinds {unknown} (known: {sorted(KINDS)})")
    return kinds


def syscall(name: str, args: str | None = None) -> Callable[[F], F]:
    """Mark the method as the handler of call ``name`` (strace's argument kinds: ``args``)."""
    declared = Declared(name, _kinds(name, args))

    def mark(fn: F) -> F:
        vars(fn).setdefault(MARKS, []).append(declared)
        return fn

    return mark


def signature_only(name: str, args: str) -> Declared:
    """A call with no handler in the Linux layer that strace still decodes (``exit``: the
    target ends the run itself): listed in a module's ``STRACE_ONLY``."""
    return Declared(name, _kinds(name, args))


def marks(fn: Any) -> list[Declared]:
    """The calls ``fn`` was marked for (none: not a handler)."""
    found = getattr(fn, MARKS, None)
    return list(found) if isinstance(found, list) else []


def collect(cls: type, extra: Iterable[Declared] = ()) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Every handler of ``cls`` (its bases' too): the method's attribute name by call name, and
    the strace kinds by call name (with ``extra``'s).  Two handlers of one call are an error."""
    handlers: dict[str, str] = {}
    signatures: dict[str, tuple[str, ...]] = {}
    for klass in reversed(cls.__mro__):
        for attr, fn in vars(klass).items():
            for declared in marks(fn):
                owner = handlers.get(declared.name)
                if owner is not None and owner != attr:
                    raise TypeError(f"{cls.__name__}: {declared.name} has two handlers, {owner} and {attr}")
                handlers[declared.name] = attr
                if declared.args is not None:
                    signatures[declared.name] = declared.args
    for declared in extra:
        if declared.args is not None:
            signatures[declared.name] = declared.args
    return handlers, signatures
