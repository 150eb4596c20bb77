"""IFUNC symbols in libraries under qemu-user (kpsdk/binfmt/ifunc.py): resolved to the loader's choice.

Ground truth: tests/libprogs/ifunc.c prints where strlen is (taking its address makes the
loader resolve the IFUNC for the program) and the strings it passes to strlen; a probe on
``libc.so.6:strlen`` must sit at that address and see those strings, in order.
"""

from __future__ import annotations

import errno
import gc
import re
import subprocess
from pathlib import Path

import pytest

import kpsdk
from tests.conftest import require_tool
from tests.test_libraries import COMPILERS, LIBC, has_irelative_slot, libc_of, open_user, report

HERE = Path(__file__).parent / "libprogs"


def build(arch: str, tmp_path: Path) -> Path:
    cc, package, flags = COMPILERS[arch]
    prog = tmp_path / f"ifunc-{arch}"
    cmd = [require_tool(cc, package), *flags, "-O0", "-fno-builtin", "-o", str(prog), str(HERE / "ifunc.c")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return prog


@pytest.mark.parametrize("arch", ["x86_64", "ppc64", "aarch64"])
def test_strlen_is_the_implementation_the_loader_chose(arch: str, tmp_path: Path) -> None:
    prog = build(arch, tmp_path)
    s = open_user(prog, arch)
    try:
        main = s.target.mapped_files()[0]
        libc = libc_of(s)
        assert has_irelative_slot(libc.path, "strlen")
        pending: list[str] = []
        words: list[tuple[str, int]] = []

        def entry(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> int:
            pending.append(s.read_string(regs.arg(0)))
            return 0

        def returned(ri: kpsdk.KretprobeInstance, regs: kpsdk.PtRegs) -> None:
            word = pending.pop()
            if main.executable_at(ri.ret_addr):  # the program's own calls, not libc's
                words.append((word, regs.return_value))

        up = kpsdk.Uretprobe.parse(f"{LIBC}:strlen", entry_handler=entry, handler=returned)
        s.register_uretprobe(up)
        at = libc.bias + libc.image.offset_to_vaddr(up.offset)  # type: ignore[operator]
        assert s.run(timeout=120) == 0
        out = s.console
    finally:
        s.close()
    assert words == [(" ".join(rest[1:]), int(rest[0])) for rest in report(out, "strlen")]
    assert len(words) == 3
    pointer = int(report(out, "strlen-at")[0][0], 16)
    if arch == "x86_64":
        assert at == pointer
    # ppc64 ELFv1: the pointer is a function descriptor; the strings above show the calls arrive


def test_an_ifunc_without_a_session_is_eopnotsupp() -> None:
    gc.collect()  # sessions earlier tests dropped without close() are gone, not open ones mapping libc
    with pytest.raises(kpsdk.KprobeError) as e:
        kpsdk.Uprobe.parse("/lib/x86_64-linux-gnu/libc.so.6:strlen")
    assert e.value.errno == errno.EOPNOTSUPP and "open a session that maps the file" in str(e.value)


def test_an_ifunc_libc_never_calls_itself_is_eopnotsupp(tmp_path: Path) -> None:
    """i386's libc has no IRELATIVE slot for strlen (checked with pyelftools): what the loader
    chose cannot be read, and the refusal says so."""
    prog = build("i386", tmp_path)
    s = open_user(prog, "i386")
    try:
        assert not has_irelative_slot(libc_of(s).path, "strlen")
        with pytest.raises(kpsdk.KprobeError) as e:
            kpsdk.Uprobe.parse(f"{LIBC}:strlen")
        assert e.value.errno == errno.EOPNOTSUPP and "no IRELATIVE GOT slot" in str(e.value)
    finally:
        s.close()


def test_trace_line_on_an_ifunc(tmp_path: Path) -> None:
    """``p libc.so.6:strlen``: kpsdk trace's check before the run lets the IFUNC through, the
    session resolves it; the program's strings are among the records, in order."""
    from typer.testing import CliRunner

    from kpsdk.cli import app

    prog = build("x86_64", tmp_path)
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    result = CliRunner().invoke(app, ["trace", f"qemu-user:{prog}", "--no-prefix", "--console",
                                      "-e", f"p:s {LIBC}:strlen s=+0(%di):string"])
    assert result.exit_code == 0, result.output
    seen = [line.split(' s="', 1)[1][:-1] for line in result.stdout.splitlines() if line.startswith("s:")]
    words = iter(seen)
    passed = [" ".join(rest[1:]) for rest in report(result.stderr, "strlen")]
    assert len(passed) == 3 and all(any(w == word for w in words) for word in passed), (passed, seen)


def test_cli_traces_an_ifunc_on_unicorn_at_the_loaders_choice(tmp_path: Path) -> None:
    """``p libc.so.6:strlen`` on Unicorn, the embedded default (issue 36, item 18: EOPNOTSUPP): the
    run goes to the program's entry point, where the loader has filled libc's IRELATIVE slots,
    and the probe is at what it chose: the address the program itself sees for strlen, with the
    program's strings; ``kpsdk probe --uprobe`` likewise."""
    from tests.test_cli_libraries import cli

    prog = build("x86_64", tmp_path)
    code, out, err = cli("trace", str(prog), "--no-prefix", "--console", "-e", f"p:s {LIBC}:strlen s=+0(%di):string")
    assert code == 0, err
    records = [line for line in out.splitlines() if line.startswith("s:")]
    pointer = int(report(err, "strlen-at")[0][0], 16)
    assert records and all(line.startswith(f"s: ({pointer:#x}) ") for line in records), (records[:3], pointer)
    seen = iter(line.split(' s="', 1)[1][:-1] for line in records)
    passed = [" ".join(rest[1:]) for rest in report(err, "strlen")]
    assert len(passed) == 3 and all(any(w == word for w in seen) for word in passed)
    code, out, err = cli("probe", str(prog), "--uprobe", f"{LIBC}:strlen")
    assert code == 0, err
    assert re.search(r"u libc\.so\.6:strlen: [1-9]\d* hits", out), out
