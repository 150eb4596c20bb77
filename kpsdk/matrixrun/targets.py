"""The targets of a matrix: what each one opens, what it is called, and its identity for the cache.

A :class:`MatrixTarget` is one ``kpsdk.open(spec, **options)`` call and the limits of
its run.  The builders make the lists the issue names:

- :func:`programs`: program paths and globs (sorted), each with the same arguments,
  standard input and sysroot; :func:`targets_file`: a file of targets, one a line
  (``PROG ARG...`` as a shell splits it, or a JSON object for anything else);
- :func:`inputs`: one program over many inputs, each input its standard input or an
  argument (``{}`` in the arguments, as ``xargs -I{}`` and GNU parallel write it);
- :func:`kernels`: ``qemu-system:ARCH`` x Debian release x flavour, booted with the kernel
  and the busybox initramfs :mod:`kpsdk.fixtures.kernel` fetches into kpsdk's cache
  (:func:`resolve_kernels` does that once, before any target runs, so that no worker
  downloads a kernel per target).

A target's :func:`digest` is what its results depend on: its spec and options, and the
contents of the files it names (the program, the kernel, the initramfs, the standard
input, each argument that names a file); a sysroot counts by its path (hashing a whole
tree per run would cost more than most runs).  The cache keys a result by this digest and the script's.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kpsdk.errors import ArgumentError, shown

#: the target kinds whose runs are live (QEMU, gdb): longer default limits
LIVE_SCHEMES = ("qemu-user", "qemu-system", "gdb")
#: default run time limits (``session.run(timeout=...)``): a program in Unicorn, a live target
PROGRAM_TIMEOUT = 60.0
LIVE_TIMEOUT = 300.0
#: what the whole target (open, run, close) gets beyond its run's limit before it is killed:
#: a program's loading, a kernel's boot to start_kernel (at most 120 s) and QEMU's reaping
PROGRAM_MARGIN = 30.0
LIVE_MARGIN = 180.0
#: ``kpsdk.open`` options whose value names a file the results depend on (hashed by content)
FILE_OPTIONS = ("kernel", "initrd", "symbols")
#: the largest file hashed by content for a digest (bigger ones count by path, size and mtime)
HASH_LIMIT = 1 << 30


@dataclass(frozen=True)
class KernelChoice:
    """A kernel of the fixtures (:mod:`kpsdk.fixtures.kernel`): Debian's kernel for ``arch``,
    from the Debian release that ships the ``release`` series (``6.1``, ``6.12``; None: the
    arch's default), of ``flavour`` (the ``linux-image-FLAVOUR`` metapackage; None: the arch's
    default, ``amd64``, ``armmp``...)."""

    arch: str
    release: str | None = None
    flavour: str | None = None

    @property
    def label(self) -> str:
        """``qemu-system:x86_64``, ``qemu-system:x86_64@6.12``, ``qemu-system:x86_64@6.12+cloud-amd64``."""
        return (f"qemu-system:{self.arch}" + (f"@{self.release}" if self.release else "")
                + (f"+{self.flavour}" if self.flavour else ""))


@dataclass(frozen=True)
class MatrixTarget:
    """One target of a matrix: ``kpsdk.open(spec, args=..., stdin=..., sysroot=..., **options)``.

    :param spec: a target spec (``elf:/bin/ls``, ``qemu-user:/bin/ls``, ``qemu-system:arm``).
    :param args: the program's arguments (``argv[1:]``).
    :param stdin: a file the program reads as its standard input (read by the worker).
    :param sysroot: the directory a program in Unicorn sees as ``/`` (``"/"``: the host's).
    :param cwd: the program's working directory (inside its sysroot; default: kpsdk's, ``/``).
    :param options: any other :func:`kpsdk.open` option (``kernel``, ``initrd``, ``append``, ``env``...).
    :param name: what the summary, the ``target`` key and the outputs call it (default: derived
        from the spec and arguments); unique within a matrix.
    :param timeout: the run's time limit, seconds (``session.run(timeout=...)``; default 60 for a
        program in Unicorn, 300 for a live target).  Reaching it ends the target as ``timeout``
        with the records so far.
    :param limit: the whole target's wall-clock limit (open, run, close), after which its
        process is stopped (SIGTERM, then SIGKILL); default ``timeout`` + 30 s (live: + 180 s).
    :param kernel: a kernel of the fixtures to boot; :func:`resolve_kernels` fills ``kernel``
        and ``initrd`` in ``options`` from it.
    """

    spec: str
    args: tuple[str, ...] = ()
    stdin: str | None = None
    sysroot: str | None = None
    cwd: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    name: str = ""
    timeout: float | None = None
    limit: float | None = None
    kernel: KernelChoice | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.spec, str) or ":" not in self.spec:
            raise ArgumentError(f"target spec {shown(self.spec)}: want 'elf:PATH', 'qemu-system:ARCH'...")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise ArgumentError(f"args={shown(self.args)}: want a list of str")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "options", dict(self.options))
        # paths as every worker reads them: absolute (a Dask worker's working directory is its own)
        scheme, _, rest = self.spec.partition(":")
        if scheme in ("elf", "qemu-user") and rest and not os.path.isabs(rest) and os.path.exists(rest):
            object.__setattr__(self, "spec", f"{scheme}:{os.path.abspath(rest)}")
        if self.stdin is not None:
            object.__setattr__(self, "stdin", os.path.abspath(self.stdin))
        for what, value in (("timeout", self.timeout), ("limit", self.limit)):
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ArgumentError(f"{what}={shown(value)}: want a positive number of seconds")
        if not self.name:
            object.__setattr__(self, "name", self._default_name())

    def _default_name(self) -> str:
        if self.kernel is not None:
            return self.kernel.label
        scheme, _, rest = self.spec.partition(":")
        words = [rest if scheme == "elf" else self.spec, *self.args]
        return shlex.join(words) + (f" < {self.stdin}" if self.stdin is not None else "")

    @property
    def scheme(self) -> str:
        return self.spec.partition(":")[0]

    @property
    def live(self) -> bool:
        return self.scheme in LIVE_SCHEMES

    @property
    def run_timeout(self) -> float:
        """The run's limit in seconds (the default for the kind when not given)."""
        if self.timeout is not None:
            return float(self.timeout)
        return LIVE_TIMEOUT if self.live else PROGRAM_TIMEOUT

    @property
    def hard_limit(self) -> float:
        """The whole target's limit in seconds."""
        if self.limit is not None:
            return float(self.limit)
        return self.run_timeout + (LIVE_MARGIN if self.live else PROGRAM_MARGIN)

    def open_options(self) -> dict[str, Any]:
        """The keyword options of ``kpsdk.open`` (the standard input read from its file)."""
        options = dict(self.options)
        if self.args:
            options["args"] = list(self.args)
        if self.sysroot is not None:
            options["sysroot"] = self.sysroot
        if self.cwd is not None:
            options["cwd"] = self.cwd
        if self.stdin is not None:
            options["stdin"] = Path(self.stdin).read_bytes()
        return options


def as_target(item: MatrixTarget | str | os.PathLike[str], **common: Any) -> MatrixTarget:
    """A target from what :func:`kpsdk.matrix` takes: a :class:`MatrixTarget`, a spec
    (``elf:PATH``, ``qemu-user:PATH``, ``qemu-system:ARCH[@RELEASE][+FLAVOUR]``: a kernel of the
    fixtures), or a program's path (run in Unicorn).  ``common`` fills the fields a spec
    or path does not say (``args``, ``sysroot``...)."""
    if isinstance(item, MatrixTarget):
        return item
    if isinstance(item, os.PathLike):
        item = os.fspath(item)
    if not isinstance(item, str):
        raise ArgumentError(f"target {shown(item)}: want a MatrixTarget, a spec or a program's path")
    scheme, sep, rest = item.partition(":")
    if sep and scheme == "qemu-system" and "kernel" not in common.get("options", {}):
        return MatrixTarget(f"qemu-system:{_kernel_choice(rest).arch}", kernel=_kernel_choice(rest),
                            **{k: v for k, v in common.items() if k not in ("args", "stdin", "sysroot", "cwd")})
    if sep and scheme in ("elf", "qemu-user", "qemu-system", "gdb", "unicorn"):
        return MatrixTarget(item, **common)
    return MatrixTarget(f"elf:{item}", **common)


def _kernel_choice(text: str) -> KernelChoice:
    """``ARCH[@RELEASE][+FLAVOUR]``."""
    rest, _, flavour = text.partition("+")
    arch, _, release = rest.partition("@")
    if not arch:
        raise ArgumentError(f"qemu-system:{text}: want qemu-system:ARCH[@RELEASE][+FLAVOUR]")
    return KernelChoice(arch, release or None, flavour or None)


def programs(paths: Iterable[str | os.PathLike[str]], *, args: Sequence[str] = (), stdin: str | None = None,
             sysroot: str | None = None, spec: str = "elf", **fields: Any) -> list[MatrixTarget]:
    """Programs by path or glob (``/usr/bin/*``: its matches, sorted; a glob that matches
    nothing is an error, a path that does not exist is left to the target to report),
    each with these ``args``, ``stdin``, ``sysroot`` (and other :class:`MatrixTarget` fields);
    ``spec="qemu-user"`` runs them under qemu-user instead of Unicorn."""
    out: list[MatrixTarget] = []
    for item in paths:
        text = os.fspath(item)
        if glob.has_magic(text):
            matches = sorted(glob.glob(text))
            if not matches:
                raise ArgumentError(f"{text!r} matches no file")
        else:
            matches = [text]
        out += [MatrixTarget(f"{spec}:{m}", args=tuple(args), stdin=stdin, sysroot=sysroot, **fields)
                for m in matches]
    return out


def inputs(program: str, files: Iterable[str | os.PathLike[str]], *, args: Sequence[str] = (),
           sysroot: str | None = None, spec: str = "elf", **fields: Any) -> list[MatrixTarget]:
    """One program over many inputs (paths or globs, sorted): each input is the program's
    standard input, or, where ``args`` hold ``{}``, put there instead."""
    names = programs(files, spec="elf")  # the globs' expansion, in order
    out = []
    for entry in names:
        path = entry.spec.partition(":")[2]
        if any("{}" in a for a in args):
            out.append(MatrixTarget(f"{spec}:{program}", args=tuple(a.replace("{}", path) for a in args),
                                    sysroot=sysroot, **fields))
        else:
            out.append(MatrixTarget(f"{spec}:{program}", args=tuple(args), stdin=path, sysroot=sysroot, **fields))
    return out


def kernels(archs: Iterable[str], releases: Iterable[str | None] = (None,),
            flavours: Iterable[str | None] = (None,), **fields: Any) -> list[MatrixTarget]:
    """``qemu-system:ARCH`` x release x flavour, each Debian's kernel of the fixtures with its
    busybox initramfs (the README's workload: the opens that fail and three forks)."""
    release_list, flavour_list = list(releases) or [None], list(flavours) or [None]
    return [MatrixTarget(f"qemu-system:{arch}", kernel=KernelChoice(arch, release, flavour), **fields)
            for arch in archs for release in release_list for flavour in flavour_list]


def targets_file(path: str | os.PathLike[str], **common: Any) -> list[MatrixTarget]:
    """Targets from a file, one a line; blank lines and ``#`` comments skipped.  A line is
    ``PROG ARG...`` (split as a shell does; PROG a path or a spec), or a JSON object with
    the fields of :class:`MatrixTarget` (``{"spec": "elf:/bin/sort", "args": ["-r"], "stdin": "in.txt"}``;
    ``"program": PATH`` for ``"spec": "elf:PATH"``)."""
    out = []
    text = Path(path).read_text()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{os.fspath(path)}:{number}"
        if stripped.startswith("{"):
            out.append(_json_target(stripped, where, common))
            continue
        try:
            words = shlex.split(stripped)
        except ValueError as exc:
            raise ArgumentError(f"{where}: {exc}") from None
        out.append(as_target(words[0], **{**common, "args": tuple(words[1:])}))
    return out


def _json_target(line: str, where: str, common: Mapping[str, Any]) -> MatrixTarget:
    try:
        fields = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ArgumentError(f"{where}: not a JSON object: {exc}") from None
    if not isinstance(fields, dict):
        raise ArgumentError(f"{where}: want a JSON object")
    program = fields.pop("program", None)
    if program is not None:
        fields.setdefault("spec", f"elf:{program}")
    known = set(MatrixTarget.__dataclass_fields__) - {"kernel"}
    unknown = set(fields) - known
    if unknown:
        raise ArgumentError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; want {', '.join(sorted(known))}")
    if "spec" not in fields:
        raise ArgumentError(f"{where}: name the target: \"spec\" or \"program\"")
    try:
        return as_target(fields.pop("spec"), **{**common, **fields})
    except TypeError as exc:
        raise ArgumentError(f"{where}: {exc}") from None


def check_names(targets: Sequence[MatrixTarget]) -> None:
    """Target names are the keys of the outputs: two alike are refused, naming them."""
    seen: dict[str, int] = {}
    for index, target in enumerate(targets):
        if target.name in seen:
            raise ArgumentError(f"targets {seen[target.name] + 1} and {index + 1} are both named {target.name!r}: "
                                "give one a name (MatrixTarget(name=...))")
        seen[target.name] = index


def resolve_kernels(targets: Sequence[MatrixTarget], log: Any = None) -> list[MatrixTarget]:
    """Each target naming a kernel of the fixtures, with its ``kernel`` and ``initrd`` options
    filled: fetched into kpsdk's cache here, once per kernel (no worker downloads one).  A
    kernel that cannot be fetched raises here, before any target runs."""
    from kpsdk.fixtures import kernel as fixtures

    made: dict[KernelChoice, tuple[str, str]] = {}
    out = []
    for target in targets:
        choice = target.kernel
        if choice is None or "kernel" in target.options:
            out.append(target)
            continue
        if choice not in made:
            say = log or (lambda _msg: None)
            image = fixtures.fetch_arch_kernel(choice.arch, release=choice.release, flavour=choice.flavour, log=say)
            initrd = fixtures.initramfs_for(choice.arch, log=say)
            made[choice] = (str(image), str(initrd))
        image_path, initrd_path = made[choice]
        out.append(replace(target, options={**target.options, "kernel": image_path, "initrd": initrd_path}))
    return out


def digest(target: MatrixTarget) -> str:
    """The target's identity for the cache: spec, options, limits and the contents of its files."""
    files: dict[str, str] = {}
    scheme, _, rest = target.spec.partition(":")
    if scheme in ("elf", "qemu-user"):
        files["program"] = file_digest(rest)
    if target.stdin is not None:
        files["stdin"] = file_digest(target.stdin)
    for number, arg in enumerate(target.args, start=1):
        path = _argument_file(arg, target.sysroot, target.cwd)
        if path is not None:
            files[f"arg{number}"] = file_digest(path)
    for option in FILE_OPTIONS:
        value = target.options.get(option)
        if isinstance(value, str | os.PathLike):
            files[option] = file_digest(os.fspath(value))
    body = {"spec": target.spec, "args": list(target.args), "sysroot": target.sysroot, "cwd": target.cwd,
            "options": {k: _plain(v) for k, v in sorted(target.options.items())},
            "timeout": target.run_timeout, "files": files}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _argument_file(arg: str, sysroot: str | None, cwd: str | None) -> str | None:
    """The file an argument names, as the program sees it (inside its sysroot, from its working
    directory), when it is one."""
    if "\0" in arg or not arg or arg.startswith("-"):
        return None
    seen = os.path.join(cwd or "/", arg)
    path = os.path.join(sysroot, seen.lstrip("/")) if sysroot is not None else seen
    return path if os.path.isfile(path) else None


def _plain(value: Any) -> Any:
    """An option's value as JSON for a digest (bytes by their hash)."""
    if isinstance(value, bytes):
        return "sha256:" + hashlib.sha256(value).hexdigest()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value if isinstance(value, str | int | float | bool | None) else repr(value)


def file_digest(path: str) -> str:
    """A file's SHA256 (a file too big for that: its size and mtime; a missing one: "missing",
    which its run reports)."""
    try:
        st = os.stat(path)
        if st.st_size > HASH_LIMIT:
            return f"size={st.st_size},mtime={st.st_mtime_ns}"
        with open(path, "rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
