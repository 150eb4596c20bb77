"""The ftrace dynamic-event grammar: ``kprobe_events``/``uprobe_events`` lines, parsed for real.

One module, because the grammar is one recursive-descent parser whose error positions
(the kernel's error_log columns) every rule shares; split, the rules would hand the parser's state
from module to module.

Users already know the kernel's syntax (``Documentation/trace/kprobetrace.rst`` and
``uprobetracer.rst``), so kpsdk accepts it as written::

    p[:[GRP/]EVENT] [MOD:]SYM[+offs]|MEMADDR [FETCHARGS]
    r[MAXACTIVE][:[GRP/]EVENT] [MOD:]SYM[+0] [FETCHARGS]
    p[:[GRP/]EVENT] SYM[+0]%return [FETCHARGS]
    p|r[:[GRP/]EVENT] PATH:OFFSET[%return] [FETCHARGS]          (uprobes)
    p|r[:[GRP/]EVENT] FILE:SYMBOL[+OFF][%return] [FETCHARGS]    (uprobes, a kpsdk extension)
    -:[GRP/]EVENT

A SYM or SYMBOL may name a PLT stub, ``malloc@plt`` (:mod:`kpsdk.binfmt.pltstubs`), as gdb and perf do.

A definition is split into words (the kernel's ``argv_split``), and each word
is read by a small recursive-descent parser over its characters
(:class:`_Cursor`).  Nothing is ``eval``'d and no regular expression guesses the
structure.  Every mistake raises :class:`~kpsdk.errors.TraceDefinitionError` with the
kernel's ``error_log`` message and the column it points at, so a user sees the
same caret they would see in ``/sys/kernel/tracing/error_log``.  The limits
are the kernel's (``trace_probe.h``, ``trace.h``, ``trace_kprobe.c``).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kpsdk.binfmt.filelocation import find_file, symbol_offset
from kpsdk.binfmt.pltstubs import SUFFIX as PLT_SUFFIX
from kpsdk.errors import TRACE_ERRORS, KprobeError, TargetError, TraceDefinitionError

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.session import Session
    from kpsdk.trace.btfargs import BtfArgs, LastType

#: most fetch arguments per event (trace_probe.h MAX_TRACE_ARGS)
MAX_TRACE_ARGS = 128
#: an event or group name must be shorter than this (trace.h MAX_EVENT_NAME_LEN)
MAX_EVENT_NAME_LEN = 64
#: longest argument name (trace_probe.h MAX_ARG_NAME_LEN)
MAX_ARG_NAME_LEN = 32
#: longest fetch-argument body, type included (trace_probe.h MAX_ARGSTR_LEN)
MAX_ARGSTR_LEN = 63
#: most elements of an array type (trace_probe.h MAX_ARRAY_LEN)
MAX_ARRAY_LEN = 64
#: most fetch instructions for one argument (trace_probe.h FETCH_INSN_MAX)
FETCH_INSN_MAX = 16
#: most kretprobe instances (trace_kprobe.c KRETPROBE_MAXACTIVE_MAX)
MAXACTIVE_MAX = 4096
#: largest $stackN / $argN on a kernel (THREAD_SIZE / sizeof(long), 16 KiB stacks, 64-bit)
PARAM_MAX_STACK = 16384 // 8
#: the kernel's reserved field names (trace_probe.c reserved_field_names)
RESERVED_NAMES = frozenset({"common_type", "common_flags", "common_preempt_count", "common_pid", "common_tgid",
                            "__probe_ip", "__probe_ret_ip", "__probe_func"})
#: the kernel's error_log texts by code (trace_probe.h ERRORS); they live with
#: :class:`TraceDefinitionError` in :mod:`kpsdk.errors`, this is their old name
MESSAGES = TRACE_ERRORS


# -- the parsed forms ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    """One fetch operation, a tree for nested dereferences.

    ``kind`` is one of ``reg`` (``name``), ``stack`` (``index``), ``stackp``,
    ``retval``, ``comm``, ``arg`` (``index``, 1-based), ``imm`` (``value``),
    ``immstr`` (``text``), ``mem`` (``value``: an address to load from),
    ``sym`` (``name`` + ``value`` offset: load from the symbol's address),
    ``foffs`` (``value``: a file offset, uprobes), ``deref`` (``value`` offset
    added to ``inner``'s value, then loaded; ``user`` for ``+u``).
    """

    kind: str
    name: str = ""
    value: int = 0
    index: int = 0
    text: str = ""
    inner: Fetch | None = None
    user: bool = False
    column: int = 0
    #: a BTF variable's last type (the kernel's ``ctx->last_type``), on the node it ends at:
    #: what types the argument when none is written (:mod:`kpsdk.trace.btfargs`)
    btf: LastType | None = None
    #: where the kernel's BTF type errors point (its ``ctx->offset`` after the variable)
    btf_column: int = 0

    @property
    def is_memory(self) -> bool:
        """The value is loaded from memory at an address (string types need one)."""
        return self.kind in ("deref", "mem", "sym", "foffs")

    def walk(self) -> list[Fetch]:
        """This node and every nested one, outermost first."""
        out: list[Fetch] = [self]
        if self.inner is not None:
            out += self.inner.walk()
        return out


#: basic types: name -> (size in bytes, signed, how printed)
BASIC_TYPES: dict[str, tuple[int, bool, str]] = {
    **{f"u{b}": (b // 8, False, "u") for b in (8, 16, 32, 64)},
    **{f"s{b}": (b // 8, True, "s") for b in (8, 16, 32, 64)},
    **{f"x{b}": (b // 8, False, "x") for b in (8, 16, 32, 64)},
    "char": (1, False, "char"),
}
STRING_TYPES = ("string", "ustring", "symstr")


@dataclass(frozen=True)
class ArgType:
    """A fetch argument's type.

    ``name`` as written (``u32``, ``string``, ``b4@2/8``); ``size`` in bytes (0
    for strings: a string has no fixed size; a word for ``symbol``, known once
    the arch is); ``display`` is how a value prints (``u``, ``s``, ``x``,
    ``char``, ``string``, ``symbol``); ``bitfield`` ``(width, offset)``;
    ``count`` the array length or 0.
    """

    name: str
    size: int
    signed: bool
    display: str
    bitfield: tuple[int, int] | None = None
    count: int = 0
    default: bool = False

    @property
    def is_string(self) -> bool:
        return self.display == "string"


@dataclass(frozen=True)
class FetchArg:
    """``NAME=FETCHARG[:TYPE]``: one field of an event."""

    name: str
    fetch: Fetch
    type: ArgType
    text: str
    column: int


@dataclass(frozen=True)
class ProbeDef:
    """One parsed definition line.

    ``op`` is ``p`` (a probe), ``r`` (a return probe, also ``p ...%return``) or
    ``-`` (clear an event).  Exactly one of ``symbol`` (+``offset``), ``addr``
    and ``path`` (+``offset``, a uprobe) is set for ``p``/``r``.
    """

    op: str
    group: str
    event: str
    text: str
    symbol: str | None = None
    module: str | None = None
    offset: int = 0
    addr: int | None = None
    path: str | None = None
    maxactive: int = 0
    args: tuple[FetchArg, ...] = field(default=())
    explicit_event: bool = False

    @property
    def is_return(self) -> bool:
        return self.op == "r"

    @property
    def is_uprobe(self) -> bool:
        return self.path is not None

    @property
    def full_name(self) -> str:
        return f"{self.group}/{self.event}"

    @property
    def location(self) -> str:
        """The probe point as written back: ``SYM+OFF``, ``0xADDR`` or ``PATH:0xOFF``."""
        if self.path is not None:
            return f"{self.path}:{self.offset:#x}"
        if self.symbol is not None:
            return f"{self.symbol}+{self.offset}" if self.offset else self.symbol
        return f"{self.addr:#x}"

    def needs_entry(self) -> bool:
        """A return probe that fetches ``$argN`` must keep them from the function's entry."""
        return self.is_return and any(n.kind == "arg" for a in self.args for n in a.fetch.walk())


#: the other dynamic events of ``dynamic_events``, which kpsdk does not define (yet)
_UNSUPPORTED_TYPES = {
    "f": "fprobe events (f:) are not supported by kpsdk yet: p SYM, or r SYM for f SYM%return, probes the same "
         "function entry and exit",
    "t": "tracepoint probes (t:) are not supported by kpsdk",
    "e": "event probes (e:) are not supported by kpsdk",
}


# -- words and characters ---------------------------------------------------------------------


@dataclass(frozen=True)
class Word:
    """A whitespace-separated word and where it starts in the definition."""

    text: str
    start: int


def split_words(text: str) -> list[Word]:
    """The kernel's ``argv_split``: words separated by spaces and tabs, with their columns."""
    words: list[Word] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        start = i
        while i < n and not text[i].isspace():
            i += 1
        words.append(Word(text[start:i], start))
    return words


def _is_ident_start(c: str) -> bool:
    return c.isascii() and (c.isalpha() or c == "_")


def _is_ident_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def is_good_name(name: str) -> bool:
    """The kernel's ``is_good_name``: a C identifier."""
    return bool(name) and _is_ident_start(name[0]) and all(_is_ident_char(c) for c in name[1:])


#: the largest value ``kstrtoul`` gives (64-bit); a larger one is its ``-ERANGE``
ULONG_MAX = 2**64 - 1
#: digits of ULONG_MAX in decimal: a longer number is out of range before Python converts it
_ULONG_DIGITS = len(str(ULONG_MAX))


def parse_uint(text: str) -> int | None:
    """``kstrtoul(text, 0)``: ``0x`` hex, leading ``0`` octal, else decimal; None if not all
    digits or beyond 64 bits (the kernel's ``-ERANGE``)."""
    if not text:
        return None
    lower = text.lower()
    if lower.startswith("0x"):
        digits, base = lower[2:], 16
    elif len(lower) > 1 and lower.startswith("0"):
        digits, base = lower[1:], 8
    else:
        digits, base = lower, 10
    allowed = "0123456789abcdef"[:base]
    if not digits or any(c not in allowed for c in digits):
        return None
    if base == 10 and len(digits.lstrip("0")) > _ULONG_DIGITS:
        return None  # also keeps int() from its 4300-digit limit
    value = int(digits, base)
    return value if value <= ULONG_MAX else None


def parse_int(text: str) -> int | None:
    """``kstrtol(text, 0)``: an optional sign, then :func:`parse_uint`."""
    if text[:1] in ("+", "-"):
        value = parse_uint(text[1:])
        return None if value is None else (-value if text[0] == "-" else value)
    return parse_uint(text)


class _Cursor:
    """A position in one word, for the recursive-descent parsers below.

    Columns it reports are absolute: the word's start in the definition plus
    the offset inside the word.
    """

    def __init__(self, text: str, base: int) -> None:
        self.text, self.base, self.pos = text, base, 0

    @property
    def column(self) -> int:
        return self.base + self.pos

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def take(self, pred: object) -> str:
        """Consume the longest run of characters for which ``pred(c)`` holds."""
        start = self.pos
        while self.pos < len(self.text) and pred(self.text[self.pos]):  # type: ignore[operator]
            self.pos += 1
        return self.text[start:self.pos]

    def accept(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False


def _number_char(c: str) -> bool:
    return c.isascii() and (c.isalnum())


def _symbol_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "_.$")


# -- the parser --------------------------------------------------------------------------------


@dataclass
class ParseContext:
    """What the argument parser needs to know about the probe it belongs to."""

    definition: str
    subsystem: str
    is_return: bool
    is_uprobe: bool
    arch: Arch | None
    word_bits: int
    #: ``$argN`` is allowed: the probe is on a function entry, or a return
    function_entry: bool = True
    #: the target kernel's ``(major, minor)``: its rules for ``$argN``; None: kpsdk's own
    kernel: tuple[int, int] | None = None
    #: a kprobe on a symbol at offset 0 (the kernel's ``TPARG_FL_FENTRY``)
    at_entry: bool = False
    #: the probed function's name (BTF variables are its parameters)
    function: str | None = None
    #: the kernel's BTF, where kpsdk has it (:class:`~kpsdk.trace.btfargs.BtfArgs`)
    btf: BtfArgs | None = None
    #: where every error of this argument points, when the kernel's log has no word for it (an
    #: argument ``$arg*`` added past the definition's last word: the column after it)
    fixed_column: int | None = None

    @property
    def btf_args(self) -> bool:
        """The kernel takes BTF fetch arguments here: a kprobe on a kernel since 6.5."""
        return self.kernel is not None and self.kernel >= BTF_ARGS_VERSION and not self.is_uprobe

    def error(self, code: str, column: int, detail: str = "") -> TraceDefinitionError:
        if self.fixed_column is not None:
            column = self.fixed_column
        return TraceDefinitionError(code, self.definition, column, detail, self.subsystem)


class Parser:
    """Parses definitions; ``arch`` (when known) checks register names and sets the word size.

    >>> Parser().parse("p:myprobe do_sys_open dfd=%ax filename=%dx").event
    'myprobe'
    """

    def __init__(self, arch: Arch | None = None, word_bits: int | None = None,
                 sessions: Sequence[Session] = (), kernel: tuple[int, int] | None = None,
                 ifunc_later: bool = False, btf: BtfArgs | None = None, unknown_later: bool = False) -> None:
        self.arch = arch
        #: the target kernel's BTF (:func:`kpsdk.trace.btfsyntax.kernel_btf_args`): on a kernel since 6.5,
        #: arguments may name the function's parameters and their members
        self.btf = btf
        #: the target kernel's version (:func:`kpsdk.kernel.version.kernel_version`): definitions are
        #: checked as that kernel checks them (:func:`arg_error`); None: kpsdk's own targets
        self.kernel = kernel
        self.word_bits = word_bits or (arch.bits if arch is not None else 64)
        #: where a uprobe's bare library name is looked for (:func:`kpsdk.binfmt.filelocation.find_file`),
        #: and an IFUNC symbol resolved (:mod:`kpsdk.binfmt.ifunc`)
        self.sessions = sessions
        #: a parse before any session (kpsdk trace's precheck): an IFUNC symbol no session can
        #: resolve yet is accepted with offset 0, to be resolved when the session parses the line
        self.ifunc_later = ifunc_later
        #: likewise a symbol the file lacks: the session's parse says so, naming the libraries it
        #: loaded that have it (``libc.so.6:malloc``), which no parse before the session can know
        self.unknown_later = unknown_later

    def parse(self, definition: str) -> ProbeDef:
        text = definition.rstrip("\n")
        words = split_words(text)
        if not words:
            raise TraceDefinitionError("NO_PROBE_POINT", text, 0, "empty definition")
        head = words[0]
        kind = head.text[0]
        if kind == "-":
            return self._parse_clear(text, words)
        if kind not in ("p", "r"):
            raise TraceDefinitionError("BAD_PROBE_TYPE", text, head.start, _UNSUPPORTED_TYPES.get(kind, f"{kind!r}"))
        if len(words) < 2:
            raise TraceDefinitionError("NO_PROBE_POINT", text, len(text) + 1, "give SYM[+offs], MEMADDR or "
                                       "PATH:OFFSET after the event")
        where = words[1]
        uprobe = _looks_like_uprobe(where.text)
        subsystem = "trace_uprobe" if uprobe else "trace_kprobe"
        is_return = kind == "r"
        # r[MAXACTIVE][:[GRP/]EVENT]
        cur = _Cursor(head.text, head.start)
        cur.pos = 1
        maxactive = 0
        digits = cur.take(_number_char) if cur.peek().isdigit() else ""
        if digits:
            if not is_return or uprobe:
                raise TraceDefinitionError("MAXACT_NO_KPROBE", text, head.start + 1, subsystem=subsystem)
            value = parse_uint(digits)
            if value is None or value == 0 or len(digits) > MAX_EVENT_NAME_LEN - 1:
                raise TraceDefinitionError("BAD_MAXACT", text, head.start + 1, subsystem=subsystem)
            if value > MAXACTIVE_MAX:
                raise TraceDefinitionError("MAXACT_TOO_BIG", text, head.start + 1, f"at most {MAXACTIVE_MAX}",
                                           subsystem=subsystem)
            maxactive = value
        group: str | None = None
        event: str | None = None
        if cur.accept(":"):
            group, event = _event_name(text, cur, subsystem, allow_empty=True)
        elif not cur.at_end():
            raise TraceDefinitionError("BAD_PROBE_TYPE", text, cur.column,
                                       f"{head.text!r}: want p, r, rMAXACTIVE, then an optional :[GRP/]EVENT",
                                       subsystem=subsystem)
        # the probe point
        fields: dict[str, object] = {}
        if uprobe:
            path, offset, ret = self._parse_uprobe_point(text, where)
            fields.update(path=path, offset=offset)
            is_return = is_return or ret
            default_event = f"p_{_uprobe_tail(path)}_{offset:#x}"
        else:
            symbol, module, offset, addr, ret = self._parse_kprobe_point(text, where, is_return)
            if ret:
                is_return = True
            fields.update(symbol=symbol, module=module, offset=offset, addr=addr)
            letter = "r" if is_return else "p"
            default_event = (f"{letter}_{symbol}_{offset}" if symbol is not None else f"{letter}_{addr:#x}")
        default_event = "".join(c if _is_ident_char(c) else "_" for c in default_event)[:MAX_EVENT_NAME_LEN - 1]
        at_entry = not uprobe and fields.get("offset", 0) == 0 and fields.get("addr") is None
        ctx = ParseContext(text, subsystem, is_return, uprobe, self.arch, self.word_bits,
                           function_entry=is_return or at_entry or uprobe,
                           kernel=self.kernel, at_entry=at_entry and not is_return,
                           function=fields.get("symbol"), btf=self.btf)  # type: ignore[arg-type]
        arg_words: list[tuple[Word, int | None]] = [(w, None) for w in words[2:]]
        if ctx.btf_args:
            from kpsdk.trace.btfsyntax import expand_dentry_args, expand_meta_args

            arg_words = expand_dentry_args(ctx, expand_meta_args(ctx, text, words))
        if len(arg_words) > MAX_TRACE_ARGS:
            raise ctx.error("TOO_MANY_ARGS", arg_words[MAX_TRACE_ARGS][0].start, f"at most {MAX_TRACE_ARGS}")
        args: list[FetchArg] = []
        for i, (word, fixed) in enumerate(arg_words):
            args.append(self._parse_arg(replace(ctx, fixed_column=fixed) if fixed is not None else ctx, word, i, args))
        return ProbeDef(
            op="r" if is_return else "p",
            group=group or ("uprobes" if uprobe else "kprobes"),
            event=event or default_event,
            text=text,
            maxactive=maxactive,
            args=tuple(args),
            explicit_event=event is not None,
            **fields,  # type: ignore[arg-type]
        )

    # -- -:[GRP/]EVENT ------------------------------------------------------------------------

    def _parse_clear(self, text: str, words: list[Word]) -> ProbeDef:
        head = words[0]
        cur = _Cursor(head.text, head.start)
        cur.pos = 1
        if not cur.accept(":"):
            raise TraceDefinitionError("NO_EVENT_NAME", text, cur.column, "write -:[GRP/]EVENT")
        group, event = _event_name(text, cur, "trace_kprobe", allow_empty=False)
        if len(words) > 1:
            raise TraceDefinitionError("BAD_PROBE_TYPE", text, words[1].start, "-: takes only the event name")
        return ProbeDef(op="-", group=group or "", event=event or "", text=text, explicit_event=True)

    # -- probe points -------------------------------------------------------------------------------

    def _parse_kprobe_point(self, text: str, word: Word, is_return: bool
                            ) -> tuple[str | None, str | None, int, int | None, bool]:
        """``[MOD:]SYM[+offs][%return]`` or ``MEMADDR[%return]``."""
        body, pct, suffix = word.text.partition("%")
        ret = False
        if pct:
            if suffix != "return":
                raise TraceDefinitionError("BAD_ADDR_SUFFIX", text, word.start + len(body), f"%{suffix}")
            if is_return:
                raise TraceDefinitionError("BAD_ADDR_SUFFIX", text, word.start + len(body),
                                           "%return goes with p, r is a return probe already")
            ret = True
        addr = parse_uint(body)
        if addr is not None:
            return None, None, 0, addr, ret
        cur = _Cursor(body, word.start)
        module = None
        first = cur.take(_symbol_char)
        if cur.accept(":"):
            module, first = first, cur.take(_symbol_char)
        if not first or not (_is_ident_start(first[0]) or first[0] == "."):
            raise TraceDefinitionError("BAD_PROBE_ADDR", text, word.start, f"{body!r}")
        if body.startswith(PLT_SUFFIX, cur.pos):  # a PLT stub, as gdb and perf name it (kpsdk.binfmt.pltstubs)
            first += PLT_SUFFIX
            cur.pos += len(PLT_SUFFIX)
        offset = 0
        if not cur.at_end():
            sign_col = cur.column
            sign = cur.peek()
            rest = body[cur.pos:]
            value = parse_int(rest) if sign in "+-" else None
            if value is None or value < 0 or value > 0xFFFFFFFF:
                raise TraceDefinitionError("BAD_PROBE_ADDR", text, word.start,
                                           f"bad offset {rest!r} at column {sign_col + 1}")
            offset = value
        if (is_return or ret) and offset != 0:
            raise TraceDefinitionError("BAD_RETPROBE", text, word.start)
        return first, module, offset, None, ret

    def _parse_uprobe_point(self, text: str, word: Word) -> tuple[str, int, bool]:
        """``PATH:OFFSET[%return]`` (the last ``:`` splits, as in the kernel)."""
        colon = word.text.rindex(":")
        path, spec = word.text[:colon], word.text[colon + 1:]
        spec_col = word.start + colon + 1
        if "(" in spec:
            raise TraceDefinitionError("BAD_UPROBE_OFFS", text, spec_col + spec.index("("),
                                       "reference counters (OFFSET(REF_CTR)) are not supported", "trace_uprobe")
        body, pct, suffix = spec.partition("%")
        ret = False
        if pct:
            if suffix != "return":
                raise TraceDefinitionError("BAD_ADDR_SUFFIX", text, spec_col + len(body), f"%{suffix}",
                                           "trace_uprobe")
            ret = True
        path = find_file(path, self.sessions)
        if not os.path.exists(path):
            raise TraceDefinitionError("FILE_NOT_FOUND", text, word.start, path, "trace_uprobe")
        if not os.path.isfile(path):
            raise TraceDefinitionError("NO_REGULAR_FILE", text, word.start, path, "trace_uprobe")
        offset = parse_uint(body)
        if offset is None:
            offset = _symbol_offset(text, spec_col, path, body, self.sessions, self.ifunc_later, self.unknown_later)
        return path, offset, ret

    # -- fetch arguments ----------------------------------------------------------------------------

    def _parse_arg(self, ctx: ParseContext, word: Word, index: int, done: list[FetchArg]) -> FetchArg:
        eq = word.text.find("=")
        if eq >= 0:
            name = word.text[:eq]
            if eq > MAX_ARG_NAME_LEN:
                raise ctx.error("ARG_NAME_TOO_LONG", word.start, f"at most {MAX_ARG_NAME_LEN} characters")
            if eq == 0:
                raise ctx.error("NO_ARG_NAME", word.start)
            body_start = eq + 1
        else:
            # a kernel that takes BTF arguments names one after its text where that is a C
            # identifier (``filename``, ``dfd:x16``; generate_probe_arg_name), else argN
            head = word.text.split(":", 1)[0]
            name = head if ctx.btf_args and is_good_name(head) else f"arg{index + 1}"
            body_start = 0
        if not is_good_name(name):
            raise ctx.error("BAD_ARG_NAME", word.start)
        if name in RESERVED_NAMES or any(a.name == name for a in done):
            raise ctx.error("USED_ARG_NAME", word.start, name)
        body = word.text[body_start:]
        col = word.start + body_start
        if len(body) > MAX_ARGSTR_LEN:
            raise ctx.error("ARG_TOO_LONG", col, f"at most {MAX_ARGSTR_LEN} characters")
        if not body:
            raise ctx.error("NO_ARG_BODY", col)
        cur = _Cursor(body, col)
        fetch = self._parse_fetch(ctx, cur, depth=0)
        type_text = ""
        type_col = col  # the kernel's type errors point at the type, or at the argument without one
        if cur.accept(":"):
            type_col = cur.column
            type_text = body[cur.pos:]
            argtype = self._parse_type(ctx, type_text, cur.column, type_col)
        elif not cur.at_end():
            raise ctx.error("BAD_FETCH_ARG", cur.column, f"unexpected {cur.peek()!r}")
        elif fetch.kind in ("comm", "immstr"):
            argtype = ArgType("string", 0, False, "string")
        else:
            argtype = _default_type(self.word_bits)
        if fetch.btf is not None:
            from kpsdk.trace.btfsyntax import apply_btf_type

            fetch, argtype = apply_btf_type(ctx, fetch, argtype, type_text, self.word_bits)
        self._check_combination(ctx, fetch, argtype, type_col)
        return FetchArg(name=name, fetch=fetch, type=argtype, text=body, column=col)

    def _parse_fetch(self, ctx: ParseContext, cur: _Cursor, depth: int) -> Fetch:
        """FETCHARG, recursively: ``%REG @ADDR @SYM[+-off] @+FOFFS $var +|-[u]OFFS(FETCHARG) \\IMM``.

        The first character decides which form this is, as in the kernel's
        ``parse_probe_arg``; each form is read by its own step below.
        """
        c = cur.peek()
        if c == "%":
            return self._parse_reg(ctx, cur)
        if c == "@":
            return self._parse_at(ctx, cur)
        if c == "$":
            return self._parse_var(ctx, cur)
        if c in ("+", "-"):
            return self._parse_deref(ctx, cur, depth)
        if c == "\\":
            return self._parse_imm(ctx, cur)
        if ctx.btf_args and _is_ident_start(c):
            from kpsdk.trace.btfsyntax import parse_btf_variable

            return parse_btf_variable(ctx, cur)
        raise ctx.error("BAD_FETCH_ARG", cur.column, f"want %REG, @ADDR, @SYM, $VAR, +|-OFFS(...) or \\IMM, "
                        f"not {c!r}" if c else "empty")

    def _parse_reg(self, ctx: ParseContext, cur: _Cursor) -> Fetch:
        """``%REG``: a register the target architecture has (any name, when the arch is not known yet)."""
        col = cur.column
        cur.pos += 1
        name = cur.take(_is_ident_char)
        if not name or (ctx.arch is not None and not ctx.arch.has_register(name)):
            raise ctx.error("BAD_REG_NAME", col, _register_hint(ctx.arch, name))
        return Fetch("reg", name=name, column=col)

    def _parse_at(self, ctx: ParseContext, cur: _Cursor) -> Fetch:
        """``@ADDR``, ``@+FOFFS`` (a file offset: uprobes only) or ``@SYM[+|-offs]`` (kprobes only):
        the character after ``@`` decides which."""
        col = cur.column
        cur.pos += 1
        if cur.peek().isdigit():
            raw = cur.take(_number_char)
            value = parse_uint(raw)
            if value is None:
                raise ctx.error("BAD_MEM_ADDR", col, raw)
            return Fetch("mem", value=value, column=col)
        if cur.peek() == "+":
            if not ctx.is_uprobe:
                raise ctx.error("FILE_ON_KPROBE", col)
            cur.pos += 1
            raw = cur.take(_number_char)
            value = parse_uint(raw)
            if value is None:
                raise ctx.error("BAD_FILE_OFFS", col, raw)
            return Fetch("foffs", value=value, column=col)
        if ctx.is_uprobe:
            raise ctx.error("SYM_ON_UPROBE", col)
        return self._parse_symbol_ref(ctx, cur, col)

    def _parse_symbol_ref(self, ctx: ParseContext, cur: _Cursor, col: int) -> Fetch:
        """``SYM[+|-offs]`` after ``@``: the symbol's address plus a signed offset, loaded at the hit."""
        sym = cur.take(_symbol_char)
        if not sym or not (_is_ident_start(sym[0]) or sym[0] == "."):
            raise ctx.error("BAD_MEM_ADDR", col, "want @ADDR or @SYM[+|-offs]")
        offset = 0
        if cur.peek() in ("+", "-"):
            sign = cur.peek()
            cur.pos += 1
            raw = cur.take(_number_char)
            value = parse_uint(raw)
            if value is None:
                raise ctx.error("BAD_MEM_ADDR", col, f"bad offset {sign}{raw!r}")
            offset = -value if sign == "-" else value
        return Fetch("sym", name=sym, value=offset, column=col)

    def _parse_deref(self, ctx: ParseContext, cur: _Cursor, depth: int) -> Fetch:
        """``+|-[u]OFFS(FETCHARG)``: the word at the inner argument's value plus OFFS (``u``: from
        user memory); the inner argument is any FETCHARG but ``$comm`` and ``\\"..."``."""
        col = cur.column
        sign = cur.peek()
        cur.pos += 1
        user = cur.accept("u")
        raw = cur.take(_number_char)
        if cur.peek() != "(":
            if "(" not in cur.text[cur.pos:]:
                raise ctx.error("DEREF_NEED_BRACE", col)
            raise ctx.error("BAD_DEREF_OFFS", col, f"{sign}{'u' if user else ''}{raw}")
        value = parse_uint(raw)
        if value is None:
            raise ctx.error("BAD_DEREF_OFFS", col, f"{sign}{'u' if user else ''}{raw}")
        cur.pos += 1
        inner_col = cur.column
        if cur.at_end() or cur.peek() == ")":
            raise ctx.error("BAD_FETCH_ARG", inner_col, "nothing to dereference")
        inner = self._parse_fetch(ctx, cur, depth + 1)
        if not cur.accept(")"):
            raise self._unclosed_deref(ctx, cur, inner)
        if inner.kind in ("comm", "immstr"):
            raise ctx.error("COMM_CANT_DEREF", inner_col)
        return Fetch("deref", value=-value if sign == "-" else value, inner=inner, user=user, column=col)

    @staticmethod
    def _unclosed_deref(ctx: ParseContext, cur: _Cursor, inner: Fetch) -> TraceDefinitionError:
        """The error for a dereference whose ``)`` is missing, at the column the kernel names."""
        if cur.at_end() or cur.peek() == ":":
            # the kernel matches each "(" with the *last* ")" (strrchr), outermost first, so
            # the dereference left without one is the innermost: its text ends one column
            # before each ")" the ones around it took
            closed = sum(1 for n in inner.walk() if n.kind == "deref")
            return ctx.error("DEREF_OPEN_BRACE", cur.column - closed)
        return ctx.error("BAD_FETCH_ARG", cur.column, f"unexpected {cur.peek()!r}")

    def _parse_imm(self, ctx: ParseContext, cur: _Cursor) -> Fetch:
        """``\\IMM`` (an integer, kept to the word size) or ``\\"TEXT"`` (an immediate string)."""
        col = cur.column
        cur.pos += 1
        if cur.peek() == '"':
            end = cur.text.find('"', cur.pos + 1)
            if end < 0:
                raise ctx.error("IMMSTR_NO_CLOSE", cur.base + len(cur.text))
            literal = cur.text[cur.pos + 1:end]
            cur.pos = end + 1
            return Fetch("immstr", text=literal, column=col)
        raw_start = cur.pos
        if cur.peek() in ("+", "-"):
            cur.pos += 1
        cur.take(_number_char)
        raw = cur.text[raw_start:cur.pos]
        value = parse_int(raw) if raw[:1] in ("+", "-") or raw[:1].isdigit() else None
        if value is None:
            raise ctx.error("BAD_IMM", col + 1, raw)
        return Fetch("imm", value=value & ((1 << self.word_bits) - 1), column=col)

    def _parse_var(self, ctx: ParseContext, cur: _Cursor) -> Fetch:
        col = cur.column
        cur.pos += 1
        name = cur.take(_is_ident_char)
        if not cur.at_end() and cur.peek() not in ":)" and not (ctx.btf_args and name.startswith("retval")):
            # the kernel's parse_probe_vars sees the whole rest ("retval->x"): no variable of that name
            raise ctx.error("BAD_VAR", col, f"${cur.text[col - cur.base + 1:]}")
        if ctx.btf_args and name.startswith("retval"):  # typed by BTF, and members of it (str_has_prefix)
            if not ctx.is_return:
                raise ctx.error("RETVAL_ON_PROBE", col)
            from kpsdk.trace.btfsyntax import parse_btf_variable

            cur.pos -= len(name) + 1
            return parse_btf_variable(ctx, cur)
        if name == "retval":
            if not ctx.is_return:
                raise ctx.error("RETVAL_ON_PROBE", col)
            return Fetch("retval", column=col)
        if name.startswith("stack"):
            rest = name[len("stack"):]
            if not rest:
                return Fetch("stackp", column=col)
            if not rest.isdigit():
                raise ctx.error("BAD_VAR", col, f"${name}")
            n = int(rest, 10)
            if not ctx.is_uprobe and n > PARAM_MAX_STACK:
                raise ctx.error("BAD_STACK_NUM", col, f"at most {PARAM_MAX_STACK}")
            return Fetch("stack", index=n, column=col)
        if name in ("comm", "COMM"):
            return Fetch("comm", column=col)
        if name.startswith("arg"):
            error = arg_error(ctx.kernel, ctx.is_return, ctx.function_entry, ctx.is_uprobe)
            if ctx.kernel is not None and ctx.arch is not None and not ctx.arch.kernel_arg_access:
                raise ctx.error("BAD_VAR", col, f"${name}: {ctx.arch.name} kernels refuse $argN in probe events "
                                "(see Arch.kernel_arg_access)")
            if error == "BAD_VAR":  # before 6.5 the place is checked first: there "$arg..." is no variable
                raise ctx.error(error, col, f"${name}: {kernel_name(ctx.kernel or (0, 0))} reads $argN only at "
                                "a kprobe on a function entry")
            rest = name[len("arg"):]
            if not rest.isdigit():
                raise ctx.error("BAD_VAR", col, f"${name}")
            n = int(rest, 10)
            if n == 0 or n > PARAM_MAX_STACK:
                raise ctx.error("BAD_ARG_NUM", col, "$argN counts from 1")
            if error is not None:
                raise ctx.error(error, col, "" if ctx.kernel is None or not ctx.is_return else
                                f"{kernel_name(ctx.kernel)} keeps no arguments for a return probe "
                                f"(since {kernel_name(RETURN_ARGS_VERSION)})")
            return Fetch("arg", index=n, column=col)
        raise ctx.error("BAD_VAR", col, f"${name}: want $retval, $stack, $stackN, $argN or $comm")

    def _parse_type(self, ctx: ParseContext, text: str, col: int, type_col: int) -> ArgType:
        """TYPE[N]: a basic type, a string type, ``symbol``, or ``b<width>@<offset>/<size>``."""
        count = 0
        base = text
        bracket = text.find("[")
        if bracket >= 0:
            base = text[:bracket]
            close = text.find("]", bracket)
            if close < 0:
                raise ctx.error("ARRAY_NO_CLOSE", col + len(text))
            if close != len(text) - 1:
                raise ctx.error("BAD_ARRAY_SUFFIX", col + close + 1)
            raw = text[bracket + 1:close]
            n = parse_uint(raw)
            if n is None or n == 0:
                raise ctx.error("BAD_ARRAY_NUM", col + bracket + 1, raw)
            if n > MAX_ARRAY_LEN:
                raise ctx.error("ARRAY_TOO_BIG", col + bracket + 1, f"at most {MAX_ARRAY_LEN}")
            count = n
        if base in BASIC_TYPES:
            size, signed, display = BASIC_TYPES[base]
            return ArgType(base, size, signed, display, count=count)
        if base in ("string", "ustring", "symstr"):
            if base == "symstr" and ctx.is_uprobe:
                raise ctx.error("BAD_TYPE", type_col, "symstr is not available with uprobe")
            return ArgType(base, 0, False, "string", count=count)
        if base == "symbol":
            if ctx.is_uprobe:
                raise ctx.error("BAD_TYPE", type_col, "symbol is not available with uprobe")
            return ArgType(base, self.word_bits // 8, False, "symbol", count=count)
        if base.startswith("b"):
            return self._parse_bitfield(ctx, base, count, type_col)
        raise ctx.error("BAD_TYPE", type_col, f"{base!r}: want u8-u64, s8-s64, x8-x64, char, string, ustring, "
                        "symbol, symstr or b<width>@<offset>/<size>")

    def _parse_bitfield(self, ctx: ParseContext, text: str, count: int, type_col: int) -> ArgType:
        cur = _Cursor(text, type_col)
        cur.pos = 1
        width = parse_uint(cur.take(str.isdigit))
        if width is None or width == 0 or not cur.accept("@"):
            raise ctx.error("BAD_BITFIELD", type_col, "want b<width>@<offset>/<size>")
        offset = parse_uint(cur.take(str.isdigit))
        if offset is None or not cur.accept("/"):
            raise ctx.error("BAD_BITFIELD", type_col, "want b<width>@<offset>/<size>")
        size_bits = parse_uint(cur.text[cur.pos:])
        if size_bits not in (8, 16, 32, 64):
            if parse_uint(cur.text[cur.pos:]) is None:
                raise ctx.error("BAD_TYPE", type_col, "the container size is 8, 16, 32 or 64")
            raise ctx.error("BAD_TYPE", type_col, "the container size is 8, 16, 32 or 64")
        assert size_bits is not None
        if width + offset > size_bits:
            raise ctx.error("BAD_BITFIELD", type_col, f"{width}+{offset} bits do not fit in {size_bits}")
        return ArgType(text, size_bits // 8, False, "u", bitfield=(width, offset), count=count)

    def _check_combination(self, ctx: ParseContext, fetch: Fetch, argtype: ArgType, type_col: int) -> None:
        """The kernel's finalize_fetch_insn checks: which fetches a string or array type accepts."""
        if fetch.kind in ("comm", "immstr"):
            if argtype.name != "string" or argtype.count:
                if argtype.default:
                    return
                raise ctx.error("NEED_STRING_TYPE", type_col)
            return
        if argtype.is_string:
            if argtype.name == "symstr":
                if fetch.kind not in ("reg", "stack", "retval", "arg", "deref", "mem", "sym"):
                    raise ctx.error("BAD_SYMSTRING", type_col)
            elif not (fetch.is_memory or fetch.kind == "imm"):
                raise ctx.error("BAD_STRING", type_col, "a string is read from memory: +0(%REG):string")
        if argtype.count and not fetch.is_memory:
            raise ctx.error("BAD_STRING", type_col, "an array is read from memory: +0(%REG):u8[4]")
        # fetch_insn slots: the load (two for @SYM), one per dereference (the last one becomes the
        # store when the value comes from memory), a store otherwise, bitfield, array, end
        ops = len(fetch.walk()) + (1 if any(n.kind == "sym" for n in fetch.walk()) else 0)
        ops += (0 if fetch.is_memory else 1) + (1 if argtype.bitfield else 0) + (1 if argtype.count else 0) + 1
        if ops > FETCH_INSN_MAX:
            raise ctx.error("TOO_MANY_OPS", _too_deep_column(fetch), f"at most {FETCH_INSN_MAX - 2} slots")


def _too_deep_column(fetch: Fetch) -> int:
    """Where the kernel's parse_probe_arg says "Dereference is too much nested": at the
    dereference whose instruction would take the last slot but one (it keeps one for the
    store), counting from the load, innermost first; else at the argument."""
    derefs = [n for n in fetch.walk() if n.kind == "deref"]  # outermost first
    load_slots = 2 if any(n.kind == "sym" for n in fetch.walk()) else 1
    j = FETCH_INSN_MAX - 2 - load_slots + 1  # the innermost-first index of the one that overflows
    if 1 <= j <= len(derefs):
        return derefs[len(derefs) - j].column
    return fetch.column


#: the kernel that takes BTF fetch arguments and says NOFENTRY_ARGS ("tracing/probes: Support function
#: parameters if BTF is available"); before it, ``$argN`` anywhere but a kprobe on a function entry is
#: no variable (trace_probe.c: ``(flags & TPARG_FL_MASK) == (TPARG_FL_KERNEL | TPARG_FL_FENTRY)``)
BTF_ARGS_VERSION = (6, 5)
#: the kernel whose return probes keep the entry's arguments ("tracing/probes: Support $argN in
#: return probe (kprobe and fprobe)")
RETURN_ARGS_VERSION = (6, 9)


def kernel_name(version: tuple[int, int]) -> str:
    return f"Linux {version[0]}.{version[1]}"


def arg_error(kernel: tuple[int, int] | None, is_return: bool, at_entry: bool, is_uprobe: bool = False) -> str | None:
    """The error a ``$argN`` gets where it is, from the kernel of version ``kernel``
    (None: kpsdk's own targets, which read it at any function entry and on returns,
    and on uprobes by the user calling convention); None: it is accepted."""
    if kernel is None:
        return None if at_entry or is_return else "NOFENTRY_ARGS"
    if kernel < BTF_ARGS_VERSION:
        return None if at_entry and not is_return and not is_uprobe else "BAD_VAR"
    if is_return and not is_uprobe:
        return None if kernel >= RETURN_ARGS_VERSION else "NOFENTRY_ARGS"
    return None if at_entry and not is_uprobe else "NOFENTRY_ARGS"


def _default_type(word_bits: int) -> ArgType:
    """No type: ``x32``/``x64`` by the word size (the kernel's DEFAULT_FETCH_TYPE)."""
    return ArgType(f"x{word_bits}", word_bits // 8, False, "x", default=True)


def _register_hint(arch: Arch | None, name: str) -> str:
    if arch is None:
        return f"%{name}"
    return f"%{name}: {arch.name} has " + ", ".join(sorted(arch.by_name))


def _event_name(text: str, cur: _Cursor, subsystem: str, allow_empty: bool) -> tuple[str | None, str | None]:
    """``[GRP/][EVENT]`` (the kernel's traceprobe_parse_event_name; ``.`` also separates)."""
    rest = cur.text[cur.pos:]
    col = cur.column
    slash = rest.find("/")
    if slash < 0:
        slash = rest.find(".")
    group = None
    if slash >= 0:
        if slash == 0:
            raise TraceDefinitionError("NO_GROUP_NAME", text, col, subsystem=subsystem)
        if slash + 1 > MAX_EVENT_NAME_LEN:
            raise TraceDefinitionError("GROUP_TOO_LONG", text, col, f"at most {MAX_EVENT_NAME_LEN - 1} characters",
                                       subsystem=subsystem)
        group = rest[:slash]
        if not is_good_name(group):
            raise TraceDefinitionError("BAD_GROUP_NAME", text, col, subsystem=subsystem)
        col += slash + 1
        rest = rest[slash + 1:]
    cur.pos = len(cur.text)
    if not rest:
        if slash >= 0 and allow_empty:
            return group, None
        raise TraceDefinitionError("NO_EVENT_NAME", text, col, subsystem=subsystem)
    if len(rest) >= MAX_EVENT_NAME_LEN:
        raise TraceDefinitionError("EVENT_TOO_LONG", text, col, f"at most {MAX_EVENT_NAME_LEN - 1} characters",
                                   subsystem=subsystem)
    if not is_good_name(rest):
        raise TraceDefinitionError("BAD_EVENT_NAME", text, col, subsystem=subsystem)
    return group, rest


def _looks_like_uprobe(where: str) -> bool:
    """The kernel's test, a ``/`` in the word and a digit after its last ``:``; and kpsdk's
    extension, ``FILE:SYMBOL[+OFF]`` / ``LIB:0xOFF``, where FILE holds a ``/`` or a ``.``
    (a kernel module's name, the kprobe ``MOD:SYM`` form, has neither)."""
    colon = where.rfind(":")
    if colon <= 0 or not where[colon + 1:]:
        return False
    if "/" in where and where[colon + 1:colon + 2].isdigit():
        return True
    file = where[:colon]
    return ("/" in file or "." in file) and not file.startswith(("@", "%", "$", "+", "-"))


def uprobe_file(where: str) -> str | None:
    """The file a probe point names (``PATH:OFFSET``, ``FILE:SYMBOL``), as the parser reads it;
    None for a kprobe's point.  What ``kpsdk trace`` will read, so no output overwrites it."""
    return where[:where.rfind(":")] if _looks_like_uprobe(where) else None


def _symbol_offset(text: str, column: int, path: str, where: str, sessions: Sequence[Session] = (),
                   ifunc_later: bool = False, unknown_later: bool = False) -> int:
    """A uprobe's ``SYMBOL[+OFF]`` as a file offset (kpsdk's extension of uprobe_events lines)."""
    from kpsdk.binfmt.elfimage import load_elf

    try:
        return symbol_offset(load_elf(path), path, where, sessions)
    except KprobeError as e:
        if (ifunc_later and e.errno == errno.EOPNOTSUPP) or (unknown_later and e.errno == errno.ENOENT):
            return 0
        raise TraceDefinitionError("BAD_UPROBE_OFFS", text, column, str(e), "trace_uprobe") from None
    except TargetError as e:
        raise TraceDefinitionError("BAD_UPROBE_OFFS", text, column, str(e), "trace_uprobe") from None


def _uprobe_tail(path: str) -> str:
    """The default uprobe event name's file part: the basename up to its first ``.``, ``-`` or ``_``."""
    base = os.path.basename(path)
    for i, c in enumerate(base):
        if c in ".-_":
            return base[:i]
    return base


def parse(definition: str, arch: Arch | None = None, kernel: tuple[int, int] | None = None) -> ProbeDef:
    """Parse one definition line (see :class:`Parser`)."""
    return Parser(arch, kernel=kernel).parse(definition)


def parse_lines(text: str, arch: Arch | None = None) -> list[ProbeDef]:
    """Every definition in a file's text: one a line; blank lines and ``#`` comments skipped."""
    parser = Parser(arch)
    return [parser.parse(line) for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
