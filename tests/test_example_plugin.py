"""End to end: the out-of-tree example plugin ``examples/kpsdk-jprobes``, installed by
pip and used from a fresh interpreter (see ``plugin_site.py``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from kpsdk.fixtures import EXPECTED_OUTPUT
from kpsdk.fixtures import path as fixture_path
from tests.plugin_site import REPO, install, run, run_py

EXAMPLE = REPO / "examples" / "kpsdk-jprobes"
SUM7_LINE = "sum7(a=1, b=2, c=3, d=4, e=5, f=6, g=7)"
HAVE_CLI = importlib.util.find_spec("kpsdk.cli") is not None
NO_AUTOLOAD = {"KPSDK_DISABLE_PLUGIN_AUTOLOAD": "1"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The jprobes example installed by pip into a directory of its own."""
    return install(EXAMPLE, tmp_path_factory.mktemp("kpsdk-jprobes"))


# -- the package as installed --------------------------------------------------------------

def test_installed_from_its_distribution(site: Path) -> None:
    dist_infos = list(site.glob("kpsdk_jprobes-*.dist-info"))
    assert len(dist_infos) == 1
    entry_points = (dist_infos[0] / "entry_points.txt").read_text()
    assert re.search(r"^\[kpsdk\]\s*^jprobes\s*=\s*kpsdk_jprobes\s*$", entry_points, re.M), entry_points
    out = run_py(site, """
        import json, kpsdk, kpsdk_jprobes
        print(json.dumps([kpsdk_jprobes.__file__, kpsdk.get_registry().plugin_names(), kpsdk.Jprobe.__module__]))
    """)
    file, names, module = out
    assert Path(file).is_relative_to(site)
    assert "jprobes" in names and "kprobes" in names
    assert module == "kpsdk_jprobes"


# -- (1) the Python API ---------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["x86_64", "i386", "riscv64", "arm", "thumb"])
def test_jprobe_gets_the_arguments(site: Path, arch: str) -> None:
    """sum7's seven arguments, in registers and (i386, arm) on the stack."""
    out = run_py(site, f"""
        import json, kpsdk
        from kpsdk.fixtures import path
        s = kpsdk.open("elf:" + str(path({arch!r})))
        seen = []
        p = kpsdk.Jprobe(symbol_name="sum7", entry=lambda a, b, c, d, e, f, g: seen.append((a, b, c, d, e, f, g)))
        s.register_jprobe(p)

        @s.jprobe("add")
        def on_add(a, b):
            seen.append(("add", a, b))
            return 1  # ignored: add still runs and returns 5

        status = s.run()
        listing = s.list()
        s.unregister_jprobe(on_add)

        def signed(a: int, b, *rest):  # `int`: sign-extended; b: unsigned
            seen.append(("signed", a, b, len(rest)))
        s.register_jprobe(kpsdk.Jprobe(symbol_name="sum7", entry=signed, nargs=4))
        ret = s.call("sum7", -1, -2, 0, 0, 0, 0, 0)
        print(json.dumps(dict(seen=seen, status=status, list=listing, console=s.console, ret=ret,
                              hits=p.hits, nmissed=p.nmissed, bits=8 * s.arch.word_size)))
    """)
    mask = (1 << out["bits"]) - 1
    assert out["seen"] == [
        ["add", 2, 3],
        [1, 2, 3, 4, 5, 6, 7],
        ["signed", -1, -2 & mask, 2],  # two jprobes on sum7: the newest first (K5)
        [-1 & mask, -2 & mask, 0, 0, 0, 0, 0],
    ]
    assert out["status"] == 0 and out["console"] == EXPECTED_OUTPUT
    assert out["ret"] == -1 - 4
    assert (out["hits"], out["nmissed"]) == (2, 0)
    lines = out["list"].splitlines()
    assert len(lines) == 2, out["list"]
    assert any(re.match(r"^[0-9a-f]+  j  sum7\+0x0\b", line) for line in lines), out["list"]
    assert any(re.match(r"^[0-9a-f]+  j  add\+0x0\b", line) for line in lines), out["list"]


def test_only_function_entries(site: Path) -> None:
    out = run_py(site, """
        import errno, json, kpsdk
        from kpsdk.fixtures import path
        s = kpsdk.open("elf:" + str(path("x86_64")))
        results = []
        attempts = [
            lambda: s.register_jprobe(kpsdk.Jprobe(symbol_name="add", offset=4, entry=lambda a, b: None)),
            lambda: s.jprobe("sum7+0x4")(lambda a: None),
            lambda: s.register_jprobe(kpsdk.Jprobe(addr=s.symbols.resolve("sum7") + 1, entry=lambda a: None)),
            lambda: s.register_jprobe(kpsdk.Jprobe(symbol_name="counter", entry=lambda a: None)),
            lambda: s.register_jprobe(kpsdk.Jprobe(symbol_name="nosuch", entry=lambda a: None)),
        ]
        for attempt in attempts:
            try:
                attempt()
                results.append("registered")
            except kpsdk.KprobeError as e:
                results.append(errno.errorcode[e.errno])
        print(json.dumps(dict(results=results, list=s.list())))
    """)
    assert out == {"results": ["EINVAL", "EINVAL", "EINVAL", "EINVAL", "ENOENT"], "list": ""}


# -- (4) autoload off, -p NAME, -p no:NAME (Python side) ------------------------------------

def test_autoload_disabled_then_loaded_by_name(site: Path) -> None:
    out = run_py(site, """
        import json, kpsdk, kpsdk.registry
        from kpsdk.fixtures import path
        fixture = "elf:" + str(path("x86_64"))
        report = {}
        try:
            kpsdk.Jprobe
            report["jprobe_before"] = True
        except AttributeError:
            report["jprobe_before"] = False
        report["plugins_before"] = kpsdk.get_registry().plugin_names()
        s = kpsdk.open(fixture)
        report["session_verb_before"] = hasattr(s, "register_jprobe")
        k = kpsdk.Kprobe(symbol_name="add", pre_handler=lambda p, regs: None)
        s.register_kprobe(k)
        s.run()
        report["kprobe_hits"] = k.hits

        kpsdk.registry.configure(load=["jprobes"])
        s = kpsdk.open(fixture)
        seen = []
        s.register_jprobe(kpsdk.Jprobe(symbol_name="add", entry=lambda a, b: seen.append([a, b])))
        s.run()
        report["seen_after"] = seen
        report["plugins_after"] = kpsdk.get_registry().plugin_names()
        print(json.dumps(report))
    """, env=NO_AUTOLOAD)
    assert out["jprobe_before"] is False and out["session_verb_before"] is False
    assert "jprobes" not in out["plugins_before"] and "kprobes" in out["plugins_before"]
    assert out["kprobe_hits"] == 1
    assert out["seen_after"] == [[2, 3]]
    assert "jprobes" in out["plugins_after"]


def test_blocked_by_name(site: Path) -> None:
    out = run_py(site, """
        import json, kpsdk, kpsdk.registry
        kpsdk.registry.configure(block=["jprobes"])
        reg = kpsdk.get_registry()
        print(json.dumps([hasattr(kpsdk, "Jprobe"), hasattr(kpsdk, "Kprobe"), reg.pm.get_plugin("jprobes") is None,
                          sorted(reg.probe_types)]))
    """)
    assert out[:3] == [False, True, True]
    assert "jprobe" not in out[3] and {"kprobe", "kretprobe", "uprobe", "uretprobe"} <= set(out[3])  # kpsdk's own


# -- (2) the kpsdk_cli hook ----------------------------------------------------------------

#: a root typer app built the way kpsdk/cli builds its own, so the hook is
#: tested even before (or apart from) the real CLI module
STAND_IN_CLI = """
import sys
import typer
import kpsdk

app = typer.Typer()

@app.callback()
def root() -> None:
    "stand-in kpsdk root"

kpsdk.get_registry().pm.hook.kpsdk_cli(app=app)
app(sys.argv[1:], prog_name="kpsdk")
"""


@pytest.mark.parametrize("arch", ["x86_64", "i386"])
def test_cli_hook_runs_the_program(site: Path, arch: str) -> None:
    proc = run(site, ["-c", STAND_IN_CLI, "jprobe", str(fixture_path(arch)), "sum7", "--nargs", "7"])
    assert proc.stdout == SUM7_LINE + "\n" + EXPECTED_OUTPUT


def test_cli_hook_calls_the_function(site: Path) -> None:
    fixture = str(fixture_path("riscv64"))
    proc = run(site, ["-c", STAND_IN_CLI, "jprobe", fixture, "sum7", "--call", "1 2 3 4 5 6 7"])
    assert proc.stdout == SUM7_LINE + "\nsum7 returned 140\n"
    proc = run(site, ["-c", STAND_IN_CLI, "jprobe", fixture, "add", "--call", "-5 0x10", "--signed"])
    assert proc.stdout == "add(a=-5, b=16)\nadd returned 11\n"
    proc = run(site, ["-c", STAND_IN_CLI, "jprobe", fixture, "fact"])  # default arity 4
    assert proc.stdout.startswith("fact(a=5, b=")
    proc = run(site, ["-c", STAND_IN_CLI, "jprobe", "thumb", "fact", "--nargs", "1"])  # a bundled program by name
    assert proc.stdout.startswith("fact(a=5)\nfact(a=4)\nfact(a=3)\nfact(a=2)\nfact(a=1)\nadd=5\n")


def test_cli_hook_absent_when_blocked(site: Path) -> None:
    code = "import kpsdk.registry; kpsdk.registry.configure(block=['jprobes'])\n" + STAND_IN_CLI
    proc = run(site, ["-c", code, "jprobe", str(fixture_path("x86_64")), "sum7"], check=False)
    assert proc.returncode != 0
    assert "sum7(" not in proc.stdout


# -- (2), (3) the real kpsdk command line --------------------------------------------------

needs_cli = pytest.mark.skipif(not HAVE_CLI, reason="kpsdk/cli (the kpsdk command line) is not there yet")
COMMAND_HELP = "Print FUNC(a="  # start of the jprobe command's help line in `kpsdk --help`


@needs_cli
@pytest.mark.parametrize("arch", ["x86_64", "arm"])
def test_cli(site: Path, arch: str) -> None:
    proc = run(site, ["-m", "kpsdk.cli", "jprobe", str(fixture_path(arch)), "sum7", "--nargs", "7"])
    assert proc.stdout == SUM7_LINE + "\n" + EXPECTED_OUTPUT
    assert COMMAND_HELP in run(site, ["-m", "kpsdk.cli", "--help"]).stdout


@needs_cli
def test_cli_p_no_hides_the_command(site: Path) -> None:
    help_text = run(site, ["-m", "kpsdk.cli", "-p", "no:jprobes", "--help"]).stdout
    assert COMMAND_HELP not in help_text
    proc = run(site, ["-m", "kpsdk.cli", "-p", "no:jprobes", "jprobe", str(fixture_path("x86_64")), "sum7"],
               check=False)
    assert proc.returncode != 0 and "sum7(" not in proc.stdout


@needs_cli
def test_cli_errors(site: Path) -> None:
    """kpsdk/cli (its exits module) turns the plugin's kpsdk errors into one error line and exit 1."""
    for func, err in [("add+4", "EINVAL"), ("nosuch", "ENOENT"), ("counter", "EINVAL")]:
        proc = run(site, ["-m", "kpsdk.cli", "jprobe", "x86_64", func], check=False)
        assert proc.returncode == 1, (func, proc.stdout, proc.stderr)
        assert f"error: {err}" in proc.stderr and proc.stdout == ""


@needs_cli
def test_cli_autoload_disabled_and_p_name(site: Path) -> None:
    fixture = str(fixture_path("x86_64"))
    assert COMMAND_HELP not in run(site, ["-m", "kpsdk.cli", "--help"], env=NO_AUTOLOAD).stdout
    proc = run(site, ["-m", "kpsdk.cli", "-p", "jprobes", "jprobe", fixture, "sum7", "--nargs", "7"],
               env=NO_AUTOLOAD)
    assert proc.stdout == SUM7_LINE + "\n" + EXPECTED_OUTPUT
