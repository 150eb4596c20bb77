"""A backend that declares a toolchain is built, checked and tested without being named.

The arch backends declare their fixture programs (``Arch.toolchain``, kpsdk/arch/fixture.py);
the build, ``kpsdk.fixtures``' names, ``kpsdk demo`` and the tests' per-arch parametrisation
(tests/conftest.py) are derived from that.  These tests hold the rest to it: every built-in
arch has a toolchain, every fixture is built and listed (``SHA256SUMS``, which the CLI reads),
``src/sys.h`` has the arch's branch and its compiler takes it, and the per-arch tests collect
every fixture, so a new backend cannot pass them untested.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.arch import Arch
from kpsdk.arch.fixture import Fixture, FixtureVariant, Toolchain
from kpsdk.fixtures.catalog import demo_names, registered
from kpsdk.registry import Registry, hookimpl
from tests.conftest import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
SYS_H = fixtures.FIXTURES_DIR / "src" / "sys.h"
#: ``/* -- arch: NAME ---- */`` on the line above the ``#if``/``#elif`` of an arch's branch
MARKER = re.compile(r"^/\* -- arch: (\S+) -+ \*/$")


def sys_h_branches(text: str) -> list[tuple[str, str]]:
    """``(arch, condition)`` of each marked branch of sys.h, in order: the chain a compiler
    walks, the first ``#if`` and then ``#elif``s."""
    lines = text.splitlines()
    found: list[tuple[str, str]] = []
    for i, line in enumerate(lines[:-1]):
        m = MARKER.match(line)
        if m:
            directive = re.match(r"#\s*(if|elif)\s+(.*)$", lines[i + 1])
            assert directive, f"sys.h line {i + 2}: the branch of {m[1]} is not an #if or #elif: {lines[i + 1]!r}"
            assert (directive[1] == "if") == (not found), f"sys.h line {i + 2}: {m[1]}'s branch out of the chain"
            found.append((m[1], directive[2]))
    return found


def problems(registry: Registry) -> list[str]:
    """What the registry's fixtures lack: the tests below ask it of kpsdk's registry and of one
    with a made-up backend."""
    out: list[str] = []
    declared = registered(registry)
    names = [f.name for f in declared]
    out += [f"fixture {n!r} declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if tuple(names) != fixtures.ARCHS:
        out.append(f"SHA256SUMS lists {fixtures.ARCHS}, the backends declare {tuple(names)}: "
                   "rebuild with python3 -m kpsdk.fixtures.build")
    if tuple(f.name for f in declared if f.pie) != fixtures.PIE_ARCHS:
        out.append(f"SHA256SUMS lists the PIEs {fixtures.PIE_ARCHS}: rebuild")
    for f in declared:
        for binary in (f"prog-{f.name}.elf", *((f"pie-{f.name}.elf",) if f.pie else ())):
            if not (fixtures.FIXTURES_DIR / "bin" / binary).is_file():
                out.append(f"{f.name}: bin/{binary} is not built")
    branches = {arch for arch, _ in sys_h_branches(SYS_H.read_text())}
    out += [f"{a}: no branch in src/sys.h" for a in dict.fromkeys(f.arch.name for f in declared) if a not in branches]
    return out


# -- the source: every built-in backend declares its fixtures ------------------------------------


def test_every_builtin_arch_declares_a_toolchain() -> None:
    """kpsdk's own backends (a third-party arch may have none: it is then tested by none)."""
    missing = [a.name for a in Registry(autoload=False).archs if a.toolchain is None]
    assert not missing, f"no Arch.toolchain: {missing}"


def test_every_declared_fixture_is_built_listed_and_has_its_sys_h_branch() -> None:
    assert problems(kpsdk.get_registry()) == []
    assert fixtures.ARCHS and set(fixtures.PIE_ARCHS) <= set(fixtures.ARCHS)
    assert all(fixtures.path(name).is_file() for name in fixtures.ARCHS)


class NewBackend:
    """A backend added tomorrow: riscv64's data under another name, with a fixture of its own."""

    @hookimpl
    def kpsdk_archs(self) -> list[Arch]:
        from kpsdk.arch_backends.riscv import RISCV64

        return [dataclasses.replace(RISCV64, name="rv64new", aliases=(),
                                    toolchain=Toolchain((FixtureVariant("rv64new", ("-march=rv64gc",)),)))]


def test_a_new_backend_is_asked_for_its_fixture_and_its_sys_h_branch() -> None:
    registry = Registry(autoload=False)
    registry.pm.register(NewBackend(), name="rv64new")
    assert [f.name for f in registered(registry)][-1] == "rv64new"  # built after the ones SHA256SUMS lists
    found = problems(registry)
    assert any("SHA256SUMS lists" in p for p in found)
    assert "rv64new: bin/prog-rv64new.elf is not built" in found
    assert "rv64new: no branch in src/sys.h" in found


# -- sys.h: the branch each compiler takes ----------------------------------------------------


def test_sys_h_branches_are_the_arches() -> None:
    branches = sys_h_branches(SYS_H.read_text())
    arches = [a for a, _ in branches]
    assert len(arches) == len(set(arches)) and arches
    assert set(arches) <= set(kpsdk.get_registry().archs.names())


@pytest.mark.parametrize("fixture", FIXTURES, ids=[f.name for f in FIXTURES])
def test_each_fixtures_compiler_takes_its_arch_s_branch_of_sys_h(fixture: Fixture) -> None:
    """sys.h's conditions, copied as they are, run through the fixture's compiler and flags."""
    cc = next((c for c in fixture.compilers if shutil.which(c)), None)
    if cc is None:
        pytest.skip(f"{fixture.compilers[0]} not found: install the Debian package {fixture.package}")
    chain = "".join(f"#{'elif' if i else 'if'} {cond}\nkpsdk_branch_{arch}\n"
                    for i, (arch, cond) in enumerate(sys_h_branches(SYS_H.read_text())))
    source = f"{chain}#else\nkpsdk_branch_none\n#endif\n"
    done = subprocess.run([cc, *fixture.cflags, "-E", "-P", "-x", "c", "-"], input=source, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [f"kpsdk_branch_{fixture.arch.name}"]


# -- the tests: every fixture is in the per-arch tests' parametrisation ------------------------


def collected(*modules: str) -> dict[str, list[str]]:
    """Each module's test ids, as pytest collects them (the per-arch lists are the conftest's)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *(f"tests/{m}" for m in modules)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ids: dict[str, list[str]] = {m: [] for m in modules}
    for line in done.stdout.splitlines():
        path, sep, test = line.partition("::")
        if sep and Path(path).name in ids:
            ids[Path(path).name].append(test)
    return ids


def covers(ids: list[str], name: str) -> bool:
    """A test id parametrised with ``name`` (``test_x[arm]``, ``test_y[arm-optimized]``; not ``armx``)."""
    return any(re.search(rf"[\[-]{re.escape(name)}[\]-]", i) for i in ids)


def test_the_per_arch_tests_run_every_fixture_without_naming_it() -> None:
    """The fixture-wide tests on every fixture; Unicorn's on every fixture whose arch Unicorn runs
    (Arch.unicorn_unsupported decides); the Linux layer's on every arch it emulates."""
    ids = collected("test_arch.py", "test_ground_truth.py", "test_live.py", "test_kprobes.py", "test_uprobes.py",
                    "test_linux_programs.py")
    missing: list[str] = []
    for f in registered():
        runs_on_unicorn = f.arch.unicorn is not None and f.arch.unicorn_unsupported is None
        wanted = ["test_arch.py", "test_ground_truth.py", "test_live.py"]
        wanted += ["test_kprobes.py", "test_uprobes.py"] if runs_on_unicorn else []
        missing += [f"{module}: {f.name}" for module in wanted if not covers(ids[module], f.name)]
    for arch in {f.arch.name: f.arch for f in registered()}.values():
        if arch.syscalls is not None and arch.syscalls.linux is not None and not covers(
                ids["test_linux_programs.py"], arch.name):
            missing.append(f"test_linux_programs.py: {arch.name}")
    assert not missing


# -- the CLI's hand-written text ----------------------------------------------------------------


def test_the_demo_help_names_the_demo_s_default_fixtures() -> None:
    """kpsdk demo's help (its docstring: the CLI's help imports no backend) lists what it runs."""
    from kpsdk.cli.demo import cmd_demo

    listed = re.search(r"For each architecture \(([^)]*)\)", " ".join((cmd_demo.__doc__ or "").split()))
    assert listed and tuple(listed[1].split(", ")) == demo_names()
