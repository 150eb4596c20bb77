"""The options of the ``kpsdk`` commands as click sees them, walked over the whole app.

``kpsdk probe`` and ``kpsdk trace`` take the target options from one declaration
(:class:`kpsdk.cli.options.TargetOptions`); these tests read the built commands
(:mod:`tests.cliwalk`), so an option declared again by hand shows here.
"""

from __future__ import annotations

from dataclasses import fields

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from kpsdk.cli.options import TargetOptions
from tests.cliwalk import app_commands, command_options

runner = CliRunner()


def _target_option_names() -> list[str]:
    return [f.name for f in fields(TargetOptions)]


def test_probe_and_trace_take_the_same_target_options() -> None:
    commands = app_commands()
    probe, trace = command_options(commands["probe"]), command_options(commands["trace"])
    for name in _target_option_names():
        p, t = probe[name], trace[name]
        assert (p.opts, p.secondary_opts, p.help, p.default, p.metavar, p.multiple) == \
            (t.opts, t.secondary_opts, t.help, t.default, t.metavar, t.multiple), name


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
