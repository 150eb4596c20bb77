"""``kpsdk demo``: what kprobes can do, live, on the bundled programs.

The demo itself is :func:`kpsdk.demo.programs.run_demo` (read it next); this module
only chooses the architectures and turns a failed check into exit status 1.
"""

from __future__ import annotations

from typing import Annotated

import typer

import kpsdk
from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.errors import UnknownNameError
from kpsdk.fixtures import ARCHS


def _fixture_name(name: str) -> str:
    """A fixture architecture for ``--arch NAME``: its own name or any alias of it (``amd64``)."""
    if name in ARCHS:
        return name
    try:
        canonical = kpsdk.get_registry().archs.get(name).name
    except UnknownNameError:
        canonical = ""
    if canonical in ARCHS:
        return canonical
    raise typer.BadParameter(f"no fixture for {name!r}; choose from {', '.join(ARCHS)}", param_hint="--arch")


def cmd_demo(
    arch: Annotated[list[str] | None, typer.Option(
        "--arch", "-a", metavar="ARCH",
        help="Only these fixture architectures (repeatable): " + ", ".join(ARCHS))] = None,
) -> None:
    """Show what kprobes can do, live, on the bundled programs: start here.

    For each architecture (x86_64, i386, arm, thumb, riscv64, ppc64, aarch64) a small C program from
    kpsdk.fixtures runs in Unicorn while real kprobes:

      1. read add's arguments and follow fact's recursion (5, 4, 3, 2, 1)
      2. see, in a post_handler, whether the branch in check was taken
      3. leave the program's output exactly as without probes
      4. inject a fault: rewrite add's second argument, add=5 becomes add=42
      5. change the path (K2): regs.ip = sub; return 1 makes add(7, 3) = 4
      6. show s.list() (\\[OPTIMIZED], \\[DISABLED]) and s.profile()

    Then (without --arch) this machine's own /bin/ls, dynamically linked, runs in
    Unicorn with its real ld.so and libc: a uprobe on libc.so.6:malloc sees each
    call, and its output must equal a native run's (an x86_64 host; skipped with
    the reason elsewhere).  A summary table ends it.  Exit status 0 when every check passed, 1 if not.
    The source is kpsdk/demo/programs.py: read it next.
    """
    from kpsdk.demo.programs import run_demo

    chosen = [_fixture_name(a) for a in arch or []]
    results = run_demo(chosen or None, console())
    if not all(r.ok for r in results):
        raise typer.Exit(1)


COMMAND = Command("demo", cmd_demo, "kpsdk demo\nkpsdk demo --arch riscv64 --arch thumb")
