"""A :class:`~.base.FrameCpu` over a Unicorn engine, and the Unicorn ids of the registers
a frame saves that the arch backends do not list (the FP and vector state).

The backends name the general registers (``arch_backends/*.py``) and stay as they are:
their register tables feed ``regs.X``, trace fetch-args and the live targets' gdb names,
where 128-bit XMM or 80-bit x87 values have no place.  The names here follow Unicorn's
``*_const`` (``UC_X86_REG_XMM0`` is ``xmm0``), except x86's ``fp0``-``fp7`` (Unicorn's
physical ``FP0``-``FP7``, read as (significand, exponent) pairs and given to frames as
one 80-bit integer).
"""

from __future__ import annotations

from typing import Any

from unicorn import UcError
from unicorn import arm64_const as u64
from unicorn import arm_const as ua
from unicorn import ppc_const as up
from unicorn import riscv_const as ur
from unicorn import x86_const as ux

from kpsdk.errors import TargetFault

_X87 = {"fpcw": ux.UC_X86_REG_FPCW, "fpsw": ux.UC_X86_REG_FPSW, "fptag": ux.UC_X86_REG_FPTAG,
        "fop": ux.UC_X86_REG_FOP, "fip": ux.UC_X86_REG_FIP, "fdp": ux.UC_X86_REG_FDP,
        "mxcsr": ux.UC_X86_REG_MXCSR, **{f"fp{i}": getattr(ux, f"UC_X86_REG_FP{i}") for i in range(8)}}
#: name -> Unicorn register id, per architecture, for the registers frames save beyond
#: the backends'
EXTRA_REGISTERS: dict[str, dict[str, int]] = {
    "x86_64": {**_X87, **{f"xmm{i}": getattr(ux, f"UC_X86_REG_XMM{i}") for i in range(16)}},
    "i386": {**_X87, **{f"xmm{i}": getattr(ux, f"UC_X86_REG_XMM{i}") for i in range(8)}},
    "arm": {"fpscr": ua.UC_ARM_REG_FPSCR, "fpexc": ua.UC_ARM_REG_FPEXC,
            **{f"d{i}": getattr(ua, f"UC_ARM_REG_D{i}") for i in range(32)}},
    "riscv64": {"fcsr": ur.UC_RISCV_REG_FCSR, **{f"f{i}": getattr(ur, f"UC_RISCV_REG_F{i}") for i in range(32)}},
    "ppc64": {"fpscr": up.UC_PPC_REG_FPSCR, **{f"f{i}": getattr(up, f"UC_PPC_REG_FPR{i}") for i in range(32)}},
}
EXTRA_REGISTERS["ppc64le"] = EXTRA_REGISTERS["ppc64"]
#: MIPS's backends name the FP registers themselves (f0-f31, fcsr: arch_backends/mips.py)
EXTRA_REGISTERS.update({"mips": {}, "mipsel": {}, "mips64el": {}})
#: aarch64 has no arch backend yet: its general registers are listed here too
EXTRA_REGISTERS["aarch64"] = {
    **{f"x{i}": getattr(u64, f"UC_ARM64_REG_X{i}") for i in range(31)}, "sp": u64.UC_ARM64_REG_SP,
    "pc": u64.UC_ARM64_REG_PC, "pstate": u64.UC_ARM64_REG_PSTATE, "fpsr": u64.UC_ARM64_REG_FPSR,
    "fpcr": u64.UC_ARM64_REG_FPCR, **{f"v{i}": getattr(u64, f"UC_ARM64_REG_V{i}") for i in range(32)}}


class UnicornFrameCpu:
    """:class:`~.base.FrameCpu` for ``uc``, running ``arch`` (a kpsdk architecture name):
    backend registers by their ids, the others by :data:`EXTRA_REGISTERS`."""

    def __init__(self, uc: Any, arch: str) -> None:
        from kpsdk import get_registry

        self.uc = uc
        self._ids: dict[str, int] = {}
        if arch in get_registry().archs.names():
            spec = get_registry().arch(arch)
            self._ids.update({n: r.uc for n, r in spec.by_name.items() if r.uc is not None})
        self._ids.update(EXTRA_REGISTERS.get(arch, {}))
        self._fp = {_X87[f"fp{i}"] for i in range(8)} if arch in ("x86_64", "i386") else set()

    def _id(self, name: str) -> int:
        try:
            return self._ids[name]
        except KeyError:
            from kpsdk.errors import UnknownNameError

            raise UnknownNameError("frame register", name, sorted(self._ids)) from None

    def reg(self, name: str) -> int:
        rid = self._id(name)
        if rid in self._fp:
            significand, exponent = self.uc.reg_read(rid)
            return int(significand) | int(exponent) << 64
        return int(self.uc.reg_read(rid))

    def set_reg(self, name: str, value: int) -> None:
        rid = self._id(name)
        if rid in self._fp:
            self.uc.reg_write(rid, (value & (1 << 64) - 1, (value >> 64) & 0xFFFF))
        else:
            self.uc.reg_write(rid, value)

    def read(self, addr: int, size: int) -> bytes:
        try:
            return bytes(self.uc.mem_read(addr, size))
        except UcError as e:
            raise TargetFault(f"signal frame: cannot read {size} bytes ({e})", address=addr) from None

    def write(self, addr: int, data: bytes) -> None:
        """Write guest memory; memory the task cannot reach raises :class:`~kpsdk.TargetFault`
        (Linux: the frame cannot be written, SIGSEGV)."""
        try:
            self.uc.mem_write(addr, data)
        except UcError as e:
            raise TargetFault(f"signal frame: cannot write {len(data)} bytes ({e})", address=addr) from None
