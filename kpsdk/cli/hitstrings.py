"""``--string-arg N``: an argument read as a C string at a hit, and kept until the return.

A kprobe prints the string at once.  A kretprobe reads it at the function's
entry, while the pointer is still in its argument register, and keeps it in
the instance's ``ri.data`` (:data:`STRING_SLOT` bytes a string) until the
function returns, as a kernel module would.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kpsdk.errors import TargetFault

if TYPE_CHECKING:
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: --string-arg reads at most this many bytes (s.read_string's max)
STRING_MAX = 256
#: a kretprobe keeps each string in ri.data: a status byte, then up to 255 bytes of UTF-8
STRING_SLOT = 256
STRING_OK, STRING_TRUNCATED, STRING_FAULT = 1, 2, 3
#: the most --string-arg values a kretprobe can keep: its ri.data is at most the kernel's
#: KRETPROBE_MAX_DATA_SIZE (4096, kpsdk.KRETPROBE_MAX_DATA_SIZE) bytes
STRINGS_MAX = 4096 // STRING_SLOT


def fetch_string(s: Session, regs: PtRegs, n: int) -> tuple[bytes, int]:
    """Argument ``n`` (from 1, as the kernel's ``$argN``) read as a C string: (at most 255 bytes
    of UTF-8, STRING_OK/TRUNCATED/FAULT)."""
    try:
        text = s.read_string(regs.arg(n - 1), max=STRING_MAX)
    except TargetFault:
        return b"", STRING_FAULT
    raw = text.encode("utf-8", "replace")
    if len(raw) >= STRING_SLOT:  # no NUL within STRING_MAX bytes
        return raw[:STRING_SLOT - 1], STRING_TRUNCATED
    return raw, STRING_OK


def show_string(n: int, raw: bytes, status: int) -> str:
    """``argN="..."`` (JSON-style escapes; ``"..."...`` when cut at 255 bytes), or ``argN=(fault)``."""
    if status == STRING_FAULT:
        return f"arg{n}=(fault)"
    text = json.dumps(raw.decode("utf-8", "ignore"), ensure_ascii=False)  # "ignore": a character cut in two
    return f"arg{n}={text}" + ("..." if status == STRING_TRUNCATED else "")


def store_strings(data: bytearray, values: list[tuple[bytes, int]]) -> None:
    """Keep fetched strings in a kretprobe instance's ``ri.data``, STRING_SLOT bytes each."""
    for i, (raw, status) in enumerate(values):
        data[i * STRING_SLOT:(i + 1) * STRING_SLOT] = bytes([status]) + raw.ljust(STRING_SLOT - 1, b"\0")


def load_strings(data: bytearray, count: int) -> list[tuple[bytes, int]]:
    """What :func:`store_strings` kept."""
    out = []
    for i in range(count):
        slot = bytes(data[i * STRING_SLOT:(i + 1) * STRING_SLOT])
        out.append((slot[1:].rstrip(b"\0"), slot[0]))
    return out
