"""The ``kpsdk`` command line (typer + rich).

Start with ``kpsdk demo``.  Every command is a thin layer over the Python API
(:func:`kpsdk.open`, ``Kprobe``, ``Session.list()``...), so what a command
prints is what the same few lines of Python would give.

This module is the only place where exceptions become exit codes: a
:class:`kpsdk.KpsdkError` (or an ``OSError`` such as ``KprobeError``) prints one
red ``error: ...`` line on stderr and exits 1; usage errors exit 2 as typer's
do; anything else is a bug and keeps its traceback.

Plugins are chosen before the command line is parsed, as in pytest:
``-p NAME`` loads a plugin (an entry point of the ``kpsdk`` group or an
importable module), ``-p no:NAME`` blocks one.  After the built-in commands
are added, every plugin's ``kpsdk_cli(app)`` hook may add its own.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

import kpsdk
from kpsdk import fixtures
from kpsdk import registry as _registry
from kpsdk.errors import KpsdkError, UnknownNameError
from kpsdk.probe import location_fields

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.elfimage import ElfImage
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

AUTOLOAD_ENV = "KPSDK_DISABLE_PLUGIN_AUTOLOAD"
#: Width used when output is not a terminal and COLUMNS is not set (pipes, tests):
#: wide enough that tables and disassembly lines are not wrapped.
PIPE_WIDTH = 200


# -- consoles and errors ----------------------------------------------------------------


def console(stderr: bool = False) -> Console:
    """A rich console on the current stdout/stderr (looked up at print time)."""
    con = Console(stderr=stderr, highlight=False)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = PIPE_WIDTH
    return con


def report_error(exc: BaseException) -> None:
    """The one-line ``error: ...`` for a kpsdk error, on stderr."""
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, KpsdkError) and exc.strerror:
        msg = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    console(stderr=True).print(f"[bold red]error:[/] {escape(' '.join(msg.split()))}", soft_wrap=True)


def _is_user_error(exc: BaseException) -> bool:
    if isinstance(exc, BrokenPipeError):
        return False  # typer handles a closed pipe (kpsdk list | head) quietly
    return isinstance(exc, KpsdkError | OSError)


class KpsdkGroup(TyperGroup):
    """The root command: turns kpsdk errors raised by any command (plugins' too) into exit 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not _is_user_error(exc):
                raise
            report_error(exc)
            raise typer.Exit(1) from None


# -- plugins: -p NAME / -p no:NAME ---------------------------------------------------------


def scan_plugin_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``-p NAME``/``-p no:NAME``/``--plugin NAME`` before the command name: ``(load, block)``.

    Scanned before typer parses anything, so that plugin commands exist by the
    time the command name is looked up.
    """
    values: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg in ("-p", "--plugin"):
            if i + 1 < len(argv):
                values.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            values.append(arg.partition("=")[2])
        elif arg.startswith("-p") and not arg.startswith("--"):
            values.append(arg[2:])
        elif not arg.startswith("-"):
            break  # the command name: its own options follow
        i += 1
    return split_plugin_values(values)


def split_plugin_values(values: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    load = [v for v in values if v and not v.startswith("no:")]
    block = [v[3:] for v in values if v.startswith("no:")]
    return load, block


def apply_plugin_options(values: list[str] | tuple[str, ...]) -> None:
    """Configure the registry for these ``-p`` values unless it already is."""
    load, block = split_plugin_values(values)
    current = getattr(_registry, "_config", {})
    if (tuple(load), tuple(block)) != (tuple(current.get("load", ())), tuple(current.get("block", ()))):
        _registry.configure(load=load, block=block)


# -- helpers shared by the commands ---------------------------------------------------------------


def elf_path(arg: str) -> Path:
    """An ELF path; a name of a bundled fixture (``x86_64``, ``riscv64``...) also works."""
    path = Path(arg)
    if not path.exists() and arg in fixtures.ARCHS:
        return fixtures.path(arg)
    return path


def hex_insn(enc: bytes, iset: InstructionSet, endian: str) -> str:
    """An encoding the way the arch manuals write it.

    x86 as bytes in memory order, Thumb as halfwords in order (``f7f0 a018``),
    the others as one instruction word (riscv ``00100073``, ppc64 ``7fe00008``).
    """
    if iset.min_insn == 1:
        return enc.hex(" ")
    if iset.thumb_bit:
        return " ".join(f"{int.from_bytes(enc[i:i + 2], 'little'):04x}" for i in range(0, len(enc), 2))
    return f"{int.from_bytes(enc, endian):0{2 * len(enc)}x}"  # type: ignore[arg-type]


def _decode_one(arch: Arch, iset: InstructionSet, enc: bytes) -> str:
    try:
        insn = next(arch.disassembler(iset).disasm(enc, 0), None)
    except Exception:  # noqa: BLE001 - capstone missing the arch: just show the bytes
        return ""
    if insn is None or insn.size != len(enc):
        return "illegal"
    return f"{insn.mnemonic} {insn.op_str}".strip()


def _encodings(arch: Arch, which: str) -> str:
    """One line per encoding, ``[iset:] hex mnemonic``; the Unicorn trap ends with its interrupt."""
    lines = []
    for iset in arch.isets:
        encs = iset.kernel_breakpoints if which == "kernel" else iset.unicorn_breakpoint.encodings
        prefix = f"{iset.name}: " if len(arch.isets) > 1 else ""
        for _, enc in sorted(encs.items()):
            lines.append(f"{prefix}{hex_insn(enc, iset, arch.endian)} {_decode_one(arch, iset, enc)}".rstrip())
    if which == "unicorn" and arch.unicorn is not None and not arch.unicorn_unsupported:
        intnos = sorted({i.unicorn_breakpoint.intno for i in arch.isets})
        lines.append(f"-> interrupt {', '.join(map(str, intnos))}")
    return "\n".join(lines)


def _regs_cell(names: tuple[str, ...]) -> str:
    return "\n".join(" ".join(names[i:i + 4]) for i in range(0, len(names), 4))


def _image_bytes(image: ElfImage, addr: int, size: int) -> bytes:
    for seg in image.segments:
        if seg.vaddr <= addr < seg.vaddr + len(seg.data):
            return seg.data[addr - seg.vaddr: addr - seg.vaddr + size]
    raise KpsdkError(f"{addr:#x} is not in the file contents of {image.path} (not code?)")


def parse_call(text: str) -> tuple[str, list[int]]:
    """``"add 2 3"``, ``"add(2, -3)"`` or ``"add 0x10"`` -> ``("add", [2, 3])``."""
    words = shlex.split(text.replace("(", " ").replace(")", " ").replace(",", " "))
    if not words:
        raise typer.BadParameter("give the function and its arguments, e.g. --call 'add 2 3'", param_hint="--call")
    fn, args = words[0], []
    for w in words[1:]:
        try:
            args.append(int(w, 0))
        except ValueError:
            raise typer.BadParameter(f"{w!r} is not an integer (decimal, 0x.., -5)", param_hint="--call") from None
    return fn, args


def parse_where(spec: str) -> dict[str, Any]:
    """``SYM``, ``SYM+OFF`` or ``0xADDR`` -> Kprobe keyword arguments (a usage error if malformed)."""
    try:
        return location_fields(spec)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--kprobe") from None


def default_regs(arch: Arch) -> list[str]:
    """The first four user arguments, the stack pointer and the return-value register."""
    args = list(arch.user_abi.args[:4]) or [f"arg{i}" for i in range(4)]
    return list(dict.fromkeys([*args, arch.sp, arch.return_value]))


def check_reg_names(arch: Arch, names: list[str]) -> None:
    roles = ("ip", "pc", "sp", "return_value")
    for n in names:
        if n in roles or arch.has_register(n) or (n.startswith("arg") and n[3:].isdigit()):
            continue
        raise UnknownNameError(f"{arch.name} register", n, [*arch.register_names, *roles, "argN"])


def read_reg(regs: PtRegs, name: str) -> int:
    if name.startswith("arg") and name[3:].isdigit():
        return regs.arg(int(name[3:]))
    return int(getattr(regs, name))


def _split_commas(values: list[str] | None) -> list[str]:
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


# -- the app ---------------------------------------------------------------------------------

HELP = """\
kpsdk: the Linux kprobes programming model for code run in the Unicorn emulator.

Put a handler on (almost) any instruction of a program, read and change its
registers, change where it goes, and read the kernel's kprobes/list and
kprobe_profile views, with the kernel's rules and errno values.

New here? Run [bold]kpsdk demo[/bold].

[bold]Plugins[/bold]: architectures, target kinds, probe types and extra commands all come
from plugins of the 'kpsdk' entry-point group (see kpsdk plugins).
-p NAME loads a plugin by entry-point or module name, -p no:NAME blocks one
(built-in ones included); both may repeat and go before the command.
Set KPSDK_DISABLE_PLUGIN_AUTOLOAD=1 to keep third-party plugins from loading
automatically (kpsdk's own still load; -p NAME still loads one by name).

Errors a user can cause print one 'error: ...' line and exit 1; usage errors exit 2.
"""

EPILOG = """\
[bold]Examples[/bold] (x86_64, riscv64, arm, thumb, i386, ppc64: the bundled fixture programs)
  kpsdk demo                          # start here
  kpsdk archs                         # breakpoints, argument registers
  kpsdk list x86_64                   # the functions you can probe
  kpsdk disasm riscv64 check          # how each instruction is probed
  kpsdk probe x86_64 --kprobe add     # print add's arguments on each hit
  kpsdk probe riscv64 --kprobe fact --call 'fact 5'
  kpsdk -p no:kprobes plugins         # without the kprobes plugin
  KPSDK_DISABLE_PLUGIN_AUTOLOAD=1 kpsdk plugins
"""


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kpsdk {kpsdk.__version__}")
        raise typer.Exit()


def _root(
    plugin: Annotated[
        list[str] | None,
        typer.Option("--plugin", "-p", metavar="NAME",
                     help="Load plugin NAME (entry point or module); 'no:NAME' blocks one. Repeatable."),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    # main() configured the registry from sys.argv already; this keeps the
    # option working when the app is invoked another way (typer's CliRunner).
    apply_plugin_options(plugin or [])


def cmd_archs() -> None:
    """The architectures kpsdk knows, and how it probes each.

    [bold]breakpoint (kernel)[/bold] is what Linux kprobes writes over a probed
    instruction, per instruction set (ARM has two); [bold]Unicorn trap[/bold] is what
    kpsdk writes on Unicorn instead, where Unicorn 2.1.4 would stop emulation on
    the kernel's encoding rather than raise an interrupt a hook can see (intr N
    is the interrupt number it arrives as).  Argument registers are those a
    handler reads with regs.arg(n): the kernel's calling convention and the user
    one (i386 user code passes them on the stack, cdecl).

    Engines: unicorn runs code, capstone disassembles (kpsdk disasm works
    without Unicorn), keystone assembles (s.arch.assemble).
    """
    reg = kpsdk.get_registry()
    table = Table(title="kpsdk architectures", title_justify="left", show_lines=True)
    for col in ("arch (aliases)", "engines here", "breakpoint (kernel)", "Unicorn trap (kpsdk)",
                "kernel args", "user args"):
        table.add_column(col)
    notes = []
    for arch in reg.archs:
        engines = arch.engines_available()
        eng_lines = []
        for name in ("unicorn", "capstone", "keystone"):
            ok = engines.get(name, False)
            text = "yes" if ok else "no"
            if name == "unicorn" and not ok and arch.unicorn_unsupported:
                text = "no (see unicorn_unsupported)"
                notes.append(f"{arch.name}: {arch.unicorn_unsupported}")
            eng_lines.append(f"{name}: [{'green' if ok else 'red'}]{escape(text)}[/]")
        name_cell = f"[bold cyan]{arch.name}[/]" + (f"\n[dim]{escape(', '.join(arch.aliases))}[/]" if arch.aliases
                                                    else "")
        user = _regs_cell(arch.user_abi.args) or "stack (cdecl)"
        table.add_row(
            name_cell,
            "\n".join(eng_lines),
            escape(_encodings(arch, "kernel")),
            escape(_encodings(arch, "unicorn")),
            escape(_regs_cell(arch.kernel_abi.args)),
            escape(user),
        )
    con = console()
    con.print(table)
    for note in notes:
        con.print(Text("unicorn_unsupported: ", style="yellow").append(note, style="dim"))


def cmd_plugins() -> None:
    """The plugins loaded, and what they provide.

    Everything beyond kpsdk's core is a plugin: architecture backends, target
    kinds (the scheme of kpsdk.open("elf:PATH")), probe types (a type named
    kprobe gives sessions register_kprobe, s.kprobe(...) and kpsdk.Kprobe) and
    CLI commands.  Third-party packages provide them through the 'kpsdk'
    entry-point group, exactly as kpsdk's own do.
    """
    reg = kpsdk.get_registry()
    con = console()
    auto = "off (KPSDK_DISABLE_PLUGIN_AUTOLOAD is set)" if os.environ.get(AUTOLOAD_ENV) else "on"
    t = Table(title="plugins loaded", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("module")
    t.add_column("hooks")
    for name, plugin in reg.pm.list_name_plugin():
        if plugin is None:
            t.add_row(escape(name), "[yellow]blocked (-p no:NAME)[/]", "")
            continue
        hooks = ", ".join(sorted(h.name for h in reg.pm.get_hookcallers(plugin) or []))
        t.add_row(escape(name), escape(getattr(plugin, "__name__", repr(plugin))), escape(hooks))
    con.print(t)
    con.print(Text(f"third-party autoload: {auto}", style="dim"))
    t = Table(title="target kinds (kpsdk.open(\"KIND:...\"))", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("help")
    for kind in reg.targets.values():
        t.add_row(escape(kind.name), escape(kind.help))
    con.print(t)
    t = Table(title="probe types", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("class")
    t.add_column("description")
    for pt in reg.probe_types.values():
        t.add_row(escape(pt.name), escape(f"{pt.probe_class.__module__}.{pt.probe_class.__name__}"),
                  escape(pt.description))
    if not reg.probe_types:
        t.add_row("[dim]none[/]", "", "[dim]no probe-type plugin is loaded (blocked with -p no:kprobes?)[/]")
    con.print(t)
    t = Table(title="architectures", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("ELF machine")
    for arch in reg.archs:
        t.add_row(escape(arch.name), escape(f"{arch.elf_machine}, {arch.elf_class}-bit {arch.endian}"))
    con.print(t)


ElfArg = Annotated[str, typer.Argument(
    metavar="ELF", help="An ELF executable, or a bundled fixture's name: " + ", ".join(fixtures.ARCHS))]
NoprobeOpt = Annotated[list[str] | None, typer.Option(
    "--noprobe", metavar="NAME[,NAME]", help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL).")]


def cmd_list(
    elf: ElfArg,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include data objects (STT_OBJECT) too.")] = False,
    noprobe: NoprobeOpt = None,
) -> None:
    """The functions in an ELF file: what you can put a kprobe on.

    Reads the symbol table only (nothing runs, no Unicorn needed, any
    architecture).  A probe goes on SYM (the function's first instruction) or
    SYM+OFF (any instruction boundary inside it, see kpsdk disasm).  thumb marks
    ARM Thumb functions (ELF symbol value bit 0).  Names given with --noprobe
    are marked as kpsdk would refuse them (EINVAL), as the kernel does for
    NOKPROBE_SYMBOL functions.
    """
    from kpsdk.elfimage import load_elf

    image = load_elf(elf_path(elf))
    blocked = set(_split_commas(noprobe))
    try:
        arch_name = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian).name
    except UnknownNameError:
        arch_name = "unknown arch"
    width = image.elf_class // 4
    header = Text.assemble((image.path.name, "bold"), f": {arch_name} ({image.machine}, {image.elf_class}-bit "
                           f"{image.endian}), entry {image.entry:#x}")
    table = Table()
    table.add_column("name", style="bold")
    table.add_column("address", justify="right")
    table.add_column("size", justify="right")
    if all_:
        table.add_column("kind")
    table.add_column("thumb")
    table.add_column("probe")
    count = 0
    for sym in image.symbols:
        if sym.kind != "func" and not all_:
            continue
        count += 1
        if sym.kind != "func":
            probe = "[dim]no (data)[/]"
        elif sym.name in blocked:
            probe = "[red]no (--noprobe)[/]"
        else:
            probe = "[green]yes[/]"
        row = [escape(sym.name), f"{sym.address:#0{width + 2}x}", str(sym.size)]
        if all_:
            row.append(sym.kind)
        row += ["thumb" if sym.thumb else "", probe]
        table.add_row(*row)
    con = console()
    con.print(header, soft_wrap=True)
    con.print(table)
    unknown = blocked - {s.name for s in image.symbols}
    if unknown:
        con.print(Text(f"--noprobe names not in the file: {', '.join(sorted(unknown))}", style="yellow"))
    con.print(Text(f"{count} symbols.  Next: kpsdk disasm {elf} SYM   or   kpsdk probe {elf} --kprobe SYM",
                   style="dim"))


def cmd_disasm(
    elf: ElfArg,
    sym: Annotated[str, typer.Argument(metavar="SYM", help="A function name, or SYM+OFF to start inside it.")],
    count: Annotated[int | None, typer.Option("--count", "-n", min=1,
                                              help="At most N instructions (default: the whole function).")] = None,
) -> None:
    """Disassemble a function and tell how kpsdk would probe each instruction.

    [bold]boostable[/bold]: the instruction can run out of line (a copy followed by a
    jump back), so a probe costs one trap or, [OPTIMIZED], one code hook.
    [bold]stepped[/bold]: it reads or changes the program counter (branches, calls,
    returns, pc-relative loads), so it runs in place and kpsdk follows it by
    software single-step; still probeable, post_handlers included.
    [bold]refused: why[/bold]: registering a kprobe there fails with EINVAL, as in the kernel.
    An address between two rows is inside an instruction: EILSEQ.

    Works for every architecture kpsdk knows, ppc64 included (no Unicorn needed).
    """
    from kpsdk.elfimage import load_elf

    image = load_elf(elf_path(elf))
    arch = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    start = image.symbols.resolve(sym)
    func = image.symbols.containing(start)
    if func is None:
        raise KpsdkError(f"{sym} ({start:#x}) is not inside a symbol of {image.path.name}")
    iset = arch.iset("thumb") if func.thumb else arch.isets[0]
    end = func.address + func.size if func.size else start + 64 * iset.min_insn * 4
    code = _image_bytes(image, start, end - start)
    classify = arch.extra["classify"]
    con = console()
    con.print(Text.assemble((func.name, "bold"), f" at {func.address:#x}, {func.size} bytes, ",
                            f"{arch.name} ({iset.name} instructions), {image.path.name}"), soft_wrap=True)
    n = 0
    addr_w = image.elf_class // 4
    for insn in arch.disassembler(iset).disasm(code, start):
        if count is not None and n >= count:
            break
        n += 1
        boostable, refused = classify(insn)
        if refused:
            how = Text(f"refused: {refused}", style="red")
        elif boostable:
            how = Text("boostable", style="green")
        else:
            how = Text("stepped", style="yellow")
        where = image.symbols.format(insn.address)
        line = Text.assemble(
            (f"{where:<14}", "cyan"), f"  {insn.address:0{addr_w}x}  ",
            (f"{bytes(insn.bytes).hex(' '):<30}", "dim"),
            f"  {insn.mnemonic:<8} {insn.op_str:<28}  ",
        )
        con.print(line.append(how), soft_wrap=True)
    if n == 0:
        raise KpsdkError(f"capstone decoded no instruction at {sym} ({start:#x})")


def cmd_probe(
    ctx: typer.Context,
    elf: ElfArg,
    kprobe: Annotated[list[str], typer.Option(
        "--kprobe", "-k", metavar="SYM[+OFF]",
        help="Put a kprobe here (SYM, SYM+0xOFF or 0xADDR). Repeatable.")],
    post: Annotated[bool, typer.Option("--post", help="Also a post_handler: prints the ip after the instruction.")]
    = False,
    regs_opt: Annotated[str | None, typer.Option(
        "--regs", metavar="R1,R2", help="Registers to print (names, aliases, ip, sp, return_value, argN). "
        "Default: the first 4 user argument registers, sp and the return value register.")] = None,
    call: Annotated[str | None, typer.Option(
        "--call", metavar="FN ARGS...",
        help="Call FN with integer arguments instead of running the program: --call add 2 3 "
             "(after the ELF argument), or one quoted string 'add 2 3' / 'add(2, -3)'; 0x.. ok.")] = None,
    restype: Annotated[str, typer.Option(
        "--restype", help="How --call reads the result: long, ulong, int or uint.")] = "long",
    no_optimize: Annotated[bool, typer.Option(
        "--no-optimize", help="s.kprobes_optimization = False: every probe takes the breakpoint path.")] = False,
    timeout: Annotated[float, typer.Option("--timeout", metavar="S", help="Stop the program after S seconds.")]
    = 5.0,
    noprobe: NoprobeOpt = None,
) -> None:
    """Run a program (or call one function) with kprobes on it, printing each hit.

    Opens elf:ELF, registers one Kprobe per --kprobe (all or none: an error
    rolls the others back, K8), then runs the program from its entry point
    and prints its output and exit status, or with --call calls one function
    and prints FN(ARGS) = result.  Each hit prints

      \\[n] SYM+OFF (ADDRESS) reg=value ...

    read by a pre_handler when the probed instruction is about to run (at a
    function's first instruction, the arguments are where the calling
    convention puts them).  With --post, a post_handler prints the ip after
    the instruction ran.  At the end: the kprobes/list and kprobe_profile
    views (s.list(), s.profile()).

    The errors are the kernel's: an unknown symbol is ENOENT, an offset inside
    an instruction EILSEQ, a refused instruction EINVAL (see kpsdk disasm).
    The exit status is 0 when probing worked, whatever the program's own
    status; 1 on a kpsdk error or when the program did not exit in time.
    """
    if ctx.args and call is None:
        raise typer.BadParameter(f"unexpected arguments {' '.join(ctx.args)!r}", param_hint="ELF")
    if ctx.args:
        call = " ".join([call or "", *ctx.args])
    fn_args = parse_call(call) if call is not None else None
    wheres = [parse_where(k) for k in kprobe]
    if restype not in ("long", "ulong", "int", "uint"):
        raise typer.BadParameter("long, ulong, int or uint", param_hint="--restype")
    reg = kpsdk.get_registry()
    if "kprobe" not in reg.probe_types:
        raise KpsdkError(
            "no 'kprobe' probe type is loaded: the kprobes plugin is blocked or missing "
            f"(plugins: {', '.join(_loaded(reg)) or 'none'}; drop -p no:kprobes)"
        )
    Kprobe = reg.probe_types["kprobe"].probe_class  # noqa: N806 - a class
    con = console()
    with kpsdk.open(f"elf:{elf_path(elf)}", noprobe=_split_commas(noprobe)) as s:
        names = [r.strip() for r in regs_opt.split(",") if r.strip()] if regs_opt else default_regs(s.arch)
        check_reg_names(s.arch, names)
        if no_optimize:
            s.kprobes_optimization = False
        hit = [0]
        probes = []
        for where in wheres:
            pre, post_h = _printers(s, con, names, hit, post)
            probes.append(Kprobe(**where, pre_handler=pre, post_handler=post_h))
        s.register_many(probes)
        con.print(Text(f"{len(probes)} kprobe(s) on {s.arch.name}: "
                       + ", ".join(s.symbols.format(_probe_addr(s, p)) for p in probes), style="dim"),
                  soft_wrap=True)
        status: int | None = None
        if fn_args is not None:
            fn, args = fn_args
            result = s.call(fn, *args, restype=restype)
            con.print(Text(f"{fn}({', '.join(str(a) for a in args)}) = {result}", style="bold"), soft_wrap=True)
        else:
            status = s.run(timeout=timeout)
            heading(con, "program output")
            con.out(s.console, end="" if s.console.endswith("\n") or not s.console else "\n", highlight=False)
            if status is not None:
                con.print(Text(f"exit status {status}", style="bold"))
        heading(con, "kprobes/list")
        con.out(s.list(), end="", highlight=False)
        heading(con, "kprobe_profile")
        con.out(s.profile(), end="", highlight=False)
        if fn_args is None and status is None:
            raise KpsdkError(f"the program did not exit within {timeout:g} s (--timeout)")


def _loaded(reg: Any) -> list[str]:
    return [name for name, plugin in reg.pm.list_name_plugin() if plugin is not None]


def heading(con: Console, title: str) -> None:
    con.print(Text(f"── {title} " + "─" * max(4, 40 - len(title)), style="bold dim"))


def _probe_addr(s: Session, probe: Any) -> int:
    point = s.target.manager.point_of(probe)
    return int(point.addr) if point is not None else int(probe.addr or 0)


def _printers(s: Session, con: Console, names: list[str], hit: list[int], post: bool) -> tuple[Any, Any]:
    """A pre_handler printing the registers, and with ``post`` a post_handler printing the ip."""
    where_of: dict[str, str] = {}

    def pre(p: Any, regs: PtRegs) -> int:
        hit[0] += 1
        ip = regs.ip
        where_of["w"] = f"{s.symbols.format(ip)} ({ip:#x})"
        values = " ".join(f"{n}={read_reg(regs, n):#x}" for n in names)
        con.print(Text(f"[{hit[0]}] ", style="bold").append(where_of["w"], style="cyan").append(f" {values}"),
                  soft_wrap=True)
        return 0

    def post_handler(p: Any, regs: PtRegs, flags: int) -> None:
        hit[0] += 1
        ip = regs.ip
        con.print(Text(f"[{hit[0]}] ", style="bold").append("post ", style="magenta")
                  .append(where_of.get("w", "?"), style="cyan")
                  .append(f" -> ip={ip:#x} ({s.symbols.format(ip)})"), soft_wrap=True)

    return pre, (post_handler if post else None)


def cmd_demo(
    arch: Annotated[list[str] | None, typer.Option(
        "--arch", "-a", metavar="ARCH",
        help="Only these fixture architectures (repeatable): " + ", ".join(fixtures.ARCHS))] = None,
) -> None:
    """Show what kprobes can do, live, on the bundled programs: start here.

    For each architecture (x86_64, i386, arm, thumb, riscv64; ppc64 is listed
    with the reason Unicorn cannot run it) a small C program from
    kpsdk.fixtures runs in Unicorn while real kprobes:

      1. read add's arguments and follow fact's recursion (5, 4, 3, 2, 1)
      2. see, in a post_handler, whether the branch in check was taken
      3. leave the program's output exactly as without probes
      4. inject a fault: rewrite add's second argument, add=5 becomes add=42
      5. change the path (K2): regs.ip = sub; return 1 makes add(7, 3) = 4
      6. show s.list() (\\[OPTIMIZED], \\[DISABLED]) and s.profile()

    A summary table ends it.  Exit status 0 when every check passed, 1 if not.
    The source is kpsdk/demo.py: read it next.
    """
    from kpsdk.demo import run_demo

    chosen = [_fixture_name(a) for a in arch or []]
    results = run_demo(chosen or None, console())
    if not all(r.ok for r in results):
        raise typer.Exit(1)


def _fixture_name(name: str) -> str:
    if name in fixtures.ARCHS:
        return name
    try:
        canonical = kpsdk.get_registry().archs.get(name).name
    except UnknownNameError:
        canonical = ""
    if canonical in fixtures.ARCHS:
        return canonical
    raise typer.BadParameter(f"no fixture for {name!r}; choose from {', '.join(fixtures.ARCHS)}", param_hint="--arch")


COMMANDS: list[tuple[str, Any, str]] = [
    ("demo", cmd_demo, "kpsdk demo\nkpsdk demo --arch riscv64 --arch thumb"),
    ("archs", cmd_archs, "kpsdk archs"),
    ("plugins", cmd_plugins, "kpsdk plugins\nkpsdk -p no:kprobes plugins"),
    ("list", cmd_list, "kpsdk list x86_64\nkpsdk list ./prog.elf --all\nkpsdk list arm --noprobe add,sub"),
    ("disasm", cmd_disasm, "kpsdk disasm x86_64 check\nkpsdk disasm thumb add\nkpsdk disasm ppc64 fact -n 8"),
    ("probe", cmd_probe,
     "kpsdk probe x86_64 --kprobe add\n"
     "kpsdk probe riscv64 --kprobe fact --regs a0,sp,ra\n"
     "kpsdk probe arm --kprobe check+0x10 --post --no-optimize\n"
     "kpsdk probe x86_64 --kprobe add --kprobe sub --call 'add 2 3'\n"
     "kpsdk probe ./prog.elf --kprobe 0x401000 --timeout 1"),
]


def create_app() -> typer.Typer:
    """The ``kpsdk`` app: built-in commands, then the commands plugins add."""
    app = typer.Typer(
        name="kpsdk",
        cls=KpsdkGroup,
        help=HELP,
        epilog=EPILOG,
        no_args_is_help=True,
        rich_markup_mode="rich",
        add_completion=False,
        pretty_exceptions_show_locals=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for name, func, examples in COMMANDS:
        epilog = "[bold]Examples[/bold]\n" + "\n".join(f"  {line}" for line in examples.splitlines())
        # probe takes the arguments after --call FN as extra arguments (negative numbers included)
        extra = {"allow_extra_args": True, "ignore_unknown_options": True} if name == "probe" else None
        app.command(name, epilog=epilog, context_settings=extra)(func)
    kpsdk.get_registry().pm.hook.kpsdk_cli(app=app)
    return app


_app: typer.Typer | None = None


def get_app() -> typer.Typer:
    """The app, created on first use (after ``main()`` has applied ``-p``)."""
    global _app
    if _app is None:
        _app = create_app()
    return _app


def __getattr__(name: str) -> typer.Typer:
    """``kpsdk.cli.app``: created on first access, so importing this module loads no plugin."""
    if name == "app":
        return get_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The ``kpsdk`` console script."""
    global _app
    try:
        load, block = scan_plugin_args(sys.argv[1:])
        _registry.configure(load=load, block=block)
        _app = None
        get_app()(prog_name="kpsdk")
    except Exception as exc:
        if not _is_user_error(exc):
            raise
        report_error(exc)
        sys.exit(1)


if __name__ == "__main__":
    main()
