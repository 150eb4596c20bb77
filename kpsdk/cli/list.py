"""``kpsdk list``: the functions of an ELF file or a kernel, i.e. where a kprobe can go.

Reads the symbol table only: nothing runs, no Unicorn is needed and every
architecture works.  A file that is not an ELF is read as a kernel's symbols
(``vmlinuz``'s own kallsyms table, ``/proc/kallsyms`` text, ``System.map``), as
``kpsdk probe --symbols`` reads it.  ``--functions PATTERN`` keeps the names that
match a shell glob, as ``perf probe --funcs`` and ``bpftrace -l`` filter.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

import kpsdk
from kpsdk.binfmt.symbols import shown_name
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.cli.options import ElfArg, NoprobeOpt
from kpsdk.cli.parsing import elf_path, split_commas
from kpsdk.errors import UnknownNameError, shown


def cmd_list(
    elf: ElfArg,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include data objects (STT_OBJECT) too.")] = False,
    noprobe: NoprobeOpt = None,
    functions: Annotated[str | None, typer.Option(
        "--functions", "-f", metavar="PATTERN", show_default=False,
        help="Only the names matching this shell glob ('vfs_*', 'do_sys_open*', '*_read'); case-sensitive.")] = None,
    vars_at: Annotated[str | None, typer.Option(
        "--vars-at", "-V", metavar="POINT", show_default=False, rich_help_panel=SOURCE_PANEL,
        help="The variables a probe can read at a source probe point (FUNC, FUNC:RELLINE, FILE.c:LINE, "
             "FUNC@FILE, 'FUNC;PATTERN'), at each place it resolves to, as perf probe -V prints them.")] = None,
    lines: Annotated[str | None, typer.Option(
        "--lines", "-L", metavar="FUNC", show_default=False, rich_help_panel=SOURCE_PANEL,
        help="FUNC's source with its probeable lines numbered from the declaration (FUNC:N probes line N), "
             "as perf probe -L prints it (needs the source file: --source-dir).")] = None,
    globals_: Annotated[bool, typer.Option(
        "--vars", rich_help_panel=SOURCE_PANEL,
        help="The global variables (file scope, with a static address), with their types.")] = False,
    debug_dir: Annotated[list[str] | None, typer.Option(
        "--debug-dir", metavar="DIR", rich_help_panel=SOURCE_PANEL,
        help="Where a separate debug file is looked for first (DIR/.build-id/xx/yyyy.debug, the "
             ".gnu_debuglink name), before /usr/lib/debug. Repeatable.")] = None,
    source_dir: Annotated[list[str] | None, typer.Option(
        "--source-dir", metavar="DIR", rich_help_panel=SOURCE_PANEL,
        help="Where the sources are (for -L and 'FUNC;PATTERN'), tried before the paths the debug "
             "information records. Repeatable.")] = None,
) -> None:
    """The functions in an ELF file or a kernel: what you can put a kprobe on.

    Reads the symbol tables only, .symtab and .dynsym (the table column says
    which; a stripped program or a shared library has only .dynsym): nothing
    runs, no Unicorn needed, any architecture.  An IFUNC symbol (glibc's strlen
    on x86) is the resolver the loader calls to pick an implementation.  PLT
    stubs are listed as SYM@plt, as gdb and perf name them, with their table
    (.plt, .plt.sec, ppc64's .glink).  A
    probe goes on SYM (the function's first instruction) or SYM+OFF (any
    instruction boundary inside it, see kpsdk disasm).  iset names the
    instruction set of a function not in the architecture's first one (ARM's
    thumb: ELF symbol value bit 0).  Names given with --noprobe
    are marked as kpsdk would refuse them (EINVAL), as the kernel does for
    NOKPROBE_SYMBOL functions.  A kernel (vmlinuz, /proc/kallsyms text,
    System.map) lists its symbols the same way; --functions 'vfs_*' keeps the
    names matching a shell glob.
    """
    from rich.table import Table

    from kpsdk.binfmt.elfimage import load_elf
    from kpsdk.errors import ImageFormatError

    path = elf_path(elf)
    if vars_at is not None or lines is not None or globals_:
        from kpsdk.cli.listsource import list_source

        list_source(path, vars_at, lines, globals_, debug_dir or [], source_dir or [])
        return
    pattern = check_pattern(functions) if functions is not None else None
    try:
        image = load_elf(path)
    except ImageFormatError as exc:
        if "not an ELF file" not in str(exc):
            raise
        _list_kernel(path, all_, pattern)  # vmlinuz, kallsyms text, System.map
        return
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
    table.add_column("iset")
    table.add_column("table")
    table.add_column("probe")
    count = 0
    for sym in image.symbols:
        if sym.kind == "object" and not all_:
            continue
        if pattern is not None and not pattern.match(sym.name):
            continue
        count += 1
        if sym.kind == "object":
            probe = "[dim]no (data)[/]"
        elif sym.kind == "ifunc":
            probe = "[yellow]resolver (IFUNC)[/]"
        elif sym.name in blocked:
            probe = "[red]no (--noprobe)[/]"
        else:
            probe = "[green]yes[/]"
        row = [escape(shown_name(sym.name)), f"{sym.address:#0{width + 2}x}", str(sym.size)]
        if all_:
            row.append(sym.kind)
        row += [sym.iset, sym.source, probe]
        table.add_row(*row)
    con = console()
    con.print(header, soft_wrap=True)
    con.print(table)
    unknown = blocked - {s.name for s in image.symbols}
    if unknown:
        con.print(Text(f"--noprobe names not in the file: {', '.join(sorted(unknown))}", style="yellow"))
    con.print(Text(f"{count} symbols.  Next: kpsdk disasm {elf} SYM   or   kpsdk probe {elf} --kprobe SYM",
                   style="dim"))


SOURCE_PANEL = "Source (DWARF: perf probe -V/-L)"


def check_pattern(text: str) -> re.Pattern[str]:
    """A ``--functions`` glob as a compiled pattern; a usage error when it cannot name anything."""
    if not text or "\0" in text or len(text) > MAX_PATTERN:
        raise typer.BadParameter(f"{shown(text)}: want a shell glob of 1 to {MAX_PATTERN} characters, "
                                 "such as 'vfs_*'", param_hint="--functions")
    return re.compile(fnmatch.translate(text))


def _list_kernel(path: Path, all_: bool, pattern: re.Pattern[str] | None) -> None:
    """A kernel's symbols (image, kallsyms text, System.map): name, address, size (to the next symbol)."""
    from rich.table import Table

    from kpsdk.kernel.kallsyms import load_kernel_symbols

    table_syms = load_kernel_symbols(path)
    con = console()
    table = Table()
    table.add_column("name", style="bold")
    table.add_column("address", justify="right")
    table.add_column("size", justify="right")
    if all_:
        table.add_column("kind")
    count = 0
    for sym in table_syms:
        if (sym.kind != "func" and not all_) or (pattern is not None and not pattern.match(sym.name)):
            continue
        count += 1
        row = [escape(shown_name(sym.name)), f"{sym.address:#018x}", str(sym.size)]
        table.add_row(*(row + [sym.kind] if all_ else row))
    con.print(Text.assemble((path.name, "bold"), f": a kernel's symbols, {len(table_syms)} in all "
                            "(sizes: to the next symbol, as kallsyms has none)"), soft_wrap=True)
    con.print(table)
    con.print(Text(f"{count} symbols.  Next: kpsdk probe --target qemu-system:ARCH --kernel {path.name} "
                   "--kprobe SYM", style="dim"), soft_wrap=True)


#: the longest --functions pattern: longer than any symbol name is meaningless
MAX_PATTERN = 512

COMMAND = Command("list", cmd_list,
                  "kpsdk list x86_64\nkpsdk list ./prog.elf --all\nkpsdk list arm --noprobe add,sub\n"
                  "kpsdk list vmlinuz --functions 'vfs_*'      # a kernel image, kallsyms text or System.map\n"
                  "kpsdk list ./myprog -V parse_line:12        # what a probe there can read, as perf probe -V\n"
                  "kpsdk list ./myprog -L parse_line           # the lines FUNC:N can probe, as perf probe -L\n"
                  "kpsdk list ./myprog --vars                  # the global variables and their types\n"
                  "kpsdk list vmlinux -V do_sys_openat2 --debug-dir /usr/lib/debug")
