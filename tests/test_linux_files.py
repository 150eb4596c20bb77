"""The writable file system of the Linux layer on Unicorn, against ground truth.

tests/programs/files.c calls every file call (create, write, read back, rename, unlink, mkdir,
rmdir, truncate, chmod, chown, utimensat, symlink, link, mknod, O_TMPFILE, getdents, mmap,
the devices...) and prints each result or errno name.  It runs natively (x86_64, in a fresh
temporary directory) or under qemu-user (every other arch), and on kpsdk in the session's
in-memory /tmp: the lines must be the same.  Debian's own programs (the host's x86_64 ones,
with the sysroot "/") then work in the overlay as natively in a directory of the host, and
leave the host untouched; a ``"rw"`` bind writes through and cannot be escaped.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

import kpsdk
from kpsdk.targets.unicorn.linux.files import Sysroot, _GuestErrno
from kpsdk.targets.unicorn.linux.inodes import HostNode, MemDir, MemFile, MemLink
from tests.conftest import QEMU, require_tool
from tests.test_linux_programs import COMPILERS, LINUX_ARCHS

SOURCE = Path(__file__).parent / "programs" / "files.c"
X86_64_HOST = os.uname().machine == "x86_64"


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``build(arch)``: files.c, statically linked for ``arch`` (built once per module)."""
    out = tmp_path_factory.mktemp("files")
    built: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in built:
            cc, package = COMPILERS[arch]
            require_tool(cc, package)
            exe = out / f"files-{arch}"
            subprocess.run([cc, "-static", "-O1", "-o", str(exe), str(SOURCE)], check=True, capture_output=True)
            built[arch] = exe
        return built[arch]

    return make


def ground_truth(arch: str, exe: Path, work: Path) -> tuple[str, int]:
    """files.c's output natively (x86_64 on an x86_64 host) or under qemu-user, in ``work``, in a
    session of its own (no controlling terminal: /dev/tty is ENXIO, as for kpsdk's program)."""
    cmd = [str(exe), str(work)]
    if arch != "x86_64" or not X86_64_HOST:
        cmd.insert(0, require_tool(QEMU[arch], "qemu-user"))
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=120, check=False,
                          start_new_session=True, env={})
    return proc.stdout.decode(), proc.returncode


@pytest.mark.parametrize("arch", LINUX_ARCHS)
def test_every_file_call_gives_what_linux_gives(build: Callable[[str], Path], tmp_path: Path, arch: str) -> None:
    exe = build(arch)
    expected = ground_truth(arch, exe, tmp_path)
    assert expected[1] == 0 and "== removing the tree" in expected[0], expected
    s = kpsdk.open(f"elf:{exe}", args=["/tmp"])
    try:
        status = s.run(timeout=300)
        assert (s.console, status) == expected
        assert s.syscalls_unimplemented == {}
    finally:
        s.close()


# -- the overlay from Python: what a run left in it ---------------------------------------------------


def overlay(s: kpsdk.Session) -> Sysroot:
    linux = s.target.linux  # type: ignore[attr-defined]
    assert linux is not None
    root = linux.root
    assert isinstance(root, Sysroot)
    return root


def seed(fs: Sysroot, host: Path, guest: str) -> None:
    """Copy host tree ``host`` into the overlay at ``guest`` (made), modes and times kept: the
    same start a native run gets in a directory of the host."""
    def times(path: str, st: os.stat_result) -> None:
        fs.utimes(fs.find(path, "/", follow=False), st.st_atime_ns, st.st_mtime_ns, explicit=True)

    fs.mkdir(fs.find(guest, "/", follow=False), 0o755)
    dirs = []
    for dirpath, dirnames, filenames in os.walk(host):
        rel = os.path.relpath(dirpath, host)
        where = guest if rel == "." else f"{guest}/{rel}"
        for name in sorted(dirnames) + sorted(filenames):
            src = Path(dirpath) / name
            st = os.lstat(src)
            ref = fs.find(f"{where}/{name}", "/", follow=False)
            if stat.S_ISLNK(st.st_mode):
                fs.symlink(ref, os.readlink(src))
                times(f"{where}/{name}", st)
                continue
            if stat.S_ISDIR(st.st_mode):
                fs.mkdir(ref, stat.S_IMODE(st.st_mode))
                dirs.append((f"{where}/{name}", st))
                continue
            node = fs.create(ref, stat.S_IMODE(st.st_mode))
            assert isinstance(node, MemFile)
            node.data[:] = src.read_bytes()
            times(f"{where}/{name}", st)
    for path, st in reversed(dirs):
        times(path, st)
    times(guest, os.stat(host))


def dump(fs: Sysroot, guest: str) -> dict[str, tuple[str, int, bytes]]:
    """The tree at ``guest`` in the overlay: relative path -> (kind, mode, bytes or link target)."""
    out: dict[str, tuple[str, int, bytes]] = {}

    def walk(path: str, rel: str) -> None:
        node = fs.find(path, "/", follow=False).node
        assert node is not None
        mode = node.mode
        if isinstance(node, MemDir | HostNode) and stat.S_ISDIR(mode):
            if rel:
                out[rel] = ("dir", stat.S_IMODE(mode), b"")
            for name, _ino, _kind in fs.listing(node):
                walk(f"{path}/{name}", f"{rel}/{name}" if rel else name)
        elif isinstance(node, MemLink):
            out[rel] = ("link", 0, os.fsencode(node.target))
        elif isinstance(node, MemFile):
            out[rel] = ("file", stat.S_IMODE(mode), bytes(node.data))
        else:
            out[rel] = ("other", stat.S_IMODE(mode), b"")

    walk(guest, "")
    return out


def host_dump(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """The same of a host tree (what the native run left)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", 0, os.fsencode(os.readlink(p)))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
            else:
                out[rel] = ("other", stat.S_IMODE(st.st_mode), b"")
    return out


def fingerprint(root: Path) -> str:
    """Every name, mode, size, time and byte under ``root``: what "unchanged" means."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st = os.lstat(p)
            h.update(f"{p}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}\n".encode())
            if stat.S_ISREG(st.st_mode):
                h.update(p.read_bytes())
    return h.hexdigest()


def make_input(root: Path) -> Path:
    """The tree each Debian program starts from: text files, a subdirectory, a link, a big file."""
    (root / "tree" / "sub" / "deeper").mkdir(parents=True)
    (root / "tree" / "a.txt").write_text("alpha\nbeta\ngamma\n")
    (root / "tree" / "sub" / "b.txt").write_text("one\ntwo\nthree\n" * 50)
    (root / "tree" / "sub" / "deeper" / "c.bin").write_bytes(bytes(range(256)) * 40)
    (root / "tree" / "link").symlink_to("a.txt")
    (root / "old.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    new = [f"line {i}\n" for i in range(40)]
    new[10], new[30] = "changed ten\n", "changed thirty\n"
    (root / "new.txt").write_text("".join(new))
    diff = subprocess.run(["diff", "-u", "--label", "old.txt", "--label", "new.txt", "old.txt", "new.txt"], cwd=root,
                          capture_output=True, text=True)
    (root / "fix.patch").write_text(diff.stdout)
    (root / "new.txt").unlink()
    (root / "big.txt").write_bytes(b"".join(b"%07d %s\n" % ((i * 7919) % 200003, b"x" * (i % 23))
                                            for i in range(160_000)))  # 3 MB: sort -S 1M merges temp files
    for p in sorted([root, *root.rglob("*")], key=lambda p: -len(p.parts)):  # a directory after its entries
        os.utime(p, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000), follow_symlinks=False)
    return root


#: Debian's programs (the host's, x86_64) and what they do in the working directory
DEBIAN = {
    "sort-temp-files": ["/usr/bin/sort", "-S", "1M", "-T", ".", "big.txt"],  # merges through temp files
    "sort-tmp": ["/usr/bin/sort", "-S", "1M", "-o", "sorted.txt", "big.txt"],  # temp files in /tmp
    "patch": ["/usr/bin/patch", "-o", "-", "old.txt", "fix.patch"],
    "patch-in-place": ["/usr/bin/patch", "-b", "old.txt", "fix.patch"],
    "cp": ["/usr/bin/cp", "-a", "tree", "copy"],
    "cp-file": ["/usr/bin/cp", "old.txt", "tree/sub/copied.txt"],
    "mv": ["/usr/bin/mv", "tree", "moved"],
    "mv-file": ["/usr/bin/mv", "-v", "old.txt", "tree/sub/deeper/"],
    "rm": ["/usr/bin/rm", "-r", "tree"],  # not -v: it would print in the directory's order, the host's its own
    "mkdir": ["/usr/bin/mkdir", "-pv", "x/y/z", "tree/sub/new"],
    "ln": ["/usr/bin/ln", "-sv", "../old.txt", "tree/sub/to-old"],
    "ln-hard": ["/usr/bin/ln", "old.txt", "hard.txt"],
    "tar": ["/usr/bin/tar", "--sort=name", "--owner=0", "--group=0", "-cvf", "out.tar", "tree"],
    "tar-x": ["/usr/bin/tar", "-xvf", "in.tar"],
    "split": ["/usr/bin/split", "-b", "100000", "-d", "big.txt", "part-"],
    "touch-chmod": ["/usr/bin/install", "-m", "0640", "old.txt", "tree/installed.txt"],
}


@pytest.mark.parametrize("name", DEBIAN)
def test_debians_programs_work_in_the_overlay_as_natively(name: str, tmp_path: Path) -> None:
    """Each program once natively in a directory of the host and once on kpsdk (sysroot "/")
    in the overlay's /tmp with the same start: the same output and status, the same tree after
    (every file, link and mode), and nothing written on the host."""
    argv = DEBIAN[name]
    if not X86_64_HOST or not Path(argv[0]).exists():
        pytest.skip(f"this compares the x86_64 host's own {argv[0]}")
    native_dir = make_input(tmp_path / "native")
    seed_dir = make_input(tmp_path / "seed")
    if name == "tar-x":
        for d in (native_dir, seed_dir):
            subprocess.run(["tar", "--sort=name", "-cf", "in.tar", "tree"], cwd=d, check=True)
            os.utime(d / "in.tar", ns=(1_600_000_000_000_000_000,) * 2)
            subprocess.run(["rm", "-r", "tree"], cwd=d, check=True)
            os.utime(d, ns=(1_600_000_000_000_000_000,) * 2)
    env = {"LC_ALL": "C", "TMPDIR": "/tmp"}
    native = subprocess.run(argv, cwd=native_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120,
                            check=False, env=env)  # one pipe: the console has both, in the order written
    before = fingerprint(seed_dir)
    host_tmp = {n for n in os.listdir("/tmp") if n.startswith("sort")}
    s = kpsdk.open(f"elf:{argv[0]}", args=argv[1:], env=env, sysroot="/", cwd="/tmp/w",
                   console_limit=64 << 20)  # sort prints big.txt whole: s.console keeps all of it
    try:
        fs = overlay(s)
        seed(fs, seed_dir, "/tmp/w")
        status = s.run(timeout=600)
        assert (s.console_bytes, status) == (native.stdout, native.returncode)
        after = dump(fs, "/tmp/w")
        assert after == host_dump(native_dir)
        assert set(s.syscalls_unimplemented) <= {"socket"}  # GNU tar asks for one (rmt), carries on without
    finally:
        s.close()
    if name == "tar":  # what tar made, listed by tar (a second session: its input, the archive's bytes)
        listed = subprocess.run(["/usr/bin/tar", "-tvf", "out.tar"], cwd=native_dir, capture_output=True, env=env)
        t = kpsdk.open("elf:/usr/bin/tar", args=["-tvf", "-"], env=env, sysroot="/", stdin=after["out.tar"][2])
        try:
            assert (t.run(timeout=120), t.console_bytes) == (0, listed.stdout)
        finally:
            t.close()
    if name == "split":  # the parts, put back together, are the input
        parts = sorted(k for k in after if k.startswith("part-"))
        assert len(parts) > 20 and b"".join(after[k][2] for k in parts) == after["big.txt"][2]
    assert fingerprint(seed_dir) == before  # the host's tree is untouched
    assert not Path("/tmp/w").exists()
    assert {n for n in os.listdir("/tmp") if n.startswith("sort")} <= host_tmp  # sort's temp files: the guest's


# -- binds ---------------------------------------------------------------------------------------------


def without_unnamed(out: str) -> str:
    """files.c's output less its O_TMPFILE part."""
    head, _, rest = out.partition("== unnamed files\n")
    return head + rest[rest.index("== descriptors as directories"):]


def test_a_rw_bind_writes_through_and_a_ro_bind_is_read_only(build: Callable[[str], Path], tmp_path: Path) -> None:
    """files.c run in a ``"rw"`` bind: its files appear on the host, exactly as its native run
    leaves them (but a device node, which a bind never makes: EPERM); the same run in a ``"ro"``
    bind fails at its first mkdir with EROFS."""
    exe = build("x86_64") if X86_64_HOST else pytest.skip("runs the x86_64 program natively")
    native_dir, bound = tmp_path / "native", tmp_path / "bound"
    native_dir.mkdir()
    bound.mkdir()
    expected = ground_truth("x86_64", exe, native_dir)
    s = kpsdk.open(f"elf:{exe}", args=["/out"], bind=[(bound, "/out", "rw")])
    try:
        assert s.run(timeout=300) == 0
        # the differences: no device node is ever made on the host through a bind, root or not,
        # and O_TMPFILE there is EOPNOTSUPP (glibc's tmpfile() then makes and removes a name)
        assert "open(\".\", O_TMPFILE | O_RDWR, 0600) -> -1 EOPNOTSUPP\n" in s.console
        assert without_unnamed(s.console) == without_unnamed(
            expected[0].replace("mknod chr -> 0\n", "mknod chr -> EPERM\n").replace(" c:2 ", " ")).replace(
            " named:8 ", " ")
    finally:
        s.close()
    native_tree = {k: v for k, v in host_dump(native_dir).items() if v[0] != "other" and k != "area/named"}
    assert {k: v for k, v in host_dump(bound).items() if v[0] != "other"} == native_tree
    ro = tmp_path / "ro"
    ro.mkdir()
    s = kpsdk.open(f"elf:{exe}", args=["/in"], bind=[(ro, "/in", "ro")])
    try:
        s.run(timeout=60)
        assert s.console.startswith('mkdir("area", 0755) -> -1 EROFS\n')
    finally:
        s.close()
    assert list(ro.iterdir()) == []


def test_a_bind_cannot_be_escaped(tmp_path: Path) -> None:
    """Inside a ``"rw"`` bind, ``..`` climbs the guest's tree (not the host's), a link to an
    absolute path or out of the bind is followed in the guest's tree, and a link the host
    swaps in is never followed by the host: nothing outside the bound directory is read or
    written."""
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "file").write_text("host secret\n")
    bound = tmp_path / "bound"
    bound.mkdir()
    (bound / "up").symlink_to("../secret")
    (bound / "abs").symlink_to(str(outside))
    (bound / "sub").mkdir()
    fs = Sysroot(None, binds=[(bound, "/data", True)])
    try:
        for path in ("/data/up/file", "/data/abs/file", "/data/../secret/file", "/data/sub/../../secret/file",
                     f"/data/abs/{outside.name}/file"):
            with pytest.raises(_GuestErrno) as info:
                fs.resolve(path, "/")
            assert info.value.errno == errno.ENOENT, path
        with pytest.raises(_GuestErrno) as info:  # the link's target, in the guest's tree: /secret, not there
            fs.find("/data/up/new", "/")
        assert info.value.errno == errno.ENOENT
        # the host swaps a directory of the bind for a link out of it after the guest's walk
        ref = fs.find("/data/sub/made", "/")
        os.rmdir(bound / "sub")
        (bound / "sub").symlink_to(str(outside))
        with pytest.raises(_GuestErrno) as info:
            fs.create(ref, 0o644)
        assert info.value.errno in (errno.ENOTDIR, errno.ELOOP)
        assert sorted(os.listdir(outside)) == ["file"]
        fs.create(fs.find("/data/inside", "/"), 0o644)
        assert (bound / "inside").exists()
        with pytest.raises(_GuestErrno) as info:
            fs.rename(fs.find("/data/inside", "/", follow=False), fs.find("/tmp/x", "/", follow=False))
        assert info.value.errno == errno.EXDEV
        with pytest.raises(_GuestErrno) as info:
            fs.rmdir(fs.find("/data", "/", follow=False))
        assert info.value.errno == errno.EBUSY
    finally:
        fs.close()


@pytest.mark.parametrize("bind, message", [
    ("x", "bind must be a list"),
    ([("a", "/x")], "a bind is"),
    ([(".", "/x", "rx")], "\"ro\" or \"rw\""),
    ([(".", "x", "ro")], "absolute path"),
    ([(".", "/x/../y", "ro")], "absolute path"),
    ([("/nonexistent/dir", "/x", "ro")], "not a directory"),
    ([(".", "/x", "ro"), (".", "/x/y", "rw")], "overlap"),
])
def test_bad_binds_are_argument_errors(bind: object, message: str) -> None:
    with pytest.raises(kpsdk.ArgumentError, match=message):
        kpsdk.open("elf:/bin/true", bind=bind)  # type: ignore[arg-type]


def test_kpsdks_devices_and_tmp_are_there_whatever_the_sysroot(tmp_path: Path) -> None:
    fs = Sysroot(tmp_path, own_pid=1000)
    for path, mode in (("/dev/null", stat.S_IFCHR | 0o666), ("/dev/zero", stat.S_IFCHR | 0o666),
                       ("/dev/full", stat.S_IFCHR | 0o666), ("/dev/urandom", stat.S_IFCHR | 0o666),
                       ("/dev/random", stat.S_IFCHR | 0o666), ("/dev/tty", stat.S_IFCHR | 0o666),
                       ("/tmp", stat.S_IFDIR | 0o1777), ("/dev/shm", stat.S_IFDIR | 0o1777)):
        node = fs.find(path, "/").node
        assert node is not None and node.mode == mode, path
    assert fs.walk("/dev/stdin", "/") == ["proc", "1000", "fd", "0"]
    assert fs.walk("/dev/fd/2", "/") == ["proc", "1000", "fd", "2"]
    assert [name for name, _, _ in fs.listing(fs.top)] == ["dev", "proc", "tmp"]
    assert list(tmp_path.iterdir()) == []  # nothing was made on the host


# -- fuzzing: random paths and flags never raise and never reach the host --------------------------------

#: names the fuzzer builds paths of: the sysroot's, the bind's, links out of it, the special ones
NAMES = ["a", "b", "f", "dir", "..", ".", "", "tmp", "data", "up", "abs", "proc", "self", "fd", "0", "3", "dev",
         "null", "tty", "stdin", "loop", "n" * 256, "sub", "new", "\u00b2", "007", "thread-self", "task"]


def test_random_paths_and_flags_never_raise_and_never_reach_the_host(build: Callable[[str], Path],
                                                                     tmp_path: Path) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as hs

    root, bound, outside = tmp_path / "root", tmp_path / "bound", tmp_path / "outside"
    for d in (root / "dir" / "sub", bound / "sub", outside):
        d.mkdir(parents=True)
    (root / "f").write_text("sysroot file\n")
    (root / "loop").symlink_to("loop")
    (root / "abs").symlink_to(str(outside))
    (bound / "up").symlink_to("../../outside")
    (bound / "abs").symlink_to(str(outside))
    (outside / "secret").write_text("host\n")
    frozen = fingerprint(root), fingerprint(outside)
    s = kpsdk.open(f"elf:{build('x86_64')}", sysroot=root, bind=[(bound, "/data", "rw")])
    linux = s.target.linux  # type: ignore[attr-defined]
    calls = s.target.arch.syscalls.calls
    scratch = linux.mem.mmap(0, 0x2000, 3, 0x22)

    def path(parts: list[str], absolute: bool) -> int:
        raw = ("/" if absolute else "") + "/".join(parts)
        data = raw.encode()[:0x1000 - 1] + b"\0"
        linux.uc.mem_write(scratch, data)
        return scratch

    def other(parts: list[str]) -> int:
        data = ("/" + "/".join(parts)).encode()[:0x1000 - 1] + b"\0"
        linux.uc.mem_write(scratch + 0x1000, data)
        return scratch + 0x1000

    parts = hs.lists(hs.sampled_from(NAMES), min_size=0, max_size=8)
    flags = hs.integers(min_value=0, max_value=0o77777777)

    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
    @given(op=hs.sampled_from(["openat", "mkdirat", "renameat2", "unlinkat", "symlinkat", "linkat", "fchmodat",
                               "truncate", "newfstatat", "getdents64"]),
           a=parts, b=parts, absolute=hs.booleans(), flag=flags, mode=hs.integers(0, 0o7777))
    def one(op: str, a: list[str], b: list[str], absolute: bool, flag: int, mode: int) -> None:
        at = -100 & 0xFFFFFFFFFFFFFFFF  # AT_FDCWD
        p = path(a, absolute)
        args = {
            "openat": (at, p, flag & ~0o20000000 if flag & 0o3 == 0 else flag, mode),  # never a FIFO's wait
            "mkdirat": (at, p, mode),
            "renameat2": (at, p, at, other(b), flag & 7),
            "unlinkat": (at, p, flag & 0x200),
            "symlinkat": (other(b), at, p),
            "linkat": (at, p, at, other(b), flag & 0x1400),
            "fchmodat": (at, p, mode),
            "truncate": (p, mode),
            "newfstatat": (at, p, scratch + 0x1800, flag & 0x1100),
            "getdents64": (3, scratch + 0x1800, 0x400),
        }[op]
        result = linux.syscall(calls[op], (*args, 0, 0, 0)[:6])
        assert isinstance(result, int)
        if op == "openat" and result >= 3:
            linux.syscall(calls["close"], (result, 0, 0, 0, 0, 0))

    try:
        one()
    finally:
        s.close()
    assert (fingerprint(root), fingerprint(outside)) == frozen  # the sysroot and what is outside the bind
    assert {p.name for p in tmp_path.iterdir()} == {"root", "bound", "outside"}


def test_a_user_other_than_root_meets_the_permission_bits(tmp_path: Path) -> None:
    """The checks root skips, as Linux makes them for an unprivileged user: no file made in a
    directory it may not write (the sysroot's, root's), the sticky /tmp keeps others' files,
    chmod and explicit times are the owner's, chown to someone else is EPERM."""
    from kpsdk.targets.unicorn.linux.inodes import Cred

    (tmp_path / "etc").mkdir()
    for d in (tmp_path, tmp_path / "etc"):
        os.chmod(d, 0o755)  # the sysroot's top: pytest makes it 0700, which no one else may search
    fs = Sysroot(tmp_path, cred=Cred(0, 0, ()))
    root_file = fs.create(fs.find("/tmp/roots", "/"), 0o600)
    assert isinstance(root_file, MemFile)
    fs.cred = Cred(1000, 1000, ())
    codes = {}
    for what, call in {
        "create in root's directory": lambda: fs.create(fs.find("/etc/new", "/"), 0o644),
        "mkdir in root's directory": lambda: fs.mkdir(fs.find("/etc/new", "/"), 0o755),
        "remove root's file from the sticky /tmp": lambda: fs.unlink(fs.find("/tmp/roots", "/", follow=False)),
        "chmod root's file": lambda: fs.chmod(fs.find("/tmp/roots", "/"), 0o666),
        "chown to another": lambda: fs.chown(fs.find("/tmp/mine", "/"), 0, -1),
        "times of root's file": lambda: fs.utimes(fs.find("/tmp/roots", "/"), 1, 1, explicit=True),
        "hard link to root's unreadable file": lambda: fs.link(fs.find("/tmp/roots", "/"),
                                                              fs.find("/tmp/alias", "/")),
    }.items():
        if what == "chown to another":
            fs.create(fs.find("/tmp/mine", "/"), 0o644)
        with pytest.raises(_GuestErrno) as info:
            call()
        codes[what] = errno.errorcode[info.value.errno]
    assert codes == {"create in root's directory": "EACCES", "mkdir in root's directory": "EACCES",
                     "remove root's file from the sticky /tmp": "EPERM", "chmod root's file": "EPERM",
                     "chown to another": "EPERM", "times of root's file": "EPERM",
                     "hard link to root's unreadable file": "EPERM"}
    mine = fs.find("/tmp/mine", "/")
    fs.chmod(mine, 0o600)
    fs.unlink(fs.find("/tmp/mine", "/", follow=False))  # its own file in /tmp: allowed
    assert not fs.cred.may(root_file, 4)


def test_a_bind_follows_the_links_on_its_way_as_mount_does(tmp_path: Path) -> None:
    """A bind at /lib/x where the sysroot's /lib is a link to usr/lib (merged /usr) lands in
    /usr/lib/x; a missing directory on the way is made in the overlay; a file there is ENOTDIR."""
    root, host = tmp_path / "root", tmp_path / "host"
    (root / "usr" / "lib").mkdir(parents=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "file").write_text("x")
    host.mkdir()
    (host / "inside").write_text("bound\n")
    fs = Sysroot(root, binds=[(host, "/lib/x", False), (host, "/made/here", True)])
    try:
        for path in ("/lib/x/inside", "/usr/lib/x/inside", "/made/here/inside"):
            node = fs.find(path, "/").node
            assert isinstance(node, HostNode) and node.path == host.resolve() / "inside", path
        assert fs.binds[0].guest == "/usr/lib/x"
        assert sorted(os.listdir(root)) == ["file", "lib", "usr"]  # made in the overlay, not on the host
    finally:
        fs.close()
    with pytest.raises(_GuestErrno) as info:
        Sysroot(root, binds=[(host, "/file/x", False)])
    assert info.value.errno == errno.ENOTDIR


def test_a_shared_writable_mapping_of_an_overlay_file_is_enodev(build: Callable[[str], Path]) -> None:
    """A writable MAP_SHARED mapping would have to write the file back: refused, said (ENODEV);
    a private one holds the file's bytes."""
    s = kpsdk.open(f"elf:{build('x86_64')}")
    try:
        linux = s.target.linux  # type: ignore[attr-defined]
        calls = s.target.arch.syscalls.calls
        scratch = linux.mem.mmap(0, 0x1000, 3, 0x22)
        linux.uc.mem_write(scratch, b"/tmp/mapped\0")
        fd = linux.syscall(calls["openat"], (-100 & (2**64 - 1), scratch, 0o102, 0o644, 0, 0))  # O_RDWR|O_CREAT
        assert fd >= 3
        assert linux.syscall(calls["pwrite64"], (fd, scratch, 11, 0, 0, 0)) == 11
        assert linux.syscall(calls["mmap"], (0, 0x1000, 3, 0x01, fd, 0)) == -errno.ENODEV
        at = linux.syscall(calls["mmap"], (0, 0x1000, 3, 0x02, fd, 0))
        assert at > 0 and bytes(linux.uc.mem_read(at, 11)) == b"/tmp/mapped"
    finally:
        s.close()


def test_a_script_and_a_program_made_in_the_overlay_run(tmp_path: Path) -> None:
    """bash writes a script and copies a program into the overlay's /tmp and runs both (execve
    reads them from a session-private host copy, gone when the session closes)."""
    bash = Path("/bin/bash")
    if not X86_64_HOST or not bash.exists():
        pytest.skip("runs the x86_64 host's own bash")
    script = ("cd /tmp && printf '#!/bin/sh\\necho script $0\\n' > kpsdk-x.sh && chmod +x kpsdk-x.sh && ./kpsdk-x.sh"
              " && cp /bin/echo kpsdk-echo && ./kpsdk-echo copied program")
    s = kpsdk.open(f"elf:{bash}", args=["-c", script], env={"PATH": "/usr/bin:/bin"})
    try:
        assert (s.run(timeout=120), s.console) == (0, "script ./kpsdk-x.sh\ncopied program\n")
        private = overlay(s).private
        assert private is not None and private.is_dir()
    finally:
        s.close()
    assert not private.exists() and not Path("/tmp/kpsdk-x.sh").exists() and not Path("/tmp/kpsdk-echo").exists()
