"""``gdb://HOST:PORT``: a gdbstub that is already running (not started, not killed by kpsdk).

Which kind of stub it is decides what kpsdk knows of it (docs/api/targets.md, "What each
kind of stub gives"):

- a stub that answers an auxiliary vector (``qXfer:auxv``) serves a Linux process
  (gdbserver, qemu-user): ``abi="user"``.  The program is the one the user named
  (``symbols=``) or the stub's own (``qXfer:exec-file``, looked up under ``sysroot``); its
  load bias and its libraries come from the process (:mod:`kpsdk.targets.live.userstub`);
- any other stub is a kernel's or a bare-metal board's: ``abi="kernel"``, symbols at their
  link addresses, as before.  A bare-metal program (an ELF that is no Linux kernel: it has
  no ``linux_banner``) gets hardware breakpoints by default, since a board's flash cannot
  take a software one.

``abi=`` says it instead of asking the stub.  What a user passes is checked before gdb
sees it: the remote is exactly ``HOST:PORT`` (gdb's ``target remote`` would run ``|cmd``
in a shell), files travel as quoted MI arguments or are read by kpsdk itself.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import SymbolTable
from kpsdk.errors import TargetError
from kpsdk.options import STALL_LIMIT
from kpsdk.targets.live.connect import kernel_osabi, stub_architecture
from kpsdk.targets.live.qemu import _directory, _need, choose_sysroot, load_symbols
from kpsdk.targets.live.solibs import host_path, read_image
from kpsdk.targets.live.userstub import exec_file, is_qemu_stub, place_program, stub_abi

if TYPE_CHECKING:
    from kpsdk.arch import Arch
    from kpsdk.binfmt.elfimage import ElfImage
    from kpsdk.registry import Registry
    from kpsdk.targets.live.mi import MiConnection
    from kpsdk.targets.live.target import GdbTarget

ABIS = ("user", "kernel")
#: a symbol every Linux kernel has: an ELF without it, run on a stub with no auxiliary
#: vector, is a bare-metal program
KERNEL_MARK = "linux_banner"


def open_gdb(rest: str, registry: Registry, arch: str | None = None, symbols: str | None = None,
             abi: str | None = None, hardware_breakpoints: bool | None = None, stall_limit: float = STALL_LIMIT,
             sysroot: str | os.PathLike[str] | None = None, **options: Any) -> GdbTarget:
    """``gdb://HOST:PORT``: attach to a running gdbstub and learn what it runs (see the module)."""
    from kpsdk.targets.live.target import GdbTarget

    if options:
        raise TargetError(f"gdb: unknown options {', '.join(options)} (known: arch, symbols, abi, "
                          "hardware_breakpoints, stall_limit, sysroot)")
    if abi is not None and abi not in ABIS:
        raise TargetError(f"gdb: abi={abi!r} is not one of {', '.join(ABIS)} (or None: asked of the stub)")
    remote = parse_remote(rest)
    root = _directory(sysroot, "sysroot") if sysroot is not None else None
    table, image = load_symbols(symbols) if symbols else (SymbolTable(), None)
    _need("gdb-multiarch", "gdb-multiarch")
    refuse_unheard(remote)  # after what the user's files say: those errors do not depend on a stub
    the_arch: Arch | Any
    if arch is not None:
        the_arch = registry.arch(arch)
    elif image is not None:
        the_arch = registry.archs.by_elf(image.machine, image.elf_class, image.endian)
    else:
        def the_arch(mi: MiConnection) -> Arch:
            return _arch_of_stub(mi, registry)
    target = GdbTarget(the_arch, remote, abi_kind=abi or "kernel", symbols=table, image=image,
                       hardware_breakpoints=bool(hardware_breakpoints), stall_limit=stall_limit,
                       files=False)
    try:
        _learn(target, abi, hardware_breakpoints, symbols, root)
    except BaseException:
        target.close()
        raise
    return target


def _learn(target: GdbTarget, abi: str | None, hardware: bool | None, symbols: str | None,
           sysroot: Path | None) -> None:
    """Which kind of stub this is, and for a process, where its program and libraries are."""
    mi = target._mi()
    kind = abi or stub_abi(mi)
    qemu = is_qemu_stub(mi)
    target.reconfigure(kind, hardware=_hardware_default(kind, hardware, target.image), real_traps=not qemu)
    if kind == "kernel":
        kernel_osabi(mi, target.arch)
        target.kernel_image = symbols  # a vmlinux or vmlinuz has the BTF the trace prefix reads
        target.symbols_file = symbols if target.image is not None else None  # a vmlinux's DWARF (kpsdk.debuginfo)
        return
    target.hw_watchpoints = not qemu  # qemu-user's stub refuses Z2-Z4; gdbserver has the debug registers
    image = target.image if target.image is not None else _stub_program(mi, sysroot)
    root = sysroot if sysroot is not None else choose_sysroot(image, target.arch, None)
    target.sysroot = root
    target.image, target.symbols = image, image.symbols
    place_program(target, image, root, Path.cwd())


def _hardware_default(kind: str, given: bool | None, image: ElfImage | None) -> bool:
    """Hardware breakpoints when asked; by default for a bare-metal program (its code is in
    flash), never by default for a process or a kernel (today's behaviour)."""
    if given is not None:
        return given
    return kind == "kernel" and image is not None and KERNEL_MARK not in image.symbols


def _stub_program(mi: MiConnection, sysroot: Path | None) -> ElfImage:
    """The host's copy of the program the stub runs (its path under ``sysroot``)."""
    path = exec_file(mi)
    if path is None:
        raise TargetError("the gdbstub serves a process but does not say which program (no qXfer:exec-file): "
                          "give symbols=PROG (--symbols)")
    found = host_path(path, sysroot, Path("/"))
    if found is None:
        raise TargetError(f"the gdbstub runs {path}, which is not on this host"
                          + (f" under {sysroot}" if sysroot else "") + ": give sysroot=DIR (--sysroot) holding "
                          "the target's files, or symbols=PROG (--symbols)")
    return read_image(found)


def _arch_of_stub(mi: MiConnection, registry: Registry) -> Arch:
    """kpsdk's architecture for what the stub described (gdb's name and byte order)."""
    name, endian = stub_architecture(mi)
    for candidate in registry.archs:
        if candidate.gdb_arch == name and candidate.endian == endian:
            return candidate
    raise TargetError(f"the gdbstub's architecture is {name} ({endian} endian), which kpsdk has no "
                      "architecture for: give arch=... (--arch) or symbols=... (--symbols) an ELF file")


_PORT = re.compile(r"[0-9]{1,5}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def parse_remote(rest: str) -> str:
    """``gdb://HOST:PORT``'s remote, checked to be exactly that, as gdb's ``target remote`` takes it.

    HOST is a host name, an IPv4 address or a bracketed IPv6 address (no
    ``%zone``); PORT is 1-65535.  Anything else is refused: gdb would run
    ``|cmd`` in a shell, and a line break would end gdb's command.
    """
    spec = rest.removeprefix("//")
    host, sep, port = spec.rpartition(":")
    if not sep or not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535 or not _plain_host(host):
        raise TargetError(f"gdb:// wants HOST:PORT, not {spec!r} (HOST: a host name, an IPv4 address or an "
                          "[IPv6] address; PORT: 1-65535)")
    return f"{host}:{int(port)}"


def _plain_host(host: str) -> bool:
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
        return "%" not in host
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    labels = host.removesuffix(".").split(".")
    return len(host) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels)


#: how a loopback host may be written in gdb://HOST:PORT
_LOOPBACK_NAMES = ("localhost", "localhost.", "ip6-localhost", "ip6-loopback")
#: /proc/net/tcp's state of a listening socket (TCP_LISTEN)
_TCP_LISTEN = "0A"


def refuse_unheard(remote: str) -> None:
    """A stub on this host that nothing listens for is refused at once, before gdb starts.

    gdb would report the refusal only after starting (a second or two), so for a loopback
    HOST the ports this host listens on are read from ``/proc/net/tcp`` and ``tcp6`` (the
    network namespace kpsdk and gdb share).  No connection is made to ask: qemu-user's stub and
    ``gdbserver --once`` take the first connection as the debugger's, and go on without one
    (qemu-user runs the program to its end, gdbserver exits) when it closes.  Another host,
    or a system without those files, is left to gdb, which reports a refusal at once too
    (``tcp auto-retry off``, :func:`kpsdk.targets.live.connect.select_remote`).
    """
    host, _, port = remote.rpartition(":")
    if not _is_loopback(host.strip("[]")):
        return
    ports = loopback_listeners()
    if ports is not None and int(port) not in ports:
        raise TargetError(f"cannot attach to the gdbstub at {remote}: the connection would be refused (nothing "
                          f"listens on port {port} of this host: is the stub running, on that port?)")


def _is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_listeners() -> set[int] | None:
    """The TCP ports something listens on that a loopback connection reaches (bound to a
    loopback address or to any address), IPv4 and IPv6; None when ``/proc/net`` cannot say."""
    ports: set[int] = set()
    read_any = False
    for name, family in (("tcp", 4), ("tcp6", 6)):
        try:
            lines = Path("/proc/net", name).read_text().splitlines()[1:]
        except OSError:
            continue
        read_any = True
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != _TCP_LISTEN:
                continue
            address, _, port = fields[1].partition(":")
            try:
                ip = _proc_address(address, family)
                number = int(port, 16)
            except ValueError:
                continue
            if ip.is_loopback or ip.is_unspecified or (isinstance(ip, ipaddress.IPv6Address)
                                                       and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback):
                ports.add(number)
    return ports if read_any else None


def _proc_address(text: str, family: int) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as ``/proc/net/tcp*`` writes it: 32-bit words in hex, each in the host's byte order."""
    if len(text) != (8 if family == 4 else 32):
        raise ValueError(text)
    raw = b"".join(int(text[i:i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(text), 8))
    return ipaddress.IPv4Address(raw) if family == 4 else ipaddress.IPv6Address(raw)
