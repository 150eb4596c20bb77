"""The ftrace definition grammar (kpsdk.trace.grammar): every form accepted, every documented error
rejected with the kernel's message and the column its error_log caret points at."""

from __future__ import annotations

import pytest

import kpsdk
from kpsdk.trace.grammar import (
    MAX_TRACE_ARGS,
    MESSAGES,
    Parser,
    TraceDefinitionError,
    parse,
    parse_lines,
)


@pytest.fixture(scope="module")
def archs() -> dict[str, kpsdk.arch.Arch]:
    reg = kpsdk.get_registry()
    return {name: reg.archs.get(name) for name in ("x86_64", "i386", "arm", "riscv64", "ppc64")}


def test_kprobe_defaults_and_names() -> None:
    d = parse("p do_sys_open")
    assert (d.op, d.group, d.event, d.symbol, d.offset, d.args) == ("p", "kprobes", "p_do_sys_open_0", "do_sys_open",
                                                                    0, ())
    d = parse("p:myprobe do_sys_open+0x10")
    assert (d.event, d.offset, d.explicit_event) == ("myprobe", 16, True)
    d = parse("p:grp/ev vfs_read+8")
    assert (d.group, d.event, d.full_name) == ("grp", "ev", "grp/ev")
    assert parse("p:grp.ev vfs_read").group == "grp"  # the kernel also takes GRP.EVENT
    assert parse("p:grp/ vfs_read").event == "p_vfs_read_0"  # group only: the event name is generated
    d = parse("p 0xffffffff81000000")
    assert (d.addr, d.symbol, d.event) == (0xFFFFFFFF81000000, None, "p_0xffffffff81000000")
    d = parse("p ext4:ext4_sync_file")
    assert (d.module, d.symbol) == ("ext4", "ext4_sync_file")


def test_return_probes() -> None:
    d = parse("r do_sys_open $retval")
    assert (d.op, d.event, d.maxactive, d.is_return) == ("r", "r_do_sys_open_0", 0, True)
    d = parse("r100:ret do_sys_open")
    assert (d.maxactive, d.event) == (100, "ret")
    assert parse("r4096 f").maxactive == 4096
    d = parse("p:ret2 do_sys_open%return $retval")
    assert (d.op, d.event) == ("r", "ret2")
    assert parse("p f%return").event == "r_f_0"


def test_clear() -> None:
    d = parse("-:myprobe")
    assert (d.op, d.event, d.group) == ("-", "myprobe", "")
    d = parse("-:grp/myprobe")
    assert (d.group, d.event) == ("grp", "myprobe")


def test_uprobes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prog = tmp_path / "my-prog.elf"
    prog.write_bytes(b"\x7fELF")
    d = parse(f"p {prog}:0x4d0 %ip %ax")
    assert (d.group, d.event, d.path, d.offset, d.is_uprobe) == ("uprobes", "p_my_0x4d0", str(prog), 0x4D0, True)
    d = parse(f"r:u/ret {prog}:0x10 $retval")
    assert (d.op, d.group, d.event) == ("r", "u", "ret")
    assert parse(f"p {prog}:1234%return").op == "r"
    assert parse(f"p {prog}:0x10 x=@+0x20:u32").args[0].fetch.kind == "foffs"


def test_every_fetcharg_form(archs: dict[str, kpsdk.arch.Arch]) -> None:
    d = Parser(archs["x86_64"]).parse(
        "p:ev f a=%di b=%rsi c=@0x1000 d=@jiffies e=@jiffies+8 f=@jiffies-0x10 g=$stack3 h=$stack "
        "i=$arg1 j=$comm k=+8(%di) l=-0x10(+4(%sp)) m=+u0(%si):ustring n=\\42 o=\\-1 p=\\\"hi\" %ax")
    kinds = {a.name: a.fetch.kind for a in d.args}
    assert kinds == {"a": "reg", "b": "reg", "c": "mem", "d": "sym", "e": "sym", "f": "sym", "g": "stack",
                     "h": "stackp", "i": "arg", "j": "comm", "k": "deref", "l": "deref", "m": "deref", "n": "imm",
                     "o": "imm", "p": "immstr", "arg17": "reg"}
    by = {a.name: a for a in d.args}
    assert by["e"].fetch.value == 8 and by["f"].fetch.value == -16
    assert by["g"].fetch.index == 3 and by["i"].fetch.index == 1
    inner = by["l"].fetch
    assert inner.value == -16 and inner.inner is not None and inner.inner.value == 4
    assert inner.inner.inner is not None and inner.inner.inner.name == "sp"
    assert by["m"].fetch.user and by["m"].type.name == "ustring"
    assert by["n"].fetch.value == 42 and by["o"].fetch.value == (1 << 64) - 1
    assert by["p"].fetch.text == "hi" and by["j"].type.name == "string" and by["p"].type.name == "string"
    assert by["a"].type.name == "x64" and by["a"].type.default  # no type: x64 on a 64-bit arch
    assert Parser(archs["i386"]).parse("p f %ax").args[0].type.name == "x32"


def test_every_type() -> None:
    d = parse("p f a=+0(%di):u8 b=+0(%di):s16 c=+0(%di):x32 d=+0(%di):u64 e=+0(%di):char f=+0(%di):string "
              "g=+0(%di):ustring h=%di:symbol i=%di:symstr j=+0(%di):b4@3/8 k=+0(%di):u32[4] l=+0(%di):string[2] "
              "m=+0(%di):b1@63/64 n=%di:s64")
    t = {a.name: a.type for a in d.args}
    assert (t["a"].size, t["a"].signed) == (1, False) and (t["b"].size, t["b"].signed) == (2, True)
    assert t["c"].display == "x" and t["e"].display == "char"
    assert t["f"].is_string and t["g"].is_string and t["i"].is_string and t["h"].display == "symbol"
    assert t["j"].bitfield == (4, 3) and t["j"].size == 1 and t["m"].bitfield == (1, 63)
    assert t["k"].count == 4 and t["l"].count == 2


def test_register_names_per_arch(archs: dict[str, kpsdk.arch.Arch]) -> None:
    accepted = {
        "x86_64": ("ax", "di", "si", "sp", "ip", "flags", "r8", "rdi", "rax", "rip"),
        "i386": ("ax", "dx", "cx", "sp", "ip", "eax", "esp"),
        "arm": ("r0", "r3", "fp", "ip", "sp", "lr", "pc", "cpsr"),
        "riscv64": ("a0", "a7", "ra", "sp", "s0", "fp", "t6", "x10", "epc"),
        "ppc64": ("r3", "gpr3", "r31", "gpr31", "nip", "link", "ctr", "ccr", "msr"),
    }
    for arch, names in accepted.items():
        parser = Parser(archs[arch])
        for name in names:
            assert parser.parse(f"p f x=%{name}").args[0].fetch.name == name
    for arch, bad in (("x86_64", "a0"), ("riscv64", "di"), ("arm", "r16"), ("ppc64", "gpr32"), ("i386", "r8")):
        with pytest.raises(TraceDefinitionError) as e:
            Parser(archs[arch]).parse(f"p f x=%{bad}")
        assert e.value.code == "BAD_REG_NAME" and e.value.column == len("p f x=")


def test_limits_accepted_at_the_edge() -> None:
    args = " ".join(f"a{i}=%di" for i in range(MAX_TRACE_ARGS))
    assert len(parse(f"p f {args}").args) == MAX_TRACE_ARGS
    assert parse("p:" + "e" * 63 + " f").event == "e" * 63
    assert parse("p f " + "n" * 32 + "=%di").args[0].name == "n" * 32
    assert parse("p f +0(%di):u8[64]").args[0].type.count == 64
    nested = "%di"
    for _ in range(12):
        nested = f"+0({nested})"
    assert parse(f"p f {nested}").args[0].fetch.kind == "deref"


def test_file_of_definitions() -> None:
    defs = parse_lines("# comment\np:a f\n\n  r:b f $retval\n-:a\n")
    assert [d.op for d in defs] == ["p", "r", "-"]


# (definition, kernel error code, the column (0-based) the caret points at)
ERRORS = [
    ("x f", "BAD_PROBE_TYPE", 0),
    ("p", "NO_PROBE_POINT", 2),
    ("p5:ev f", "MAXACT_NO_KPROBE", 1),
    ("r0 f", "BAD_MAXACT", 1),
    ("r0x:ev f", "BAD_MAXACT", 1),
    ("r4097 f", "MAXACT_TOO_BIG", 1),
    ("p:/ev f", "NO_GROUP_NAME", 2),
    ("p:" + "g" * 64 + "/ev f", "GROUP_TOO_LONG", 2),
    ("p:1g/ev f", "BAD_GROUP_NAME", 2),
    ("p: f", "NO_EVENT_NAME", 2),
    ("p:g/" + "e" * 64 + " f", "EVENT_TOO_LONG", 4),
    ("p:g/e-v f", "BAD_EVENT_NAME", 4),
    ("-:", "NO_EVENT_NAME", 2),
    ("-ev", "NO_EVENT_NAME", 1),
    ("p:ev f-4", "BAD_PROBE_ADDR", 5),
    ("p:ev f+zz", "BAD_PROBE_ADDR", 5),
    ("p:ev 9f", "BAD_PROBE_ADDR", 5),
    ("r:ev f+4", "BAD_RETPROBE", 5),
    ("p:ev f+4%return", "BAD_RETPROBE", 5),
    ("p:ev f%ret", "BAD_ADDR_SUFFIX", 6),
    ("r:ev f%return", "BAD_ADDR_SUFFIX", 6),
    ("p:ev f x=$retval", "RETVAL_ON_PROBE", 9),
    ("p:ev f x=$stack9999", "BAD_STACK_NUM", 9),
    ("p:ev f x=$stackx", "BAD_VAR", 9),
    ("p:ev f x=$arg0", "BAD_ARG_NUM", 9),
    ("p:ev f x=$argx", "BAD_VAR", 9),
    ("p:ev f+8 x=$arg1", "NOFENTRY_ARGS", 11),
    ("p:ev f x=$foo", "BAD_VAR", 9),
    ("p:ev f x=%", "BAD_REG_NAME", 9),
    ("p:ev f x=@0xzz", "BAD_MEM_ADDR", 9),
    ("p:ev f x=@9zz", "BAD_MEM_ADDR", 9),
    ("p:ev f x=@sym+zz", "BAD_MEM_ADDR", 9),
    ("p:ev f x=@+0x10", "FILE_ON_KPROBE", 9),
    ("p:ev f x=\\zz", "BAD_IMM", 10),
    ('p:ev f x=\\"abc', "IMMSTR_NO_CLOSE", 14),
    ("p:ev f x=+8%di", "DEREF_NEED_BRACE", 9),
    ("p:ev f x=+zz(%di)", "BAD_DEREF_OFFS", 9),
    ("p:ev f x=+8(%di", "DEREF_OPEN_BRACE", 15),
    ("p:ev f x=+8($comm)", "COMM_CANT_DEREF", 12),
    ("p:ev f x=#", "BAD_FETCH_ARG", 9),
    ("p:ev f x=+8()", "BAD_FETCH_ARG", 12),
    ("p:ev f x=%di)", "BAD_FETCH_ARG", 12),
    ("p:ev f x=+0(%di):u8[4", "ARRAY_NO_CLOSE", 21),
    ("p:ev f x=+0(%di):u8[4]x", "BAD_ARRAY_SUFFIX", 22),
    ("p:ev f x=+0(%di):u8[0]", "BAD_ARRAY_NUM", 20),
    ("p:ev f x=+0(%di):u8[65]", "ARRAY_TOO_BIG", 20),
    ("p:ev f x=%di:u128", "BAD_TYPE", 13),
    ("p:ev f x=%di:b4@2", "BAD_BITFIELD", 13),
    ("p:ev f x=%di:b0@2/8", "BAD_BITFIELD", 13),
    ("p:ev f x=+0(%di):b6@4/8", "BAD_BITFIELD", 17),
    ("p:ev f x=+0(%di):b4@0/7", "BAD_TYPE", 17),
    ("p:ev f x=%di:string", "BAD_STRING", 13),
    ("p:ev f x=%di:u8[2]", "BAD_STRING", 13),
    ("p:ev f x=$comm:u32", "NEED_STRING_TYPE", 15),
    ("p:ev f x=\\1:symstr", "BAD_SYMSTRING", 12),
    ("p:ev f " + "n" * 33 + "=%di", "ARG_NAME_TOO_LONG", 7),
    ("p:ev f =%di", "NO_ARG_NAME", 7),
    ("p:ev f 1x=%di", "BAD_ARG_NAME", 7),
    ("p:ev f x=%di x=%si", "USED_ARG_NAME", 13),
    ("p:ev f common_pid=%di", "USED_ARG_NAME", 7),
    ("p:ev f x=+0(" + "+0(" * 5 + "%di" + ")" * 6 + ":" + "u" * 40, "ARG_TOO_LONG", 9),
    ("p:ev f x=", "NO_ARG_BODY", 9),
    ("p:ev f " + " ".join(f"a{i}=%di" for i in range(129)), "TOO_MANY_ARGS", -1),
    ("p:ev f x=" + "+0(" * 15 + "%di" + ")" * 15, "TOO_MANY_OPS", 12),  # at the 2nd: the 14th from the load
]


@pytest.mark.parametrize(("definition", "code", "column"), ERRORS, ids=[f"{c}-{i}" for i, (_, c, _) in
                                                                         enumerate(ERRORS)])
def test_errors_point_at_the_column(definition: str, code: str, column: int,
                                    archs: dict[str, kpsdk.arch.Arch]) -> None:
    with pytest.raises(TraceDefinitionError) as e:
        Parser(archs["x86_64"]).parse(definition)
    err = e.value
    if column < 0:  # the 129th argument
        column = definition.index("a128=")
    assert (err.code, err.column) == (code, column), err.error_log
    assert err.message == MESSAGES[code]
    lines = err.error_log.splitlines()
    assert lines[0].endswith(f"error: {MESSAGES[code]}")
    assert lines[1] == f"  Command: {definition}"
    assert lines[2] == " " * (len("  Command: ") + column) + "^"
    assert isinstance(err, kpsdk.KpsdkError) and isinstance(err, ValueError)


def test_uprobe_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    prog = tmp_path / "prog"
    prog.write_bytes(b"\x7fELF")
    cases = [
        (f"p {tmp_path}/missing:0x10", "FILE_NOT_FOUND", 2),
        (f"p {tmp_path}:0x10", "NO_REGULAR_FILE", 2),
        (f"p {prog}:0x1zz", "BAD_UPROBE_OFFS", 3 + len(str(prog))),
        (f"p {prog}:0x10%ret", "BAD_ADDR_SUFFIX", 3 + len(str(prog)) + 4),
        (f"p {prog}:0x10(0x20)", "BAD_UPROBE_OFFS", 3 + len(str(prog)) + 4),
        (f"r2 {prog}:0x10", "MAXACT_NO_KPROBE", 1),
        (f"p {prog}:0x10 x=@sym", "SYM_ON_UPROBE", 3 + len(str(prog)) + 7),
        (f"p {prog}:0x10 x=@+zz", "BAD_FILE_OFFS", 3 + len(str(prog)) + 7),
        (f"p {prog}:0x10 x=%ax:symbol", "BAD_TYPE", 3 + len(str(prog)) + 11),
    ]
    for definition, code, column in cases:
        with pytest.raises(TraceDefinitionError) as e:
            parse(definition)
        assert (e.value.code, e.value.column, e.value.subsystem) == (code, column, "trace_uprobe"), definition


def test_no_eval_of_anything() -> None:
    with pytest.raises(TraceDefinitionError) as e:
        parse("p f x=__import__('os')")
    assert e.value.code == "BAD_FETCH_ARG"


# -- the grammar follows the target kernel's version ($argN) ---------------------------------------

#: (kernel, definition) -> the error code, None (accepted).  6.1 is checked against the kernel itself
#: in test_trace_grammar_kernel.py; the other rows follow trace_probe.c of 6.5 (NOFENTRY_ARGS,
#: BTF arguments) and 6.9 ($argN in return probes).
ARG_RULES = [
    (None, "r vfs_read $arg2", None), (None, "p vfs_read+4 $arg1", "NOFENTRY_ARGS"),
    ((6, 1), "r vfs_read $arg2", "BAD_VAR"), ((6, 1), "r vfs_read $arg0", "BAD_VAR"),
    ((6, 1), "p vfs_read $arg2", None), ((6, 1), "p vfs_read $arg0", "BAD_ARG_NUM"),
    ((6, 1), "p vfs_read+4 $arg1", "BAD_VAR"), ((5, 10), "r vfs_read a=$arg1", "BAD_VAR"),
    ((6, 6), "r vfs_read $arg2", "NOFENTRY_ARGS"), ((6, 6), "p vfs_read+4 $arg1", "NOFENTRY_ARGS"),
    ((6, 6), "r vfs_read $arg0", "BAD_ARG_NUM"),
    ((6, 12), "r vfs_read $arg2", None), ((6, 12), "p vfs_read $arg2", None),
    ((6, 12), "p vfs_read+4 $arg1", "NOFENTRY_ARGS"),
]


@pytest.mark.parametrize(("kernel", "definition", "code"), ARG_RULES)
def test_arg_rules_follow_the_kernel_version(kernel: tuple[int, int] | None, definition: str,
                                             code: str | None) -> None:
    """The kernel's error_log (message, caret under the ``$``) where that kernel refuses, or the
    definition taken where it takes it."""
    parser = Parser(kernel=kernel)
    if code is None:
        assert [a.fetch.kind for a in parser.parse(definition).args] == ["arg"]
        return
    with pytest.raises(TraceDefinitionError) as e:
        parser.parse(definition)
    column = definition.index("$")
    assert (e.value.code, e.value.column) == (code, column)
    assert e.value.error_log.splitlines()[1:] == [f"  Command: {definition}",
                                                  " " * (len("  Command: ") + column) + "^"]
    assert e.value.error_log.splitlines()[0].endswith(f"error: {MESSAGES[code]}")


def test_an_arm_kernel_has_no_argument_access(archs: dict[str, kpsdk.arch.Arch]) -> None:
    """32-bit arm kernels refuse $argN anywhere (no HAVE_FUNCTION_ARG_ACCESS_API; test_kernel_arches.py
    checks it against Debian's armmp 6.1); kpsdk's own arm targets read it."""
    with pytest.raises(TraceDefinitionError) as e:
        Parser(archs["arm"], kernel=(6, 1)).parse("p do_sys_openat2 $arg1")
    assert (e.value.code, e.value.column) == ("BAD_VAR", len("p do_sys_openat2 "))
    assert [a.fetch.kind for a in Parser(archs["arm"]).parse("p do_sys_openat2 $arg1").args] == ["arg"]
    assert [a.fetch.kind for a in Parser(archs["i386"], kernel=(6, 1)).parse("p f $arg1").args] == ["arg"]


def test_the_version_comes_from_the_banner(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A vmlinux's ``linux_banner`` gives the version; a file without one (System.map) none."""
    from kpsdk.kernel.version import banner_version, kernel_version

    image = tmp_path / "vmlinux"
    image.write_bytes(b"\x7fELF" + b"\0" * 100 + b"Linux version 6.12.107+deb13-riscv64 (debian-kernel@lists) #1\0")
    assert kernel_version(image) == (6, 12)
    smap = tmp_path / "System.map"
    smap.write_text("ffffffff81000000 T _text\n")
    assert kernel_version(smap) is None
    assert kernel_version(tmp_path / "missing") is None
    assert banner_version(b"Linux version %s (%s)") is None  # a format string is no banner
