"""Shared fixtures: the cross-built programs, per architecture, and tool checks.

On CI (``CI`` set) a missing tool is a failure, not a skip: the tests that need
QEMU must run there.  On a user's machine they skip, naming the Debian package.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import capstone
import pytest

import kpsdk
from kpsdk import fixtures

#: fixture programs Unicorn can run (ppc64 cannot: see test_ppc64_on_unicorn_fails_clearly)
UNICORN_ARCHS = ("x86_64", "i386", "arm", "thumb", "riscv64")
QEMU = {"x86_64": "qemu-x86_64", "i386": "qemu-i386", "arm": "qemu-arm", "thumb": "qemu-arm",
        "riscv64": "qemu-riscv64", "ppc64": "qemu-ppc64"}


def require_tool(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} not found: install the Debian package {package}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(params=UNICORN_ARCHS)
def arch(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["optimized", "breakpoint"])
def mechanism(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def session(arch: str, mechanism: str) -> Iterator[kpsdk.Session]:
    s = kpsdk.open(f"elf:{fixtures.path(arch)}")
    s.kprobes_optimization = mechanism == "optimized"
    yield s
    s.close()


def instructions(s: kpsdk.Session, name: str) -> list[capstone.CsInsn]:
    """The instructions of a function, decoded from target memory."""
    sym = s.symbols.get(name)
    md = s.arch.disassembler(s.arch.iset_for_address(1 if sym.thumb else 0))
    return list(md.disasm(s.read_memory(sym.address, sym.size), sym.address))


def probe_addr(s: kpsdk.Session, addr: int) -> int:
    """An address as a probe wants it (Thumb code carries bit 0)."""
    sym = s.symbols.containing(addr)
    return addr | 1 if sym is not None and sym.thumb else addr
