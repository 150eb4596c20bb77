"""A live target's registers and memory: through the agent during a hit, else through MI.

During a hit, memory the agent sent with the hit (learned reads near the stack
pointer, :mod:`.liveregs`) is answered from the hit's line; any other read is one
request (``m ADDR SIZE``).  A kernel may refuse the debugger what the CPU's access
control guards: ppc64's KUAP (read again with the gate open) and ARM's software PAN
(read at the physical addresses the guest's own page tables give).
"""

from __future__ import annotations

from kpsdk.errors import TargetError, TargetFault
from kpsdk.regs import PtRegs
from kpsdk.targets.live.mi import GdbError
from kpsdk.targets.live.state import LiveState


class LiveMemory(LiveState):
    """Registers and memory of the stopped CPU (a part of GdbTarget: see :mod:`.state`)."""

    def mi_read_register(self, name: str) -> int:
        number = self._reg_numbers.get(name)
        if number is None:
            raise TargetError(f"gdb's {self.arch.gdb_arch} target has no register {name!r}")
        values = self._mi().command(f"-data-list-register-values x {number}").get("register-values", [])
        try:
            return int(values[0]["value"], 16)
        except (IndexError, KeyError, ValueError) as exc:
            raise TargetError(f"gdb gave no value for register {name}: {values!r}") from exc

    def regs(self) -> PtRegs:
        self._regs._reset(None)
        return self._regs

    def read_memory(self, addr: int, size: int) -> bytes:
        if size <= 0:
            return b""
        if self.in_hit:
            sent = self._io.memory.get(addr) if self._io.memory else None
            if sent is not None and len(sent) >= size:
                return sent[:size]
            try:
                data = bytes.fromhex(self.link.request(f"m {addr:x} {size:x}"))
                self._io.learn_memory(addr, size)
                return data
            except TargetFault:
                if self.abi_kind != "kernel":
                    raise
                if self.arch.access_gate is not None:
                    return self._read_through_gate(addr, size)
                if self.arch.page_walk is None:
                    raise
                return self._read_through_page_tables(addr, size)
        try:
            blocks = self._mi().command(f"-data-read-memory-bytes {addr:#x} {size}").get("memory", [])
        except GdbError as exc:
            raise self.memory_fault(f"cannot read {size} bytes: {exc}", addr) from exc
        data = b"".join(bytes.fromhex(b["contents"]) for b in blocks if int(b["begin"], 16) >= addr)
        if len(data) < size:
            raise self.memory_fault(f"cannot read {size} bytes (only {len(data)})", addr)
        return data[:size]

    def _read_through_gate(self, addr: int, size: int) -> bytes:
        """A read the kernel's own access gate refused to the debugger (ppc64's KUAP:
        :attr:`~kpsdk.arch.Arch.access_gate`), again with the gate open; the guest's value
        is back in the register before the hit goes on, whatever the read gave.  A read that
        fails with the gate open is a real fault (:class:`TargetFault`)."""
        gate = self.arch.access_gate
        assert gate is not None
        saved = int(self.link.request(f"r {gate.register}"), 16)
        self.link.request(f"W {gate.register} {gate.open_value:x}")
        try:
            return bytes.fromhex(self.link.request(f"m {addr:x} {size:x}"))
        finally:
            self.link.request(f"W {gate.register} {saved:x}")

    def _read_through_page_tables(self, addr: int, size: int) -> bytes:
        """A read the CPU's access control refused to the debugger (ARM's software PAN),
        done page by page at the physical addresses the guest's own page tables give
        (:attr:`~kpsdk.arch.Arch.page_walk`): the guest's registers and memory stay as they
        are.  An address its tables do not map is a real fault (:class:`TargetFault`)."""
        walk = self.arch.page_walk
        assert walk is not None

        def read_reg(name: str) -> int:
            return int(self.link.request(f"r {name}"), 16)

        def read_phys(pa: int, n: int) -> bytes:
            return bytes.fromhex(self.link.request(f"p {pa:x} {n:x}"))

        out = bytearray()
        page = 4096
        while len(out) < size:
            va = addr + len(out)
            chunk = min(size - len(out), page - va % page)
            pa = walk(read_reg, read_phys, va)
            if pa is None:
                raise self.memory_fault(f"cannot read {size} bytes: {va:#x} is not mapped", addr)
            out += read_phys(pa, chunk)
        return bytes(out)

    def _read_code(self, addr: int, most: int) -> bytes:
        """Up to ``most`` bytes of code at ``addr``: fewer where the next page is not mapped."""
        while True:
            try:
                return self.read_memory(addr, most)
            except TargetFault:
                if most <= 2:
                    raise
                most //= 2

    def write_memory(self, addr: int, data: bytes) -> None:
        if not data:
            return
        if self.in_hit:
            self._io.memory.clear()  # what the agent sent may be stale now
            self.link.request(f"w {addr:x} {bytes(data).hex()}")
            return
        try:
            self._mi().command(f"-data-write-memory-bytes {addr:#x} {bytes(data).hex()}")
        except GdbError as exc:
            raise self.memory_fault(f"cannot write {len(data)} bytes: {exc}", addr) from exc

    def is_mapped(self, addr: int) -> bool:
        try:
            self.read_memory(addr, 1)
        except TargetFault:
            return False
        return True

    def is_executable(self, addr: int) -> bool:
        if self._files:  # the mappings the program really has: its own and its libraries'
            return any(mf.executable_at(addr) for mf in self._files)
        if self.image is not None:
            return any(s.executable and s.vaddr <= addr < s.vaddr + s.memsz for s in self.image.segments)
        sym = self.symbols.containing(addr)
        return sym is None or sym.kind == "func"

    def is_reserved(self, addr: int) -> bool:
        return False  # kpsdk puts nothing of its own into a live target
