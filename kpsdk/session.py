"""A session: one target, its probes, and the kernel-style API on top.

The verbs of every probe type are derived from its name, so the session needs
no code per type: ``register_kprobe``/``register_kprobes``/``unregister_*``/
``enable_*``/``disable_*`` and the decorator ``s.kprobe("sym+0x4")``.  Batch
registration rolls back the probes it already registered when one fails (K8).
The built-in types' verbs are declared with their types in :mod:`kpsdk.verbs`
for type checkers; ``dir(s)`` and ``help(s.register_kprobe)`` show every type's.
"""

from __future__ import annotations

import builtins
import gc
import math
import numbers
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from kpsdk.argcheck import want_address, want_bytes, want_int
from kpsdk.errors import ArgumentError, KpsdkError, shown
from kpsdk.events import RUN_ERROR, RUN_EXITED, RUN_STOPPED
from kpsdk.probe import Probe, ProbeSet, ProbeType, is_int, register_all
from kpsdk.scope import making_for
from kpsdk.verbs import BuiltinVerbs

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.backtrace import Frame
    from kpsdk.binfmt.dwarf import DebugInfo
    from kpsdk.binfmt.symbols import SymbolTable
    from kpsdk.debuginfo import SessionDebug
    from kpsdk.registry import Registry
    from kpsdk.regs import PtRegs
    from kpsdk.target import Target

_VERBS = ("register", "unregister", "enable", "disable")


def _named(fn: Callable[..., Any], name: str, doc: str) -> Callable[..., Any]:
    """A derived verb with its name and docstring (``help(s.register_kprobe)``)."""
    fn.__name__, fn.__qualname__, fn.__doc__ = name, f"Session.{name}", doc
    return fn


def _verb_doc(verb: str, pt: ProbeType, batch: bool) -> str:
    cls = pt.probe_class.__name__
    what = f" ({pt.description})" if pt.description else ""
    if batch:
        return {"register": f"Register every {cls} of the list, or none (K8): on an error the ones done are "
                            "unregistered and the error goes on.",
                "unregister": f"Unregister every {cls} of the list; ones not registered are skipped."}[verb]
    return {"register": f"Register a {cls}{what}; returns it, or what its type returns (a watchpoint's slot).",
            "unregister": f"Unregister a {cls}.",
            "enable": f"Arm a registered {cls} again (K7).",
            "disable": f"Disarm a registered {cls} without unregistering it (K7)."}[verb]


def _decorator_doc(pt: ProbeType) -> str:
    return (f"Decorator: ``@s.{pt.name}(where, **fields)`` makes a {pt.probe_class.__name__} at ``where`` whose "
            f"{pt.decorator_field} is the decorated function, registers it and returns it.")


#: the most bytes one ``read_memory`` (or ``read_int``) returns, 1 GiB: the buffer is made
#: before the target is asked, and a size such as 2**34 took the machine's memory (split
#: larger reads)
READ_MAX = 1 << 30

#: how :meth:`Session.call` reads a return value: a signed or unsigned word, or 32 bits
RESTYPES = ("long", "ulong", "int", "uint")


def check_call(fn: object, args: tuple[object, ...], restype: object) -> None:
    """What :meth:`Session.call` accepts: a function name or address, int arguments, a restype."""
    if not (isinstance(fn, str) or is_int(fn)):
        raise ArgumentError(f"call: the function is a name or an address, not {shown(fn)}")
    for n, arg in enumerate(args):
        if not is_int(arg):
            raise ArgumentError(f"call {shown(fn)}: argument {n} is {shown(arg)}; arguments are ints")
    if restype not in RESTYPES:
        raise ArgumentError(f"call {shown(fn)}: restype={shown(restype)}; want one of {', '.join(RESTYPES)}")


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """A run's limit in seconds, as every target gets it: None for no limit, else a positive float.

    ``None`` and ``math.inf`` mean no limit (so does a number too large for a float);
    any other real number must be positive.  ``nan``, 0, a negative number, a bool or a
    string is an :class:`~kpsdk.errors.ArgumentError` naming ``name`` and the value,
    before anything runs: 0 and negative values used to mean "no limit" on one
    target and "stop at once" on another.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ArgumentError(f"{name}={shown(timeout)}: want a number of seconds (None or math.inf: no limit), "
                            f"not {type(timeout).__name__}")
    try:
        seconds = float(timeout)
    except OverflowError:
        return None  # an int beyond any float: longer than any run
    if math.isnan(seconds) or seconds <= 0:
        raise ArgumentError(f"{name}={shown(timeout)}: want a positive number of seconds "
                            "(None or math.inf: no limit)")
    return None if math.isinf(seconds) else seconds


class Session(BuiltinVerbs):
    """What :func:`kpsdk.open` returns: one target and the probes on it.

    Registration (the verbs of every probe type, and :meth:`register` /
    :meth:`unregister` for any probe), knobs (:attr:`kprobes_enabled`,
    :attr:`kprobes_optimization`, :attr:`blacklist`), reports (:meth:`list`,
    :meth:`profile`), the target's memory, registers and symbols, and runs
    (:meth:`run`, :meth:`call`, :meth:`stop`).  Close it (or use ``with``) to
    release what the target holds: QEMU and gdb processes are reaped.
    """

    def __init__(self, target: Target, registry: Registry, spec: str,
                 debug_dir: str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None = None) -> None:
        self.target = target
        self.registry = registry
        self.spec = spec
        self.closed = False
        #: where separate debug files are looked for first (``kpsdk.open(..., debug_dir=...)``)
        self.debug_dirs = ([] if debug_dir is None else [debug_dir] if isinstance(debug_dir, str | os.PathLike)
                           else list(debug_dir))
        self._debug: SessionDebug | None = None
        target.session = self
        #: the arch's largest address, for the memory calls' argument checks
        self._word_mask = target.arch.word_mask

    # -- probe registration, for every probe type -------------------------------

    def register(self, probe: Probe) -> Any:
        """Register any probe (its type is found from its class).

        Returns what the type's ``register`` returned when it returned something
        (a watchpoint's slot number, as ``register_kwatch`` did), else the probe.
        """
        result = self._probe_type(probe).register(self, probe)
        return probe if result is None else result

    def unregister(self, probe: Probe) -> None:
        """Unregister any probe (its type is found from its class)."""
        self._probe_type(probe).unregister(self, probe)

    def register_many(self, probes: Iterable[Probe]) -> None:
        """K8: register all, or none (the ones done are rolled back on error).

        Python's cyclic garbage collector is paused for the batch (and left as it was
        found): registering 10,000 probes made it walk the growing set of points again
        and again, ~15% of the batch (docs/performance.md).  Nothing a registration
        makes is garbage until the batch ends.  Probes all of one type that registers
        lists in one pass (``ProbeType.register_many``: kprobes) go to it together."""
        probes = list(probes)
        paused = gc.isenabled()
        gc.disable()
        try:
            pt = self._batch_type(probes)
            if pt is not None and pt.register_many is not None:
                pt.register_many(self, probes)
            else:
                register_all(probes, self.register, self.unregister)
        finally:
            if paused:
                gc.enable()

    def _batch_type(self, probes: builtins.list[Probe]) -> ProbeType | None:
        """The one probe type of all ``probes``, or None (none, several, or a probe of no
        loaded type: one by one then raises for it in its turn)."""
        found = None
        for probe in probes:
            pt = self._probe_type_or_none(probe)
            if pt is None or (found is not None and pt is not found):
                return None
            found = pt
        return found

    def unregister_many(self, probes: Iterable[Probe]) -> None:
        """Unregister each; ones not registered are skipped, as in the kernel."""
        for probe in probes:
            if probe.registered:
                self.unregister(probe)

    def enable(self, probe: Probe) -> None:
        """Arm a registered probe again (K7): ``enable_kprobe`` for any type."""
        self._set_disabled(probe, False)

    def disable(self, probe: Probe) -> None:
        """Disarm a registered probe without unregistering it (K7)."""
        self._set_disabled(probe, True)

    def _set_disabled(self, probe: Probe, disabled: bool) -> None:
        pt = self._probe_type_or_none(probe)
        if pt is not None and pt.set_disabled is not None:
            pt.set_disabled(self, probe, disabled)
        else:
            self.target.manager.set_disabled(probe, disabled)

    def _probe_type_or_none(self, probe: Any) -> ProbeType | None:
        try:
            return self._probe_type(probe)
        except LookupError:
            return None  # kpsdk's internal probes have no type: the manager's own

    def _probe_type(self, probe: Any) -> ProbeType:
        return self.registry.probe_type_for(probe)

    if not TYPE_CHECKING:  # type checkers see kpsdk.verbs' declarations, not any name at all

        def __getattr__(self, name: str) -> Any:
            """Derive ``register_kprobe``, ``kprobe`` (decorator) etc. from probe types."""
            if name.startswith("_"):
                raise AttributeError(name)
            types = self.registry.probe_types
            verb, _, noun = name.partition("_")
            if verb in _VERBS and noun:
                batch = noun.endswith("s") and noun[:-1] in types
                kind = noun[:-1] if batch else noun
                if kind in types:
                    fn = _named(self._verb(verb, types[kind], batch), name, _verb_doc(verb, types[kind], batch))
                    self.__dict__[name] = fn  # derived once: the registry's probe types do not change
                    return fn
            if name in types:
                return _named(self._decorator(types[name]), name, _decorator_doc(types[name]))
            raise AttributeError(
                f"Session has no attribute {name!r}; probe types: {', '.join(types) or 'none loaded'}"
            )

    def __dir__(self) -> builtins.list[str]:
        """The attributes, and every loaded probe type's derived verbs (IPython completes them)."""
        return sorted({*super().__dir__(), *self.derived_verbs()})

    def derived_verbs(self) -> builtins.list[str]:
        """The verb names the loaded probe types give this session (``register_kprobe``...)."""
        names = []
        for name in self.registry.probe_types:
            names += [name, *(f"{verb}_{name}" for verb in _VERBS), f"register_{name}s", f"unregister_{name}s"]
        return names

    def _verb(self, verb: str, pt: ProbeType, batch: bool) -> Callable[..., Any]:
        def check(probe: Any) -> Any:
            if not isinstance(probe, pt.probe_class):
                raise ArgumentError(f"{verb}_{pt.name} takes a {pt.probe_class.__name__}, not {shown(probe)}")
            return probe

        def each(probes: Any) -> list[Any]:
            if isinstance(probes, str | bytes) or not isinstance(probes, Iterable):
                raise ArgumentError(f"{verb}_{pt.name}s takes a list of {pt.probe_class.__name__}, "
                                    f"not {shown(probes)}")
            return [check(p) for p in probes]

        if batch:
            if verb == "register":
                return lambda probes: self.register_many(each(probes))
            if verb == "unregister":
                return lambda probes: self.unregister_many(each(probes))
            raise AttributeError(f"there is no batch {verb}")
        if verb == "register":
            return lambda probe: self.register(check(probe))
        if verb == "unregister":
            return lambda probe: self.unregister(check(probe))
        if verb == "enable":
            return lambda probe: self.enable(check(probe))
        return lambda probe: self.disable(check(probe))

    def _decorator(self, pt: ProbeType) -> Callable[..., Any]:
        def make(where: str | int, **fields: Any) -> Callable[[Callable[..., Any]], Any]:
            def wrap(func: Callable[..., Any]) -> Any:
                with making_for(self):  # a bare name it holds is looked up in this session only
                    places = (pt.expand_location(self, where) if pt.expand_location is not None
                              else [pt.parse_location(where)])
                    probes = [pt.probe_class(**place, **{pt.decorator_field: func}, **fields) for place in places]
                if len(probes) == 1:
                    pt.register(self, probes[0])
                    return probes[0]
                register_all(probes, lambda p: pt.register(self, p), lambda p: pt.unregister(self, p))
                return ProbeSet(probes)

            return wrap

        return make

    def trace(self, definitions: str | Iterable[str], sink: Any = None, filter: str | None = None,  # noqa: A002
              comm: str | None = None, pid: int | None = None, triggers: Iterable[str] = (),
              stack: bool = False) -> Any:
        """ftrace-style events (``"p:add a=%di"``, ``"r:fact $retval"``): see ``docs/trace.md``.

        Returns a :class:`kpsdk.trace.events.Trace`; each hit gives a
        ``TraceRecord`` to ``sink`` (a callable or a list; default
        ``trace.records``).  ``filter`` is a kernel event filter on the fields.
        ``comm`` and ``pid`` name the task in records of a target without tasks
        of its own (Unicorn; default: the program's file name and 1).
        ``triggers`` are ``EVENT:COMMAND`` event triggers (``hist:keys=...``,
        ``stacktrace``); ``stack=True`` records every hit's stack (``record.stack``).
        """
        from kpsdk.trace.events import start_trace  # the trace package is above the core: on first use

        return start_trace(self, definitions, sink=sink, filter=filter, comm=comm, pid=pid, triggers=triggers,
                           stack=stack)

    # -- knobs and reports ------------------------------------------------------------

    @property
    def kprobes_enabled(self) -> bool:
        """The global knob: False disarms every probe without changing its own state (K7)."""
        return self.target.manager.enabled

    @kprobes_enabled.setter
    def kprobes_enabled(self, value: bool) -> None:
        self.target.manager.enabled = value

    @property
    def kprobes_optimization(self) -> bool:
        """The optimization knob (O1): False puts every probe on the breakpoint path."""
        return self.target.manager.optimization

    @kprobes_optimization.setter
    def kprobes_optimization(self, value: bool) -> None:
        self.target.manager.optimization = value

    @property
    def blacklist(self) -> set[str]:
        """Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL)."""
        return self.target.manager.blacklist

    def list(self) -> str:
        """Registered probes in the debugfs ``kprobes/list`` format."""
        rows = [(addr, p.letter, p.label or self.symbols.format(addr), "[DISABLED]" if p.disabled else "")
                for addr, p in self._held()]
        return self.target.manager.list_lines(rows)

    def profile(self) -> str:
        """Hits and misses per probe, in the ``kprobe_profile`` format."""
        return "".join(f"  {n:<44} {h:>15} {m:>15}\n" for n, h, m in self.profile_rows())

    def profile_rows(self) -> builtins.list[tuple[str, int, int]]:
        """``(name, hits, misses)`` per probe: what :meth:`profile` prints, as data."""
        held = [(p.name or f"{p.letter}_{(p.label or self.symbols.format(addr)).replace('+', '_')}", p.hits,
                 p.nmissed) for addr, p in self._held()]
        return self.target.manager.profile_rows() + held

    def _held(self) -> builtins.list[tuple[int, Any]]:
        """Registered probes that probe types keep outside the probe manager (watchpoints)."""
        return [p for pt in self.registry.probe_types.values() if pt.held is not None for p in pt.held(self)]

    # -- target access --------------------------------------------------------------

    @property
    def arch(self) -> Arch:
        """The target's architecture: registers, roles, instruction sets (:class:`kpsdk.arch.Arch`)."""
        return self.target.arch

    @property
    def symbols(self) -> SymbolTable:
        """The target's symbols: ``lookup(addr)``, ``resolve("sym+0x10")``, ``format(addr)``."""
        return self.target.symbols

    @property
    def console(self) -> str:
        """What the target printed so far: the program's output, or the guest's serial console
        (as UTF-8 text: a byte that is not is U+FFFD; :attr:`console_bytes` has them all)."""
        return self.target.console

    @property
    def console_bytes(self) -> bytes:
        """:attr:`console` as the bytes written: a program's binary output (``gzip -c``) whole."""
        return self.target.console_bytes

    def read_memory(self, addr: int, size: int) -> bytes:
        """``size`` bytes at ``addr`` as the program sees them: never kpsdk's breakpoints (K10).

        Memory that is not there is a :class:`~kpsdk.errors.TargetFault`; an ``addr`` that is
        not an address of the arch, or a ``size`` that is not a count of bytes up to
        :data:`READ_MAX`, an :class:`~kpsdk.errors.ArgumentError` (as for every memory call
        below).  Handlers call these at every hit: the usual arguments pass one test."""
        if type(addr) is not int or type(size) is not int or not (0 <= addr <= self._word_mask and
                                                                    0 <= size <= READ_MAX):
            addr, size = self._address("read_memory", addr), want_int("read_memory", "size", size, 0, READ_MAX)
        return self.target.read_memory(addr, size)

    def write_memory(self, addr: int, data: bytes) -> None:
        """Write target memory; over a probed instruction it is ``EBUSY`` (unregister first)."""
        self.target.write_memory(self._address("write_memory", addr), want_bytes("write_memory", "data", data))

    def read_string(self, addr: int, max: int = 4096) -> str:  # noqa: A002 - the public API name
        """A NUL-terminated string (decoded as UTF-8, errors replaced), at most ``max`` bytes."""
        if type(addr) is not int or type(max) is not int or not (0 <= addr <= self._word_mask and max >= 0):
            addr, max = self._address("read_string", addr), want_int("read_string", "max", max)  # noqa: A001
        return self.target.read_cstring(addr, max).decode("utf-8", "replace")

    def read_int(self, addr: int, size: int | None = None, signed: bool = False) -> int:
        """An integer of ``size`` bytes (None or 0: a word) at ``addr``, in the target's byte
        order; ``signed`` is True or False (or 1 or 0)."""
        if size is None or (type(size) is int and size == 0):
            size = self.arch.word_size
        if type(addr) is not int or type(size) is not int or not (0 <= addr <= self._word_mask and
                                                                    0 < size <= READ_MAX):
            addr, size = self._address("read_int", addr), want_int("read_int", "size", size, 1, READ_MAX)
        if signed not in (True, False):  # 1 and 0 too, as before the check
            raise ArgumentError(f"read_int: signed={shown(signed)}; want True or False")
        return int.from_bytes(self.target.read_memory(addr, size), self.arch.endian, signed=bool(signed))

    def _address(self, call: str, addr: object) -> int:
        """``addr`` if it is an address of the arch, else the ArgumentError naming ``call``."""
        return want_address(call, addr, self._word_mask)

    @property
    def debug(self) -> SessionDebug:
        """The debug information of what the target runs (:class:`kpsdk.debuginfo.SessionDebug`):
        the DWARF of the program, its libraries or the kernel, found next to each file, through
        its build ID or ``.gnu_debuglink``, or in ``debug_dir``; behind source probe points
        (``s.kprobe("parse_line:12")``), ``regs.var("len")`` and CFI backtraces."""
        if self._debug is None:
            from kpsdk.debuginfo import SessionDebug

            self._debug = SessionDebug(self, self.debug_dirs)
        return self._debug

    def debug_info(self, path: str | os.PathLike[str] | None = None) -> DebugInfo:
        """The DWARF of the program (or the kernel's ``symbols`` file), or of the file at
        ``path`` (a library: ``"libc.so.6"``), as :class:`kpsdk.binfmt.dwarf.DebugInfo`
        answers it: functions, lines, variables, types, call frames.

        :raises NoDebugInfoError: no DWARF in the file nor a debug file for it (every place
            looked at is listed)."""
        return self.debug.open(self.debug.find_file(path).path)

    def regs(self) -> PtRegs:
        """The CPU's registers now (outside a handler; a handler is given its hit's)."""
        return self.target.regs()

    # -- stacks under return probes -------------------------------------------------------

    def backtrace(self, regs: PtRegs | None = None, limit: int = 64) -> builtins.list[Frame]:
        """The call stack, innermost first, with real return addresses where
        kretprobe trampolines stand in the stack (:mod:`kpsdk.backtrace`).

        In a handler, pass its ``regs`` (the stopped CPU's registers are the
        hit's, and the probed address is the pc); elsewhere the CPU's own.
        """
        from kpsdk.backtrace import backtrace
        from kpsdk.regs import PtRegs  # here, as backtrace: `import kpsdk` loads neither

        if regs is not None and not isinstance(regs, PtRegs):
            raise ArgumentError(f"backtrace: regs={shown(regs)}; want a handler's regs, or None")
        limit = want_int("backtrace", "limit", limit)
        if regs is None:
            if self.target.manager.busy:
                raise KpsdkError("in a handler, pass its regs: s.backtrace(regs)")
            regs = self.regs()
        return backtrace(self.target, regs, limit)

    def real_return_address(self, value: int, sp: int | None = None) -> int:
        """The real return address behind ``value`` when it is a kretprobe trampoline
        (what ``__builtin_return_address`` or a read of the stack sees under a live
        kretprobe), else ``value`` itself.

        ``sp``: the stack address it was read from, or the stack pointer of the
        frame that read it; the innermost hooked call at or above it is the one.
        """
        value = want_address("real_return_address", value, self._word_mask, "value")
        if sp is not None:
            sp = want_address("real_return_address", sp, self._word_mask, "sp")
        rethook = self.target.rethook
        return value if rethook is None else rethook.real_return_address(value, sp)

    def run(self, timeout: float | None = None) -> int | None:
        """Run until the program exits (its status is returned), ``stop()`` or ``timeout`` seconds.

        ``timeout`` is a positive number of seconds; None or ``math.inf`` means no
        limit.  ``nan``, 0 or a negative value raises :class:`~kpsdk.errors.ArgumentError`
        (see :func:`check_timeout`).

        Not from a handler: the target is running it.  A handler calls
        :meth:`stop` to end the run, or :meth:`call` to run target code.
        """
        self._check_open()
        self._check_not_in_handler("run()", "s.stop() ends the run; s.call() runs target code from a handler")
        limit = check_timeout(timeout)
        try:
            status = self.target.run(limit)
        except BaseException:
            self.target.emit("run_end", reason=RUN_ERROR, status=None)
            raise
        self.target.emit("run_end", reason=RUN_STOPPED if status is None else RUN_EXITED, status=status)
        return status

    def stop(self) -> None:
        """End the run: from a handler, when it returns; from another thread, at once."""
        self.target.stop()

    def call(self, fn: str | int, *args: int, restype: str = "long") -> int:
        """Call a target function with integer arguments by the calling convention.

        ``restype`` is ``"long"`` (signed word, the default), ``"ulong"``,
        ``"int"`` or ``"uint"`` (32-bit).  Runs nested when called from a handler.
        An argument that is not an int, or another ``restype``, is an
        :class:`~kpsdk.errors.ArgumentError` before anything runs.
        """
        self._check_open()
        check_call(fn, args, restype)
        addr = self.symbols.resolve(fn) if isinstance(fn, str) else fn
        sym = self.symbols.containing(addr) if isinstance(fn, str) else None
        if sym is not None and sym.kind == "ifunc" and sym.address == addr:
            # an STT_GNU_IFUNC (glibc's strlen): its address is the resolver's, which returns the
            # implementation for this CPU, as the dynamic loader (or a static program's startup) does
            addr = self.target.call(addr, self.target.ifunc_args(), "ulong")
        return self.target.call(addr, tuple(args), restype)

    @property
    def syscalls_unimplemented(self) -> dict[str, int]:
        """System calls the program made that the target's Linux layer does not emulate (the
        Unicorn target answered each with ``-ENOSYS``), by name with how often, and the files
        of its own ``/proc/self`` it opened that the layer does not make (``"open
        /proc/self/status"``: ``ENOENT``); empty when none (and on targets that run the real
        kernel's calls)."""
        return dict(getattr(self.target, "syscalls_unimplemented", {}))

    def close(self) -> None:
        """Release the target (and its processes); unregisters nothing, runs nothing more.

        Not from a handler: the target is running it (``s.stop()`` ends the
        run, then close).
        """
        self._check_not_in_handler("close()", "call s.stop() there and close the session after run() returns")
        if not self.closed:
            self.registry.pm.hook.kpsdk_session_finish(session=self)
            self.target.close()
            self.closed = True

    def _check_open(self) -> None:
        if self.closed:
            raise KpsdkError("the session is closed")

    def _check_not_in_handler(self, what: str, instead: str) -> None:
        """Refuse what cannot happen while the target is stopped inside a hit: a
        nested run would restart the emulator (or gdb) under the hit's own feet."""
        if self.target.manager.busy or self.target.running:
            raise KpsdkError(f"{what} was called while the target is running (from a probe handler?): {instead}")

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<kpsdk.Session {self.spec} arch={self.arch.name}>"
