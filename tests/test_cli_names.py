"""Option names over the whole ``kpsdk`` app: each name one option, each short name one meaning.

click lets the last option declared with a name win, silently: ``kpsdk trace -t``
was both ``--trigger`` and ``--target`` (issue 36, item 13).  ``-t`` is
``--trigger`` (the examples of ``kpsdk trace --help`` use it so); ``--target``
has no short name.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kpsdk.cli import app
from tests.cliwalk import app_commands, command_options, option_names

runner = CliRunner()


@pytest.mark.parametrize("name", list(app_commands()))
def test_no_two_options_of_a_command_share_a_name(name: str) -> None:
    owners: dict[str, list[str]] = {}
    for option in command_options(app_commands()[name]).values():
        for opt in option_names(option):
            owners.setdefault(opt, []).append(option.name)
    shared = {opt: names for opt, names in owners.items() if len(names) > 1}
    assert not shared, f"kpsdk {name}: {shared}"


def test_a_short_option_means_the_same_in_probe_and_trace() -> None:
    """The two commands share their target options, and a short name one takes means the same in
    the other or is free there: ``-t`` is ``--trigger`` (``kpsdk probe`` took it for ``--target``)."""
    commands = app_commands()
    meaning: dict[str, tuple[str, str]] = {}
    for name in ("probe", "trace"):
        for option in command_options(commands[name]).values():
            long = next((o for o in option_names(option) if o.startswith("--")), option.name)
            for short in (o for o in option.opts if not o.startswith("--")):
                first = meaning.setdefault(short, (name, long))
                assert first[1] == long, f"{short} is {first[1]} in kpsdk {first[0]} but {long} in kpsdk {name}"
    assert meaning["-t"] == ("trace", "--trigger")


def test_t_is_the_trigger_and_target_is_spelled_out() -> None:
    result = runner.invoke(app, ["trace", "x86_64", "-e", "p:f fact n=%di:s64", "-t", "f:stacktrace if n == 1",
                                 "--call", "fact 3"])
    assert result.exit_code == 0, result.output
    assert "=> fact" in result.stdout
    for command in ("probe", "trace"):
        target = command_options(app_commands()[command])["target"]
        assert option_names(target) == ["--target"], command
