"""A small BTF blob built by hand, for the grammar's BTF arguments without a kernel image.

``target(int dfd, char *name, struct outer *obj)`` returning ``int``, ``none(void)`` returning
``void``; ``struct outer { struct inner in; struct outer *next; union { u32 flags; int mode; };
struct { u32 bit:3, bits:5; }; }`` and ``struct inner { char *name; int len; char tag[8]; }``; ``enum e``.
The format is ``Documentation/bpf/btf.rst``: header, type records, string table.
"""

from __future__ import annotations

import struct

from kpsdk.kernel.btf import ARRAY, ENUM, FUNC, FUNC_PROTO, INT, PTR, STRUCT, UNION, Btf

SIGNED = 1


def _build() -> bytes:
    strings = bytearray(b"\0")

    def s(text: str) -> int:
        if not text:
            return 0
        off = len(strings)
        strings.extend(text.encode() + b"\0")
        return off

    types = bytearray()

    def rec(name: str, kind: int, vlen: int, size_or_type: int, trailer: bytes = b"", kflag: bool = False) -> None:
        types.extend(struct.pack("<3I", s(name), (kind << 24) | vlen | (int(kflag) << 31), size_or_type) + trailer)

    def members(*items: tuple[str, int, int]) -> bytes:
        return b"".join(struct.pack("<3I", s(n), t, o) for n, t, o in items)

    rec("int", INT, 0, 4, struct.pack("<I", (SIGNED << 24) | 32))           # 1
    rec("char", INT, 0, 1, struct.pack("<I", 8))                            # 2 (unsigned, as -funsigned-char)
    rec("", PTR, 0, 2)                                                      # 3 char *
    rec("u32", INT, 0, 4, struct.pack("<I", 32))                            # 4
    rec("", ARRAY, 0, 0, struct.pack("<3I", 2, 4, 8))                       # 5 char[8]
    rec("inner", STRUCT, 3, 24, members(("name", 3, 0), ("len", 1, 64), ("tag", 5, 96)))  # 6
    rec("", PTR, 0, 8)                                                      # 7 struct outer *
    rec("outer", STRUCT, 4, 48, members(("in", 6, 0), ("next", 7, 192), ("", 9, 256), ("", 10, 288)), kflag=True)  # 8
    rec("", UNION, 2, 4, members(("flags", 4, 0), ("mode", 1, 0)))          # 9
    rec("", STRUCT, 2, 4, members(("bit", 4, (3 << 24) | 0), ("bits", 4, (5 << 24) | 3)), kflag=True)  # 10
    rec("", FUNC_PROTO, 3, 1, struct.pack("<6I", s("dfd"), 1, s("name"), 3, s("obj"), 7))  # 11
    rec("target", FUNC, 0, 11)                                              # 12
    rec("", FUNC_PROTO, 0, 0)                                               # 13 void (void)
    rec("none", FUNC, 0, 13)                                                # 14
    rec("e", ENUM, 1, 4, struct.pack("<2I", s("E0"), 0))                    # 15
    header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(strings))
    return header + bytes(types) + bytes(strings)


BLOB = _build()


def synthetic_btf() -> Btf:
    btf = Btf(BLOB, "<synthetic BTF>")
    btf.pointer_size = 8
    return btf
