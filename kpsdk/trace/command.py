"""The ``kpsdk trace`` command, added through the ``kpsdk_cli(app)`` hook like any plugin's.

The command itself is :func:`kpsdk.trace.run.cmd_trace`, imported when the hook
runs, not when the plugins load (this module among them): ``kpsdk trace`` uses
the target options and helpers the ``kpsdk`` commands share
(:mod:`kpsdk.cli.options`, :mod:`kpsdk.cli.target_choice`...), which need typer.
"""

from __future__ import annotations

import typer

from kpsdk import hookimpl


@hookimpl
def kpsdk_cli(app: typer.Typer) -> None:
    from kpsdk.cli.command import Command
    from kpsdk.trace.run import EXAMPLES, HELP, cmd_trace

    Command("trace", cmd_trace, EXAMPLES, help=HELP,
            short_help="ftrace probe definitions: text, jsonl, perfetto, histograms",
            # the arguments after --call FN are extra arguments (negative numbers included), as in kpsdk probe
            extra_args=True, takes_program=True).add_to(app)
