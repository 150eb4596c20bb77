"""The options of the ``kpsdk`` commands as click sees them, walked over the whole app.

``kpsdk probe`` and ``kpsdk trace`` take the target options from one declaration
(:class:`kpsdk.cli.options.TargetOptions`); these tests read the built commands
(:mod:`tests.cliwalk`), so an option declared again by hand shows here.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from typer.testing import CliRunner

from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.cli.options import TargetOptions
from tests.cliwalk import app_commands, command_params
from tests.conftest import require_tool

runner = CliRunner()


def test_probe_and_trace_take_the_same_target_options() -> None:
    """TARGET and the target options: the same names, help and defaults in both commands."""
    commands = app_commands()
    probe, trace = (command_params(commands[name]) for name in ("probe", "trace"))
    for name in (f.name for f in fields(TargetOptions)):
        p, t = probe[name], trace[name]
        assert (p.param_type_name, p.opts, p.secondary_opts, getattr(p, "help", None), p.default, p.metavar,
                p.multiple) == \
            (t.param_type_name, t.opts, t.secondary_opts, getattr(t, "help", None), t.default, t.metavar,
             t.multiple), name


@pytest.mark.parametrize("command", ["probe", "trace"])
def test_call_takes_its_arguments_as_words_in_both_commands(command: str) -> None:
    """``--call sub 3 5`` (the words after FN are the command line's extra arguments) and
    ``--call 'sub 3 5'`` mean the same; words left over without ``--call`` are a usage error."""
    probes = ["--kretprobe", "sub", "--restype", "int"] if command == "probe" else ["-e", "r sub $retval:s32"]
    quoted = runner.invoke(app, [command, "x86_64", *probes, "--call", "sub 3 5"])
    words = runner.invoke(app, [command, "x86_64", *probes, "--call", "sub", "3", "5"])
    assert quoted.exit_code == 0 and words.exit_code == 0, (quoted.output, words.output)
    assert "-2" in words.stdout and words.stdout.count("sub") == quoted.stdout.count("sub")
    extra = runner.invoke(app, [command, "x86_64", *probes, "3"])
    assert extra.exit_code == 2 and "unexpected arguments '3'" in extra.output


@pytest.mark.parametrize("command", ["probe", "trace"])
def test_an_unknown_option_is_named_as_one(command: str) -> None:
    """Both commands let click pass the words they do not know (``--call sub 3 -5``); a word that is
    no number but looks like an option is refused as one, TARGET included (``kpsdk probe -t ...``)."""
    short = "-t" if command == "probe" else "-z"  # kpsdk trace's -t is --trigger
    last = "-x" if command == "probe" else "-y"  # kpsdk trace's -x is --exec
    for argv, unknown in ((["x86_64", "--bogus"], "--bogus"), ([short, "x86_64"], short),
                          (["x86_64", "--call", "sub 3", last], last)):
        result = runner.invoke(app, [command, *argv, *PROBES[command]])
        assert result.exit_code == 2, result.output
        assert f"'{unknown}': no such option" in result.output, result.output


# -- TARGET: one grammar in both commands (issue 36, item 14) ----------------------------------------------

PROBES = {"probe": ["--kprobe", "add"], "trace": ["-e", "p add"]}
PROG = str(fixtures.path("x86_64"))


@pytest.mark.parametrize("command", ["probe", "trace"])
@pytest.mark.parametrize(("argv", "refused"), [
    ([f"qemu-user:{PROG}", "--call", "add 2 3"], "--call"),        # a live target runs its own code
    (["qemu-system:x86_64", "--sysroot", "/"], "--sysroot"),        # a program's option
    (["gdb://localhost:1", "--kernel", "vmlinuz"], "--kernel"),     # qemu-system's option
    ([f"qemu-user:{PROG}", "--target", f"qemu-user:{PROG}"], "name the target"),  # named twice
    (["x86_64", "--target", "qemu-system:x86_64"], "name the target"),
    (["x86_64", "--kernel", "vmlinuz"], "--kernel"),                # an ELF in Unicorn
    ([f"native:{PROG}", "--call", "add 2 3"], "--call"),           # gdbserver's kinds run their own code too
    (["pid:1", "--call", "add 2 3"], "--call"),
    ([PROG, "--target", "native", "--call", "add 2 3"], "--call"),
    (["pid:1", "--arg", "x"], "--arg"),                             # a running process has its arguments
    (["x86_64", "--abi", "user"], "--abi"),                         # gdb://'s option
    (["gdb://localhost:1", "--abi", "both"], "not one of user, kernel"),
    (["--target", "native"], "name the program"),
    (["qemu-system:x86_64"], "has no symbols to find 'add' in: give the kernel to boot, --kernel"),  # issue 36, 15
    (["--target", "qemu-system:riscv64", "--append", "quiet"], "has no symbols to find 'add'"),
])
def test_target_is_a_program_or_a_spec_the_same_way_in_both_commands(command: str, argv: list[str],
                                                                     refused: str) -> None:
    """TARGET is a target spec when it begins with a target kind and a colon, else a program;
    what goes with each kind of target is then checked, before anything starts (no QEMU here)."""
    result = runner.invoke(app, [command, *argv, *PROBES[command]])
    assert result.exit_code == 2, result.output
    assert refused in " ".join(result.output.replace("│", " ").split())  # the error's box unwrapped


@pytest.mark.parametrize("command", ["probe", "trace"])
def test_a_spec_names_the_target_in_either_place(command: str) -> None:
    """``kpsdk COMMAND qemu-user:PROG`` is ``kpsdk COMMAND --target qemu-user:PROG`` (and
    ``kpsdk COMMAND PROG --target qemu-user``)."""
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    probes = ["--kretprobe", "add"] if command == "probe" else ["-e", "r:add add $retval:s32", "--no-prefix"]
    outputs = [runner.invoke(app, [command, *where, *probes]) for where in (
        [f"qemu-user:{PROG}"], ["--target", f"qemu-user:{PROG}"], [PROG, "--target", "qemu-user"])]
    for result in outputs:
        assert result.exit_code == 0, result.output
    want = "r add ret=5" if command == "probe" else "arg1=5"
    assert all(want in result.stdout for result in outputs), [r.stdout for r in outputs]


@pytest.mark.parametrize(("argv", "refused"), [
    (["--pid", "1", "--strace"], "--strace"),                      # the kernel runs its calls, not kpsdk
    (["--pid", "1", "--kprobe", "add", "--call", "add 2 3"], "--call"),
    (["--pid", "1", "--kprobe", "add", "--call", "add", "2", "3"], "--call"),  # 2 is no TARGET here
    (["x86_64", "--pid", "1", "--kprobe", "add"], "names the target"),
    (["--target", "pid:1", "--pid", "1", "--kprobe", "add"], "names the target"),
])
def test_probe_pid_is_the_target_pid_spec(argv: list[str], refused: str) -> None:
    """``kpsdk probe --pid PID`` is TARGET ``pid:PID``: checked as that kind, and the target named once."""
    result = runner.invoke(app, ["probe", *argv])
    assert result.exit_code == 2, result.output
    assert refused in " ".join(result.output.replace("│", " ").split())


def test_trace_pid_is_the_prefix_pid_and_pid_spec_the_process() -> None:
    """``kpsdk trace --pid N`` stays the pid a Unicorn program's prefix shows (so --pid is no target
    option of the group); a running process is TARGET ``pid:PID`` there, with tasks of its own."""
    commands = app_commands()
    assert "pid" not in {f.name for f in fields(TargetOptions)}
    assert "Unicorn: the pid the prefix shows" in command_params(commands["trace"])["pid"].help
    assert "running process" in command_params(commands["probe"])["pid"].help
    ok = runner.invoke(app, ["trace", "x86_64", "-e", "p add", "--pid", "7", "--call", "add 2 3"])
    assert ok.exit_code == 0 and "-7 " in ok.stdout, ok.output
    live = runner.invoke(app, ["trace", "pid:1", "-e", "p add", "--pid", "7"])
    assert live.exit_code == 2 and "tasks of its own" in live.output, live.output
