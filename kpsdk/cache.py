"""kpsdk's cache directory, and cache files nobody else can plant or change.

Everything kpsdk keeps between runs (Debian's kernel, initramfs images, the symbols decoded
from a kernel image) lives under :func:`cache_root`.  Derived data (the kallsyms cache) goes
in a private subdirectory (:func:`private_dir`) and is read back only from a regular file
this user owns, never through a symbolic link (:func:`read_private`), and written through a
:mod:`tempfile` with a random name that is then renamed over the old entry
(:func:`write_private`): a link planted at any name kpsdk uses is replaced, never followed.
What is read back must still be validated by the caller: a cache file can be truncated by a
full disk or a crash.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from kpsdk.binfmt.files import read_regular
from kpsdk.errors import ImageFormatError


def cache_root() -> Path:
    """kpsdk's cache directory: ``$KPSDK_CACHE``, else ``$XDG_CACHE_HOME/kpsdk``, else ``~/.cache/kpsdk``.

    A relative ``$XDG_CACHE_HOME`` is ignored, as the XDG Base Directory specification says.
    """
    env = os.environ.get("KPSDK_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "kpsdk"
    return Path.home() / ".cache" / "kpsdk"


def _owned_by_me(st: os.stat_result, kind: Callable[[int], bool]) -> bool:
    """Of the right kind, this user's, and writable by no one else."""
    return kind(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _unsafe_ancestor(path: Path) -> str | None:
    """Why a directory above ``path`` lets someone else swap ``path`` (None when none does).

    A directory that another user can write can have its entries renamed: whoever can write
    ``~/.cache`` can move kpsdk's checked cache directory aside and put their own in its place
    between the check and the use.  So every directory above, as written and as resolved, must
    belong to this user or to root and be writable by no one else, unless it is sticky (``/tmp``:
    there only an entry's owner may rename it), as OpenSSH's ``StrictModes`` checks a path.
    """
    seen: set[str] = set()
    for start in (path.parent, Path(os.path.realpath(path.parent))):
        for parent in (start, *start.parents):
            key = str(parent)
            if key in seen:
                continue
            seen.add(key)
            try:
                st = os.stat(parent)
            except OSError as e:
                return f"{parent}: {e.strerror}"
            if st.st_uid not in (0, os.getuid()):
                return f"{parent} belongs to another user (uid {st.st_uid})"
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
                return f"{parent} is group/world-writable without the sticky bit"
    return None


def unsafe_reason(path: Path) -> str | None:
    """Why ``path`` is no directory kpsdk may keep code in, or None when it is one: a real
    directory (not a symbolic link) of this user's that no one else can write, under
    directories no one else can rename it in (:func:`_unsafe_ancestor`)."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return e.strerror or str(e)
    if not _owned_by_me(st, stat.S_ISDIR):
        return ("not a directory of this user's that only they can write "
                "(a symbolic link, someone else's, or group/world-writable)")
    return _unsafe_ancestor(path)


def private_path(path: Path, warn: bool = True) -> Path | None:
    """``path``, created with mode 0700, when it is safe (:func:`unsafe_reason`); else ``None``
    (and a warning unless ``warn`` is False)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as e:
        if warn:
            warnings.warn(f"kpsdk: not caching in {path}: {e.strerror}", stacklevel=3)
        return None
    why = unsafe_reason(path)
    if why is not None:
        if warn:
            warnings.warn(f"kpsdk: not caching in {path}: {why}", stacklevel=3)
        return None
    return path


def private_dir(name: str) -> Path | None:
    """``<cache_root()>/<name>``, created with mode 0700; ``None`` (and a warning) when unsafe.

    Safe is a real directory (not a symbolic link), owned by this user and writable by no one
    else, under directories that only this user or root can change (:func:`unsafe_reason`):
    then no one else can put files in it, swap the ones kpsdk wrote, or swap the directory
    itself.  Callers go without their cache when it is not.
    """
    return private_path(cache_root() / name)


def read_private(directory: Path, name: str, limit: int) -> bytes | None:
    """The file ``name`` in ``directory`` if this user wrote it, else ``None``.

    Never through a symbolic link (``O_NOFOLLOW``); only a regular file owned by this user,
    writable by no one else, of at most ``limit`` bytes.
    """
    try:
        data, st = read_regular(directory / name, limit, follow_links=False)
    except (OSError, ImageFormatError):
        return None
    return data if _owned_by_me(st, stat.S_ISREG) else None


def write_private(directory: Path, name: str, data: bytes) -> None:
    """Make ``data`` the file ``name`` in ``directory``, atomically; failures are ignored.

    The bytes go to a :func:`tempfile.mkstemp` file (a random name opened with ``O_EXCL``:
    never an existing file or link) in the same directory, which ``os.replace`` then renames
    over ``name`` (a link there is replaced, not followed).  A cache only saves time, so a
    full disk or a read-only directory is not an error.
    """
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    except OSError:
        return
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, directory / name)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


class PrivateStore:
    """Files by key in the private directory ``<cache_root()>/<name>``, under the rules above:
    an index store for the DWARF reader (``kpsdk.binfmt.dwarf.IndexStore``: ``load``/``save``).

    A key is a file name (a build ID and a suffix); one with a path separator or a leading dot
    is refused (None, nothing saved), so no key names a file outside the directory.  Whatever
    ``load`` returns the caller checks, as :func:`read_private` says.
    """

    #: the most one entry may hold (an index of a kernel's DWARF is tens of megabytes)
    LIMIT = 1 << 30

    def __init__(self, name: str) -> None:
        self.name = name

    @staticmethod
    def _safe(key: str) -> bool:
        return bool(key) and "/" not in key and "\0" not in key and not key.startswith(".")

    def load(self, key: str) -> bytes | None:
        directory = private_dir(self.name) if self._safe(key) else None
        return read_private(directory, key, self.LIMIT) if directory is not None else None

    def save(self, key: str, data: bytes) -> None:
        directory = private_dir(self.name) if self._safe(key) else None
        if directory is not None:
            write_private(directory, key, data)
