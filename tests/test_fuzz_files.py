"""Property-based tests of every file format kpsdk reads: whatever the bytes, kpsdk either reads
them or raises its own error, at once.

"Its own error" is a :class:`~kpsdk.errors.KpsdkError` (for a malformed file an
:class:`~kpsdk.errors.ImageFormatError` naming the file) or an :class:`OSError` carrying an
errno; any other exception type is a bug, and so is a hang (each example runs under a deadline).
The inputs: System.map and kallsyms text (random, and lines built from valid and invalid
fields), kallsyms tables inside kernel images (random bytes, and mutations of a table built
the way ``scripts/kallsyms.c`` lays it out), and the bundled fixture ELFs with bytes flipped,
fields overwritten (ELF header, program headers, section headers, symbols) or cut short,
opened with ``kpsdk.open("elf:...")`` and listed with ``kpsdk list``.

Examples are kept cheap (a few ms each); the number of examples comes from the hypothesis
profile (``tests/conftest.py``: bounded for CI, large for ``nox -s fuzz``).
"""

from __future__ import annotations

import functools
import gzip
import struct
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.errors import ImageFormatError, KpsdkError
from kpsdk.kernel.kallsyms import (
    KallsymsEntry,
    decode_kallsyms,
    load_kallsyms_from_image,
    load_kernel_symbols,
    parse_kallsyms_text,
)
from tests.badfiles import FIELDS, ElfPatch, deadline
from tests.test_kernel_image import ELF_ISH, encode_kallsyms, fake_bzimage, synthetic_symbols

pytestmark = pytest.mark.fuzz

T = TypeVar("T")

#: per example: what kpsdk may take on a loaded machine (hypothesis's check), and what is a hang
SLOW = settings(deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])
HANG_SECONDS = 10


def outcome(call: Callable[[], T], path: Path | str | None = None) -> T | KpsdkError | OSError:
    """``call()``'s result, or the kpsdk error / errno-carrying OSError it raised (which names
    ``path`` when it is a format error of that file).  Any other exception, or a hang, fails."""
    try:
        with deadline(HANG_SECONDS):
            return call()
    except KpsdkError as e:
        if isinstance(e, ImageFormatError) and path is not None:
            assert e.path == str(path), e
        return e
    except OSError as e:
        assert e.errno is not None, e
        return e


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file the examples overwrite (hypothesis runs examples one after another)."""
    return tmp_path_factory.mktemp("fuzz") / "input"


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Images decoded here are cached in a directory of their own, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KPSDK_CACHE", str(tmp_path_factory.mktemp("kpsdk-cache")))
        yield


# -- System.map / kallsyms text ------------------------------------------------------------------

HEX = "0123456789abcdefABCDEF"
#: addresses int(x, 16) takes (or nearly) that the kernel never writes
BAD_ADDRESSES = ("-1", "0x10", "1_0", "+7", "1" + "0" * 16, "\u0661", "g", "ffffffff8100000z")
good_address = st.integers(0, 2**64 - 1).map(lambda a: f"{a:016x}") | st.text(HEX, min_size=1, max_size=16)
bad_address = st.sampled_from(BAD_ADDRESSES)
good_type = st.sampled_from("TtWDdBbRrVAUNnw")
good_name = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="[]"),
                    min_size=1, max_size=30)


@st.composite
def symbol_line(draw: st.DrawFn) -> tuple[str, KallsymsEntry | None]:
    """A line and the entry the kernel's format makes of it (None: the line is not in that format)."""
    address = draw(good_address | bad_address)
    kind = draw(good_type | st.sampled_from(["TT", "1", "?", "é"]))
    name = draw(good_name)
    module = draw(st.none() | good_name | good_name.map(lambda m: f"[{m}]"))
    sep = draw(st.sampled_from([" ", "\t", "  "]))
    fields = [address, kind, name] + ([module] if module is not None else [])
    valid = (address not in BAD_ADDRESSES and len(kind) == 1 and kind.isascii() and kind.isalpha()
             and (module is None or module.startswith("[")))
    entry = KallsymsEntry(int(address, 16), kind, name, (module or "")[1:-1]) if valid else None
    return sep.join(fields), entry


@given(lines=st.lists(symbol_line(), min_size=1, max_size=20))
def test_symbol_lines_parse_exactly_as_the_kernel_writes_them(lines: list[tuple[str, KallsymsEntry | None]]) -> None:
    text = "\n".join(line for line, _ in lines)
    result = outcome(lambda: parse_kallsyms_text(text, "map"), "map")
    bad = [i for i, (_, entry) in enumerate(lines, 1) if entry is None]
    if bad:
        assert isinstance(result, ImageFormatError) and result.line == bad[0], result
    elif all(entry.address == 0 for _, entry in lines if entry is not None):
        assert isinstance(result, KpsdkError) and "kptr_restrict" in str(result)
    else:
        assert result == [entry for _, entry in lines]


@given(text=st.text(max_size=400))
def test_any_text_as_a_symbol_list(text: str) -> None:
    result = outcome(lambda: parse_kallsyms_text(text, "map"), "map")
    if isinstance(result, list):
        assert all(0 <= e.address < 2**64 and len(e.type) == 1 and e.type.isalpha() for e in result)


@given(data=st.binary(max_size=400) | st.text(HEX + " \n\tTtDd_x[]", max_size=400).map(str.encode))
def test_any_file_as_kernel_symbols(scratch: Path, data: bytes) -> None:
    scratch.write_bytes(data)
    outcome(lambda: load_kernel_symbols(scratch), scratch)


# -- kallsyms tables inside kernel images --------------------------------------------------------


@functools.cache
def real_table(layout: str) -> bytes:
    """A vmlinux-like blob holding a kallsyms table (~700 symbols) in a kernel version's layout."""
    return ELF_ISH + encode_kallsyms(synthetic_symbols(), layout)


@st.composite
def mutated(draw: st.DrawFn, blob: bytes, start: int = 0) -> bytes:
    """``blob`` with a few bytes flipped, u32 words overwritten or a slice cut out, then maybe truncated
    (changes land after ``start``, mostly inside the table)."""
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(start, len(data) - 4))
        how = draw(st.sampled_from(["flip", "u32", "cut"]))
        if how == "flip":
            data[pos] ^= draw(st.integers(1, 255))
        elif how == "u32":
            value = draw(st.sampled_from([0, 1, 255, 256, 0x7FFFFFFF, 0xFFFFFFFF]) | st.integers(0, 2**32 - 1))
            struct.pack_into(draw(st.sampled_from(["<I", ">I"])), data, pos, value)
        else:
            del data[pos : pos + draw(st.integers(1, 64))]
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


@given(head=st.sampled_from([b"", b"\x7fELF", b"\x7fELF\x02", ELF_ISH]), data=st.binary(max_size=2000))
def test_random_bytes_as_a_kallsyms_table(head: bytes, data: bytes) -> None:
    outcome(lambda: decode_kallsyms(head + data))


@SLOW
@given(layout=st.sampled_from(["6.1", "6.2", "6.4", "absolute"]), data=st.data())
def test_mutated_kallsyms_table(layout: str, data: st.DataObject) -> None:
    blob = data.draw(mutated(real_table(layout), start=4096))
    result = outcome(lambda: decode_kallsyms(blob, "image"), "image")
    if isinstance(result, list):  # what decodes is what a System.map line can say
        assert all(0 <= e.address < 2**64 and e.type.isalpha() and e.name.isprintable() for e in result)


@SLOW
@given(data=st.data(), inside=st.booleans())
def test_mutated_kernel_image(scratch: Path, data: st.DataObject, inside: bool) -> None:
    """A bzImage whose vmlinux (``inside``) or whose compressed bytes were mutated."""
    if inside:
        vmlinux = data.draw(mutated(real_table("6.2"), start=4096))
        image = fake_bzimage(gzip.compress(vmlinux, mtime=0) + struct.pack("<I", len(vmlinux)))
    else:
        vmlinux = real_table("6.2")
        image = data.draw(mutated(fake_bzimage(gzip.compress(vmlinux, mtime=0) + struct.pack("<I", len(vmlinux)))))
    scratch.write_bytes(image)
    outcome(lambda: load_kallsyms_from_image(scratch), scratch)


# -- corrupt fixture ELFs ------------------------------------------------------------------------

FIXTURE_ELFS = sorted(p.name for p in (Path(fixtures.__file__).parent / "bin").glob("*.elf"))


@functools.cache
def fixture_bytes(name: str) -> bytes:
    return (Path(fixtures.__file__).parent / "bin" / name).read_bytes()


@st.composite
def corrupt_elf(draw: st.DrawFn) -> bytes:
    """A fixture ELF with 1-3 edits: a header/program header/section header/symbol field set to an
    edge or random value, or a byte flipped; then maybe cut short."""
    elf = ElfPatch(fixture_bytes(draw(st.sampled_from(FIXTURE_ELFS))))
    size = len(elf.data)
    edge = st.sampled_from([0, 1, 2, 7, 0x80, 0xFF, 0xFFFF, 0xFF00, 2**31, 2**32 - 1, 2**32, 2**33, 2**63,
                            2**64 - 1, 2**64 - 0x1000, size, size - 1, size + 1, 1 << 30])
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            elf.data[draw(st.integers(0, size - 1))] ^= draw(st.integers(1, 255))
            continue
        table = draw(st.sampled_from(sorted(FIELDS)))
        field = draw(st.sampled_from(sorted(FIELDS[table][elf.elf_class])))
        index = draw(st.integers(0, elf.count(table) - 1))
        elf.set(table, index, field, draw(edge | st.integers(0, 2**64 - 1)))
    if draw(st.integers(0, 4)) == 0:
        del elf.data[draw(st.integers(0, size)) :]
    return bytes(elf.data)


def open_and_close(path: Path) -> Any:
    with kpsdk.open(f"elf:{path}") as s:
        return len(s.symbols)


@SLOW
@given(data=corrupt_elf())
def test_corrupt_elf_opened(scratch: Path, data: bytes) -> None:
    scratch.write_bytes(data)
    outcome(lambda: open_and_close(scratch), scratch)


runner = CliRunner()


@SLOW
@given(data=corrupt_elf())
def test_corrupt_elf_listed(scratch: Path, data: bytes) -> None:
    """``kpsdk list``: exit 0, or exit 1 with one ``error:`` line naming the file (never a traceback)."""
    scratch.write_bytes(data)
    with deadline(HANG_SECONDS):
        result = runner.invoke(app, ["list", "--all", str(scratch)])
    if result.exit_code == 0:
        assert "symbols." in result.stdout
        return
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
