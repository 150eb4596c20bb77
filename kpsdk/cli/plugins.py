"""``kpsdk plugins``: the plugins loaded, and what each provides.

Everything beyond kpsdk's core is a plugin, kpsdk's own included, so this is
also the list of architectures, target kinds and probe types this install has
(after ``-p NAME`` / ``-p no:NAME``).
"""

from __future__ import annotations

import os

from rich.markup import escape
from rich.text import Text

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.registry import AUTOLOAD_ENV


def cmd_plugins() -> None:
    """The plugins loaded, and what they provide.

    Everything beyond kpsdk's core is a plugin: architecture backends, target
    kinds (the scheme of kpsdk.open("elf:PATH")), probe types (a type named
    kprobe gives sessions register_kprobe, s.kprobe(...) and kpsdk.Kprobe),
    CLI commands and kpsdk trace's output formats.  Third-party packages provide them through the 'kpsdk'
    entry-point group, exactly as kpsdk's own do.
    """
    from rich.table import Table

    reg = kpsdk.get_registry()
    con = console()
    auto = f"off ({AUTOLOAD_ENV} is set)" if os.environ.get(AUTOLOAD_ENV) else "on"
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
    t = Table(title="trace output formats (kpsdk trace --output NAME)", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("help")
    for fmt in reg.trace_formats.values():
        t.add_row(escape(fmt.name), escape(fmt.help))
    con.print(t)
    t = Table(title="architectures", title_justify="left")
    t.add_column("name", style="bold cyan")
    t.add_column("ELF machine")
    for arch in reg.archs:
        t.add_row(escape(arch.name), escape(f"{arch.elf_machine}, {arch.elf_class}-bit {arch.endian}"))
    con.print(t)


COMMAND = Command("plugins", cmd_plugins, "kpsdk plugins\nkpsdk -p no:kprobes plugins")
