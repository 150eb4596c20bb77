"""The ``kpsdk trace`` command, added through the ``kpsdk_cli(app)`` hook like any plugin's.

The command itself is :func:`kpsdk.trace.run.cmd_trace`, imported when the hook
runs: it uses :mod:`kpsdk.cli`'s target options, and ``kpsdk.cli`` loads the
plugins (this module among them) while it is being imported.
"""

from __future__ import annotations

import typer

from kpsdk import hookimpl


@hookimpl
def kpsdk_cli(app: typer.Typer) -> None:
    from kpsdk.trace.run import EXAMPLES, HELP, cmd_trace

    epilog = "[bold]Examples[/bold]\n" + "\n".join(f"  {line}" for line in EXAMPLES.splitlines())
    app.command("trace", help=HELP, epilog=epilog,
                short_help="ftrace probe definitions: text, jsonl, perfetto, histograms")(cmd_trace)
