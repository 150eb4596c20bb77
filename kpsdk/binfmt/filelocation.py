"""Where a uprobe's ``FILE:SYMBOL`` or ``FILE:0xOFFSET`` points: which file, which offset.

Shared by the uprobes plugin (``Uprobe.parse``, ``--uprobe``, decorators) and the trace
grammar (``p PATH:SYMBOL`` lines), so both find the same file the same way:

* a name with a ``/`` is that path; an absolute one the host does not have is looked
  up in the open sessions' sysroots (``/lib/libc.so.6`` of an ARM program is
  ``/usr/arm-linux-gnueabihf/lib/libc.so.6``), as qemu-user's ``-L`` finds it;
* a bare name (``libc.so.6``) is a file of that name in the working directory, else the
  file it is to the open sessions: to one session, an object it has mapped under that
  name (its host file), else (a dynamically linked program) the first file of that name
  and of the program's machine in the library directories (``lib``, ``usr/lib``, their
  multiarch subdirectories, ``lib64``) of its sysroot; where no session says, the
  host's.  ``EINVAL`` where two sessions say different files (an x86_64 and a riscv64
  program each have their own ``libc.so.6``); a session's decorator,
  ``@s.uprobe("libc.so.6:malloc")``, asks that session only (:mod:`kpsdk.scope`);
* a symbol is looked up in ``.symtab`` and ``.dynsym`` (versioned names such as
  ``malloc@@GLIBC_2.2.5`` work as plain ones) and turned into a file offset through the
  program headers.  An IFUNC symbol is the implementation the loader chose, read in an
  open session that maps the file (:mod:`kpsdk.binfmt.ifunc`), else refused: its address is the
  resolver, which the loader runs once to choose the implementation calls really reach.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kpsdk.binfmt.ifunc import resolve
from kpsdk.errors import KprobeError, SymbolError, shown

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.binfmt.running import OpenSession

#: library directories under a root, in the order the loader's defaults search them
LIBRARY_DIRS = ("lib", "usr/lib", "lib64", "usr/lib64")


def _roots(sessions: Iterable[OpenSession]) -> list[Path]:
    """The open sessions' sysroots (targets that have one), then the host's root."""
    roots: list[Path] = []
    for session in sessions:
        root = getattr(session.target, "sysroot", None)
        if isinstance(root, Path) and root not in roots:
            roots.append(root)
    return [*roots, Path("/")]


def find_file(name: str, sessions: Iterable[OpenSession] = ()) -> str:
    """The host path of the file a uprobe names (see the module's rules); ``name`` itself
    when nothing better is found (the caller reports a missing file).  ``EINVAL`` for a
    bare name that means a different file to each of two open sessions: picking one would
    put the probe in a file the other session's program never runs."""
    sessions = list(sessions)
    if "/" in name:
        if name.startswith("/") and not os.path.exists(name):
            for root in _roots(sessions)[:-1]:
                inside = root / name.lstrip("/")
                if inside.is_file():
                    return str(inside)
        return name
    if not name or os.path.exists(name):
        return name
    found: dict[tuple[int, int] | str, tuple[str, OpenSession]] = {}  # by file identity: the path, a session
    for session in sessions:
        path = None if session.closed else _in_session(name, session)
        if path is not None:
            found.setdefault(_identity(path), (path, session))
    if len(found) > 1:
        which = "; ".join(f"{path} to {session!r}" for path, session in found.values())
        raise KprobeError(errno.EINVAL, f"{shown(name)} is a different file to each open session ({which}): "
                          "give the file's path, or make the probe with that session's decorator "
                          "(@s.uprobe(...))")
    for path, _ in found.values():
        return path
    return _in_library_dirs(Path("/"), name) or name


def _in_session(name: str, session: OpenSession) -> str | None:
    """The file a bare ``name`` is to one session: an object it maps under that name, else,
    for a dynamically linked program (a static one loads no library), the first file of that
    name and of the program's machine in its sysroot's library directories."""
    files = session.target.mapped_files()
    for mf in files:
        if name in (mf.path.name, Path(mf.name).name):
            return str(mf.path)
    root = getattr(session.target, "sysroot", None)
    if not isinstance(root, Path) or not files or files[0].image.interp is None:
        return None
    return _in_library_dirs(root, name, files[0].path)


def _in_library_dirs(root: Path, name: str, like: Path | None = None) -> str | None:
    """The first file ``name`` in ``root``'s library directories (and their multiarch ones);
    with ``like``, the first that is an ELF file of its class, byte order and machine (with
    Debian's i386 libc beside the x86_64 one, ``/lib/i386-linux-gnu`` sorts first)."""
    want = _elf_kind(like) if like is not None else None
    for sub in LIBRARY_DIRS:
        base = root / sub
        candidates = [base / name]
        if base.is_dir():
            candidates += sorted(d / name for d in base.glob("*-linux-gnu*"))
        for candidate in candidates:
            if candidate.is_file() and (want is None or _elf_kind(candidate) == want):
                return str(candidate)
    return None


#: by ``e_machine``: the ``e_flags`` bits two objects must share to link (the float ABI of ARM
#: EABI, armel or armhf; of riscv; ppc64's ELF ABI version); other bits (riscv's RVC) may differ
_ABI_FLAGS = {40: 0x600, 243: 0x6, 21: 0x3}


def _elf_kind(path: Path) -> tuple[bytes, int] | None:
    """An ELF file's class, byte order and ``e_machine`` bytes, and the ``e_flags`` bits of its
    ABI (None: not an ELF file, or unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(52)
    except OSError:
        return None
    if len(head) < 52 or head[:4] != b"\x7fELF":
        return None
    order: Literal["little", "big"] = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    at = 48 if head[4] == 2 else 36  # e_flags in ELF64 / ELF32
    return head[4:6] + head[18:20], int.from_bytes(head[at:at + 4], order) & _ABI_FLAGS.get(machine, 0)


def _identity(path: str) -> tuple[int, int] | str:
    """``(st_dev, st_ino)``: the same file under two names is one; the path where it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return path
    return st.st_dev, st.st_ino


def symbol_offset(image: ElfImage, path: str, where: str, sessions: Iterable[OpenSession] = ()) -> int:
    """The file offset of ``SYMBOL[+OFF]`` (or ``0xADDR``) in ``image``, the file at ``path``.

    An IFUNC symbol is the implementation the loader chose, read in one of ``sessions``
    that maps the file (:func:`kpsdk.binfmt.ifunc.resolve`).  ``ENOENT`` for an unknown symbol,
    ``EOPNOTSUPP`` for an IFUNC no session can say, ``EINVAL`` outside every executable
    segment.
    """
    name = where.partition("+")[0].strip()
    try:
        vaddr = image.symbols.resolve(where)
        sym = image.symbols.get(name) if name and not name.lower().startswith("0x") else None
    except SymbolError as e:
        raise KprobeError(errno.ENOENT, f"{path}: {e}{_meant(image, path, name, sessions)}") from None
    if sym is not None and sym.kind == "ifunc":
        vaddr += resolve(image, path, sym, sessions) - sym.address
    offset = image.vaddr_to_offset(vaddr)
    if offset is None:
        raise KprobeError(errno.EINVAL, f"{shown(path)}:{where} ({vaddr:#x}) is not in an executable segment "
                          "of the file")
    return offset


def _meant(image: ElfImage, path: str, name: str, sessions: Iterable[OpenSession]) -> str:
    """What a ``FILE:NAME`` the file lacks may have meant: the function of that name in a library
    a session running the file has loaded (``libc.so.6:malloc``: a program only imports it), and
    the file's own PLT stub that calls it (``PROG:malloc@plt``); "" when neither exists."""
    if not name or name.lower().startswith("0x"):
        return ""
    found: list[str] = []
    for session in sessions:
        if session.closed:
            continue
        files = session.target.mapped_files()
        if not any(image.identity is not None and mf.identity == image.identity for mf in files):
            continue
        for mf in files:
            if mf.identity != image.identity and name in mf.image.symbols \
                    and mf.image.symbols.get(name).kind in ("func", "ifunc"):
                found.append(f"{shown(f'{Path(mf.name or mf.path).name}:{name}')} (a library the program loads)")
    plt = f"{name}@plt"
    if plt in image.symbols:
        found.append(f"{shown(f'{path}:{plt}')} (the file's PLT stub that calls it)")
    found = list(dict.fromkeys(found))
    return "; it may be " + ", or ".join(found) if found else ""
