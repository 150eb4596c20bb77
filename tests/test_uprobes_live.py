"""Uprobes on qemu-user (U1): the same rules as on Unicorn, through gdb, on all six archs.

Kept lean (a qemu-user session costs ~0.3 s): one test per arch runs two sessions
opened before a system-wide registration and one opened after; one per PIE arch
checks the bias read from the auxiliary vector; one checks that a copy of the
file is not probed.  Values are checked against the program run without kpsdk.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.plugins import uprobes as uprobes_plugin
from tests.conftest import QEMU, local_entry_offset, require_tool
from tests.test_live import LIVE_ARCHS, qemu_truth
from tests.test_uprobes import entry_offset, file_offset, link_address


@pytest.fixture(autouse=True)
def _no_system_wide_leftovers() -> Iterator[None]:
    yield
    for up in list(uprobes_plugin._system.values()):
        kpsdk.unregister_uprobe(up)


def copy_of(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copy2(src, dst)
    return dst


def open_user(arch: str, prog: Path) -> kpsdk.Session:
    require_tool(QEMU[arch], "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")
    return kpsdk.open(f"qemu-user:{prog}")


@pytest.mark.parametrize("arch", LIVE_ARCHS)
def test_system_wide_uprobes_fire_in_sessions_open_and_opened_later(arch: str, tmp_path: Path) -> None:
    truth = qemu_truth(arch)
    prog = copy_of(fixtures.path(arch), tmp_path)
    args: list[tuple[int, int]] = []
    returns: list[int] = []
    up = kpsdk.Uprobe(prog, file_offset(prog, "add"), pre_handler=lambda p, r: args.append((r.arg(0), r.arg(1))))
    # PATH:SYM is the symbol's value; the program's calls enter ppc64le's fact at its local entry
    local = local_entry_offset(prog, "fact")
    rp = kpsdk.Uretprobe.parse(f"{prog}:fact+{local}", handler=lambda ri, r: returns.append(int(r.return_value)))
    sessions = [open_user(arch, prog), open_user(arch, prog)]
    try:
        kpsdk.register_uprobes([up, rp])
        sessions.append(open_user(arch, prog))  # opened after the registration
        for s in sessions:
            assert up.address_in(s) == link_address(prog, "add")  # ET_EXEC: no bias
            assert s.run(timeout=30) == 0
            assert s.console == fixtures.EXPECTED_OUTPUT
        assert args == [(2, 3)] * 3
        assert returns == [1, 2, 6, 24, truth["fact"]] * 3
        assert (up.hits, rp.hits) == (3, 15)
    finally:
        for s in sessions:
            s.close()


@pytest.mark.parametrize("arch", fixtures.PIE_ARCHS)
def test_pie_bias_comes_from_the_auxiliary_vector(arch: str, tmp_path: Path) -> None:
    truth = qemu_truth(arch)
    prog = copy_of(fixtures.pie_path(arch), tmp_path)
    seen: list[int] = []
    returns: list[int] = []
    with open_user(arch, prog) as s:
        (mapped,) = s.target.mapped_files()
        assert mapped.bias and mapped.bias % 0x1000 == 0  # qemu-user put the ET_DYN somewhere
        up = kpsdk.Uprobe(prog, file_offset(prog, "sum7"), pre_handler=lambda p, r: seen.append(r.arg(6)))
        rp = kpsdk.Uretprobe(prog, entry_offset(prog, "loop"), handler=lambda ri, r: returns.append(
            int(r.return_value)))
        s.register_uprobe(up)
        s.register_uretprobe(rp)
        assert up.address_in(s) == mapped.bias + link_address(prog, "sum7") == s.symbols.get("sum7").address
        assert s.run(timeout=30) == 0
        assert s.console == fixtures.EXPECTED_OUTPUT
    assert seen == [7]  # sum7(1, ..., 7): the seventh argument, from the stack where the ABI says
    assert returns == [truth["loop"]]


def test_a_copy_of_the_file_is_not_probed(tmp_path: Path) -> None:
    prog = copy_of(fixtures.path("x86_64"), tmp_path)
    up = kpsdk.Uprobe(prog, file_offset(prog, "add"))
    kpsdk.register_uprobe(up)
    with open_user("x86_64", fixtures.path("x86_64")) as s:  # the original: same bytes, another inode
        assert s.list() == ""
        assert s.run(timeout=30) == 0
    assert up.hits == 0
