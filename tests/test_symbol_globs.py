"""Symbol globs and did-you-mean (``kpsdk list --functions``, ``kpsdk probe --kprobe 'GLOB'``).

Ground truth: the ELF's own symbol table read with pyelftools, and for a kernel the guest's
``/proc/kallsyms`` (Debian's kernel booted with nokaslr, so the addresses are the image's).
"""

from __future__ import annotations

import fnmatch
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from typer.testing import CliRunner

from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.fixtures import kernel
from kpsdk.kernel.kallsyms import load_kernel_symbols

runner = CliRunner(env={"COLUMNS": "200"})
ROW = re.compile(r"^│ (\S+)\s+│ (0x[0-9a-f]+) │")


def elf_functions(path: Path) -> dict[str, int]:
    with open(path, "rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: s["st_value"] for s in symtab.iter_symbols() if s["st_info"]["type"] == "STT_FUNC"}


def listed(output: str) -> dict[str, int]:
    return {m[1]: int(m[2], 16) for line in output.splitlines() if (m := ROW.match(line))}


@pytest.mark.parametrize("pattern", ["f*", "*_long", "s?b", "[af]*", "*"])
def test_list_functions_of_an_elf(pattern: str) -> None:
    path = fixtures.path("x86_64")
    truth = {n: a for n, a in elf_functions(path).items() if fnmatch.fnmatchcase(n, pattern)}
    result = runner.invoke(app, ["list", "x86_64", "--functions", pattern])
    assert result.exit_code == 0, result.output
    assert listed(result.stdout) == truth and truth


def test_probe_glob_puts_a_kprobe_on_each_match() -> None:
    truth = sorted(n for n in elf_functions(fixtures.path("x86_64")) if fnmatch.fnmatchcase(n, "s*"))
    result = runner.invoke(app, ["probe", "x86_64", "--kprobe", "s*", "--regs", "rdi"])
    assert result.exit_code == 0, result.output
    line = next(ln for ln in result.stdout.splitlines() if " probe(s) on x86_64: " in ln)
    assert sorted(re.findall(r"k (\w+)\+0x0", line)) == truth
    hits = re.findall(r"^\[\d+\] (\w+)\+0x0 ", result.stdout, re.M)
    assert set(hits) == set(truth)  # the program calls each of them


def test_unknown_symbols_suggest_the_close_ones() -> None:
    result = runner.invoke(app, ["probe", "x86_64", "--kprobe", "fcat"])
    assert result.exit_code == 1 and "did you mean 'fact'?" in result.stderr
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:x sbu"])
    assert result.exit_code == 1 and "did you mean 'sub'" in result.stderr
    result = runner.invoke(app, ["probe", "x86_64", "--kprobe", "zzz*"])
    assert result.exit_code == 1 and "no function in the target matches" in result.stderr


@pytest.mark.kernel
def test_kernel_functions_and_suggestions_match_the_guests_kallsyms(
        debian_kernel: Path, kernel_initramfs: Callable[..., Path], tmp_path: Path) -> None:
    """``kpsdk list vmlinuz --functions 'vfs_rea*'`` lists what the running kernel's /proc/kallsyms
    has (text symbols), at the same addresses; a kallsyms dump lists the same; suggestions for
    a typo over all 90k+ names come back in well under a second."""
    workload = "grep -E ' [Tt] vfs_rea' /proc/kallsyms | sed 's/^/KALLSYMS /'"
    result = kernel.boot(debian_kernel, kernel_initramfs(workload=workload), timeout=200)
    guest = {}
    for line in result.console.splitlines():
        if line.startswith("KALLSYMS "):
            addr, _kind, name = line.split()[1:4]
            guest[name] = int(addr, 16)
    assert "vfs_read" in guest, result.console[-2000:]
    out = runner.invoke(app, ["list", str(debian_kernel), "--functions", "vfs_rea*"])
    assert out.exit_code == 0, out.output
    assert listed(out.stdout) == guest
    dump = tmp_path / "kallsyms"
    dump.write_text("".join(f"{a:016x} T {n}\n" for n, a in guest.items()))
    out = runner.invoke(app, ["list", str(dump), "--functions", "vfs_read*"])
    assert out.exit_code == 0 and listed(out.stdout) == {n: a for n, a in guest.items() if n.startswith("vfs_read")}

    table = load_kernel_symbols(debian_kernel)
    assert len(table) > 50_000
    start = time.perf_counter()
    suggestions = [table.suggest(typo) for typo in ("do_sys_opnat2", "vfs_raed", "kernle_clone")]
    assert time.perf_counter() - start < 1.5  # three lookups over the whole table
    assert [s[0] for s in suggestions] == ["do_sys_openat2", "vfs_read", "kernel_clone"]
