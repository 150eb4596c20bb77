"""ELF images and their read-only pages, kept for the session: a shell that runs a hundred
commands parses each program once, and every process that maps the same file's read-only
segment at the same address maps the same host memory.

Parsing an ELF file (pyelftools) costs milliseconds, and ``execve``, ld.so's loader and every
library mapping ask again; :func:`load` keeps the parsed images by the file's identity, size and
modification time (a file changed on the host is parsed anew), a bounded number of them.

A process switch leaves in place the mappings both processes share (:func:`switch
<kpsdk.targets.unicorn.space.switch>`), and Unicorn keeps the code it translated from them: so
the read-only segments of a program or library loaded at the same address by several
processes (the shell and the copies of it it execs, each process's ld.so and libc) share one
host buffer (:class:`PageCache`), mapped copy-on-protect as a fork shares them.  The key has the
address too: a probe's trap written in one is right for every process that maps the same file
at the same place, and only those (:mod:`kpsdk.targets.unicorn.processes`).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.binfmt.elfimage import load_elf, own_copy

if TYPE_CHECKING:
    from kpsdk.binfmt.elfimage import ElfImage

#: parsed images kept (a shell script runs a few dozen distinct programs)
MAX_IMAGES = 64


class ImageCache:
    """Parsed ELF images by file (see the module's docstring)."""

    def __init__(self, limit: int = MAX_IMAGES) -> None:
        self._images: OrderedDict[tuple[int, int, int, int, str], ElfImage] = OrderedDict()
        self._limit = limit

    def load(self, path: Path) -> ElfImage:
        """``load_elf(path)``, from the cache while the file is unchanged."""
        st = os.stat(path)
        key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, str(path))
        image = self._images.get(key)
        if image is None:
            image = load_elf(path)
            self._images[key] = image
            if len(self._images) > self._limit:
                self._images.popitem(last=False)
        else:
            self._images.move_to_end(key)
        return own_copy(image)  # a session changes its copy's symbols (trampolines, PLT names), not the next one's


#: the offset in :class:`PageCache`'s key of a segment the kernel's ELF loader mapped (an
#: ``mmap`` maps a file's bytes from an offset, a segment's bytes are placed by its headers)
LOADER = -1


class PageCache:
    """Host buffers holding a file's bytes as read-only segments map them, by the file's
    identity, the offset, the size and the address they go at."""

    def __init__(self) -> None:
        self._buffers: dict[tuple[tuple[int, int], int, int, int], mmap.mmap] = {}

    def get(self, identity: tuple[int, int], offset: int, size: int, at: int) -> mmap.mmap | None:
        return self._buffers.get((identity, offset, size, at))

    def put(self, identity: tuple[int, int], offset: int, size: int, at: int, buf: mmap.mmap) -> None:
        self._buffers[(identity, offset, size, at)] = buf

    def clear(self) -> None:
        self._buffers.clear()


def map_image(target: object, pages: PageCache | None, image: ElfImage, identity: tuple[int, int] | None,
              mappings: list[tuple[int, int, str]]) -> None:
    """Map ``image``'s load ``mappings`` (``(start, size, perms)``, placed) and copy its segments
    in; a read-only mapping comes from ``pages`` when another process loaded the same file there
    (its bytes, and any probe's trap in them, are already right), else it is filled and kept."""
    fresh: list[tuple[int, int]] = []
    for start, size, perms in mappings:
        cached = pages is not None and identity is not None and "w" not in perms
        buf = pages.get(identity, LOADER, size, start) if cached else None  # type: ignore[union-attr,arg-type]
        mapped = target.map(start, size, perms, buf=buf)  # type: ignore[attr-defined]
        if buf is None:
            fresh.append((start, start + size))
            if cached:
                target.space.region_at(start).cow = True  # type: ignore[attr-defined]
                pages.put(identity, LOADER, size, start, mapped)  # type: ignore[union-attr,arg-type]
    write = target.uc.mem_write  # type: ignore[attr-defined]
    for seg in image.segments:
        for lo, hi in fresh:  # only into memory made now: a shared buffer holds the bytes, traps and all
            a, b = max(lo, seg.vaddr), min(hi, seg.vaddr + len(seg.data))
            if a < b:
                write(a, seg.data[a - seg.vaddr:b - seg.vaddr])


#: the images of every session of this process (immutable once parsed, so sessions can share them)
images = ImageCache()
