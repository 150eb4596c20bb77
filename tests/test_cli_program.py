"""A program run from the command line as strace and ltrace run it (issue 33): ``kpsdk probe
[OPTIONS] -- PROG ARGS...`` and ``kpsdk trace [OPTIONS] -- PROG ARGS...``, in the caller's
world, for as long as it takes.

Each test compares what the program does under kpsdk with what it does run natively (its
output, the files it writes), or with what a usage error must say, before anything starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.cli.command import ProgramWords, program_words
from tests.cliwalk import app_commands
from tests.conftest import fuzz_examples

runner = CliRunner()
#: a probe each command puts on a dynamically linked host program (glibc's write)
PROBES = {"probe": ["--uprobe", "libc.so.6:write"], "trace": ["-e", "p:w libc.so.6:write n=$arg3", "--console"]}
ECHO = "/bin/echo"


def program_output(command: str, result) -> str:
    """What the program printed: ``kpsdk probe``'s "program output" section, ``kpsdk trace
    --console``'s stderr."""
    if command == "trace":
        return str(result.stderr)
    out = result.stdout
    start = out.index("program output")
    body = out[out.index("\n", start) + 1:]
    return body[:body.index("exit status")]


def native(*argv: str, cwd: Path | None = None) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True, cwd=cwd).stdout


# -- -- PROG ARGS --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["probe", "trace"])
def test_the_words_after_dashes_are_the_program_and_its_arguments(command: str) -> None:
    """Every word after ``-- PROG`` reaches the program as it is: options of kpsdk's (``--kprobe``,
    ``--timeout``), words like options (``-la``, ``--``) and a shell's characters, none read."""
    args = ["hi", "-la", "--kprobe", "there", "--timeout", "0", "--", "$(id)", "-n"]
    result = runner.invoke(app, [command, *PROBES[command], "--", ECHO, *args])
    assert result.exit_code == 0, result.output
    assert program_output(command, result) == native(ECHO, *args)


@pytest.mark.parametrize("command", ["probe", "trace"])
def test_target_before_the_dashes_takes_the_words_after_as_its_arguments(command: str) -> None:
    result = runner.invoke(app, [command, ECHO, *PROBES[command], "--", "-e", "a\\x41b"])
    assert result.exit_code == 0, result.output
    assert program_output(command, result) == native(ECHO, "-e", "a\\x41b")


def test_the_program_runs_in_the_callers_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host-arch program sees the caller's working directory and environment, as it would
    run from the shell."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KPSDK_TEST_WORD", "a b -c")
    pwd = runner.invoke(app, ["probe", *PROBES["probe"], "--", "/bin/pwd"])
    assert pwd.exit_code == 0, pwd.output
    assert program_output("probe", pwd) == f"{tmp_path}\n"
    env = runner.invoke(app, ["probe", *PROBES["probe"], "--", "/usr/bin/env"])
    assert env.exit_code == 0, env.output
    assert "KPSDK_TEST_WORD=a b -c\n" in program_output("probe", env)
    assert sorted(program_output("probe", env).splitlines()) == sorted(f"{k}={v}" for k, v in os.environ.items())


@pytest.mark.parametrize("command", ["probe", "trace"])
@pytest.mark.parametrize(("argv", "said"), [
    (["--arg", "x", "--", ECHO, "y"], "given twice"),                      # two ways at once
    (["--", "qemu-system:x86_64", "y"], "-- PROG ARGS goes with"),          # a kernel takes no arguments
    (["--", "pid:1", "y"], "-- PROG ARGS goes with"),
    ([ECHO, "-la"], "'-la': no such option"),                              # before --: an unknown option
    ([ECHO, "y"], "a program's arguments go after it, -- PROG ARGS"),
])
def test_program_arguments_in_the_wrong_place_are_usage_errors(command: str, argv: list[str], said: str) -> None:
    result = runner.invoke(app, [command, *PROBES[command], *argv])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.replace("│", " ").split())


def test_the_usage_line_shows_the_program_last() -> None:
    for command in ("probe", "trace"):
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0
        assert "[TARGET] [-- PROG [ARG]...]" in result.stdout, command


# hypothesis: the words after -- are the program's, whatever they are and whatever came before

WORD = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=12)
#: options of kpsdk probe as a user writes them before --, values that look like options included
BEFORE = st.lists(st.sampled_from([
    ["--kprobe", "main"], ["-k", "main"], ["-kmain"], ["--arg", "--"], ["--arg=--"], ["--regs", "-la"],
    ["--timeout", "3"], ["--post"], ["--no-optimize"], ["--strace"], ["--sysroot", "/"], ["--call", "add"],
    ["--string-arg", "1"], ["--noprobe", "--"],
]), max_size=4).map(lambda groups: [w for g in groups for w in g])


def _parsed(argv: list[str]) -> tuple[dict[str, object], list[str], ProgramWords | None]:
    """``kpsdk probe ARGV`` as click parses it, nothing run: its values, its words left before
    ``--``, what followed ``--``."""
    command = app_commands()["probe"]
    with command.make_context("probe", list(argv)) as ctx:
        return dict(ctx.params), list(ctx.args), program_words(ctx)


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(before=BEFORE, target_first=st.booleans(), prog=WORD.filter(bool), args=st.lists(WORD, max_size=6))
def test_fuzz_the_words_after_dashes_reach_the_program_untouched(before: list[str], target_first: bool, prog: str,
                                                                 args: list[str]) -> None:
    """Whatever options come before ``--`` (values like ``--`` and ``-la`` among them), TARGET
    before it or not: the words after ``--`` are the program's, in order, and nothing before it
    is taken for them."""
    if target_first:
        argv = ["/bin/true", *before, "--", *args]
    else:
        argv = [*before, "--", prog, *args]
    params, extra, words = _parsed(argv)
    assert words is not None
    assert words.args == args
    assert params["target_arg"] == ("/bin/true" if target_first else prog)
    assert words.program == (None if target_first else prog)
    assert extra == []
