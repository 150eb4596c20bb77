"""A qemu-system whose TCG plugin API reads registers: QEMU >= 10.0, fetched when the host's is older.

The plugin mechanism (:mod:`kpsdk.targets.live.tcg.plugin`) needs plugin API version 4
(``qemu_plugin_read_register`` and ``qemu_plugin_read_memory_vaddr``), which QEMU 10.0 has
and Debian 12's QEMU 7.2 does not.  Debian's ``bookworm-backports`` has QEMU 10.0, built for
Debian 12's libraries.  So: the host's ``qemu-system-ARCH`` when it is 10.0 or newer; else the
backports' ``qemu-system-<pkg>`` and ``qemu-system-data`` packages, fetched with kpsdk's private
apt configuration (:class:`kpsdk.debian.PrivateApt`: the machine's apt sources and
state are never touched; apt checks the suite's signed index and each ``.deb``'s SHA256) and
unpacked with ``dpkg-deb -x`` into kpsdk's private cache directory ``qemu/``, never installed.
The unpacked tree is recorded (every file's SHA256, the packages and the SHA256 Debian's index
gave for each ``.deb``) in kpsdk's private ``records`` directory, not in the tree, and checked
before every use without running anything (:mod:`kpsdk.cachetree`): a tree in a directory
someone else can change, or with a changed, added or truncated file, is unpacked again instead
of run.  QEMU's version is the package's, recorded with the tree.

The backports binary needs the shared libraries Debian 12's own package of it pulls in;
when one is missing, the error names it (from ``ldd``) and the package to install.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kpsdk.cache import private_dir, private_path
from kpsdk.cachetree import checked_file, checked_tree, record_tree
from kpsdk.errors import TargetError, ToolMissingError

#: the suite holding QEMU 10 for Debian 12, and the oldest QEMU whose plugin API serves kpsdk
BACKPORTS_SUITE = "bookworm-backports"
MIN_VERSION = (10, 0)
#: Debian's package holding each qemu-system binary kpsdk's plugin path can use
PACKAGES = {"qemu-system-x86_64": "qemu-system-x86", "qemu-system-i386": "qemu-system-x86",
            "qemu-system-arm": "qemu-system-arm", "qemu-system-riscv64": "qemu-system-riscv",
            "qemu-system-ppc64": "qemu-system-ppc", "qemu-system-aarch64": "qemu-system-arm"}
#: Debian 12's own package of a binary, where its name differs from QEMU 10's (trixie split
#: riscv out of qemu-system-misc): the package whose install brings the libraries it needs
BOOKWORM_PACKAGES = {"qemu-system-riscv": "qemu-system-misc"}
#: firmware a board loads by default that ``qemu-system-data`` only links to (a relative link
#: into another package's files): unpacked into the same tree, so the link resolves there
#: (riscv64's ``virt`` boots OpenSBI's ``fw_dynamic.bin``, from the ``opensbi`` package)
FIRMWARE = {"qemu-system-riscv64": ("opensbi",)}

_VERSION = re.compile(rb"QEMU emulator version ([0-9]+)\.([0-9]+)")
#: a Debian version of QEMU (``1:10.0.2+ds-2+deb13u1~bpo12+1``): the epoch, then major.minor
_PACKAGE_VERSION = re.compile(r"(?:[0-9]+:)?([0-9]+)\.([0-9]+)")


@dataclass(frozen=True)
class Qemu:
    """A qemu-system binary and the firmware directory to pass with ``-L`` (None: its own)."""

    binary: Path
    datadir: Path | None
    version: tuple[int, int]


def version_of(binary: str | os.PathLike[str]) -> tuple[int, int] | None:
    """``qemu-system-* --version``'s major and minor, None when it does not run or say."""
    try:
        proc = subprocess.run([os.fspath(binary), "--version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = _VERSION.search(proc.stdout)
    return (int(m.group(1)), int(m.group(2))) if m and proc.returncode == 0 else None


def find_qemu(binary: str, *, log: Callable[[str], None] = lambda _msg: None) -> Qemu:
    """A ``binary`` (``qemu-system-x86_64``) of QEMU >= 10.0: the host's, else the backports' one."""
    host = shutil.which(binary)
    if host is not None:
        version = version_of(host)
        if version is not None and version >= MIN_VERSION:
            return Qemu(Path(host), None, version)
    package = PACKAGES.get(binary)
    if package is None:
        raise TargetError(f"the TCG plugin mechanism needs QEMU >= {MIN_VERSION[0]}.{MIN_VERSION[1]}, and kpsdk "
                          f"knows no Debian package of {binary} for it (known: {', '.join(sorted(PACKAGES))})")
    return fetch_backports(binary, package, log=log)



def _package_version(version: str) -> tuple[int, int] | None:
    """QEMU's major and minor from its Debian package version, None when it does not say."""
    m = _PACKAGE_VERSION.match(version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def fetch_backports(binary: str, package: str, *, log: Callable[[str], None] = lambda _msg: None,
                    cache: Path | None = None) -> Qemu:
    """``binary`` from Debian 12's backports QEMU, unpacked once into kpsdk's cache and checked
    (:mod:`kpsdk.cachetree`) before it is returned, every time."""
    from kpsdk.arch import DebianPort
    from kpsdk.debian import PrivateApt

    base = private_path(cache) if cache is not None else private_dir("qemu")
    if base is None:
        where = cache if cache is not None else "kpsdk's cache directory qemu/"
        raise TargetError(f"{where} is not a directory only this user can change: kpsdk will not keep QEMU "
                          "there (set KPSDK_CACHE to a directory of yours)")
    for root in sorted(p for p in base.glob(f"{package}_*") if p.is_dir() and not p.is_symlink()):
        found = _checked(root, binary)
        if found is not None:
            return found
    if shutil.which("dpkg-deb") is None:
        raise ToolMissingError("dpkg-deb", "dpkg")
    apt = PrivateApt(DebianPort("amd64", BACKPORTS_SUITE, package), log=log)
    main, data = apt.show(package), apt.show("qemu-system-data")
    firmware = [apt.show(name) for name in FIRMWARE.get(binary, ())]
    version = _package_version(main.version)
    if version is None or version < MIN_VERSION:
        raise TargetError(f"{main.name} {main.version} in Debian {BACKPORTS_SUITE} is older than QEMU "
                          f"{MIN_VERSION[0]}.{MIN_VERSION[1]}")
    root = base / f"{package}_{main.version.replace(':', '_')}"
    with tempfile.TemporaryDirectory(dir=base, prefix=".unpack-") as tmp:
        work = Path(tmp)
        for pkg in (main, data, *firmware):
            log(f"fetching {pkg.name} {pkg.version} from Debian {BACKPORTS_SUITE}")
            deb = apt.download(pkg, work / "debs")
            proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(work / "root")], capture_output=True, text=True,
                                  timeout=600, check=False)
            if proc.returncode != 0:
                raise TargetError(f"dpkg-deb -x {deb.name} failed: {proc.stderr.strip()}")
        exe = work / "root" / "usr" / "bin" / binary
        if not exe.is_file():
            raise TargetError(f"{main.name} {main.version} has no usr/bin/{binary}")
        # the package just unpacked from a .deb of the SHA256 Debian's index gives, in kpsdk's private
        # directory: run once, to name the libraries this host lacks
        _check_runs(exe, main.version, package)
        if root.exists():
            shutil.rmtree(root)
        os.replace(work / "root", root)
    # every binary kpsdk knows in the package: one unpacked tree serves them all (x86's two)
    binaries = sorted(name for name, pkg in PACKAGES.items() if pkg == package and (root / "usr/bin" / name).is_file())
    origin = {pkg.name: f"{pkg.version} sha256:{pkg.sha256}" for pkg in (main, data, *firmware)}
    record_tree(root, origin, {"binaries": binaries, "version": list(version),
                               "firmware": [f"{pkg.name} {pkg.version}" for pkg in firmware]})
    found = _checked(root, binary)
    if found is None:
        raise TargetError(f"the QEMU unpacked into {root} does not match what was recorded")
    return found


def _checked(root: Path, binary: str) -> Qemu | None:
    """The unpacked QEMU at ``root`` if its tree is as recorded (:func:`kpsdk.cachetree.checked_tree`)
    and the record vouches for ``binary``; nothing is run to tell."""
    record = checked_tree(root)
    if record is None:
        return None
    meta = record.meta
    try:
        binaries = {str(b) for b in meta["binaries"]}
        firmware = {str(f).split()[0] for f in meta.get("firmware", [])}
        major, minor = (int(v) for v in meta["version"])
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    if binary not in binaries or not firmware.issuperset(FIRMWARE.get(binary, ())):
        return None  # unpacked before kpsdk knew the board's firmware: unpack again
    exe = checked_file(record, root, f"usr/bin/{binary}")
    if exe is None or (major, minor) < MIN_VERSION:
        return None
    return Qemu(exe, root / "usr" / "share" / "qemu", (major, minor))


def _check_runs(exe: Path, version: str, package: str) -> None:
    """Refuse a binary this host cannot run, naming the shared libraries it lacks."""
    if version_of(exe) is not None:
        return
    missing = []
    if shutil.which("ldd") is not None:
        proc = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=60, check=False)
        missing = [line.split()[0] for line in proc.stdout.splitlines() if "not found" in line]
    host = BOOKWORM_PACKAGES.get(package, package)
    raise TargetError(f"QEMU {version} from Debian {BACKPORTS_SUITE} does not run on this host"
                      + (f": missing {', '.join(missing)} (install Debian 12's {host}, which "
                         "brings them)" if missing else ""))
