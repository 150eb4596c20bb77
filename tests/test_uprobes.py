"""Uprobes by (file, offset) on Unicorn (U1 in docs/semantics.md; kernel/events/uprobes.c).

Every test probes its own copy of a fixture binary (a fresh inode in tmp_path), so
system-wide registrations never reach another test's sessions; an autouse fixture
unregisters whatever a failing test left behind.  File offsets are computed here
with pyelftools from the program headers, independently of kpsdk; returned values
are checked against the program run under qemu-user without kpsdk.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import capstone
import pytest
from elftools.elf.elffile import ELFFile
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.plugins import uprobes as uprobes_plugin
from kpsdk.targets.unicorn.loader import PIE_BASE_32, PIE_BASE_64
from tests.conftest import UNICORN_ARCHS, local_entry_offset
from tests.test_live import qemu_truth


@pytest.fixture(autouse=True)
def _no_system_wide_leftovers() -> Iterator[None]:
    yield
    for up in list(uprobes_plugin._system.values()):
        kpsdk.unregister_uprobe(up)


def binary(arch: str, pie: bool) -> Path:
    return fixtures.pie_path(arch) if pie else fixtures.path(arch)


@pytest.fixture(params=["exec", "pie"])
def pie(request: pytest.FixtureRequest, arch: str) -> bool:
    if request.param == "pie" and arch not in fixtures.PIE_ARCHS:
        pytest.fail(f"every Unicorn arch has a PIE fixture; {arch} has none")
    return request.param == "pie"


@pytest.fixture
def prog(tmp_path: Path, arch: str, pie: bool) -> Path:
    """This test's own copy of the fixture (its own inode)."""
    dst = tmp_path / binary(arch, pie).name
    shutil.copy2(binary(arch, pie), dst)
    return dst


def link_address(path: Path, name: str) -> int:
    """A function's code address as linked (Thumb bit off; ppc64 ELFv1: through its descriptor)."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        value = int(elf.get_section_by_name(".symtab").get_symbol_by_name(name)[0]["st_value"])
        opd = elf.get_section_by_name(".opd")
        if opd is not None and opd["sh_addr"] <= value < opd["sh_addr"] + opd["sh_size"]:
            at = value - opd["sh_addr"]
            value = int.from_bytes(opd.data()[at:at + 8], "big")
        return value & ~1 if elf["e_machine"] == "EM_ARM" else value


def file_offset(path: Path, name: str) -> int:
    """Where a function's first instruction is in the file, from the executable PT_LOAD."""
    vaddr = link_address(path, name)
    with open(path, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1 and \
                    seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_filesz"]:
                return int(vaddr - seg["p_vaddr"] + seg["p_offset"])
    raise AssertionError(f"{name} is in no executable segment of {path}")


def entry_offset(path: Path, name: str) -> int:
    """Where the program's own calls of a function enter it, as a file offset: its first
    instruction, or on ppc64le (ELFv2) its local entry past the TOC set-up (a uprobe by
    offset is exactly there, as the kernel's; ``perf probe`` adds this offset itself)."""
    return file_offset(path, name) + local_entry_offset(path, name)


def expected_bias(path: Path) -> int:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        if elf["e_type"] != "ET_DYN":
            return 0
        return PIE_BASE_64 if elf.elfclass == 64 else PIE_BASE_32


def open_elf(path: Path) -> kpsdk.Session:
    return kpsdk.open(f"elf:{path}")


# -- where a probe goes -------------------------------------------------------------------------


def test_offset_maps_through_the_program_headers_and_the_load_bias(arch: str, pie: bool, prog: Path) -> None:
    off = file_offset(prog, "add")
    up = kpsdk.Uprobe(prog, off)
    with open_elf(prog) as s:
        s.register_uprobe(up)
        addr = up.address_in(s)
        assert addr == expected_bias(prog) + link_address(prog, "add")
        assert addr == s.symbols.get("add").address  # the symbol table moved with the bias
        assert s.list() == f"{addr:0{2 * s.arch.word_size}x}  u  {prog}:{off:#x}  [OPTIMIZED]\n"
        assert kpsdk.Uprobe.parse(f"{prog}:add").offset == off
        assert kpsdk.Uprobe(spec=f"{prog}:add+0x0").offset == off


# -- system-wide and session scope ---------------------------------------------------------------


def test_system_wide_fires_in_open_sessions_and_in_ones_opened_later(arch: str, pie: bool, prog: Path) -> None:
    seen: list[tuple[int, int, int]] = []
    sessions = [open_elf(prog), open_elf(prog)]
    up = kpsdk.Uprobe(prog, file_offset(prog, "add"),
                      pre_handler=lambda p, regs: seen.append((id(p), regs.arg(0), regs.arg(1))))
    try:
        assert kpsdk.register_uprobe(up) is up
        sessions.append(open_elf(prog))  # opened after the registration
        assert sorted(map(id, up.sessions)) == sorted(map(id, sessions))
        for s in sessions:
            assert s.run(timeout=10) == 0
            assert s.console == fixtures.EXPECTED_OUTPUT
        assert seen == [(id(up), 2, 3)] * 3  # main's add(2, 3), once per run; p is the user's object
        assert up.hits == 3
        kpsdk.unregister_uprobe(up)
        assert all(s.list() == "" for s in sessions)
        with open_elf(prog) as after:
            assert after.list() == ""
            after.run(timeout=10)
        assert seen == [(id(up), 2, 3)] * 3 and up.hits == 3
    finally:
        for s in sessions:
            s.close()


def test_session_registration_applies_to_that_session_only(prog: Path) -> None:
    seen: list[str] = []
    with open_elf(prog) as mine, open_elf(prog) as other:
        up = kpsdk.Uprobe(prog, file_offset(prog, "sub"), pre_handler=lambda p, r: seen.append("mine"))
        mine.register_uprobe(up)
        assert not up.system_wide and up.sessions == [mine]
        with open_elf(prog) as later:
            assert later.list() == "" and other.list() == ""
            for s in (mine, other, later):
                s.run(timeout=10)
        assert seen == ["mine"]
        mine.unregister_uprobe(up)
        assert not up.registered and mine.list() == ""


def test_a_copy_is_another_file_a_rename_or_hard_link_the_same(tmp_path: Path, prog: Path) -> None:
    copy = tmp_path / "copy.elf"
    shutil.copy2(prog, copy)
    link = tmp_path / "link.elf"
    os.link(prog, link)
    up = kpsdk.Uprobe(prog, file_offset(prog, "add"), pre_handler=lambda p, r: None)
    kpsdk.register_uprobe(up)
    renamed = tmp_path / "renamed.elf"
    prog.rename(renamed)  # after registration: the probe follows the inode, not the name
    fired = {}
    for name, path in (("copy", copy), ("link", link), ("renamed", renamed)):
        before = up.hits
        with open_elf(path) as s:
            s.run(timeout=10)
        fired[name] = up.hits - before
    assert fired == {"copy": 0, "link": 1, "renamed": 1}


def test_closing_a_session_disarms_it_and_keeps_the_counts(prog: Path) -> None:
    up = kpsdk.Uprobe(prog, file_offset(prog, "inc"))
    with open_elf(prog) as s:
        s.register_uprobe(up)
        s.run(timeout=10)
    assert up.hits == 101  # loop(100) calls inc 100 times, twice(5) once more
    assert not up.registered and up.sessions == []
    with open_elf(prog) as s:
        s.register_uprobe(up)  # registrable again once its session is gone
        assert up.sessions == [s]


# -- return probes and handlers ----------------------------------------------------------------------


def test_uretprobe_return_values_match_the_program_run_without_kpsdk(arch: str, pie: bool, prog: Path) -> None:
    truth = qemu_truth(arch)
    returns: dict[str, list[int]] = {}
    owners: set[bool] = set()

    def on_return(name: str) -> object:
        def handler(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> None:
            owners.add(ri.rp is probes[name])
            returns.setdefault(name, []).append(int(regs.return_value))
        return handler

    probes = {name: kpsdk.Uretprobe(prog, entry_offset(prog, name), handler=on_return(name))
              for name in ("add", "sub", "fact", "sum7", "loop")}
    entries: list[int] = []

    def entry(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> int:
        ri.data[0] = regs.arg(0) & 0xFF
        entries.append(ri.data[0])
        return 0

    probes["check"] = kpsdk.Uretprobe(prog, entry_offset(prog, "check"), entry_handler=entry,
                                      handler=on_return("check"), data_size=1)
    kpsdk.register_uprobes(list(probes.values()))
    with open_elf(prog) as s:
        assert s.run(timeout=10) == 0
    assert owners == {True}
    assert {n: returns[n][-1] for n in ("add", "sub", "fact", "sum7", "loop")} == \
        {n: truth[n] for n in ("add", "sub", "fact", "sum7", "loop")}
    assert returns["fact"] == [1, 2, 6, 24, 120]  # every level of the recursion
    assert returns["check"] == [truth["check5"], truth["check50"]] and entries == [5, 50]


def test_post_handler_and_path_change(prog: Path) -> None:
    posts: list[int] = []
    with open_elf(prog) as s:
        sub = s.symbols.get("sub").address

        def redirect(p: object, regs: kpsdk.regs.PtRegs) -> int:
            regs.ip = sub
            return 1

        s.register_uprobe(kpsdk.Uprobe(prog, file_offset(prog, "add"), pre_handler=redirect))
        s.register_uprobe(kpsdk.Uprobe(prog, entry_offset(prog, "bump"),
                                       post_handler=lambda p, r, f: posts.append(r.ip)))
        s.run(timeout=10)
        assert s.console.splitlines()[0] == "add=-1"  # add(2, 3) ran sub(2, 3)
    assert len(posts) == 3 and all(ip != s.symbols.get("bump").address for ip in posts)


@pytest.mark.parametrize("path", ["alone", "beside a kprobe", "breakpoint"])
def test_every_handler_gets_the_users_uprobe(prog: Path, path: str) -> None:
    """pre, post and fault handlers get the user's Uprobe as ``p``, whether the point runs it
    inline (one probe), through the manager's loop (a kprobe at the same address), or on the
    breakpoint path; the session's instance counts the hits."""
    seen: list[tuple[str, object]] = []

    def pre(p: object, regs: kpsdk.regs.PtRegs) -> None:
        seen.append(("pre", p))
        raise RuntimeError("to the fault_handler")

    def fault(p: object, regs: kpsdk.regs.PtRegs, trapnr: int) -> int:
        seen.append(("fault", p))
        return 1

    with open_elf(prog) as s:
        if path == "breakpoint":
            s.kprobes_optimization = False
        up = kpsdk.Uprobe(prog, entry_offset(prog, "add"), pre_handler=pre,
                          post_handler=lambda p, regs, flags: seen.append(("post", p)), fault_handler=fault)
        s.register_uprobe(up)
        k = kpsdk.Kprobe(addr=up.address_in(s), pre_handler=lambda p, regs: seen.append(("kprobe", p)))
        if path == "beside a kprobe":
            s.register_kprobe(k)
        assert s.run(timeout=10) == 0
        assert s.console == fixtures.EXPECTED_OUTPUT
    # the newer probe of a point runs first, as add_new_kprobe()'s list_add_rcu() puts it
    want = ([("kprobe", k)] if path == "beside a kprobe" else []) + [("pre", up), ("fault", up), ("post", up)]
    assert seen == want
    assert up.hits == 1


@pytest.mark.parametrize("pie", [False])
@pytest.mark.parametrize("scope", ["system-wide", "session"])
def test_handlers_set_after_registration_are_the_ones_called(prog: Path, scope: str) -> None:
    """A handler given to a registered Uprobe or Uretprobe is the one its next hits call, as a
    kprobe's is: also when a handler swaps it in the middle of a run (fact recurses 5 times),
    and in a session opened after the swap."""
    calls: list[tuple[str, int]] = []
    up = kpsdk.Uprobe(prog, entry_offset(prog, "fact"))
    rp = kpsdk.Uretprobe(prog, entry_offset(prog, "fact"))

    def first_pre(p: object, regs: kpsdk.regs.PtRegs) -> None:
        calls.append(("first pre", regs.arg(0)))
        up.pre_handler = second_pre

    def second_pre(p: object, regs: kpsdk.regs.PtRegs) -> None:
        assert p is up
        calls.append(("second pre", regs.arg(0)))
        if regs.arg(0) == 3:
            raise RuntimeError("to the fault_handler given after registration")

    def fault(p: object, regs: kpsdk.regs.PtRegs, trapnr: int) -> int:
        calls.append(("fault", int(p is up)))
        return 1

    def first_ret(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> None:
        calls.append(("first ret", int(regs.return_value)))
        rp.handler = second_ret

    def second_ret(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> None:
        calls.append(("second ret", int(regs.return_value) if ri.rp is rp else -1))
        if regs.return_value == 24:
            raise RuntimeError("to the uretprobe's fault_handler given after registration")

    def first_entry(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> int:
        rp.entry_handler = second_entry
        return 0

    def second_entry(ri: kpsdk.UretprobeInstance, regs: kpsdk.regs.PtRegs) -> int:
        return int(regs.arg(0) == 2)  # non-zero: this call's return is not hooked

    def ret_fault(p: object, regs: kpsdk.regs.PtRegs, trapnr: int) -> int:
        calls.append(("ret fault", int(p is rp)))
        return 1

    rp.entry_handler = lambda ri, regs: 0  # registered with one, so that the entry runs it
    with open_elf(prog) as s:
        if scope == "system-wide":
            kpsdk.register_uprobes([up, rp])
        else:
            s.register_uprobe(up)
            s.register_uretprobe(rp)
        # after registration; a name that is not one of a probe's handler fields stays on the object
        up.pre_handler, up.fault_handler, up.handler = first_pre, fault, "not a uprobe's field"
        rp.handler, rp.entry_handler, rp.fault_handler, rp.pre_handler = first_ret, first_entry, ret_fault, None
        assert s.run(timeout=10) == 0
        assert s.console == fixtures.EXPECTED_OUTPUT
    # fact(5) enters 5, 4, 3, 2, 1 and returns 1, 2, 6, 24, 120; fact(2)'s return is vetoed
    assert calls == [("first pre", 5), ("second pre", 4), ("second pre", 3), ("fault", 1), ("second pre", 2),
                     ("second pre", 1), ("first ret", 1), ("second ret", 6), ("second ret", 24),
                     ("ret fault", 1), ("second ret", 120)]
    if scope == "system-wide":
        up.pre_handler = first_pre
        calls.clear()
        with open_elf(prog) as later:  # armed with the handlers the probes hold now
            assert later.run(timeout=10) == 0
        assert calls[:2] == [("first pre", 5), ("second pre", 4)] and calls[-1] == ("second ret", 120)
        assert ("second ret", 2) not in calls  # the entry_handler the probe holds now vetoes fact(2)


def test_enable_disable_and_decorators(prog: Path) -> None:
    seen: list[str] = []
    with open_elf(prog) as s:
        @s.uprobe(f"{prog}:add")
        def on_add(p: object, regs: kpsdk.regs.PtRegs) -> None:
            seen.append("add")

        @s.uretprobe(f"{prog}:sub%return")
        def on_sub(ri: object, regs: kpsdk.regs.PtRegs) -> None:
            seen.append(f"sub={regs.return_value}")

        assert isinstance(on_add, kpsdk.Uprobe) and isinstance(on_sub, kpsdk.Uretprobe)
        s.disable_uprobe(on_add)
        lines = {line.split()[2]: line for line in s.list().splitlines()}
        assert lines[on_add.label].endswith("[DISABLED]") and not lines[on_sub.label].endswith("[DISABLED]")
        s.run(timeout=10)
        assert seen == ["sub=4"]
        s.enable_uprobe(on_add)
        assert "[DISABLED]" not in s.list()


def test_kprobe_decorator_still_takes_sym_plus_offset() -> None:
    with kpsdk.open(f"elf:{fixtures.path('x86_64')}") as s:
        hits: list[int] = []

        @s.kprobe("add+0x0")
        def on_add(p: object, regs: kpsdk.regs.PtRegs) -> None:
            hits.append(regs.arg(0))

        s.run(timeout=10)
        assert hits == [2]


def test_text_forms() -> None:
    path = fixtures.path("x86_64")
    up = kpsdk.parse_uprobe(f"{path}:add")
    rp = kpsdk.parse_uprobe(f"{path}:fact%return", maxactive=3)
    assert isinstance(up, kpsdk.Uprobe) and not isinstance(up, kpsdk.Uretprobe)
    assert isinstance(rp, kpsdk.Uretprobe) and rp.maxactive == 3 and rp.offset == file_offset(path, "fact")
    assert kpsdk.Uprobe.parse(f"{path}:0x1f9").offset == 0x1F9
    assert kpsdk.Uprobe.parse(f"{path}:add+4").offset == file_offset(path, "add") + 4
    for bad in ("add", f"{path}:", ":0x10", f"{path}:add%return"):
        with pytest.raises(ValueError):
            kpsdk.Uprobe.parse(bad)
    with pytest.raises(ValueError):
        kpsdk.Uprobe(path, 0x10, spec=f"{path}:add")


# -- errors (the kernel's errnos) ------------------------------------------------------------------------


def errno_of(fn: object, *args: object) -> int:
    with pytest.raises(kpsdk.KprobeError) as info:
        fn(*args)  # type: ignore[operator]
    return int(info.value.errno)


@pytest.mark.parametrize("arch", ["x86_64"])
@pytest.mark.parametrize("pie", [False])
def test_registration_errors(tmp_path: Path, prog: Path) -> None:
    off = file_offset(prog, "add")
    first = kpsdk.Uprobe(prog, off)
    kpsdk.register_uprobe(first)
    with open_elf(prog) as s:
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(prog, off)) == errno.EEXIST  # same (file, offset)
        link = tmp_path / "link"
        os.link(prog, link)
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(link, off)) == errno.EEXIST  # same file, other name
        assert errno_of(kpsdk.register_uprobe, first) == errno.EINVAL  # the same object again
        assert errno_of(s.register_uprobe, first) == errno.EINVAL
        kpsdk.register_uprobe(kpsdk.Uretprobe(prog, off))  # a return probe is another kind of probe there
        local = kpsdk.Uprobe(prog, off)
        s.register_uprobe(local)  # the session's own scope
        assert errno_of(s.register_uprobe, kpsdk.Uprobe(prog, off)) == errno.EEXIST
        assert errno_of(s.unregister_uprobe, first) == errno.ENOENT  # registered system-wide, not here
        assert errno_of(kpsdk.unregister_uprobe, local) == errno.ENOENT  # registered here, not system-wide
        assert errno_of(kpsdk.unregister_uprobe, kpsdk.Uprobe(prog, off)) == errno.ENOENT  # never registered
        shown = s.list()
        assert not _boundary(prog, "add", 1)  # add's first instruction is longer than a byte
        assert errno_of(s.register_uprobe, kpsdk.Uprobe(prog, off + 1)) == errno.EILSEQ
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(tmp_path / "missing", off)) == errno.ENOENT
        with open(prog, "rb") as f:
            symtab = int(ELFFile(f).get_section_by_name(".symtab")["sh_offset"])
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(prog, symtab)) == errno.EINVAL  # in no PT_LOAD
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(prog, prog.stat().st_size + 16)) == errno.EINVAL
        not_elf = tmp_path / "text"
        not_elf.write_text("hello\n" * 100)
        assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(not_elf, 4)) == errno.EINVAL
        assert errno_of(s.register_uretprobe, kpsdk.Uretprobe(prog, file_offset(prog, "fact") + 1)) \
            in (errno.EILSEQ, errno.EINVAL)
        inside = next(o for o in range(1, 16) if _boundary(prog, "fact", o))
        assert errno_of(s.register_uretprobe, kpsdk.Uretprobe(prog, file_offset(prog, "fact") + inside)) \
            == errno.EINVAL  # a return probe goes on a function entry
        assert errno_of(kpsdk.Uprobe.parse, f"{prog}:no_such_symbol") == errno.ENOENT
        assert errno_of(kpsdk.Uprobe.parse, f"{prog}:counter") == errno.EINVAL  # data, not code
        assert s.list() == shown  # nothing half-registered


def _boundary(path: Path, name: str, delta: int, mode: int = capstone.CS_MODE_64) -> bool:
    """Whether ``name + delta`` starts an instruction (x86, decoded with capstone here)."""
    data = path.read_bytes()
    off = file_offset(path, name)
    md = capstone.Cs(capstone.CS_ARCH_X86, mode)
    return any(i.address == off + delta for i in md.disasm(data[off:off + 32], off))


@pytest.mark.parametrize(("arch", "delta"), [("arm", 2), ("thumb", 1), ("riscv64", 1), ("aarch64", 2)])
@pytest.mark.parametrize("pie", [False])
def test_misaligned_offsets_are_einval(prog: Path, delta: int) -> None:
    """uprobe_register: an offset not aligned to the instruction size is EINVAL."""
    assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(prog, file_offset(prog, "add") + delta)) == errno.EINVAL


def test_ppc64_registration_is_checked_without_a_session() -> None:
    """System-wide registration validates against the file alone (before any session has the file)."""
    path = fixtures.path("ppc64")
    up = kpsdk.Uprobe(path, file_offset(path, "add"))
    kpsdk.register_uprobe(up)
    # armed in whichever sessions already run the file (ppc64 runs on Unicorn too), and no other
    assert up.system_wide and all(s.arch.name == "ppc64" for s in up.sessions)
    assert errno_of(kpsdk.register_uprobe, kpsdk.Uprobe(path, file_offset(path, "add") + 2)) == errno.EINVAL


@pytest.mark.parametrize("arch", ["i386"])
@pytest.mark.parametrize("pie", [True])
def test_batch_registration_rolls_back(prog: Path) -> None:
    inside = next(o for o in range(1, 16) if not _boundary(prog, "add", o, capstone.CS_MODE_32))
    good = kpsdk.Uprobe(prog, file_offset(prog, "add"))
    bad = kpsdk.Uprobe(prog, file_offset(prog, "add") + inside)
    with pytest.raises(kpsdk.KprobeError):
        kpsdk.register_uprobes([good, bad])
    assert not good.registered
    with open_elf(prog) as s:
        with pytest.raises(kpsdk.KprobeError):
            s.register_uprobes([good, bad])
        assert not good.registered and s.list() == ""


@pytest.mark.parametrize("arch", ["riscv64"])
@pytest.mark.parametrize("pie", [True])
def test_cli_uprobe_and_uretprobe(prog: Path) -> None:
    from kpsdk.cli import app

    result = CliRunner().invoke(app, ["probe", str(prog), "--uprobe", f"{prog}:add",
                                      "--uretprobe", f"{prog}:fact"])
    assert result.exit_code == 0, result.output
    assert f"u {prog}:add: 1 hits" in result.output
    assert f"r {prog}:fact ret=120" in result.output
    assert f"{prog}:{file_offset(prog, 'add'):#x}" in result.output  # the list() line


def test_unicorn_archs_all_have_pie_fixtures() -> None:
    # ppc64 too: its only relocations are its .opd descriptors', never called through (docs/api/probes.md, Uprobes)
    assert set(UNICORN_ARCHS) <= set(fixtures.PIE_ARCHS)
