"""The target interface: what a session needs from a CPU it probes.

A target kind (Unicorn, and later gdb/MI) is a plugin returning
:class:`TargetKind` objects from ``kpsdk_targets``.  The session and probe
manager only speak to :class:`Target`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.arch import Arch, InstructionSet
    from kpsdk.insn import Decoded
    from kpsdk.manager import ProbeManager, ProbePoint
    from kpsdk.regs import PtRegs
    from kpsdk.session import Session
    from kpsdk.symbols import Symbol, SymbolTable


@dataclass(frozen=True)
class TargetKind:
    """A way to open targets, chosen by the scheme of ``kpsdk.open(spec)``.

    :param name: the scheme (``unicorn`` for ``"unicorn:riscv64"``).
    :param open: ``(rest_of_spec, registry, **options) -> Target``.
    :param help: one line for ``kpsdk plugins`` and errors.
    """

    name: str
    open: Callable[..., Target]
    help: str


class Target(ABC):
    """A CPU and its memory, stopped or running, that probes can be put on."""

    arch: Arch
    symbols: SymbolTable
    session: Session
    manager: ProbeManager
    #: calling convention of the code probed: "user" or "kernel"
    abi_kind: str = "user"

    # -- memory -------------------------------------------------------------
    @abstractmethod
    def read_memory(self, addr: int, size: int) -> bytes:
        """Target memory as the program sees it: never kpsdk's breakpoints (K10)."""

    @abstractmethod
    def write_memory(self, addr: int, data: bytes) -> None: ...

    @abstractmethod
    def is_mapped(self, addr: int) -> bool: ...

    @abstractmethod
    def is_executable(self, addr: int) -> bool: ...

    @abstractmethod
    def is_reserved(self, addr: int) -> bool:
        """True inside kpsdk's own areas (slots, trampolines): never probed."""

    # -- instructions -----------------------------------------------------------
    @abstractmethod
    def iset_at(self, addr: int, sym: Symbol | None) -> InstructionSet: ...

    @abstractmethod
    def decode_at(self, addr: int, start: int, iset: InstructionSet) -> Decoded | None:
        """The instruction at ``addr``, decoding from ``start``; None if ``addr``
        falls inside an instruction."""

    @abstractmethod
    def can_step(self, point: ProbePoint) -> bool:
        """Whether a post_handler can be run after this instruction."""

    # -- probes ----------------------------------------------------------------
    @abstractmethod
    def sync_point(self, point: ProbePoint, force: bool = False) -> None:
        """Make the target match the point: arm, re-arm with another mechanism, or disarm."""

    # -- execution ---------------------------------------------------------------
    @abstractmethod
    def run(self, timeout: float | None = None) -> int | None:
        """Run until the program ends, ``stop()`` or the timeout; the exit status if it ended."""

    @abstractmethod
    def stop(self) -> None: ...

    def call(self, addr: int, args: tuple[int, ...], restype: str = "long") -> int:
        from kpsdk.errors import TargetError

        raise TargetError(f"{type(self).__name__} cannot call functions")

    @abstractmethod
    def regs(self) -> PtRegs:
        """A register view of the stopped CPU."""

    @property
    @abstractmethod
    def console(self) -> str: ...

    def close(self) -> None:  # noqa: B027 - optional: most targets have nothing to release
        """Release the target's resources."""
