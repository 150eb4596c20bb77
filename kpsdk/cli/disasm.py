"""``kpsdk disasm``: a function's instructions, each with how kpsdk would probe it.

Decodes the file's bytes with capstone and asks the arch backend's
``classify``, the same question registration asks, so what it prints is what
``register_kprobe`` would do there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.cli.options import ElfArg
from kpsdk.cli.parsing import elf_path
from kpsdk.errors import KpsdkError

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage


def _image_bytes(image: ElfImage, addr: int, size: int) -> bytes:
    for seg in image.segments:
        if seg.vaddr <= addr < seg.vaddr + len(seg.data):
            return seg.data[addr - seg.vaddr: addr - seg.vaddr + size]
    raise KpsdkError(f"{addr:#x} is not in the file contents of {image.path} (not code?)")


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
    from kpsdk.binfmt.elfimage import load_elf

    image = load_elf(elf_path(elf))
    arch = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    start = image.symbols.resolve(sym)
    func = image.symbols.containing(start)
    if func is None:
        raise KpsdkError(f"{sym} ({start:#x}) is not inside a symbol of {image.path.name}")
    iset = arch.iset(func.iset or None)
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


COMMAND = Command("disasm", cmd_disasm,
                  "kpsdk disasm x86_64 check\nkpsdk disasm thumb add\nkpsdk disasm ppc64 fact -n 8")
