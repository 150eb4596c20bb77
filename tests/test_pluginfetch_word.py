"""The plugin's reads on 32-bit guests (i386, arm): offsets are sign-extended from the guest's
word and every read is marked to wrap at 32 bits, so the address the plugin records is the one
the handler and the trace formatter ask for (they mask to the word)."""

from __future__ import annotations

import pytest

import kpsdk
from kpsdk.errors import ArgumentError, TargetError
from kpsdk.targets.live.tcg.fetch import Planner, parse_fetches
from kpsdk.targets.live.tcg.plugin import CHAIN, M_WORD32


def _plan(arch_name: str, texts: list[str]) -> tuple[kpsdk.arch.Arch, Planner]:
    arch = kpsdk.get_registry().archs.get(arch_name)
    index = {r.gdb: i for i, r in enumerate(arch.registers)}
    planner = Planner(arch, arch.abi("kernel"), index.get)
    for fetch, argtype in parse_fetches(arch, texts):
        planner.add(fetch, argtype, lambda node: 0x1000)
    return arch, planner


@pytest.mark.parametrize("arch_name", ["i386", "arm"])
def test_a_negative_offset_on_a_32_bit_guest_is_negative_and_wraps(arch_name: str) -> None:
    sp = {"i386": "%sp", "arm": "%sp"}[arch_name]
    _, planner = _plan(arch_name, [f"-8({sp}):u32"])
    (read,) = planner.reads
    assert read.offset == -8 and read.size == 4 and read.word32


@pytest.mark.parametrize("arch_name", ["i386", "arm"])
def test_a_chain_on_a_32_bit_guest_loads_a_4_byte_word(arch_name: str) -> None:
    reg = {"i386": "%ax", "arm": "%r0"}[arch_name]
    _, planner = _plan(arch_name, [f"+4(+0({reg})):u32"])
    pointer, value = planner.reads
    assert pointer.size == 4 and pointer.word32
    assert value.reg == CHAIN - 0 and value.offset == 4 and value.word32


def test_a_64_bit_guest_keeps_64_bit_addresses() -> None:
    _, planner = _plan("x86_64", ["-8(%sp):u32", "+0(+0(%si)):u64"])
    assert [r.offset for r in planner.reads] == [-8, 0, 0]
    assert not any(r.word32 for r in planner.reads) and planner.reads[1].size == 8


def test_the_plugin_source_wraps_and_takes_a_word_sized_pointer() -> None:
    """The C side agrees with the flag and does not ask a chain's pointer for 8 bytes."""
    from importlib.resources import files

    source = (files("kpsdk.targets.live.tcg") / "kpsdk_tcg.c").read_text()
    assert f"M_WORD32 = {M_WORD32}" in source
    assert "got >= 8" not in source


@pytest.mark.parametrize("bad", [None, 5, 3.5, {"+0(%si):string"}])
def test_memory_declarations_that_are_not_lists_are_refused(bad: object) -> None:
    arch = kpsdk.get_registry().archs.get("x86_64")
    with pytest.raises(TargetError, match="list of fetch arguments"):
        parse_fetches(arch, bad)  # type: ignore[arg-type]


def test_declare_memory_refuses_what_is_not_a_probe() -> None:
    from kpsdk.targets.live.tcg.target import PluginTarget

    live = PluginTarget.__new__(PluginTarget)
    with pytest.raises(ArgumentError, match="wants a probe"):
        live.declare_memory(None, ["+0(%si):string"])  # type: ignore[arg-type]


def test_probes_whose_merged_reads_overflow_keep_gdbs_path() -> None:
    """Each probe's reads fit one plugin entry, both together do not: the point is not the
    plugin's (gdb's breakpoint serves it) instead of a TargetError at registration."""
    import weakref
    from types import SimpleNamespace

    from kpsdk.targets.live.tcg.plugin import MAX_MEM
    from kpsdk.targets.live.tcg.target import PluginTarget

    arch = kpsdk.get_registry().archs.get("x86_64")
    index = {r.gdb: i for i, r in enumerate(arch.registers)}
    live = PluginTarget.__new__(PluginTarget)
    live.arch, live.abi_kind = arch, "kernel"
    live._register_index = index.get  # type: ignore[method-assign]
    live._declared, live._task_read, live._task_percpu, live._task_layout = weakref.WeakKeyDictionary(), {}, None, None
    half = [f"+{8 * i}(%si):u64" for i in range(MAX_MEM // 2 + 1)]
    a = kpsdk.Kprobe(symbol_name="f", pre_handler=lambda p, regs: 0)
    b = kpsdk.Kprobe(symbol_name="f", pre_handler=lambda p, regs: 0)
    for probe, texts in ((a, half), (b, [t.replace("(%si)", "(%di)") for t in half])):
        live._declared[probe] = [(f, t, lambda node: 0) for f, t in parse_fetches(arch, texts)]
    assert live._plan_fits(SimpleNamespace(active=[a]))  # type: ignore[arg-type]
    assert not live._plan_fits(SimpleNamespace(active=[a, b]))  # type: ignore[arg-type]
