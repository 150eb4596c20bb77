"""``kpsdk list``: the functions of an ELF file, i.e. where a kprobe can go.

Reads the symbol table only: nothing runs, no Unicorn is needed and every
architecture works.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.text import Text

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.cli.options import ElfArg, NoprobeOpt
from kpsdk.cli.parsing import elf_path, split_commas
from kpsdk.errors import UnknownNameError


def cmd_list(
    elf: ElfArg,
    all_: Annotated[bool, typer.Option("--all", "-a", help="Include data objects (STT_OBJECT) too.")] = False,
    noprobe: NoprobeOpt = None,
) -> None:
    """The functions in an ELF file: what you can put a kprobe on.

    Reads the symbol tables only, .symtab and .dynsym (the table column says
    which; a stripped program or a shared library has only .dynsym): nothing
    runs, no Unicorn needed, any architecture.  An IFUNC symbol (glibc's strlen
    on x86) is the resolver the loader calls to pick an implementation.  A
    probe goes on SYM (the function's first instruction) or SYM+OFF (any
    instruction boundary inside it, see kpsdk disasm).  iset names the
    instruction set of a function not in the architecture's first one (ARM's
    thumb: ELF symbol value bit 0).  Names given with --noprobe
    are marked as kpsdk would refuse them (EINVAL), as the kernel does for
    NOKPROBE_SYMBOL functions.
    """
    from rich.table import Table

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
    table.add_column("iset")
    table.add_column("table")
    table.add_column("probe")
    count = 0
    for sym in image.symbols:
        if sym.kind == "object" and not all_:
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
        row = [escape(sym.name), f"{sym.address:#0{width + 2}x}", str(sym.size)]
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


COMMAND = Command("list", cmd_list,
                  "kpsdk list x86_64\nkpsdk list ./prog.elf --all\nkpsdk list arm --noprobe add,sub")
