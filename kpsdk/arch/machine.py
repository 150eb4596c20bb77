"""Where a whole machine of an architecture comes from: QEMU's board and Debian's packages.

:class:`QemuMachine` is how ``qemu-system`` runs the architecture (the ``qemu-system:ARCH``
target), with the board's counter behind the kernel's ``sched_clock`` (:class:`KernelClock`);
:class:`DebianPort` is where Debian builds a kernel and a static busybox for it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelClock:
    """A counter of the board that the kernel's ``sched_clock`` (the trace clock ``local``)
    reads, which kpsdk can read too: at a physical address, through QEMU's gdbstub in its
    physical memory mode.  With it, a trace's timestamps are the guest's own
    (:mod:`kpsdk.kernel.guestclock`).

    :param counter: the counter's physical address; ``size`` its bytes.
    :param reader: the kernel function ``sched_clock`` calls to read it once registered
        (``cd.read_data[].read_sched_clock``, kernel/time/sched_clock.c).
    :param source: where the address comes from.
    """

    counter: int
    size: int
    reader: str
    source: str


@dataclass(frozen=True)
class QemuMachine:
    """How ``qemu-system`` runs a whole machine of this architecture (the qemu-system target).

    :param binary: the QEMU program (``qemu-system-x86_64``).
    :param package: the Debian package that has it.
    :param machine: ``-M`` (``virt``, ``pseries``); None: QEMU's default board.
    :param cpu: ``-cpu``; None: the board's default.
    :param console: the kernel's console device on that board (``ttyS0``,
        ``ttyAMA0``, ``hvc0``): ``console=`` is added to a command line that names none.
    :param args: anything else the board needs on QEMU's command line.
    :param memory: ``-m`` unless the user gives ``memory=``.
    :param clock: the board's counter behind the kernel's sched_clock, where kpsdk can read
        it (None: a trace's timestamps are the host's).
    """

    binary: str
    package: str
    machine: str | None = None
    cpu: str | None = None
    console: str = "ttyS0"
    args: tuple[str, ...] = ()
    #: ``-m``: what the board's kernels need to boot with an initramfs (pseries wants 1G)
    memory: str = "512M"
    clock: KernelClock | None = None

    def command(self) -> list[str]:
        """The board's part of QEMU's command line (after the binary)."""
        out = [] if self.machine is None else ["-M", self.machine]
        out += [] if self.cpu is None else ["-cpu", self.cpu]
        return out + list(self.args)


@dataclass(frozen=True)
class DebianPort:
    """Where Debian builds a kernel and a static busybox for this architecture: what
    ``python -m kpsdk.fixtures.kernel --arch ARCH`` fetches to boot under qemu-system.

    :param arch: Debian's architecture name (``armhf``, ``ppc64el``).
    :param suite: the release with a kernel for it (Debian 12 has no riscv64 kernel: trixie).
    :param kernel: the metapackage naming the current kernel (``linux-image-armmp``).
    :param image: the kernel file in the package's ``boot/`` (``vmlinuz-*``; ppc64el ships
        ``vmlinux-*``, an ELF with its ``.symtab``).
    """

    arch: str
    suite: str
    kernel: str
    image: str = "vmlinuz-*"
