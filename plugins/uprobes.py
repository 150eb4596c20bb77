"""The uprobes probe types: probes on a file at a file offset, in every run of that file.

``Uprobe(path, offset, pre_handler, post_handler, fault_handler)`` and
``Uretprobe(path, offset, handler, entry_handler, maxactive, data_size)``, or the
text forms ``PATH:SYMBOL[+OFF]`` and ``PATH:0xOFFSET`` (``Uprobe.parse``,
``spec=``, the decorators ``s.uprobe("prog:add")``), as the kernel's uprobes
do (``uprobe_register(inode, offset, ...)`` in kernel/events/uprobes.c; U1 in
docs/semantics.md): a probe is registered by (file, offset), not by address.

* **File identity** is ``(st_dev, st_ino)``, read when the probe registers: a copy
  of the file is another file; a rename or a hard link is the same file.
* **Offset to address**: the executable ``PT_LOAD`` holding the offset gives
  ``p_vaddr + (offset - p_offset)``, plus the load bias of each run (PIE).
  Targets say which files they run and at which bias (``Target.mapped_files``).
* **Scope**: ``kpsdk.register_uprobe(up)`` is system-wide, applied to every open
  session running that file and to sessions opened later (``kpsdk_session_start``)
  until ``kpsdk.unregister_uprobe(up)``; ``s.register_uprobe(up)`` is this session's
  only.  Each session a probe applies to gets its own instance on its probe
  manager (letter ``u`` in ``list()``, named ``path:0xOFFSET``); handlers get the
  user's object as ``p`` (uretprobes: ``ri.rp``), and ``up.hits``/``up.nmissed``
  add up every session's.
* **Errors** (``KprobeError`` with the kernel's errno, see docs/api/probes.md "Uprobes"):
  a missing file ``ENOENT``; the same (file, offset) registered twice in one scope
  ``EEXIST`` (trace_uprobe's "same probe"); the same object twice ``EINVAL``;
  unregistering one not registered in that scope ``ENOENT``; an offset outside every
  executable segment, or not aligned to the instruction size ``EINVAL``
  (``uprobe_register``); inside an instruction ``EILSEQ`` (kprobes' K1 check, with
  capstone from the function start); a uretprobe not at a function entry ``EINVAL``.

Uretprobes are kretprobes underneath (:mod:`kpsdk.plugins.kretprobes`): the same
function-entry rule, instance pool and return matching (:mod:`kpsdk.rethook`).
"""

from __future__ import annotations

import errno
import os
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from kpsdk import hookimpl
from kpsdk.arch.decode import decode_at
from kpsdk.binfmt.filelocation import find_file, symbol_offset
from kpsdk.binfmt.symbols import decode_span
from kpsdk.errors import (
    ArgumentError,
    FieldTypeError,
    KprobeError,
    KpsdkError,
    LocationError,
    NeverMappedWarning,
    TargetError,
    TargetFault,
    shown,
)
from kpsdk.events import RUN_EXITED
from kpsdk.plugins.kretprobes import Kretprobe, KretprobeInstance, check_limits, function_entry
from kpsdk.plugins.kretprobes import register as kretprobe_register
from kpsdk.plugins.kretprobes import unregister as kretprobe_unregister
from kpsdk.probe import (
    HANDLER,
    INT,
    KPROBE_FLAG_DISABLED,
    STR,
    FaultHandler,
    FieldKind,
    PostHandler,
    PreHandler,
    Probe,
    ProbeType,
    check_fields,
    parse_number,
    register_all,
)
from kpsdk.scope import lookup_sessions

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session
    from kpsdk.target import MappedFile

#: a registration's key in its scope: (st_dev, st_ino, offset, is_return)
Key = tuple[int, int, int, bool]
#: the scope of a system-wide registration (a session-scope one holds its Session)
SYSTEM = "system"
RETURN_SUFFIX = "%return"


# -- the text forms -------------------------------------------------------------------------


def parse_location(text: str | Any) -> dict[str, Any]:
    """``"PATH:SYMBOL"``, ``"PATH:SYMBOL+0x4"``, ``"PATH:0xOFFSET"`` -> ``{"path", "offset"}``.

    The offset is a file offset; a symbol is looked up in the file's ``.symtab``
    and ``.dynsym`` and turned into one through the program headers.  PATH may
    be a library's bare name (``libc.so.6``): :func:`kpsdk.binfmt.filelocation.find_file`
    says which file that is.  Raises :class:`~kpsdk.errors.LocationError`
    (``EINVAL``, a ValueError) for text of another shape, :class:`KprobeError`
    ``ENOENT`` for a missing file or symbol, ``EOPNOTSUPP`` for an IFUNC symbol no open
    session can resolve (:mod:`kpsdk.binfmt.ifunc`),
    ``EINVAL`` for a symbol outside every executable segment.
    """
    if not isinstance(text, str):
        raise LocationError(errno.EINVAL, f"{shown(text)}: a uprobe location is text, PATH:SYMBOL or PATH:0xOFFSET")
    spec = text.strip()
    if spec.endswith(RETURN_SUFFIX):
        raise LocationError(errno.EINVAL, f"{shown(text)}: {RETURN_SUFFIX} makes a Uretprobe (use parse_uprobe or "
                                          "Uretprobe.parse)")
    source = split_source(spec)
    if source is not None:
        from kpsdk.plugins.uprobe_source import one_location

        return one_location(*source, lookup_sessions(_sessions))
    path, sep, where = spec.rpartition(":")
    if not sep or not path or not where.strip():
        raise LocationError(errno.EINVAL, f"{shown(text)}: want PATH:SYMBOL, PATH:SYMBOL+0xOFF or PATH:0xOFFSET")
    check_path(path)
    path = find_file(path, lookup_sessions(_sessions))
    where = where.strip()
    offset = parse_number(where)
    if offset is not None:
        return {"path": path, "offset": offset}
    try:
        return {"path": path, "offset": symbol_offset(_read_image(path), path, where, lookup_sessions(_sessions))}
    except KprobeError as e:  # no such symbol (a stripped program): a function its DWARF has
        if e.errno != errno.ENOENT or not where.isidentifier():
            raise
        from kpsdk.plugins.uprobe_source import one_location

        try:
            return one_location(path, where, lookup_sessions(_sessions))
        except KprobeError:
            raise e from None


def split_source(spec: str) -> tuple[str, str] | None:
    """``PATH:POINT`` with a source probe point: (path, point), else None (:mod:`.uprobe_source`)."""
    from kpsdk.plugins.uprobe_source import split_source as split

    return split(spec, lookup_sessions(_sessions))


def source_locations(path: str, point: str) -> list[dict[str, Any]]:
    """Each place ``PATH:POINT`` resolves to, as a probe's fields (:mod:`.uprobe_source`)."""
    from kpsdk.plugins.uprobe_source import source_locations as locations

    return locations(path, point, lookup_sessions(_sessions))


def expand_location(session: Session, text: Any) -> list[dict[str, Any]]:
    """The decorator's ``PATH:WHERE``: one probe's fields, or for a source probe point one
    probe's at each place it resolves to (every inlined copy of a function, as perf)."""
    source = split_source(text.strip()) if isinstance(text, str) else None
    if source is None:
        return [parse_location(text)]
    return [{"path": p["path"], "offset": p["offset"]} for p in source_locations(*source)]


def parse_uprobe(text: str, **fields: Any) -> Uprobe | Uretprobe:
    """A probe from its text form: ``PATH:WHERE`` a :class:`Uprobe`, ``PATH:WHERE%return``
    a :class:`Uretprobe`; ``fields`` are the handlers and options."""
    spec = text.strip()
    if spec.endswith(RETURN_SUFFIX):
        return Uretprobe(**parse_location(spec[: -len(RETURN_SUFFIX)]), **fields)
    return Uprobe(**parse_location(spec), **fields)


# -- the user's objects -----------------------------------------------------------------------


def check_path(path: str) -> None:
    """``EINVAL`` for a path no file can have (a NUL byte): the kernel could not even be given it."""
    if "\0" in path:
        raise LocationError(errno.EINVAL, f"path {shown(path)} contains a NUL byte")


def _file_path(owner: str, path: object) -> str:
    """``path=`` as a str: a str or an ``os.PathLike`` of one (FieldTypeError otherwise), with no NUL."""
    text = os.fspath(path) if isinstance(path, os.PathLike) else path
    if not isinstance(text, str):
        raise FieldTypeError(owner, "path", path, "a str or os.PathLike")
    check_path(text)
    return text


class FileProbe:
    """What Uprobe and Uretprobe share: the (file, offset) location, scope and counts."""

    letter = "u"
    is_return = False
    #: every field a registration checks the type of (see :func:`kpsdk.probe.check_fields`)
    fields: ClassVar[Mapping[str, FieldKind]] = {"path": STR, "offset": INT, "fault_handler": HANDLER, "flags": INT}
    #: the handler fields the probes armed for this one copy, and take again when they are set
    followed: ClassVar[frozenset[str]] = frozenset({"fault_handler"})

    def __init__(self, path: str | os.PathLike[str] | None, offset: int | None, spec: str | None,
                 fault_handler: FaultHandler | None, flags: int) -> None:
        if spec is not None:
            if path is not None or offset is not None:
                raise LocationError(errno.EINVAL, "give spec= or path= and offset=, not both")
            where = parse_location(spec)
            path, offset = where["path"], where["offset"]
        if path is None or offset is None:
            raise LocationError(errno.EINVAL, f"{type(self).__name__} needs path= and offset= (a file offset), "
                                              "or spec='PATH:SYMBOL'")
        self.path = find_file(_file_path(type(self).__name__, path), lookup_sessions(_sessions))
        self.offset = offset
        self.fault_handler = fault_handler
        self.flags = flags
        #: ``(st_dev, st_ino)`` of the file, read at registration
        self.identity: tuple[int, int] | None = None
        #: None, :data:`SYSTEM`, or the one Session it is registered in
        self.scope: object = None
        self._instances: list[tuple[Session, Probe]] = []
        self._retired = [0, 0]  # hits and nmissed of instances gone with their sessions
        #: whether any session ever mapped the file while the probe was registered
        self.ever_armed = False

    @classmethod
    def parse(cls, text: str, **fields: Any) -> Any:
        """``Uprobe.parse("prog:add", pre_handler=h)``: see :func:`parse_location`."""
        spec = text.strip()
        if cls.is_return and spec.endswith(RETURN_SUFFIX):
            spec = spec[: -len(RETURN_SUFFIX)]
        return cls(**parse_location(spec), **fields)

    @property
    def label(self) -> str:
        """``path:0xOFFSET`` (``%return`` for a return probe): its name in ``list()`` and ``profile()``."""
        return f"{self.path}:{self.offset:#x}" + (RETURN_SUFFIX if self.is_return else "")

    @property
    def registered(self) -> bool:
        return self.scope is not None

    @property
    def system_wide(self) -> bool:
        return self.scope is SYSTEM

    @property
    def disabled(self) -> bool:
        return bool(self.flags & KPROBE_FLAG_DISABLED)

    @property
    def sessions(self) -> list[Session]:
        """The sessions the probe is armed in now (those running its file)."""
        return [s for s, _ in self._instances]

    def address_in(self, session: Session) -> int:
        """The address the probe has in ``session`` (the file offset through that run's bias)."""
        for s, inst in self._instances:
            if s is session:
                assert inst.addr is not None
                return inst.addr
        raise KprobeError(errno.ENOENT, f"{self!r} is not armed in {session!r}")

    @property
    def hits(self) -> int:
        """Hits whose handlers ran, over every session (closed ones included)."""
        return self._retired[0] + sum(inst.hits for _, inst in self._instances)

    @property
    def nmissed(self) -> int:
        return self._retired[1] + sum(inst.nmissed for _, inst in self._instances)

    def __repr__(self) -> str:
        scope = "unregistered" if self.scope is None else "system-wide" if self.scope is SYSTEM else "session"
        return f"<{type(self).__name__} {self.label} {scope}>"

    def __setattr__(self, name: str, value: Any) -> None:
        """A handler set on a registered probe reaches the probes armed for it in each
        session, as a kprobe's does (its hits read the handler then).  Each armed probe
        keeps its own copy of the handlers, so that a hit reads no extra attribute."""
        object.__setattr__(self, name, value)
        if name in self.followed:
            for _, inst in self.__dict__.get("_instances", ()):
                cast(_Armed, inst).follow(name)


class Uprobe(FileProbe):
    """A probe on the instruction at file offset ``offset`` of the executable ``path``.

    Handlers as for kprobes: ``pre_handler(p, regs)`` (non-zero with a new
    ``regs.ip`` changes the path), ``post_handler(p, regs, flags)``,
    ``fault_handler(p, regs, trapnr)``; ``p`` is this object.
    """

    fields = {**FileProbe.fields, "pre_handler": HANDLER, "post_handler": HANDLER}
    followed = frozenset({"pre_handler", "post_handler", "fault_handler"})

    def __init__(self, path: str | os.PathLike[str] | None = None, offset: int | None = None,
                 pre_handler: PreHandler | None = None, post_handler: PostHandler | None = None,
                 fault_handler: FaultHandler | None = None, *, flags: int = 0, spec: str | None = None) -> None:
        super().__init__(path, offset, spec, fault_handler, flags)
        self.pre_handler = pre_handler
        self.post_handler = post_handler
        check_fields(self, Uprobe.fields)


class Uretprobe(FileProbe):
    """A probe on the return of the function whose entry is at file offset ``offset``.

    As :class:`~kpsdk.plugins.kretprobes.Kretprobe`: ``handler(ri, regs)`` at the
    return, ``entry_handler(ri, regs) -> int`` at the entry (non-zero: skip this
    call), ``maxactive`` instances per session, ``ri.data`` of ``data_size`` bytes;
    ``ri.rp`` is this object.
    """

    is_return = True
    fields = {**FileProbe.fields, "handler": HANDLER, "entry_handler": HANDLER, "maxactive": INT, "data_size": INT}
    #: not pre_handler: the armed kretprobe's own is its entry hook (kretprobes.register)
    followed = frozenset({"handler", "entry_handler", "fault_handler"})

    def __init__(self, path: str | os.PathLike[str] | None = None, offset: int | None = None,
                 handler: Callable[[Any, PtRegs], Any] | None = None,
                 entry_handler: Callable[[Any, PtRegs], Any] | None = None, maxactive: int = 0,
                 data_size: int = 0, *, fault_handler: FaultHandler | None = None, flags: int = 0,
                 spec: str | None = None) -> None:
        super().__init__(path, offset, spec, fault_handler, flags)
        self.handler = handler
        self.entry_handler = entry_handler
        self.maxactive = maxactive
        self.data_size = data_size
        check_fields(self, Uretprobe.fields)


class UretprobeInstance(KretprobeInstance):
    """A uretprobe's ``ri``: ``ri.rp`` is the user's :class:`Uretprobe`."""

    __slots__ = ()

    @property
    def rp(self) -> Any:
        return cast(SessionUretprobe, self.rethook.owner).owner


# -- what one session gets -------------------------------------------------------------------


def _fault_as_owner(handler: Callable[..., Any] | None, owner: FileProbe) -> Callable[..., Any] | None:
    """A uretprobe's fault_handler ``(p, regs, trapnr)``, called with the user's object instead of
    the session's instance (whose ``p`` the kretprobe's entry needs: no ``handler_arg``)."""
    if handler is None:
        return None
    return lambda _p, regs, x: handler(owner, regs, x)


class _Armed:
    """What a probe armed in one session for a user's :class:`FileProbe` shares: it is
    enabled and shown as its owner, and takes the handlers its owner is given."""

    owner: FileProbe
    #: the mapping of the file it is armed in: ((st_dev, st_ino), load bias)
    mapping: tuple[tuple[int, int], int] | None = None

    def follow(self, name: str) -> None:
        """The owner's handler field ``name`` changed: take its new value."""
        setattr(self, name, getattr(self.owner, name))

    @property
    def disabled(self) -> bool:
        return self.owner.disabled

    def __repr__(self) -> str:
        return repr(self.owner)


class SessionUprobe(_Armed, Probe):
    """A :class:`Uprobe` armed in one session (a plain probe on its manager)."""

    letter = "u"

    def __init__(self, owner: Uprobe) -> None:
        super().__init__(pre_handler=owner.pre_handler, post_handler=owner.post_handler,
                         fault_handler=owner.fault_handler)
        self.owner = owner
        #: the user's handlers get the user's Uprobe, with no wrapper frame: a ``(p, regs)``
        #: lambda cost ~0.15 us a hit, most of a uprobe hit's cost over a kprobe's
        self.handler_arg = owner
        self.label = self.name = owner.label


class SessionUretprobe(_Armed, Kretprobe):
    """A :class:`Uretprobe` armed in one session: a kretprobe whose instances know the owner."""

    letter = "u"
    instance_class = UretprobeInstance

    def __init__(self, owner: Uretprobe, addr: int) -> None:
        super().__init__(addr=addr, handler=owner.handler, entry_handler=owner.entry_handler,
                         maxactive=owner.maxactive, data_size=owner.data_size,
                         fault_handler=_fault_as_owner(owner.fault_handler, owner))
        self.owner = owner
        self.label = self.name = owner.label

    def follow(self, name: str) -> None:
        """As :meth:`_Armed.follow`; the fault_handler is called with the owner, as at arming."""
        if name == "fault_handler":
            self.fault_handler = _fault_as_owner(self.owner.fault_handler, self.owner)
        else:
            super().follow(name)


# -- checking a probe against its file ---------------------------------------------------------

_images: dict[tuple[int, int, int, int], ElfImage] = {}


def _read_image(path: str) -> ElfImage:
    """The ELF file at ``path``, parsed once per (identity, mtime, size)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise KprobeError(errno.ENOENT, f"{shown(path)}: no such file") from None
    except OSError as e:
        raise KprobeError(e.errno or errno.EINVAL, f"{shown(path)}: {e.strerror}") from None
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
    image = _images.get(key)
    if image is None:
        from kpsdk.binfmt.elfimage import load_elf  # pyelftools loads when first used (start-up time)

        try:
            image = load_elf(path)
        except TargetError as e:
            raise KprobeError(errno.EINVAL, f"not an executable ELF file: {e}") from None  # e names the path
        _images[key] = image
    return image


class FileView:
    """A file's segments as memory at its link-time addresses: enough of a target
    for :func:`kpsdk.arch.decode.decode_at` and ``function_entry`` before any run."""

    def __init__(self, image: ElfImage, arch: Arch) -> None:
        self.image, self.arch, self.symbols = image, arch, image.symbols

    def read_memory(self, addr: int, size: int) -> bytes:
        for seg in self.image.segments:
            if seg.vaddr <= addr < seg.vaddr + len(seg.data):
                return seg.data[addr - seg.vaddr: addr - seg.vaddr + size]
        raise TargetFault(f"{self.image.path} has no bytes at {addr:#x}")


def check_file(up: FileProbe, registry: Registry) -> Key:
    """Validate ``up`` against its file, as uprobe_register would; its key if good."""
    check_fields(up, type(up).fields)
    check_path(up.path)
    if up.registered:
        raise KprobeError(errno.EINVAL, f"{up!r} is already registered")
    if isinstance(up, Uretprobe):
        check_limits(up)
    image = _read_image(up.path)
    st = os.stat(up.path)
    if up.offset < 0 or up.offset >= st.st_size:
        raise KprobeError(errno.EINVAL, f"offset {up.offset:#x} is outside {up.path} ({st.st_size} bytes)")
    vaddr = image.offset_to_vaddr(up.offset)
    if vaddr is None:
        raise KprobeError(errno.EINVAL, f"offset {up.offset:#x} of {up.path} is not inside an executable segment")
    arch = registry.archs.by_elf(image.machine, image.elf_class, image.endian)
    view = FileView(image, arch)
    sym = image.symbols.containing(vaddr)
    iset = arch.iset(sym.iset or None) if sym is not None else arch.isets[0]
    where = f"{up.path}:{up.offset:#x} ({image.symbols.format(vaddr)})"
    if vaddr % iset.min_insn:
        raise KprobeError(errno.EINVAL, f"{where} is not aligned to {iset.min_insn}-byte instructions")
    start, end = decode_span(sym, vaddr)
    insn = decode_at(view, vaddr, start, iset, end)
    if insn is None:
        raise KprobeError(errno.EILSEQ, f"{where} is not on an instruction boundary")
    if insn.refused:
        raise KprobeError(errno.EINVAL, f"{where}: {insn.refused}")
    if isinstance(up, Uretprobe):
        function_entry(view, SessionUretprobe(up, vaddr), vaddr)
    return (st.st_dev, st.st_ino, up.offset, up.is_return)


# -- applying probes to sessions ----------------------------------------------------------------

#: system-wide registrations, by key
_system: dict[Key, FileProbe] = {}
#: session-scope registrations, per session
_local: weakref.WeakKeyDictionary[Session, dict[Key, FileProbe]] = weakref.WeakKeyDictionary()
#: the open sessions (those a system-wide registration applies to)
_sessions: weakref.WeakSet[Session] = weakref.WeakSet()
#: the files each session has had a uprobe armed in (for the end-of-run report)
_mapped_in: weakref.WeakKeyDictionary[Session, set[tuple[int, int]]] = weakref.WeakKeyDictionary()


def _files_of(session: Session, identity: tuple[int, int]) -> list[MappedFile]:
    return [mf for mf in session.target.mapped_files() if mf.identity == identity]


def _attach(up: FileProbe, session: Session, mf: MappedFile) -> None:
    """Arm ``up`` in one session running its file, at the offset's address in that run."""
    link = mf.image.offset_to_vaddr(up.offset)
    if link is None:
        raise KprobeError(errno.EINVAL, f"offset {up.offset:#x} is not executable in {mf.path} as {session!r} runs it")
    addr = link + mf.bias
    inst: Probe
    if isinstance(up, Uretprobe):
        inst = SessionUretprobe(up, addr)
        kretprobe_register(session, inst)
    else:
        assert isinstance(up, Uprobe)
        inst = SessionUprobe(up)
        session.target.manager.add(inst, addr)
    inst.mapping = (mf.identity, mf.bias)
    up._instances.append((session, inst))
    _mapped_in.setdefault(session, set()).add(mf.identity)
    up.ever_armed = True


def _detach(up: FileProbe, session: Session | None = None, since: int = 0, disarm: bool = True,
            mapping: tuple[tuple[int, int], int] | None = None) -> None:
    """Disarm ``up`` in ``session`` (every session when None), only the instances
    armed after the first ``since`` (and, given ``mapping``, only in that mapping of
    a file); keep their counts.  ``disarm=False``: the session is closing, its target
    goes with its probes (and may be dead already)."""
    keep = up._instances[:since]
    for s, inst in up._instances[since:]:
        if (session is not None and s is not session) or (mapping is not None and
                                                          getattr(inst, "mapping", None) != mapping):
            keep.append((s, inst))
            continue
        up._retired[0] += inst.hits
        up._retired[1] += inst.nmissed
        if disarm and not s.closed:
            if isinstance(inst, SessionUretprobe):
                kretprobe_unregister(s, inst)
            else:
                s.target.manager.remove(inst)
    up._instances = keep


def _apply(up: FileProbe, sessions: Iterable[Session]) -> None:
    """Arm ``up`` in each session running its file; all or none."""
    assert up.identity is not None
    before = len(up._instances)
    try:
        for session in sessions:
            if not session.closed:
                for mf in _files_of(session, up.identity):
                    _attach(up, session, mf)
    except BaseException:
        _detach(up, since=before)
        raise


def _file_probe(verb: str, up: object, cls: type = FileProbe) -> None:
    """An :class:`~kpsdk.errors.ArgumentError` when ``verb`` was given anything but a ``cls``."""
    if not isinstance(up, cls):
        want = "a Uprobe or Uretprobe" if cls is FileProbe else f"a {cls.__name__}"
        raise ArgumentError(f"{verb} takes {want}, not {shown(up)}")


def register_uprobe(up: FileProbe) -> FileProbe:
    """System-wide: ``up`` applies to every session running its file, now and opened later."""
    _file_probe("register_uprobe", up)
    from kpsdk.registry import get_registry

    _register_in(_system, SYSTEM, up, check_file(up, get_registry()), list(_sessions),
                 "a system-wide uprobe is already registered at {}")
    return up


def unregister_uprobe(up: FileProbe) -> None:
    """Undo :func:`register_uprobe`: disarmed in every session; ``ENOENT`` if not registered system-wide."""
    _file_probe("unregister_uprobe", up)
    if not up.system_wide:
        raise KprobeError(errno.ENOENT, f"{up!r} is not registered system-wide")
    assert up.identity is not None
    _detach(up)
    del _system[(*up.identity, up.offset, up.is_return)]
    up.scope = None


def register_uprobes(probes: Iterable[FileProbe]) -> None:
    """System-wide batch registration: all, or none (K8)."""
    register_all(probes, register_uprobe, unregister_uprobe)


def unregister_uprobes(probes: Iterable[FileProbe]) -> None:
    """System-wide batch unregistration; ones not registered system-wide are skipped."""
    for up in probes:
        _file_probe("unregister_uprobes", up)
        if up.system_wide:
            unregister_uprobe(up)


def register_uretprobe(rp: Uretprobe) -> Uretprobe:
    """System-wide registration of a return probe (the same as :func:`register_uprobe`)."""
    _file_probe("register_uretprobe", rp, Uretprobe)
    register_uprobe(rp)
    return rp


def unregister_uretprobe(rp: Uretprobe) -> None:
    unregister_uprobe(rp)


# -- the session verbs (register_uprobe, unregister_uprobe, enable_, disable_, batches) -----------


def session_register(session: Session, up: FileProbe) -> None:
    """This session only (``s.register_uprobe``)."""
    if session.closed:
        raise KpsdkError("the session is closed")
    _register_in(_local.setdefault(session, {}), session, up, check_file(up, session.registry), [session],
                 "a uprobe is already registered at {} in this session")


def _register_in(table: dict[Key, FileProbe], scope: Any, up: FileProbe, key: Key, sessions: list[Session],
                 taken: str) -> None:
    """Record ``up`` under ``key`` in a scope's table and arm it in ``sessions``, or leave
    no trace; ``EEXIST`` (``taken``, formatted with the holder's label) when the key is held."""
    if key in table:
        raise KprobeError(errno.EEXIST, taken.format(table[key].label) + " (the same file and offset)")
    up.identity, up.scope = (key[0], key[1]), scope
    table[key] = up
    try:
        _apply(up, sessions)
    except BaseException:
        del table[key]
        up.scope = None
        raise


def session_unregister(session: Session, up: FileProbe) -> None:
    if up.scope is not session:
        where = "system-wide: use kpsdk.unregister_uprobe" if up.system_wide else "in this session"
        raise KprobeError(errno.ENOENT, f"{up!r} is not registered {where}")
    assert up.identity is not None
    _detach(up, session)
    _local.get(session, {}).pop((*up.identity, up.offset, up.is_return), None)
    up.scope = None


def set_disabled(session: Session, up: FileProbe, disabled: bool) -> None:
    """Enable or disable ``up`` wherever it is armed (the flag is the probe's, as in the kernel)."""
    if not up.registered:
        raise KprobeError(errno.EINVAL, f"{up!r} is not registered")
    up.flags = up.flags | KPROBE_FLAG_DISABLED if disabled else up.flags & ~KPROBE_FLAG_DISABLED
    for s, inst in up._instances:
        if not s.closed:
            s.target.manager.set_disabled(inst, disabled)


# -- sessions opened and closed ---------------------------------------------------------------------


@hookimpl
def kpsdk_session_start(session: Session) -> None:
    """Arm the system-wide uprobes whose file this new session runs."""
    _sessions.add(session)
    if not _system:
        return
    mine = {mf.identity for mf in session.target.mapped_files()}
    try:
        for up in list(_system.values()):
            if up.identity in mine:
                _apply(up, [session])
    except BaseException:
        session.close()  # nothing half-armed, no target left running
        raise


def _armed_at(up: FileProbe, session: Session, mapping: tuple[tuple[int, int], int]) -> bool:
    return any(s is session and getattr(inst, "mapping", None) == mapping for s, inst in up._instances)


@hookimpl
def kpsdk_library_loaded(session: Session, library: MappedFile) -> None:
    """A file was mapped into a running session (a library the loader brought in, a
    ``dlopen``): arm the uprobes on that file, system-wide and the session's own."""
    if session.closed:
        return
    mapping = (library.identity, library.bias)
    for up in [*_system.values(), *_local.get(session, {}).values()]:
        if up.identity == library.identity and not _armed_at(up, session, mapping):
            _attach(up, session, library)


@hookimpl
def kpsdk_library_unloaded(session: Session, library: MappedFile) -> None:
    """A file was unmapped (``dlclose``): its uprobes are disarmed there, their counts kept."""
    mapping = (library.identity, library.bias)
    for up in [*_system.values(), *_local.get(session, {}).values()]:
        if up.identity == library.identity:
            _detach(up, session, mapping=mapping)


@hookimpl
def kpsdk_run_end(session: Session, reason: str, status: int | None) -> None:
    """When a program ended, say which of its uprobes could never fire: their file was never
    mapped (a :class:`~kpsdk.errors.NeverMappedWarning` each, naming the files the program
    did map under the same name)."""
    if reason != RUN_EXITED:
        return
    seen = _mapped_in.get(session, set())
    local = list(_local.get(session, {}).values())
    for up in [*local, *(up for up in _system.values() if not up.ever_armed)]:
        if up.identity in seen or (up in local and up.hits):
            continue
        name = os.path.basename(up.path)
        others = [str(mf.path) for mf in session.target.mapped_files()
                  if name in (mf.path.name, os.path.basename(mf.name)) and mf.identity != up.identity]
        where = f"this program maps {', '.join(others)} (a different file)" if others else \
            f"this program maps no file called {name}"
        # attributed to kpsdk itself (the hook's caller is pluggy, no help to a user)
        warnings.warn_explicit(NeverMappedWarning(f"0 hits: {up.path} was never mapped; {where}"),
                               NeverMappedWarning, "kpsdk", 0)


@hookimpl
def kpsdk_session_finish(session: Session) -> None:
    """Disarm everything in a closing session; its own uprobes become unregistered."""
    _sessions.discard(session)
    for up in list(_system.values()):
        _detach(up, session, disarm=False)
    for up in list(_local.pop(session, {}).values()):
        _detach(up, session, disarm=False)
        up.scope = None


UPROBE = ProbeType(
    name="uprobe",
    probe_class=Uprobe,
    register=session_register,
    unregister=session_unregister,
    exports={"Uprobe": Uprobe, "Uretprobe": Uretprobe, "UretprobeInstance": UretprobeInstance,
             "register_uprobe": register_uprobe, "unregister_uprobe": unregister_uprobe,
             "register_uprobes": register_uprobes, "unregister_uprobes": unregister_uprobes,
             "register_uretprobe": register_uretprobe, "unregister_uretprobe": unregister_uretprobe,
             "parse_uprobe": parse_uprobe},
    description="a pre/post handler on a file's instruction, by (file, offset)",
    parse_location=parse_location,
    set_disabled=set_disabled,
    expand_location=expand_location,
)

URETPROBE = ProbeType(
    name="uretprobe",
    probe_class=Uretprobe,
    register=session_register,
    unregister=session_unregister,
    decorator_field="handler",
    description="a handler when a file's function returns, by (file, offset)",
    parse_location=lambda text: parse_location(text.strip().removesuffix(RETURN_SUFFIX)
                                               if isinstance(text, str) else text),
    set_disabled=set_disabled,
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [UPROBE, URETPROBE]
