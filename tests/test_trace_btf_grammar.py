"""BTF fetch arguments in the grammar, without a boot: Debian 13's 6.12 image against bpftool.

The BTF of the ``vmlinuz`` (``.BTF`` of the vmlinux inside) is read twice: by kpsdk's grammar
(:mod:`kpsdk.trace.btfargs`) and by bpftool (``bpftool btf dump file F format raw``), whose
records this test follows itself.  ``$arg*`` must expand to the parameters bpftool lists, each
typed as the kernel types it (``fetch_type_from_btf_type``: a pointer ``x64``, an int of its
sign and size, an enum ``s32``), and each ``->`` of a member chain must load at the sum of the
members' offsets bpftool gives.  The same definitions on a 6.1 kernel are refused as 6.1 refuses
them (``tests/test_trace_grammar_kernel.py`` asks 6.1 itself), and a synthetic BTF takes the
fuzzing (``tests/test_fuzz_inputs.py``).  What 6.12 itself says is ``tests/test_trace_btf_kernel.py``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

import kpsdk
from kpsdk.errors import TraceDefinitionError
from kpsdk.trace.btfargs import BtfArgs
from kpsdk.trace.btfsyntax import kernel_btf_args
from kpsdk.trace.grammar import Fetch, Parser
from tests.conftest import require_tool

RECORD = re.compile(r"^\[(\d+)\] (\w+) '([^']*)'(.*)$")
ITEM = re.compile(r"^\t'([^']*)' type_id=(\d+)(?: bits_offset=(\d+))?")
FUNCTIONS = ("do_sys_openat2", "vfs_open", "do_filp_open", "kernel_clone", "vfs_read", "vfs_write")
CHAINS = [("vfs_read", "file", ("f_path.dentry", "d_name.name")), ("vfs_open", "path", ("dentry", "d_name.len")),
          ("do_filp_open", "pathname", ("name",)), ("do_sys_openat2", "how", ("flags",))]


@pytest.fixture(scope="module")
def x86_64() -> kpsdk.Arch:
    return kpsdk.get_registry().arch("x86_64")


@pytest.fixture(scope="module")
def btf612(debian_kernel_612: Path, x86_64: kpsdk.Arch) -> BtfArgs:
    btf = kernel_btf_args(debian_kernel_612, x86_64)
    assert btf is not None
    return btf


@pytest.fixture(scope="module")
def bpftool(btf612: BtfArgs, tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, str, str, list]]:
    """``id -> (kind, name, attributes, [(item name, type id, bit offset)])`` as bpftool reads them."""
    tool = require_tool("bpftool", "bpftool")
    path = tmp_path_factory.mktemp("btf612") / "vmlinux.btf"
    path.write_bytes(btf612.btf.data)
    text = subprocess.run([tool, "btf", "dump", "file", str(path), "format", "raw"], capture_output=True,
                          text=True, check=True, timeout=300).stdout
    out: dict[int, tuple[str, str, str, list]] = {}
    items: list = []
    for line in text.splitlines():
        m = RECORD.match(line)
        if m:
            items = []
            out[int(m[1])] = (m[2], m[3], m[4], items)
        elif (i := ITEM.match(line)) is not None:
            items.append((i[1], int(i[2]), int(i[3] or 0)))
    return out


def _attr(record: tuple[str, str, str, list], key: str) -> int:
    m = re.search(rf"\b{key}=(\d+)", record[2])
    assert m is not None, record
    return int(m[1])


def _skip(truth: dict, tid: int) -> int:
    while truth[tid][0] in ("TYPEDEF", "CONST", "VOLATILE", "RESTRICT", "TYPE_TAG"):
        tid = _attr(truth[tid], "type_id")
    return tid


def _expected_type(truth: dict, tid: int) -> str:
    """fetch_type_from_btf_type, from bpftool's records."""
    record = truth[_skip(truth, tid)]
    if record[0] == "PTR":
        return "x64"
    if record[0] == "ENUM":
        return "s32"
    if record[0] == "INT":
        bits = _attr(record, "nr_bits")
        return f"{'s' if 'encoding=SIGNED' in record[2] else 'u'}{bits}"
    return "x64"


def _function(truth: dict, name: str) -> list[tuple[str, int, int]]:
    (func,) = [r for r in truth.values() if r[0] == "FUNC" and r[1] == name][:1]
    return truth[_attr(func, "type_id")][3]


def _member(truth: dict, tid: int, name: str) -> tuple[int, int] | None:
    """``(type id, bit offset)`` of member ``name``, looking into anonymous structs and unions."""
    for member, mtid, bits in truth[tid][3]:
        if member == name:
            return mtid, bits
    for member, mtid, bits in truth[tid][3]:
        if member == "(anon)" and truth[_skip(truth, mtid)][0] in ("STRUCT", "UNION"):
            inner = _member(truth, _skip(truth, mtid), name)
            if inner is not None:
                return inner[0], bits + inner[1]
    return None


def test_arg_star_is_the_parameters_bpftool_lists(btf612: BtfArgs, bpftool: dict, x86_64: kpsdk.Arch) -> None:
    parser = Parser(x86_64, kernel=(6, 12), btf=btf612)
    for name in FUNCTIONS:
        params = _function(bpftool, name)
        parsed = parser.parse(f"p:e {name} $arg*")
        assert [a.name for a in parsed.args] == [p[0] for p in params], name
        assert [a.type.name for a in parsed.args] == [_expected_type(bpftool, p[1]) for p in params], name
        assert [a.fetch for a in parsed.args] == [Fetch("arg", index=i + 1, column=a.fetch.column, btf=a.fetch.btf,
                                                        btf_column=a.fetch.btf_column)
                                                  for i, a in enumerate(parsed.args)]
        # $argN is the N-th of them, named and typed alike
        last = parser.parse(f"p:e {name} ${'arg'}{len(params)}").args[0]
        assert (last.name, last.type.name) == (params[-1][0], _expected_type(bpftool, params[-1][1]))


def test_member_chains_load_at_bpftools_offsets(btf612: BtfArgs, bpftool: dict, x86_64: kpsdk.Arch) -> None:
    parser = Parser(x86_64, kernel=(6, 12), btf=btf612)
    for function, param, steps in CHAINS:
        (ptype,) = [t for n, t, _ in _function(bpftool, function) if n == param]
        expected = []
        tid = _skip(bpftool, ptype)
        for step in steps:  # each ->: from a pointer to its struct, then the dotted members
            tid = _skip(bpftool, _attr(bpftool[tid], "type_id"))
            bits = 0
            for member in step.split("."):
                found = _member(bpftool, tid, member)
                assert found is not None, (tid, member)
                bits += found[1]
                tid = _skip(bpftool, found[0])
            expected.append(bits // 8)
        arg = parser.parse(f"p:e {function} {param}->{'->'.join(steps)}").args[0]
        derefs = [n.value for n in arg.fetch.walk() if n.kind == "deref"]
        assert derefs[::-1] == expected, (function, steps)
        assert arg.fetch.walk()[-1].kind == "arg" and arg.type.name == _expected_type(bpftool, tid)


def test_string_on_a_char_pointer_loads_it(btf612: BtfArgs, x86_64: kpsdk.Arch) -> None:
    parser = Parser(x86_64, kernel=(6, 12), btf=btf612)
    plain = parser.parse("p:e do_sys_openat2 filename").args[0]
    string = parser.parse("p:e do_sys_openat2 filename:string").args[0]
    assert (plain.name, plain.type.name, plain.fetch.kind) == ("filename", "x64", "arg")
    assert string.type.is_string and string.fetch.kind == "deref" and string.fetch.inner is not None
    assert string.fetch.inner.kind == "arg" and string.fetch.value == 0
    with pytest.raises(TraceDefinitionError) as refused:
        parser.parse("p:e do_sys_openat2 dfd:string")
    assert refused.value.code == "BAD_TYPE4STR"


def test_a_6_1_kernel_refuses_them_as_before(btf612: BtfArgs, x86_64: kpsdk.Arch) -> None:
    """6.1 has no BTF arguments: a name is no fetch argument there (BAD_FETCH_ARG) and ``$arg*`` no
    variable, even when kpsdk has BTF at hand."""
    parser = Parser(x86_64, kernel=(6, 1), btf=btf612)
    for definition, code in (("p:e do_sys_openat2 filename", "BAD_FETCH_ARG"), ("p:e do_sys_openat2 $arg*", "BAD_VAR"),
                             ("p:e do_sys_openat2 how->flags", "BAD_FETCH_ARG")):
        with pytest.raises(TraceDefinitionError) as refused:
            parser.parse(definition)
        assert refused.value.code == code, definition
    assert parser.parse("p:e do_sys_openat2 $arg1").args[0].name == "arg1"  # not expanded: 6.1 names it argN


def test_without_btf_a_new_kernel_says_so(x86_64: kpsdk.Arch) -> None:
    """A 6.12 target given only a System.map: kpsdk cannot know the parameters, and says why."""
    parser = Parser(x86_64, kernel=(6, 12))
    with pytest.raises(TraceDefinitionError) as refused:
        parser.parse("p:e do_sys_openat2 filename")
    assert refused.value.code == "NOSUP_BTFARG" and "no BTF" in str(refused.value)
    assert parser.parse("p:e do_sys_openat2 $arg2").args[0].fetch.kind == "arg"  # left as $arg2, as a kernel
