"""Small C helpers built with the system compiler at first use, cached, and checked before use.

kpsdk keeps a few hot paths out of Python (the QEMU TCG plugin, the Unicorn scheduler's
quantum counter): C sources shipped in the package, compiled with ``gcc`` the first time they
are needed into kpsdk's private cache (:func:`kpsdk.cache.private_dir`), named by the SHA256
of their source.  A shared object is code kpsdk loads into a process, so a cached one is used
only when it can be trusted:

* the cache directory is this user's and writable by nobody else (``private_dir``);
* the object is a regular file (not a link) of this user's, writable by nobody else;
* its bytes hash to what kpsdk recorded when it built it, in a record file that lives in the
  same private directory and follows the same rules (whoever could change the object could
  not have written the record: only this user can write there).

Anything else (a planted, swapped or loosened file) is built again, never loaded.  Where the
cache directory cannot be used, the object is built in one private temporary directory per
process and name, removed when the interpreter exits.

The name of a build is the SHA256 of the source's bytes and the flags, each length-prefixed
(two different sources and flag lists never share a name), and gcc compiles a private copy of
exactly the bytes that were hashed: a source changed while it builds cannot be cached under
the old source's name.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.errors import TargetError, ToolMissingError

#: the largest shared object kpsdk builds (a bound on what a check reads)
MAX_OBJECT = 16 << 20

_temporary: dict[str, Path] = {}


def _trusted(path: Path, digest: str) -> bool:
    """``path`` is a regular file of this user's that nobody else can write, whose SHA256 is ``digest``."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    data = read_private(path.parent, path.name, MAX_OBJECT)
    return data is not None and hashlib.sha256(data).hexdigest() == digest


def _scratch(name: str) -> Path:
    """A private directory for this process's builds when the cache cannot be used (one per
    name, removed at exit: an unusable cache must not leave a directory per build behind)."""
    where = _temporary.get(name)
    if where is None:
        where = Path(tempfile.mkdtemp(prefix=f"kpsdk-{name}-"))
        _temporary[name] = where
        atexit.register(shutil.rmtree, where, True)
    return where


def build_shared_object(name: str, source: Path, what: str, flags: Sequence[str] = (),
                        headers: Sequence[Path] = ()) -> Path:
    """The shared object of ``source``, built once per source text into kpsdk's cache
    directory ``name`` and checked before it is returned (see the module docstring).
    ``headers`` are files it includes from elsewhere (``kpsdk/fetchprog.h``): hashed into the
    build's name with the source, and copied beside it, so a changed header is built again.

    ``what`` names it in errors ("kpsdk's QEMU plugin").  Raises
    :class:`~kpsdk.errors.ToolMissingError` without ``gcc`` and
    :class:`~kpsdk.errors.TargetError` when it does not compile.
    """
    code = source.read_bytes()
    included = [(header.name, header.read_bytes()) for header in headers]
    key = _build_key(code, flags, included)
    stem = f"{source.stem}-{key}"
    cache = private_dir(name)
    directory = cache if cache is not None else _scratch(name)
    out = directory / f"{stem}.so"
    record = f"{stem}.sha256"
    known = read_private(directory, record, 128)
    if known is not None and _trusted(out, known.decode("ascii", "replace").strip()):
        return out
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ToolMissingError(f"gcc (to build {what})", "gcc")
    work = Path(tempfile.mkdtemp(dir=directory, prefix=f".{stem}-"))
    try:
        copy, tmp = work / source.name, work / f"{stem}.so"
        copy.write_bytes(code)  # what was hashed is what is built
        for header_name, header_code in included:
            (work / header_name).write_bytes(header_code)
        proc = subprocess.run([gcc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-Wall", *flags,
                               "-I", str(work), "-I", str(source.parent), "-o", str(tmp), str(copy)],
                              capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode != 0:
            errors = proc.stderr.strip().replace(str(copy), str(source))
            raise TargetError(f"gcc could not build {what} {source}: {errors[-2000:]}")
        os.chmod(tmp, 0o700)
        digest = hashlib.sha256(tmp.read_bytes()).hexdigest()
        os.replace(tmp, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_private(directory, record, digest.encode("ascii"))
    return out


def _build_key(code: bytes, flags: Sequence[str], headers: Sequence[tuple[str, bytes]] = ()) -> str:
    """The build's name: the SHA256 of the source, each flag and each header's name and bytes,
    every part length-prefixed (no header: the name the source alone always had)."""
    h = hashlib.sha256()
    extra = [part for name, data in headers for part in (name.encode("utf-8", "surrogateescape"), data)]
    for part in (code, *(flag.encode("utf-8", "surrogateescape") for flag in flags), *extra):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]
