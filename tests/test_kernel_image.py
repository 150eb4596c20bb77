"""Kernel symbols from text and from kernel images; the busybox initramfs and QEMU boot.

The synthetic tests build kallsyms tables with an encoder written from the kernel's
``scripts/kallsyms.c`` (every layout kpsdk knows) and check that kpsdk decodes them back.
The ``kernel`` tests use Debian's real amd64 kernel and compare with the ground truth: the
same kernel booted in QEMU prints its own ``/proc/kallsyms`` (with ``nokaslr``, its addresses
are the image's), and the workload's console markers.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import hashlib
import lzma
import os
import random
import re
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kpsdk import fixtures
from kpsdk.cache import cache_root
from kpsdk.cachetree import record_tree
from kpsdk.errors import ImageFormatError, SymbolError, TargetError
from kpsdk.fixtures import kernel
from kpsdk.kernel import kallsyms_cache
from kpsdk.kernel.kallsyms import (
    KallsymsEntry,
    compression_of,
    decode_kallsyms,
    extract_vmlinux,
    load_kallsyms_from_image,
    load_kallsyms_text,
    load_kernel_symbols,
    parse_kallsyms_text,
    read_image_entries,
)

STUB_SYSTEM_MAP = "ffffffffffffffff B The real System.map is in the linux-image-<version>-dbg package\n"


# --------------------------------------------------------------------------- System.map / kallsyms text

SAMPLE_MAP = """\
0000000000000000 A fixed_percpu_data
ffffffff81000000 T _text
ffffffff81000000 T startup_64
ffffffff81000100 t helper.isra.0
ffffffff81000180 T do_sys_openat2
ffffffff81000300 W weak_default
                 U undefined_thing
0000000000000000 w weak_undefined
ffffffff82000000 R some_table
ffffffff82a00000 D jiffies
ffffffff82a00040 d local_data
ffffffff83310000 B big_bss
ffffffff83310100 b small_bss
ffffffff83310200 N debug_thing
ffffffffc0000000 t do_sys_openat2\t[evil_mod]
ffffffffc0000040 T mod_func\t[some_mod]
"""


def test_system_map_types_sizes_and_modules() -> None:
    table = load_kallsyms_text(SAMPLE_MAP, "sample")
    names = {s.name for s in table}
    assert "fixed_percpu_data" not in names  # A: per-cpu offset, not an address
    assert "weak_undefined" not in names and "debug_thing" not in names
    assert table.get("do_sys_openat2").address == 0xFFFFFFFF81000180  # vmlinux shadows the module
    assert table.get("do_sys_openat2").size == 0x180  # up to weak_default
    assert table.get("weak_default").kind == "func"
    assert table.get("jiffies").kind == "object" and table.get("jiffies").size == 0x40
    assert table.get("some_table").kind == "object"
    assert table.get("mod_func").address == 0xFFFFFFFFC0000040
    assert table.get("mod_func").size == 0  # the last symbol: nothing after it to measure by
    # aliases at one address share the size up to the next higher address
    assert table.get("_text").size == table.get("startup_64").size == 0x100
    assert table.format(0xFFFFFFFF81000185) == "do_sys_openat2+0x5"
    entries = parse_kallsyms_text(SAMPLE_MAP)
    assert KallsymsEntry(0xFFFFFFFFC0000040, "T", "mod_func", "some_mod") in entries
    assert all(e.name != "undefined_thing" for e in entries)  # "U" lines have no address


def test_an_address_several_symbols_share_is_named_as_the_kernels_ps_names_it() -> None:
    """The first alias in the table's (the kernel's kallsyms) order, as ``get_symbol_pos`` in
    kernel/kallsyms.c: Debian's arm kernel prints ``sys_openat+0x98/0xd4`` where kallsyms has
    ``sys_openat`` then ``__se_sys_openat`` at one address (tests/test_trace_triggers_kernel.py
    compares it with the guest's own hist file).  A name still resolves to its own symbol."""
    text = ("c05c94d8 T sys_openat\nc05c94d8 T __se_sys_openat\nc05c95ac T sys_creat\n"
            "c05c95ac T __se_sys_creat\nc05c95ac t __do_sys_creat\nc05c9600 T next_one\n")
    table = load_kallsyms_text(text)
    assert table.lookup(0xC05C9570) == ("sys_openat", 0x98, 0xD4)
    assert table.lookup(0xC05C95AC) == ("sys_creat", 0, 0x54)
    assert table.resolve("__se_sys_openat") == 0xC05C94D8
    assert table.containing(0xC05C94D8) is not None and table.containing(0xC05C94D8).name == "sys_openat"


def test_gcc_clone_found_by_base_name() -> None:
    table = load_kallsyms_text(SAMPLE_MAP)
    assert table.get("helper").name == "helper.isra.0"
    assert table.resolve("helper+0x4") == 0xFFFFFFFF81000104


def test_debian_stub_system_map_is_rejected() -> None:
    assert len(STUB_SYSTEM_MAP) == 83
    with pytest.raises(SymbolError, match=r"stub System.map.*load_kallsyms_from_image.*/proc/kallsyms"):
        load_kallsyms_text(STUB_SYSTEM_MAP, "System.map-6.1.0-56-amd64")


def test_hidden_addresses_and_bad_lines() -> None:
    with pytest.raises(SymbolError, match="kptr_restrict"):
        load_kallsyms_text("0000000000000000 T _text\n0000000000000000 T startup_64\n")
    with pytest.raises(SymbolError, match=r"m:2: bad address"):
        load_kallsyms_text("ffffffff81000000 T _text\nzzzz T startup_64\n", "m")
    with pytest.raises(SymbolError, match="no symbol lines"):
        load_kallsyms_text("\n# nothing\n")


@pytest.mark.parametrize("address", ["-1", "-ffffffff81000000", "1" + "0" * 16, "0x10", "0X10", "1_0", "+10",
                                     "\u0661\u0660", "ffff_ffff"])
def test_text_addresses_are_hex_digits_only(address: str) -> None:
    """int(x, 16) takes signs, 0x, underscores and non-ASCII digits; the kernel writes none of them."""
    text = f"ffffffff81000000 T _text\n{address} T startup_64\n"
    with pytest.raises(ImageFormatError, match=r"^map:2: bad address .*want 1 to 16 hex digits") as info:
        load_kallsyms_text(text, "map")
    assert info.value.line == 2 and info.value.path == "map"


@pytest.mark.parametrize(("line", "match"), [
    ("ffffffff81000000 TT startup_64", "bad type 'TT'"),
    ("ffffffff81000000 1 startup_64", "bad type '1'"),
    ("ffffffff81000000 T startup_64 mod", "bad module 'mod'"),
    ("ffffffff81000000 T startup_64 [mod] extra", r"not a System.map/kallsyms line \(want ADDR TYPE NAME \[MODULE\]\)"),
    ("ffffffff81000000 T", "not a System.map/kallsyms line"),
])
def test_text_lines_are_the_kernel_format(line: str, match: str) -> None:
    with pytest.raises(ImageFormatError, match=f"^map:3: {match}"):
        load_kallsyms_text(f"ffffffff81000000 T _text\n\n{line}\n", "map")


def test_text_file_with_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "System.map"
    path.write_text("ffffffff81000000 T _text\n0x0000000081000010 T startup_64\n")
    with pytest.raises(ImageFormatError, match=f"^{re.escape(str(path))}:2: bad address '0x0000000081000010'"):
        load_kernel_symbols(path)


@pytest.mark.parametrize("data", [b"", b"\x7f", b"\x7fELF", b"\x7fELF\x02", b"\x7fELF\x02\x01" + bytes(10)])
def test_decode_short_data(data: bytes) -> None:
    with pytest.raises(ImageFormatError, match="^<image>: no kallsyms token table found"):
        decode_kallsyms(data)


@pytest.mark.parametrize("inner", [b"\x7fELF", b"\x7fELF\x02\x01", b"abcd"])
def test_image_unpacking_to_a_few_bytes(tmp_path: Path, inner: bytes) -> None:
    image = tmp_path / "vmlinuz"
    image.write_bytes(gzip.compress(inner))
    with pytest.raises(ImageFormatError, match=f"^{re.escape(str(image))}: "):
        load_kallsyms_from_image(image, cache=False)


# --------------------------------------------------------------------------- a kallsyms encoder


def _align(buf: bytearray, n: int) -> None:
    buf += b"\0" * (-len(buf) % n)


def encode_kallsyms(
    syms: list[tuple[int, str, str]],
    layout: str,
    *,
    endian: str = "<",
    ptr: int = 8,
    base: int = 0xFFFFFFFF81000000,
    absolute_percpu: bool = True,
    bad_marker: bool = False,
) -> bytes:
    """The kallsyms tables as ``scripts/kallsyms.c`` lays them out, between random bytes.

    ``layout``: ``"6.1"`` (offsets, relative_base, num_syms, names, markers, token table,
    token index), ``"6.2"`` (the same plus seqs_of_names before the token table: Debian's
    6.1 too), ``"6.4"`` (num_syms, names, markers, seqs, tokens, index, then offsets and
    relative_base), ``"absolute"`` (kallsyms_addresses instead of offsets).  ``bad_marker``
    writes a second marker one byte off.
    """
    full = [(t + name).encode() for _, t, name in syms]
    used = sorted(set(b"".join(full)))
    tokens: list[bytes | None] = [None] * 256
    for c in used:
        tokens[c] = bytes([c])
    pairs = [b"kpsdk_", b"func_", b"_data", b"sym", b"tkpsdk", b"__", b"er", b"in", b"_t"]
    free = [c for c in range(256) if tokens[c] is None]
    fill = iter(pairs + [f"Q{i}q".encode() for i in range(256)])
    for c in free:
        tokens[c] = next(fill)
    table = [t for t in tokens if t is not None]
    assert len(table) == 256

    def compress(s: bytes) -> bytes:
        out, i = bytearray(), 0
        while i < len(s):
            best = max((c for c in range(256) if s.startswith(table[c], i)), key=lambda c: len(table[c]))
            out.append(best)
            i += len(table[best])
        return bytes(out)

    names, markers = bytearray(), []
    for i, s in enumerate(full):
        if i % 256 == 0:
            markers.append(len(names))
        comp = compress(s)
        if len(comp) > 0x7F:  # Linux 6.1's "big symbol": two length bytes
            names += bytes([(len(comp) & 0x7F) | 0x80, len(comp) >> 7])
        else:
            names.append(len(comp))
        names += comp
    if bad_marker:
        markers[1] += 1
    pf = endian + ("Q" if ptr == 8 else "I")

    def offsets() -> bytes:
        vals = []
        for addr, t, _ in syms:
            if absolute_percpu:
                vals.append(addr if t == "A" else base - addr - 1)
            else:
                vals.append(addr - base)
        fmt = endian + ("i" if absolute_percpu else "I") * len(vals)
        return struct.pack(fmt, *vals)

    order = sorted(range(len(full)), key=lambda i: full[i][1:])
    seqs = b"".join(i.to_bytes(3, "big") for i in order)
    tok = b"".join(t + b"\0" for t in table)
    idx, o = [], 0
    for t in table:
        idx.append(o)
        o += len(t) + 1
    tok_index = struct.pack(f"{endian}256H", *idx)

    parts: list[bytes] = []
    if layout in ("6.1", "6.2"):
        parts += [offsets(), struct.pack(pf, base)]
    elif layout == "absolute":
        parts += [struct.pack(endian + pf[1] * len(syms), *(a for a, _, _ in syms))]
    parts += [struct.pack(endian + "I", len(syms)), bytes(names), struct.pack(f"{endian}{len(markers)}I", *markers)]
    if layout in ("6.2", "6.4"):
        parts.append(seqs)
    parts += [tok, tok_index]
    if layout == "6.4":
        parts += [offsets(), struct.pack(pf, base)]
    rng = random.Random(layout)
    out = bytearray(rng.randbytes(4096))
    for part in parts:
        _align(out, ptr)  # every label is ALGN'd
        out += part
    _align(out, ptr)
    out += rng.randbytes(4096)
    return bytes(out)


def synthetic_symbols(base: int = 0xFFFFFFFF81000000) -> list[tuple[int, str, str]]:
    """~700 symbols (3 markers) with digits, per-cpu absolutes, aliases and a 300-char name."""
    syms: list[tuple[int, str, str]] = [(0, "A", "fixed_percpu_data"), (0x1000, "A", "cpu_debug_store")]
    syms += [(base, "T", "_text"), (base, "T", "startup_64"), (base, "T", "_stext")]
    addr = base + 0x40
    for i in range(700):
        kind = "tTdDbr"[i % 6]
        syms.append((addr, kind, f"kpsdk_func_{i}" if kind in "tT" else f"sym_data{i}"))
        addr += 0x10 + (i % 7) * 8
    syms.append((addr, "t", "do_sys_openat2"))
    syms.append((addr + 0x100, "t", "helper.isra.0"))
    long_name = "".join(chr(ord("a") + (i * 7) % 26) + str(i % 10) for i in range(150))
    syms.append((addr + 0x200, "t", long_name))
    syms.append((addr + 0x400, "T", "_etext"))
    return syms


LAYOUTS = ["6.1", "6.2", "6.4", "absolute"]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("endian", ["<", ">"])
def test_decode_synthetic_kallsyms(layout: str, endian: str) -> None:
    syms = synthetic_symbols()
    blob = encode_kallsyms(syms, layout, endian=endian)
    entries = decode_kallsyms(blob, "synthetic")
    assert [(e.address, e.type, e.name) for e in entries] == syms


def test_decode_32bit_without_percpu() -> None:
    syms = [s for s in synthetic_symbols(0xC1000000) if s[1] != "A"]
    blob = encode_kallsyms(syms, "6.1", ptr=4, base=0xC1000000, absolute_percpu=False)
    entries = decode_kallsyms(blob)
    assert [(e.address, e.type, e.name) for e in entries] == syms


def test_decode_an_arm64_image_whose_base_is_a_relocation() -> None:
    """An arm64 ``Image`` is linked with ``--no-apply-dynamic-relocs``: kallsyms_relative_base is 0 in
    the file, and the kernel's own ``.rela.dyn`` (kept in the Image) holds its value as the addend
    of an ``R_AARCH64_RELATIVE`` at ``_text + offset``.  A decoy at another 2 MiB multiple, one of
    few relocations there, is not taken."""
    text, base = 0xFFFF800008000000, 0xFFFF800008001000  # _stext: 0x10000 on in a real Image
    syms = [s for s in synthetic_symbols(base) if s[1] != "A"]
    blob = bytearray(encode_kallsyms(syms, "6.2", base=base, absolute_percpu=False))
    pos = bytes(blob).index(struct.pack("<Q", base))
    blob[pos:pos + 8] = bytes(8)
    _align(blob, 8)
    relas = [(text + 8 * i, 1027, text + 0x40 * i) for i in range(1, 200)]  # the kernel's other words
    relas += [(text + 0x200000 + pos, 1027, text + 0x200000 + 0x100), (text + pos, 1027, base)]
    blob += b"".join(struct.pack("<QQQ", *r) for r in relas)
    entries = decode_kallsyms(bytes(blob), "synthetic arm64 Image")
    assert [(e.address, e.type, e.name) for e in entries] == syms


def test_decode_failures_name_the_table() -> None:
    syms = synthetic_symbols()
    with pytest.raises(SymbolError, match="no kallsyms token table"):
        decode_kallsyms(bytes(4096) + b"not a kernel")
    # a marker that disagrees with the names
    for layout in ("6.1", "6.2"):
        with pytest.raises(SymbolError, match="kallsyms_markers"):
            decode_kallsyms(encode_kallsyms(syms, layout, bad_marker=True))
    # unsorted addresses: swap two offsets
    no_sort = encode_kallsyms([syms[0], syms[1], syms[2], syms[3], syms[4], syms[6], syms[5], *syms[7:]], "6.1")
    with pytest.raises(SymbolError, match="sorted"):
        decode_kallsyms(no_sort)
    # a table without _text is not a kernel's
    with pytest.raises(SymbolError, match="_text"):
        decode_kallsyms(encode_kallsyms([s for s in syms if s[2] not in ("_text", "_stext")], "6.1"))


# --------------------------------------------------------------------------- images: compression, bzImage, cache


#: Stands for an ELF header in front of the tables (8 bytes, so their alignment holds).
ELF_ISH = b"\x7fELF\2\1\1\0"


def fake_bzimage(payload: bytes) -> bytes:
    """A minimal bzImage: one setup sector, boot protocol 2.15, the payload right after."""
    setup = bytearray(1024)
    setup[0x1F1] = 1  # setup_sects: the protected-mode part starts at (1 + 1) * 512
    setup[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", setup, 0x206, 0x20F)
    struct.pack_into("<II", setup, 0x248, 0, len(payload))
    return bytes(setup) + payload


def _zstd(data: bytes) -> bytes:
    try:
        import zstandard  # type: ignore[import-not-found]
    except ImportError:
        if not shutil.which("zstd"):
            pytest.skip("neither the zstandard package nor the zstd tool is installed")
        return subprocess.run(["zstd", "-c", "-q"], input=data, capture_output=True, check=True).stdout
    return bytes(zstandard.ZstdCompressor().compress(data))


def _lz4_legacy(data: bytes) -> bytes:
    if not shutil.which("lz4"):
        pytest.skip("the lz4 tool (Debian package lz4) is not installed")
    return subprocess.run(["lz4", "-l", "-c", "-q"], input=data, capture_output=True, check=True).stdout


COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda d: gzip.compress(d, mtime=0),
    "xz": lambda d: lzma.compress(d, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC32),
    "lzma": lambda d: lzma.compress(d, format=lzma.FORMAT_ALONE),
    "bzip2": bz2.compress,
    "zstd": _zstd,
    "lz4": _lz4_legacy,
}


@pytest.mark.parametrize("kind", list(COMPRESSORS))
def test_bzimage_payloads(kind: str, tmp_path: Path) -> None:
    vmlinux = ELF_ISH + encode_kallsyms(synthetic_symbols(), "6.2") + bytes(range(256)) * 2000
    comp = COMPRESSORS[kind](vmlinux)
    assert compression_of(comp) == kind
    image = tmp_path / "vmlinuz"
    image.write_bytes(fake_bzimage(comp + struct.pack("<I", len(vmlinux))))
    assert extract_vmlinux(image) == (vmlinux, kind)
    # a size trailer that disagrees: corrupt or truncated
    image.write_bytes(fake_bzimage(comp + struct.pack("<I", len(vmlinux) + 1)))
    with pytest.raises(SymbolError, match="truncated or corrupt"):
        extract_vmlinux(image)


def test_pure_python_lz4_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    import kpsdk.kernel.unpack as ks

    data = b"\x7fELF" + b"".join(f"line {i % 97} of the kernel\n".encode() for i in range(20000))
    comp = _lz4_legacy(data)
    real_import = builtins.__import__

    def no_lz4(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("lz4"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_lz4)
    assert ks._unlz4(comp) == data


def test_compressed_stream_found_inside_other_bytes(tmp_path: Path) -> None:
    vmlinux = ELF_ISH + encode_kallsyms(synthetic_symbols(), "6.1")
    image = tmp_path / "Image.gz"
    image.write_bytes(b"junk\x1f\x8b" + bytes(500) + gzip.compress(vmlinux, mtime=0) + b"tail")
    assert extract_vmlinux(image) == (vmlinux, "gzip")
    image.write_bytes(b"nothing compressed here" * 100)
    with pytest.raises(SymbolError, match="neither an ELF vmlinux nor a bzImage"):
        extract_vmlinux(image)


@pytest.fixture(autouse=True)
def _private_cache(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test but the real-kernel ones caches in a fresh directory, never in the user's."""
    if request.node.get_closest_marker("kernel") is None:
        monkeypatch.setenv("KPSDK_CACHE", str(tmp_path_factory.mktemp("kpsdk-cache")))


def synthetic_vmlinuz(path: Path, layout: str = "6.2") -> Path:
    vmlinux = ELF_ISH + encode_kallsyms(synthetic_symbols(), layout)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(fake_bzimage(gzip.compress(vmlinux, mtime=0) + struct.pack("<I", len(vmlinux))))
    return path


def cache_entry(image: Path) -> Path:
    """Where kpsdk caches an image's symbols: by the sha256 of its contents, under kpsdk's cache."""
    return cache_root() / "kallsyms" / f"{hashlib.sha256(image.read_bytes()).hexdigest()}.kallsyms"


def cache_files(image: Path) -> list[Path]:
    """Every kallsyms cache file, beside the image (where kpsdk once put them) or in the cache."""
    return sorted([*image.parent.glob("*.kallsyms"), *cache_root().rglob("*.kallsyms")])


def test_image_symbols_are_cached(tmp_path: Path) -> None:
    image = synthetic_vmlinuz(tmp_path / "vmlinuz-test")
    table = load_kallsyms_from_image(image)
    cache = cache_entry(image)
    assert cache_files(image) == [cache] and "helper.isra.0" in cache.read_text()
    assert list(tmp_path.iterdir()) == [image]  # nothing written beside the image
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    assert table.get("helper").address == table.get("do_sys_openat2").address + 0x100
    assert "fixed_percpu_data" not in table  # per-cpu: an offset, not an address
    # the cache is used: entries written there as kpsdk writes them come back
    entries = [e._replace(name="from_the_cache") if e.name == "do_sys_openat2" else e
               for e in read_image_entries(image)]
    kallsyms_cache.write_cache(hashlib.sha256(image.read_bytes()).hexdigest(), entries)
    assert "from_the_cache" in load_kallsyms_from_image(image)
    # ... for that content only: an image with other bytes has another entry
    image.write_bytes(image.read_bytes() + b"\0")
    assert "from_the_cache" not in load_kallsyms_from_image(image)
    assert "do_sys_openat2" in load_kallsyms_from_image(image, cache=False)


def test_forged_cache_is_not_used(tmp_path: Path) -> None:
    image = synthetic_vmlinuz(tmp_path / "vmlinuz-test")
    st = image.stat()
    forged = "\n".join([f"# kpsdk kallsyms cache v1 size={st.st_size} mtime_ns={st.st_mtime_ns}",
                        "ffffffff81000000 T _text", "ffffffff81000000 T _stext", "ffffffff81000010 T from_the_forger",
                        "ffffffff81000100 T _etext"]) + "\n"
    # beside the image, keyed by size and mtime (as kpsdk once read it)
    (tmp_path / "vmlinuz-test.kallsyms").write_text(forged)
    assert "from_the_forger" not in load_kallsyms_from_image(image)
    # at the real entry: no header that hashes the image and the entries
    cache = cache_entry(image)
    cache.write_text(forged)
    assert "from_the_forger" not in load_kallsyms_from_image(image)
    # an entry anyone may have written (world-writable) is not trusted, however well formed
    entries = [e._replace(name="from_the_forger") if e.name == "do_sys_openat2" else e
               for e in read_image_entries(image)]
    kallsyms_cache.write_cache(hashlib.sha256(image.read_bytes()).hexdigest(), entries)
    cache.chmod(0o666)
    assert "from_the_forger" not in load_kallsyms_from_image(image)
    assert "from_the_forger" not in cache.read_text()  # and replaced


def test_links_planted_at_cache_names_are_not_followed(tmp_path: Path) -> None:
    image = synthetic_vmlinuz(tmp_path / "images" / "vmlinuz-test")
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    cache = cache_entry(image)
    cache.parent.mkdir(mode=0o700, parents=True)
    planted = [
        cache,  # the entry itself: its name follows from the image
        image.with_name(image.name + ".kallsyms"),  # where kpsdk once cached, and its temporary file
        image.with_name(f"{image.name}.kallsyms.{os.getpid()}.tmp"),
    ]
    for link in planted:
        link.symlink_to(victim)
    table = load_kallsyms_from_image(image)
    assert table.get("helper").name == "helper.isra.0"
    assert victim.read_text() == "precious\n"
    assert not cache.is_symlink() and "helper.isra.0" in cache.read_text()  # replaced, not followed
    assert load_kallsyms_from_image(image).get("_etext").address == table.get("_etext").address


def test_cache_directory_planted_as_a_link_is_not_used(tmp_path: Path) -> None:
    image = synthetic_vmlinuz(tmp_path / "vmlinuz-test")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache_root().mkdir(parents=True, exist_ok=True)
    (cache_root() / "kallsyms").symlink_to(elsewhere)
    with pytest.warns(UserWarning, match="not caching in"):
        table = load_kallsyms_from_image(image)
    assert "helper.isra.0" in table and list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_cache_entry_is_rebuilt(tmp_path: Path, damage: str) -> None:
    image = synthetic_vmlinuz(tmp_path / "vmlinuz-test")
    full = load_kallsyms_from_image(image)
    [cache] = cache_files(image)
    good = cache.read_bytes()
    lines = good.splitlines(keepends=True)
    cache.write_bytes({"truncated": b"".join(lines[: len(lines) // 2]), "garbage": good[:200] + b"\x00\xff" * 50,
                       "empty": b""}[damage])
    rebuilt = load_kallsyms_from_image(image)
    assert [(s.name, s.address) for s in rebuilt] == [(s.name, s.address) for s in full]
    assert cache.read_bytes() == good  # and written again


def test_readme_kernel_stays_one_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel the README boots stays the one file its lookup finds after the kernel's symbols
    are loaded (and cached) twice: the README takes ``$KERNEL`` from ``python -m
    kpsdk.fixtures.kernel --arch x86_64 --shell``, which is :func:`kernel.fetch_kernel`'s
    ``boot/vmlinuz-*`` in the cache, and the kallsyms cache must not put a second ``vmlinuz-*``
    file beside it."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert '--kernel "$KERNEL"' in readme and "kpsdk.fixtures.kernel --arch x86_64 --shell" in readme
    for name in ("KPSDK_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    package = "linux-image-6.1.0-test-amd64"
    image = synthetic_vmlinuz(tmp_path / f".cache/kpsdk/kernel/{package}/boot/vmlinuz-6.1.0-test")
    record_tree(image.parent.parent, {package: "1 sha256:" + "0" * 64})  # as kpsdk unpacked it
    for _ in range(2):
        load_kernel_symbols(image)
    assert glob.glob(str(image.parent / "vmlinuz-*")) == [str(image)]
    assert sorted(image.parent.iterdir()) == [image]
    # the package named, so nothing is downloaded: the cached one is found as --shell finds it
    assert kernel.fetch_kernel(package=package) == image


def test_elf_with_symtab_uses_it() -> None:
    table = load_kallsyms_from_image(fixtures.path("x86_64"), cache=False)
    assert table.get("add").kind == "func" and table.get("counter").kind == "object"


def test_load_kernel_symbols_takes_any_file(tmp_path: Path) -> None:
    (tmp_path / "System.map").write_text(SAMPLE_MAP)
    assert load_kernel_symbols(tmp_path / "System.map").get("jiffies").kind == "object"
    (tmp_path / "stub").write_text(STUB_SYSTEM_MAP)
    with pytest.raises(SymbolError, match="stub"):
        load_kernel_symbols(tmp_path / "stub")
    vmlinux = ELF_ISH + encode_kallsyms(synthetic_symbols(), "6.4")
    (tmp_path / "vmlinuz").write_bytes(fake_bzimage(gzip.compress(vmlinux) + struct.pack("<I", len(vmlinux))))
    assert load_kernel_symbols(tmp_path / "vmlinuz").get("helper").name == "helper.isra.0"
    with pytest.raises(SymbolError, match="cannot read"):
        load_kernel_symbols(tmp_path / "absent")


def test_missing_image() -> None:
    with pytest.raises(SymbolError, match="does not exist"):
        load_kallsyms_from_image("/nonexistent/vmlinuz")


# --------------------------------------------------------------------------- initramfs and markers


def test_newc_archive_format() -> None:
    raw = kernel.newc_archive([("dev", 0o40755, b"", (0, 0)), ("dev/console", 0o20600, b"", (5, 1)),
                               ("bin/sh", 0o120777, b"busybox", (0, 0))])
    assert raw.startswith(b"070701") and len(raw) % 4 == 0
    assert b"TRAILER!!!\0" in raw
    # the console node: rdevmajor 5, rdevminor 1 (fields 10 and 11 of the header)
    hdr = raw[raw.index(b"070701", 6):]
    fields = [int(hdr[6 + 8 * i : 14 + 8 * i], 16) for i in range(13)]
    assert fields[1] == 0o20600 and fields[9:11] == [5, 1]


def test_build_initramfs_is_reproducible(tmp_path: Path) -> None:
    if not Path("/bin/busybox").is_file() and not Path("/usr/bin/busybox").is_file():
        pytest.skip("busybox not found: install the Debian package busybox-static")
    a = kernel.build_initramfs(tmp_path / "a.cpio.gz", "echo hi", files={"/etc/x/y": "z"})
    b = kernel.build_initramfs(tmp_path / "b.cpio.gz", "echo hi", files={"/etc/x/y": "z"})
    assert a.read_bytes() == b.read_bytes()
    raw = gzip.decompress(a.read_bytes())
    for name in (b"init\0", b"bin/busybox\0", b"bin/sh\0", b"dev/console\0", b"etc/x/y\0", b"etc/kpsdk-hello\0"):
        assert name in raw
    assert b"echo hi\necho KPSDK-END" in raw


def test_busybox_must_be_static(tmp_path: Path) -> None:
    from kpsdk.errors import UnsupportedTargetError

    with pytest.raises(UnsupportedTargetError, match="busybox-static"):
        kernel.build_initramfs(tmp_path / "x.cpio.gz", busybox=os.path.realpath(sys.executable))
    with pytest.raises(UnsupportedTargetError, match="busybox-static"):
        kernel.build_initramfs(tmp_path / "x.cpio.gz", busybox=tmp_path / "none")


def test_fetch_kernel_errors_name_the_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kpsdk.errors import UnsupportedTargetError

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(UnsupportedTargetError, match="apt-cache not found: install the Debian package apt"):
        kernel.fetch_kernel(tmp_path / "cache")
    with pytest.raises(UnsupportedTargetError, match="apt-get not found"):
        kernel.fetch_kernel(tmp_path / "cache", package="linux-image-x-amd64-unsigned")


def test_fetch_kernel_falls_back_to_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / ".kpsdk"))
    cached = tmp_path / "linux-image-old-amd64-unsigned_1.0" / "boot" / "vmlinuz-old"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"old kernel")
    record_tree(cached.parent.parent, {"linux-image-old-amd64-unsigned": "1.0 sha256:" + "0" * 64})
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert kernel.fetch_kernel(tmp_path) == cached  # apt is not there: use what the cache has
    with pytest.warns(UserWarning, match="using the cached"):
        assert kernel.fetch_kernel(tmp_path, package="linux-image-new-amd64-unsigned") == cached


def test_parse_markers_and_qemu_command() -> None:
    console = (
        "KPSDK-BEGIN\r\nhello\n[  1.0] x KPSDK open path=/a ret=-2 rc=1\n"
        "KPSDK spawn cmd=/bin/true pid=7\nKPSDK-END\n"
    )
    markers = kernel.parse_markers(console)
    assert [m.action for m in markers] == ["BEGIN", "open", "spawn", "END"]
    assert markers[1].fields == {"path": "/a", "ret": "-2", "rc": "1"}
    cmd = kernel.qemu_command("vmlinuz", "initrd", extra=["-s"])
    assert cmd[0] == "qemu-system-x86_64" and cmd[-1] == "-s"
    assert cmd[cmd.index("-accel") + 1] == "tcg" and "-no-reboot" in cmd
    assert "nokaslr" in cmd[cmd.index("-append") + 1] and "console=ttyS0" in kernel.DEFAULT_APPEND


# --------------------------------------------------------------------------- the real kernel


def _clone_with_unique_base(entries: list[KallsymsEntry], kind: str) -> KallsymsEntry:
    """A ``<base>.<kind>.0`` function that is the only symbol called ``<base>`` or ``<base>.*``."""
    count: dict[str, int] = {}
    for e in entries:
        base = e.name.split(".")[0]
        count[base] = count.get(base, 0) + 1
    for e in entries:
        m = re.fullmatch(rf"(\w+)\.{kind}\.0", e.name)
        if e.type in "tT" and m and count[m.group(1)] == 1:
            return e
    raise AssertionError(f"no .{kind}. clone with a unique base name in the image")


@pytest.mark.kernel
def test_debian_vmlinuz_symbols_match_proc_kallsyms(
    debian_kernel: Path, kernel_initramfs: Callable[..., Path]
) -> None:
    """Every kallsyms line decoded from the image equals the booted kernel's /proc/kallsyms."""
    entries = read_image_entries(debian_kernel)
    table = load_kallsyms_from_image(debian_kernel)
    isra = _clone_with_unique_base(entries, "isra")
    constprop = _clone_with_unique_base(entries, "constprop")
    wanted = ["_text", "startup_64", "do_sys_openat2", "kernel_clone", isra.name, constprop.name]
    pattern = "|".join(re.escape(n) for n in wanted)
    workload = rf"""
echo 0 > /proc/sys/kernel/kptr_restrict
grep -v '\[' /proc/kallsyms > /tmp/kallsyms
echo "KPSDK kallsyms lines=$(wc -l < /tmp/kallsyms) sha256=$(sha256sum /tmp/kallsyms | cut -d' ' -f1)"
grep -E ' ({pattern})$' /tmp/kallsyms | sed 's/^/KALLSYMS /'
"""
    result = kernel.boot(debian_kernel, kernel_initramfs(workload), timeout=180)
    assert result.returncode == 0, result.console[-2000:]
    guest = {}
    for line in result.console.splitlines():
        if line.startswith("KALLSYMS "):
            addr, typ, name = line.split()[1:4]
            guest[name] = (int(addr, 16), typ)
    assert set(guest) == set(wanted), result.console[-2000:]
    assert guest["_text"][0] == 0xFFFFFFFF81000000  # nokaslr: the link-time base
    for name in ("_text", "startup_64", "do_sys_openat2", "kernel_clone"):
        assert table.get(name).address == guest[name][0], name
        assert table.get(name).kind == "func"
    for clone in (isra, constprop):
        base = clone.name.split(".")[0]
        assert table.get(base).name == clone.name
        assert table.get(base).address == guest[clone.name][0]
    # the whole table: same lines, same order, same bytes
    ours = "".join(f"{e.address:016x} {e.type} {e.name}\n" for e in entries)
    (summary,) = [m for m in kernel.parse_markers(result.console) if m.action == "kallsyms"]
    assert int(summary.fields["lines"]) == len(entries)
    assert summary.fields["sha256"] == hashlib.sha256(ours.encode()).hexdigest()


@pytest.mark.kernel
def test_debian_package_ships_the_stub_system_map(debian_kernel: Path) -> None:
    """Why the image is the symbol source: the packaged System.map is the 83-byte stub."""
    (stub,) = debian_kernel.parent.glob("System.map-*")
    assert stub.read_text() == STUB_SYSTEM_MAP
    with pytest.raises(SymbolError, match="stub System.map"):
        load_kernel_symbols(stub)
    _, compression = extract_vmlinux(debian_kernel)
    assert compression in ("xz", "zstd", "gzip", "lzma", "lz4", "bzip2")  # Debian 12: xz
    table = load_kernel_symbols(debian_kernel)
    assert len(table) > 50_000 and table.get("kernel_clone").kind == "func"


@pytest.mark.kernel
def test_initramfs_workload_boots_and_powers_off(debian_kernel: Path, kernel_initramfs: Callable[..., Path]) -> None:
    result = kernel.boot(debian_kernel, kernel_initramfs(), timeout=120)
    assert result.returncode == 0, result.console[-2000:]
    markers = kernel.parse_markers(result.console)
    actions = [m.action for m in markers]
    assert actions == ["BEGIN", "open", "open", "open", "stat"] + ["spawn"] * kernel.SPAWN_COUNT + [
        "END", "POWEROFF"], result.console[-2000:]
    opens = [(m.fields["path"], m.fields["ret"], m.fields["rc"]) for m in markers if m.action == "open"]
    assert opens == [
        ("/etc/kpsdk-hello", "ok", "0"),
        ("/kpsdk-missing", "-2", "1"),
        ("/etc/kpsdk-hello/sub", "-20", "1"),
    ]
    assert kernel.HELLO_TEXT in result.console
    assert "can't open '/kpsdk-missing': No such file or directory" in result.console
    pids = [int(m.fields["pid"]) for m in markers if m.action == "spawn"]
    assert len(set(pids)) == kernel.SPAWN_COUNT and pids == sorted(pids)
    assert "reboot: Power down" in result.console


@pytest.mark.kernel
def test_boot_is_bounded(debian_kernel: Path, kernel_initramfs: Callable[..., Path]) -> None:
    """A guest that never powers off is killed at the timeout, with the console in the error."""
    initrd = kernel_initramfs("echo KPSDK-HANG; sleep 1000")
    start = time.monotonic()
    with pytest.raises(TargetError, match=r"did not power off within 15 s; console ends with"):
        kernel.boot(debian_kernel, initrd, timeout=15)
    assert time.monotonic() - start < 60


def test_fixture_prints_a_trace_command_that_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m kpsdk.fixtures.kernel``'s ``kpsdk:`` line is a command kpsdk trace accepts
    (it printed ``-e 'r:do_sys_openat2 $retval'``: an event named do_sys_openat2 on the symbol
    ``$retval``, refused), with the paths quoted for a shell."""
    from kpsdk.trace.grammar import parse

    vmlinuz, initrd = tmp_path / "a dir" / "vmlinuz", tmp_path / "a dir" / "initrd.cpio.gz"
    monkeypatch.setattr(kernel, "fetch_kernel", lambda *a, **k: vmlinuz)
    monkeypatch.setattr(kernel, "build_initramfs", lambda *a, **k: initrd)
    assert kernel.main([]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("kpsdk:"))
    words = shlex.split(line.removeprefix("kpsdk:"))
    assert words[:3] == ["kpsdk", "trace", "qemu-system:x86_64"]
    assert words[words.index("--kernel") + 1] == str(vmlinuz)
    assert words[words.index("--initrd") + 1] == str(initrd)
    definition = parse(words[words.index("-e") + 1])
    assert (definition.op, definition.symbol) == ("r", "do_sys_openat2")
