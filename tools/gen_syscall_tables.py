"""Write ``arch_backends/syscall_numbers.py``: every Linux system call of each architecture, by name.

The numbers are the kernel's own, as its uapi headers give them: the ``__NR_*`` macros that
``#include <asm/unistd.h>`` defines for each target, read through that target's cross
compiler (``TRIPLE-gcc -E -dM``, so every ``#if`` of the headers is decided as for a real
program of the arch) and evaluated here (``(__NR_SYSCALL_BASE + 3)``, ``__NR3264_fstat``,
``(__NR_Linux + 278)``).  The headers are Debian 12's: ``linux-libc-dev`` (x86_64) and the
``linux-libc-dev-*-cross`` packages under ``/usr/TRIPLE/include``, **Linux 6.1** (6.1.4; the mips
ones 6.1.8: no call was added within 6.1).  Per table:

============  ===============================  =============================================
table         compiler                         header that holds the numbers
============  ===============================  =============================================
X86_64        x86_64-linux-gnu-gcc             asm/unistd_64.h
I386          i686-linux-gnu-gcc               /usr/i686-linux-gnu/include/asm/unistd_32.h
ARM           arm-linux-gnueabihf-gcc          asm/unistd-eabi.h (EABI) and asm/unistd.h's
                                               ARM private calls at 0xf0000 (``__ARM_NR_*``)
GENERIC64     riscv64-/aarch64-linux-gnu-gcc   asm-generic/unistd.h, the calls both have
RISCV64       riscv64-linux-gnu-gcc            asm-generic/unistd.h with riscv's ``__ARCH_WANT``
                                               set, and riscv_flush_icache
AARCH64       aarch64-linux-gnu-gcc            asm-generic/unistd.h with arm64's set
PPC64         powerpc64-linux-gnu-gcc          asm/unistd_64.h (ppc64le: the same numbers)
MIPS_O32      mips-linux-gnu-gcc               asm/unistd_o32.h (base 4000)
MIPS_N64      mips64el-linux-gnuabi64-gcc      asm/unistd_n64.h (base 5000)
============  ===============================  =============================================

A macro that only renames another call (ARM's ``__NR_sync_file_range2``) is left out, so each
number has one name; the headers' bookkeeping macros (``__NR_syscalls``, the bases) too.
Calls newer than the headers that the Linux layer answers are added from the kernel version
that brought them (:data:`LATER`), each with its source.

Run it again (``python3 tools/gen_syscall_tables.py``) only to move to newer headers: the
output is committed, and nothing builds it at install time; ``--check`` says whether the
committed module is what the installed headers give (tests/test_syscall_tables.py).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "arch_backends" / "syscall_numbers.py"

#: table name -> the cross compiler whose headers give it
COMPILERS: dict[str, str] = {
    "X86_64": "x86_64-linux-gnu-gcc",
    "I386": "i686-linux-gnu-gcc",
    "ARM": "arm-linux-gnueabihf-gcc",
    "RISCV64": "riscv64-linux-gnu-gcc",
    "AARCH64": "aarch64-linux-gnu-gcc",
    "PPC64": "powerpc64-linux-gnu-gcc",
    "PPC64LE": "powerpc64le-linux-gnu-gcc",
    "MIPS_O32": "mips-linux-gnu-gcc",
    "MIPS_N64": "mips64el-linux-gnuabi64-gcc",
}

#: the headers' bookkeeping, not calls
NOT_CALLS = frozenset({"syscalls", "arch_specific_syscall", "Linux", "SYSCALL_BASE", "OABI_SYSCALL_BASE",
                       "SYSCALL_MASK"})

#: calls after Linux 6.1 the Linux layer answers, by table: name -> (number, where it comes from)
LATER: dict[str, dict[str, tuple[int, str]]] = {
    "RISCV64": {"riscv_hwprobe": (258, "Linux 6.4's arch/riscv/include/uapi/asm/unistd.h (arch_specific + 14)")},
}

#: what each table's comment says
TITLES: dict[str, str] = {
    "X86_64": "x86_64 (arch/x86/entry/syscalls/syscall_64.tbl: the 64-bit ABI's calls)",
    "I386": "i386 (arch/x86/entry/syscalls/syscall_32.tbl)",
    "ARM": "arm EABI (arch/arm/tools/syscall.tbl), with the ARM private calls at 0xf0000",
    "GENERIC64": "the generic table (include/uapi/asm-generic/unistd.h, a 64-bit arch): the calls riscv64 and "
                 "aarch64 share",
    "RISCV64": "riscv64: the generic table with riscv's own",
    "AARCH64": "aarch64: the generic table with arm64's own (__ARCH_WANT_RENAMEAT)",
    "PPC64": "ppc64 and ppc64le (arch/powerpc/kernel/syscalls/syscall.tbl, 64-bit)",
    "MIPS_O32": "mips o32 (arch/mips/kernel/syscalls/syscall_o32.tbl, numbers from 4000)",
    "MIPS_N64": "mips64 n64 (arch/mips/kernel/syscalls/syscall_n64.tbl, numbers from 5000)",
}

DEFINE = re.compile(r"#define (__(?:ARM_)?NR\w*) (.+)")
NAME = re.compile(r"__(?:ARM_)?NR\w*")


def macros(compiler: str) -> dict[str, str]:
    """The ``__NR*`` macros ``<asm/unistd.h>`` defines for ``compiler``'s target."""
    done = subprocess.run([compiler, "-E", "-dM", "-"], input="#include <asm/unistd.h>\n", text=True,
                          capture_output=True, check=True)
    return {m[1]: m[2].strip() for m in map(DEFINE.fullmatch, done.stdout.splitlines()) if m}


def evaluate(text: str, defined: dict[str, str]) -> int:
    """A macro's value: its names replaced by theirs, then the sum evaluated."""
    for _ in range(8):
        expanded = NAME.sub(lambda m: f"({defined[m[0]]})", text)
        if expanded == text:
            break
        text = expanded
    return _sum(ast.parse(text, mode="eval").body)


def _sum(node: ast.expr) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        left, right = _sum(node.left), _sum(node.right)
        return left + right if isinstance(node.op, ast.Add) else left - right
    raise ValueError(f"not a sum of numbers: {ast.unparse(node)}")


def table(compiler: str) -> dict[str, int]:
    """Every call of ``compiler``'s target: name -> number, in number order."""
    defined = macros(compiler)
    calls: dict[str, int] = {}
    for macro, value in defined.items():
        name = macro.removeprefix("__ARM_NR_") if macro.startswith("__ARM_NR_") else macro.removeprefix("__NR_")
        if macro.startswith("__NR3264_") or name in NOT_CALLS or name == "BASE":
            continue
        if re.fullmatch(r"__NR_\w+", value) and not value.startswith("__NR3264_"):
            continue  # another call's second name
        calls[name] = evaluate(value, defined)
    by_number: dict[int, str] = {}
    for name, nr in calls.items():
        if nr in by_number:
            raise ValueError(f"{compiler}: {name} and {by_number[nr]} are both {nr}")
        by_number[nr] = name
    return dict(sorted(calls.items(), key=lambda item: item[1]))


def render(name: str, calls: dict[str, int], base: str | None = None, notes: tuple[str, ...] = ()) -> str:
    """``NAME: dict[str, int] = {...}`` wrapped at 120 columns, its title (and ``notes``) above it."""
    items = [f'"{call}": {nr:#x}' if nr >= 0xf0000 else f'"{call}": {nr}' for call, nr in calls.items()]
    if base is not None:
        items.insert(0, f"**{base}")
    lines, line = [], "   "
    for item in items:
        if len(line) + len(item) + 2 > 119:
            lines.append(line.rstrip())
            line = "   "
        line += f" {item},"
    lines.append(line.rstrip())
    title = "".join(f"#: {text}\n" for text in (TITLES[name], *notes))
    return f"{title}{name}: dict[str, int] = {{\n" + "\n".join(lines) + "\n}\n"


def generate() -> str:
    """The module's text, from the installed headers."""
    tables = {name: table(cc) for name, cc in COMPILERS.items()}
    for name, extra in LATER.items():
        for call, (nr, _) in extra.items():
            tables[name][call] = nr
    if tables.pop("PPC64LE") != tables["PPC64"]:
        raise SystemExit("ppc64 and ppc64le differ: give each its table")
    riscv, arm64 = tables.pop("RISCV64"), tables.pop("AARCH64")
    generic = {call: nr for call, nr in riscv.items() if arm64.get(call) == nr}
    out = ['"""Every Linux system call of each architecture, by name: written by tools/gen_syscall_tables.py\n'
           "from the kernel's uapi headers (Linux 6.1, Debian 12's cross packages); do not edit.\n\n"
           "Which header each table comes from, and how to write it anew, is that script's docstring.  What\n"
           "the Linux layer on Unicorn emulates is :mod:`kpsdk.arch_backends.syscall_tables`; these name every\n"
           'number in warnings and ``--strace``.\n"""\n\nfrom __future__ import annotations\n']
    for name in ("X86_64", "I386", "ARM"):
        out.append(render(name, tables[name]))
    out.append(render("GENERIC64", generic))
    for name, own in (("RISCV64", riscv), ("AARCH64", arm64)):
        its = dict(sorted(((call, nr) for call, nr in own.items() if call not in generic), key=lambda i: i[1]))
        later = tuple(f"{call}: {LATER[name][call][1]}" for call in its if call in LATER.get(name, {}))
        out.append(render(name, its, base="GENERIC64", notes=later))
    out.append(render("PPC64", tables["PPC64"]))
    out.append("#: ppc64le: the same numbers as ppc64\nPPC64LE = PPC64\n")
    for name in ("MIPS_O32", "MIPS_N64"):
        out.append(render(name, tables[name]))
    return "\n".join(out)


def main(argv: list[str]) -> int:
    """Write the module; with ``--check``, only say whether the committed one is what the
    headers give (the test suite runs that)."""
    text = generate()
    if "--check" in argv:
        if OUT.read_text() != text:
            print(f"{OUT} is not what tools/gen_syscall_tables.py writes from these headers", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
