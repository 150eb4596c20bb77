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
