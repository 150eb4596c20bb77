"""The ``kpsdk`` command line (typer + rich).

Start with ``kpsdk demo``.  Every command is a thin layer over the Python API
(:func:`kpsdk.open`, ``Kprobe``, ``Session.list()``...), so what a command
prints is what the same few lines of Python would give.

Only this package turns exceptions into exit codes, and within it only
:mod:`kpsdk.cli.exits`: a :class:`kpsdk.KpsdkError` (or an ``OSError`` such
as ``KprobeError``) prints one red ``error: ...`` line on stderr and exits 1;
usage errors exit 2 as typer's do; anything else is a bug and keeps its
traceback.

Plugins are chosen before the command line is parsed, as in pytest:
``-p NAME`` loads a plugin (an entry point of the ``kpsdk`` group or an
importable module), ``-p no:NAME`` blocks one.  After the built-in commands
are added, every plugin's ``kpsdk_cli(app)`` hook may add its own.

One module per job; the shared ones never import a command, and no command
imports another:

- :mod:`~kpsdk.cli.root`: the app, its help and ``main()``;
- :mod:`~kpsdk.cli.helpcache`: ``kpsdk --help`` replayed from a record of its output;
- :mod:`~kpsdk.cli.exits`: exceptions -> exit codes; :mod:`~kpsdk.cli.consoles`: where output goes;
- :mod:`~kpsdk.cli.plugin_args`: ``-p NAME`` / ``-p no:NAME``;
- :mod:`~kpsdk.cli.command`: how a command joins the app (its examples);
- :mod:`~kpsdk.cli.options`, :mod:`~kpsdk.cli.parsing`: option types and values;
- :mod:`~kpsdk.cli.target_choice`: TARGET or ``--target SPEC`` -> ``kpsdk.open``, run time limits;
- the commands: :mod:`~kpsdk.cli.archs`, :mod:`~kpsdk.cli.plugins`, :mod:`~kpsdk.cli.list`,
  :mod:`~kpsdk.cli.disasm`, :mod:`~kpsdk.cli.demo`, :mod:`~kpsdk.cli.probe` (with
  :mod:`~kpsdk.cli.probe_run` and what a hit prints: :mod:`~kpsdk.cli.hitregs`,
  :mod:`~kpsdk.cli.hitstrings`, :mod:`~kpsdk.cli.returns`).

``kpsdk trace`` (:mod:`kpsdk.trace.command`) is added through the hook like a
plugin's command and uses the shared modules.  Importing this package loads
nothing else: ``kpsdk.cli.app`` and the names of the former single module
``kpsdk/cli.py`` are looked up on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

#: where each name of the former single module lives now (importers of ``kpsdk.cli.NAME`` keep working)
_MOVED = {
    "kpsdk.cli.root": "HELP EPILOG COMMANDS create_app get_app",
    "kpsdk.cli.consoles": "PIPE_WIDTH console heading",
    "kpsdk.cli.exits": "KpsdkGroup report_error",
    "kpsdk.cli.plugin_args": "scan_plugin_args split_plugin_values apply_plugin_options",
    "kpsdk.cli.parsing": "elf_path parse_call parse_where check_seconds split_commas",
    "kpsdk.cli.options": "ElfArg NoprobeOpt TARGET_PANEL TargetOpt ProgArgOpt KernelOpt InitrdOpt AppendOpt "
                         "SymbolsOpt ArchOpt QemuArgOpt MechanismOpt SysrootOpt StdinOpt",
    "kpsdk.cli.target_choice": "LIVE_KINDS TARGET_OPTIONS TARGET_SPECS UNICORN_TIMEOUT LIVE_TIMEOUT TargetChoice "
                               "choose_target close_session",
    "kpsdk.cli.hitregs": "ARG_LIMIT default_regs arg_number check_reg_names read_reg show_reg",
    "kpsdk.cli.hitstrings": "STRING_MAX STRING_SLOT STRING_OK STRING_TRUNCATED STRING_FAULT STRINGS_MAX "
                            "fetch_string show_string store_strings load_strings",
    "kpsdk.cli.returns": "KERNEL_ERRNO signed_return errno_name",
    "kpsdk.cli.probe_run": "ProbeRun ProbeLine probe_class",
    "kpsdk.cli.probe": "PROBES_PANEL OUTPUT_PANEL ProbeElfArg cmd_probe",
    "kpsdk.cli.archs": "hex_insn cmd_archs",
    "kpsdk.cli.plugins": "cmd_plugins",
    "kpsdk.cli.list": "cmd_list",
    "kpsdk.cli.disasm": "cmd_disasm",
    "kpsdk.cli.demo": "cmd_demo",
    "kpsdk.registry": "AUTOLOAD_ENV",
}
_HOME = {name: module for module, names in _MOVED.items() for name in names.split()}


def main() -> None:
    """The ``kpsdk`` console script (also ``python -m kpsdk`` and ``python -m kpsdk.cli``).

    ``kpsdk --help`` prints its recorded page when nothing it was made of has
    changed (:mod:`~kpsdk.cli.helpcache`), before typer is imported."""
    import sys

    from kpsdk.cli import helpcache

    argv = sys.argv[1:]
    if not helpcache.wanted(argv):
        from kpsdk.cli.root import main as run

        run()
    elif not helpcache.replay(argv):
        from kpsdk.cli.root import main as run

        helpcache.record(argv, run)


def __getattr__(name: str) -> Any:
    """``kpsdk.cli.app`` (built on first access, so importing this package loads no plugin),
    and the other names above, imported from their modules on first use."""
    if name == "app":
        from kpsdk.cli.root import get_app

        return get_app()
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
