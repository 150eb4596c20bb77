"""Shared fixtures: the cross-built programs, per architecture, and tool checks.

On CI (``CI`` set) a missing tool is a failure, not a skip: the tests that need
QEMU must run there.  On a user's machine they skip, naming the Debian package.
"""

from __future__ import annotations

import os
import shutil
import weakref
from collections.abc import Iterator
from datetime import timedelta

import capstone
import pytest
from hypothesis import HealthCheck, settings

import kpsdk
from kpsdk import fixtures
from kpsdk.arch import Arch
from kpsdk.arch.fixture import Fixture
from kpsdk.fixtures.catalog import arch_order, registered, shown_order

# --- Fuzz tests (hypothesis): one budget for all of them ------------------------------------
#
# "ci" is the default: every fuzz test of the suite together (tests/test_fuzz_*.py) adds about two
# minutes at most, derandomized so that a run is reproducible and does not fail on someone else's
# change.  "fuzz" (`nox -s fuzz`, i.e. `pytest -m fuzz --hypothesis-profile=fuzz`) runs 50 times
# the examples, random, and keeps hypothesis' database of failures in .hypothesis/.
#
# A test says how many examples it gets in "ci" through fuzz_examples(n); the "fuzz" profile
# scales that.  The deadline is per example: the guard against a hang (a parse that goes
# quadratic, a run that never ends), generous because the machine is shared.
FUZZ_CI_EXAMPLES = 100
FUZZ_SCALE = 50
_FUZZ_COMMON = {"deadline": timedelta(seconds=10), "print_blob": True,
                "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=FUZZ_CI_EXAMPLES, derandomize=True, database=None, **_FUZZ_COMMON)
settings.register_profile("fuzz", max_examples=FUZZ_CI_EXAMPLES * FUZZ_SCALE, **_FUZZ_COMMON)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """"ci" unless --hypothesis-profile names another: hypothesis' own pytest_configure runs after
    this one and loads that.  (Not at import: test modules import this file again as
    ``tests.conftest``, which would load "ci" over the chosen profile.)"""
    settings.load_profile("ci")


class _SessionsOfTheCall:
    """The sessions a test's body opens (not its fixtures': a module's shared session outlives
    the test), closed after the body if it left them open.  Left open, they stay in the
    process until the garbage collector finds them, and a later test's lookup of a library
    by bare name (``libc.so.6``) would see their mapped files too: an EINVAL for a name
    two sessions map as different files (kpsdk.binfmt.filelocation), or not, by GC timing."""

    def __init__(self) -> None:
        self.made: list[weakref.ref[kpsdk.Session]] | None = None

    @kpsdk.hookimpl
    def kpsdk_session_start(self, session: kpsdk.Session) -> None:
        if self.made is not None:
            self.made.append(weakref.ref(session))


# one tracker, also when test modules import this file again as ``tests.conftest``
_CALL_SESSIONS = kpsdk.get_registry().pm.get_plugin("tests-sessions-of-the-call")
if _CALL_SESSIONS is None:
    _CALL_SESSIONS = _SessionsOfTheCall()
    kpsdk.get_registry().pm.register(_CALL_SESSIONS, name="tests-sessions-of-the-call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    made: list[weakref.ref[kpsdk.Session]] = []
    _CALL_SESSIONS.made = made
    try:
        yield
    finally:
        _CALL_SESSIONS.made = None
        for ref in made:
            session = ref()
            if session is not None and not session.closed:
                session.close()


def fuzz_examples(ci: int) -> int:
    """How many examples a fuzz test runs: ``ci`` in the "ci" profile, FUZZ_SCALE times as many in
    "fuzz" (read when the test module is imported, after --hypothesis-profile took effect)."""
    return max(1, ci * settings.default.max_examples // FUZZ_CI_EXAMPLES)


# --- What the per-arch tests run on: derived from the arch backends, never named ----------------
#
# Each backend declares its fixture programs (Arch.toolchain, kpsdk/arch/fixture.py); a test that
# runs "on every arch" takes its list from here, narrowed by the capability that decides it, so a
# new backend is tested by all of them without being named (tests/test_arch_fixtures.py checks).

#: every fixture program the backends declare, in the order the tests run them (the demo's first)
FIXTURES: list[Fixture] = shown_order(registered())
#: their names (``kpsdk.fixtures.path(name)``), in build order (``SHA256SUMS``')
FIXTURE_ARCHS: tuple[str, ...] = tuple(f.name for f in registered())
#: the registry's arches, in the order of their first fixtures
REGISTERED_ARCHS: list[Arch] = arch_order()
#: fixture programs Unicorn runs: every arch whose backend gives Unicorn's mode and no reason it
#: cannot run there (Arch.unicorn_unsupported; ppc64 and ppc64le too: arch_backends/ppc64.py says how)
UNICORN_ARCHS: tuple[str, ...] = tuple(f.name for f in FIXTURES
                                       if f.arch.unicorn is not None and f.arch.unicorn_unsupported is None)
#: fixture programs qemu-user runs (every arch names its qemu-user)
LIVE_ARCHS: tuple[str, ...] = tuple(f.name for f in FIXTURES if f.qemu)
#: the qemu-user binary of each fixture
QEMU: dict[str, str] = {f.name: f.qemu for f in FIXTURES}


def first_fixture(arch: str) -> Fixture:
    """The arch's first fixture: its compiler and packages, for the tests' own programs."""
    return next(f for f in FIXTURES if f.arch.name == arch)


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


def probeable_instructions(s: kpsdk.Session, name: str) -> list[capstone.CsInsn]:
    """The instructions of a function a probe may go on: all of them, but on MIPS not those
    in a branch's delay slot (the kernel refuses them, kpsdk.arch.DelaySlots)."""
    insns = instructions(s, name)
    slots = s.arch.delay_slots
    if slots is None:
        return insns
    return [i for k, i in enumerate(insns) if k == 0 or slots.refuses_after(bytes(insns[k - 1].bytes)) is None]


def return_instruction(s: kpsdk.Session, name: str) -> capstone.CsInsn:
    """The instruction a function returns with: its last, or where branches have delay slots
    (MIPS) the one before, whose delay slot the last one is (the kernel refuses a probe there)."""
    insns = instructions(s, name)
    slots = s.arch.delay_slots
    if slots is not None and len(insns) > 1 and slots.branch(bytes(insns[-2].bytes)):
        return insns[-2]
    return insns[-1]


def fall_through(s: kpsdk.Session, insn: capstone.CsInsn) -> int:
    """Where execution goes on after ``insn`` when it does not branch: past its delay slot on MIPS."""
    slots = s.arch.delay_slots
    return insn.address + insn.size + (slots.size if slots is not None and slots.branch(bytes(insn.bytes)) else 0)


def local_entry_offset(path: os.PathLike[str] | str, name: str) -> int:
    """ELFv2's local entry offset of a function (ppc64le), from its symbol's st_other as
    pyelftools reads it (``PPC64_LOCAL_ENTRY_OFFSET``); 0 for every other ABI.  Calls from
    inside the object enter there, and the kernel puts a kprobe on the function there."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        if elf["e_machine"] != "EM_PPC64" or elf["e_flags"] & 3 != 2:
            return 0
        sym = next(sym for sym in elf.get_section_by_name(".symtab").iter_symbols() if sym.name == name)
        return int((1 << sym["st_other"]["local"]) >> 2 << 2)


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
def debian_kernel_612() -> Path:
    """The vmlinuz of Debian 13's amd64 kernel (6.12: BTF fetch arguments), fetched once through a
    private apt configuration (``python -m kpsdk.fixtures.kernel --arch x86_64 --release 6.12``),
    its SHA256 checked against Debian's index.  Skips locally, fails on CI, when the registry
    cannot be reached and nothing is cached."""
    from kpsdk.errors import TargetError
    from kpsdk.fixtures import kernel

    require_tool("apt-get", "apt")
    require_tool("dpkg-deb", "dpkg")
    try:
        return kernel.fetch_arch_kernel("x86_64", release="6.12")
    except TargetError as e:
        if os.environ.get("CI"):
            pytest.fail(f"cannot fetch Debian 13's amd64 kernel: {e}")
        pytest.skip(f"cannot fetch Debian 13's amd64 kernel: {e}")


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


# --- Debian's kernels of the other architectures (tests/test_kernel_arches.py) ------------------

#: the arch of ``debian_kernel`` (kpsdk.fixtures.kernel.fetch_kernel: Debian's amd64), which the
#: kernel tests boot by default; the others have their own tests
DEFAULT_KERNEL_ARCH = "x86_64"
#: the arches of which Debian builds a port (Arch.debian: its kernel, its busybox) besides that one
DEBIAN_ARCHS: tuple[str, ...] = tuple(a.name for a in REGISTERED_ARCHS
                                      if a.debian is not None and a.name != DEFAULT_KERNEL_ARCH)
#: the qemu-system architectures booted with Debian's own kernel besides x86_64
KERNEL_ARCHS: tuple[str, ...] = tuple(a.name for a in REGISTERED_ARCHS
                                      if a.name in DEBIAN_ARCHS and a.qemu_system is not None)


@pytest.fixture(scope="session")
def arch_kernel() -> Callable[[str], Path]:
    """A factory: ``arch_kernel("arm")`` -> Debian's kernel image for that arch, fetched once
    into kpsdk's cache (private apt configuration, SHA256 from Debian's index) and reused.
    Skips locally, fails on CI, when the registry cannot be reached and nothing is cached, or
    QEMU for the arch is missing."""
    from kpsdk.errors import TargetError
    from kpsdk.fixtures import kernel

    require_tool("apt-get", "apt")
    require_tool("dpkg-deb", "dpkg")
    found: dict[str, Path] = {}

    def get(arch: str) -> Path:
        board = kpsdk.get_registry().arch(arch).qemu_system
        assert board is not None
        require_tool(board.binary, board.package)
        if arch not in found:
            try:
                found[arch] = kernel.fetch_arch_kernel(arch)
            except TargetError as e:
                if os.environ.get("CI"):
                    pytest.fail(f"cannot fetch Debian's {arch} kernel: {e}")
                pytest.skip(f"cannot fetch Debian's {arch} kernel: {e}")
        return found[arch]

    return get


@pytest.fixture(scope="session")
def arch_initramfs(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """A factory: ``arch_initramfs("arm", workload)`` -> a busybox initramfs with Debian's
    busybox-static of that arch (fetched once, cached) running ``workload`` (default: the
    default workload traced by the guest itself, :func:`kpsdk.fixtures.kernel.traced_workload`)."""
    from kpsdk.errors import TargetError
    from kpsdk.fixtures import kernel

    directory = tmp_path_factory.mktemp("arch-initramfs")
    count = 0

    def make(arch: str, workload: str | None = None) -> Path:
        nonlocal count
        count += 1
        try:
            return kernel.initramfs_for(arch, workload, out=directory / f"{arch}-{count}.cpio.gz")
        except TargetError as e:
            if os.environ.get("CI"):
                pytest.fail(f"cannot build the {arch} initramfs: {e}")
            pytest.skip(f"cannot build the {arch} initramfs: {e}")

    return make


@pytest.fixture(scope="module", autouse=True)
def _sessions_stay_in_their_module() -> Iterator[None]:
    """Sessions a test module leaves open (dropped without close(), or kept alive by a failed
    test's traceback) are closed when the module ends: a later module's bare ``libc.so.6`` is
    otherwise ambiguous between its session and a leftover one (EINVAL), and its test fails for
    another module's reason."""
    import gc

    from kpsdk.plugins import uprobes

    before = set(uprobes._sessions)
    yield
    gc.collect()
    for session in [s for s in uprobes._sessions if s not in before and not s.closed]:
        session.close()


def static_builds(tmp_path_factory: pytest.TempPathFactory, source: Path, stem: str) -> Callable[[str], Path]:
    """``build(arch)``: ``source`` built static with -pthread by the arch's first fixture compiler,
    once per arch (the differential tests of tasks.c and sockets.c share it)."""
    import subprocess

    out = tmp_path_factory.mktemp(stem)
    built: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in built:
            fixture = first_fixture(arch)
            cc = fixture.compilers[0]
            require_tool(cc, fixture.libc_packages)
            exe = out / f"{stem}-{arch}"
            subprocess.run([cc, "-static", "-O1", "-pthread", "-o", str(exe), str(source)], check=True,
                           capture_output=True)
            built[arch] = exe
        return built[arch]

    return make


def native_outputs(build: Callable[[str], Path]) -> Callable[[str], tuple[str, int]]:
    """``run(mode)``: the x86_64 build's output and status run natively, once per mode: what every
    arch must print."""
    import subprocess

    seen: dict[str, tuple[str, int]] = {}

    def run(mode: str) -> tuple[str, int]:
        if mode not in seen:
            proc = subprocess.run([str(build("x86_64")), mode], capture_output=True, text=True, timeout=60,
                                  check=False)
            seen[mode] = proc.stdout, proc.returncode
        return seen[mode]

    return run
