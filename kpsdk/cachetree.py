"""Cache entries that kpsdk runs or boots: unpacked trees checked against a private record before every use.

Debian's QEMU 10 (:mod:`kpsdk.targets.live.qemu10`), kernels and busybox
(:mod:`kpsdk.fixtures.kernel`) are unpacked once into kpsdk's cache and then executed or
booted at every use.  A tree that someone else could change, or whose expected hashes live
beside it, is code anyone could plant (issue 36, item 1: a ``manifest.json`` next to the binary
it vouched for, and the check ran the binary).  So a tree is used only when:

* it lies in a directory that only this user can change (:func:`kpsdk.cache.private_path`),
  and every directory and file in it is this user's and writable by no one else;
* it holds exactly the entries recorded when kpsdk unpacked it, each regular file with the
  recorded SHA256 and each symbolic link with the recorded target;
* that record lives elsewhere, in kpsdk's private ``records`` directory
  (:func:`kpsdk.cache.read_private`), never in the tree, and names where the tree came from:
  the package, its version and the SHA256 that Debian's index gave for its ``.deb``.

Checking reads and hashes files; it never runs anything.  A tree that fails is unpacked
again (its caller fetches it anew), never used.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kpsdk.cache import private_dir, read_private, unsafe_reason, write_private
from kpsdk.errors import TargetError

#: the private directory (under kpsdk's cache) holding one record per unpacked tree
RECORDS = "records"
#: the record format (another is a miss: the tree is unpacked again)
FORMAT = 1
#: the largest record read back
LIMIT = 4 << 20
_UNSAFE = stat.S_IWGRP | stat.S_IWOTH


@dataclass(frozen=True)
class TreeRecord:
    """What kpsdk recorded of a tree it unpacked: where it came from (``origin``: package,
    version, the ``.deb``'s SHA256 from Debian's index), each entry (``files``: a relative path
    -> ``"dir"``, ``"link:TARGET"`` or ``"sha256:HEX"``), and what the caller keeps with it
    (``meta``: QEMU's version, the firmware unpacked with it)."""

    root: str
    origin: dict[str, str]
    files: dict[str, str]
    meta: dict[str, Any] = field(default_factory=dict)


def _record_name(root: Path) -> str:
    """The record's file name: the tree's absolute path hashed (a record per tree, wherever the cache is)."""
    return hashlib.sha256(os.path.abspath(root).encode("utf-8", "surrogateescape")).hexdigest() + ".json"


def _file_digest(path: Path) -> str | None:
    """``sha256:HEX`` of a regular file of this user's that no one else can write, read through
    one descriptor that did not follow a link; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & _UNSAFE:
            return None
        h = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return "sha256:" + h.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


def _entries(root: Path, want: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """Every entry under ``root`` as a record holds it; None as soon as one is not this user's,
    is writable by someone else, is neither a directory, a regular file nor a link, or (with
    ``want``) differs from ``want`` (so a wrong tree costs no more hashing than it takes to tell)."""
    out: dict[str, str] = {}

    def failed(error: OSError) -> None:
        raise error

    try:
        for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
            for name in (*dirnames, *filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(root).as_posix()
                st = os.lstat(path)
                if st.st_uid != os.getuid():
                    return None
                if stat.S_ISLNK(st.st_mode):
                    entry = "link:" + os.readlink(path)
                elif stat.S_ISDIR(st.st_mode):
                    if st.st_mode & _UNSAFE:
                        return None
                    entry = "dir"
                elif stat.S_ISREG(st.st_mode):
                    if want is not None and not want.get(rel, "").startswith("sha256:"):
                        return None  # not recorded as a file: not worth hashing
                    digest = _file_digest(path)
                    if digest is None:
                        return None
                    entry = digest
                else:
                    return None
                if want is not None and want.get(rel) != entry:
                    return None
                out[rel] = entry
    except OSError:
        return None
    return out


def record_tree(root: Path, origin: Mapping[str, str], meta: Mapping[str, Any] | None = None) -> TreeRecord:
    """Record the tree kpsdk has just unpacked at ``root`` (its final place), from ``origin``.

    Raises :class:`~kpsdk.errors.TargetError` when the tree is not in a directory only this
    user can change or holds an entry someone else could (then it would never pass
    :func:`checked_tree`), or when kpsdk's ``records`` directory cannot be used.
    """
    why = unsafe_reason(root.parent) or unsafe_reason(root)
    if why is not None:
        raise TargetError(f"kpsdk keeps no code in {root}: {why} (set KPSDK_CACHE to a directory of yours)")
    files = _entries(root)
    if files is None:
        raise TargetError(f"{root} holds an entry that is not this user's or that others can write")
    records = private_dir(RECORDS)
    if records is None:
        raise TargetError(f"kpsdk's record directory {RECORDS!r} under its cache cannot be used safely")
    record = TreeRecord(os.path.abspath(root), dict(origin), files, dict(meta or {}))
    data = json.dumps({"format": FORMAT, "root": record.root, "origin": record.origin, "files": record.files,
                       "meta": record.meta}, sort_keys=True).encode()
    write_private(records, _record_name(root), data)
    if read_private(records, _record_name(root), LIMIT) != data:
        raise TargetError(f"cannot write the record of {root} in {records}")
    return record


def read_record(root: Path) -> TreeRecord | None:
    """The record kpsdk kept for the tree at ``root``, unchecked; None without one."""
    records = private_dir(RECORDS)
    data = read_private(records, _record_name(root), LIMIT) if records is not None else None
    if data is None:
        return None
    try:
        raw = json.loads(data)
        record = TreeRecord(str(raw["root"]), dict(raw["origin"]), dict(raw["files"]), dict(raw.get("meta", {})))
    except (ValueError, KeyError, TypeError, AttributeError):  # not what record_tree writes
        return None
    if raw.get("format") != FORMAT or record.root != os.path.abspath(root):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in record.files.items()):
        return None
    return record


def checked_tree(root: Path) -> TreeRecord | None:
    """The record of the tree at ``root`` when the tree may be run or booted, else None:
    in a directory only this user can change, every entry this user's and writable by no one
    else, and exactly the recorded entries, hashes and link targets (see the module docstring)."""
    record = read_record(root)
    if record is None or unsafe_reason(root.parent) is not None or unsafe_reason(root) is not None:
        return None
    found = _entries(root, record.files)
    if found is None or found.keys() != record.files.keys():
        return None
    return record


def checked_file(record: TreeRecord, root: Path, rel: str) -> Path | None:
    """``root/rel`` when the record holds it as a regular file (it was checked with the tree)."""
    return root / rel if record.files.get(rel, "").startswith("sha256:") else None
