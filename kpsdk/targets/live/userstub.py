"""What a user-space gdbstub runs: the program, its load bias, its libraries.

qemu-user, gdbserver (started by kpsdk for ``native:`` and ``pid:``, or anyone's behind
``gdb://``) all serve one Linux process.  kpsdk learns what it runs the same way on each,
through gdb's remote protocol only (no ``/proc`` of the target's machine):

- the auxiliary vector (``qXfer:auxv:read``, read with gdb's ``info auxv``): ``AT_PHDR``
  against the file's ``PT_PHDR``, else ``AT_ENTRY`` against ``e_entry``, is the load bias
  of a PIE (:meth:`kpsdk.binfmt.linkmap.LinkMap.program_bias`);
- which program it is, when the user gave none: ``qXfer:exec-file:read`` (the stub's path,
  looked up under the sysroot);
- the libraries: ``qXfer:libraries-svr4:read`` where the stub offers it (gdbserver: one
  packet for the whole list), else kpsdk's own walk of the loader's ``r_debug``/``link_map``
  (:class:`~kpsdk.targets.live.solibs.Libraries`), which also stops on ``r_brk`` for
  every ``dlopen``/``dlclose`` afterwards.

A stub that answers no auxiliary vector is not a Linux process: a kernel (qemu-system's
stub, kgdb) or a bare-metal board, whose symbols are taken at their link addresses
(:func:`stub_abi` tells the two kinds apart for ``gdb://``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.binfmt.linkmap import AT_ENTRY, LinkMap
from kpsdk.errors import TargetError, TargetFault
from kpsdk.target import MappedFile
from kpsdk.targets.live.mi import GdbError
from kpsdk.targets.live.solibs import Libraries

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.targets.live.mi import MiConnection
    from kpsdk.targets.live.target import GdbTarget

#: one line of gdb's ``info auxv``: ``9    AT_ENTRY    Entry point of program    0x4000001040``
_AUXV_LINE = re.compile(r"^\s*(\d+)\s+\S+\s.*?\s(0x[0-9a-fA-F]+|\d+)(\s+\".*\")?\s*$", re.MULTILINE)
#: how long the loader gets to map and relocate a program's libraries
LOADER_TIMEOUT = 60.0
#: what ``maintenance packet`` prints of the stub's answer
_RECEIVED = re.compile(r'received: "(.*)"\s*$', re.DOTALL)
#: one object of a ``library-list-svr4`` document (gdb's features/library-list-svr4.dtd)
_SVR4_LIBRARY = re.compile(r"<library\s([^>]*?)/?>")
_SVR4_ATTR = re.compile(r'([\w-]+)="([^"]*)"')
#: a qXfer document is read in pieces of this many bytes, at most this many pieces
_XFER_CHUNK = 0xFFF
_XFER_PIECES = 256


def auxv_of(mi: MiConnection) -> dict[int, int]:
    """The auxiliary vector the stub's process started with (gdb's ``info auxv``, the stub's
    ``qXfer:auxv:read``), ``{}`` when the stub has none (not a Linux process)."""
    try:
        text = mi.console_command("info auxv")
    except GdbError:
        return {}
    auxv = {int(m.group(1)): int(m.group(2), 0) for m in _AUXV_LINE.finditer(text)}
    return auxv if AT_ENTRY in auxv else {}


def read_auxv(target: GdbTarget) -> dict[int, int]:
    """:func:`auxv_of` for a stub known to serve a process: no ``AT_ENTRY`` is a TargetError."""
    auxv = auxv_of(target._mi())
    if not auxv:
        raise TargetError("cannot find where the program was loaded: the gdbstub answers no auxiliary "
                          "vector (gdb's 'info auxv' has no AT_ENTRY)")
    return auxv


def xfer(mi: MiConnection, obj: str, annex: str = "") -> str | None:
    """The document ``qXfer:OBJ:read:ANNEX`` returns, read piece by piece through gdb's
    ``maintenance packet`` (the words are kpsdk's own, never a user's); None when the stub
    does not offer it (an empty answer or an error)."""
    out = ""
    for _ in range(_XFER_PIECES):
        try:
            text = mi.console_command(f"maintenance packet qXfer:{obj}:read:{annex}:{len(out):x},{_XFER_CHUNK:x}")
        except GdbError:
            return None
        match = _RECEIVED.search(text.strip())
        body = _unescape(match.group(1)) if match else ""
        if not body or body[0] not in "lm":
            return None
        out += body[1:]
        if body[0] == "l":
            return out
    return out


def _unescape(body: str) -> str:
    """The packet's data as sent: the remote protocol's ``}`` escape (the next byte xor 0x20);
    gdb shows other bytes as C escapes, which the documents read here (paths, XML) hold none of."""
    out, i = [], 0
    while i < len(body):
        if body[i] == "}" and i + 1 < len(body):
            out.append(chr(ord(body[i + 1]) ^ 0x20))
            i += 2
            continue
        out.append(body[i])
        i += 1
    return "".join(out)


def svr4_objects(mi: MiConnection) -> list[tuple[int, str]] | None:
    """The loader's list as the stub reads it (``qXfer:libraries-svr4``): each object's
    ``link_map`` entry and name, the program's (the document's ``main-lm``) first; None when
    the stub does not offer it or the list is empty (the loader has not run yet)."""
    text = xfer(mi, "libraries-svr4")
    if not text:
        return None
    head = re.search(r"<library-list-svr4\s([^>]*)>", text)
    main = dict(_SVR4_ATTR.findall(head.group(1))).get("main-lm") if head else None
    out: list[tuple[int, str]] = []
    try:
        if main:
            out.append((int(main, 16), ""))
        for match in _SVR4_LIBRARY.finditer(text):
            attrs = dict(_SVR4_ATTR.findall(match.group(1)))
            out.append((int(attrs["lm"], 16), _xml_text(attrs.get("name", ""))))
    except (KeyError, ValueError):
        return None  # not the document gdb's DTD describes: the link-map walk instead
    return out if len(out) > 1 else None


def _xml_text(text: str) -> str:
    return text.replace("&quot;", '"').replace("&apos;", "'").replace("&lt;", "<").replace("&gt;", ">") \
        .replace("&amp;", "&")


def exec_file(mi: MiConnection) -> str | None:
    """The path of the stub's program, as the stub names it (``qXfer:exec-file``), or None."""
    path = xfer(mi, "exec-file")
    return path if path and path.startswith("/") and "\0" not in path else None


def is_qemu_stub(mi: MiConnection) -> bool:
    """Whether the stub is QEMU's (it answers QEMU's own ``qqemu.sstepbits`` query): QEMU
    reports a breakpoint's exact pc and never writes code, while a ptrace stub (gdbserver)
    plants real trap instructions and reports the pc as the CPU left it."""
    try:
        text = mi.console_command("maintenance packet qqemu.sstepbits")
    except GdbError:
        return False
    match = _RECEIVED.search(text.strip())
    return bool(match and match.group(1))


def stub_abi(mi: MiConnection) -> str:
    """``user`` for a stub that serves a Linux process (it answers an auxiliary vector:
    gdbserver, qemu-user), else ``kernel`` (qemu-system's, kgdb, a bare-metal board's)."""
    return "user" if auxv_of(mi) else "kernel"


def place_program(target: GdbTarget, linked: ElfImage, sysroot: Path | None, cwd: Path) -> None:
    """Say where the stub's process has the program and, for a dynamically linked one, its
    libraries; keep the libraries up to date from then on (``r_brk``).

    The program's bias comes from the auxiliary vector; the image and its symbols are moved
    by it.  A process whose loader has not run yet (stopped at the loader's entry, as
    qemu-user and gdbserver start one) is run to the program's entry point first, where the
    loader has mapped and relocated the libraries; a process already running (attached) is
    read as it is.
    """
    bias = 0
    auxv: dict[int, int] = {}
    links = LinkMap(target.read_memory, target.arch.word_size, target.arch.endian)
    if linked.kind == "ET_DYN" or linked.interp is not None:
        auxv = read_auxv(target)
        bias = links.program_bias(auxv, linked.raw_entry)
        target.image = linked.relocated(bias)
        target.symbols = target.image.symbols
    target._files = (MappedFile.of(linked, bias),)
    if linked.interp is None:
        return
    if not _loader_done(target, links, auxv, linked):
        entry = linked.entry + bias
        if target.arch.has_thumb:
            entry &= ~1
        target.run_to(entry, LOADER_TIMEOUT)
    target.libraries = Libraries(target, linked, bias, auxv, sysroot, cwd)
    target.libraries.start(svr4_objects(target._mi()) if target.mi is not None else None)


def _loader_done(target: GdbTarget, links: LinkMap, auxv: dict[int, int], linked: ElfImage) -> bool:
    """Whether the loader has already filled in the program's ``DT_DEBUG`` (a process that
    was running before kpsdk came: its list is whole, or being changed by a dlopen)."""
    dynamic = links.dynamic_address(auxv, linked.raw_entry)
    if dynamic is None:
        return False
    try:
        return bool(links.r_debug_address(dynamic))
    except TargetFault:
        return False
