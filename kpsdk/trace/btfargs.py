"""BTF fetch arguments: what kernels since 6.5 make of ``filename``, ``$arg*`` and ``file->f_path.dentry``.

With ``CONFIG_PROBE_EVENTS_BTF_ARGS`` a kprobe event's arguments may name the probed function's
parameters, follow ``->`` and ``.`` through structures, and take their type from the kernel's BTF
(kernel/trace/trace_probe.c: ``parse_btf_arg``, ``parse_btf_field``, ``traceprobe_expand_meta_args``;
kernel/trace/trace_btf.c: ``btf_find_struct_member``).  This module answers the grammar's
questions from the BTF of the image kpsdk traces (:mod:`kpsdk.kernel.image_btf`), the way those
functions answer them, down to their quirks (each one checked against Debian 13's 6.12 kernel by
``tests/test_trace_btf_kernel.py``):

- a parameter is found by name in the function's ``FUNC_PROTO``; the fetch is the parameter
  (``$argN`` at the entry, the entry's value at a return);
- ``a->b.c->d``: each ``->`` loads a pointer, each ``.`` adds a member's offset, found through
  anonymous structs and unions in the kernel's order (direct members first, then the
  anonymous ones, last pushed first);
- without a type, the last member's BTF type decides: an enum is ``s32``, a pointer ``x64``,
  an integer ``s``/``u`` of its size; a bitfield is cut from its container;
- ``:string`` on a ``char *`` loads the pointer first, on ``char[]`` reads in place, and on
  anything else is "This type does not fit for string." -- except that the kernel's
  ``btf_type_is_char_ptr`` does not check that the type *is* a pointer: it looks at the type
  whose id is the type's size, so a ``u64`` member or a ``long`` ``$retval`` passes when BTF
  type 8 is a byte (it is, on Debian's 6.12) and is read as a string pointer.  kpsdk does what
  the kernel does.

Errors are :class:`_BtfArgError`, a kernel error code and a position in the variable's text,
for control flow only: the grammar turns each into a TraceDefinitionError with the kernel's
error_log caret.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kpsdk.errors import ImageFormatError
from kpsdk.kernel.btf import ARRAY, ENUM, ENUM64, INT, PTR, STRUCT, UNION, Btf, BtfType

#: ``BTF_INT_SIGNED`` in an INT's encoding
INT_SIGNED = 1
#: how deep the kernel looks into nested anonymous members (trace_btf.c BTF_ANON_STACK_MAX)
ANON_STACK_MAX = 16


class _BtfArgError(Exception):
    """The kernel's refusal of a BTF variable: ``code`` (``NO_BTFARG``...) at ``offset`` characters
    into the variable's text."""

    def __init__(self, code: str, offset: int, detail: str = "") -> None:
        super().__init__(code)
        self.code, self.offset, self.detail = code, offset, detail


@dataclass(frozen=True)
class LastType:
    """What the kernel keeps of the last BTF type it met (``ctx->last_type`` and its bits):
    the fetch type it gives an argument written without one (None: the default ``x64``), and
    what ``:string`` makes of it."""

    fetch_type: str | None
    char_ptr: bool
    char_array: bool
    bitsize: int = 0
    bitoffs: int = 0

    @property
    def bitfield(self) -> tuple[int, int] | None:
        """``(width, offset)`` when the kernel cuts the value (``parse_btf_bitfield``)."""
        if self.bitsize % 8 == 0 and self.bitoffs == 0:
            return None
        return self.bitsize, self.bitoffs


@dataclass(frozen=True)
class BtfVar:
    """A resolved BTF variable: the parameter (1-based; None for ``$retval``), the offset of each
    ``->`` load in order, and the last type (None: ``$retval`` of a function BTF does not know)."""

    param: int | None
    derefs: tuple[int, ...]
    last: LastType | None


class BtfArgs:
    """A kernel's BTF, asked what the kernel's probe parser asks it.

    ``source`` is the BTF, or a function that finds it (None: the image has none): then it is
    read at the first question, so definitions without BTF arguments never pay for unpacking
    and indexing a kernel's BTF (seconds: bench/btfargs.py).
    """

    def __init__(self, source: Btf | Callable[[], Btf | None], word_bits: int) -> None:
        self._source = source
        self._btf: Btf | None = source if isinstance(source, Btf) else None
        self.word_bits = word_bits

    @property
    def available(self) -> bool:
        """The BTF could be read (reading it now if it was not yet)."""
        if self._btf is None and not isinstance(self._source, Btf):
            loader, self._source = self._source, _missing
            self._btf = loader()
        return self._btf is not None

    @property
    def btf(self) -> Btf:
        if not self.available:
            raise LookupError("the kernel image has no BTF kpsdk can read")
        assert self._btf is not None
        return self._btf

    def param_names(self, function: str | None) -> list[str] | None:
        """The names of ``function``'s parameters; None when BTF has no such function or it has
        none (the kernel's ``query_btf_context`` failing, or ``nr_params == 0``)."""
        proto = self.btf.function(function) if function else None
        if proto is None or proto.vlen == 0:
            return None
        return [name for name, _ in self.btf.params(proto)]

    def has_function(self, function: str | None) -> bool:
        return bool(function) and self.btf.function(function or "") is not None

    # -- variables ------------------------------------------------------------------------------

    def variable(self, function: str | None, text: str, retval: bool = False) -> BtfVar:
        """``NAME[->FIELD...]`` (or ``$retval[->FIELD...]`` with ``retval``) at a probe on
        ``function``: ``parse_btf_arg``."""
        name, field, arrow = _split_field(text, 0)
        if field is not None and not arrow:
            raise _BtfArgError("NOSUP_DAT_ARG", field, "a parameter is a pointer or a scalar: use ->")
        proto = self.btf.function(function) if function else None
        param: int | None
        if retval:
            if proto is None:  # no BTF for the function: a plain $retval
                if field is not None:
                    raise _BtfArgError("NO_BTF_ENTRY", field, f"BTF has no function {function!r}")
                return BtfVar(None, (), None)
            if proto.size_or_type == 0:
                raise _BtfArgError("NO_RETVAL", 0, f"{function} returns void")
            type_id, param = proto.size_or_type, None
        else:
            params = self.btf.params(proto) if proto is not None else []
            if not params:
                raise _BtfArgError("NO_BTF_ENTRY", 0, f"BTF has no parameters for {function!r}")
            found = next((i for i, (n, _) in enumerate(params) if n == name), None)
            if found is None:
                known = ", ".join(n for n, _ in params)
                raise _BtfArgError("NO_BTFARG", 0, f"{function}'s parameters are {known}")
            ptype = params[found][1]
            type_id, param = (ptype.id if ptype is not None else 0), found + 1
        current = self._skip(type_id)
        if current is None:
            raise _BtfArgError("BAD_BTF_TID", 0)
        if field is None:
            return BtfVar(param, (), self._last(current, 0, 0))
        derefs, last, bitsize, bitoffs = self._fields(text, field, current)
        return BtfVar(param, derefs, self._last(last, bitsize, bitoffs))

    def _fields(self, text: str, pos: int, current: BtfType) -> tuple[tuple[int, ...], BtfType, int, int]:
        """``parse_btf_field``: the ``->`` loads and the type they end at."""
        derefs: list[int] = []
        bitsize = bitoffs = 0
        more: int | None = pos
        while more is not None:
            if current.kind != PTR:
                raise _BtfArgError("NO_PTR_STRCT", pos)
            pointee = self._skip(current.size_or_type)
            if pointee is None:
                raise _BtfArgError("BAD_BTF_TID", pos)
            current = pointee
            bitoffs = 0
            while True:  # the dot-connected members of one ->
                name, more, arrow = _split_field(text, pos)
                found = self._member(current, name, pos)
                member_type, raw, anon = found
                bitoffs += anon
                if current.kind_flag:
                    bitoffs += raw & 0xFFFFFF
                    bitsize = raw >> 24
                else:
                    bitoffs += raw
                    bitsize = 0
                nxt = self._skip(member_type)
                if nxt is None:
                    raise _BtfArgError("BAD_BTF_TID", pos)
                current = nxt
                if more is None or arrow:
                    break
                pos = more
            derefs.append(bitoffs // 8)
            bitoffs %= 8
            if more is not None:
                pos = more
        return tuple(derefs), current, bitsize, bitoffs

    def _member(self, struct_type: BtfType, name: str, pos: int) -> tuple[int, int, int]:
        """``btf_find_struct_member``: ``(type id, offset field, anonymous offset in bits)``."""
        if struct_type.kind not in (STRUCT, UNION):
            raise _BtfArgError("BAD_BTF_TID", pos, "not a struct or union: use -> on a pointer")
        stack: list[tuple[BtfType, int]] = []
        current, base = struct_type, 0
        while True:
            for member_name, type_id, raw in self.btf.raw_members(current):
                if not member_name:
                    inner = self._skip(type_id)
                    if inner is not None and len(stack) < ANON_STACK_MAX:
                        stack.append((inner, base + raw))
                elif member_name == name:
                    return type_id, raw, base
            while stack:
                current, base = stack.pop()
                if current.kind in (STRUCT, UNION):
                    break
            else:
                raise _BtfArgError("NO_BTF_FIELD", pos)

    # -- types ------------------------------------------------------------------------------------

    def _skip(self, type_id: int) -> BtfType | None:
        """``btf_type_skip_modifiers``: typedefs and qualifiers followed; None for void (id 0)."""
        if type_id == 0:
            return None
        return self.btf.resolve(self.btf.type(type_id))

    def _last(self, t: BtfType, bitsize: int, bitoffs: int) -> LastType:
        fetch, bitsize = self._fetch_type(t, bitsize)
        if t.kind == INT and fetch == "u64" and self.btf.int_info(t)[2] not in (8, 16, 32, 64):
            bitoffs += self.btf.int_info(t)[1]
        return LastType(fetch, self._char_ptr(t), self._char_array(t), bitsize, bitoffs)

    def _fetch_type(self, t: BtfType, bitsize: int) -> tuple[str | None, int]:
        """``fetch_type_from_btf_type``, and the bit size it may set."""
        if t.kind == ENUM:
            return "s32", bitsize
        if t.kind == ENUM64:
            return "s64", bitsize
        if t.kind == PTR:
            return f"x{self.word_bits}", bitsize
        if t.kind == INT:
            encoding, _offset, bits = self.btf.int_info(t)
            if encoding & INT_SIGNED:
                return (f"s{bits}" if bits in (8, 16, 32, 64) else None), bitsize
            if bits in (8, 16, 32, 64):
                return f"u{bits}", bitsize
            return "u64", bits  # an old-style bitfield integer: its bits are the field
        return None, bitsize

    def _is_byte(self, type_id: int) -> bool:
        """An unsigned 8-bit INT once typedefs and qualifiers are followed."""
        try:
            t = self._skip(type_id)
        except ImageFormatError:  # an id past the table: the kernel finds no type there either
            return False
        if t is None or t.kind != INT:
            return False
        encoding, _offset, bits = self.btf.int_info(t)
        return not encoding & INT_SIGNED and bits == 8

    def _char_ptr(self, t: BtfType) -> bool:
        """``btf_type_is_char_ptr``, as the kernel has it: the type whose id is ``t``'s
        ``size_or_type`` is a byte -- for a pointer its target, for anything else whatever type
        has the number of its size (see the module's docstring)."""
        return self._is_byte(t.size_or_type)

    def _char_array(self, t: BtfType) -> bool:
        """``btf_type_is_char_array``: an array of unsigned bytes."""
        return t.kind == ARRAY and self._is_byte(self.btf.array_element(t).id)


def _missing() -> Btf | None:
    return None


def _split_field(text: str, pos: int) -> tuple[str, int | None, bool]:
    """``split_next_field`` from ``pos``: ``(name, where the next field starts or None, the
    separator was ->)``; a ``-`` without ``>`` is the kernel's BAD_HYPHEN."""
    for i in range(pos, len(text)):
        c = text[i]
        if c == ".":
            return text[pos:i], i + 1, False
        if c == "-":
            if text[i + 1:i + 2] == ">":
                return text[pos:i], i + 2, True
            raise _BtfArgError("BAD_HYPHEN", i)
    return text[pos:], None, False
