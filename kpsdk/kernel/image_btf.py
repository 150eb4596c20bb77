"""A kernel image's own BTF: found once, cached, shared by the trace prefix and the probe grammar.

Debian builds its kernels with ``CONFIG_DEBUG_INFO_BTF``: the vmlinux inside ``vmlinuz`` has a
``.BTF`` section (an arm64 or riscv ``Image`` is no ELF: there the BTF is the bytes between the
kernel's own ``__start_BTF`` and ``__stop_BTF`` symbols).  Two users need it:
:mod:`kpsdk.kernel.tasks` (where ``comm`` and ``pid`` are in ``task_struct``) and the grammar of kernels
that take BTF fetch arguments (:mod:`kpsdk.trace.btfargs`: function parameters by name, ``->``
member chains).  Unpacking a ~10 MB vmlinuz takes a second or two, so the raw section is
cached by the image's sha256 under kpsdk's cache directory, and the parsed :class:`~kpsdk.kernel.btf.Btf`
is kept for the process (the CLI's precheck and the session parse the same definitions).
"""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.errors import ImageFormatError, KpsdkError, TargetError
from kpsdk.kernel.btf import Btf

if TYPE_CHECKING:
    from kpsdk.arch import Arch

CACHE_DIR = "btf"
#: a vmlinux's BTF is a few MB (Debian's 6.12 amd64: 4.9 MB); a cached file larger than this is not one
MAX_BTF = 64 << 20
#: the first two bytes of a little- or big-endian BTF blob (``BTF_MAGIC`` 0xeB9F)
BTF_MAGICS = (b"\x9f\xeb", b"\xeb\x9f")
#: parsed BTF by (image sha256, pointer size): the precheck and the session share one
_PARSED: dict[tuple[str, int], Btf] = {}


def raw_btf(data: bytes, path: Path) -> bytes:
    """The BTF bytes of the kernel image ``data`` (a vmlinuz, a vmlinux or a raw ``Image``).

    Raises :class:`~kpsdk.errors.TargetError` saying what is missing: a broken vmlinux, no
    ``.BTF`` section (built without ``CONFIG_DEBUG_INFO_BTF``), no ``__start_BTF`` symbols.
    """
    from kpsdk.binfmt.elfimage import ElfFile
    from kpsdk.kernel.kallsyms import image_entries, unpack_kernel

    vmlinux, _ = unpack_kernel(data, path)
    if vmlinux[:4] == b"\x7fELF":
        try:
            elf = ElfFile(vmlinux, path)
        except ImageFormatError as exc:
            raise TargetError(f"{path}: the kernel inside is a broken ELF vmlinux, so kpsdk finds no BTF in it "
                              f"({exc})") from None
        section = elf.section(".BTF")
        if section is None:
            raise TargetError(f"{path}: the kernel has no .BTF section (built without CONFIG_DEBUG_INFO_BTF)")
        return elf.contents(section)
    return image_btf(vmlinux, {e.name: e.address for e in image_entries(data, path)}, path)


def image_btf(image: bytes, symbols: dict[str, int], path: Path) -> bytes:
    """The BTF of a kernel that is a raw image, not an ELF (riscv's and arm64's ``Image``):
    the bytes between the kernel's own ``__start_BTF`` and ``__stop_BTF``, the image's first
    byte being ``_start`` (the image is its memory from there on)."""
    base = symbols.get("_start")
    start, stop = symbols.get("__start_BTF"), symbols.get("__stop_BTF")
    if start is None or stop is None:
        found = _scan_btf(image)  # kallsyms without data symbols (arm64's: no CONFIG_KALLSYMS_ALL)
        if found is not None:
            return found
    if base is None or start is None or stop is None:
        raise TargetError(f"{path}: the kernel is a raw image whose symbols lack _start, __start_BTF or __stop_BTF, "
                          "so kpsdk finds no BTF in it")
    lo, hi = start - base, stop - base
    if not 0 <= lo < hi <= len(image) or image[lo:lo + 2] not in BTF_MAGICS:
        raise TargetError(f"{path}: no BTF at __start_BTF ({start:#x}) of the raw image")
    return image[lo:hi]


#: a BTF header's first 8 bytes as a little-endian kernel writes them: magic 0xeb9f, version 1,
#: flags 0, hdr_len 24 (include/uapi/linux/btf.h)
_BTF_HEADER_LE = struct.pack("<HBBI", 0xEB9F, 1, 0, 24)


def _scan_btf(image: bytes) -> bytes | None:
    """The vmlinux BTF of a raw image found by its header, where no symbol places it: the one
    blob whose header is a kernel's (types first, strings right after them, the string section
    starting with the empty string) and that fits the image.  None: no such blob, or several."""
    found: list[bytes] = []
    at = image.find(_BTF_HEADER_LE)
    while at >= 0 and len(found) < 2:
        if at + 24 <= len(image):
            type_off, type_len, str_off, str_len = struct.unpack_from("<IIII", image, at + 8)
            end = at + 24 + str_off + str_len
            if type_off == 0 and str_off == type_len and str_len and end <= len(image) \
                    and image[at + 24 + str_off] == 0:
                found.append(image[at:end])
        at = image.find(_BTF_HEADER_LE, at + 1)
    return found[0] if len(found) == 1 else None


def kernel_btf(image: str | os.PathLike[str], arch: Arch) -> Btf | None:
    """The BTF of the kernel in ``image`` (vmlinuz, vmlinux, raw Image), or None where there is
    none kpsdk can read (a System.map, a kallsyms dump, a kernel built without BTF, a file
    that cannot be read).  Cached on disk by the image's sha256, and parsed once a process."""
    from kpsdk.binfmt.files import read_regular

    path = Path(image)
    try:
        data = read_regular(path)[0]
    except (OSError, KpsdkError):
        return None
    digest = hashlib.sha256(data).hexdigest()
    key = (digest, arch.word_size)
    if key in _PARSED:
        return _PARSED[key]
    directory = private_dir(CACHE_DIR)
    raw = read_private(directory, digest, MAX_BTF) if directory is not None else None
    if raw is None or raw[:2] not in BTF_MAGICS:
        try:
            raw = raw_btf(data, path)
        except KpsdkError:
            return None
        if directory is not None:
            write_private(directory, digest, raw)
    try:
        btf = Btf(raw, f"{path} .BTF")
        btf.pointer_size = arch.word_size
        _ = btf.types
    except ImageFormatError:
        return None
    _PARSED[key] = btf
    return btf
