"""The target-event hooks (kpsdk/events.py), seen from an out-of-tree plugin.

``examples/kpsdk-syscalls`` is installed by pip and used from a fresh
interpreter (``plugin_site.py``): its ``SyscallProbe`` type and ``kpsdk strace``
command exist only through ``kpsdk_syscall_entry``/``kpsdk_syscall_exit``.
The in-process tests below check what each hook receives against the
program's own output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kpsdk
from kpsdk import fixtures
from kpsdk.events import SyscallEvent
from kpsdk.registry import Registry
from kpsdk.session import Session
from tests.plugin_site import REPO, install, run, run_py

EXAMPLE = REPO / "examples" / "kpsdk-syscalls"


class Recorder:
    """A plugin that records every target event it is given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    @kpsdk.hookimpl
    def kpsdk_syscall_entry(self, session: Session, call: SyscallEvent) -> None:
        self.events.append(("entry", (call.name, call.args[0], call.result)))

    @kpsdk.hookimpl
    def kpsdk_syscall_exit(self, session: Session, call: SyscallEvent) -> None:
        self.events.append(("exit", (call.name, call.args[0], call.result)))

    @kpsdk.hookimpl
    def kpsdk_program_exit(self, session: Session, status: int) -> None:
        self.events.append(("program_exit", status))

    @kpsdk.hookimpl
    def kpsdk_library_loaded(self, session: Session, library: kpsdk.target.MappedFile) -> None:
        self.events.append(("library_loaded", library.path.name))

    @kpsdk.hookimpl
    def kpsdk_run_end(self, session: Session, reason: str, status: int | None) -> None:
        self.events.append(("run_end", (reason, status)))


def open_recorded(arch: str) -> tuple[Session, Recorder]:
    reg, rec = Registry(), Recorder()
    reg.pm.register(rec, name="recorder")
    spec = f"elf:{fixtures.path(arch)}"
    target = reg.target_kind("elf").open(spec.partition(":")[2], reg)
    s = Session(target, reg, spec)
    for library in target.mapped_files():  # as kpsdk.open does
        target.emit("library_loaded", library=library)
    return s, rec


def test_each_system_call_and_the_exit_reach_plugins(arch: str) -> None:
    s, rec = open_recorded(arch)
    assert s.run(timeout=10) == 0
    lines = fixtures.EXPECTED_OUTPUT.splitlines(keepends=True)
    writes = [(name, fd, len(line)) for line in lines for name, fd in [("write", 1)]]
    calls = [e for e in rec.events if e[0] in ("entry", "exit")]
    assert calls == [ev for w in writes for ev in (("entry", (w[0], w[1], None)), ("exit", w))] + [
        ("entry", ("exit_group", 0, None))]
    assert rec.events[0] == ("library_loaded", fixtures.path(arch).name)
    assert rec.events[-2:] == [("program_exit", 0), ("run_end", ("exited", 0))]


def test_a_stopped_run_and_a_failed_one_end_with_their_reason() -> None:
    s, rec = open_recorded("x86_64")
    kp = s.register_kprobe(kpsdk.Kprobe(symbol_name="fact", pre_handler=lambda p, regs: s.stop() or 0))
    assert s.run(timeout=10) is None
    s.unregister_kprobe(kp)
    s.register_kprobe(kpsdk.Kprobe(symbol_name="loop", pre_handler=lambda p, regs: 1 // 0))
    with pytest.raises(kpsdk.ProbeHandlerError):
        s.run(timeout=10)
    assert [e for e in rec.events if e[0] == "run_end"] == [("run_end", ("stopped", None)),
                                                           ("run_end", ("error", None))]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(EXAMPLE, tmp_path_factory.mktemp("kpsdk-syscalls"))


@pytest.mark.parametrize("arch", ["x86_64", "riscv64", "thumb"])
def test_a_third_party_syscall_probe_type(site: Path, arch: str) -> None:
    out = run_py(site, f"""
        import json, kpsdk
        from kpsdk.fixtures import path
        s = kpsdk.open("elf:" + str(path({arch!r})))
        seen = []
        sp = kpsdk.SyscallProbe(name="write", entry_handler=lambda sp, call: seen.append(("in", call.args[0])),
                                exit_handler=lambda sp, call: seen.append(("out", call.result)))
        s.register_syscallprobe(sp)

        @s.syscallprobe("exit_group")
        def never(sp, call):  # exit_group has no exit: the program is gone
            seen.append("exit_group returned")

        status = s.run()
        print(json.dumps(dict(status=status, seen=seen, hits=sp.hits, list=s.list(), console=s.console)))
    """)
    lengths = [len(line) for line in fixtures.EXPECTED_OUTPUT.splitlines(keepends=True)]
    assert out["status"] == 0 and out["console"] == fixtures.EXPECTED_OUTPUT
    assert out["seen"] == [ev for n in lengths for ev in (["in", 1], ["out", n])]
    assert out["hits"] == len(lengths)
    assert "s  syscall:write" in out["list"] and "s  syscall:exit_group" in out["list"]


def test_kpsdk_strace_from_the_plugin(site: Path) -> None:
    proc = run(site, ["-m", "kpsdk", "strace", "arm"])
    lines = proc.stdout.splitlines()
    expected = fixtures.EXPECTED_OUTPUT.splitlines(keepends=True)
    assert len(lines) == len(expected) + 1 and lines[-1] == "+++ exited with 0 +++"
    for line, text in zip(lines, expected, strict=False):
        assert line.startswith("write(1, 0x") and line.endswith(f") = {len(text)}")
