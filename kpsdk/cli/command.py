"""How a command joins the app: its function, its examples and how typer should parse it.

Each command module declares one :class:`Command`; :mod:`kpsdk.cli.root` adds
the built-in ones in order, and a plugin's ``kpsdk_cli(app)`` hook may use
:meth:`Command.add_to` too (``kpsdk trace`` does), so every command's help
ends with its examples in the same form.

A command that runs a program takes it as strace and ltrace do, after ``--``:
``kpsdk probe --kprobe main -- /bin/ls -la /tmp``.  click reads ``--`` as the end
of the options and hands the words after it over as arguments, but does not say
which words those were; :class:`ProgramCommand` finds the separator itself
(:func:`separated_words`, knowing which options take a value, so that
``--arg --`` stays an option's value) and keeps the words after it apart
(:func:`program_words`): they are the program's, never read as kpsdk's options
nor as ``--call``'s numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand

#: where :class:`ProgramCommand` keeps what followed ``--`` in the click context's ``meta``
PROGRAM_WORDS = "kpsdk.program_words"
#: the usage line's last piece for a command that takes ``-- PROG ARGS``
PROGRAM_USAGE = "[-- PROG [ARG]...]"


@dataclass(frozen=True)
class ProgramWords:
    """What a command line said after ``--``: the program (None: TARGET came before ``--``)
    and its arguments, each word as given."""

    program: str | None
    args: list[str]


def _takes_value(command: Any, ctx: Any) -> dict[str, bool]:
    """Every option name of ``command`` (``-k``, ``--kprobe``, ``--no-post``...) and whether
    it takes a value (the next word, or the rest of a short option's word)."""
    names: dict[str, bool] = {}
    for param in command.get_params(ctx):
        if getattr(param, "param_type_name", "") != "option":
            continue
        value = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
        for opt in (*param.opts, *param.secondary_opts):
            names[opt] = value
    return names


def separated_words(args: list[str], takes_value: dict[str, bool]) -> int | None:
    """The index in ``args`` of the ``--`` that ends the options (None: there is none), as click's
    parser finds it: an option's value is skipped whatever it is (``--arg --``, ``-e --``), a
    ``--name=value`` word is one word, and a short option that takes a value ends its word
    (``-kmain``).  An option the command does not have takes no value, as click passes it on."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--":
            return i
        if word.startswith("--"):
            if "=" not in word and takes_value.get(word, False):
                i += 1
        elif word.startswith("-") and len(word) > 1:
            for at, letter in enumerate(word[1:], start=2):
                if takes_value.get(f"-{letter}", False):
                    if at == len(word):  # the value is the next word
                        i += 1
                    break
        i += 1
    return None


class ProgramCommand(TyperCommand):
    """A typer command whose words after ``--`` are a program and its arguments (see the module)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        at = separated_words(args, _takes_value(self, ctx))
        after = args[at + 1:] if at is not None else []
        rest = super().parse_args(ctx, args)
        if at is None:
            return rest
        # click gave TARGET the first positional word, and the words after it are left over: when
        # fewer are left over than followed --, TARGET was the first of them (nothing came before)
        from_after = len(rest) < len(after)
        words = ProgramWords(after[0] if from_after and after else None, after[1:] if from_after else after)
        ctx.meta[PROGRAM_WORDS] = words
        ctx.args = rest[:len(rest) - len(words.args)]  # what came before --: --call's numbers
        return ctx.args

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [*super().collect_usage_pieces(ctx), PROGRAM_USAGE]


def program_words(ctx: Any) -> ProgramWords | None:
    """What followed ``--`` on the command line of ``ctx`` (None: no ``--``)."""
    found = ctx.meta.get(PROGRAM_WORDS)
    return found if isinstance(found, ProgramWords) else None


@dataclass(frozen=True)
class Command:
    """One ``kpsdk NAME`` command."""

    name: str
    func: Callable[..., None]
    #: example command lines, one a line, shown under the help
    examples: str
    #: the help text, when not the function's docstring; short_help: the line in ``kpsdk --help``
    help: str | None = None
    short_help: str | None = None
    #: the command takes arguments it does not declare (``kpsdk probe ... --call add 2 -3``)
    extra_args: bool = False
    #: the command runs a program given after ``--`` (:class:`ProgramCommand`)
    takes_program: bool = False

    def add_to(self, app: typer.Typer) -> None:
        """Register the command on ``app``, its examples as the help's epilog."""
        epilog = "[bold]Examples[/bold]\n" + "\n".join(f"  {line}" for line in self.examples.splitlines())
        context: dict[str, Any] | None = (
            {"allow_extra_args": True, "ignore_unknown_options": True} if self.extra_args else None)
        app.command(self.name, help=self.help, short_help=self.short_help, epilog=epilog,
                    context_settings=context, cls=ProgramCommand if self.takes_program else None)(self.func)
