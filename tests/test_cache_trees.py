"""Cache entries kpsdk runs or boots (issue 36, item 1): Debian's QEMU 10, kernels and busybox
unpacked into the cache are used only from a directory no one else can change, as recorded in
kpsdk's private ``records`` directory (not beside them), and nothing is run to check them.

Each test plants what an attacker with write access to the cache could: a tree with a hash
file of its own, a loosened mode, a changed byte, an extra file.  The planted "binaries" are
scripts that leave a marker file when run, so a test also sees whether anything ran them.
"""

from __future__ import annotations

import gzip
import os
import stat
from pathlib import Path

import pytest

from kpsdk.cache import private_dir
from kpsdk.cachetree import checked_tree, record_tree
from kpsdk.debian import PrivateApt, file_sha256
from kpsdk.errors import TargetError
from kpsdk.fixtures import kernel
from kpsdk.targets.live import qemu10


def _script(path: Path, marker: Path) -> Path:
    """An executable that leaves ``marker`` when run and says it is QEMU 10."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch '{marker}'\necho 'QEMU emulator version 10.0.2'\n")
    path.chmod(0o755)
    return path


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Debian's registry cannot be reached: only the cache can answer."""
    def refuse(self: PrivateApt, name: str) -> None:
        raise TargetError(f"{name}: offline (test)")

    monkeypatch.setattr(PrivateApt, "show", refuse)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("KPSDK_CACHE", str(root))
    return root


def _qemu_tree(base: Path, marker: Path) -> Path:
    tree = base / "qemu-system-x86_1_10.0.2+ds-2~bpo12+1"
    exe = _script(tree / "usr" / "bin" / "qemu-system-x86_64", marker)
    (tree / "usr" / "share" / "qemu").mkdir(parents=True)
    (tree / "usr" / "share" / "qemu" / "bios-256k.bin").write_bytes(b"firmware")
    # what kpsdk wrote beside the binary before: a hash the planter writes too
    (tree / "manifest.json").write_text(
        '{"package": "qemu-system-x86", "version": "1:10.0.2", "binary": "qemu-system-x86_64", "firmware": [], '
        f'"sha256": {{"qemu-system-x86_64": "{file_sha256(exe)}"}}}}')
    return tree


def test_a_planted_qemu_tree_is_neither_used_nor_run(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A tree kpsdk did not record (its own manifest.json vouching for its binary) is never
    returned, and nothing in it runs: kpsdk goes to fetch QEMU again (here: offline)."""
    marker = tmp_path / "ran"
    _qemu_tree(cache / "qemu", marker)
    _offline(monkeypatch)
    with pytest.raises(TargetError, match="offline"):
        qemu10.fetch_backports("qemu-system-x86_64", "qemu-system-x86")
    assert not marker.exists(), "the planted binary was run"


def _recorded_qemu(cache: Path, marker: Path) -> Path:
    base = private_dir("qemu")
    assert base is not None
    tree = _qemu_tree(base, marker)
    record_tree(tree, {"qemu-system-x86": "1:10.0.2 sha256:" + "0" * 64},
                {"binaries": ["qemu-system-x86_64"], "version": [10, 0], "firmware": []})
    return tree


def test_a_recorded_qemu_tree_is_used_without_running_it(cache: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    tree = _recorded_qemu(cache, marker)
    found = qemu10.fetch_backports("qemu-system-x86_64", "qemu-system-x86")
    assert found.binary == tree / "usr" / "bin" / "qemu-system-x86_64" and found.version == (10, 0)
    assert found.datadir == tree / "usr" / "share" / "qemu"
    assert not marker.exists(), "checking the tree ran its binary"
    assert qemu10._checked(tree, "qemu-system-i386") is None  # the record vouches for x86_64 only


@pytest.mark.parametrize("damage", ["binary", "firmware", "extra file", "group-writable dir", "world-writable file",
                                    "link", "record in the tree", "tree dir unsafe", "cache dir unsafe"])
def test_a_changed_qemu_tree_is_refused(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        damage: str) -> None:
    marker = tmp_path / "ran"
    tree = _recorded_qemu(cache, marker)
    exe = tree / "usr" / "bin" / "qemu-system-x86_64"
    if damage == "binary":
        exe.write_text("#!/bin/sh\ntouch /tmp/x\n")
    elif damage == "firmware":
        (tree / "usr" / "share" / "qemu" / "bios-256k.bin").write_bytes(b"evil")
    elif damage == "extra file":
        (tree / "usr" / "share" / "qemu" / "kvmvapic.bin").write_bytes(b"planted")
    elif damage == "group-writable dir":
        (tree / "usr" / "bin").chmod(0o775)
    elif damage == "world-writable file":
        exe.chmod(0o757)
    elif damage == "link":
        exe.unlink()
        exe.symlink_to("/bin/true")
    elif damage == "record in the tree":  # the planter rewrites the hash kept beside the binary: no use
        exe.write_text("#!/bin/sh\necho changed\n")
        (tree / "manifest.json").write_text(f'{{"sha256": {{"qemu-system-x86_64": "{file_sha256(exe)}"}}}}')
    elif damage == "tree dir unsafe":
        tree.chmod(0o777)
    elif damage == "cache dir unsafe":
        cache.chmod(0o777)  # anyone may rename qemu/ away and put their own in its place
    assert qemu10._checked(tree, "qemu-system-x86_64") is None
    _offline(monkeypatch)
    with pytest.raises(TargetError):
        qemu10.fetch_backports("qemu-system-x86_64", "qemu-system-x86")
    assert not marker.exists()


def test_a_planted_busybox_is_not_used(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    planted = _script(cache / "busybox" / "1:1.35.0-4_armhf" / "bin" / "busybox", marker)
    _offline(monkeypatch)
    with pytest.raises(TargetError, match="offline"):
        kernel.fetch_busybox("arm")
    # the same tree, recorded by kpsdk when it unpacked it, is used
    record_tree(planted.parent.parent, {"busybox-static": "1:1.35.0-4 sha256:" + "0" * 64})
    assert kernel.fetch_busybox("arm") == planted
    planted.write_text("#!/bin/sh\necho swapped\n")
    with pytest.raises(TargetError, match="offline"):
        kernel.fetch_busybox("arm")
    assert not marker.exists()


def test_a_planted_kernel_is_not_booted(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, a kernel tree in the cache is returned only as kpsdk recorded it."""
    image = cache / "kernel" / "linux-image-6.1.0-50-armmp_6.1.176-1_armhf" / "boot" / "vmlinuz-6.1.0-50-armmp"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"planted kernel")
    _offline(monkeypatch)
    with pytest.raises(TargetError, match="offline"):
        kernel.fetch_arch_kernel("arm")
    record_tree(image.parent.parent, {"linux-image-6.1.0-50-armmp": "6.1.176-1 sha256:" + "0" * 64})
    assert kernel.fetch_arch_kernel("arm") == image
    image.write_bytes(b"swapped kernel")
    with pytest.raises(TargetError, match="offline"):
        kernel.fetch_arch_kernel("arm")


def test_an_amd64_kernel_in_the_cache_is_returned_only_as_recorded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    cache = tmp_path / "kernels"
    cache.mkdir(mode=0o700)
    image = cache / "linux-image-old-amd64-unsigned_1.0" / "boot" / "vmlinuz-old"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"old kernel")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no apt: only the cache can answer
    with pytest.raises(TargetError, match="apt-cache not found"):
        kernel.fetch_kernel(cache)
    record_tree(image.parent.parent, {"linux-image-old-amd64-unsigned": "1.0 sha256:" + "0" * 64})
    assert kernel.fetch_kernel(cache) == image


def test_an_unsafe_cache_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache under a directory others may write (no sticky bit) could be swapped whole."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("KPSDK_CACHE", str(shared / "kpsdk"))
    with pytest.warns(UserWarning, match="group/world-writable"):
        assert private_dir("kernel") is None
    with pytest.raises(TargetError, match="only this user can change"):
        kernel.fetch_arch_kernel("arm")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: only an entry's owner can rename it
    monkeypatch.setenv("KPSDK_CACHE", str(sticky / "kpsdk"))
    assert private_dir("kernel") == sticky / "kpsdk" / "kernel"


def test_the_initramfs_is_not_written_through_a_planted_link(tmp_path: Path) -> None:
    if not Path("/bin/busybox").is_file():
        pytest.skip("busybox not found: install the Debian package busybox-static")
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "initramfs" / "kpsdk-x86_64.cpio.gz"
    out.parent.mkdir()
    out.symlink_to(victim)
    kernel.build_initramfs(out, "echo hi")
    assert victim.read_text() == "precious"
    assert stat.S_ISREG(os.lstat(out).st_mode) and b"echo hi" in gzip.decompress(out.read_bytes())


def test_a_record_names_the_package_and_the_index_hash(cache: Path) -> None:
    tree = cache / "busybox" / "v_armhf"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "busybox").write_bytes(b"x")
    sha = "ab" * 32
    record_tree(tree, {"busybox-static": f"v sha256:{sha}"})
    record = checked_tree(tree)
    assert record is not None and record.origin == {"busybox-static": f"v sha256:{sha}"}
    assert record.files == {"bin": "dir", "bin/busybox": "sha256:" + file_sha256(tree / "bin" / "busybox")}
    assert not list(tree.rglob("*.json"))  # the record is not in the tree
