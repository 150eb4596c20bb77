"""The private-apt fixture's index reading, without the network: what a Packages record
must hold before anything is downloaded, and which version is the newest."""

from __future__ import annotations

from pathlib import Path

import pytest

from kpsdk import debian
from kpsdk.arch import DebianPort
from kpsdk.errors import TargetError

SHA = "ab" * 32
INDEX = f"""\
Package: busybox-static
Version: 1:1.36.1-9
Filename: pool/main/b/busybox/busybox-static_1.36.1-9_riscv64.deb
SHA256: {SHA}
Depends: libc6
 (continued)

Package: busybox-static
Version: 1:1.36.1-10
Filename: pool/main/b/busybox/busybox-static_1.36.1-10_riscv64.deb
SHA256: {SHA}

Package: evil
Version: 1.0
Filename: ../../etc/passwd.deb
SHA256: {SHA}

Package: short-hash
Version: 1.0
Filename: pool/main/s/short/short_1.0_riscv64.deb
SHA256: abcd
"""


def test_index_records_are_checked_before_use() -> None:
    packages = [p for f in debian._stanzas(INDEX) if (p := debian._package(f)) is not None]
    assert [p.version for p in packages] == ["1:1.36.1-9", "1:1.36.1-10"]  # the path and the hash are refused
    assert packages[0].depends == "libc6\n(continued)"
    newest = max(packages, key=lambda p: debian._version_key(p.version))
    assert newest.version == "1:1.36.1-10"  # 10 > 9 as numbers, not as text


def test_downloads_only_from_debians_registry(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="not on http://deb.debian.org/debian"):
        debian._download_url("http://example.com/debian/pool/x.deb", tmp_path / "x.deb")
    assert not list(tmp_path.iterdir())


def test_package_names_are_checked(tmp_path: Path) -> None:
    apt = debian.PrivateApt(DebianPort("riscv64", "trixie", "linux-image-riscv64"), root=tmp_path)
    for bad in ("-o", "a b", "pkg;rm", "Pkg", ""):
        with pytest.raises(TargetError, match="not a Debian package name"):
            apt.show(bad)
    assert not list(tmp_path.iterdir())  # refused before apt ran


def test_show_all_gives_each_packages_newest_version_and_names_a_missing_one(tmp_path: Path) -> None:
    """From the index read directly (apt's lists inconsistent): one lookup for many packages."""
    apt = debian.PrivateApt(DebianPort("riscv64", "trixie", "linux-image-riscv64"), root=tmp_path)
    apt._apt_ok = False  # as after a failed apt-get update
    index: dict[str, list[debian.Package]] = {}
    for fields in debian._stanzas(INDEX + f"\nPackage: libc6\nVersion: 2.41-12\nFilename: pool/main/g/glibc/"
                                           f"libc6_2.41-12_riscv64.deb\nSHA256: {SHA}\nPre-Depends: libgcc-s1\n"):
        if (pkg := debian._package(fields)) is not None:
            index.setdefault(pkg.name, []).append(pkg)
    apt._index = index
    found = apt.show_all(["libc6", "busybox-static", "libc6"])
    assert list(found) == ["libc6", "busybox-static"]
    assert found["busybox-static"].version == "1:1.36.1-10"
    assert found["libc6"].pre_depends == "libgcc-s1"
    with pytest.raises(TargetError, match="evil is not in Debian trixie"):
        apt.show_all(["libc6", "evil"])


def test_a_sysroots_closure_follows_depends_and_pre_depends() -> None:
    """tests/debian_roots.py's closure: the first alternative of each clause, ``awk`` as mawk, the
    packages only maintainer scripts run left out, one lookup per level of dependencies."""
    from tests.debian_roots import closure

    def pkg(name: str, depends: str = "", pre: str = "") -> debian.Package:
        return debian.Package(name, "1", f"pool/main/{name}.deb", SHA, depends, pre)

    known = {p.name: p for p in (pkg("bash", "base-files (>= 2.1.12), debianutils (>= 5.6-0.1)", "libc6, libtinfo6"),
                                 pkg("base-files", pre="awk"), pkg("mawk", pre="libc6"),
                                 pkg("debianutils", pre="libc6"), pkg("libc6", "libgcc-s1"), pkg("libgcc-s1"),
                                 pkg("libtinfo6", "libc6 (>= 2.34)"),
                                 pkg("readline-common", "dpkg (>= 1.15.4) | install-info"))}
    asked: list[list[str]] = []

    class Apt:
        def show_all(self, names: list[str]) -> dict[str, debian.Package]:
            asked.append(list(names))
            return {n: known[n] for n in names}

    found = closure(Apt(), ["bash", "readline-common"])  # type: ignore[arg-type]
    assert [p.name for p in found] == ["base-files", "bash", "debianutils", "libc6", "libgcc-s1", "libtinfo6",
                                       "mawk", "readline-common"]
    assert asked == [["bash", "readline-common"], ["libc6", "libtinfo6", "base-files", "debianutils"],
                     ["libgcc-s1", "mawk"]]
