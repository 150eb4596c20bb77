"""Sysroots made of Debian's packages of another architecture, for the tests that run Debian's
own programs on the embedded default (tests/test_debian_userland.py, tests/test_debian_world.py).

Packages come through kpsdk's private apt configuration (:mod:`kpsdk.debian`): downloaded,
checked against the index's SHA256, unpacked with ``dpkg-deb -x``, never installed (no
maintainer script runs).  A sysroot is made once per set of package versions in kpsdk's cache,
under a lock, and shared by every test and every test run that asks for the same packages.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from kpsdk.arch import DebianPort
from kpsdk.cache import cache_root
from kpsdk.debian import Package, PrivateApt
from kpsdk.errors import TargetError

#: a sysroot of older package versions is removed once it is this old (seconds): a test run
#: started before Debian's update may still be using it
STALE_AFTER = 3600

#: dependencies left out of a closure: what only the packages' maintainer scripts run (dpkg
#: unpacks nothing here: ``dpkg-deb -x`` does, and no script runs), and the info-page installer
NOT_RUN = frozenset({"dpkg", "install-info", "debconf"})
#: virtual packages the closure meets, and the package that provides each in both suites
#: (base-files pre-depends on ``awk``; Debian's default is mawk)
PROVIDERS = {"awk": "mawk"}


def _alternatives(field: str) -> Iterable[list[str]]:
    """The package names of each ``a (>= 1) | b:any`` clause of a Depends field, in order."""
    for clause in field.split(","):
        names = [m.group(0) for alt in clause.split("|") if (m := re.match(r"[a-z0-9][a-z0-9.+-]*", alt.strip()))]
        if names:
            yield names


def closure(apt: PrivateApt, wanted: Iterable[str]) -> list[Package]:
    """``wanted`` and everything their Depends and Pre-Depends need, as the suite's index says
    (the first alternative of each clause, a virtual package through :data:`PROVIDERS`), less
    :data:`NOT_RUN`; sorted by name."""
    found: dict[str, Package] = {}
    todo = list(wanted)
    while todo:  # breadth first: one apt-cache run for each level of dependencies
        level = [n for n in dict.fromkeys(PROVIDERS.get(n, n) for n in todo) if n not in found and n not in NOT_RUN]
        todo = []
        for name, pkg in apt.show_all(level).items():
            found[name] = pkg
        for name in level:
            for names in _alternatives(f"{found[name].pre_depends},{found[name].depends}"):
                if not any(PROVIDERS.get(n, n) in found for n in names):
                    todo.append(names[0])
    return [found[n] for n in sorted(found)]


def build(debian_arch: str, suite: str, packages: Iterable[str], kind: str,
          finish: Callable[[Path], None], *, resolve: bool = False) -> Path:
    """The sysroot of ``packages`` of ``debian_arch`` (with their dependencies when ``resolve``),
    finished by ``finish(root)``, made once per set of package versions in kpsdk's cache as
    ``userland/SUITE-ARCH-KIND-HASH``.  ``kind`` names the layout: a change to ``finish`` or to
    how the packages are chosen takes a new kind.

    One builder at a time (a lock file: pytest-xdist workers, two test runs, and the private
    apt configuration's package lists are shared).  Offline, the last sysroot made is used."""
    home = cache_root() / "userland"
    home.mkdir(parents=True, exist_ok=True)
    prefix = f"{suite}-{debian_arch}-{kind}-"
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        apt = PrivateApt(DebianPort(debian_arch, suite, "coreutils"))
        try:
            pkgs = closure(apt, packages) if resolve else list(apt.show_all(list(packages)).values())
        except TargetError:
            made = sorted(home.glob(f"{prefix}*/.complete"), key=lambda p: p.stat().st_mtime)
            if made:
                return made[-1].parent
            raise
        key = hashlib.sha256(" ".join(f"{p.name}={p.version}" for p in pkgs).encode()).hexdigest()[:16]
        dest = home / f"{prefix}{key}"
        if (dest / ".complete").exists():
            return dest
        with tempfile.TemporaryDirectory(dir=home, prefix=".build-") as tmp:
            root = Path(tmp) / "root"
            root.mkdir()
            for pkg in pkgs:
                deb = apt.download(pkg, Path(tmp))
                subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, capture_output=True)
            (root / ".packages").write_text("".join(f"{p.name} {p.version}\n" for p in pkgs))
            finish(root)
            (root / ".complete").touch()
            if dest.exists():  # an unfinished one (a build killed before its rename): made again
                shutil.rmtree(dest)
            root.rename(dest)
        for old in home.glob(f"{prefix}*"):
            if old != dest and time.time() - old.stat().st_mtime > STALE_AFTER:
                shutil.rmtree(old, ignore_errors=True)
        return dest


def merge_usr_and_relink(root: Path) -> None:
    """What dpkg and base-files would have done: Debian 13's merged /usr links (``/lib`` is
    ``usr/lib``), absolute links made relative (qemu's ``-L`` does not follow an absolute link
    inside its prefix; kpsdk does), and the files the programs read (the users)."""
    for top in ("bin", "sbin", "lib", "lib64"):
        if not os.path.lexists(root / top) and (root / "usr" / top).is_dir():
            os.symlink(f"usr/{top}", root / top)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            link = Path(dirpath) / name
            if link.is_symlink() and os.readlink(link).startswith("/"):
                target = root / os.readlink(link).lstrip("/")
                link.unlink()
                link.symlink_to(os.path.relpath(target, link.parent))
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\n")
