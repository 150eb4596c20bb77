"""``kpsdk archs``: the architectures kpsdk knows, and how it probes each.

A table of data the arch backends declare (breakpoint encodings, argument
registers) and of the engines found on this machine; nothing runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.text import Text

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet


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


#: the features ``kpsdk archs`` reports per arch, by target: each "yes" (with a detail) or why not
FEATURES = {
    "Unicorn": ("kprobes", "boost", "detours", "watchpoints", "linux", "signals"),
    "live": ("qemu-user", "kernel", "tcg-plugin", "current"),
    "binaries": ("dwarf",),
}


def features(arch: Arch) -> dict[str, str]:
    """Each feature of :data:`FEATURES` on ``arch``: "yes" (what it uses) from the backend's data,
    else the backend's own reason (``Arch.limits``) or "no"."""
    from kpsdk.targets.unicorn.linux.sigframes import ARCHES as FRAMES

    unicorn = arch.unicorn is not None and not arch.unicorn_unsupported
    linux = arch.syscalls.linux if arch.syscalls is not None else None
    tasks = arch.kernel_tasks
    found: dict[str, str | None] = {
        "kprobes": "breakpoint and hook" if unicorn else None,
        "boost": "out of line" if unicorn and arch.out_of_line is not None else None,
        "detours": "entry and return code" if unicorn and arch.detours is not None else None,
        "watchpoints": (f"{arch.watch.slots} slots" + (f" + {arch.watch.exec_slots} x" if arch.watch.exec_slots
                                                       else "")) if arch.watch is not None else None,
        "linux": "system calls" if unicorn and linux is not None else None,
        "signals": "frames" if unicorn and linux is not None and arch.name in FRAMES else None,
        "qemu-user": arch.qemu_user if arch.qemu_user else None,
        "kernel": (f"Debian {arch.debian.kernel}" if arch.debian is not None else
                   f"bare metal ({arch.qemu_system.machine or 'default board'})" if arch.qemu_system is not None
                   else None),
        "tcg-plugin": f"{len(arch.plugin_registers)} registers" if arch.plugin_registers and arch.qemu_system
        else None,
        "current": ("BTF" + (", or the kernel's code" if tasks.code is not None else "")) if tasks is not None
        else None,
        "dwarf": "registers" if arch.dwarf is not None else None,
    }
    limits = dict(arch.limits)
    return {name: limits.get(name, f"yes: {value}" if value is not None else "no")
            for group in FEATURES.values() for name in (group) for value in (found[name],)}


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
    from rich.table import Table

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
    feats = Table(title="features (yes, or why not)", title_justify="left", show_lines=True)
    feats.add_column("arch")
    for group in FEATURES:
        feats.add_column(group)
    for arch in reg.archs:
        have = features(arch)
        cells = ["\n".join(f"{name}: {'[green]' if have[name].startswith('yes') else '[yellow]'}"
                           f"{escape(have[name])}[/]" for name in group) for group in FEATURES.values()]
        feats.add_row(f"[bold cyan]{arch.name}[/]", *cells)
    con.print(feats)


COMMAND = Command("archs", cmd_archs, "kpsdk archs")
