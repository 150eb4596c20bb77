"""The grammar's BTF parts: ``$arg*``/``$argN`` expansion, ``:%pd``/``:%pD``, BTF variables and their types.

:mod:`kpsdk.trace.grammar` calls these for a kprobe on a kernel since 6.5 (``ParseContext.btf_args``),
in the kernel's order (kernel/trace/trace_kprobe.c ``trace_kprobe_create_internal``):

1. :func:`expand_meta_args` (``traceprobe_expand_meta_args``): a word ``$arg*`` becomes every
   parameter's name, a word ``$argN[:TYPE]`` the N-th one's (``$arg2`` -> ``filename``), where
   BTF knows the function; ``x=$arg2`` is left alone (it is not a word that starts ``$arg``);
2. :func:`expand_dentry_args` (``traceprobe_expand_dentry_args``, since 6.10): ``VAR:%pd`` and
   ``VAR:%pD`` become ``+0x0(+0xOFF(VAR)):string`` with ``struct dentry``'s and ``struct file``'s
   offsets from BTF;
3. each argument is parsed; a name that starts like a C identifier is a BTF variable
   (:func:`parse_btf_variable`, ``parse_btf_arg``), and ``$retval`` is typed by the function's
   return type; an argument given no name is named after its text where that is an identifier;
4. :func:`apply_btf_type`: the type BTF gives an argument written without one, and ``:string``
   on a ``char *``.

The kernel logs the errors of expanded arguments against the definition as written: the word
the ``$arg*`` stood in, and past the last word for the parameters it added beyond the
definition's own words (``p f a $arg*`` refusing a repeated name points after the end).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from kpsdk.trace.btfargs import BtfArgs, _BtfArgError
from kpsdk.trace.numbers import is_ascii_digit

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.trace.grammar import ArgType, Fetch, ParseContext, Word, _Cursor

#: the kernel's buffer for the names ``$arg*`` and ``$argN`` expand to (trace_probe.h MAX_BTF_ARGS_LEN)
MAX_BTF_ARGS_LEN = 128
#: the kernel that expands ``:%pd``/``:%pD`` ("tracing/probes: Support %pd/%pD type")
DENTRY_ARGS_VERSION = (6, 10)


def kernel_btf_args(image: str | os.PathLike[str] | None, arch: Arch) -> BtfArgs | None:
    """The :class:`BtfArgs` of the kernel in ``image`` (None: no image, or no BTF in it)."""
    if image is None:
        return None
    from kpsdk.kernel.image_btf import kernel_btf

    return BtfArgs(lambda: kernel_btf(image, arch), arch.bits)


def _has_btf(ctx: ParseContext) -> bool:
    """kpsdk has the kernel's BTF (read now, at the first definition that needs it)."""
    return ctx.btf is not None and ctx.btf.available


def _column(words: list[Word], text: str, index: int) -> tuple[int, int | None]:
    """Where the kernel's log puts argument ``index`` (0-based, after the probe point): the start of
    the definition's word at that place, or, past its last word, the column after the end (and
    every error of that argument there: the kernel then drops the offset)."""
    if index + 2 < len(words):
        return words[index + 2].start, None
    return len(text) + 1, len(text) + 1


def expand_meta_args(ctx: ParseContext, text: str, words: list[Word]) -> list[tuple[Word, int | None]]:
    """``$arg*`` and ``$argN`` words as the parameters' names (``argv_has_var_arg`` then
    ``traceprobe_expand_meta_args``); each result with the column every error of it points at,
    or None when its errors point into it."""
    from kpsdk.trace.grammar import Word

    args = words[2:]
    found = False
    star: int | None = None
    last = 0
    for i, word in enumerate(args):
        if not word.text.startswith("$arg"):
            continue
        if not (ctx.at_entry or ctx.is_return):
            raise ctx.error("NOFENTRY_ARGS", word.start)
        last = i
        if is_ascii_digit(word.text[4:5]):
            found = True
            continue
        if word.text[4:5] != "*":
            raise ctx.error("BAD_VAR", word.start, f"{word.text!r}: want $arg* or $argN")
        if star is not None:
            raise ctx.error("DOUBLE_ARGS", word.start)
        star, found = i, True
    plain: list[tuple[Word, int | None]] = [(w, None) for w in args]
    if not found:
        return plain
    names = ctx.btf.param_names(ctx.function) if ctx.btf is not None and _has_btf(ctx) else None
    if names is None:
        if star is not None:
            why = ("kpsdk has no BTF for this kernel (give the vmlinuz as --kernel or --symbols)"
                   if not _has_btf(ctx) else f"BTF knows no parameters of {ctx.function!r}")
            raise ctx.error("NOSUP_BTFARG", args[last].start, why)
        return plain
    texts: list[str] = []
    used = 0

    def put(expanded: str, column: int) -> None:
        nonlocal used
        if len(expanded) >= MAX_BTF_ARGS_LEN - used:
            raise ctx.error("ARGS_2LONG", column, f"the names take more than {MAX_BTF_ARGS_LEN} bytes")
        used += len(expanded) + 1
        texts.append(expanded)

    for i, word in enumerate(args):
        if i == star:
            for name in names:
                put(name, word.start)
            continue
        if not word.text.startswith("$arg"):
            texts.append(word.text)
            continue
        rest = word.text[4:]
        digits = len(rest) - len(rest.lstrip("0123456789"))
        number, suffix = rest[:digits], rest[digits:]
        if suffix and not suffix.startswith(":"):
            raise ctx.error("BAD_VAR", word.start, f"{word.text!r}: want $argN[:TYPE]")
        n = int(number)
        if n == 0:  # left as it is: "Invalid argument number" when it is parsed (as 6.12.117 does)
            texts.append(word.text)
        elif n > len(names):
            raise ctx.error("NO_BTFARG", word.start, f"{ctx.function} has {len(names)} parameters")
        else:
            put(names[n - 1] + suffix, word.start)
    out: list[tuple[Word, int | None]] = []
    for i, expanded in enumerate(texts):
        start, fixed = _column(words, text, i)
        out.append((Word(expanded, start), fixed))
    return out


def expand_dentry_args(ctx: ParseContext, args: list[tuple[Word, int | None]]) -> list[tuple[Word, int | None]]:
    """``[NAME=]VAR:%pd`` and ``:%pD`` as the loads of the dentry's name (kernels since 6.10)."""
    from kpsdk.trace.grammar import Word

    if ctx.kernel is None or ctx.kernel < DENTRY_ARGS_VERSION:
        return args
    out = []
    for word, fixed in args:
        body = word.text
        if body.endswith((":%pd", ":%pD")):  # glob_match("*:%p[dD]", arg)
            offsets = _dentry_offsets(ctx, word)
            name, eq, var = body[:-4].partition("=")
            if not eq:
                name, var = "", name
            inner = f"+0x{offsets[0]:x}({var})" if body[-1] == "d" else f"+0x{offsets[0]:x}(+0x{offsets[1]:x}({var}))"
            word = Word(f"{name}{'=' if eq else ''}+0x0({inner}):string", word.start)
        out.append((word, fixed))
    return out


def _dentry_offsets(ctx: ParseContext, word: Word) -> tuple[int, int]:
    """``offsetof(struct dentry, d_name.name)`` and ``offsetof(struct file, f_path.dentry)``."""
    if ctx.btf is None or not _has_btf(ctx):
        raise ctx.error("BAD_TYPE", word.start + len(word.text) - 3,
                        "%pd/%pD: kpsdk reads the offsets from the kernel's BTF, and has none for this kernel")
    try:
        return (ctx.btf.btf.member("dentry", "d_name.name").offset, ctx.btf.btf.member("file", "f_path.dentry").offset)
    except LookupError as exc:
        raise ctx.error("BAD_TYPE", word.start + len(word.text) - 3, f"%pd/%pD: {exc}") from None


def parse_btf_variable(ctx: ParseContext, cur: _Cursor) -> Fetch:
    """A BTF variable at the cursor (``filename``, ``file->f_path.dentry``, ``$retval->f_mode``):
    the parameter (or return value), one load per ``->``, and the BTF type it ends at."""
    from kpsdk.trace.grammar import Fetch

    col = cur.column
    if not ctx.is_return and not ctx.at_entry:
        raise ctx.error("NOSUP_BTFARG", col, "BTF variables are read at a function's entry or return "
                        "(a kprobe on SYM, or a return probe)")
    start = cur.pos
    while not cur.at_end() and cur.peek() not in ":)":
        cur.pos += 1
    text = cur.text[start:cur.pos]
    retval = text.startswith("$retval")
    if ctx.btf is None or not _has_btf(ctx):
        if retval and text == "$retval":
            return Fetch("retval", column=col)
        raise ctx.error("NOSUP_BTFARG", col, "kpsdk has no BTF for this kernel (give the vmlinuz as --kernel "
                        "or --symbols)")
    name_end = min([i for i in (text.find("."), text.find("-")) if i >= 0], default=len(text))
    try:
        var = ctx.btf.variable(ctx.function, text, retval=retval and text[:name_end] == "$retval")
    except _BtfArgError as exc:
        raise ctx.error(exc.code, col + exc.offset, exc.detail) from None
    node = Fetch("retval", column=col) if var.param is None else Fetch("arg", index=var.param, column=col)
    for offset in var.derefs:
        node = Fetch("deref", value=offset, inner=node, column=col)
    if var.last is None:
        return node
    last_field = max(text.rfind("."), text.rfind(">"))
    return Fetch(node.kind, node.name, node.value, node.index, node.text, node.inner, node.user, node.column,
                 btf=var.last, btf_column=col + (last_field + 1 if var.derefs else 0))


def apply_btf_type(ctx: ParseContext, fetch: Fetch, argtype: ArgType, type_text: str,
                   word_bits: int) -> tuple[Fetch, ArgType]:
    """The type BTF gives an argument written without one, and what ``:string``/``:ustring`` makes
    of a ``char *`` (a load) or a ``char[]`` (nothing); another type cannot be a string."""
    from kpsdk.trace.grammar import BASIC_TYPES, ArgType, Fetch

    last = fetch.btf
    assert last is not None
    if not type_text:
        name = last.fetch_type or f"x{word_bits}"
        size, signed, display = BASIC_TYPES[name]
        return fetch, ArgType(name, size, signed, display, bitfield=last.bitfield)
    if "string" in type_text:
        if last.char_array:
            return fetch, argtype
        if last.char_ptr:
            return Fetch("deref", inner=fetch, user=type_text.startswith("u"), column=fetch.column), argtype
        raise ctx.error("BAD_TYPE4STR", fetch.btf_column, "a string is read from a char * or a char[]")
    return fetch, argtype
