"""Ground truth: the same binaries under qemu-user print what kpsdk saw.

Every fixture is run natively by QEMU's user-mode emulator (no kpsdk) and its
output compared with what the program printed under kpsdk's Unicorn target,
and with the values kpsdk's probes read from registers.
"""

from __future__ import annotations

import subprocess

import pytest

import kpsdk
from kpsdk import fixtures
from tests.conftest import FIXTURE_ARCHS, QEMU, UNICORN_ARCHS, require_tool, return_instruction


def qemu_output(arch: str) -> str:
    qemu = require_tool(QEMU[arch], "qemu-user")
    done = subprocess.run([qemu, str(fixtures.path(arch))], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("arch", FIXTURE_ARCHS)
def test_qemu_user_prints_the_expected_output(arch: str) -> None:
    assert qemu_output(arch) == fixtures.EXPECTED_OUTPUT


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_probed_values_match_the_program_under_qemu(arch: str) -> None:
    truth = dict(line.split("=") for line in qemu_output(arch).splitlines())
    returns: dict[str, list[int]] = {}
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        depth: list[int] = []
        s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=lambda p, r: depth.append(r.arg(0))))
        for name in ("add", "sub", "sum7", "loop"):  # single-exit functions: the last instruction returns
            sym = s.symbols.get(name)
            last = return_instruction(s, name)  # on MIPS the one before, its delay slot being last
            s.register_kprobe(kpsdk.Kprobe(
                addr=last.address | (1 if sym.thumb else 0),
                pre_handler=lambda p, r, n=name: returns.setdefault(n, []).append(r.signed(s.arch.return_value)),
            ))
        counter = s.symbols.get("counter").address
        assert s.run(timeout=10) == 0
        assert s.console == qemu_output(arch)
        # the outermost call's return value is the one the program printed
        assert {n: v[-1] for n, v in returns.items()} == {n: int(truth[n]) for n in returns}
        assert depth == [5, 4, 3, 2, 1]
        product = 1
        for n in depth:
            product *= n
        assert product == int(truth["fact"])
        assert s.read_int(counter, 4) == int(truth["counter"])
