"""The ``kpsdk`` command line: every command on the bundled fixtures.

Most tests drive ``kpsdk.cli.app`` with typer's CliRunner; a few run the real
console-script path (``python -m kpsdk.cli``, i.e. ``main()``) in a subprocess,
where ``-p`` is scanned from argv before the app is built.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk import fixtures
from kpsdk.cli import app
from kpsdk.cli.hitstrings import (
    STRING_FAULT,
    STRING_OK,
    STRING_SLOT,
    STRING_TRUNCATED,
    load_strings,
    show_string,
    store_strings,
)
from kpsdk.cli.plugin_args import scan_plugin_args, split_plugin_values
from kpsdk.cli.returns import errno_name, signed_return
from kpsdk.registry import configure
from tests.conftest import require_tool

runner = CliRunner()


@pytest.fixture(autouse=True)
def _default_plugins():
    """Tests that pass -p reconfigure the process-wide registry: put it back."""
    yield
    configure()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def run_main(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "kpsdk.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=120)


def assert_clean_error(result, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, kpsdk.KpsdkError | OSError | AttributeError)


# -- archs / plugins --------------------------------------------------------------------


def test_archs_lists_every_arch_with_its_breakpoints():
    result = invoke("archs")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for name in kpsdk.get_registry().archs.names():
        assert name in out
    assert "cc int3" in out  # x86 int3, kernel and Unicorn
    assert "7fe00008 trap" in out  # ppc64 tw 31,0,0
    assert "00100073 ebreak" in out and "9002 c.ebreak" in out  # riscv
    assert "arm: e7f001f8" in out and "thumb: de18" in out and "f7f0 a018" in out  # arm per instruction set
    assert "e1200070 bkpt" in out and "be00 bkpt" in out  # what kpsdk writes on Unicorn
    assert "stack (cdecl)" in out  # i386 user arguments
    assert "rdi rsi rdx rcx" in out
    # every arch runs on Unicorn, ppc64 and ppc64le (MSR[LE] on the big-endian engine) too
    assert "no (see unicorn_unsupported)" not in out and "unicorn: no" not in out


def test_plugins_shows_plugins_targets_and_probe_types():
    result = invoke("plugins")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "kprobes" in out and "kpsdk.plugins.kprobes" in out
    assert "elf" in out and "an ELF executable run in Unicorn" in out
    assert "kpsdk.plugins.kprobes.Kprobe" in out
    assert "a pre/post handler on an instruction" in out


def test_help_documents_plugins_and_autoload_switch():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "KPSDK_DISABLE_PLUGIN_AUTOLOAD" in result.stdout
    assert "--plugin" in result.stdout and "no:NAME" in result.stdout
    assert "kpsdk demo" in result.stdout


# -- list / disasm -----------------------------------------------------------------------


def test_list_functions_and_noprobe():
    result = invoke("list", str(fixtures.path("x86_64")), "--noprobe", "sub")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for name in ("add", "fact", "check", "main", "_start"):
        assert name in out
    assert "counter" not in out  # an object: only with --all
    assert "no (--noprobe)" in out
    assert invoke("list", "x86_64", "--all").stdout.count("counter") == 1


def test_list_marks_thumb_functions():
    out = invoke("list", "thumb").stdout
    header = next(line for line in out.splitlines() if "name" in line and "address" in line)
    column = [c.strip() for c in header.split("┃")].index("iset")

    def row_of(text: str, name: str) -> list[str]:
        return next(cells for cells in ([c.strip() for c in line.split("│")] for line in text.splitlines())
                    if len(cells) > column and cells[1] == name)

    assert row_of(out, "add")[column] == "thumb"
    assert row_of(invoke("list", "arm").stdout, "add")[column] == ""


def test_list_reads_dynamic_symbols_and_says_which_table():
    out = invoke("list", "/bin/ls").stdout  # stripped: only .dynsym
    rows = [[c.strip() for c in line.split("│")] for line in out.splitlines() if line.startswith("│")]
    dynamic = [row for row in rows if row[-3] == ".dynsym"]
    stubs = [row for row in rows if row[-3] != ".dynsym"]  # its PLT stubs (tests/test_plt.py)
    assert dynamic and all(row[-3] in (".plt", ".plt.got") and row[1].endswith("@plt") for row in stubs)
    with open("/bin/ls", "rb") as f:
        from elftools.elf.elffile import ELFFile

        defined = {s.name for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                   if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"}
    assert {row[1] for row in dynamic} == defined


def test_disasm_x86_64_classifies_instructions():
    result = invoke("disasm", "x86_64", "check")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    cmp_line = next(ln for ln in lines if " cmp " in ln)
    jg_line = next(ln for ln in lines if " jg " in ln)
    assert cmp_line.startswith("check+0x5") and cmp_line.rstrip().endswith("boostable")
    assert jg_line.rstrip().endswith("stepped")


def test_disasm_ppc64_works_without_unicorn():
    result = invoke("disasm", str(fixtures.path("ppc64")), "add")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "add+0x0" in out and "blr" in out and "r3, r3, r4" in out
    assert "7c 63 22 14" in out  # big-endian bytes of add r3, r3, r4


def test_disasm_thumb_refuses_it_instruction_and_count():
    result = invoke("disasm", "thumb", "check", "--count", "4")
    assert result.exit_code == 0, result.output
    assert "thumb instructions" in result.stdout
    assert "refused: an IT instruction" in result.stdout
    assert sum(1 for ln in result.stdout.splitlines() if ln.startswith("check+")) == 4


# -- probe -------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, args", [("x86_64", "rdi=0x2 rsi=0x3"), ("riscv64", "a0=0x2 a1=0x3"),
                                        ("i386", "arg1=0x2 arg2=0x3")])  # 1-based, as $argN
def test_probe_add_prints_arguments_and_program_output(arch, args):
    result = invoke("probe", str(fixtures.path(arch)), "--kprobe", "add")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "[1] add+0x0 (0x" in out and args in out
    assert fixtures.EXPECTED_OUTPUT in out
    assert "exit status 0" in out
    assert "kprobes/list" in out and "add+0x0  [OPTIMIZED]" in out
    assert "kprobe_profile" in out and "k_add_0x0" in out


def test_probe_fact_recursion_post_and_no_optimize():
    result = invoke("probe", "x86_64", "--kprobe", "fact", "--post", "--no-optimize", "--regs", "rdi,sp")
    assert result.exit_code == 0, result.output
    out = result.stdout
    for n in range(1, 6):
        assert f"rdi={n:#x} sp=0x" in out
    assert out.count(" post fact+0x0") == 5 and "-> ip=0x" in out
    assert "[OPTIMIZED]" not in out  # post handlers and the knob: not optimized


def test_probe_call():
    result = invoke("probe", "riscv64", "--kprobe", "add", "--call", "add 2 -5")
    assert result.exit_code == 0, result.output
    assert "a0=0x2" in result.stdout
    assert "add(2, -5) = -3" in result.stdout
    assert "add=5" not in result.stdout  # the program itself did not run


def test_probe_inside_an_instruction_is_eilseq():
    result = invoke("probe", "x86_64", "--kprobe", "add+0x1")
    assert_clean_error(result)
    assert "error: EILSEQ" in result.stderr and "add+0x1" in result.stderr


def test_probe_unknown_symbol_is_enoent():
    result = invoke("probe", "x86_64", "--kprobe", "nosuchfunc")
    assert_clean_error(result)
    assert "error: ENOENT" in result.stderr and "nosuchfunc" in result.stderr


def test_probe_unknown_register_and_missing_file():
    result = invoke("probe", "x86_64", "--kprobe", "add", "--regs", "rdi,bogus")
    assert_clean_error(result)
    assert "unknown x86_64 register 'bogus'" in result.stderr
    result = invoke("probe", "/nonexistent/prog.elf", "--kprobe", "add")
    assert_clean_error(result)
    assert "cannot read" in result.stderr


def test_probe_usage_errors_exit_2():
    assert invoke("probe", "x86_64").exit_code == 2  # --kprobe is required
    assert invoke("probe", "x86_64", "--kprobe", "add", "--call", "add two").exit_code == 2


def test_probe_without_kprobes_plugin_fails_clearly():
    result = invoke("-p", "no:kprobes", "probe", "x86_64", "--kprobe", "add")
    assert_clean_error(result)
    assert "no 'kprobe' probe type is loaded" in result.stderr


# -- demo ----------------------------------------------------------------------------------


def test_demo_riscv64():
    result = invoke("demo", "--arch", "riscv64")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "add(2, 3)" in out and "fact(1)" in out
    assert "not taken" in out and "taken" in out
    assert "add=5 -> add=42" in out
    assert 's.call("add", 7, 3) = 4' in out
    assert "[OPTIMIZED]" in out and "[DISABLED]" in out
    assert "summary" in out and "✗" not in out


def test_demo_runs_ppc64_on_unicorn():
    result = invoke("demo", "--arch", "ppc64")
    assert result.exit_code == 0, result.output
    assert "== unprobed output == fixtures.EXPECTED_OUTPUT" in result.stdout
    assert "✗" not in result.stdout and "cannot run" not in result.stdout


def test_demo_unknown_arch_is_a_usage_error():
    assert invoke("demo", "--arch", "sparc").exit_code == 2


def test_run_demo_returns_results():
    from rich.console import Console

    from kpsdk.demo.programs import run_demo

    results = run_demo(["x86_64", "thumb"], Console(file=open(os.devnull, "w"), width=120))  # noqa: SIM115
    assert [r.arch for r in results] == ["x86_64", "thumb"]
    assert all(r.ok and r.hits == 10 for r in results)


def test_demo_ends_with_a_pipeline_of_the_machines_own_programs_in_unicorn():
    """The default demo's last part: /bin/sh running ls | sort | head (Debian's, dynamic) in
    Unicorn, a process each, one uprobe on libc's malloc seeing them all, and its output equal
    to a native run's (the demo compares; so does this test)."""
    from rich.console import Console

    from kpsdk.demo.linux import demo_real_program, skip_reason

    why = skip_reason()
    if why is not None:
        pytest.skip(why)
    text = io.StringIO()
    result = demo_real_program(Console(file=text, width=200))
    assert result.ok and result.output_ok and result.hits > 0, result.notes
    listing = subprocess.run(["/bin/ls", str(Path(fixtures.__file__).parent)], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert "libc.so.6" in text.getvalue() and f"{result.hits} calls" in text.getvalue()
    assert all(name in text.getvalue() for name in sorted(listing, reverse=True)[:4])
    assert all(f"{name}[" in text.getvalue() for name in ("ls", "sort", "head"))  # hits from each process


def test_demo_traces_a_busybox_pipeline_across_its_processes():
    """The default demo's busybox part: sh -c 'echo hello | tr a-z A-Z' in Unicorn, each hit
    printed with its task; the processes that write and end are the ones a native run has
    (strace -f, when installed), and the output is the native run's."""
    from rich.console import Console

    from kpsdk.demo.pipeline import BUSYBOX, PIPELINE, demo_pipeline, skip_reason

    why = skip_reason()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    text = io.StringIO()
    result = demo_pipeline(Console(file=text, width=200))
    assert result.ok and result.output_ok and result.observed_ok, result.notes
    shown = text.getvalue()
    native = subprocess.run([str(BUSYBOX), "sh", "-c", PIPELINE], capture_output=True, text=True, check=True)
    assert native.stdout.strip() in shown
    lines = [line.split() for line in shown.splitlines() if line.startswith("   ") and "-10" in line]
    tasks = {words[0] for words in lines}
    writes = [(words[0], " ".join(words[1:])) for words in lines if words[1].startswith("write(")]
    assert writes == [("busybox-1001", "write(1, b'hello\\n', 6)"), ("tr-1002", "write(1, b'HELLO\\n', 6)")]
    assert {t.rsplit("-", 1)[1] for t in tasks} == {"1000", "1001", "1002"}
    strace = shutil.which("strace")
    if strace is not None:  # the same processes write the same bytes natively, and three end
        out = subprocess.run([strace, "-f", "-qq", "-e", "trace=write,exit_group", "-e", "signal=none",
                              str(BUSYBOX), "sh", "-c", PIPELINE], capture_output=True, text=True, check=True).stderr
        native_writes = re.findall(r'write\(1, "(\w+)\\n", 6\)', out)
        assert native_writes == ["hello", "HELLO"]
        assert out.count("exit_group(") == sum(1 for words in lines if words[1].startswith("exit_group(")) == 3


# -- main(): -p scanned from argv, plugin commands ---------------------------------------------


def test_scan_plugin_args():
    assert scan_plugin_args(["-p", "a", "-pno:b", "--plugin=c", "--plugin", "no:d", "probe", "-p", "e"]) == (
        ["a", "c"], ["b", "d"])
    assert scan_plugin_args(["archs"]) == ([], [])
    assert split_plugin_values(["no:kprobes"]) == ([], ["kprobes"])


def test_main_error_is_one_line_without_traceback():
    proc = run_main("probe", "x86_64", "--kprobe", "add+0x1")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("error: EILSEQ")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_main_blocks_kprobes_with_p_no():
    proc = run_main("-p", "no:kprobes", "probe", "x86_64", "--kprobe", "add")
    assert proc.returncode == 1
    assert "no 'kprobe' probe type is loaded" in proc.stderr and "Traceback" not in proc.stderr


def test_main_plugin_adds_a_command(tmp_path: Path):
    (tmp_path / "kpsdk_hello_plugin.py").write_text(textwrap.dedent('''
        import kpsdk

        @kpsdk.hookimpl
        def kpsdk_cli(app):
            @app.command("hello")
            def hello(name: str = "world") -> None:
                """Say hello."""
                print(f"hello {name}")

            @app.command("fail")
            def fail() -> None:
                raise kpsdk.TargetError("a plugin's error")
    '''))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    proc = run_main("-p", "kpsdk_hello_plugin", "hello", "--name", "kprobes", env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "hello kprobes"
    proc = run_main("-p", "kpsdk_hello_plugin", "fail", env=env)
    assert proc.returncode == 1 and proc.stderr.strip() == "error: a plugin's error"
    proc = run_main("hello", env=env)  # not loaded without -p
    assert proc.returncode == 2


def test_main_unknown_plugin_is_an_error():
    proc = run_main("-p", "kpsdk_no_such_plugin_xyz", "archs")
    assert proc.returncode == 1
    assert "error: plugin 'kpsdk_no_such_plugin_xyz'" in proc.stderr and "Traceback" not in proc.stderr


def test_probe_call_takes_function_and_arguments_unquoted():
    result = invoke("probe", str(fixtures.path("i386")), "--kprobe", "sum7", "--regs", "arg1,arg7",
                    "--call", "sum7", "1", "2", "3", "4", "5", "6", "-7")
    assert result.exit_code == 0, result.output
    assert "arg1=0x1 arg7=0xfffffff9" in result.output  # -7 as a 32-bit word on the stack
    assert "sum7(1, 2, 3, 4, 5, 6, -7) = 42" in result.output  # 1+4+9+16+25+36-49


# -- probe on live targets (--target), kretprobes, string arguments ---------------------------------------


def require_qemu_user() -> None:
    require_tool("qemu-x86_64", "qemu-user")
    require_tool("qemu-arm", "qemu-user")
    require_tool("gdb-multiarch", "gdb-multiarch")


def hit_lines(out: str, what: str) -> list[str]:
    """The lines printed as hits (``[n] ...``) that contain ``what``."""
    return [ln for ln in out.splitlines() if ln.startswith("[") and what in ln]


@pytest.mark.parametrize("arch", ["x86_64", "arm"])
def test_probe_qemu_user_kretprobe_kprobe_and_console(arch):
    require_qemu_user()
    result = invoke("probe", "--target", f"qemu-user:{fixtures.path(arch)}", "--kretprobe", "add",
                    "--kprobe", "fact", "--console")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert hit_lines(out, "r add ") == ["[1] r add ret=5"]  # add(2, 3), the first hit
    assert len(hit_lines(out, " fact+0x0 (0x")) == 5  # fact(5) .. fact(1)
    assert "── program output" in out and fixtures.EXPECTED_OUTPUT in out  # --console: the program's output
    assert out.index("r add ret=5") < out.index("── program output")  # hits print as they happen
    assert "exit status 0" in out
    assert "r  add+0x0" in out and "k  fact+0x0" in out  # kprobes/list
    assert "k fact+0x0: 5 hits, 0 missed" in out and "r add: 1 hits, 1 returns, 0 missed" in out


def test_probe_qemu_user_without_console_and_with_the_elf_argument():
    require_qemu_user()
    result = invoke("probe", "arm", "--target", "qemu-user", "--kretprobe", "sum7")
    assert result.exit_code == 0, result.output
    assert "r sum7 ret=140" in result.stdout
    assert "add=5" not in result.stdout  # the program's output only with --console


def test_probe_qemu_user_failed_filters_positive_returns():
    require_qemu_user()
    result = invoke("probe", "--target", f"qemu-user:{fixtures.path('x86_64')}", "--kretprobe", "sub",
                    "--kretprobe", "add", "--failed")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert hit_lines(out, "r sub") == [] and hit_lines(out, "r add") == []  # sub(7, 3) = 4, add(2, 3) = 5
    assert "r sub: 1 hits, 1 returns, 0 failed, 0 missed" in out
    assert "exit status 0" in out


def test_probe_qemu_user_string_args_and_faults():
    require_qemu_user()
    # put(const char *name, long value): argument 1 is a string, argument 2 (a number) faults
    result = invoke("probe", "--target", f"qemu-user:{fixtures.path('arm')}", "--kprobe", "put",
                    "--kretprobe", "put", "--string-arg", "1", "--string-arg", "2", "--regs", "r0")
    assert result.exit_code == 0, result.output
    kp, rp = hit_lines(result.stdout, " put+0x0 ("), hit_lines(result.stdout, "r put ")
    names = [name for name in fixtures.EXPECTED]
    assert len(kp) == len(rp) == len(names)
    for name, k_line, r_line in zip(names, kp, rp, strict=True):
        assert k_line.endswith(f' arg1="{name}" arg2=(fault)'), k_line
        assert r_line.endswith(f' arg1="{name}" arg2=(fault)'), r_line  # fetched at entry, kept in ri.data


def test_probe_qemu_user_program_not_ending_in_time_is_an_error():
    require_qemu_user()
    result = invoke("probe", "--target", f"qemu-user:{fixtures.path('x86_64')}", "--kprobe", "inc",
                    "--regs", "rdi", "--timeout", "0.01")
    assert_clean_error(result)
    assert "did not exit within 0.01 s" in result.stderr
    assert "inc+0x0: " in result.stdout  # the summary came first


def test_probe_kretprobe_failed_on_unicorn():
    result = invoke("probe", "x86_64", "--kretprobe", "sub", "--restype", "int", "--failed", "--call", "sub", "3", "5")
    assert result.exit_code == 0, result.output
    assert hit_lines(result.stdout, "r sub") == ["[1] r sub ret=-2"]  # a user function: -2 is no errno
    assert "sub(3, 5) = -2" in result.stdout
    assert "r sub: 1 hits, 1 returns, 1 failed, 0 missed" in result.stdout
    result = invoke("probe", "x86_64", "--kretprobe", "sub", "--failed", "--call", "sub", "7", "3")
    assert result.exit_code == 0, result.output
    assert hit_lines(result.stdout, "r sub") == []  # 4: not a failure


def test_probe_string_arg_on_unicorn():
    result = invoke("probe", "riscv64", "--kprobe", "put", "--regs", "a0", "--string-arg", "1")
    assert result.exit_code == 0, result.output
    assert [ln.split(" arg1=")[1] for ln in hit_lines(result.stdout, " put+0x0 (")] == [
        f'"{name}"' for name in fixtures.EXPECTED]


def test_probe_live_usage_errors_exit_2():
    # checked before anything starts: no QEMU needed
    target = f"qemu-user:{fixtures.path('x86_64')}"
    result = invoke("probe", "--target", target, "--kprobe", "add", "--call", "add", "2", "3")
    assert result.exit_code == 2 and "--call" in result.output
    assert invoke("probe", "--target", "qemu-system:x86_64", "--kprobe", "add", "--call", "add 2 3").exit_code == 2
    assert invoke("probe", "--target", target).exit_code == 2  # no probe
    assert invoke("probe", "--kprobe", "add").exit_code == 2  # neither ELF nor --target
    assert invoke("probe", "x86_64", "--target", target, "--kprobe", "add").exit_code == 2  # both
    assert invoke("probe", "x86_64", "--kprobe", "add", "--kernel", "vmlinuz").exit_code == 2  # qemu-system's
    assert invoke("probe", "--target", target, "--kprobe", "add", "--arch", "arm").exit_code == 2  # gdb://'s
    assert invoke("probe", "--target", "bogus", "--kprobe", "add").exit_code == 2
    assert invoke("probe", "x86_64", "--kprobe", "add", "--failed").exit_code == 2  # --failed wants a kretprobe
    assert invoke("probe", "x86_64", "--kprobe", "add", "--string-arg", "-1").exit_code == 2


def test_probe_without_kretprobes_plugin_fails_clearly():
    result = invoke("-p", "no:kretprobes", "probe", "x86_64", "--kretprobe", "add")
    assert_clean_error(result)
    assert "no 'kretprobe' probe type is loaded" in result.stderr


def test_probe_return_value_and_string_helpers():
    assert signed_return(0xFFFFFFFFFFFFFFFE, "long", 64) == -2
    assert signed_return(0xFFFFFFFE, "long", 64) == 0xFFFFFFFE
    assert signed_return(0xFFFFFFFE, "int", 64) == -2
    assert signed_return(0xFFFFFFFE, "uint", 64) == 0xFFFFFFFE and signed_return(-1, "ulong", 32) == 0xFFFFFFFF
    assert errno_name(-2) == "ENOENT" and errno_name(-512) == "ERESTARTSYS" and errno_name(5) == ""
    data = bytearray(2 * STRING_SLOT)
    long_text = ("é" * 200).encode()  # cut at 255 bytes, inside a character
    store_strings(data, [(b'a"b\n', STRING_OK), (long_text[:STRING_SLOT - 1], STRING_TRUNCATED)])
    (first, s1), (second, s2) = load_strings(data, 2)
    assert show_string(1, first, s1) == 'arg1="a\\"b\\n"'
    assert show_string(2, second, s2) == 'arg2="' + "é" * 127 + '"...'
    assert show_string(3, b"", STRING_FAULT) == "arg3=(fault)"


def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def test_probe_ctrl_c_closes_the_session_and_exits_130():
    require_tool("qemu-system-x86_64", "qemu-system-x86")
    require_tool("gdb-multiarch", "gdb-multiarch")
    # no kernel: the firmware runs until stopped; the probe is on an address it never reaches
    proc = subprocess.Popen([sys.executable, "-m", "kpsdk.cli", "probe", "--target", "qemu-system:x86_64",
                             "--kprobe", "0x100000", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("running "):
                break
        assert lines and lines[-1].startswith("running qemu-system:x86_64"), lines
        children = _children(proc.pid)
        assert len(children) == 2  # QEMU and gdb
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
    assert "k 0x100000: 0 hits, 0 missed" in out  # the summary is printed
    assert not [pid for pid in children if Path(f"/proc/{pid}").exists()]  # reaped


def test_probe_qemu_system_timeout_stops_a_running_target():
    require_tool("qemu-system-x86_64", "qemu-system-x86")
    require_tool("gdb-multiarch", "gdb-multiarch")
    result = invoke("probe", "--target", "qemu-system:x86_64", "--kprobe", "0x100000", "--timeout", "1")
    assert result.exit_code == 0, result.output  # a kernel (here: firmware) still running is no error
    assert "stopped after 1 s (--timeout)" in result.stdout


def test_probe_help_teaches_live_targets():
    result = invoke("probe", "--help")
    assert result.exit_code == 0
    out = result.stdout
    for text in ("--target", "qemu-user:PROG", "qemu-system:ARCH", "gdb://HOST:PORT", "--kretprobe", "--string-arg",
                 "--failed", "ret=-2 (ENOENT)", "130", "kpsdk probe --target qemu-user:arm",
                 "--kretprobe do_sys_openat2 --string-arg 2 --failed"):
        assert text in out, text


# -- the package: kpsdk/cli/ ---------------------------------------------------------------------


def test_former_names_of_kpsdk_cli_still_import():
    """kpsdk/cli.py became a package; every name its importers used resolves from ``kpsdk.cli``."""
    import kpsdk.cli as cli

    for module, names in cli._MOVED.items():
        for name in names.split():
            assert getattr(cli, name) is getattr(__import__(module, fromlist=[name]), name), name
    with pytest.raises(AttributeError):
        cli.no_such_name  # noqa: B018


def test_importing_the_cli_loads_no_plugin():
    """The shared modules (what ``kpsdk trace`` and plugins import) and the app's module build no
    registry: ``-p`` is applied first, and the registry is built once, by the app."""
    code = ("import kpsdk.registry as r, kpsdk.cli, kpsdk.cli.root, kpsdk.cli.options, kpsdk.cli.target_choice\n"
            "print(r._default is None)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "True", proc.stderr


def test_python_m_kpsdk_and_kpsdk_cli():
    for module in ("kpsdk", "kpsdk.cli"):
        proc = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout == f"kpsdk {kpsdk.__version__}\n", proc.stderr


def test_no_command_module_imports_another():
    """Commands depend on the shared modules of kpsdk/cli, never on one another; so does kpsdk trace.
    (``root`` adds every command, and the package's ``main`` runs ``root``.)"""
    import ast
    import re

    cli_dir = Path(kpsdk.__file__).parent / "cli"
    commands = {"archs", "plugins", "list", "disasm", "demo", "probe", "probe_run", "matrix"}
    entry = {"root", "__init__", "__main__"}
    shared = {p.stem for p in cli_dir.glob("*.py")} - commands - entry
    for path in cli_dir.glob("*.py"):
        if path.stem in entry:
            continue
        imported = {node.module.rpartition(".")[2] for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kpsdk.cli.")}
        allowed = shared | ({"probe_run"} if path.stem == "probe" else set())  # probe's run, its own part
        assert imported <= allowed, (path.name, imported - allowed)
    trace = (Path(kpsdk.__file__).parent / "trace" / "run.py").read_text()
    used = set(re.findall(r"from kpsdk\.cli\.(\w+) import", trace))
    assert used and used <= shared, used - shared
