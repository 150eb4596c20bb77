"""kpsdk's BTF reader (kpsdk/kernel/btf.py) against bpftool's, on the BTF of Debian's kernel.

The ``.BTF`` section of the vmlinux inside Debian's ``vmlinuz`` is read by both: every
struct and union bpftool lists (``bpftool btf dump file F format raw``) must have, in
kpsdk's reading, the same name, size and members (name, type id, bit offset).  And any
bytes at all are either read or refused with an ImageFormatError.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kpsdk.binfmt.elfimage import ElfFile
from kpsdk.errors import ImageFormatError
from kpsdk.kernel.btf import STRUCT, UNION, Btf
from kpsdk.kernel.kallsyms import extract_vmlinux
from tests.conftest import fuzz_examples, require_tool

HEAD = re.compile(r"^\[(\d+)\] (STRUCT|UNION) '([^']*)' size=(\d+) vlen=(\d+)$")
MEMBER = re.compile(r"^\t'([^']*)' type_id=(\d+) bits_offset=(\d+)(?: bitfield_size=(\d+))?$")


@pytest.fixture(scope="module")
def btf_file(debian_kernel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    vmlinux, _ = extract_vmlinux(debian_kernel)
    elf = ElfFile(vmlinux, debian_kernel)
    section = elf.section(".BTF")
    assert section is not None
    out = tmp_path_factory.mktemp("btf") / "vmlinux.btf"
    out.write_bytes(elf.contents(section))
    return out


def bpftool_aggregates(path: Path) -> dict[int, tuple[str, str, int, list[tuple[str, int, int, int]]]]:
    """``id -> (kind, name, size, [(member, type id, bit offset, bitfield size)])`` as bpftool reads them."""
    tool = require_tool("bpftool", "bpftool")
    text = subprocess.run([tool, "btf", "dump", "file", str(path), "format", "raw"], capture_output=True,
                          text=True, check=True, timeout=300).stdout
    out: dict[int, tuple[str, str, int, list[tuple[str, int, int, int]]]] = {}
    current: list[tuple[str, int, int, int]] | None = None
    for line in text.splitlines():
        m = HEAD.match(line)
        if m:
            current = []
            out[int(m[1])] = (m[2], m[3], int(m[4]), current)
            continue
        m = MEMBER.match(line)
        if m and current is not None:
            current.append((m[1], int(m[2]), int(m[3]), int(m[4] or 0)))
        elif not line.startswith("\t"):
            current = None
    return out


def test_every_struct_and_union_as_bpftool_reads_it(btf_file: Path) -> None:
    truth = bpftool_aggregates(btf_file)
    btf = Btf(btf_file.read_bytes(), str(btf_file))
    assert len(truth) > 1000 and any(name == "task_struct" for _, name, _, _ in truth.values())
    ours = {}
    for t in btf.types:
        if t.kind in (STRUCT, UNION):
            raw = [(name or "(anon)", mtype.id, bits) for name, bits, mtype in btf.members(t)]
            ours[t.id] = ("STRUCT" if t.kind == STRUCT else "UNION", t.name or "(anon)", t.size_or_type, raw)
    assert ours.keys() == truth.keys()
    for type_id, (kind, name, size, members) in truth.items():
        o_kind, o_name, o_size, o_members = ours[type_id]
        assert (o_kind, o_name, o_size) == (kind, name, size), type_id
        expected = [(n, tid, -1 if bf else bits) for n, tid, bits, bf in members]
        assert o_members == expected, (type_id, name)


def test_member_paths_add_up_as_in_bpftool(btf_file: Path) -> None:
    """``member("task_struct", "thread_info.flags")``: the offsets of each step, summed."""
    truth = bpftool_aggregates(btf_file)
    btf = Btf(btf_file.read_bytes(), str(btf_file))
    by_name = {name: (tid, members) for tid, (kind, name, _, members) in truth.items() if kind == "STRUCT" and name}
    task_id, task_members = by_name["task_struct"]
    for name in ("pid", "comm", "migration_disabled"):
        bits = next(b for n, _, b, _ in task_members if n == name)
        assert btf.member("task_struct", name).offset * 8 == bits
    ti_bits, ti_type = next((b, t) for n, t, b, _ in task_members if n == "thread_info")
    flags_bits = next(b for n, _, b, _ in truth[ti_type][3] if n == "flags")
    assert btf.member("task_struct", "thread_info.flags").offset * 8 == ti_bits + flags_bits
    with pytest.raises(LookupError):
        btf.member("task_struct", "no_such_member")


@settings(max_examples=fuzz_examples(200))
@given(data=st.binary(max_size=400), head=st.sampled_from([b"", b"\x9f\xeb\x01\x00", b"\xeb\x9f\x01\x00"]))
def test_any_bytes_are_read_or_refused(data: bytes, head: bytes) -> None:
    try:
        btf = Btf(head + data)
        for t in btf.types:
            if t.kind in (STRUCT, UNION):
                btf.members(t)
                btf.size(t)
    except ImageFormatError:
        pass
