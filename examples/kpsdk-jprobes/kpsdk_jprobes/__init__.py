"""kpsdk-jprobes: an out-of-tree kpsdk plugin adding the ``jprobe`` probe type.

A jprobe (Linux ``Documentation/kprobes.txt`` sections 1.2 and 4.2) sits on a
function's entry, and its handler receives the probed function's arguments as
if it had the same signature::

    import kpsdk

    s = kpsdk.open("elf:prog")

    def on_sum7(a, b, c, d, e, f, g):
        print("sum7", a, b, c, d, e, f, g)

    s.register_jprobe(kpsdk.Jprobe(symbol_name="sum7", entry=on_sum7))
    s.run()

The arguments are read with the session's calling convention
(:meth:`kpsdk.regs.PtRegs.arg`), as many as ``entry`` has positional
parameters.  They are unsigned words unless the parameter is annotated ``int``
(or ``signed=True`` is given), in which case they are sign-extended from the
word size.  As in the kernel the handler's return value is ignored and the
probed function then runs normally.

This module is a pluggy plugin loaded from the ``kpsdk`` entry-point group
under the name ``jprobes``: it implements ``kpsdk_probe_types`` (the probe
type, which gives sessions ``register_jprobe``, ``unregister_jprobe(s)``,
``enable_jprobe``, ``disable_jprobe``, the decorator ``s.jprobe("sym")`` and
``kpsdk.Jprobe``) and ``kpsdk_cli`` (the ``kpsdk jprobe`` command).
"""

# No ``from __future__ import annotations`` here: typer reads the annotations
# of the CLI command, defined in a function, and needs them evaluated.

import errno
import inspect
import string
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from kpsdk import KprobeError, hookimpl
from kpsdk.plugins.kprobes import Kprobe
from kpsdk.probe import FaultHandler, ProbeType, location_fields

if TYPE_CHECKING:
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session

__all__ = ["JPROBE", "Jprobe"]

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Jprobe(Kprobe):
    """``struct jprobe``: a probe on a function entry whose handler gets its arguments.

    :param symbol_name: the probed function (or give ``addr``, its entry address).
    :param offset: must be 0: a jprobe only goes on a function's first
        instruction (anything else is ``EINVAL`` at registration).
    :param entry: ``entry(a, b, ...)``, called with the probed function's
        arguments at each hit; what it returns is ignored.
    :param nargs: how many arguments to pass; default: the number of
        positional parameters of ``entry`` (required if it takes ``*args``).
    :param signed: sign-extend every argument from the word size (parameters
        annotated ``int`` are sign-extended anyway); else they are unsigned.
    :param fault_handler: as for a kprobe; called if ``entry`` raises.
    :param flags: ``KPROBE_FLAG_DISABLED`` to register it disabled.
    """

    letter = "j"

    def __init__(
        self,
        *,
        symbol_name: str | None = None,
        offset: int = 0,
        addr: int | None = None,
        entry: Callable[..., Any] | None = None,
        nargs: int | None = None,
        signed: bool = False,
        fault_handler: FaultHandler | None = None,
        flags: int = 0,
    ) -> None:
        if entry is None or not callable(entry):
            raise TypeError("Jprobe needs entry=, a function taking the probed function's arguments")
        super().__init__(symbol_name=symbol_name, offset=offset, addr=addr, pre_handler=_jprobe_pre_handler,
                         fault_handler=fault_handler, flags=flags)
        self.entry = entry
        self.signed = signed
        #: per argument passed to ``entry``: sign-extend it?
        self.arg_signed: tuple[bool, ...] = _arg_signedness(entry, nargs, signed)
        self._word_bits = 0  # set at registration, from the session's architecture

    @property
    def nargs(self) -> int:
        return len(self.arg_signed)


def _is_int(annotation: object) -> bool:
    # "int" when the handler's module uses ``from __future__ import annotations``
    return annotation is int or annotation == "int"


def _arg_signedness(entry: Callable[..., Any], nargs: int | None, signed: bool) -> tuple[bool, ...]:
    """Read ``entry``'s signature once: how many arguments, and which are signed."""
    if nargs is not None and nargs < 0:
        raise ValueError(f"nargs must be >= 0, not {nargs}")
    try:
        sig = inspect.signature(entry)
    except (TypeError, ValueError):
        if nargs is None:
            raise TypeError(f"cannot read the signature of {entry!r}: give nargs=") from None
        return (signed,) * nargs
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    var = next((p for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    kwonly = [p.name for p in params
              if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is inspect.Parameter.empty]
    if kwonly:
        raise TypeError(f"entry {entry!r} has keyword-only parameters a jprobe cannot fill: {', '.join(kwonly)}")
    if nargs is None:
        if var is not None:
            raise TypeError(f"entry {entry!r} takes *{var.name}: give nargs= (how many arguments to pass)")
        nargs = len(positional)
    required = sum(p.default is inspect.Parameter.empty for p in positional)
    if nargs < required or (nargs > len(positional) and var is None):
        raise TypeError(f"entry {entry!r} cannot be called with {nargs} arguments")
    out = []
    for i in range(nargs):
        param = positional[i] if i < len(positional) else var
        assert param is not None
        out.append(signed or _is_int(param.annotation))
    return tuple(out)


def _jprobe_pre_handler(p: Jprobe, regs: "PtRegs") -> int:
    """The kprobe pre_handler of every jprobe: decode the arguments, call ``entry``."""
    bits = p._word_bits
    args = []
    for n, sign in enumerate(p.arg_signed):
        value = regs.arg(n)
        if sign and value >> (bits - 1):
            value -= 1 << bits
        args.append(value)
    p.entry(*args)
    return 0  # never change the path: the probed function runs normally


# -- the probe type --------------------------------------------------------------------------

def register(session: "Session", probe: Jprobe) -> None:
    manager = session.target.manager
    addr = manager.resolve(probe)  # EINVAL/ENOENT as for a kprobe
    if probe.offset:
        raise KprobeError(errno.EINVAL,
                          f"a jprobe goes on a function entry, not {probe.where()} (offset must be 0)")
    thumb = any(iset.thumb_bit for iset in session.arch.isets)
    start = addr & ~1 if thumb else addr
    sym = session.symbols.containing(start)
    if sym is None or sym.kind != "func" or sym.address != start:
        raise KprobeError(errno.EINVAL,
                          f"{session.symbols.format(start)} ({addr:#x}) is not the entry of a function")
    probe._word_bits = 8 * session.arch.word_size
    manager.add(probe, addr)


def unregister(session: "Session", probe: Jprobe) -> None:
    session.target.manager.remove(probe)


JPROBE = ProbeType(
    name="jprobe",
    probe_class=Jprobe,
    register=register,
    unregister=unregister,
    exports={"Jprobe": Jprobe},
    decorator_field="entry",
    description="a handler on a function entry that receives the function's arguments",
)


@hookimpl
def kpsdk_probe_types() -> list[ProbeType]:
    return [JPROBE]


# -- the CLI command -------------------------------------------------------------------------

def arg_names(n: int) -> list[str]:
    """``a``, ``b``, ... ``z``, then ``arg26``, ``arg27``..."""
    return [string.ascii_lowercase[i] if i < 26 else f"arg{i}" for i in range(n)]


@hookimpl
def kpsdk_cli(app: Any) -> None:
    import typer  # only when the CLI is built: importing kpsdk stays light

    def jprobe(
        elf: Annotated[str, typer.Argument(metavar="ELF", help="The ELF program (or a bundled one: x86_64, arm...).")],
        func: Annotated[str, typer.Argument(metavar="FUNC", help="The function to put the jprobe on (its entry).")],
        nargs: Annotated[int | None, typer.Option(
            "--nargs", min=0, help="How many arguments FUNC takes (default: 4, or the number of --call values).",
        )] = None,
        call: Annotated[str | None, typer.Option(
            "--call", metavar="ARGS",
            help="Call FUNC with these integers (\"1 2 0x3\") instead of running the program.",
        )] = None,
        signed: Annotated[bool, typer.Option("--signed", help="Print the arguments as signed words.")] = False,
        timeout: Annotated[float | None, typer.Option("--timeout", help="Stop after this many seconds.")] = None,
    ) -> None:
        """Print FUNC(a=..., b=...) at every call of FUNC, then the program's output."""
        import kpsdk
        from kpsdk import fixtures

        values: list[int] = []
        if call is not None:
            try:
                values = [int(v, 0) for v in call.replace(",", " ").split()]
            except ValueError as e:
                raise typer.BadParameter(f"want integers: {e}", param_hint="--call") from None
        n = nargs if nargs is not None else (len(values) if call is not None else 4)
        names = arg_names(n)

        def show(*args: int) -> None:
            typer.echo(f"{func}({', '.join(f'{k}={v}' for k, v in zip(names, args, strict=True))})")

        path = Path(elf)
        if not path.exists() and elf in fixtures.ARCHS:  # "x86_64": a bundled program, as elsewhere in kpsdk
            path = fixtures.path(elf)
        with kpsdk.open(f"elf:{path}") as s:
            # SYM+OFF is parsed as s.jprobe("SYM+OFF") does, so that it is EINVAL, not another address
            try:
                where = location_fields(func)
            except ValueError as e:
                raise typer.BadParameter(str(e), param_hint="FUNC") from None
            s.register_jprobe(Jprobe(**where, entry=show, nargs=n, signed=signed))
            if call is not None:
                ret = s.call(func, *values)
                typer.echo(s.console, nl=False)
                typer.echo(f"{func} returned {ret}")
                return
            status = s.run(timeout)
            typer.echo(s.console, nl=False)
        if status:
            raise typer.Exit(status)

    app.command("jprobe")(jprobe)
