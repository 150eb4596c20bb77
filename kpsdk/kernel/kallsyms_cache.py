"""The decoded symbols of kernel images, cached as System.map text under kpsdk's cache.

Decoding a kernel's kallsyms takes seconds (most of it unpacking xz), so the entries are
kept in ``<cache_root()>/kallsyms/<sha256 of the image>.kallsyms``.  The first line names
the image's hash and the body's hash, so a truncated, damaged or forged file is ignored
(and rebuilt), and the directory and files are used only when this user owns them
(:mod:`kpsdk.cache`): nothing planted there is followed.
"""

from __future__ import annotations

import hashlib
import re

from kpsdk.binfmt.files import MAX_FILE_SIZE
from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.errors import SymbolError
from kpsdk.kernel.kallsyms_text import NAME_PATTERN, KallsymsEntry, parse_kallsyms_text

__all__ = ["CACHE_DIR", "read_cache", "write_cache"]

#: Bumped whenever the cache file's content could change for the same image.
_CACHE_VERSION = 2
_CACHE_MAGIC = "# kpsdk kallsyms cache"


#: The kallsyms cache's directory under kpsdk's cache (:func:`kpsdk.cache.cache_root`).
CACHE_DIR = "kallsyms"
#: What a cached entry must look like to come back unchanged from its System.map line.
_CACHEABLE = re.compile(NAME_PATTERN)


def _cache_name(digest: str) -> str:
    return f"{digest}.kallsyms"


def _cache_header(digest: str, body: bytes) -> bytes:
    """The first line: the image the entries come from, and a hash that shows they arrived whole."""
    body_digest = hashlib.sha256(body).hexdigest()
    return f"{_CACHE_MAGIC} v{_CACHE_VERSION} image-sha256={digest} body-sha256={body_digest}".encode()


def read_cache(digest: str) -> list[KallsymsEntry] | None:
    """The cached entries of the image whose sha256 is ``digest``; None when absent, unsafe or damaged."""
    directory = private_dir(CACHE_DIR)
    raw = read_private(directory, _cache_name(digest), MAX_FILE_SIZE) if directory is not None else None
    if raw is None or directory is None:
        return None
    head, _, body = raw.partition(b"\n")
    if head != _cache_header(digest, body):
        return None
    try:
        return parse_kallsyms_text(body.decode("ascii"), str(directory / _cache_name(digest)))
    except (UnicodeDecodeError, SymbolError):
        return None


def write_cache(digest: str, entries: list[KallsymsEntry]) -> None:
    """Cache ``entries`` if each survives the round trip through a System.map line (an ELF
    ``.symtab`` can hold names no such line can carry; those images are not cached)."""
    if not all(_CACHEABLE.fullmatch(en.type + en.name) and not en.module for en in entries):
        return
    directory = private_dir(CACHE_DIR)
    if directory is None:
        return
    body = "".join(f"{en.address:016x} {en.type} {en.name}\n" for en in entries).encode("ascii")
    write_private(directory, _cache_name(digest), _cache_header(digest, body) + b"\n" + body)
