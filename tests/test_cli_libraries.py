"""``kpsdk probe`` and ``kpsdk trace`` on Unicorn look a name up where qemu-user does (kpsdk/cli/libraries.py).

A qemu-user session opens at the program's entry point, its libraries loaded; a Unicorn one
at the loader's.  A probe only the libraries can answer makes the command run the program to
its entry first: the same name finds the same function on both targets (issue 36, item 17),
and a name the file lacks is an ENOENT that says what may have been meant.  Ground truth: the
program of tests/test_ifunc.py (tests/libprogs/ifunc.c), dynamically linked, and qemu-user.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.test_ifunc import build


def cli(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of a kpsdk command."""
    from typer.testing import CliRunner

    from kpsdk.cli import app

    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def flat(text: str) -> str:
    """An error's text unwrapped from its box."""
    return " ".join(text.replace("│", " ").split())


def test_cli_finds_a_bare_name_in_the_programs_libraries_on_unicorn_as_on_qemu_user(tmp_path: Path) -> None:
    """``--kprobe write``: the program only imports it; it is looked up in the program, then its
    libraries, on Unicorn as on qemu-user: the same function, the same one call (it was ENOENT)."""
    prog = build("x86_64", tmp_path)
    code, out, err = cli("probe", str(prog), "--kprobe", "write", "--kretprobe", "write")
    assert code == 0, err
    summary = [line for line in out.splitlines() if line.startswith(("k ", "r "))]
    assert len(summary) == 2 and "1 hits" in summary[0] and "1 returns" in summary[1], summary
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    code, live, err = cli("probe", f"qemu-user:{prog}", "--kprobe", "write", "--kretprobe", "write")
    assert code == 0, err
    assert [line for line in live.splitlines() if line.startswith(("k ", "r "))] == summary


def test_an_unknown_file_symbol_names_what_the_user_may_have_meant(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``--uprobe PROG:write`` (the program has no write, only a PLT stub calling libc's): ENOENT
    naming ``libc.so.6:write`` and ``PROG:write@plt``, in kpsdk probe and kpsdk trace alike."""
    monkeypatch.chdir(tmp_path)
    prog = f"./{build('x86_64', Path('.')).name}"  # short: the error shows it whole
    for args in (("probe", str(prog), "--uprobe", f"{prog}:write"),
                 ("trace", str(prog), "-e", f"p:w {prog}:write")):
        code, _, err = cli(*args)
        err = flat(err)
        assert code == 1, err
        assert "unknown symbol 'write'" in err
        assert "'libc.so.6:write' (a library the program loads)" in err, err
        assert f"'{prog}:write@plt' (the file's PLT stub that calls it)" in err, err
    code, _, err = cli("probe", str(prog), "--uprobe", f"{prog}:no_such_function")
    err = flat(err)
    assert code == 1 and "unknown symbol 'no_such_function'" in err and "it may be" not in err, err
