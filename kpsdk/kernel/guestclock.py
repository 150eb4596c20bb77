"""The guest kernel's own trace clock at a hit: ``sched_clock``, computed as the kernel does.

The kernel stamps each trace entry with the ``local`` trace clock, ``sched_clock()``
(kernel/trace/trace_clock.c), which the generic sched_clock (kernel/time/sched_clock.c)
computes from a counter and the epoch kept in its static ``cd``::

    rd = &cd.read_data[cd.seq & 1]
    ns = rd->epoch_ns + ((((counter - rd->epoch_cyc) & rd->sched_clock_mask) * rd->mult) >> rd->shift)

kpsdk reads ``cd`` (its address from the kernel's symbols, its layout from the kernel's BTF)
and the counter (the board's :class:`~kpsdk.arch.KernelClock`, at a physical address) at
each hit and computes the same.  The machine is stopped while kpsdk reads, so neither
moves meanwhile.  Before the kernel registers its counter (``time_init``), sched_clock
reads jiffies, which do not move yet: the epoch is then the kernel's value, as its early
``[    0.000000]`` printk lines show.

Only a board whose counter is readable from outside has one: QEMU 7.2's gdbstub shows
neither x86's TSC, nor arm's CNTVCT, nor a live ppc64 timebase among its registers, and
those boards have no memory-mapped copy of them.  Their traces keep the host's clock, and
the trace header says which clock the timestamps are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from kpsdk.errors import ImageFormatError, TargetError

if TYPE_CHECKING:
    from kpsdk.arch import Arch, KernelClock

#: the function sched_clock reads before a counter is registered (kernel/time/sched_clock.c)
JIFFY_READER = "jiffy_sched_clock_read"
#: the kernel's sched_clock data (kernel/time/sched_clock.c: ``static struct clock_data cd``)
DATA_SYMBOL = "cd"
_U64 = (1 << 64) - 1


@dataclass(frozen=True)
class SchedClock:
    """Where a kernel's sched_clock keeps its state and which counter it reads.

    :param cd: the address of ``cd``; ``seq`` the offset of its latch sequence,
        ``read_data`` of its two ``struct clock_read_data`` (``stride`` bytes each).
    :param fields: offset and size in a ``clock_read_data`` of ``epoch_ns``,
        ``epoch_cyc``, ``sched_clock_mask``, ``read_sched_clock``, ``mult`` and ``shift``.
    :param counter: the counter's physical address and ``counter_size``.
    :param reader: the address of the kernel function that reads the counter.
    :param how: the trace header's words for it.
    """

    cd: int
    seq: int
    read_data: int
    stride: int
    fields: dict[str, tuple[int, int]]
    counter: int
    counter_size: int
    reader: int
    how: str

    @property
    def span(self) -> int:
        """The bytes of ``cd`` read at each hit (from its start to the end of read_data[1])."""
        return self.read_data + 2 * self.stride

    def _current(self, raw: bytes, endian: Literal["little", "big"]) -> dict[str, int]:
        seq = int.from_bytes(raw[self.seq:self.seq + 4], endian)
        base = self.read_data + (seq & 1) * self.stride
        return {name: int.from_bytes(raw[base + off:base + off + size], endian)
                for name, (off, size) in self.fields.items()}

    def reader_of(self, raw: bytes, endian: Literal["little", "big"]) -> int:
        """The function sched_clock reads its counter with now (``raw``: ``cd``'s bytes)."""
        return self._current(raw, endian)["read_sched_clock"]

    def ns(self, raw: bytes, counter: bytes, endian: Literal["little", "big"]) -> int:
        """sched_clock() in ns, from ``cd``'s bytes and the counter's."""
        rd = self._current(raw, endian)
        if rd["read_sched_clock"] != self.reader:  # jiffies, before time_init: not moving yet
            return rd["epoch_ns"]
        cyc = (int.from_bytes(counter, endian) - rd["epoch_cyc"]) & rd["sched_clock_mask"]
        return (rd["epoch_ns"] + (((cyc * rd["mult"]) & _U64) >> rd["shift"])) & _U64


def sched_clock_layout(image: str | os.PathLike[str], arch: Arch, clock: KernelClock) -> tuple[SchedClock, int]:
    """The :class:`SchedClock` of the kernel in ``image`` on a board with ``clock``, and the
    address of ``jiffy_sched_clock_read`` (what ``cd`` holds before time_init).

    Raises :class:`~kpsdk.errors.TargetError` saying what is missing: BTF, the ``cd``
    symbol (one of it: a kernel with CONFIG_KALLSYMS_ALL names its data), the reader."""
    from kpsdk.binfmt.files import read_regular
    from kpsdk.kernel.kallsyms import image_entries
    from kpsdk.kernel.tasks import image_btf

    path = Path(image)
    try:
        data = read_regular(path)[0]
    except OSError as exc:
        raise TargetError(f"cannot read the kernel image {path}: {exc.strerror}") from exc
    entries = image_entries(data, path)
    named: dict[str, list[int]] = {}
    for e in entries:
        if e.name in (DATA_SYMBOL, clock.reader, JIFFY_READER):
            named.setdefault(e.name, []).append(e.address)
    for name in (DATA_SYMBOL, clock.reader, JIFFY_READER):
        if len(named.get(name, ())) != 1:
            raise TargetError(f"{path}: its symbols name {name} {len(named.get(name, ()))} times, not once")
    try:
        btf = image_btf(data, path, arch)
        seq = btf.member("clock_data", "seq")
        read_data = btf.member("clock_data", "read_data")
        rd_struct = btf.struct("clock_read_data")
        if rd_struct is None:
            raise LookupError("BTF has no struct clock_read_data")
        fields = {}
        for name in ("epoch_ns", "epoch_cyc", "sched_clock_mask", "read_sched_clock", "mult", "shift"):
            member = btf.member("clock_read_data", name)
            fields[name] = (member.offset, member.size)
        stride = btf.size(rd_struct)
    except LookupError as exc:
        raise TargetError(f"{path}: {exc}") from None
    except ImageFormatError as exc:
        raise TargetError(str(exc)) from None
    if read_data.size != 2 * stride or seq.size < 4:
        raise TargetError(f"{path}: clock_data is not laid out as kernel/time/sched_clock.c's (read_data[2], seq)")
    layout = SchedClock(named[DATA_SYMBOL][0], seq.offset, read_data.offset, stride, fields, clock.counter,
                        clock.size, named[clock.reader][0],
                        f"the guest's sched_clock (the kernel's trace clock), from {clock.source} and the kernel's "
                        f"cd (kernel/time/sched_clock.c, laid out by its BTF)")
    return layout, named[JIFFY_READER][0]


def check_state(layout: SchedClock, raw: bytes, jiffy_reader: int, endian: Literal["little", "big"]) -> None:
    """``cd``'s bytes, read before the run, must hold one of the two readers sched_clock uses:
    else the symbol ``cd`` is not the sched_clock's data kpsdk expects."""
    reader = layout.reader_of(raw, endian)
    if reader not in (layout.reader, jiffy_reader):
        raise TargetError(f"the kernel's cd reads its clock with {reader:#x}, neither the board's counter reader "
                          f"({layout.reader:#x}) nor {JIFFY_READER} ({jiffy_reader:#x})")
