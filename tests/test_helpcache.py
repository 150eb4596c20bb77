"""``kpsdk --help`` replayed from its record (kpsdk/cli/helpcache.py).

Ground truth is typer's own page, made with the record switched off
(``KPSDK_HELP_CACHE=0``) in the same environment: the replay must print the
same bytes, in a pipe, at other widths, with colours forced and in a real
terminal (a pty of a given size), and must not import typer to do it.  A page
recorded for one environment is never printed for another, and a changed
module file or a new distribution on ``sys.path`` makes the page again.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import termios
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import fuzz_examples
from hypothesis import given, settings
from hypothesis import strategies as st

from kpsdk.cache import cache_root
from kpsdk.cli import helpcache

#: environments the page depends on (widths, colours forced or refused)
VARIANTS: tuple[dict[str, str], ...] = ({}, {"COLUMNS": "60"}, {"COLUMNS": "132"},
            {"FORCE_COLOR": "1", "TERM": "xterm-256color", "COLUMNS": "100"},
            {"FORCE_COLOR": "1", "NO_COLOR": "1"})


def _env(cache: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("COLUMNS", "FORCE_COLOR", "NO_COLOR", "TERM", helpcache.SWITCH)}
    return {**env, "KPSDK_CACHE": str(cache), **extra}


def _help(cache: Path, extra: dict[str, str], args: tuple[str, ...] = ("--help",)) -> tuple[bytes, bool]:
    """stdout of ``python -X importtime -m kpsdk.cli ARGS`` and whether typer was imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kpsdk.cli", *args],
                          env=_env(cache, extra), capture_output=True, check=True)
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.decode().splitlines()
                if line.startswith("import time:")}
    assert not [line for line in proc.stderr.decode().splitlines() if not line.startswith("import time:")]
    return proc.stdout, "typer" in imported


def test_replay_is_typer_s_page_in_every_environment(tmp_path: Path) -> None:
    cache = tmp_path / "cache"  # one record for all: no environment gets another's page
    for extra in VARIANTS:
        fresh, _ = _help(cache, {**extra, helpcache.SWITCH: "0"})
        first, first_typer = _help(cache, extra)
        again, again_typer = _help(cache, extra)
        assert first == fresh and again == fresh, extra
        assert first_typer and not again_typer, extra
        plain = re.sub(rb"\x1b\[[0-9;]*m", b"", fresh)
        assert b"Usage: kpsdk [OPTIONS] COMMAND" in plain and b" probe " in plain, extra
    pages = json.loads((cache / helpcache.DIRECTORY / helpcache.NAME).read_text())["pages"]
    assert len(pages) == len(VARIANTS)


def test_short_option_and_other_command_lines(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fresh, _ = _help(cache, {helpcache.SWITCH: "0"}, ("-h",))
    assert _help(cache, {}, ("-h",)) == (fresh, True)
    assert _help(cache, {}, ("-h",)) == (fresh, False)
    record = cache / helpcache.DIRECTORY / helpcache.NAME
    before = record.read_bytes()
    out, typer = _help(cache, {}, ("archs", "--help"))  # a command's help is typer's, every time
    assert typer and b"Usage: kpsdk archs" in out and record.read_bytes() == before


def _in_pty(cache: Path, extra: dict[str, str], cols: int, rows: int) -> bytes:
    """Everything ``kpsdk --help`` writes to a terminal of ``cols`` x ``rows``."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = _env(cache, {"TERM": "xterm-256color", **extra})
    with subprocess.Popen([sys.executable, "-m", "kpsdk.cli", "--help"], stdin=slave, stdout=slave, stderr=slave,
                          env=env) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError as e:  # EIO: the child closed the terminal
                assert e.errno == errno.EIO
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait() == 0
    os.close(master)
    return b"".join(chunks)


@pytest.mark.parametrize(("cols", "rows"), [(90, 30), (150, 50)])
def test_replay_in_a_terminal(tmp_path: Path, cols: int, rows: int) -> None:
    cache = tmp_path / "cache"
    fresh = _in_pty(cache, {helpcache.SWITCH: "0"}, cols, rows)
    assert b"\x1b[" in fresh, "a terminal's page has colours"
    assert _in_pty(cache, {}, cols, rows) == fresh
    assert (cache / helpcache.DIRECTORY / helpcache.NAME).exists()
    assert _in_pty(cache, {}, cols, rows) == fresh
    other = _in_pty(cache, {}, cols + 7, rows)  # another size: typer's page for it, not the recorded one
    assert other == _in_pty(cache, {helpcache.SWITCH: "0"}, cols + 7, rows) and other != fresh


# -- what a page is checked against, in process ---------------------------------------------------


@pytest.fixture
def record_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("KPSDK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(helpcache.SWITCH, raising=False)
    yield tmp_path / "cache" / helpcache.DIRECTORY


def _render(text: str, code: int = 0, err: str = "") -> types.FunctionType:
    def render() -> None:
        sys.stdout.write(text)
        if err:
            sys.stderr.write(err)
        raise SystemExit(code)

    return render  # type: ignore[return-value]


def _record(text: str, code: int = 0, err: str = "") -> None:
    with pytest.raises(SystemExit):  # the page goes to pytest's capture, the stdout lookups see too
        helpcache.record(["--help"], _render(text, code, err))


def test_directory_is_the_cache_s(record_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert helpcache.directory() == str(cache_root() / "cli")
    monkeypatch.delenv("KPSDK_CACHE")
    for xdg in ("/x/y", "relative/ignored", ""):
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert helpcache.directory() == str(cache_root() / "cli")


def test_a_changed_module_file_is_a_miss(record_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "plugin_mod.py"
    source.write_text("X = 1\n")
    module = types.ModuleType("plugin_mod")
    module.__file__ = str(source)
    monkeypatch.setitem(sys.modules, "plugin_mod", module)
    _record("page one\n")
    assert helpcache.lookup(["--help"]) == "page one\n"
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert helpcache.lookup(["--help"]) is None
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert helpcache.lookup(["--help"]) == "page one\n"
    source.unlink()
    assert helpcache.lookup(["--help"]) is None


def test_a_new_distribution_is_a_miss(record_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    _record("page\n")
    (site / "unrelated.txt").write_text("x")  # a file that is no distribution changes nothing
    assert helpcache.lookup(["--help"]) == "page\n"
    dist = site / "kpsdk_extra-1.0.dist-info"
    dist.mkdir()
    assert helpcache.lookup(["--help"]) is None
    _record("page with the plugin\n")
    (dist / "entry_points.txt").write_text("[kpsdk]\nextra = kpsdk_extra\n")
    assert helpcache.lookup(["--help"]) is None


def test_the_environment_is_part_of_the_key(record_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _record("page\n")
    monkeypatch.setenv("PWD", "/elsewhere")  # a shell's cd: not read by the page
    assert helpcache.lookup(["--help"]) == "page\n"
    monkeypatch.setenv("KPSDK_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert helpcache.lookup(["--help"]) is None
    assert helpcache.lookup(["-h"]) is None


def test_the_record_holds_no_environment_value(record_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment is part of the key, but the record keeps only a digest of it: no
    variable's value (a token, a password) is written to disk, and a record an earlier
    version wrote with the environment in it is rewritten without it."""
    secret = "hunter2-" + os.urandom(8).hex()
    record_dir.mkdir(parents=True, mode=0o700)
    (record_dir / helpcache.NAME).write_text(json.dumps({"format": 1, "pages": [
        {"key": [1, ["--help"], [["OLD_TOKEN", secret + "-old"]]], "files": [], "dirs": [], "out": "old\n"}]}))
    (record_dir / helpcache.NAME).chmod(0o600)
    monkeypatch.setenv("API_TOKEN", secret)
    monkeypatch.setenv("COLUMNS", "77")
    _record("page\n")
    data = (record_dir / helpcache.NAME).read_text()
    assert secret not in data and "API_TOKEN" not in data and "hunter2" not in data
    assert '"77"' not in data and "COLUMNS" not in data
    kept = {*sys.path, sys.executable}  # what the record holds as it is, whatever the environment says
    for value in {v for k, v in os.environ.items() if len(v) >= 12 and k not in ("PWD", "OLDPWD", "_")} - kept:
        assert json.dumps(value) not in data, value  # no value of the environment, quoted as JSON would
    assert helpcache.lookup(["--help"]) == "page\n"
    monkeypatch.setenv("API_TOKEN", secret + "x")  # still part of the key
    assert helpcache.lookup(["--help"]) is None


def test_nothing_kept_from_a_failed_or_noisy_page(record_dir: Path) -> None:
    _record("usage error\n", code=2)
    _record("page\n", err="a warning\n")
    assert helpcache.lookup(["--help"]) is None
    assert not (record_dir / helpcache.NAME).exists()


def test_at_most_entries_pages(record_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(helpcache.ENTRIES + 3):
        monkeypatch.setenv("COLUMNS", str(40 + i))
        _record(f"page {i}\n")
    pages = json.loads((record_dir / helpcache.NAME).read_text())["pages"]
    assert len(pages) == helpcache.ENTRIES
    assert helpcache.lookup(["--help"]) == f"page {helpcache.ENTRIES + 2}\n"
    monkeypatch.setenv("COLUMNS", "40")
    assert helpcache.lookup(["--help"]) is None  # the oldest went


def test_an_unsafe_directory_is_not_used(record_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _record("page\n")
    record_dir.chmod(0o777)
    assert helpcache.lookup(["--help"]) is None
    _record("page again\n")  # not written, and no warning printed
    assert capsys.readouterr().err == ""
    record_dir.chmod(0o700)
    (record_dir / helpcache.NAME).chmod(0o666)
    assert helpcache.lookup(["--help"]) is None


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                    max_leaves=20)


@pytest.fixture(scope="module")
def fuzz_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache of its own for the examples (hypothesis runs them one after another)."""
    root = tmp_path_factory.mktemp("helpcache-fuzz")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KPSDK_CACHE", str(root))
        mp.delenv(helpcache.SWITCH, raising=False)
        (root / helpcache.DIRECTORY).mkdir(mode=0o700)
        yield root / helpcache.DIRECTORY / helpcache.NAME


@given(data=st.binary(max_size=512) | JSON.map(lambda v: json.dumps(v).encode())
       | JSON.map(lambda v: json.dumps({"format": helpcache.FORMAT, "pages": [v]}).encode()))
@settings(max_examples=fuzz_examples(200))
def test_fuzz_the_record(fuzz_cache: Path, data: bytes) -> None:
    """Whatever the record file holds, a lookup is a miss or a page: never an error."""
    fuzz_cache.write_bytes(data)
    found = helpcache.lookup(["--help"])
    assert found is None or isinstance(found, str)
