"""Option values read the way the commands want them, a usage error (exit 2) when malformed.

Each helper raises :class:`typer.BadParameter` naming the option, so a typo is
reported like any other bad option, before a target is opened.  Shared by the
built-in commands and ``kpsdk trace``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import typer

from kpsdk.errors import ArgumentError, shown
from kpsdk.fixtures import ARCHS
from kpsdk.fixtures import path as fixture_path
from kpsdk.probe import location_fields, parse_number
from kpsdk.session import check_timeout


def elf_path(arg: str) -> Path:
    """An ELF path; a name of a bundled fixture (``x86_64``, ``riscv64``...) also works.

    A path with a NUL byte names no file: a usage error, before anything opens it.
    """
    if "\0" in arg:
        raise typer.BadParameter(f"{shown(arg)} contains a NUL byte: not a file name", param_hint="ELF")
    path = Path(arg)
    if not path.exists() and arg in ARCHS:
        return fixture_path(arg)
    return path


def parse_call(text: str) -> tuple[str, list[int]]:
    """``"add 2 3"``, ``"add(2, -3)"`` or ``"add 0x10"`` -> ``("add", [2, 3])``; a usage error otherwise."""
    try:
        words = shlex.split(text.replace("(", " ").replace(")", " ").replace(",", " "))
    except ValueError as e:  # shlex: "No closing quotation", "No escaped character"
        raise typer.BadParameter(f"{shown(text)}: {e}", param_hint="--call") from None
    if not words:
        raise typer.BadParameter("give the function and its arguments, e.g. --call 'add 2 3'", param_hint="--call")
    fn, args = words[0], []
    for w in words[1:]:
        value = parse_number(w)
        if value is None:
            raise typer.BadParameter(f"{shown(w)} is not an integer (decimal, 0x.., -5)", param_hint="--call")
        args.append(value)
    return fn, args


def refuse_unknown_options(words: list[str]) -> None:
    """A command that takes ``--call FN ARGS`` as words lets click pass the words it does not know
    (``-5`` is an argument); one that looks like an option is a mistyped or unknown option."""
    for word in words:
        if word.startswith("-") and len(word) > 1 and parse_number(word) is None:
            raise typer.BadParameter("no such option (-h lists them)", param_hint=shown(word))


def parse_where(spec: str, option: str = "--kprobe") -> dict[str, Any]:
    """``SYM``, ``SYM+OFF`` or ``0xADDR`` -> Kprobe keyword arguments (a usage error if malformed)."""
    try:
        return location_fields(spec)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint=option) from None


def file_location(spec: str, option: str) -> str:
    """Check the shape of ``PATH:SYM`` / ``PATH:0xOFF`` (a usage error if malformed); the file and
    symbol are read when the probe is made."""
    path, sep, where = spec.strip().rpartition(":")
    if not sep or not path or not where.strip():
        raise typer.BadParameter(f"{spec!r}: want PATH:SYM, PATH:SYM+0xOFF or PATH:0xOFF", param_hint=option)
    return spec.strip()


def split_commas(values: list[str] | None) -> list[str]:
    """Repeatable NAME[,NAME] options (``--noprobe a,b --noprobe c``) as one list."""
    return [x.strip() for v in values or [] for x in v.split(",") if x.strip()]


def check_seconds(param: typer.CallbackParam, value: float | None) -> float | None:
    """``--timeout``/``--duration``: Session.run's rules (``check_timeout``) as a usage error;
    ``inf`` is no limit."""
    if value is not None:
        try:
            check_timeout(value, param.opts[0] if param.opts else "S")
        except ArgumentError as e:
            raise typer.BadParameter(str(e)) from None
    return value


def check_out_path(path: Path, option: str = "--out") -> Path:
    """A file the command will write at the end (``--out``, ``--plot``), checked before anything runs
    and never opened here: an existing file is neither truncated nor changed until there is
    something to write, so a bad definition found later leaves it as it was."""
    try:
        if path.is_dir():
            raise typer.BadParameter(f"{str(path)!r} is a directory", param_hint=option)
        if path.exists() or path.is_symlink():
            if not os.access(path, os.W_OK):
                raise typer.BadParameter(f"{str(path)!r} is not writable", param_hint=option)
            return path
        parent = path.parent
        if not parent.is_dir():
            raise typer.BadParameter(f"{str(path)!r}: no directory {str(parent)!r} to create it in", param_hint=option)
        if not os.access(parent, os.W_OK | os.X_OK):
            raise typer.BadParameter(f"{str(path)!r}: cannot create files in {str(parent)!r}", param_hint=option)
    except (OSError, ValueError) as exc:  # a name the system refuses (too long, a NUL)
        raise typer.BadParameter(f"{str(path)!r}: {getattr(exc, 'strerror', None) or exc}", param_hint=option) from None
    return path


def file_identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file ``path`` names, links followed (None: no such file, or
    unreadable): two names of one file (a hard link, a symbolic link, ``./x`` and ``x``) are
    one identity."""
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _same_path(a: Path, b: Path) -> bool:
    """Whether two names resolve to one place, for a file that does not exist yet (nothing
    to stat): the links in their directories followed, as opening would follow them."""
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def refuse_inputs(out: Path, option: str, inputs: list[tuple[str, Path]]) -> None:
    """An output file (``--out``, ``--plot``) that is one of the command's inputs is a usage
    error, before anything is opened: writing there would destroy the program being traced, a
    library probed, the definitions or a kernel (gcc refuses ``-o`` onto an input the same way).
    ``inputs`` are ``(what it is, its path)``; they are compared by device and inode (a hard or
    symbolic link to an input is that input), and by resolved path where no file exists yet
    (two outputs given one name)."""
    mine = file_identity(out)
    for what, path in inputs:
        theirs = file_identity(path)
        same = mine == theirs if mine is not None and theirs is not None else _same_path(out, path)
        if same:
            raise typer.BadParameter(f"{str(out)!r} is {what} ({str(path)!r}): writing there would overwrite it; "
                                     "give another file", param_hint=option)


#: ``--bind``'s modes: read-only, or writes reaching the host
BIND_MODES = ("ro", "rw")
BIND_USAGE = "want HOST_DIR:GUEST_DIR[:ro|rw], GUEST_DIR absolute and without ':'"


def parse_bind(text: str) -> tuple[str, str, str]:
    """``HOST_DIR:GUEST_DIR[:ro|rw]`` -> ``(HOST_DIR, GUEST_DIR, mode)`` for ``kpsdk.open(bind=...)``,
    ``rw`` when no mode is given (as ``docker -v``); a usage error naming ``--bind`` otherwise.
    The text is split at its last ':'s: GUEST_DIR holds none, HOST_DIR is what is left before
    it (a ':' in it works).  The host directory must exist."""
    head, sep, last = text.rpartition(":")
    if sep and last in BIND_MODES:
        text, mode = head, last
    elif sep and ":" in head and not last.startswith("/"):  # HOST:GUEST:MODE with another MODE
        raise typer.BadParameter(f"{shown(last)} is not a mode: ro or rw ({BIND_USAGE})", param_hint="--bind")
    else:
        mode = "rw"
    host, sep, guest = text.rpartition(":")
    if not sep or not host or not guest:
        raise typer.BadParameter(f"{shown(text)}: {BIND_USAGE}", param_hint="--bind")
    if "\0" in host or "\0" in guest:
        raise typer.BadParameter(f"{shown(text)} contains a NUL byte: not a directory name", param_hint="--bind")
    if not guest.startswith("/") or ".." in guest.split("/"):
        raise typer.BadParameter(f"{shown(guest)}: the guest directory must be an absolute path without '..'",
                                 param_hint="--bind")
    try:
        is_dir = os.path.isdir(host)
    except (OSError, ValueError):
        is_dir = False
    if not is_dir:
        raise typer.BadParameter(f"the host directory {shown(host)} does not exist or is not a directory",
                                 param_hint="--bind")
    return host, guest, mode


def parse_binds(values: list[str] | None) -> list[tuple[str, str, str]] | None:
    """Every ``--bind`` parsed (:func:`parse_bind`), then checked together as ``kpsdk.open`` checks
    them (binds at one guest directory, or one inside another, hide each other): None when none."""
    if not values:
        return None
    binds = [parse_bind(v) for v in values]
    from kpsdk.targets.unicorn.linux import check_binds

    try:
        check_binds(binds)
    except ArgumentError as e:
        raise typer.BadParameter(str(e).removeprefix("elf: "), param_hint="--bind") from None
    return binds
