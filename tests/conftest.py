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


# --- A real kernel (tests/test_kernel_image.py and the live-probing tests) -----------------

from collections.abc import Callable  # noqa: E402  (kept next to the fixtures that use it)
from pathlib import Path  # noqa: E402


@pytest.fixture(scope="session")
def debian_kernel() -> Path:
    """The vmlinuz of Debian's current amd64 kernel, downloaded once into kpsdk's cache.

    ``apt-get download`` (~70 MB, once; then reused from ``$KPSDK_CACHE`` or
    ``~/.cache/kpsdk/kernel``), not installed.  Skips locally, fails on CI, when apt or the
    network is not there.
    """
    from kpsdk.errors import TargetError
    from kpsdk.fixtures import kernel

    require_tool("apt-get", "apt")
    require_tool("dpkg-deb", "dpkg")
    try:
        return kernel.fetch_kernel()
    except TargetError as e:
        if os.environ.get("CI"):
            pytest.fail(f"cannot fetch Debian's kernel: {e}")
        pytest.skip(f"cannot fetch Debian's kernel: {e}")


@pytest.fixture(scope="session")
def kernel_initramfs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A factory: ``kernel_initramfs(workload=..., files=...)`` -> path of a busybox initramfs.

    The workload is a busybox ``sh`` snippet run by ``/init`` between ``KPSDK-BEGIN`` and
    ``KPSDK-END`` before ``poweroff -f`` (default: :data:`kpsdk.fixtures.kernel.DEFAULT_WORKLOAD`).
    """
    from kpsdk.errors import UnsupportedTargetError
    from kpsdk.fixtures import kernel

    require_tool("busybox", "busybox-static")
    require_tool("qemu-system-x86_64", "qemu-system-x86")
    directory = tmp_path_factory.mktemp("initramfs")
    count = 0

    def make(workload: str = kernel.DEFAULT_WORKLOAD, files: dict[str, bytes | str] | None = None) -> Path:
        nonlocal count
        count += 1
        try:
            return kernel.build_initramfs(directory / f"initramfs-{count}.cpio.gz", workload, files=files)
        except UnsupportedTargetError as e:
            if os.environ.get("CI"):
                pytest.fail(str(e))
            pytest.skip(str(e))

    return make
