"""``kpsdk matrix``: one probe script over many targets (``docs/matrix.md``).

The command reads the script (``kpsdk trace``'s definitions, or ``--script MODULE:FUNC``)
and the targets (programs, globs, a file of targets, one program x many inputs, kernels
of the fixtures), runs them with :func:`kpsdk.matrix` on the local pool or a Dask
cluster, prints each target's row as it completes with a progress bar, then writes the
merged output and the summary table.  Targets that failed make it exit 1 (a
:class:`kpsdk.MatrixError`, turned into the exit status by :mod:`kpsdk.cli.exits`) after
everything else was written.  The work is in :mod:`kpsdk.matrixrun`, imported when the
command runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kpsdk.cli.command import Command
from kpsdk.cli.consoles import console
from kpsdk.cli.exits import INTERRUPTED
from kpsdk.cli.parsing import check_out_path, check_seconds, split_commas

if TYPE_CHECKING:
    from kpsdk.matrixrun.script import Script
    from kpsdk.matrixrun.targets import MatrixTarget

SCRIPT_PANEL = "Script (kpsdk trace's definitions, or a Python function)"
TARGETS_PANEL = "Targets"
RUN_PANEL = "Where and how long"
OUTPUT_PANEL = "Output"

HELP = """\
Run one probe script over many targets, each in its own process, and merge the results.

[bold]TARGET[/bold]s are programs to run in Unicorn (paths, or quoted globs: '/usr/bin/*'), specs
(elf:PATH, qemu-user:PATH) or kernels: qemu-system:ARCH\\[@RELEASE]\\[+FLAVOUR] boots Debian's kernel
of the fixtures (python -m kpsdk.fixtures.kernel) with its busybox initramfs, fetched once into
kpsdk's cache before anything runs.  --kernels, --targets-file and --inputs make lists.

[bold]The script[/bold] is kpsdk trace's: -e/-f definitions, --filter, --trigger, --stack; or
--script MODULE:FUNC (or FILE.py:FUNC), a function taking the session that runs it and returns
its Trace, a list of records, or None.

Each target runs in a process forked for it; one that fails, passes --limit or crashes is
reported with its error and the others go on.  Rows are printed as targets complete, with a
progress bar; then the merged records (--output: text, jsonl with a "target" key per record,
perfetto with one process per target, trace-dat one file per target and an index.json in
--out DIR), the hist triggers' tables per target and merged per key, and the summary table.
The merged output is in the targets' order, each target's records in their order, whatever
the number of workers.  Results are cached by the target's and the script's hashes
(--no-cache runs everything).  Exit status 1 when a target did not run to its end.
"""

EXAMPLES = """\
kpsdk matrix /bin/true /bin/echo /usr/bin/sort --sysroot / -e 'p:m libc.so.6:malloc size=$arg1:u64'
kpsdk matrix '/usr/bin/*' --sysroot / --arg=--version -e 'r:m libc.so.6:malloc $retval' -o jsonl --out all.jsonl
kpsdk matrix --targets-file progs.txt --sysroot / -f probes.txt --workers 2 -o perfetto --out all.json
kpsdk matrix /usr/bin/sort --inputs 'inputs/*.txt' --sysroot / -e 'p:m libc.so.6:malloc size=$arg1:u64'
kpsdk matrix --kernels x86_64,i386,arm,riscv64,ppc64le -e 'r:open do_sys_openat2 ret=$retval:s32' --filter 'ret < 0'
kpsdk matrix --kernels x86_64,i386,arm,riscv64,ppc64le --script examples/matrix_failed_opens.py:failed_opens
kpsdk matrix --kernels x86_64 --release 6.1,6.12 -e 'p:clone kernel_clone' -o trace-dat --out traces/
kpsdk matrix /bin/ls /bin/cat --sysroot / --script myprobes.py:count_reads --scheduler tcp://10.0.0.5:8786
"""


def _script(event: list[str] | None, files: list[Path] | None, filter_expr: str | None, trigger: list[str] | None,
            stack: bool, script: str | None) -> Script:
    from kpsdk.matrixrun.script import FunctionScript, TraceScript

    lines = list(event or [])
    for path in files or []:
        try:
            text = path.read_text()
        except OSError as exc:
            raise typer.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint="-f") from None
        lines += [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if script is not None:
        if lines or filter_expr or trigger or stack:
            raise typer.BadParameter("--script runs a function: -e/-f, --filter, --trigger and --stack are a trace "
                                     "script's", param_hint="--script")
        return FunctionScript(str(Path(script.rpartition(":")[0]).resolve()) + ":" + script.rpartition(":")[2]
                              if script.rpartition(":")[0].endswith(".py") else script)
    if not lines:
        raise typer.BadParameter("give the script: -e 'p:EVENT SYM ARGS', -f FILE or --script MODULE:FUNC",
                                 param_hint="-e")
    return TraceScript(tuple(lines), filter_expr, tuple(trigger or ()), stack)


def _targets(items: list[str], targets_file: list[Path] | None, kernels: list[str] | None,
             releases: list[str] | None, flavours: list[str] | None, inputs: list[str] | None,
             args: list[str] | None, stdin: str | None, sysroot: str | None, cwd: str | None) -> list[MatrixTarget]:
    from kpsdk.matrixrun import targets as mt

    if cwd is None and sysroot == "/":
        cwd = os.getcwd()  # with this machine's files, relative arguments mean what they mean here
    common: dict[str, Any] = {"args": tuple(args or ()), "stdin": stdin, "sysroot": sysroot, "cwd": cwd}
    out: list[MatrixTarget] = []
    if inputs:
        if len(items) != 1:
            raise typer.BadParameter("--inputs runs one program over many inputs: give exactly one TARGET program",
                                     param_hint="--inputs")
        if stdin is not None:
            raise typer.BadParameter("--inputs are the standard inputs (or {} in --arg): drop --stdin",
                                     param_hint="--stdin")
        return mt.inputs(items[0], inputs, args=tuple(args or ()), sysroot=sysroot, cwd=cwd)
    for item in items:
        if "\0" in item:
            raise typer.BadParameter(f"{item!r} contains a NUL byte", param_hint="TARGET")
        if item.partition(":")[0] in ("elf", "qemu-user", "qemu-system", "gdb", "unicorn"):
            out.append(mt.as_target(item, **common))
        else:
            out += mt.programs([item], **common)
    for path in targets_file or []:
        out += mt.targets_file(path, **{k: v for k, v in common.items() if v})
    if kernels:
        out += mt.kernels(split_commas(kernels), split_commas(releases) or [None], split_commas(flavours) or [None])
    elif releases or flavours:
        raise typer.BadParameter("--release and --flavour choose among --kernels: add --kernels ARCH",
                                 param_hint="--release")
    if not out:
        raise typer.BadParameter("give the targets: programs (TARGET...), --targets-file FILE or --kernels ARCH",
                                 param_hint="TARGET")
    return out


def cmd_matrix(
    items: Annotated[list[str] | None, typer.Argument(
        metavar="TARGET", show_default=False,
        help="Programs (paths or quoted globs), elf:PATH, qemu-user:PATH, or qemu-system:ARCH\\[@RELEASE]\\[+FLAVOUR] "
             "(Debian's kernel of the fixtures).")] = None,
    event: Annotated[list[str] | None, typer.Option(
        "--event", "-e", metavar="DEF", rich_help_panel=SCRIPT_PANEL,
        help="A probe definition, as kpsdk trace takes it ('p:EVENT SYM a=$arg1', 'r SYM $retval'). "
             "Repeatable.")] = None,
    file: Annotated[list[Path] | None, typer.Option(
        "--file", "-f", metavar="FILE", rich_help_panel=SCRIPT_PANEL,
        help="Definitions from a file, one a line (# comments). Repeatable.")] = None,
    filter_expr: Annotated[str | None, typer.Option(
        "--filter", metavar="EXPR", rich_help_panel=SCRIPT_PANEL, help="Keep records whose fields match: 'ret < 0'.")
    ] = None,
    trigger: Annotated[list[str] | None, typer.Option(
        "--trigger", "-t", metavar="EVENT:CMD", rich_help_panel=SCRIPT_PANEL,
        help="An event trigger: 'm:hist:keys=size.log2' (tables per target and merged per key). Repeatable.")] = None,
    stack: Annotated[bool, typer.Option(
        "--stack", rich_help_panel=SCRIPT_PANEL, help="Each record's stack.")] = False,
    script: Annotated[str | None, typer.Option(
        "--script", metavar="MODULE:FUNC", rich_help_panel=SCRIPT_PANEL,
        help="A Python function fn(session) (or fn(session, target)) instead of definitions: "
             "package.module:func or path/to/file.py:func, importable where the targets run.")] = None,
    targets_file: Annotated[list[Path] | None, typer.Option(
        "--targets-file", metavar="FILE", rich_help_panel=TARGETS_PANEL,
        help="Targets from a file, one a line: PROG ARG... (as a shell splits it), or a JSON object "
             "({\"program\": \"/bin/sort\", \"args\": [\"-r\"], \"stdin\": \"in.txt\"}). Repeatable.")] = None,
    kernels: Annotated[list[str] | None, typer.Option(
        "--kernels", metavar="ARCH[,ARCH]", rich_help_panel=TARGETS_PANEL,
        help="Debian's kernels of these architectures (x86_64, i386, arm, riscv64, ppc64le), each booted in "
             "qemu-system with the fixtures' busybox initramfs.")] = None,
    release: Annotated[list[str] | None, typer.Option(
        "--release", metavar="SERIES[,SERIES]", rich_help_panel=TARGETS_PANEL,
        help="--kernels: the kernel series, from the Debian release that ships it (6.1, 6.12); each x each arch.")
    ] = None,
    flavour: Annotated[list[str] | None, typer.Option(
        "--flavour", metavar="FLAVOUR[,FLAVOUR]", rich_help_panel=TARGETS_PANEL,
        help="--kernels: the linux-image-FLAVOUR metapackage (cloud-amd64, rt-amd64...); each x each arch.")] = None,
    inputs: Annotated[list[str] | None, typer.Option(
        "--inputs", metavar="GLOB", rich_help_panel=TARGETS_PANEL,
        help="One program (the one TARGET) over many inputs: each file its standard input, or its argument "
             "where --arg holds {}. Repeatable.")] = None,
    arg: Annotated[list[str] | None, typer.Option(
        "--arg", metavar="ARG", rich_help_panel=TARGETS_PANEL,
        help="An argument of every program target (repeat for more; --arg=-v for one starting with -).")] = None,
    stdin: Annotated[str | None, typer.Option(
        "--stdin", metavar="FILE", rich_help_panel=TARGETS_PANEL,
        help="The standard input of every program target.")] = None,
    sysroot: Annotated[str | None, typer.Option(
        "--sysroot", metavar="DIR", rich_help_panel=TARGETS_PANEL,
        help="The directory programs in Unicorn see as / ('/': this machine's, for its own programs).")] = None,
    cwd: Annotated[str | None, typer.Option(
        "--cwd", metavar="DIR", rich_help_panel=TARGETS_PANEL, show_default=False,
        help="The programs' working directory, inside their sysroot (default: with --sysroot /, the current "
             "directory; else /).")] = None,
    timeout: Annotated[float | None, typer.Option(
        "--timeout", metavar="S", callback=check_seconds, rich_help_panel=RUN_PANEL, show_default=False,
        help="Each target's run ends after S seconds (status timeout, its records kept); default 60 for a "
             "program, 300 for a kernel.")] = None,
    limit: Annotated[float | None, typer.Option(
        "--limit", metavar="S", callback=check_seconds, rich_help_panel=RUN_PANEL, show_default=False,
        help="A target still there after S seconds (open, run and close) is stopped: SIGTERM, then SIGKILL "
             "(default: --timeout + 30 s, + 180 s for a kernel).")] = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", "-j", metavar="N", min=1, rich_help_panel=RUN_PANEL, show_default=False,
        help="Targets at once on this machine (default: its CPUs).")] = None,
    scheduler: Annotated[str | None, typer.Option(
        "--scheduler", metavar="tcp://HOST:PORT", rich_help_panel=RUN_PANEL,
        help="Run the targets on this Dask cluster (pip install 'kpsdk\\[dask]'); its workers read programs, "
             "sysroots and kernels at the same paths (a shared file system, KPSDK_CACHE).")] = None,
    no_cache: Annotated[bool, typer.Option(
        "--no-cache", rich_help_panel=RUN_PANEL,
        help="Run every target, even those whose result for this script is cached.")] = False,
    output: Annotated[str, typer.Option(
        "--output", "-o", metavar="FORMAT", rich_help_panel=OUTPUT_PANEL,
        help="text, jsonl, perfetto (one stream), trace-dat or a plugin's format (one file per target in --out "
             "DIR, with index.json).")] = "text",
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE|DIR", rich_help_panel=OUTPUT_PANEL,
        help="Write the merged records there (a directory for trace-dat) instead of stdout.")] = None,
    summary: Annotated[Path | None, typer.Option(
        "--summary", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
        help="Also write the summary as JSON: each target's status, error, records, hits and time.")] = None,
    no_prefix: Annotated[bool, typer.Option(
        "--no-prefix", rich_help_panel=OUTPUT_PANEL, help="text: the event bodies only.")] = False,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", rich_help_panel=OUTPUT_PANEL,
        help="The traceback of each target that raised, and what a crashed one wrote on stderr last.")] = False,
) -> None:
    from kpsdk.errors import UnknownNameError
    from kpsdk.matrixrun import merge
    from kpsdk.trace.output import output_format

    try:
        fmt = output_format(output)
    except UnknownNameError as exc:
        raise typer.BadParameter(f"{output!r}: want one of {', '.join(sorted(exc.valid))}",
                                 param_hint="--output") from None
    if fmt.name not in merge.MERGED_FORMATS and out is None:
        raise typer.BadParameter(f"{fmt.name} writes one file per target: give --out DIR", param_hint="--out")
    if out is not None and fmt.name in merge.MERGED_FORMATS:
        check_out_path(out)
    if summary is not None:
        check_out_path(summary, "--summary")
    if scheduler is not None and workers is not None:
        raise typer.BadParameter("a Dask cluster has its own workers: drop --workers", param_hint="--workers")
    the_script = _script(event, file, filter_expr, trigger, stack, script)
    targets = _targets(items or [], targets_file, kernels, release, flavour, inputs, arg, stdin, sysroot,
                       None if cwd is None else os.path.abspath(cwd))
    _run(the_script, targets, fmt.name, out, summary, not no_prefix, verbose,
         {"workers": workers, "scheduler": scheduler, "cache": not no_cache, "timeout": timeout, "limit": limit})


def _run(script: Script, targets: list[MatrixTarget], fmt: str, out: Path | None, summary: Path | None,
         prefix: bool, verbose: bool, options: dict[str, Any]) -> None:
    import kpsdk
    from kpsdk.errors import MatrixError
    from kpsdk.matrixrun import merge
    from kpsdk.matrixrun.child import describe_script
    from kpsdk.matrixrun.progress import ProgressDisplay, counts_line, summary_table

    err = console(stderr=True)
    machine = fmt != "text"
    report = console(stderr=out is None and machine)
    try:
        with ProgressDisplay(err, len(targets), f"{len(targets)} targets") as display:
            result = kpsdk.matrix(script, targets, on_result=display, log=lambda msg: err.print(msg, style="dim"),
                                  **options)
    except KeyboardInterrupt:
        err.print("[bold yellow]interrupted[/]: the targets' processes were stopped")
        raise typer.Exit(INTERRUPTED) from None
    if out is None:
        merge.write_merged(result.results, fmt, sys.stdout, prefix)
        sys.stdout.flush()
    elif fmt in merge.MERGED_FORMATS:
        with out.open("w") as stream:
            merge.write_merged(result.results, fmt, stream, prefix)
    else:
        index = merge.write_per_target(result.results, fmt, out)
        err.print(f"{len(result)} targets' files and {index}", style="dim")
    hists = result.hist_text()
    if hists:
        report.out(hists, highlight=False)
    if summary is not None:
        summary.write_text(json.dumps({"schema": "kpsdk-matrix-summary", "version": 1,
                                       "script": describe_script(script), "seconds": round(result.seconds, 3),
                                       "workers": result.workers,
                                       "targets": [merge.index_entry(r, None) for r in result.results]},
                                      indent=1, ensure_ascii=False) + "\n")
    if verbose:
        for failed in result.failed:
            if failed.traceback:
                err.rule(failed.name)
                err.out(failed.traceback.rstrip(), highlight=False)
    err.print(summary_table(result.results, f"kpsdk matrix: {describe_script(script)}"))
    err.print(counts_line(result.results, result.seconds, result.workers))
    if result.failed:
        raise MatrixError(f"{len(result.failed)} of {len(result)} targets did not run to their end", result)


COMMAND = Command("matrix", cmd_matrix, EXAMPLES, help=HELP,
                  short_help="one probe script over many programs or kernels, merged results")
