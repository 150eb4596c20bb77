"""One ``kpsdk probe`` run: register the probes, run the target (or ``--call``), report.

:mod:`kpsdk.cli.probe` parses and checks the options, then hands them here as
a :class:`ProbeRun`.  Its handlers print each hit as it happens (registers,
``--string-arg`` strings, returns with their errno names) and the report at
the end is what the Python API gives: the output, ``s.list()``,
``s.profile()`` and one summary line per probe.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.text import Text

from kpsdk.binfmt.symbols import did_you_mean, is_glob
from kpsdk.cli.consoles import ProgramOutput, console, heading
from kpsdk.cli.hitregs import check_reg_names, default_regs, hit_head, show_reg
from kpsdk.cli.hitstrings import STRING_SLOT, fetch_string, load_strings, show_string, store_strings
from kpsdk.cli.libraries import MIN_TIMEOUT, run_to_entry, wants_libraries
from kpsdk.cli.returns import ThreadErrno, failure_text, signed_return
from kpsdk.cli.sourceprobes import SourceProbe, arm, print_stack
from kpsdk.errors import KprobeError, KpsdkError
from kpsdk.scope import making_for

if TYPE_CHECKING:
    from rich.console import Console

    from kpsdk.cli.target_choice import TargetChoice
    from kpsdk.registry import Registry
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session


def probe_class(reg: Registry, name: str) -> Any:
    """The class of probe type ``name`` (``kprobe``, ``kretprobe``), or a clear error when its plugin is out."""
    if name not in reg.probe_types:
        raise KpsdkError(
            f"no {name!r} probe type is loaded: the {name}s plugin is blocked or missing "
            f"(plugins: {', '.join(reg.plugin_names()) or 'none'}; drop -p no:{name}s)"
        )
    return reg.probe_types[name].probe_class


@dataclass
class ProbeLine:
    """Per-probe counts for the summary."""

    letter: str
    name: str
    probe: Any = None
    returns: int = 0
    failed: int = 0


@dataclass
class ProbeRun:
    """One ``kpsdk probe``: the options, parsed and checked, then the session it opens."""

    choice: TargetChoice
    kprobes: list[dict[str, Any]]
    kretprobes: list[tuple[str, dict[str, Any]]]
    strings: list[int]
    failed: bool
    maxactive: int
    post: bool
    regs_opt: str | None
    fn_args: tuple[str, list[int]] | None
    restype: str
    no_optimize: bool
    timeout: float
    noprobe: list[str]
    show_console: bool
    con: Console
    session: Session | None = None
    lines: list[ProbeLine] = field(default_factory=list)
    hit: list[int] = field(default_factory=lambda: [0])
    status: int | None = None
    ran: bool = False
    #: --uprobe / --uretprobe texts (PATH:SYM or PATH:0xOFF), registered in this session
    uprobes: list[str] = field(default_factory=list)
    uretprobes: list[str] = field(default_factory=list)
    #: --kprobe / --uprobe by source (perf's syntax: a point and variables), :mod:`kpsdk.cli.sourceprobes`
    sources: list[SourceProbe] = field(default_factory=list)
    #: --stack: each kprobe/uprobe hit's call stack after its line
    stack: bool = False
    #: an elf: program's output, printed as it writes it (None: printed from s.console at the end)
    output: ProgramOutput | None = None

    def open(self) -> Session:
        if self.fn_args is None and self.choice.kind is None and self.choice.spec.startswith("elf:"):
            self.output = ProgramOutput(self.con, "program output")
            self.choice.options.update(stdout=self.output, stderr=self.output)
        self.session = self.choice.open(self.noprobe)
        return self.session

    def execute(self) -> None:
        """Register the probes, run (or --call), then report."""
        s = self.session
        assert s is not None
        reg = s.registry
        Kprobe: Any = probe_class(reg, "kprobe") if self.kprobes else None  # noqa: N806 - classes
        Kretprobe: Any = probe_class(reg, "kretprobe") if self.kretprobes else None  # noqa: N806
        names: list[str] = []
        if self.kprobes or self.uprobes or self.sources:
            abi = getattr(s.target, "abi_kind", "user")
            names = ([r.strip() for r in self.regs_opt.split(",") if r.strip()] if self.regs_opt
                     else default_regs(s.arch, abi))
            check_reg_names(s.arch, names)
        if self.no_optimize:
            s.kprobes_optimization = False
        try:
            probes = self._register(s, Kprobe, Kretprobe, names)
        except KprobeError as exc:
            # a name only the program's libraries have, or an IFUNC: at the program's entry
            # point they are loaded, as on qemu-user (kpsdk.cli.libraries)
            spent = run_to_entry(s, self.choice, self.timeout) if wants_libraries(exc) else None
            if spent is None:
                raise
            self.timeout = max(self.timeout - spent, MIN_TIMEOUT)
            probes = self._register(s, Kprobe, Kretprobe, names)
        for line in self.lines:
            if line.letter == "k":
                line.name = s.symbols.format(_probe_addr(s, line.probe))
        self.con.print(Text(f"{len(probes)} probe(s) on {s.arch.name}: "
                            + ", ".join(f"{ln.letter} {ln.name}" for ln in self.lines), style="dim"),
                       soft_wrap=True)
        if self.fn_args is not None:
            fn, args = self.fn_args
            result = s.call(fn, *args, restype=self.restype)
            self.con.print(Text(f"{fn}({', '.join(str(a) for a in args)}) = {result}", style="bold"),
                           soft_wrap=True)
        else:
            if self.choice.live:
                self.con.print(Text(f"running {self.choice.spec} until it ends (at most {self.timeout:g} s, "
                                    "--timeout; Ctrl-C stops it)", style="dim"), soft_wrap=True)
            self.status = s.run(timeout=self.timeout)
            self.ran = True
        self.report()

    def _register(self, s: Session, Kprobe: Any, Kretprobe: Any, names: list[str]) -> list[Any]:  # noqa: N803
        """Make the probes asked for (their summary lines anew) and register them, all or none."""
        reg = s.registry
        self.lines = []
        probes = []
        for place in expand_globs(s, self.kprobes, self.con):
            for where in _copies(s, place):
                pre, post_h = _printers(s, self.con, names, self.hit, self.post, self.strings, self.stack)
                probes.append(Kprobe(**where, pre_handler=pre, post_handler=post_h))
                self.lines.append(ProbeLine("k", "", probes[-1]))
            declare = getattr(s.target, "declare_memory", None)  # the plugin mechanism reads it at the hit
            if declare is not None and self.strings:
                declare(probes[-1], [f"+0($arg{n}):string" for n in self.strings])
        for name, where in self.kretprobes:
            line = ProbeLine("r", name)
            entry, ret = self._kretprobe_handlers(s, line)
            probes.append(Kretprobe(**where, handler=ret, entry_handler=entry, maxactive=self.maxactive,
                                    data_size=STRING_SLOT * len(self.strings)))
            line.probe = probes[-1]
            self.lines.append(line)
        with making_for(s):  # a bare library name is this session's (kpsdk.scope)
            for text in self.uprobes:
                pre, post_h = _printers(s, self.con, names, self.hit, self.post, self.strings, self.stack)
                probes.append(probe_class(reg, "uprobe").parse(text, pre_handler=pre, post_handler=post_h))
                self.lines.append(ProbeLine("u", text, probes[-1]))
            for text in self.uretprobes:
                line = ProbeLine("r", text)
                entry, ret = self._kretprobe_handlers(s, line)
                probes.append(probe_class(reg, "uretprobe").parse(text, handler=ret, entry_handler=entry,
                                                                  maxactive=self.maxactive,
                                                                  data_size=STRING_SLOT * len(self.strings)))
                line.probe = probes[-1]
                self.lines.append(line)
        with making_for(s):
            for source in self.sources:
                for probe in arm(s, source, self.con, self.hit, self.stack,
                                 lambda: _printers(s, self.con, names, self.hit, False, self.strings, self.stack)[0]):
                    probes.append(probe)
                    self.lines.append(ProbeLine(source.letter, "" if source.letter == "k" else source.text, probe))
        s.register_many(probes)
        return probes

    def _kretprobe_handlers(self, s: Session, line: ProbeLine) -> tuple[Any, Any]:
        """entry_handler (fetches the string arguments into ri.data) and handler (prints the return)."""
        strings, con, hit = self.strings, self.con, self.hit
        word_bits = 8 * s.arch.word_size
        kernel = getattr(s.target, "abi_kind", "user") == "kernel"  # the kernel's -errno convention
        thread_errno = ThreadErrno(s) if self.failed and not kernel else None

        def entry(ri: Any, regs: PtRegs) -> int:
            store_strings(ri.data, [fetch_string(s, regs, n) for n in strings])
            return 0

        def on_return(ri: Any, regs: PtRegs) -> None:
            line.returns += 1
            ret = signed_return(int(regs.return_value), self.restype, word_bits)
            if self.failed:
                if ret >= 0:
                    return
                line.failed += 1
            hit[0] += 1
            text = hit_head(s, hit[0]).append(f"r {line.name}", style="magenta")
            text.append(f" ret={ret}")
            if self.failed:
                failure = failure_text(ret, kernel, thread_errno.read() if thread_errno is not None else None)
                text.append(failure, style="red")
            for n, (raw, status) in zip(strings, load_strings(ri.data, len(strings)), strict=True):
                text.append(" " + show_string(n, raw, status))
            con.print(text, soft_wrap=True)

        return (entry if strings else None), on_return

    def report(self, interrupted: bool = False) -> None:
        """Output, exit status, kprobes/list, kprobe_profile and the summary; the timeout error last."""
        s, con = self.session, self.con
        if s is None:
            return
        if self.output is not None:
            self.output.end()
        elif self.fn_args is None and (self.show_console or not self.choice.live):
            heading(con, "console" if self.choice.kind in ("qemu-system", "gdb") else "program output")
            text = s.console
            con.out(text, end="" if text.endswith("\n") or not text else "\n", highlight=False)
            if not text and self.choice.kind == "gdb":
                con.print(Text("(none: a gdb:// target's output goes to whoever started it)", style="dim"))
        if self.status is not None:
            con.print(Text(f"exit status {self.status}", style="bold"))
        missing = s.syscalls_unimplemented
        if missing:  # one line, on stderr: the run's result may differ from Linux's
            calls = ", ".join(f"{name} ({n}x)" for name, n in sorted(missing.items()))
            console(stderr=True).print(Text(f"warning: the program asked for what kpsdk does not emulate (a "
                                            f"system call answered -ENOSYS, a /proc/self file ENOENT): {calls}",
                                            style="yellow"), soft_wrap=True)
        if not self.lines:  # --strace alone: no probe to list
            self._check_ended(interrupted)
            return
        heading(con, "kprobes/list")
        con.out(s.list(), end="", highlight=False)
        heading(con, "kprobe_profile")
        con.out(s.profile(), end="", highlight=False)
        heading(con, "summary")
        for line in self.lines:
            p = line.probe
            counts = f"{p.hits} hits"
            if line.letter == "r":
                counts += f", {line.returns} returns" + (f", {line.failed} failed" if self.failed else "")
            con.print(Text(f"{line.letter} {line.name}: ", style="cyan").append(f"{counts}, {p.nmissed} missed"),
                      soft_wrap=True)
        self._check_ended(interrupted)

    def _check_ended(self, interrupted: bool) -> None:
        """A program that did not exit within the timeout is an error; a kernel is just stopped."""
        if interrupted or not self.ran or self.status is not None:
            return
        if self.choice.kind in (None, "qemu-user"):
            raise KpsdkError(f"the program did not exit within {self.timeout:g} s (--timeout)")
        self.con.print(Text(f"stopped after {self.timeout:g} s (--timeout): the target was still running",
                            style="dim"))


def _probe_addr(s: Session, probe: Any) -> int:
    point = s.target.manager.point_of(probe)
    return int(point.addr) if point is not None else int(probe.addr or 0)


def _copies(s: Session, where: dict[str, Any]) -> list[dict[str, Any]]:
    """``--kprobe FUNC`` on a function with inlined copies: one location per copy, as perf probes
    them (the kprobe type's ``expand_location``); any other location as it is."""
    name = where.get("symbol_name")
    expand = s.registry.probe_types["kprobe"].expand_location
    if not isinstance(name, str) or where.get("offset") or expand is None or not name.isidentifier():
        return [where]
    return expand(s, name) if s.debug.inlined_copies(name) else [where]


def _printers(s: Session, con: Console, names: list[str], hit: list[int], post: bool,
              strings: list[int] | None = None, stack: bool = False) -> tuple[Any, Any]:
    """A pre_handler printing the registers (and ``strings`` arguments; with ``stack`` the call
    stack), with ``post`` a post_handler printing the ip."""
    where_of: dict[str, str] = {}

    def pre(p: Any, regs: PtRegs) -> int:
        hit[0] += 1
        ip = regs.ip
        where_of["w"] = f"{s.symbols.format(ip)} ({ip:#x})"
        values = " ".join([show_reg(regs, n) for n in names]
                          + [show_string(n, *fetch_string(s, regs, n)) for n in strings or []])
        con.print(hit_head(s, hit[0]).append(where_of["w"], style="cyan").append(f" {values}"),
                  soft_wrap=True)
        if stack:
            print_stack(s, con, regs)
        return 0

    def post_handler(p: Any, regs: PtRegs, flags: int) -> None:
        hit[0] += 1
        ip = regs.ip
        con.print(hit_head(s, hit[0]).append("post ", style="magenta")
                  .append(where_of.get("w", "?"), style="cyan")
                  .append(f" -> ip={ip:#x} ({s.symbols.format(ip)})"), soft_wrap=True)

    return pre, (post_handler if post else None)


#: the most kprobes one --kprobe glob may put (a kernel's '*' would be 50k breakpoints)
MAX_GLOB_PROBES = 1000


def expand_globs(s: Session, kprobes: list[dict[str, Any]], con: Console) -> list[dict[str, Any]]:
    """``--kprobe 'vfs_*'``: one location per function whose name matches, as ``perf probe``
    and bpftrace expand wildcards; functions that cannot be probed (blacklisted, a refused
    first instruction) are left out and counted, one address is probed once."""
    out: list[dict[str, Any]] = []
    for where in kprobes:
        pattern = where.get("symbol_name")
        if not isinstance(pattern, str) or not is_glob(pattern):
            out.append(where)
            continue
        matched = s.symbols.matching(pattern)
        if not matched:
            close = s.symbols.suggest(pattern.replace("*", "").replace("?", ""))
            raise KprobeError(errno.ENOENT, f"--kprobe {pattern!r}: no function in the target matches"
                              f"{did_you_mean(close)}")
        seen: set[int] = set()
        skipped = 0
        for sym in matched:
            addr = sym.address + int(where.get("offset", 0))
            if addr in seen:
                continue
            try:
                s.target.manager.check_address(addr)
            except KprobeError:
                skipped += 1
                continue
            seen.add(addr)
            out.append({"symbol_name": sym.name, "offset": where.get("offset", 0)})
        if len(seen) > MAX_GLOB_PROBES:
            raise KpsdkError(f"--kprobe {pattern!r} matches {len(seen)} functions; at most {MAX_GLOB_PROBES}: "
                             "narrow the pattern (kpsdk list TARGET --functions PATTERN shows them)")
        con.print(Text(f"--kprobe {pattern}: {len(seen)} functions"
                       + (f" ({skipped} that cannot be probed left out)" if skipped else ""), style="dim"),
                  soft_wrap=True)
    return out
