"""``kpsdk --help`` from a record of its own output: the same bytes, without typer, rich or the plugins.

The top-level help is typer's rich page of every command, which needs typer,
rich (typer's ``rich_utils`` imports rich's markdown renderer and traceback),
the plugin registry and every plugin's ``kpsdk_cli`` hook: ~300 ms of imports
for a page that changes only when what made it changes.  So the first
``kpsdk --help`` (or ``-h``) is made as always while the bytes it writes are
recorded, and a later one made of the same inputs prints those bytes and
imports none of that (issue 19, item 5c).

What the page depends on, and so what a record is checked against:

* its *key*: the command line, the interpreter (``sys.executable``,
  ``sys.version``), ``sys.path``, the whole environment but ``PWD``,
  ``OLDPWD``, ``_`` and ``SHLVL`` (rich and typer read ``COLUMNS``, ``TERM``,
  ``NO_COLOR``, ``FORCE_COLOR``...; kpsdk reads ``KPSDK_DISABLE_PLUGIN_AUTOLOAD``),
  for each of stdin, stdout and stderr whether it is a terminal and its size,
  and stdout's encoding;
* every module file loaded when the page was made (path, mtime, size): kpsdk's
  own, typer's, rich's, each plugin's;
* the distributions installed in each ``sys.path`` directory (``*.dist-info``,
  ``*.egg-info``) and their ``entry_points.txt`` mtimes: where a new plugin's
  entry point would come from.

The record keeps the key only as a digest (BLAKE2b, 256 bits, of its JSON): the
environment holds secrets (tokens, passwords) that a help page has no business
writing to disk, and a digest tells a different environment from the same one
without holding it.  The module paths, sizes and mtimes are kept as they are.

Any difference is a miss: the page is made again and recorded.  Nothing is
recorded when the page wrote to stderr or did not exit with status 0.  The
record lives in ``<cache>/cli/help.json`` (:mod:`kpsdk.cache`'s rules: a private
directory, a regular file of this user's, written through a temporary file),
at most :data:`ENTRIES` pages; ``KPSDK_HELP_CACHE=0`` turns it off.  A record
that is not what this module writes is a miss, never an error.

The replay imports only :mod:`os`, :mod:`sys`, :mod:`json` and BLAKE2's C module
(``_blake2``, 0.3 ms; :mod:`hashlib` would load OpenSSL's, ~5 ms) (the
directory is found as :func:`kpsdk.cache.cache_root` finds it, without
:mod:`pathlib`).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from typing import Any, TextIO

#: the command lines whose output is recorded: the top-level help
HELP_ARGS = (["--help"], ["-h"])
#: the record file, in the ``cli`` directory of kpsdk's cache
DIRECTORY, NAME = "cli", "help.json"
#: its largest size read back
LIMIT = 4 << 20
#: pages kept (different terminals, widths, environments)
ENTRIES = 8
#: the record's format (a new format is a miss; 1 kept the key, environment included, in clear)
FORMAT = 2
#: ``KPSDK_HELP_CACHE=0``: neither replay nor record
SWITCH = "KPSDK_HELP_CACHE"
#: environment variables a shell changes between commands that the page does not read
_VOLATILE_ENV = frozenset(("PWD", "OLDPWD", "_", "SHLVL"))


def wanted(argv: list[str]) -> bool:
    """This command line prints the top-level help, and the cache is not switched off."""
    return argv in HELP_ARGS and os.environ.get(SWITCH, "1") != "0"


def key(argv: list[str]) -> str:
    """What the page is made of, besides files, as the digest the record keeps: the BLAKE2b
    (256 bits) of these values' JSON, so that no environment variable's value is written."""
    ttys: list[Any] = []
    for fd in (0, 1, 2):
        try:
            tty = os.isatty(fd)
            size: list[int] | None = list(os.get_terminal_size(fd))
        except OSError:
            tty, size = False, None
        ttys.append([tty, size])
    out = sys.stdout
    env = sorted([k, v] for k, v in os.environ.items() if k not in _VOLATILE_ENV)
    values = [FORMAT, list(argv), sys.executable, sys.version, list(sys.path), env, ttys,
              getattr(out, "encoding", None), getattr(out, "errors", None)]
    text = json.dumps(values, ensure_ascii=True).encode("ascii")
    return _blake2b(text, digest_size=32).hexdigest()


def _blake2b(data: bytes, digest_size: int) -> Any:
    """BLAKE2b from CPython's C module (0.3 ms to import), else :mod:`hashlib`'s."""
    try:
        from _blake2 import blake2b
    except ImportError:  # another Python: hashlib has it always
        from hashlib import blake2b
    return blake2b(data, digest_size=digest_size)


def directory() -> str:
    """``<kpsdk.cache.cache_root()>/cli``, as that function finds the root (without pathlib)."""
    root = os.environ.get("KPSDK_CACHE")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "kpsdk") if xdg and os.path.isabs(xdg) else \
            os.path.join(os.path.expanduser("~"), ".cache", "kpsdk")
    return os.path.join(root, DIRECTORY)


def _private(st: os.stat_result, kind: Callable[[int], bool]) -> bool:
    """As :mod:`kpsdk.cache`: of the right kind, this user's, writable by no one else."""
    return kind(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read_record() -> list[dict[str, Any]]:
    """The record's pages, or none where the record is missing, unsafe or not ours."""
    where = directory()
    try:
        if not _private(os.lstat(where), stat.S_ISDIR):
            return []
        fd = os.open(os.path.join(where, NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not _private(st, stat.S_ISREG) or st.st_size > LIMIT:
            return []
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(LIMIT + 1)
    except OSError:
        return []
    finally:
        os.close(fd)
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError), or nested absurdly
        return []
    if not isinstance(record, dict) or record.get("format") != FORMAT or not isinstance(record.get("pages"), list):
        return []
    return [page for page in record["pages"] if _well_formed(page)]


def _well_formed(page: Any) -> bool:
    """A page as :func:`record` writes it."""
    if not isinstance(page, dict) or not isinstance(page.get("out"), str) or not isinstance(page.get("key"), str):
        return False
    files, dirs = page.get("files"), page.get("dirs")
    return (isinstance(files, list) and isinstance(dirs, list)
            and all(isinstance(f, list) and len(f) == 3 and isinstance(f[0], str)
                    and type(f[1]) is int and type(f[2]) is int for f in files)
            and all(isinstance(d, list) and len(d) == 2 and isinstance(d[0], str) and isinstance(d[1], list)
                    for d in dirs))


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except (OSError, ValueError):  # ValueError: a NUL in a path
        return None


def _distributions(directory: str) -> list[list[Any]]:
    """The installed distributions in one ``sys.path`` directory, where entry points come
    from (``importlib.metadata`` looks at these names): each one's name and the mtime of
    its ``entry_points.txt`` (None without one).  Not the directory's own mtime: a current
    directory on ``sys.path`` (``python -c``) changes with any file made there."""
    try:
        names = sorted(n for n in os.listdir(directory or ".") if n.endswith((".dist-info", ".egg-info")))
    except (OSError, ValueError):
        return []
    return [[n, _mtime(os.path.join(directory or ".", n, "entry_points.txt"))] for n in names]


def _unchanged(page: dict[str, Any]) -> bool:
    """Every file the page was made with is as it was, and so are the distributions on sys.path."""
    for path, mtime, size in page["files"]:
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return False
        if st.st_mtime_ns != mtime or st.st_size != size:
            return False
    return all(_distributions(path) == dists for path, dists in page["dirs"])


def lookup(argv: list[str]) -> str | None:
    """The recorded page for this command line and these inputs, or None."""
    k = key(argv)
    for page in _read_record():
        if page.get("key") == k and _unchanged(page):
            return str(page["out"])
    return None


def replay(argv: list[str]) -> bool:
    """Print the recorded page if there is one for these inputs: True when printed."""
    out = lookup(argv)
    if out is None:
        return False
    sys.stdout.write(out)
    sys.stdout.flush()
    return True


class _Tee:
    """A stream that writes through to ``stream`` and keeps what was written (text only)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        written = self._stream.write(text)  # first: click probes with bytes, which a text stream refuses
        self.parts.append(text)
        return written

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, flush...: the real stream's
        return getattr(self._stream, name)


def record(argv: list[str], render: Callable[[], None]) -> None:
    """Run ``render`` (which prints the page and exits), keeping its output as the page
    for these inputs when it wrote only to stdout and exited with status 0."""
    k = key(argv)  # before the page is made: what the replay will compute
    out, err = _Tee(sys.stdout), _Tee(sys.stderr)
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    ok = False
    try:
        render()
        ok = True
    except SystemExit as e:
        ok = e.code in (0, None)
        raise
    finally:  # the exit goes on once the page is kept
        sys.stdout, sys.stderr = real_out, real_err
        if ok and not err.parts:
            _store(k, "".join(out.parts))


def _store(k: str, out: str) -> None:
    """Add the page to the record (newest first, one page per key, at most ENTRIES)."""
    import warnings

    from kpsdk.cache import private_dir, write_private

    files = []
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            files.append([path, st.st_mtime_ns, st.st_size])
    page = {"key": k, "files": files, "dirs": [[p, _distributions(p)] for p in sys.path], "out": out}
    pages = [page] + [p for p in _read_record() if p.get("key") != k][:ENTRIES - 1]
    with warnings.catch_warnings():  # no cache is no error, and the help prints nothing else
        warnings.simplefilter("ignore")
        where = private_dir(DIRECTORY)
    if where is not None:
        write_private(where, NAME, json.dumps({"format": FORMAT, "pages": pages}).encode())
