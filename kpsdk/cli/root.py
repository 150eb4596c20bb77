"""The ``kpsdk`` app: the root command (help, ``-p``, ``--version``) and its commands.

:func:`create_app` adds the built-in commands in the order ``kpsdk --help``
lists them, then lets every plugin's ``kpsdk_cli(app)`` hook add its own.
:func:`main` is the console script: it applies ``-p`` before the app is
built, so that the plugins it names can add commands.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

import kpsdk
from kpsdk import registry
from kpsdk.cli.archs import COMMAND as ARCHS_COMMAND
from kpsdk.cli.command import Command
from kpsdk.cli.demo import COMMAND as DEMO_COMMAND
from kpsdk.cli.disasm import COMMAND as DISASM_COMMAND
from kpsdk.cli.exits import KpsdkGroup, exit_on_user_error
from kpsdk.cli.list import COMMAND as LIST_COMMAND
from kpsdk.cli.matrix import COMMAND as MATRIX_COMMAND
from kpsdk.cli.plugin_args import apply_plugin_options, scan_plugin_args
from kpsdk.cli.plugins import COMMAND as PLUGINS_COMMAND
from kpsdk.cli.probe import COMMAND as PROBE_COMMAND

HELP = """\
kpsdk: the Linux kprobes programming model for code run in the Unicorn emulator.

Put a handler on (almost) any instruction of a program, read and change its
registers, change where it goes, and read the kernel's kprobes/list and
kprobe_profile views, with the kernel's rules and errno values.

New here? Run [bold]kpsdk demo[/bold].

[bold]Plugins[/bold]: architectures, target kinds, probe types and extra commands all come
from plugins of the 'kpsdk' entry-point group (see kpsdk plugins).
-p NAME loads a plugin by entry-point or module name, -p no:NAME blocks one
(built-in ones included); both may repeat and go before the command.
Set KPSDK_DISABLE_PLUGIN_AUTOLOAD=1 to keep third-party plugins from loading
automatically (kpsdk's own still load; -p NAME still loads one by name).

Errors a user can cause print one 'error: ...' line and exit 1; usage errors exit 2.
"""

EPILOG = """\
[bold]Examples[/bold] (x86_64, riscv64, arm, thumb, i386, ppc64: the bundled fixture programs)
  kpsdk demo                          # start here
  kpsdk archs                         # breakpoints, argument registers
  kpsdk list x86_64                   # the functions you can probe
  kpsdk disasm riscv64 check          # how each instruction is probed
  kpsdk probe x86_64 --kprobe add     # print add's arguments on each hit
  kpsdk probe riscv64 --kprobe fact --call 'fact 5'
  kpsdk -p no:kprobes plugins         # without the kprobes plugin
  KPSDK_DISABLE_PLUGIN_AUTOLOAD=1 kpsdk plugins
"""

#: the built-in commands, in the order of ``kpsdk --help``
COMMANDS: tuple[Command, ...] = (DEMO_COMMAND, ARCHS_COMMAND, PLUGINS_COMMAND, LIST_COMMAND, DISASM_COMMAND,
                                 PROBE_COMMAND, MATRIX_COMMAND)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kpsdk {kpsdk.__version__}")
        raise typer.Exit()


def _root(
    plugin: Annotated[
        list[str] | None,
        typer.Option("--plugin", "-p", metavar="NAME",
                     help="Load plugin NAME (entry point or module); 'no:NAME' blocks one. Repeatable."),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    # main() configured the registry from sys.argv already; this keeps the
    # option working when the app is invoked another way (typer's CliRunner).
    apply_plugin_options(plugin or [])


def create_app() -> typer.Typer:
    """The ``kpsdk`` app: built-in commands, then the commands plugins add."""
    app = typer.Typer(
        name="kpsdk",
        cls=KpsdkGroup,
        help=HELP,
        epilog=EPILOG,
        no_args_is_help=True,
        rich_markup_mode="rich",
        add_completion=False,
        pretty_exceptions_show_locals=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_root)
    for command in COMMANDS:
        command.add_to(app)
    kpsdk.get_registry().pm.hook.kpsdk_cli(app=app)
    return app


_app: typer.Typer | None = None


def get_app() -> typer.Typer:
    """The app, created on first use (after ``main()`` has applied ``-p``)."""
    global _app
    if _app is None:
        _app = create_app()
    return _app


def main() -> None:
    """The ``kpsdk`` console script: ``-p`` first, then a fresh app, run on ``sys.argv``."""
    global _app
    with exit_on_user_error():
        load, block = scan_plugin_args(sys.argv[1:])
        registry.configure(load=load, block=block)
        _app = None
        get_app()(prog_name="kpsdk")
