"""``kpsdk demo``: what kprobes can do, shown live on the bundled fixture programs.

For each architecture the demo opens ``kpsdk.fixtures.path(arch)`` (a small
freestanding program whose output is :data:`kpsdk.fixtures.EXPECTED_OUTPUT`)
and checks, with real probes, that:

1. a kprobe on ``add`` reads its arguments (2, 3) and a kprobe on ``fact`` sees
   the recursion (5, 4, 3, 2, 1, each one frame deeper);
2. a post_handler on the conditional branch inside ``check`` sees where
   execution went (``check(5)``: not taken, ``check(50)``: taken);
3. the probed program prints exactly what the unprobed one prints;
4. a pre_handler that rewrites ``add``'s second argument changes the
   program's ``add=`` line (fault injection);
5. a pre_handler that sets ``regs.ip`` to ``sub`` and returns 1 makes
   ``s.call("add", 7, 3)`` return 4 (the kernel's K2 path change);
6. ``s.list()`` and ``s.profile()`` report the probes (``[OPTIMIZED]``,
   ``[DISABLED]``, hits and misses).

The default run (no architecture chosen) ends with one of the machine's own
programs, dynamically linked, in Unicorn (:mod:`kpsdk.demo.linux`), and a busybox
pipeline traced across its processes, each hit naming its task (:mod:`kpsdk.demo.pipeline`).

An architecture Unicorn cannot run would be reported with the reason, which is
not a failure of the demo (every one runs today, ppc64 included).  Only the ``kpsdk demo`` command
(``kpsdk/cli/demo.py``) turns the result into an exit code; :func:`run_demo`
returns one :class:`ArchResult` per architecture.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text

import kpsdk
from kpsdk import fixtures
from kpsdk.errors import KpsdkError, UnsupportedTargetError
from kpsdk.fixtures.catalog import demo_names
from kpsdk.probe import KPROBE_FLAG_DISABLED

if TYPE_CHECKING:
    from rich.console import Console

    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

#: The value the fault-injection handler writes into ``add``'s second argument.
INJECTED = 40

OK = Text("✓ yes", style="bold green")
FAIL = Text("✗ no", style="bold red")


@dataclass
class ArchResult:
    """What the demo found on one architecture."""

    arch: str
    #: why the architecture was not run (Unicorn cannot run it); not a failure
    skipped: str | None = None
    #: a kpsdk error that stopped the demo on this architecture
    error: str | None = None
    hits: int = 0
    observed_ok: bool = False
    output_ok: bool = False
    fault_ok: bool = False
    path_ok: bool = False
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    #: a real program of the machine (kpsdk.demo.linux), not a fixture: no fault or path checks
    real_program: bool = False

    @property
    def ok(self) -> bool:
        """True when every check passed (or the architecture was skipped with its reason); a real
        program has no fault-injection or path-change check."""
        if self.skipped is not None:
            return True
        injected = self.real_program or (self.fault_ok and self.path_ok)
        return self.error is None and self.observed_ok and self.output_ok and injected


def _mark(ok: bool) -> Text:
    return OK if ok else FAIL


def _arg_location(s: Session, n: int) -> str:
    """Where argument ``n`` lives at function entry (a register, or the stack)."""
    abi = s.arch.user_abi
    if n < len(abi.args):
        return abi.args[n]
    return f"[{s.arch.sp}+{abi.stack_args_offset + s.arch.word_size * (n - len(abi.args))}]"


def set_arg(s: Session, regs: PtRegs, n: int, value: int) -> None:
    """Write argument ``n`` at function entry: the register, or the stack slot (i386)."""
    abi = s.arch.user_abi
    if n < len(abi.args):
        regs[abi.args[n]] = value
        return
    word = s.arch.word_size
    addr = regs.sp + abi.stack_args_offset + word * (n - len(abi.args))
    fmt = ("<" if s.arch.endian == "little" else ">") + ("Q" if word == 8 else "I")
    s.write_memory(addr, struct.pack(fmt, value & s.arch.word_mask))


def find_conditional_branch(s: Session, func: str) -> tuple[int, int, int, str]:
    """The first conditional branch in ``func``: ``(address, fallthrough, target, text)``.

    Found the way kpsdk itself reasons about instructions: the backend's
    ``successors`` gives two places execution can go (the next instruction and
    the branch target; on MIPS the next instruction is past the branch's delay slot).
    """
    sym = s.symbols.get(func)
    arch = s.arch
    iset = arch.iset(sym.iset or None)
    code = s.read_memory(sym.address, sym.size)
    for insn in arch.disassembler(iset).disasm(code, sym.address):
        succ = arch.insn.successors(insn, lambda name: 0, lambda a, n: bytes(n), arch.word_size)
        nxt = insn.address + insn.size + iset.delay_slot
        others = {a & ~1 if iset.thumb_bit else a for a in succ or ()} - {nxt}
        if succ and len(succ) == 2 and len(others) == 1 and not arch.insn.classify(insn)[0]:
            return insn.address, nxt, others.pop(), f"{insn.mnemonic} {insn.op_str}".strip()
    raise KpsdkError(f"no conditional branch found in {func}")


def _open(arch: str) -> Session:
    return kpsdk.open(f"elf:{fixtures.path(arch)}")


def _demo_arch(arch: str, console: Console) -> ArchResult:
    res = ArchResult(arch)
    t0 = time.perf_counter()
    Kprobe: Any = kpsdk.Kprobe  # noqa: N806 - the class, from the kprobes plugin

    # 0. the unprobed program, the reference for everything below
    with _open(arch) as s0:
        status0 = s0.run(timeout=5)
        plain = s0.console
    elf = fixtures.path(arch).name
    heading(console, arch, f"{elf}: {s0.arch.name}, exit status {status0} unprobed")

    # 1 + 2. observe: arguments, recursion, a branch; a disabled probe for list()
    add_args: list[tuple[int, int]] = []
    fact_hits: list[tuple[int, int]] = []  # (n, sp)
    check_args: list[int] = []
    branches: list[int] = []  # the ip after the branch
    with _open(arch) as s:
        br_addr, br_next, br_target, br_text = find_conditional_branch(s, "check")
        probes = [
            Kprobe(symbol_name="add", pre_handler=lambda p, r: add_args.append((r.arg(0), r.arg(1)))),
            Kprobe(symbol_name="fact", pre_handler=lambda p, r: fact_hits.append((r.arg(0), r.sp))),
            Kprobe(symbol_name="check", pre_handler=lambda p, r: check_args.append(r.arg(0))),
            Kprobe(addr=br_addr, post_handler=lambda p, r, flags: branches.append(r.ip)),
            Kprobe(symbol_name="sub", pre_handler=lambda p, r: 0, flags=KPROBE_FLAG_DISABLED),
        ]
        s.register_kprobes(probes)
        status = s.run(timeout=5)
        out = s.console
        listing, profile = s.list(), s.profile()
        res.hits = sum(p.hits for p in probes)
        add_at = s.symbols.resolve("add")

        console.print(Text("1. kprobes on add and fact: ", style="bold").append(
            "pre_handlers read regs.arg(n) and regs.sp", style="dim"))
        for a, b in add_args:
            console.print(Text(f"   add({a}, {b})").append(
                f"          at add+0x0 ({add_at:#x}); a in {_arg_location(s, 0)}, b in {_arg_location(s, 1)}"
                + ("" if s.arch.user_abi.args else " (cdecl: on the stack)"),
                style="dim"), soft_wrap=True)
        for n, sp in fact_hits:
            depth = sum(1 for _, other in fact_hits if other > sp)
            console.print(Text(f"   {'  ' * depth}fact({n})").append(
                f"{' ' * (14 - 2 * depth)}sp={sp:#x}, depth {depth}", style="dim"))
        fact_ns = [n for n, _ in fact_hits]
        deeper = all(fact_hits[i + 1][1] < fact_hits[i][1] for i in range(len(fact_hits) - 1))

        console.print(Text("2. a post_handler on the conditional branch in check: ", style="bold").append(
            f"{s.symbols.format(br_addr)}  {br_text}", style="cyan"), soft_wrap=True)
        outcomes = []
        for x, ip in zip(check_args, branches, strict=False):
            taken = ip == br_target
            outcomes.append(taken)
            console.print(Text(f"   check({x}):{' ' * (4 - len(str(x)))}").append(
                "taken    " if taken else "not taken", style="yellow" if taken else "cyan").append(
                f"  next ip {s.symbols.format(ip)} ({ip:#x})", style="dim"))
        res.observed_ok = (
            add_args == [(2, 3)] and fact_ns == [5, 4, 3, 2, 1] and deeper
            and check_args == [5, 50] and outcomes == [False, True] and probes[4].hits == 0
        )
        if not res.observed_ok:
            res.notes.append("the probes did not see add(2, 3), fact 5..1, check 5/50 as expected")

    # 3. program output
    res.output_ok = out == plain == fixtures.EXPECTED_OUTPUT and status == status0 == 0
    lines = out.splitlines()
    console.print(Text("3. the program's output with these probes: ", style="bold").append(
        "== unprobed output == fixtures.EXPECTED_OUTPUT" if res.output_ok
        else "differs from the unprobed output or fixtures.EXPECTED_OUTPUT",
        style="green" if res.output_ok else "bold red"), soft_wrap=True)
    console.print(Text("   " + " ".join(lines)).append(f"  (exit status {status})", style="dim"), soft_wrap=True)
    if not res.output_ok:
        res.notes.append(f"output {out!r}, exit status {status}")

    # 4. fault injection: change add's second argument on the way in
    with _open(arch) as s:
        def inject(p: Any, regs: PtRegs) -> int:
            set_arg(s, regs, 1, INJECTED)
            return 0

        s.register_kprobe(Kprobe(symbol_name="add", pre_handler=inject))
        s.run(timeout=5)
        faulted = s.console
        where = _arg_location(s, 1)
    before = next((ln for ln in plain.splitlines() if ln.startswith("add=")), "?")
    after = next((ln for ln in faulted.splitlines() if ln.startswith("add=")), "?")
    expected = plain.replace(f"add={2 + 3}\n", f"add={2 + INJECTED}\n")
    res.fault_ok = faulted == expected and after == f"add={2 + INJECTED}"
    console.print(Text("4. fault injection: ", style="bold").append(
        f"a pre_handler on add sets {where} = {INJECTED}", style="dim"), soft_wrap=True)
    console.print(Text("   ").append(before, style="cyan").append(" -> ").append(after, style="yellow").append(
        "   (the other lines unchanged)" if res.fault_ok else "   (unexpected output)", style="dim"))
    if not res.fault_ok:
        res.notes.append(f"fault injection printed {faulted!r}")

    # 5. K2: change the path: add runs sub's code
    with _open(arch) as s:
        sub_at = s.symbols.resolve("sub")

        def redirect(p: Any, regs: PtRegs) -> int:
            regs.ip = sub_at
            return 1  # non-zero: resume at regs.ip, skipping the probed instruction

        k2 = Kprobe(symbol_name="add", pre_handler=redirect)
        s.register_kprobe(k2)
        result = s.call("add", 7, 3)
    res.path_ok = result == 7 - 3 and k2.hits == 1
    console.print(Text("5. path change (K2): ", style="bold").append(
        f"a pre_handler on add sets regs.ip = sub ({sub_at:#x}) and returns 1", style="dim"), soft_wrap=True)
    console.print(Text("   ").append(f's.call("add", 7, 3) = {result}', style="yellow").append(
        "   (sub's answer: add's code never ran)", style="dim"))
    if not res.path_ok:
        res.notes.append(f"s.call('add', 7, 3) returned {result}, {k2.hits} hit(s)")

    # 6. the kernel's debugfs views
    console.print(Text("6. s.list() ", style="bold").append("(kprobes/list)", style="dim").append(
        " and s.profile() ", style="bold").append("(kprobe_profile: probe, hits, missed)", style="dim"))
    for ln in listing.splitlines():
        console.print(Text("   " + ln), soft_wrap=True)
    for ln in profile.splitlines():
        console.print(Text(" " + ln.rstrip()), soft_wrap=True)
    res.seconds = time.perf_counter() - t0
    return res


def run_demo(archs: list[str] | tuple[str, ...] | None, console: Console) -> list[ArchResult]:
    """Run the demo on ``archs`` (fixture names; default: the fixtures the arch backends place
    in the demo, in their order, :func:`kpsdk.fixtures.catalog.demo_names`) and print it.

    Returns one :class:`ArchResult` per architecture; the demo passed when
    every ``result.ok`` is true.
    """
    real_program = not archs  # the default demo ends with one of the machine's own programs
    archs = list(archs or demo_names())
    results: list[ArchResult] = []
    console.print(Text.assemble(
        ("kpsdk demo", "bold"), ": Linux kprobes on programs run in Unicorn. ",
        ("Each is kpsdk.fixtures' prog.c built for that architecture (add, sub, fact, check...).", "dim"),
    ))
    for arch in archs:
        try:
            results.append(_demo_arch(arch, console))
        except UnsupportedTargetError as e:
            heading(console, arch, "not run")
            console.print(Text("Unicorn cannot run it (not a demo failure): ", style="yellow")
                          .append(str(e), style="dim"))
            console.print(Text(f"Without Unicorn these work: kpsdk list {arch}, kpsdk disasm {arch} add",
                               style="dim"))
            results.append(ArchResult(arch, skipped=str(e)))
        except KpsdkError as e:
            console.print(Text(f"error on {arch}: {e}", style="bold red"))
            results.append(ArchResult(arch, error=str(e)))
    if real_program:
        from kpsdk.demo.linux import demo_real_program

        try:
            results.append(demo_real_program(console))
        except KpsdkError as e:
            console.print(Text(f"error running /bin/ls: {e}", style="bold red"))
            results.append(ArchResult("/bin/ls", error=str(e), real_program=True))
        from kpsdk.demo.pipeline import ROW, demo_pipeline

        try:
            results.append(demo_pipeline(console))
        except KpsdkError as e:
            console.print(Text(f"error running the busybox pipeline: {e}", style="bold red"))
            results.append(ArchResult(ROW, error=str(e), real_program=True))
    console.print(summary_table(results))
    console.print(Text("Next: kpsdk probe x86_64 --kprobe fact   kpsdk disasm riscv64 check   "
                       "(the demo's code: kpsdk/demo/programs.py)", style="dim"))
    return results


def heading(console: Console, arch: str, detail: str) -> None:
    console.print(Text.assemble(("━━ ", "cyan"), (arch, "bold cyan"), (" ━━ ", "cyan"), (detail, "dim")))


def summary_table(results: list[ArchResult]) -> Table:
    table = Table(title="kpsdk demo: summary", title_justify="left")
    table.add_column("arch", style="bold cyan")
    table.add_column("hits seen", justify="right")
    table.add_column("probes saw the right values")
    table.add_column("program output OK")
    table.add_column("fault injection OK")
    table.add_column("path change OK")
    table.add_column("time", justify="right")
    for r in results:
        if r.skipped is not None:
            table.add_row(r.arch, "-", Text("not run: Unicorn cannot run it (see above)", style="yellow"),
                          "-", "-", "-", "-")
        elif r.error is not None:
            table.add_row(r.arch, "-", Text(f"error: {r.error}", style="red"), FAIL, FAIL, FAIL, "-")
        elif r.real_program:
            table.add_row(r.arch, str(r.hits), _mark(r.observed_ok), _mark(r.output_ok), "-", "-",
                          f"{r.seconds * 1000:.0f} ms")
        else:
            table.add_row(r.arch, str(r.hits), _mark(r.observed_ok), _mark(r.output_ok), _mark(r.fault_ok),
                          _mark(r.path_ok), f"{r.seconds * 1000:.0f} ms")
    return table
