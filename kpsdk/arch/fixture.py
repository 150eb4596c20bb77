"""How kpsdk's bundled test programs are built for an architecture, declared by its backend.

Each backend says, as data on its :class:`~kpsdk.arch.Arch` (``toolchain=``), which
fixture programs (:mod:`kpsdk.fixtures`) it has and the compiler flags of each; the rest
of what building and running them needs is already the arch's (its cross compiler's
Debian package, its qemu-user, its ELF machine).  Everything per-arch about the fixtures
is derived from here: ``python3 -m kpsdk.fixtures.build``'s table, the fixtures' names,
``kpsdk demo``'s default run and the tests' per-arch parametrisation.  So a new backend
that declares a toolchain is built, checked and tested by every per-arch test without
being named anywhere else (``tests/test_arch_fixtures.py`` makes sure).

Only the standard library: the arch model imports this module.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet


@dataclass(frozen=True)
class FixtureVariant:
    """One fixture program of an arch: ``bin/prog-NAME.elf`` (and ``bin/pie-NAME.elf``).

    An arch may have several, compiled from the same source with other flags (arm's
    ``thumb``: the same backend, every function in Thumb).

    :param name: the fixture's name (``kpsdk.fixtures.path(name)``, ``kpsdk probe NAME``);
        the arch's own name for its first one.
    :param cflags: the compiler flags besides the ones every fixture has
        (``kpsdk.fixtures.build.COMMON_FLAGS``).
    :param iset: the instruction set its code is in; None: the arch's first.
    :param pie: a static PIE (``bin/pie-NAME.elf``) is built too, for uprobes' file offsets.
    :param demo: its place in ``kpsdk demo``'s default run (0 first); None: shown only when
        asked for with ``--arch``.  The tests run the fixtures in this order too, then the rest.
    """

    name: str
    cflags: tuple[str, ...]
    iset: str | None = None
    pie: bool = True
    demo: int | None = None


@dataclass(frozen=True)
class Toolchain:
    """What an arch's test programs are built with, beyond the arch's own data.

    The compiler is Debian's cross gcc named after the arch's multiarch triple
    (``Arch.multiarch``: ``arm-linux-gnueabihf-gcc``), from ``Arch.cross_gcc_package``;
    the programs run under ``Arch.qemu_user``.

    :param variants: the fixture programs, in the order the arch shows them.
    :param libc_dev: the Debian package with the static C library for the cross compiler
        (the tests' programs that link glibc: ``libc6-dev-armhf-cross``).
    :param native_machine: a host whose ``platform.machine()`` is this builds with its own
        ``gcc`` too (x86_64 on an x86_64 host).
    :param elf_flags: ``(mask, value, ABI name)``: what every binary's ``e_flags`` must
        hold (ppc64's ABI version: ELFv1 big-endian, ELFv2 little-endian); None: not checked.
    """

    variants: tuple[FixtureVariant, ...]
    libc_dev: str = ""
    native_machine: str | None = None
    elf_flags: tuple[int, int, str] | None = None


@dataclass(frozen=True, eq=False)
class Fixture:
    """One fixture program with everything building, checking and running it needs:
    a variant of an arch's toolchain, resolved against the arch."""

    arch: Arch
    toolchain: Toolchain
    variant: FixtureVariant

    @property
    def name(self) -> str:
        return self.variant.name

    @property
    def cflags(self) -> tuple[str, ...]:
        return self.variant.cflags

    @property
    def pie(self) -> bool:
        return self.variant.pie

    @property
    def demo(self) -> int | None:
        return self.variant.demo

    @property
    def iset(self) -> InstructionSet:
        """The instruction set the program's code is in (its symbols' bit 0 says so on ARM)."""
        return self.arch.iset(self.variant.iset)

    @property
    def on_native_host(self) -> bool:
        """This machine's own gcc builds the arch (see :attr:`Toolchain.native_machine`)."""
        return self.toolchain.native_machine is not None and platform.machine() == self.toolchain.native_machine

    @property
    def compilers(self) -> tuple[str, ...]:
        """The compilers to try, in order: the cross gcc, then the host's own where it builds the arch."""
        return (f"{self.arch.multiarch}-gcc",) + (("gcc",) if self.on_native_host else ())

    @property
    def package(self) -> str:
        """The Debian package of the cross compiler (what a missing compiler's message names)."""
        return self.arch.cross_gcc_package

    @property
    def libc_packages(self) -> str:
        """The Debian packages a program linking glibc statically needs (the host's own where it builds the arch)."""
        return "gcc libc6-dev" if self.on_native_host else f"{self.package} {self.toolchain.libc_dev}"

    @property
    def qemu(self) -> str:
        """The qemu-user binary that runs it."""
        return self.arch.qemu_user


def fixtures_of(archs: Iterable[Arch]) -> list[Fixture]:
    """Every fixture the arches declare, arch by arch in the order given, each arch's in its order;
    arches without a toolchain have none."""
    return [Fixture(arch, arch.toolchain, variant)
            for arch in archs if arch.toolchain is not None
            for variant in arch.toolchain.variants]
