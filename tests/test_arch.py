"""Arch backends: declared data is consistent and lookups are exact."""

from __future__ import annotations

import dataclasses
import errno

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.arch import Arch
from kpsdk.binfmt.elfimage import load_elf
from kpsdk.registry import Registry
from kpsdk.session import Session
from tests.conftest import FIXTURE_ARCHS, FIXTURES, REGISTERED_ARCHS

#: the five the design names (a third-party arch may add more; every registered one is tested below)
ALL = ("i386", "x86_64", "ppc64", "arm", "riscv64")


def test_all_five_architectures_are_provided_by_plugins() -> None:
    assert set(ALL) <= set(kpsdk.get_registry().archs.names())  # a third-party arch may add more


@pytest.mark.parametrize("name", [a.name for a in REGISTERED_ARCHS])
def test_registers_and_roles(name: str) -> None:
    arch = kpsdk.get_registry().arch(name)
    for role in (arch.pc, arch.sp, arch.return_value, *arch.user_abi.args, *arch.kernel_abi.args):
        assert arch.register(role).name  # every role names a declared register
    assert len(set(arch.register_names)) == len(arch.register_names)
    assert all(r.size in (2, 4, 8) and r.gdb for r in arch.registers)


def test_lookup_is_exact_and_errors_list_valid_names() -> None:
    reg = kpsdk.get_registry()
    assert reg.arch("amd64").name == "x86_64" and reg.arch("thumb").name == "arm"
    assert reg.arch("riscv64").register("x10").name == "a0"
    assert reg.arch("ppc64").register("gpr3").name == "r3"
    with pytest.raises(kpsdk.UnknownNameError, match="valid: .*a0"):
        reg.arch("riscv64").register("A0")
    assert reg.arch("mips64el").register("r4").name == "a0" and reg.arch("mips").register("fp").name == "s8"
    with pytest.raises(kpsdk.UnknownNameError, match="valid: .*riscv64"):
        reg.arch("sparc")


@pytest.mark.parametrize("arch", FIXTURE_ARCHS)
def test_elf_header_selects_the_arch(arch: str) -> None:
    fixture = next(f for f in FIXTURES if f.name == arch)  # thumb: the arm backend's, in Thumb
    image = load_elf(fixtures.path(arch))
    found = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    assert found.name == fixture.arch.name
    add = image.symbols.get("add")
    assert add.size > 0 and (add.thumb == fixture.iset.thumb_bit)


def test_ppc64_elfv1_descriptors_resolve_to_code() -> None:
    image = load_elf(fixtures.path("ppc64"))
    add = image.symbols.get("add")
    text = next(s for s in image.segments if s.executable)
    assert text.vaddr <= add.address < text.vaddr + text.memsz  # code, not the .opd descriptor
    arch = kpsdk.get_registry().arch("ppc64")
    code = text.data[add.address - text.vaddr : add.address - text.vaddr + add.size]
    assert [i.mnemonic for i in arch.disassembler().disasm(code, add.address)][-1] == "blr"


def test_riscv_instruction_length_rule() -> None:
    from kpsdk.arch_backends.riscv import insn_length, jump_back

    assert insn_length(0x4501) == 2 and insn_length(0x0513) == 4
    iset = kpsdk.get_registry().arch("riscv64").iset()
    enc = jump_back(0x1000, 0x1010, iset)
    arch = kpsdk.get_registry().arch("riscv64")
    insn = next(arch.disassembler().disasm(enc, 0x1000))
    assert insn.mnemonic in ("j", "jal") and insn.op_str.endswith("0x10")
    assert jump_back(0, 1 << 21, iset) is None


def test_fixture_checksums_match() -> None:
    import hashlib

    for line in (fixtures.FIXTURES_DIR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((fixtures.FIXTURES_DIR / name.lstrip("*")).read_bytes()).hexdigest() == digest


def test_ppc64_plain_instructions_are_boostable_and_branches_are_not() -> None:
    image = load_elf(fixtures.path("ppc64"))
    arch = kpsdk.get_registry().arch("ppc64")
    text = next(s for s in image.segments if s.executable)
    add = image.symbols.get("add")
    code = text.data[add.address - text.vaddr : add.address - text.vaddr + add.size]
    verdicts = {i.mnemonic: arch.insn.classify(i)[0] for i in arch.disassembler().disasm(code, add.address)}
    assert verdicts.pop("blr") is False
    assert verdicts and all(verdicts.values()), verdicts


@pytest.mark.parametrize("arch", FIXTURE_ARCHS)
def test_length_rules_agree_with_the_decoder_on_every_fixture_instruction(arch: str) -> None:
    image = load_elf(fixtures.path(arch))
    backend = kpsdk.get_registry().archs.by_elf(image.machine, image.elf_class, image.endian)
    text = next(s for s in image.segments if s.executable)
    checked = 0
    for sym in image.symbols.functions():
        iset = backend.iset_for_address(1 if sym.thumb else 0)
        code = text.data[sym.address - text.vaddr : sym.address - text.vaddr + sym.size]
        for insn in backend.disassembler(iset).disasm(code, sym.address):
            rule = iset.length_rule(bytes(insn.bytes))
            if rule is not None:
                assert rule == insn.size, (sym.name, insn.mnemonic, insn.op_str)
                checked += 1
            else:
                assert 1 <= insn.size <= 15  # x86: only decoding tells
    assert checked or arch in ("i386", "x86_64")


class BareBackend:
    """A third-party backend with only what is required: riscv64's registers and
    instruction rules, no out-of-line code, no detours."""

    @kpsdk.hookimpl
    def kpsdk_archs(self) -> list[Arch]:
        from kpsdk.arch_backends.riscv import RISCV64

        return [dataclasses.replace(RISCV64, name="rv64bare", aliases=(), out_of_line=None, detours=None)]


def test_a_backend_without_optional_capabilities_probes_and_names_what_it_lacks() -> None:
    reg = Registry()
    reg.pm.register(BareBackend(), name="rv64bare")
    s = Session(reg.target_kind("unicorn").open("rv64bare", reg), reg, "unicorn:rv64bare")
    code = s.target._area - 0x10000  # type: ignore[attr-defined]
    s.target.map(code, 0x1000, "rx")  # type: ignore[attr-defined]
    s.target.uc.mem_write(code, bytes.fromhex("13051500" "67800000"))  # type: ignore[attr-defined]  # addi a0,a0,1; ret
    s.kprobes_optimization = False  # the breakpoint path needs a booster: the point takes a hook instead
    kp = s.register_kprobe(kpsdk.Kprobe(addr=code, pre_handler=lambda p, regs: 0))
    assert s.call(code, 41) == 42 and kp.hits == 1
    assert s.target.manager.points[code].mechanism == "hook"
    with pytest.raises(kpsdk.CapabilityError) as e:
        s.register_kretprobe(kpsdk.Kretprobe(addr=code))
    assert e.value.errno == errno.EOPNOTSUPP and e.value.capability == "out_of_line.return_jump"
    assert isinstance(e.value, kpsdk.UnsupportedTargetError) and "rv64bare" in str(e.value)
    assert "kretprobe_trampoline" not in s.list()


def test_each_board_brings_its_console_unless_the_command_line_names_one() -> None:
    from kpsdk.targets.live.qemu import with_console

    boards = {name: kpsdk.get_registry().arch(name).qemu_system for name in ALL}
    assert {n: b.console for n, b in boards.items() if b} == {
        "i386": "ttyS0", "x86_64": "ttyS0", "arm": "ttyAMA0", "riscv64": "ttyS0", "ppc64": "hvc0"}
    assert boards["arm"] is not None and boards["arm"].command() == ["-M", "virt"]
    assert with_console("nokaslr quiet", "ttyAMA0") == "console=ttyAMA0 nokaslr quiet"
    assert with_console("quiet console=hvc0", "ttyS0") == "quiet console=hvc0"
    assert with_console("", "ttyS0") == "console=ttyS0"
