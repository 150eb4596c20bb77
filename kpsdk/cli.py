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

import errno
import json
import os
import shlex
import signal
import sys
import threading
from dataclasses import dataclass, field
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
from kpsdk.errors import ArgumentError, KpsdkError, TargetFault, UnknownNameError, shown
from kpsdk.probe import location_fields, parse_number
from kpsdk.session import RESTYPES, check_timeout

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
    detail = getattr(exc, "error_log", None)  # a definition error: the kernel's error_log, caret included
    if isinstance(detail, str):
        console(stderr=True).out(detail, highlight=False)


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
    """An ELF path; a name of a bundled fixture (``x86_64``, ``riscv64``...) also works.

    A path with a NUL byte names no file: a usage error, before anything opens it.
    """
    if "\0" in arg:
        raise typer.BadParameter(f"{shown(arg)} contains a NUL byte: not a file name", param_hint="ELF")
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
    """``"add 2 3"``, ``"add(2, -3)"`` or ``"add 0x10"`` -> ``("add", [2, 3])``; a usage error otherwise."""
    try:
        words = shlex.split(text.replace("(", " ").replace(")", " ").replace(",", " "))
    except ValueError as e:  # shlex: "No closing quotation", "No escaped character"
        raise typer.BadParameter(f"{shown(text)}: {e}", param_hint="--call") from None
    if not words:
        raise typer.BadParameter("give the function and its arguments, e.g. --call 'add 2 3'", param_hint="--call")
    fn, args = words[0], []
    for w in words[1:]:
        value = parse_number(w)
        if value is None:
            raise typer.BadParameter(f"{shown(w)} is not an integer (decimal, 0x.., -5)", param_hint="--call")
        args.append(value)
    return fn, args


def _file_location(spec: str, option: str) -> str:
    """Check the shape of ``PATH:SYM`` / ``PATH:0xOFF`` (a usage error if malformed); the file and
    symbol are read when the probe is made."""
    path, sep, where = spec.strip().rpartition(":")
    if not sep or not path or not where.strip():
        raise typer.BadParameter(f"{spec!r}: want PATH:SYM, PATH:SYM+0xOFF or PATH:0xOFF", param_hint=option)
    return spec.strip()


def parse_where(spec: str, option: str = "--kprobe") -> dict[str, Any]:
    """``SYM``, ``SYM+OFF`` or ``0xADDR`` -> Kprobe keyword arguments (a usage error if malformed)."""
    try:
        return location_fields(spec)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=option) from None


def default_regs(arch: Arch, abi_kind: str = "user") -> list[str]:
    """The first four arguments (by the session's ABI), the stack pointer and the return-value register."""
    args = list(arch.abi(abi_kind).args[:4]) or [f"arg{i}" for i in range(4)]
    return list(dict.fromkeys([*args, arch.sp, arch.return_value]))


def arg_number(name: str) -> int | None:
    """N of ``argN`` (ASCII digits), else None; more digits than any argument number has
    gives :data:`ARG_LIMIT` (out of range), never a 5000-digit conversion."""
    digits = name[3:] if name.startswith("arg") else ""
    if not (digits.isascii() and digits.isdigit()):
        return None
    return int(digits) if len(digits) <= 9 else ARG_LIMIT


def check_reg_names(arch: Arch, names: list[str]) -> None:
    """Unknown names are an error; so is an argument number the kernel's ``$argN`` could not
    name either (``PARAM_MAX_STACK``, :data:`ARG_LIMIT`), read from beyond any stack at every hit."""
    roles = ("ip", "pc", "sp", "return_value")
    for n in names:
        number = arg_number(n)
        if number is not None:
            if number >= ARG_LIMIT:
                raise typer.BadParameter(f"{shown(n)}: arguments go from arg0 to arg{ARG_LIMIT - 1}",
                                         param_hint="--regs")
            continue
        if n in roles or arch.has_register(n):
            continue
        raise UnknownNameError(f"{arch.name} register", n, [*arch.register_names, *roles, "argN"])


def read_reg(regs: PtRegs, name: str) -> int:
    number = arg_number(name)
    if number is not None:
        return regs.arg(number)
    return int(getattr(regs, name))


def show_reg(regs: PtRegs, name: str) -> str:
    """``name=0x..``, or ``name=(fault)`` for a stack argument that cannot be read (as the
    kernel prints a fetch it could not make); the hit goes on."""
    try:
        return f"{name}={read_reg(regs, name):#x}"
    except TargetFault:
        return f"{name}=(fault)"


def check_seconds(param: typer.CallbackParam, value: float | None) -> float | None:
    """``--timeout``/``--duration``: Session.run's rules (``check_timeout``) as a usage error;
    ``inf`` is no limit."""
    if value is not None:
        try:
            check_timeout(value, param.opts[0] if param.opts else "S")
        except ArgumentError as e:
            raise typer.BadParameter(str(e)) from None
    return value


def split_commas(values: list[str] | None) -> list[str]:
    """Repeatable NAME[,NAME] options (``--noprobe a,b --noprobe c``) as one list."""
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
    blocked = set(split_commas(noprobe))
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
    classify = arch.insn.classify
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


# -- kpsdk probe ----------------------------------------------------------------------

#: target kinds that run real code behind a gdbstub: no --call; they run until they end
LIVE_KINDS = ("qemu-user", "qemu-system", "gdb")
#: the launcher options of the live kinds: CLI option -> (kpsdk.open keyword, the kinds that take it)
TARGET_OPTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "--arg": ("args", ("qemu-user",)),
    "--kernel": ("kernel", ("qemu-system",)),
    "--initrd": ("initrd", ("qemu-system",)),
    "--append": ("append", ("qemu-system",)),
    "--symbols": ("symbols", ("qemu-system", "gdb")),
    "--arch": ("arch", ("gdb",)),
}
TARGET_SPECS = "qemu-user:PROG, qemu-system:ARCH, gdb://HOST:PORT (or elf:PATH, the default)"
#: default --timeout: a program in Unicorn, a live target
UNICORN_TIMEOUT = 5.0
LIVE_TIMEOUT = 120.0
#: --string-arg reads at most this many bytes (s.read_string's max)
STRING_MAX = 256
#: a kretprobe keeps each string in ri.data: a status byte, then up to 255 bytes of UTF-8
STRING_SLOT = 256
STRING_OK, STRING_TRUNCATED, STRING_FAULT = 1, 2, 3
#: the most --string-arg values a kretprobe can keep: its ri.data is at most the kernel's
#: KRETPROBE_MAX_DATA_SIZE (4096, kpsdk.KRETPROBE_MAX_DATA_SIZE) bytes
STRINGS_MAX = 4096 // STRING_SLOT
#: argument numbers (argN, --string-arg N) go below this: the kernel's $argN limit, PARAM_MAX_STACK
#: (kpsdk.trace.grammar), which no stack reaches
ARG_LIMIT = 2048
#: errno values the kernel returns that userspace never sees (include/linux/errno.h)
KERNEL_ERRNO = {512: "ERESTARTSYS", 513: "ERESTARTNOINTR", 514: "ERESTARTNOHAND", 515: "ENOIOCTLCMD",
                516: "ERESTART_RESTARTBLOCK", 517: "EPROBE_DEFER", 518: "EOPENSTALE", 519: "ENOPARAM",
                521: "EBADHANDLE", 522: "ENOTSYNC", 523: "EBADCOOKIE", 524: "ENOTSUPP", 525: "ETOOSMALL",
                526: "ESERVERFAULT", 527: "EBADTYPE", 528: "EJUKEBOX", 529: "EIOCBQUEUED", 530: "ERECALLCONFLICT"}

PROBES_PANEL = "Probes"
OUTPUT_PANEL = "What to print"
TARGET_PANEL = "Target (default: the ELF in Unicorn)"

ProbeElfArg = Annotated[str | None, typer.Argument(
    metavar="ELF", show_default=False,
    help="The program to run in Unicorn: an ELF executable or a bundled fixture's name ("
         + ", ".join(fixtures.ARCHS) + "). Omit it with --target (or give it to --target qemu-user).")]


@dataclass
class TargetChoice:
    """What ``kpsdk probe`` opens: ``kpsdk.open(spec, **options)``."""

    spec: str
    options: dict[str, Any]
    #: one of LIVE_KINDS, or None for Unicorn (elf:, unicorn: and other plugins' kinds)
    kind: str | None

    @property
    def live(self) -> bool:
        return self.kind is not None

    def run_timeout(self, given: float | None) -> float:
        """``given`` seconds, else the default for this kind of target."""
        return given if given is not None else (LIVE_TIMEOUT if self.live else UNICORN_TIMEOUT)


def choose_target(elf: str | None, target: str | None, given: dict[str, Any]) -> TargetChoice:
    """The target spec and launcher options from ELF, --target and the options in ``given``.

    ``given`` maps CLI option names (``--kernel``...) to their values (None: not
    given).  An option for another kind of target is a usage error.
    """
    if target is None:
        if elf is None:
            raise typer.BadParameter("give the program (kpsdk probe ELF ...) or a live target (--target SPEC: "
                                     f"{TARGET_SPECS})", param_hint="ELF")
        spec, kind = f"elf:{elf_path(elf)}", None
    else:
        scheme, sep, rest = target.partition(":")
        if not sep:
            if scheme != "qemu-user":
                raise typer.BadParameter(f"{target!r} is not a target spec; want {TARGET_SPECS}",
                                         param_hint="--target")
            if elf is None:
                raise typer.BadParameter("name the program: --target qemu-user:PROG (or kpsdk probe PROG "
                                         "--target qemu-user)", param_hint="--target")
            rest, elf = elf, None
        if elf is not None:
            raise typer.BadParameter(f"both ELF ({elf}) and --target ({target}) name the target: give one "
                                     "(gdb:// takes its symbols from --symbols)", param_hint="ELF")
        if scheme in ("qemu-user", "elf"):
            rest = str(elf_path(rest))
        spec, kind = f"{scheme}:{rest}", (scheme if scheme in LIVE_KINDS else None)
    options: dict[str, Any] = {}
    for opt, value in given.items():
        if value is None or value == []:
            continue
        keyword, kinds = TARGET_OPTIONS[opt]
        if kind not in kinds:
            wanted = " or ".join(f"--target {k}{'://HOST:PORT' if k == 'gdb' else ':...'}" for k in kinds)
            raise typer.BadParameter(f"{opt} goes with {wanted}", param_hint=opt)
        options[keyword] = value
    return TargetChoice(spec, options, kind)


def probe_class(reg: Any, name: str) -> Any:
    """The class of probe type ``name`` (``kprobe``, ``kretprobe``), or a clear error when its plugin is out."""
    if name not in reg.probe_types:
        raise KpsdkError(
            f"no {name!r} probe type is loaded: the {name}s plugin is blocked or missing "
            f"(plugins: {', '.join(_loaded(reg)) or 'none'}; drop -p no:{name}s)"
        )
    return reg.probe_types[name].probe_class


def signed_return(raw: int, restype: str, word_bits: int) -> int:
    """A return register's value as the C type ``restype`` (long/ulong: a word; int/uint: 32 bits)."""
    bits = 32 if restype in ("int", "uint") else word_bits
    value = raw & ((1 << bits) - 1)
    if restype in ("long", "int") and value >> (bits - 1):
        value -= 1 << bits
    return value


def errno_name(value: int) -> str:
    """``ENOENT`` for -2 (the kernel's internal ones too: ``ERESTARTSYS``); "" when it is none."""
    if value >= 0:
        return ""
    return errno.errorcode.get(-value) or KERNEL_ERRNO.get(-value, "")


def fetch_string(s: Session, regs: PtRegs, n: int) -> tuple[bytes, int]:
    """Argument ``n`` read as a C string: (at most 255 bytes of UTF-8, STRING_OK/TRUNCATED/FAULT)."""
    try:
        text = s.read_string(regs.arg(n), max=STRING_MAX)
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

    def open(self) -> Session:
        self.session = kpsdk.open(self.choice.spec, noprobe=self.noprobe, **self.choice.options)
        return self.session

    def execute(self) -> None:
        """Register the probes, run (or --call), then report."""
        s = self.session
        assert s is not None
        reg = s.registry
        Kprobe: Any = probe_class(reg, "kprobe") if self.kprobes else None  # noqa: N806 - classes
        Kretprobe: Any = probe_class(reg, "kretprobe") if self.kretprobes else None  # noqa: N806
        names: list[str] = []
        if self.kprobes or self.uprobes:
            abi = getattr(s.target, "abi_kind", "user")
            names = ([r.strip() for r in self.regs_opt.split(",") if r.strip()] if self.regs_opt
                     else default_regs(s.arch, abi))
            check_reg_names(s.arch, names)
        if self.no_optimize:
            s.kprobes_optimization = False
        probes = []
        for where in self.kprobes:
            pre, post_h = _printers(s, self.con, names, self.hit, self.post, self.strings)
            probes.append(Kprobe(**where, pre_handler=pre, post_handler=post_h))
            self.lines.append(ProbeLine("k", "", probes[-1]))
        for name, where in self.kretprobes:
            line = ProbeLine("r", name)
            entry, ret = self._kretprobe_handlers(s, line)
            probes.append(Kretprobe(**where, handler=ret, entry_handler=entry, maxactive=self.maxactive,
                                    data_size=STRING_SLOT * len(self.strings)))
            line.probe = probes[-1]
            self.lines.append(line)
        for text in self.uprobes:
            pre, post_h = _printers(s, self.con, names, self.hit, self.post, self.strings)
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
        s.register_many(probes)
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

    def _kretprobe_handlers(self, s: Session, line: ProbeLine) -> tuple[Any, Any]:
        """entry_handler (fetches the string arguments into ri.data) and handler (prints the return)."""
        strings, con, hit = self.strings, self.con, self.hit
        word_bits = 8 * s.arch.word_size

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
            text = Text(f"[{hit[0]}] ", style="bold").append(f"r {line.name}", style="magenta")
            text.append(f" ret={ret}")
            if self.failed and errno_name(ret):
                text.append(f" ({errno_name(ret)})", style="red")
            for n, (raw, status) in zip(strings, load_strings(ri.data, len(strings)), strict=True):
                text.append(" " + show_string(n, raw, status))
            con.print(text, soft_wrap=True)

        return (entry if strings else None), on_return

    def report(self, interrupted: bool = False) -> None:
        """Output, exit status, kprobes/list, kprobe_profile and the summary; the timeout error last."""
        s, con = self.session, self.con
        if s is None:
            return
        if self.fn_args is None and (self.show_console or not self.choice.live):
            heading(con, "console" if self.choice.kind in ("qemu-system", "gdb") else "program output")
            text = s.console
            con.out(text, end="" if text.endswith("\n") or not text else "\n", highlight=False)
            if not text and self.choice.kind == "gdb":
                con.print(Text("(none: a gdb:// target's output goes to whoever started it)", style="dim"))
        if self.status is not None:
            con.print(Text(f"exit status {self.status}", style="bold"))
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
        if interrupted or not self.ran or self.status is not None:
            return
        if self.choice.kind in (None, "qemu-user"):
            raise KpsdkError(f"the program did not exit within {self.timeout:g} s (--timeout)")
        con.print(Text(f"stopped after {self.timeout:g} s (--timeout): the target was still running", style="dim"))


def close_session(s: Session | None) -> None:
    """Close the session (QEMU and gdb reaped); a second Ctrl-C meanwhile is ignored."""
    if s is None:
        return
    main_thread = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main_thread else None
    try:
        s.close()
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, old if old is not None else signal.default_int_handler)


#: the target options of ``kpsdk probe``, shared with other commands (``kpsdk trace``)
TargetOpt = Annotated[str | None, typer.Option(
    "--target", "-t", metavar="SPEC", rich_help_panel=TARGET_PANEL,
    help="Where the code runs: qemu-user:PROG (a program under qemu-user), qemu-system:ARCH (a kernel "
         "booted in QEMU), gdb://HOST:PORT (a gdbstub already running). Default: ELF in Unicorn.")]
ProgArgOpt = Annotated[list[str] | None, typer.Option(
    "--arg", metavar="ARG", rich_help_panel=TARGET_PANEL,
    help="qemu-user: one argument for the program (repeat for more; --arg=-v for one starting "
         "with -).")]
KernelOpt = Annotated[str | None, typer.Option(
    "--kernel", metavar="VMLINUZ", rich_help_panel=TARGET_PANEL,
    help="qemu-system: the kernel image to boot (its symbols come from its own kallsyms table "
         "unless --symbols).")]
InitrdOpt = Annotated[str | None, typer.Option(
    "--initrd", metavar="FILE", rich_help_panel=TARGET_PANEL, help="qemu-system: the initramfs.")]
AppendOpt = Annotated[str | None, typer.Option(
    "--append", metavar="CMDLINE", rich_help_panel=TARGET_PANEL,
    help="qemu-system: the kernel command line (default: 'nokaslr panic=-1'); console= for the "
         "architecture's board (ttyS0, ttyAMA0, hvc0) is added unless it names one.")]
SymbolsOpt = Annotated[str | None, typer.Option(
    "--symbols", metavar="FILE", rich_help_panel=TARGET_PANEL,
    help="qemu-system, gdb://: symbols from an ELF (vmlinux), System.map or a kallsyms dump.")]
ArchOpt = Annotated[str | None, typer.Option(
    "--arch", metavar="ARCH", rich_help_panel=TARGET_PANEL,
    help="gdb://: the architecture (not needed when --symbols is an ELF).")]


def cmd_probe(
    ctx: typer.Context,
    elf: ProbeElfArg = None,
    kprobe: Annotated[list[str] | None, typer.Option(
        "--kprobe", "-k", metavar="SYM[+OFF]", rich_help_panel=PROBES_PANEL,
        help="Put a kprobe here (SYM, SYM+0xOFF or 0xADDR); each hit prints registers. Repeatable.")] = None,
    kretprobe: Annotated[list[str] | None, typer.Option(
        "--kretprobe", metavar="SYM", rich_help_panel=PROBES_PANEL,
        help="Put a kretprobe on function SYM; each return prints 'r SYM ret=VALUE'. Repeatable.")] = None,
    uprobe: Annotated[list[str] | None, typer.Option(
        "--uprobe", "-u", metavar="PATH:SYM|PATH:0xOFF", rich_help_panel=PROBES_PANEL,
        help="Put a uprobe on file PATH at symbol SYM[+OFF] or file offset 0xOFF (this session); each hit "
             "prints registers, as --kprobe. Repeatable.")] = None,
    uretprobe: Annotated[list[str] | None, typer.Option(
        "--uretprobe", metavar="PATH:SYM|PATH:0xOFF", rich_help_panel=PROBES_PANEL,
        help="Put a uretprobe on the function at PATH:SYM (or its entry's file offset); each return prints "
             "'r PATH:SYM ret=VALUE'. Repeatable.")] = None,
    string_arg: Annotated[list[int] | None, typer.Option(
        "--string-arg", metavar="N", min=0, max=ARG_LIMIT - 1, rich_help_panel=OUTPUT_PANEL,
        help="Also print argument N (from 0, by the target's calling convention) as a NUL-terminated string, "
             "argN=\"...\" (at most 256 bytes; argN=(fault) if unreadable). Read at a kprobe's hit, at a "
             f"kretprobe's function entry (at most {STRINGS_MAX} there). Repeatable.")] = None,
    failed: Annotated[bool, typer.Option(
        "--failed", rich_help_panel=OUTPUT_PANEL,
        help="Print only the returns whose value is negative (errno style), with the errno name: "
             "ret=-2 (ENOENT).")] = False,
    maxactive: Annotated[int, typer.Option(
        "--maxactive", metavar="N", min=0, rich_help_panel=PROBES_PANEL,
        help="Kretprobe instances, i.e. calls followed at once (more are missed); 0: the kernel's "
             "max(10, 2*ncpus).")] = 0,
    post: Annotated[bool, typer.Option(
        "--post", rich_help_panel=PROBES_PANEL,
        help="Also a post_handler: prints the ip after the instruction.")] = False,
    regs_opt: Annotated[str | None, typer.Option(
        "--regs", metavar="R1,R2", rich_help_panel=OUTPUT_PANEL,
        help="Registers a kprobe hit prints (names, aliases, ip, sp, return_value, argN). "
        "Default: the first 4 argument registers, sp and the return value register.")] = None,
    call: Annotated[str | None, typer.Option(
        "--call", metavar="FN ARGS...", rich_help_panel=TARGET_PANEL,
        help="Unicorn only: call FN with integer arguments instead of running the program: --call add 2 3 "
             "(after the ELF argument), or one quoted string 'add 2 3' / 'add(2, -3)'; 0x.. ok.")] = None,
    restype: Annotated[str, typer.Option(
        "--restype", rich_help_panel=OUTPUT_PANEL,
        help="How a return value is read (--call, --kretprobe): long (signed word), ulong, int or uint "
             "(32-bit).")] = "long",
    no_optimize: Annotated[bool, typer.Option(
        "--no-optimize", rich_help_panel=PROBES_PANEL,
        help="s.kprobes_optimization = False: every probe takes the breakpoint path.")] = False,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S", show_default=False, rich_help_panel=TARGET_PANEL, callback=check_seconds,
        help=f"Stop the target after S seconds, a positive number; inf: no limit (default: {UNICORN_TIMEOUT:g} "
             f"in Unicorn, {LIVE_TIMEOUT:g} on a live target).")] = None,
    noprobe: Annotated[list[str] | None, typer.Option(
        "--noprobe", metavar="NAME[,NAME]", rich_help_panel=PROBES_PANEL,
        help="Symbols that may not be probed (the kernel's NOKPROBE_SYMBOL).")] = None,
    target: TargetOpt = None,
    prog_arg: ProgArgOpt = None,
    kernel: KernelOpt = None,
    initrd: InitrdOpt = None,
    append: AppendOpt = None,
    symbols: SymbolsOpt = None,
    arch: ArchOpt = None,
    show_console: Annotated[bool, typer.Option(
        "--console", rich_help_panel=OUTPUT_PANEL,
        help="Live targets: print the target's output at the end (qemu-user: the program's; qemu-system: "
             "the serial console). Unicorn always prints the program's.")] = False,
) -> None:
    """Put kprobes and kretprobes on a program or a kernel and print each hit as it happens.

    [bold]Where the code runs[/bold] (--target; live targets need QEMU and gdb-multiarch):

      (no --target)      ELF, run in Unicorn from its entry point, or --call FN ARGS
      qemu-user:PROG     PROG under qemu-user, --arg ARG for its arguments
      qemu-system:ARCH   a kernel booted in QEMU: --kernel, --initrd, --append, --symbols
      gdb://HOST:PORT    a gdbstub already running (attached, never killed): --arch, --symbols

    All probes are registered at once or none (an error rolls the others back,
    K8); then the target runs until it ends (the program exits, the guest powers
    off) or --timeout.  Ctrl-C stops it: the session is closed, QEMU and gdb are
    reaped, the summary is printed and the exit status is 130.

    [bold]Each hit prints a line[/bold], as it happens:

      \\[n] SYM+OFF (ADDRESS) reg=value ... argN="..."   a kprobe, before the instruction runs
      \\[n] r SYM ret=VALUE argN="..."                    a kretprobe, when SYM returns

    At a function's first instruction the arguments are where the calling
    convention puts them (the kernel's on qemu-system and gdb://), so
    --string-arg 1 on do_sys_openat2 is the file name.  A kretprobe reads it at
    the entry and keeps it in ri.data until the return.  ret is the return
    register as a signed word (--restype long; give --restype int for a function
    returning int on a 64-bit target); --failed keeps only negative values:
    ret=-2 (ENOENT).  With --post, a post_handler prints the ip after the
    instruction ran.

    [bold]At the end[/bold]: the program's output (Unicorn; --console for live
    targets), its exit status, the kprobes/list and kprobe_profile views
    (s.list(), s.profile()) and one summary line per probe: hits, returns,
    missed.

    The errors are the kernel's: an unknown symbol is ENOENT, an offset inside
    an instruction EILSEQ, a refused instruction EINVAL (see kpsdk disasm), a
    kretprobe not at a function's entry EINVAL.  Exit status: 0 when probing
    worked, whatever the program's own status; 1 on a kpsdk error or when a
    program (Unicorn, qemu-user) did not exit within --timeout (a kernel still
    running then is just stopped: 0); 2 on a usage error; 130 on Ctrl-C.
    """
    if ctx.args and call is None:
        raise typer.BadParameter(f"unexpected arguments {' '.join(ctx.args)!r}", param_hint="ELF")
    if ctx.args:
        call = " ".join([call or "", *ctx.args])
    fn_args = parse_call(call) if call is not None else None
    kprobes = [parse_where(k) for k in kprobe or []]
    kretprobes = [(k.strip(), parse_where(k, "--kretprobe")) for k in kretprobe or []]
    uprobes = [_file_location(u, "--uprobe") for u in uprobe or []]
    uretprobes = [_file_location(u, "--uretprobe") for u in uretprobe or []]
    if not kprobes and not kretprobes and not uprobes and not uretprobes:
        raise typer.BadParameter("give at least one --kprobe SYM, --kretprobe SYM or --uprobe PATH:SYM",
                                 param_hint="--kprobe")
    if len(set(string_arg or [])) > STRINGS_MAX and (kretprobes or uretprobes):
        raise typer.BadParameter(f"a kretprobe keeps at most {STRINGS_MAX} strings from the entry to the return "
                                 f"({STRING_SLOT} bytes each in ri.data, at most {STRINGS_MAX * STRING_SLOT})",
                                 param_hint="--string-arg")
    if failed and not kretprobes and not uretprobes:
        raise typer.BadParameter("--failed filters the returns of --kretprobe probes: add one",
                                 param_hint="--failed")
    if restype not in RESTYPES:
        raise typer.BadParameter(", ".join(RESTYPES), param_hint="--restype")
    live_kind = (target or "").partition(":")[0]
    if live_kind in LIVE_KINDS and fn_args is not None:
        raise typer.BadParameter(f"--call calls one function in Unicorn; a {live_kind} target runs its own "
                                 "code: drop --call (or --target)", param_hint="--call")
    choice = choose_target(elf, target, {"--arg": prog_arg, "--kernel": kernel, "--initrd": initrd,
                                         "--append": append, "--symbols": symbols, "--arch": arch})
    reg = kpsdk.get_registry()
    if kprobes:
        probe_class(reg, "kprobe")
    if kretprobes:
        probe_class(reg, "kretprobe")
    run = ProbeRun(choice, kprobes, kretprobes, list(dict.fromkeys(string_arg or [])), failed, maxactive, post,
                   regs_opt, fn_args, restype, no_optimize,
                   choice.run_timeout(timeout),
                   split_commas(noprobe), show_console, console(), uprobes=uprobes, uretprobes=uretprobes)
    interrupted = False
    try:
        try:
            run.open()
            run.execute()
        except KeyboardInterrupt:
            interrupted = True
            console(stderr=True).print("[bold yellow]interrupted[/] (Ctrl-C): stopping the target, closing the "
                                       "session")
            if run.session is not None:
                run.report(interrupted=True)
    except KeyboardInterrupt:  # a second Ctrl-C while reporting
        interrupted = True
    finally:
        close_session(run.session)
    if interrupted:
        raise typer.Exit(130)


def _loaded(reg: Any) -> list[str]:
    return [name for name, plugin in reg.pm.list_name_plugin() if plugin is not None]


def heading(con: Console, title: str) -> None:
    con.print(Text(f"── {title} " + "─" * max(4, 40 - len(title)), style="bold dim"))


def _probe_addr(s: Session, probe: Any) -> int:
    point = s.target.manager.point_of(probe)
    return int(point.addr) if point is not None else int(probe.addr or 0)


def _printers(s: Session, con: Console, names: list[str], hit: list[int], post: bool,
              strings: list[int] | None = None) -> tuple[Any, Any]:
    """A pre_handler printing the registers (and ``strings`` arguments), with ``post`` a post_handler
    printing the ip."""
    where_of: dict[str, str] = {}

    def pre(p: Any, regs: PtRegs) -> int:
        hit[0] += 1
        ip = regs.ip
        where_of["w"] = f"{s.symbols.format(ip)} ({ip:#x})"
        values = " ".join([show_reg(regs, n) for n in names]
                          + [show_string(n, *fetch_string(s, regs, n)) for n in strings or []])
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
     "kpsdk probe ./prog.elf --kprobe 0x401000 --timeout 1\n"
     "kpsdk probe x86_64 --kretprobe sub --restype int --call sub 3 5     # r sub ret=-2\n"
     "kpsdk probe --target qemu-user:arm --kretprobe add --kprobe fact --console\n"
     "kpsdk probe ./prog --uprobe ./prog:add --uretprobe ./prog:0x1f9     # by file and offset\n"
     "kpsdk probe --target qemu-user:./myprog --arg=-v --arg in.txt --kretprobe parse --string-arg 0\n"
     "kpsdk probe --target qemu-system:x86_64 --kernel vmlinuz --initrd initrd.img \\\n"
     "    --kretprobe do_sys_openat2 --string-arg 1 --failed       # failed opens, with file names\n"
     "kpsdk probe --target gdb://localhost:1234 --symbols vmlinux --kprobe do_sys_openat2 --string-arg 1"),
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
