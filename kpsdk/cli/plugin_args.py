"""``-p NAME`` / ``-p no:NAME``: which plugins load, decided before the command line is parsed.

As in pytest, plugins are chosen first: the commands they add must exist by
the time typer looks the command name up, so :func:`scan_plugin_args` reads
the options from ``argv`` by hand, ahead of typer.
"""

from __future__ import annotations

from kpsdk import registry


def scan_plugin_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``-p NAME``/``-p no:NAME``/``--plugin NAME`` before the command name: ``(load, block)``.

    Scanned before typer parses anything, so that plugin commands exist by the
    time the command name is looked up.
    """
    values: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            break
        if arg in ("-p", "--plugin"):
            if i + 1 < len(argv):
                values.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--plugin="):
            values.append(arg.partition("=")[2])
        elif arg.startswith("-p") and not arg.startswith("--"):
            values.append(arg[2:])
        elif not arg.startswith("-"):
            break  # the command name: its own options follow
        i += 1
    return split_plugin_values(values)


def split_plugin_values(values: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``-p`` values as ``(load, block)``: ``no:NAME`` blocks NAME, anything else loads it."""
    load = [v for v in values if v and not v.startswith("no:")]
    block = [v[3:] for v in values if v.startswith("no:")]
    return load, block


def apply_plugin_options(values: list[str] | tuple[str, ...]) -> None:
    """Configure the registry for these ``-p`` values unless it already is."""
    load, block = split_plugin_values(values)
    current = getattr(registry, "_config", {})
    if (tuple(load), tuple(block)) != (tuple(current.get("load", ())), tuple(current.get("block", ()))):
        registry.configure(load=load, block=block)
