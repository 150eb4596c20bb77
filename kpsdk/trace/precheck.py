"""What ``kpsdk trace`` checks before it starts a target: a mistake costs no boot.

A kernel under qemu-system takes seconds to tens of seconds to reach the point where
probes are registered, so everything that can be known without the running target is
checked first (issue: "a bad definition for a kernel target is found after ~7 s of
boot"):

- every definition, against the grammar of the target's architecture (which is known
  from the target spec: ``qemu-system:ARCH``, ``unicorn:ARCH``, the ELF header of
  ``elf:``/``qemu-user:`` programs, ``--arch`` for ``gdb://``) and, for a kernel, of
  its version (the banner in ``--kernel``/``--symbols``: :mod:`kpsdk.kernel.version`);
- for a kernel, the symbols the definitions name, in the kernel's own symbol table
  (read from the image, cached), as the kernel's ``trace_kprobe`` would refuse them;
- each ``--hist FIELD``: a field some definition has, and one with integer values;
- each ``--trigger``: its event exists and the trigger parses for it (the kernel's hist errors);
- ``--functions GLOB``: the templates, and on a kernel that the image has matching functions
  (and not more than the limit).

The same checks run again on the live target (``Session.trace``); this only moves the
failures earlier.  Errors are the ones the target would raise: a
:class:`~kpsdk.errors.TraceDefinitionError` with the kernel's error_log, or a usage error.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kpsdk.binfmt.symbols import did_you_mean
from kpsdk.cli.target_choice import refuse_names_without_symbols
from kpsdk.errors import KpsdkError, TraceDefinitionError, TriggerError
from kpsdk.trace.histtrigger import HistTrigger, register
from kpsdk.trace.triggers import matches, parse_trigger, split_trigger

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.symbols import SymbolTable
    from kpsdk.cli.target_choice import TargetChoice
    from kpsdk.trace.btfargs import BtfArgs
    from kpsdk.trace.grammar import ProbeDef


def target_arch(choice: TargetChoice) -> Arch | None:
    """The architecture the target will have, where the spec says it without opening it."""
    from kpsdk.registry import get_registry

    registry = get_registry()
    scheme, _, rest = choice.spec.partition(":")
    try:
        if scheme in ("qemu-system", "unicorn"):
            return registry.arch(rest)
        if scheme in ("elf", "qemu-user"):
            from kpsdk.binfmt.elfimage import load_elf

            image = load_elf(rest)
            return registry.archs.by_elf(image.machine, image.elf_class, image.endian)
        if scheme == "gdb" and choice.options.get("arch"):
            return registry.arch(str(choice.options["arch"]))
    except KpsdkError:
        return None  # opening the target says what is wrong with it, as it always did
    return None


def precheck(choice: TargetChoice, definitions: list[str], hist_fields: list[str], triggers: Sequence[str] = (),
             functions: str | None = None) -> None:
    """Raise what the definitions, ``--hist`` fields, ``--trigger`` triggers and ``--functions``
    glob will meet on this target, before it starts."""
    from kpsdk.trace.functions import is_template, placeholder_definitions

    for text in triggers:
        split_trigger(text)
    arch = target_arch(choice)
    if arch is None:
        return
    from kpsdk.trace.grammar import Parser

    # an IFUNC is resolved once the session runs; a symbol a file lacks is reported by the session,
    # with the libraries of the program that have it
    kernel = _kernel_version(choice)
    parser = Parser(arch, kernel=kernel, ifunc_later=True, btf=_kernel_btf(choice, arch, kernel), unknown_later=True)
    templates = {i for i, line in enumerate(definitions) if functions is not None and is_template(line)}
    lines = placeholder_definitions(definitions) if functions is not None else definitions
    parsed = [parser.parse(line) for line in lines]
    refuse_names_without_symbols(choice, [d.symbol for i, d in enumerate(parsed) if i not in templates
                                          and d.op != "-" and d.symbol is not None and not d.is_uprobe])
    if choice.spec.startswith("qemu-system:"):
        _kernel_symbols(choice, [d for i, d in enumerate(parsed) if i not in templates], functions)
    _hist_fields(parsed, hist_fields)
    _triggers([d for i, d in enumerate(parsed) if i not in templates], triggers, arch.word_size,
              loose=bool(templates))


def _triggers(parsed: list[ProbeDef], triggers: Sequence[str], word: int, loose: bool) -> None:
    """Each trigger parses for its event (the kernel's errors); an event that ``--functions`` will
    name (``loose``) is checked once the functions are known."""
    hists: dict[int, list[HistTrigger]] = {}
    named: dict[str, HistTrigger] = {}
    for text in triggers:
        name, command = split_trigger(text)
        found = next((d for d in parsed if d.op != "-" and matches(name, d.event, d.group)), None)
        if found is None:
            if loose:
                continue
            known = ", ".join(d.event for d in parsed if d.op != "-") or "none"
            raise TriggerError("ENOENT", text, 0, f"no event {name!r} (events: {known})", "trigger")
        trigger = parse_trigger(command, found, word)
        if isinstance(trigger, HistTrigger):  # with the event's others: a named table, a repeat
            existing = hists.setdefault(id(found), [])
            added = register(trigger, existing, named, f"hist:{found.group}:{found.event}")
            if added is not None:
                existing.append(added)


def _kernel_version(choice: TargetChoice) -> tuple[int, int] | None:
    """The version of the kernel a ``qemu-system:``/``gdb://`` target will run, from its image
    (the grammar follows it); None for other targets and for symbol files without a banner."""
    if not choice.spec.startswith(("qemu-system:", "gdb:")):
        return None
    source = choice.options.get("kernel") or choice.options.get("symbols")
    if not source:
        return None
    from kpsdk.kernel.version import kernel_version

    return kernel_version(str(source))


def _kernel_btf(choice: TargetChoice, arch: Arch, kernel: tuple[int, int] | None) -> BtfArgs | None:
    """The BTF of a kernel that takes BTF fetch arguments (since 6.5), from its image."""
    from kpsdk.trace.grammar import BTF_ARGS_VERSION

    if kernel is None or kernel < BTF_ARGS_VERSION:
        return None
    from kpsdk.trace.btfsyntax import kernel_btf_args

    source = choice.options.get("kernel") or choice.options.get("symbols")
    return kernel_btf_args(str(source), arch) if source else None


def _kernel_symbols(choice: TargetChoice, parsed: list[ProbeDef], functions: str | None = None) -> None:
    source = choice.options.get("symbols") or choice.options.get("kernel")
    if not source or not (functions is not None or any(d.symbol is not None for d in parsed)):
        return
    from kpsdk.targets.live.qemu import load_symbols

    try:
        table = load_symbols(Path(str(source)))[0]
    except KpsdkError:
        return  # the target's opener reports an unreadable image
    check_symbols(parsed, table)
    if functions is not None:
        from kpsdk.trace.functions import matching_functions

        matching_functions(functions, table)  # none or too many: said before the boot


def check_symbols(parsed: list[ProbeDef], table: SymbolTable) -> None:
    """The kernel's BAD_PROBE_ADDR for a kprobe on a symbol ``table`` does not have."""
    for d in parsed:
        if d.op != "-" and d.symbol is not None and not d.is_uprobe and d.symbol not in table:
            word = d.text.split()[1]
            raise TraceDefinitionError("BAD_PROBE_ADDR", d.text, d.text.find(word),
                                       f"unknown symbol {d.symbol!r}" + did_you_mean(table.suggest(d.symbol)),
                                       "trace_kprobe")


def _hist_fields(parsed: list[ProbeDef], fields: list[str]) -> None:
    have = {a.name: a.type for d in parsed for a in d.args}
    for name in fields:
        argtype = have.get(name)
        if argtype is None:
            known = ", ".join(sorted(have)) or "none: the definitions fetch no arguments"
            raise typer.BadParameter(f"{name!r} is no event's field (fields: {known})", param_hint="--hist/--lhist")
        if argtype.is_string or argtype.display == "symbol":
            raise typer.BadParameter(f"{name!r} is a {argtype.name}: a histogram needs integers",
                                     param_hint="--hist/--lhist")
