"""Which ELF objects a program behind a user-space stub has mapped, kept up to date while it runs.

gdb's own shared-library machinery is not used: on x86 qemu-user it lists no library
at all (QEMU's target description lacks ``org.gnu.gdb.i386.linux``, so gdb never sets
up its SVR4 link-map reader).  kpsdk reads the loader's list itself with
:class:`kpsdk.binfmt.linkmap.LinkMap` (the ``r_debug`` protocol), once when the session opens
at the program's entry point (the loader has mapped and relocated the libraries the
program was linked with) and again at each stop on ``r_debug.r_brk``, the function the
loader calls around every ``dlopen``/``dlclose``: glibc calls it before the change
(``r_state`` ``RT_ADD``/``RT_DELETE``) and after it (``RT_CONSISTENT``); gdb's agent
continues the first call itself, so kpsdk stops once per change, and never on a probe hit.

Each object becomes a :class:`~kpsdk.target.MappedFile`: the host file (the path the
program used, looked up in the sysroot first, as QEMU's ``-L`` does), its identity
(device, inode), its load bias and its ELF image.  Objects with no host file (a vDSO)
are skipped.  New and gone objects fire ``kpsdk_library_loaded`` and
``kpsdk_library_unloaded``, which the uprobes plugin arms and disarms on.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.binfmt.elfimage import ElfImage, load_elf
from kpsdk.binfmt.linkmap import AT_BASE, RT_CONSISTENT, LinkMap, LoadedObject, RDebug
from kpsdk.binfmt.symbols import loaded_symbols
from kpsdk.errors import ExecNotFollowedWarning, SymbolError, TargetError, TargetFault
from kpsdk.target import MappedFile

if TYPE_CHECKING:
    from kpsdk.targets.live.target import GdbTarget

#: parsed images of the files seen, by (device, inode, mtime, size): a library mapped by
#: many sessions, or again after a dlclose, is read once
_images: dict[tuple[int, int, int, int], ElfImage] = {}
#: the C library's exec system call wrappers: execv, execvp, execl..., posix_spawn's child,
#: fexecve all end in one of them
EXEC_FUNCTIONS = ("execve", "execveat")


def read_image(path: Path) -> ElfImage:
    """The ELF file at ``path`` (TargetError if it is none), parsed once per version of the file."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    image = _images.get(key)
    if image is None:
        image = _images[key] = load_elf(path)
    return image


def host_path(name: str, sysroot: Path | None, cwd: Path) -> Path | None:
    """Where the file a program opened as ``name`` is on the host, as qemu-user finds it:
    inside ``sysroot`` when it exists there (QEMU's ``-L``), else the path itself
    (relative to the program's working directory).  None when neither exists."""
    if not name:
        return None
    if sysroot is not None and name.startswith("/"):
        inside = sysroot / name.lstrip("/")
        if inside.is_file():
            return inside
    plain = cwd / name
    return plain if plain.is_file() else None


class Libraries:
    """The objects a live program has mapped (its :meth:`~kpsdk.target.Target.mapped_files`).

    :param target: the qemu-user target, stopped at the program's entry point.
    :param program: the program's file as linked.
    :param bias: where the program was loaded.
    :param auxv: the auxiliary vector the program started with.
    :param sysroot: where the program's libraries are looked up first (QEMU's ``-L``).
    :param cwd: the program's working directory.
    """

    def __init__(self, target: GdbTarget, program: ElfImage, bias: int, auxv: dict[int, int],
                 sysroot: Path | None, cwd: Path) -> None:
        self.target, self.program, self.auxv, self.sysroot, self.cwd = target, program, auxv, sysroot, cwd
        self.map = LinkMap(target.read_memory, target.arch.word_size, target.arch.endian)
        self.main = MappedFile.of(program, bias)
        #: the link_map entries seen, by :attr:`~kpsdk.binfmt.linkmap.LoadedObject.key`: what each became
        self.known: dict[tuple[int, int, int, int], MappedFile | None] = {}
        self.r_debug = 0
        self.brk: int | None = None
        #: the names of the entries of the last walk (never read twice)
        self._names: dict[tuple[int, int, int, int], str] = {}
        #: every object path the program mapped, host file or not (for "never mapped" reports)
        self.names: set[str] = set()

    # -- finding r_debug -----------------------------------------------------------------------

    def _find_r_debug(self) -> int:
        """``DT_DEBUG`` of the running program, else the loader's exported ``_r_debug``."""
        dynamic = self.map.dynamic_address(self.auxv, self.program.raw_entry)
        where = self.map.r_debug_address(dynamic) if dynamic is not None else 0
        if where or self.program.interp is None:
            return where
        loader = host_path(self.program.interp, self.sysroot, self.cwd)
        if loader is None:
            return 0
        try:
            return read_image(loader).symbols.get("_r_debug").address + self.auxv.get(AT_BASE, 0)
        except (SymbolError, TargetError):
            return 0

    def start(self, listed: list[tuple[int, str]] | None = None) -> None:
        """Read the list as the loader left it (at the program's entry, or in a running
        process), and stop on every later change (a breakpoint on ``r_brk``).

        ``listed``: the entries and their names as the stub gave them
        (``qXfer:libraries-svr4``, :func:`kpsdk.targets.live.userstub.svr4_objects`): no
        name is read from memory then."""
        self.r_debug = self._find_r_debug()
        if not self.r_debug:
            self.target._files = (self.main,)
            return
        self.refresh(emit=False, listed=listed)
        self._watch_exec()
        brk = self._code_address(self.map.r_debug(self.r_debug).brk)
        if brk is not None:
            self.brk = brk
            # one stop per change: the agent lets the call before it (RT_ADD, RT_DELETE) go on
            state = self.map.r_state_address(self.r_debug)
            self.target.add_stop_hook(brk, self.on_brk, only_when=(state, 4, RT_CONSISTENT))

    # -- exec: not followed yet ---------------------------------------------------------------

    def _watch_exec(self) -> None:
        """Stop at the C library's ``execve`` and ``execveat`` (every exec function of glibc
        ends in one of them) to say that the new program will not be followed."""
        for mf in self.target._files:
            if mf is self.main:
                continue
            for name in EXEC_FUNCTIONS:
                try:
                    sym = mf.image.symbols.get(name)
                except SymbolError:
                    continue
                if sym.kind == "func":
                    self.target.add_stop_hook(mf.bias + sym.address, functools.partial(self.on_exec, name))

    def on_exec(self, function: str) -> None:
        """The program is in ``execve``/``execveat``: warn, naming the program it asked for."""
        regs = self.target.regs()
        pointer = regs.arg(1 if function == "execveat" else 0)
        path = self._string(pointer)
        warnings.warn(ExecNotFollowedWarning(
            f"the program called {function}({path!r}): kpsdk does not follow exec yet (qemu-user runs the new "
            "program through the host's execve, outside this session's gdbstub); it runs unprobed and the run "
            "ends with its exit status"), stacklevel=2)

    def _string(self, pointer: int, limit: int = 4096) -> str:
        """The NUL-terminated string at ``pointer`` (at most ``limit`` bytes; "?" unreadable)."""
        out = b""
        try:
            while len(out) < limit and b"\0" not in out:
                out += self.target.read_memory(pointer + len(out), 64)
        except TargetFault:
            return "?"
        return out.partition(b"\0")[0].decode("utf-8", "backslashreplace")

    def _code_address(self, pointer: int) -> int | None:
        """Where the function a function pointer (``r_brk``) designates starts: the pointer
        itself when it points at code (without ARM's Thumb bit), else the first word it
        points at when that is code (a function descriptor: ppc64 ELFv1's ``.opd``)."""
        if not pointer:
            return None
        if self.target.arch.has_thumb:
            pointer &= ~1
        if self.target.is_executable(pointer):
            return pointer
        code = self.map.word_at(pointer)
        return code if self.target.is_executable(code) else None

    # -- keeping up ----------------------------------------------------------------------------

    def on_brk(self) -> None:
        """The loader is at ``r_brk`` (the CPU stopped there): when its list is consistent
        again, tell plugins what came and went."""
        debug = self.map.r_debug(self.r_debug)
        if debug.state == RT_CONSISTENT:
            self.refresh(emit=True, debug=debug)

    def refresh(self, emit: bool, debug: RDebug | None = None, listed: list[tuple[int, str]] | None = None) -> None:
        """Walk the list (or take the stub's, ``listed``), update the target's files and
        symbols, fire the events for the difference."""
        now: dict[tuple[int, int, int, int], MappedFile | None] = {}
        if listed is not None:
            entries = [self.map.entry(node, name=name)[0] for node, name in listed]
        else:
            entries = self.map.objects((debug or self.map.r_debug(self.r_debug)).map, self._names)
        for entry in entries:
            key = entry.key
            now[key] = self.known[key] if key in self.known else self._mapped(entry, first=not now)
        self._names = {entry.key: entry.name for entry in entries}
        gone = [mf for key, mf in self.known.items() if key not in now and mf is not None]
        new = [mf for key, mf in now.items() if key not in self.known and mf is not None]
        self.known = now
        files = [mf for mf in now.values() if mf is not None]
        if not any(mf is self.main for mf in files):
            files.insert(0, self.main)
        self.target._files = tuple(files)
        self.target.set_symbols(loaded_symbols(files))
        if emit:
            for mf in gone:
                self.target.emit("library_unloaded", library=mf)
            for mf in new:
                self.target.emit("library_loaded", library=mf)

    def _mapped(self, entry: LoadedObject, first: bool) -> MappedFile | None:
        """What one link_map entry is on the host; the program itself for the list's head."""
        if first and not entry.name:
            return self.main
        self.names.add(entry.name)
        path = host_path(entry.name, self.sysroot, self.cwd)
        if path is None:
            return None  # a vDSO, or a file the host does not have
        try:
            image = read_image(path)
        except (OSError, TargetError):
            return None
        return replace(MappedFile.of(image, entry.bias), name=entry.name)
