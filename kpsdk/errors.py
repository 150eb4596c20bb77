"""Typed errors.

Every failure a user can cause or meet has its own class here, and carries the
context needed to act on it.  Probe registration errors are :class:`KprobeError`,
an :class:`OSError` whose ``errno`` is the one the Linux kernel's kprobes would
return for the same mistake, so code ported from a kernel module can check
``e.errno == errno.EINVAL`` exactly as before.  Only ``kpsdk/cli/exits.py``
turns these into exit codes.

Every class is defined here, whichever module raises it, so that one import
(``kpsdk.TraceDefinitionError``) catches it and no module has to import the
one that raises it.  The modules that raise one still export it under its
old path (``kpsdk.trace.grammar.TraceDefinitionError``, ``kpsdk.registry.PluginLoadError``...).
"""

from __future__ import annotations

import errno as _errno
import os


class KpsdkError(Exception):
    """Base class of every error kpsdk raises on purpose."""


class KprobeError(KpsdkError, OSError):
    """A probe operation failed; ``errno`` is the kernel's errno for the same case."""

    def __init__(self, err: int, message: str) -> None:
        OSError.__init__(self, err, f"{_errno.errorcode.get(err, str(err))}: {message}")
        self.reason = message

    def __str__(self) -> str:
        return str(self.strerror)


class FieldTypeError(KprobeError, TypeError):
    """A probe field holds a value of the wrong Python type (``Kprobe(offset="4")``).

    A ``KprobeError`` with ``EINVAL``, raised when the probe is made or
    registered, never at a hit; also a ``TypeError``, so ``except TypeError``
    keeps working.  ``field`` is the field's name and ``value`` what it held.
    """

    def __init__(self, owner: str, field: str, value: object, want: str) -> None:
        self.owner, self.field, self.value = owner, field, value
        super().__init__(_errno.EINVAL, f"{owner} field {field}={shown(value)}: want {want}, "
                                        f"not {type(value).__name__}")


class LocationError(KprobeError, ValueError):
    """A probe location that does not parse (``"add+"``, ``"prog:"``): ``EINVAL``, and a ``ValueError``."""


class ArgumentError(KpsdkError, TypeError, ValueError):
    """An argument of a kpsdk call that it does not accept: a value outside its range
    (``s.run(timeout=nan)``) or of the wrong type (``s.register_kprobe(42)``).

    The message names the argument, the value and what it wants.  It is both a
    ``TypeError`` and a ``ValueError``, so the ``except`` clause Python's own
    conventions suggest for either case catches it.
    """


class UnknownNameError(KpsdkError, LookupError):
    """A name (architecture, register, target kind, probe type) is not known.

    The message lists the valid names so the user can correct the spelling.
    """

    def __init__(self, what: str, name: str, valid: list[str] | tuple[str, ...]) -> None:
        self.what, self.name, self.valid = what, name, tuple(valid)
        super().__init__(f"unknown {what} {name!r}; valid: {', '.join(sorted(self.valid))}")


class PluginLoadError(KpsdkError):
    """A plugin named with ``-p`` could not be found or imported (raised by :mod:`kpsdk.registry`)."""


class TargetError(KpsdkError):
    """The target could not be opened, or cannot do what was asked."""


class UnsupportedTargetError(TargetError):
    """The requested architecture/target combination cannot work on this machine.

    The message names the cause (for example an upstream emulator bug) and the
    alternative.
    """


class NotEmulatedError(UnsupportedTargetError):
    """A program on the Unicorn target needs what its Linux layer does not emulate yet:
    a second thread or process (``clone``, ``fork``, ``execve``), a signal delivered, a
    read that would wait forever.  Raised by the run that met it; the message names the call.
    """


class CapabilityError(KprobeError, UnsupportedTargetError):
    """A feature needs something the architecture's backend does not provide.

    ``arch`` and ``capability`` name them (``out_of_line.return_jump``: the
    kretprobe trampoline on Unicorn); raised when the feature is asked for (a
    probe's registration, with ``errno`` ``EOPNOTSUPP``), never in the middle
    of a run.  A backend author reads the optional capabilities off
    :class:`kpsdk.arch.Arch`.
    """

    def __init__(self, arch: str, capability: str, feature: str) -> None:
        self.arch, self.capability, self.feature = arch, capability, feature
        KprobeError.__init__(self, _errno.EOPNOTSUPP,
                             f"{feature} needs the {capability!r} capability, which the {arch} backend lacks")


class ToolMissingError(TargetError):
    """A program kpsdk needs (gdb, QEMU, a compiler) is not installed.

    ``tool`` is the program and ``package`` the Debian package that provides it.
    """

    def __init__(self, tool: str, package: str) -> None:
        self.tool, self.package = tool, package
        super().__init__(f"{tool} is not installed (Debian: apt-get install {package})")


class GdbError(TargetError):
    """gdb answered ``^error`` to a command (:mod:`kpsdk.targets.live.mi`): the message names the command and
    quotes gdb's own."""


class TargetExited(TargetError):
    """The target went away (process killed, connection closed) while kpsdk needed it."""


class TargetStalled(TargetError):
    """A live target stopped making progress for longer than its stall limit.

    QEMU was stopped (``SIGSTOP``), or gdb stopped answering because it was stuck
    talking to the gdbstub, or the target could not be halted for ``run(timeout=...)``
    or ``stop()``.  gdb has been killed and the session closed: a gdb that lost
    step with its stub cannot be trusted with the next hit.
    """


class TargetFault(TargetError):
    """The emulated or live CPU faulted while running target code, or target memory
    could not be read or written.

    ``pc`` is where the CPU stopped; for memory that could not be reached, ``address``
    is where it is (and ``pc`` None: no instruction was running).  ``where`` is the
    ``sym+0xoff`` of that address.
    """

    def __init__(self, message: str, pc: int | None = None, where: str | None = None, *,
                 address: int | None = None) -> None:
        self.pc, self.where, self.address = pc, where, address
        if pc is not None:
            loc = f" at {where or ''}{' ' if where else ''}(pc={pc:#x})"
        elif address is not None:
            loc = f" at {where} ({address:#x})" if where else f" at {address:#x}"
        else:
            loc = ""
        super().__init__(f"{message}{loc}")


class ProbeHandlerError(KpsdkError):
    """A probe handler raised and no fault_handler claimed it (K4).

    The original exception is the ``__cause__``; ``probe`` and ``address`` say
    where it happened.
    """

    def __init__(self, probe: object, address: int, where: str, phase: str, exc: BaseException) -> None:
        self.probe, self.address, self.where, self.phase = probe, address, where, phase
        super().__init__(
            f"{phase} of {probe!r} at {where} ({address:#x}) raised "
            f"{type(exc).__name__}: {exc}"
        )


class SymbolError(KpsdkError, LookupError):
    """A symbol or ``sym+off`` expression could not be resolved."""


class ImageFormatError(TargetError, SymbolError):
    """A file kpsdk was given to read cannot be used: a malformed or truncated ELF file,
    kernel image, kallsyms table, System.map or kallsyms list, one too large to read, or
    something that is not a regular file at all (a FIFO, ``/dev/zero``).

    ``path`` is the file (or ``<text>``/``<image>`` for data passed in memory), ``line`` the
    line of a text file (else None), and the message says what is wrong and where: the field,
    the file offset or the line.  It is both a :class:`TargetError` (what opening a target on
    a bad file raises) and a :class:`SymbolError` (what reading symbols from a bad file
    raises), so code written against either keeps catching it.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str, line: int | None = None) -> None:
        self.path, self.problem, self.line = os.fspath(path), problem, line
        super().__init__(f"{self.path}{'' if line is None else f':{line}'}: {problem}")


# -- tracing: definitions and filters (kpsdk.trace) -------------------------------------------

#: longest ``detail`` a one-line error message keeps: every register list, not a fuzzed 5000-digit number
DETAIL_MAX = 500
#: the kernel's error_log texts (trace_probe.h ERRORS), by code
TRACE_ERRORS: dict[str, str] = {
    "FILE_NOT_FOUND": "Failed to find the given file",
    "NO_REGULAR_FILE": "Not a regular file",
    "BAD_UPROBE_OFFS": "Invalid uprobe offset",
    "MAXACT_NO_KPROBE": "Maxactive is not for kprobe",
    "BAD_MAXACT": "Invalid maxactive number",
    "MAXACT_TOO_BIG": "Maxactive is too big",
    "BAD_PROBE_ADDR": "Invalid probed address or symbol",
    "BAD_RETPROBE": "Retprobe address must be an function entry",
    "BAD_ADDR_SUFFIX": "Invalid probed address suffix",
    "NO_GROUP_NAME": "Group name is not specified",
    "GROUP_TOO_LONG": "Group name is too long",
    "BAD_GROUP_NAME": "Group name must follow the same rules as C identifiers",
    "NO_EVENT_NAME": "Event name is not specified",
    "EVENT_TOO_LONG": "Event name is too long",
    "BAD_EVENT_NAME": "Event name must follow the same rules as C identifiers",
    "EVENT_EXIST": "Given group/event name is already used by another event",
    "RETVAL_ON_PROBE": "$retval is not available on probe",
    "BAD_STACK_NUM": "Invalid stack number",
    "BAD_ARG_NUM": "Invalid argument number",
    "BAD_VAR": "Invalid $-variable specified",
    "BAD_REG_NAME": "Invalid register name",
    "BAD_MEM_ADDR": "Invalid memory address",
    "BAD_IMM": "Invalid immediate value",
    "IMMSTR_NO_CLOSE": "String is not closed with '\"'",
    "FILE_ON_KPROBE": "File offset is not available with kprobe",
    "BAD_FILE_OFFS": "Invalid file offset value",
    "SYM_ON_UPROBE": "Symbol is not available with uprobe",
    "TOO_MANY_OPS": "Dereference is too much nested",
    "DEREF_NEED_BRACE": "Dereference needs a brace",
    "BAD_DEREF_OFFS": "Invalid dereference offset",
    "DEREF_OPEN_BRACE": "Dereference brace is not closed",
    "COMM_CANT_DEREF": "$comm can not be dereferenced",
    "BAD_FETCH_ARG": "Invalid fetch argument",
    "ARRAY_NO_CLOSE": "Array is not closed",
    "BAD_ARRAY_SUFFIX": "Array has wrong suffix",
    "BAD_ARRAY_NUM": "Invalid array size",
    "ARRAY_TOO_BIG": "Array number is too big",
    "BAD_TYPE": "Unknown type is specified",
    "BAD_STRING": "String accepts only memory argument",
    "BAD_SYMSTRING": "Symbol String doesn't accept data/userdata",
    "BAD_BITFIELD": "Invalid bitfield",
    "ARG_NAME_TOO_LONG": "Argument name is too long",
    "NO_ARG_NAME": "Argument name is not specified",
    "BAD_ARG_NAME": "Argument name must follow the same rules as C identifiers",
    "USED_ARG_NAME": "This argument name is already used",
    "ARG_TOO_LONG": "Argument expression is too long",
    "NO_ARG_BODY": "No argument expression",
    "TOO_MANY_ARGS": "Too many arguments are specified",
    "NEED_STRING_TYPE": "$comm and immediate-string only accepts string type",
    "NOFENTRY_ARGS": "$arg* can be used only on function entry or exit",
    # BTF fetch arguments (kernels since 6.5; the texts of Debian 13's 6.12)
    "NOSUP_BTFARG": "BTF is not available or not supported",
    "NO_BTFARG": "This variable is not found at this probe point",
    "NO_BTF_ENTRY": "No BTF entry for this probe point",
    "DOUBLE_ARGS": "$arg* can be used only once in the parameters",
    "ARGS_2LONG": "$arg* failed because the argument list is too long",
    "NO_PTR_STRCT": "This is not a pointer to union/structure.",
    "NOSUP_DAT_ARG": "Non pointer structure/union argument is not supported.",
    "BAD_HYPHEN": "Failed to parse single hyphen. Forgot '>'?",
    "NO_BTF_FIELD": "This field is not found.",
    "BAD_BTF_TID": "Failed to get BTF type info.",
    "BAD_TYPE4STR": "This type does not fit for string.",
    "NO_RETVAL": "This function returns 'void' type",
    "BAD_INSN_BNDRY": "Probe point is not an instruction boundary",
    "NO_EVENT_INFO": "This requires both group and event name to attach",
    "BAD_PROBE_TYPE": "Unknown probe type (want p, r or -)",
    "NO_PROBE_POINT": "No probe point is specified",
}


class NeverMappedWarning(KpsdkError, UserWarning):
    """A run ended and a uprobe in it never fired because its file was never mapped (a
    path to another copy of a library, a library the program never loads)."""


class ExecNotFollowedWarning(KpsdkError, UserWarning):
    """The program called ``execve``: kpsdk does not follow the new program yet (qemu-user
    hands it to the host's ``execve``, outside the session's gdbstub), so it runs unprobed
    and the run ends with its exit status."""


class TraceDefinitionError(KpsdkError, ValueError):
    """A probe definition the kernel would refuse, with where it is wrong (:mod:`kpsdk.trace.grammar`).

    ``code`` is the kernel's error name (``BAD_REG_NAME``), ``message`` its
    ``error_log`` text (:data:`TRACE_ERRORS`), ``column`` the 0-based position
    in ``definition`` the caret points at, ``detail`` what was wrong there and
    ``subsystem`` ``trace_kprobe`` or ``trace_uprobe``.  ``str()`` is one line;
    :attr:`error_log` is the kernel's three-line form (the error, the command,
    a caret under the column).
    """

    def __init__(self, code: str, definition: str, column: int, detail: str = "",
                 subsystem: str = "trace_kprobe") -> None:
        self.code = code
        self.message = TRACE_ERRORS[code]
        self.definition = definition
        self.column = max(0, min(column, len(definition) + 1))
        self.detail = detail
        self.subsystem = subsystem
        # one line whatever the input's length: the full text is in error_log, with its caret
        short = detail if len(detail) <= DETAIL_MAX else f"{detail[:DETAIL_MAX - 3]}..."
        extra = f" ({short})" if detail else ""
        super().__init__(f"{subsystem}: {self.message}{extra} at column {self.column + 1} of {shown(definition)}")

    @property
    def error_log(self) -> str:
        """The kernel's ``error_log`` entry: message, ``Command:`` line and a caret."""
        return caret_log(f"{self.subsystem}: error: {self.message}", self.definition, self.column)


#: the hist trigger's error_log texts (kernel/trace/trace_events_hist.c, ``err_text``), by name
HIST_ERRORS: dict[str, str] = {
    "BAD_FIELD_MODIFIER": "Invalid field modifier",
    "FIELD_NOT_FOUND": "Couldn't find field",
    "EMPTY_ASSIGNMENT": "Empty assignment",
    "INVALID_SORT_MODIFIER": "Invalid sort modifier",
    "EMPTY_SORT_FIELD": "Empty sort field",
    "TOO_MANY_SORT_FIELDS": "Too many sort fields (Max = 2)",
    "INVALID_SORT_FIELD": "Sort field must be a key or a val",
    "NAMED_MISMATCH": "Named hist trigger doesn't match existing named trigger (includes variables)",
    "TRIGGER_EEXIST": "Hist trigger already exists",
}


class FunctionsError(KpsdkError, ValueError):
    """``kpsdk trace --functions GLOB`` (:mod:`kpsdk.trace.functions`): no ``$func`` template, an
    event name that would repeat for each function, no matching function, or too many."""


#: what the shell says when the kernel fails a trigger write without an error_log entry
ERRNO_TEXTS = {"EINVAL": "Invalid argument", "ENOENT": "No such file or directory"}


class TriggerError(KpsdkError, ValueError):
    """An event trigger (``hist:...``, ``stacktrace``) the kernel would refuse (:mod:`kpsdk.trace.triggers`).

    ``code`` is the kernel's name (``FIELD_NOT_FOUND``) when the kernel writes an
    ``error_log`` entry for it, with ``message`` its text and ``column`` (0-based)
    where the kernel's caret goes in ``command`` (``hist:`` and what follows it, as
    the kernel's ``last_cmd``); ``location`` is the kernel's ``hist:GROUP:EVENT``.
    Where the kernel only fails the write (``EINVAL``, no ``error_log``), ``code`` is
    ``EINVAL`` and ``detail`` says what was wrong.  A trigger the kernel would take
    but kpsdk cannot run (variables, expressions, actions) is ``UNSUPPORTED``.
    """

    def __init__(self, code: str, command: str, column: int = 0, detail: str = "", location: str = "hist") -> None:
        self.code = code
        self.message = HIST_ERRORS.get(code) or ERRNO_TEXTS.get(code, "not supported by kpsdk")
        self.command = command
        self.column = max(0, min(column, len(command)))
        self.detail = detail
        self.location = location
        short = detail if len(detail) <= DETAIL_MAX else f"{detail[:DETAIL_MAX - 3]}..."
        extra = f" ({short})" if detail else ""
        super().__init__(f"{location}: {self.message}{extra} at column {self.column + 1} of {shown(command)}")

    @property
    def error_log(self) -> str | None:
        """The kernel's ``error_log`` entry with its caret, for the errors the kernel logs."""
        if self.code not in HIST_ERRORS:
            return None
        return caret_log(f"{self.location}: error: {self.message}", self.command, self.column)


class FilterError(KpsdkError, ValueError):
    """A filter expression that does not parse (:mod:`kpsdk.trace.filter`): ``column`` (0-based)
    points at the problem; :attr:`error_log` shows it with a caret, as a definition error does."""

    def __init__(self, message: str, expr: str, column: int) -> None:
        self.expr, self.column, self.reason = expr, column, message
        super().__init__(f"filter: {message} at column {column + 1} of {shown(expr)}")

    @property
    def error_log(self) -> str:
        return caret_log(f"filter: error: {self.reason}", self.expr, self.column)


# -- debug information (kpsdk.binfmt.dwarf) ------------------------------------------------------


class DebugInfoError(KpsdkError):
    """A question the DWARF reader (:mod:`kpsdk.binfmt.dwarf`) cannot answer: the base class of
    the errors below, so one ``except`` catches them all."""


class NoDebugInfoError(DebugInfoError, LookupError):
    """A program has no DWARF, neither in itself nor in a separate debug file.

    ``path`` is the program and ``looked`` every place searched, each with what was found
    there (``/usr/lib/debug/.build-id/ab/cdef.debug: no such file``, a debuglink whose CRC
    did not match...), so the user knows where to put the debug file or which ``debug_dir``
    to pass.
    """

    def __init__(self, path: str | os.PathLike[str], looked: list[str] | tuple[str, ...]) -> None:
        self.path, self.looked = os.fspath(path), tuple(looked)
        places = "; ".join(self.looked) if self.looked else "no .gnu_debuglink, no build-id"
        super().__init__(f"{self.path}: no DWARF debug information (looked in: {places})")


class DwarfFormatError(ImageFormatError, DebugInfoError):
    """The DWARF of a file is malformed where kpsdk read it (a DIE, a location list, a line
    program or a call frame entry): the message names the file, the section and the offset."""


class SplitDwarfError(DebugInfoError):
    """The file's compile units are split DWARF skeletons (``-gsplit-dwarf``): their DIEs are in
    ``.dwo`` files, which kpsdk does not read."""


class PerfSyntaxError(DebugInfoError):
    """A perf probe definition (``kpsdk trace -e 'parse_line:12 len'``) that cannot be translated
    into a kprobe_events/uprobe_events line: which one, and why (no program or vmlinux to
    read the DWARF of, a point or a variable the debug information does not have)."""

    def __init__(self, definition: str, problem: str) -> None:
        self.definition, self.problem = definition, problem
        super().__init__(f"perf probe definition {definition!r}: {problem}")


class NotStaticError(DebugInfoError):
    """A location asked for without a CPU (statically, for a probe definition) that only a CPU can
    answer: arithmetic on two registers, a comparison, a read of a value narrower than a word
    through a register-relative address.  The message says which."""


class NoSuchFunctionError(DebugInfoError, LookupError):
    """No function of that name in the debug information; ``similar`` lists names close to it."""

    def __init__(self, name: str, similar: list[str] | tuple[str, ...] = (), problem: str = "") -> None:
        self.name, self.similar = name, tuple(similar)
        hint = f"; similar: {', '.join(self.similar)}" if self.similar else ""
        super().__init__(problem or f"no function {name!r} in the debug information{hint}")


class NoSuchLineError(DebugInfoError, LookupError):
    """A source line no code comes from (``FILE:LINE``, ``FUNC:RELLINE``, a lazy pattern that
    matches no probeable line); ``lines`` lists the probeable lines nearby, when known."""

    def __init__(self, where: str, problem: str, lines: list[int] | tuple[int, ...] = ()) -> None:
        self.where, self.problem, self.lines = where, problem, tuple(lines)
        hint = f" (probeable lines: {', '.join(map(str, self.lines))})" if self.lines else ""
        super().__init__(f"{where}: {problem}{hint}")


class SourceNotFoundError(DebugInfoError, FileNotFoundError):
    """A source file the question needs (a lazy ``FUNC;PATTERN`` reads it) is not where the
    debug information says it was compiled; ``looked`` lists the paths tried."""

    def __init__(self, name: str, looked: list[str] | tuple[str, ...]) -> None:
        self.name, self.looked = name, tuple(looked)
        FileNotFoundError.__init__(self, f"source file {name!r} not found (looked at: {', '.join(self.looked)}); "
                                         "pass source_dir= where the sources are")

    def __str__(self) -> str:
        return str(self.args[0])


class NotInScopeError(DebugInfoError, LookupError):
    """A variable name that is not in scope at that pc; ``in_scope`` lists those that are."""

    def __init__(self, name: str, where: str, in_scope: list[str] | tuple[str, ...]) -> None:
        self.name, self.where, self.in_scope = name, where, tuple(in_scope)
        names = ", ".join(self.in_scope) if self.in_scope else "none"
        super().__init__(f"no variable {name!r} in scope at {where}; in scope: {names}")


class OptimizedOutError(DebugInfoError):
    """A variable in scope whose value the compiler did not keep at that pc (no location there,
    or a ``DW_OP_entry_value`` of a register that has changed since the entry)."""

    def __init__(self, name: str, where: str, why: str = "optimized out") -> None:
        self.name, self.where, self.why = name, where, why
        super().__init__(f"{name!r} at {where}: {why}")


class MemberPathError(DebugInfoError, ValueError):
    """A variable path (``buf->size``, ``argv[1]``, ``s.a.b``, ``*p``) that does not parse or does
    not fit the variable's type: ``column`` (0-based) points at the problem, and for an unknown
    member ``valid`` lists the members there are."""

    def __init__(self, path: str, column: int, problem: str, valid: list[str] | tuple[str, ...] = ()) -> None:
        self.path, self.column, self.problem, self.valid = path, column, problem, tuple(valid)
        hint = f"; members: {', '.join(self.valid)}" if self.valid else ""
        super().__init__(f"{shown(path)} at column {column + 1}: {problem}{hint}")


# -- many targets at once (kpsdk.matrix) -------------------------------------------------------


class MatrixError(KpsdkError):
    """Targets of a matrix did not run to their end (``MatrixResult.check()``, ``kpsdk matrix``'s
    exit status 1).  ``result`` is the :class:`~kpsdk.matrixrun.MatrixResult`: every target's
    status, error and records, the others' included."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


# -- kpsdk's own test programs --------------------------------------------------------------


class FixtureError(KpsdkError):
    """A bundled test program could not be built or checked (``python3 -m kpsdk.fixtures.build``):
    a cross compiler failed, or a file is not the ELF it should be."""


# -- what messages are made of -----------------------------------------------------------------

#: longest rendering of a user's value in a message (a fuzzed 5,000-character name stays one line)
SHOWN_MAX = 60


def shown(value: object) -> str:
    """``repr(value)``, cut to :data:`SHOWN_MAX` characters: a message names the input
    without copying all of it."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user's object whose repr fails still gets its error named
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= SHOWN_MAX else f"{text[:SHOWN_MAX - 3]}..."


def caret_log(header: str, command: str, column: int) -> str:
    """The kernel's three-line ``error_log`` entry: ``header``, ``Command: COMMAND``, a caret under
    ``column``.  A character that would break the line or not print (CR, tab, NUL) shows as a
    space, so the caret stays under its column and the entry three lines."""
    prefix = "  Command: "
    shown_command = "".join(c if c.isprintable() else " " for c in command)
    return f"{header}\n{prefix}{shown_command}\n{' ' * (len(prefix) + column)}^"


def strerror(err: int) -> str:
    """The symbolic name of an errno value (``EINVAL``), for messages."""
    return _errno.errorcode.get(err, os.strerror(err))
