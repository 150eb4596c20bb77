"""kpsdk's signal frames against the frames Linux builds (kpsdk/targets/unicorn/linux/sigframes).

Ground truth: tests/programs/sigframe.c, cross-built static for each architecture and run
under qemu-user (QEMU implements Linux's frames; aarch64 on a CPU without SVE, like
Unicorn's), and on an x86_64 host also natively (the host's own kernel builds the x86_64
and i386 frames).  The program prints the layouts its C
library declares, and for each case (a handler installed with some sa_flags) the registers it
loaded before sending itself SIGUSR1, the registers the handler's entry found, the frame as
built, and the registers after the handler changed one saved general and one saved FP
register and returned.  Each test gives :func:`push_frame` the same registers on a fake CPU
and compares, byte by byte, what it wrote with what the kernel wrote, relative to the
handler's stack pointer (or, where the two put a part elsewhere, relative to the pointer
to it); then it makes the handler's change in kpsdk's frame, pops it, and compares the
registers with the ones the program saw after its sigreturn.

The differences accepted are listed in :data:`ACCEPTED`, each with the reason: most are
places where QEMU 7.2 is not Linux (it leaves fields unwritten, or writes its own values),
and a few are the host CPU's (its XSAVE image is larger than the x87+SSE one kpsdk's CPU has).
"""

from __future__ import annotations

import os
import platform
import re
import struct
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

import kpsdk
from kpsdk.targets.unicorn.linux import sigframes as sf
from kpsdk.targets.unicorn.linux.sigframes import aarch64 as sf_a64
from kpsdk.targets.unicorn.linux.sigframes import arm as sf_arm
from kpsdk.targets.unicorn.linux.sigframes import ppc64 as sf_ppc
from kpsdk.targets.unicorn.linux.sigframes import riscv as sf_riscv
from kpsdk.targets.unicorn.linux.sigframes import x86 as sf_x86
from tests.conftest import require_tool

SOURCE = Path(__file__).parent / "programs" / "sigframe.c"
PAINT = 0xA5  #: the program paints the stack below the interrupted sp with this
SIGUSR1 = 10
BLOCKED = (1 << 11) | (1 << 41)  #: SIGUSR2 and signal 42, blocked when the signal is sent


@dataclass(frozen=True)
class Target:
    """How to build and run the ground-truth program for one architecture."""

    arch: str
    gcc: str
    gcc_package: str
    qemu: str
    cflags: tuple[str, ...] = ()
    #: glibc installs every handler with SA_RESTORER and its own restorer
    glibc_restorer: bool = False
    #: qemu-user's CPU: aarch64's default has SVE, whose record kpsdk's CPU (Unicorn's) has not
    qemu_cpu: str = ""


TARGETS = {
    "x86_64": Target("x86_64", "x86_64-linux-gnu-gcc", "gcc-x86-64-linux-gnu", "qemu-x86_64", glibc_restorer=True),
    "i386": Target("i386", "i686-linux-gnu-gcc", "gcc-i686-linux-gnu", "qemu-i386", glibc_restorer=True),
    "arm": Target("arm", "arm-linux-gnueabihf-gcc", "gcc-arm-linux-gnueabihf", "qemu-arm", ("-marm",),
                  glibc_restorer=True),
    "riscv64": Target("riscv64", "riscv64-linux-gnu-gcc", "gcc-riscv64-linux-gnu", "qemu-riscv64"),
    "ppc64": Target("ppc64", "powerpc64-linux-gnu-gcc", "gcc-powerpc64-linux-gnu", "qemu-ppc64"),
    "ppc64le": Target("ppc64le", "powerpc64le-linux-gnu-gcc", "gcc-powerpc64le-linux-gnu", "qemu-ppc64le"),
    "aarch64": Target("aarch64", "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu", "qemu-aarch64",
                      qemu_cpu="cortex-a57"),
}
ORDER = {"ppc64": ">"}
WORD = {"i386": 4, "arm": 4}
SP = {"x86_64": "rsp", "i386": "esp", "ppc64": "r1", "ppc64le": "r1"}
PC = {"x86_64": "rip", "i386": "eip"}


# -- running the program -------------------------------------------------------------------

@dataclass
class Case:
    name: str
    values: dict[str, str] = field(default_factory=dict)

    def int(self, key: str) -> int:
        return int(self.values[key].split()[0], 16)

    def bytes(self, key: str) -> bytes:
        return bytes.fromhex(self.values[key])


@dataclass
class Run:
    arch: str
    kernel: str  #: "qemu" or "native"
    head: dict[str, str]
    offsets: dict[str, int]
    cases: dict[str, Case]


def parse(arch: str, kernel: str, text: str) -> Run:
    head: dict[str, str] = {}
    offsets: dict[str, int] = {}
    cases: dict[str, Case] = {}
    case: Case | None = None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "case":
            case = cases[value] = Case(value)
        elif key == "end":
            case = None
        elif key in ("off", "size"):
            name, number = value.split()
            offsets[f"{key}.{name}" if key == "size" else name] = int(number, 16)
        elif case is not None:
            case.values[key] = value
        else:
            head[key] = value
    return Run(arch, kernel, head, offsets, cases)


def build(target: Target, out: Path) -> Path:
    gcc = require_tool(target.gcc, target.gcc_package)
    exe = out / f"sigframe-{target.arch}"
    if not exe.exists():
        subprocess.run([gcc, "-static", "-O1", "-fno-pie", "-no-pie", *target.cflags, "-o", str(exe), str(SOURCE)],
                       check=True, timeout=300, capture_output=True)
    return exe


_RUNS: dict[tuple[str, str], Run] = {}


def ground_truth(arch: str, kernel: str, tmp: Path) -> Run:
    """The program's output for ``arch`` under qemu-user, or run natively (x86 hosts)."""
    key = (arch, kernel)
    if key not in _RUNS:
        target = TARGETS[arch]
        exe = build(target, tmp)
        if kernel == "native":
            if platform.machine() != "x86_64" or arch not in ("x86_64", "i386"):
                pytest.skip(f"{arch} frames from the host kernel need an x86_64 host")
            cmd = [str(exe)]
        else:
            cmd = [require_tool(target.qemu, "qemu-user"), str(exe)]
        env = {**os.environ, "QEMU_CPU": target.qemu_cpu} if target.qemu_cpu and kernel == "qemu" else None
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        if kernel == "native" and done.returncode and arch == "i386":
            pytest.skip(f"the host kernel does not run i386 programs: {done.stderr.strip()[:200]}")
        assert done.returncode == 0, done.stderr
        _RUNS[key] = parse(arch, kernel, done.stdout)
    return _RUNS[key]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sigframes")


# -- a fake CPU ------------------------------------------------------------------------------

class FakeCpu:
    """Registers in a dict, memory that reads :data:`PAINT` where nothing was written
    (as the program's painted stack does), and a record of the bytes written."""

    def __init__(self, regs: dict[str, int]) -> None:
        self.regs = dict(regs)
        self.mem: dict[int, int] = {}
        self.written: set[int] = set()

    def reg(self, name: str) -> int:
        return self.regs[name]

    def set_reg(self, name: str, value: int) -> None:
        self.regs[name] = value

    def read(self, addr: int, size: int) -> bytes:
        return bytes(self.mem.get(a, PAINT) for a in range(addr, addr + size))

    def write(self, addr: int, data: bytes) -> None:
        for i, b in enumerate(data):
            self.mem[addr + i] = b
            self.written.add(addr + i)


def _unpack(order: str, fmt: str, data: bytes, at: int = 0) -> tuple[int, ...]:
    return struct.unpack_from(order + fmt, data, at)


def x86_fp(image: bytes, wide: bool, nxmm: int) -> dict[str, int]:
    """FP registers from an FXSAVE image (64-bit or 32-bit form) as a FrameCpu names them."""
    fcw, fsw, ftw, fop = _unpack("<", "HHBxH", image)
    fip, fdp = _unpack("<", "QQ" if wide else "IxxxxIxxxx", image, 8)
    top = (fsw >> 11) & 7
    st = [int.from_bytes(image[32 + 16 * i:42 + 16 * i], "little") for i in range(8)]
    phys = [st[(i - top) & 7] for i in range(8)]
    out = {"fpcw": fcw, "fpsw": fsw, "fptag": sf_x86.full_tag(ftw, phys), "fop": fop, "fip": fip, "fdp": fdp,
           "mxcsr": _unpack("<", "I", image, 24)[0]}
    out.update({f"fp{i}": phys[i] for i in range(8)})
    out.update({f"xmm{i}": int.from_bytes(image[160 + 16 * i:176 + 16 * i], "little") for i in range(nxmm)})
    return out


def fp_regs(arch: str, image: bytes) -> dict[str, int]:
    """The FP registers in the program's FP snapshot format for ``arch``."""
    order = ORDER.get(arch, "<")
    if arch == "x86_64":
        return x86_fp(image, True, 16)
    if arch == "i386":
        return x86_fp(image, False, 8)
    if arch == "arm":
        out = {f"d{i}": v for i, v in enumerate(_unpack("<", "32Q", image))}
        out["fpscr"] = _unpack("<", "I", image, 256)[0]
        return out
    if arch == "aarch64":
        out = {f"v{i}": int.from_bytes(image[16 * i:16 * i + 16], "little") for i in range(32)}
        out["fpsr"], out["fpcr"] = _unpack("<", "II", image, 512)
        return out
    out = {f"f{i}": v for i, v in enumerate(_unpack(order, "32Q", image))}
    if arch == "riscv64":
        out["fcsr"] = _unpack("<", "I", image, 256)[0]
    else:  # mffs: the FPSCR in the low word of the double
        out["fpscr"] = _unpack(order, "Q", image, 256)[0] & 0xFFFFFFFF
    return out


def reg_names(case: Case) -> list[str]:
    return [k[4:] for k in case.values if k.startswith("pre.")]


def anchor_of(arch: str, kernel: str, rt: bool, reg: Callable[[str], int]) -> int:
    """Where the frame is compared from: the handler's stack pointer, or on ppc64 the
    ucontext (the frame's start: Linux and QEMU put the dummy caller frame below it at
    different distances).  Without SA_SIGINFO Linux passes ppc64's ucontext as
    &uc_mcontext in r4; QEMU 7.2 passes it in r5 as for SA_SIGINFO."""
    if not arch.startswith("ppc64"):
        return reg(SP.get(arch, "sp"))
    return reg("r5") if rt or kernel == "qemu" else reg("r4") - sf_ppc.UC_MCONTEXT


def ucontext_at(arch: str, kernel: str, rt: bool, reg: Callable[[str], int]) -> int:
    """The ucontext's address (for the old frames: where the sigcontext would be in one)."""
    lay = sf.frame_layout(arch)
    base = anchor_of(arch, kernel, rt, reg)
    if arch == "i386" and not rt:
        return base + sf_x86.SC_32_OLD - lay["uc_mcontext"]
    if arch == "arm" and not rt:
        return base
    return base if arch.startswith("ppc64") else base + lay["frame.uc"]


def entry_reader(case: Case) -> Callable[[str], int]:
    return lambda name: case.int(f"entry.{name}")


def saved_word(run: Run, case: Case, uc_offset: int) -> int:
    """A word of the kernel's frame, at ``uc_offset`` from its ucontext."""
    arch = run.arch
    rt = bool(int(case.values["flags"], 16) & sf.SA_SIGINFO)
    uc = ucontext_at(arch, run.kernel, rt, entry_reader(case)) - case.int("frame_sp")
    word = WORD.get(arch, 8)
    return _unpack(ORDER.get(arch, "<"), "Q" if word == 8 else "I", case.bytes("frame"), uc + uc_offset)[0]


def delivery_state(run: Run, case: Case) -> dict[str, int]:
    """The registers when the signal was delivered: after the signal returned, the
    program's registers are the delivery's, but for the one the handler changed."""
    arch = run.arch
    regs = {n: case.int(f"post.{n}") for n in reg_names(case)}
    victim = case.values["victim"].split()[0]
    regs[victim] = case.int(f"pre.{victim}")
    regs[SP.get(arch, "sp")] = case.int("pre_sp")
    regs[PC.get(arch, "pc")] = case.int("after_syscall")
    regs.update(fp_regs(arch, case.bytes("fp_pre")))
    seg = case.bytes("post_seg")
    lay = sf.frame_layout(arch)
    if arch == "x86_64":
        regs["eflags"] = case.int("post_flags")
        regs["cs"], regs["ss"] = _unpack("<", "HH", seg)
    elif arch == "i386":
        regs["eflags"] = case.int("post_flags")
        for i, name in enumerate(("gs", "fs", "es", "ds", "cs", "ss")):
            regs[name] = _unpack("<", "H", seg, 2 * i)[0]
    elif arch == "arm":
        regs["cpsr"] = case.int("post_flags") | sf_arm.USR_MODE
        regs["fpexc"] = sf_arm.FPEXC_EN
    elif arch == "aarch64":
        regs["pstate"] = case.int("post_flags")  # NZCV; EL0t
    elif arch == "riscv64":
        for name in ("gp", "tp"):  # not touched by the program: as the frame has them
            regs[name] = saved_word(run, case, lay[f"reg.{name}"])
    else:
        gp = lay["mc.gp_regs"]
        for i in (2, 13):
            regs[f"r{i}"] = saved_word(run, case, gp + 8 * i)
        regs["msr"] = saved_word(run, case, gp + 8 * sf_ppc.PT_MSR)
    return regs


# -- one delivery through kpsdk ---------------------------------------------------------------

def push(run: Run, case: Case) -> FakeCpu:
    """kpsdk's delivery of the case's signal, on a fake CPU holding the delivery's registers."""
    arch = run.arch
    regs = delivery_state(run, case)
    cpu = FakeCpu(regs)
    flags = int(case.values["flags"], 16)
    handler = case.int("handler")
    restorer = 0
    if TARGETS[arch].glibc_restorer:
        flags |= sf.SA_RESTORER
        restorer = case.int("entry.ret") if arch in ("x86_64", "i386") else case.int("entry.lr")
    code = 0
    if arch == "riscv64":
        code = case.int("entry.ra")
    elif arch == "aarch64":
        code = case.int("entry.x30")
    elif arch.startswith("ppc64"):
        code = case.int("entry.lr") - 4  # the handler's lr is after the trampoline's bctrl
    if arch == "ppc64":
        cpu.write(handler, struct.pack(">QQ", *(int(w, 16) for w in case.values["handler_words"].split())))
        cpu.written.clear()
    # the task's sigaltstack: never set in the first case, the program's during "onstack",
    # disabled after it
    alt = None
    if case.values["altstack"].split()[0] != "0":
        alt_sp, alt_size = (int(v, 16) for v in case.values["altstack"].split())
        alt = sf.AltStack(alt_sp, alt_size, 0)
    elif list(run.cases).index(case.name) > list(run.cases).index("onstack"):
        alt = sf.AltStack(0, 0, sf.SS_DISABLE)
    info = sf.siginfo_kill(arch, SIGUSR1, pid=case.int("pid"), uid=case.int("uid"), code=-6)
    sf.push_frame(arch, cpu, sig=SIGUSR1, info=info, handler=handler, flags=flags, restorer=restorer,
                  blocked=BLOCKED, altstack=alt, sigreturn_code_addr=code)
    if arch.startswith("ppc64"):  # run the trampoline's bctrl
        cpu.regs["lr"] = cpu.regs["pc"] + 4
        cpu.regs["pc"] = cpu.regs["ctr"]
    return cpu


# -- comparing frames --------------------------------------------------------------------------

@dataclass(frozen=True)
class Region:
    """A part of a frame both sides have, found on each side from the frame's anchor."""

    name: str
    #: (anchor, read word, side: "kpsdk", "qemu" or "native") -> address
    start: Callable[[int, Callable[[int], int], str], int]
    size: int
    #: offsets of words holding addresses in the frame (compared as distances from the anchor)
    pointers: tuple[int, ...] = ()


def regions(arch: str, rt: bool) -> list[Region]:
    lay = sf.frame_layout(arch)
    at_anchor: Callable[[int, Callable[[int], int], str], int] = lambda a, rd, side: a  # noqa: E731
    if arch == "x86_64":
        fp_ptr = lay["frame.uc"] + lay["reg.fpstate"]
        return [Region("frame", at_anchor, sf_x86.RT_SIGFRAME_64, (fp_ptr,)),
                Region("fpstate", lambda a, rd, side: rd(a + fp_ptr), sf_x86.XSTATE_SIGFRAME_SIZE)]
    if arch == "i386":
        if rt:
            fp_ptr = sf_x86.SC_32_RT + 4 * sf_x86.SC32_REGS.index("fpstate")
            frame = Region("frame", at_anchor, sf_x86.RT_SIGFRAME_32, (8, 12, fp_ptr))
        else:
            fp_ptr = sf_x86.SC_32_OLD + 4 * sf_x86.SC32_REGS.index("fpstate")
            frame = Region("frame", at_anchor, sf_x86.SIGFRAME_32, (fp_ptr,))
        return [frame, Region("fpstate", lambda a, rd, side: rd(a + fp_ptr),
                              sf_x86.FSAVE_HEADER_SIZE + sf_x86.XSTATE_SIGFRAME_SIZE)]
    if arch == "arm":
        return [Region("frame", at_anchor, sf_arm.RT_SIGFRAME_SIZE if rt else sf_arm.SIGFRAME_SIZE)]
    if arch == "riscv64":
        return [Region("frame", at_anchor, sf_riscv.RT_SIGFRAME_SIZE)]
    if arch == "aarch64":  # the frame, then the frame record
        return [Region("frame", at_anchor, sf_a64.RT_SIGFRAME_SIZE + sf_a64.FRAME_RECORD_SIZE)]
    sc = sf_ppc.UC_MCONTEXT
    return [Region("frame", at_anchor, sf_ppc.PUC + 8,
                   (sf_ppc.PINFO, sf_ppc.PUC, sc + sf_ppc.SC_REGS, sc + sf_ppc.SC_V_REGS)),
            # QEMU's siginfo is 8 bytes lower, and its pinfo unwritten (see _TRAMP)
            Region("info", lambda a, rd, side: a + sf_ppc.INFO - (8 if side == "qemu" else 0), 128),
            Region("backchain", lambda a, rd, side: a - sf_ppc.SIGNAL_FRAMESIZE, 8)]


#: the registers that hold addresses in the frame at the handler's entry, by arch and
#: whether the frame is rt (compared as distances from the frame's anchor)
ENTRY_POINTERS = {("x86_64", True): {"rsi", "rdx"}, ("x86_64", False): {"rsi", "rdx"},
                  ("i386", True): {"edx", "ecx", "arg1", "arg2"}, ("arm", True): {"r1", "r2"},
                  ("riscv64", True): {"a1", "a2"}, ("riscv64", False): {"a1", "a2"},
                  ("ppc64", True): {"r4", "r5", "r6"}, ("ppc64", False): {"r4", "r5", "r6"},
                  ("ppc64le", True): {"r4", "r5", "r6"}, ("ppc64le", False): {"r4", "r5", "r6"},
                  ("aarch64", True): {"x1", "x2", "x29"}, ("aarch64", False): {"x29"}}


#: entry values that show part of a register: (the register, the bits shown)
ENTRY_VIEWS = {"flags": ("eflags", 0xFFFFFFFF), "xmm0lo": ("xmm0", 0xFFFFFFFF), "apsr": ("cpsr", 0xF80F0000),
               "fpscr": ("fpscr", 0xFFFFFFFF), "nzcv": ("pstate", 0xF0000000)}


@dataclass(frozen=True)
class Accepted:
    """A difference from the kernel's frame that is not kpsdk's error."""

    arches: tuple[str, ...]
    kernel: str
    cases: tuple[str, ...]  #: () for every case
    region: str  #: a region, or "entry" for a handler-entry register
    ranges: tuple[tuple[int, int], ...] = ()  #: byte offsets, both ends included
    registers: tuple[str, ...] = ()
    why: str = ""


def _x87_slot_pads(base: int) -> tuple[tuple[int, int], ...]:
    return tuple((base + 32 + 16 * i + 10, base + 32 + 16 * i + 15) for i in range(8))


_TAIL = "QEMU copies only the siginfo fields the si_code uses; Linux copies all 128 bytes, the rest 0"
_SS = ("QEMU stores sas_ss_flags(sp) (SS_DISABLE without a stack); Linux stores the task's own ss_flags, "
       "0 until the program calls sigaltstack")
_QEMU_XSAVE = ("QEMU's CPU has AVX-512 and PKRU: its XSAVE image is 2696 bytes, its software bytes, "
               "xstate_bv and MAGIC2 say so; kpsdk's CPU has x87 and SSE (576 bytes)")
_HOST_XSAVE = ("the host CPU's XSAVE features (AVX, AVX-512) make its image larger and its software bytes, "
               "xstate_bv and MAGIC2 say so; kpsdk's CPU has x87 and SSE (576 bytes)")
_HOST_MXCSR = "the host CPU's MXCSR_MASK has DAZ (0x2ffff); QEMU's and Unicorn's FXSAVE report 0xffff"
_FP_PLACE = ("QEMU puts the FP image inside its frame structure; Linux puts it above the frame, 64-byte "
             "aligned: the fpstate pointer's distance from the frame differs (the image is compared on its own)")
_TRAPNO = "QEMU stores its exception index, -1 for a signal from kill; Linux the last trap number, 0 without one"
_RETCODE = "QEMU leaves out the historical return code that Linux still writes for gdb"
_VMX = "QEMU saves VMX and VSX (and sets MSR_VEC, MSR_VSX); kpsdk's CPU has none, as a task that never used them"
_PPC_UNWRITTEN = ("QEMU 7.2 does not write sc.handler, orig_gpr3, softe (Linux: 1), trap, dar, dsisr, "
                  "result and the pt_regs words after them")
_TRAMP = ("QEMU 7.2's trampoline area is 6 words, Linux's 7 since 5.10 (the bctrl): the siginfo is 8 bytes "
          "lower in QEMU's frame, and QEMU does not fill pinfo and puc")
_PPC_ARGS = ("QEMU 7.2 puts the dummy caller frame 144 bytes below the frame (Linux: 128), so its r1-relative "
             "addresses are 16 larger, and passes r4-r6 as for SA_SIGINFO in every case")
_PPC_CTR = ("QEMU calls the handler directly with lr at its trampoline; Linux enters through the vDSO's "
            "bctrl, so ctr holds the handler's entry")

ACCEPTED: tuple[Accepted, ...] = (
    # x86_64
    Accepted(("x86_64",), "qemu", (), "frame", ((8, 15),), why="QEMU sets only UC_FP_XSTATE in uc_flags; Linux "
             "adds UC_SIGCONTEXT_SS and UC_STRICT_RESTORE_SS"),
    Accepted(("x86_64",), "qemu", ("rt",), "frame", ((32, 35),), why=_SS),
    Accepted(("x86_64",), "qemu", (), "frame", ((sf_x86.UC_64 + 40 + sf_x86.SC64_FPSTATE,) * 2,), why=_FP_PLACE),
    Accepted(("x86_64",), "qemu", (), "frame", ((208, 215),), why=_TRAPNO),
    Accepted(("x86_64",), "qemu", (), "frame", ((312 + 12, 312 + 15), (312 + 24, 312 + 127)), why=_TAIL),
    Accepted(("x86_64",), "qemu", (), "fpstate", ((6, 7), *_x87_slot_pads(0)),
             why="QEMU's FXSAVE leaves FOP and the 6 reserved bytes of each x87 slot unwritten"),
    Accepted(("x86_64",), "qemu", (), "fpstate", ((464, 511), (512, 519), (576, 579)), why=_QEMU_XSAVE),
    Accepted(("x86_64",), "qemu", (), "entry", registers=("flags", "fpcw", "mxcsr", "fpsw", "xmm0lo"),
             why="QEMU 7.2 enters an x86_64 handler with the interrupted FPU state and DF; Linux clears DF, RF "
                 "and TF and resets the FPU (fpu__clear_user_states), as the native run shows"),
    Accepted(("x86_64",), "native", (), "fpstate", ((468, 483), (512, 519), (576, 579)), why=_HOST_XSAVE),
    Accepted(("x86_64",), "native", (), "fpstate", ((28, 31),), why=_HOST_MXCSR),
    # i386
    Accepted(("i386",), "qemu", (), "frame", ((16 + 20, 16 + 127), (56, 59), (212, 215)),
             why=f"{_TAIL}; {_TRAPNO}"),
    Accepted(("i386",), "qemu", ("rt",), "frame", ((156, 159),), why=_SS),
    Accepted(("i386",), "qemu", ("rt", "onstack"), "frame", ((240, 240),), why=_FP_PLACE),
    Accepted(("i386",), "qemu", (), "frame", ((260, 267), (724, 731)), why=_RETCODE),
    Accepted(("i386",), "qemu", (), "fpstate", ((2, 3), (6, 7), (10, 11), (12, 15), (24, 27)),
             why="QEMU's fsave header has no 0xffff upper halves (Linux's convert_from_fxsr sets them), its "
                 "FIP where the FXSAVE snapshot has none, and datasel 0 (Linux: ds)"),
    Accepted(("i386",), "qemu", (), "fpstate", ((112, 135), (144, 271)),
             why="QEMU 7.2 fills the FXSAVE copy's x87 part after resetting the FPU for the handler; Linux "
                 "restores x87 from the fsave header and ignores it"),
    Accepted(("i386",), "qemu", (), "fpstate", ((400, 527),),
             why="QEMU leaves xmm8-15 unwritten; a 64-bit kernel's XSAVE writes them, 0 for a 32-bit task"),
    Accepted(("i386",), "qemu", (), "fpstate", ((576, 623), (624, 631), (688, 691)), why=_QEMU_XSAVE),
    Accepted(("i386",), "qemu", ("plain",), "entry", registers=("eax", "edx", "ecx"),
             why="QEMU does not set the -mregparm=3 arguments (eax = sig, edx = ecx = 0) for the old frame"),
    Accepted(("i386",), "qemu", (), "entry", registers=("flags", "mxcsr", "xmm0lo"),
             why="QEMU 7.2 resets only x87 for an i386 handler and keeps DF; Linux clears DF, RF and TF and "
                 "resets x87 and SSE (fpu__clear_user_states), as the native run shows"),
    Accepted(("i386",), "native", (), "fpstate", ((580, 595), (624, 631), (688, 691)), why=_HOST_XSAVE),
    Accepted(("i386",), "native", (), "fpstate", ((140, 143),), why=_HOST_MXCSR),
    # arm
    Accepted(("arm",), "qemu", ("rt", "onstack", "thumb"), "frame", ((20, 127),), why=_TAIL),
    Accepted(("arm",), "qemu", ("rt", "thumb"), "frame", ((140, 143),), why=_SS),
    Accepted(("arm",), "qemu", ("rt", "onstack", "thumb"), "frame", ((628, 631), (644, 647)),
             why="QEMU leaves the VFP record's padding unwritten; Linux copies the record zeroed first"),
    Accepted(("arm",), "qemu", ("plain", "thumb_plain"), "frame", ((500, 503), (516, 519)),
             why="QEMU leaves the VFP record's padding unwritten; Linux copies the record zeroed first"),
    Accepted(("arm",), "qemu", ("plain", "thumb_plain"), "frame", ((0, 19),),
             why="QEMU 7.2 writes uc_flags 0, uc_link and uc_stack in the old frame; Linux writes the marker "
                 "0x5ac3c35a in uc_flags and leaves the other two"),
    Accepted(("arm",), "qemu", (), "entry", registers=("apsr",),
             why="QEMU keeps the condition flags for the handler; Linux's setup_return clears PSR_f (N Z C V Q)"),
    # riscv64
    Accepted(("riscv64",), "qemu", (), "frame", ((12, 15), (24, 127)), why=_TAIL),
    Accepted(("riscv64",), "qemu", ("rt",), "frame", ((152, 155),), why=_SS),
    Accepted(("riscv64",), "qemu", (), "frame", ((820, 823),),
             why="Linux copies __riscv_d_ext_state whole, its 4 bytes of padding after fcsr too; QEMU writes fcsr"),
    Accepted(("riscv64",), "qemu", (), "frame", ((1076, 1087),),
             why="QEMU 7.2's sigcontext ends after fcsr: no Q-sized union, no reserved word, no END header "
                 "(Linux since 6.5); its frame is 256 bytes smaller"),
    # ppc64
    # aarch64
    Accepted(("aarch64",), "qemu", ("rt", "onstack"), "frame", ((12, 15), (24, 127)), why=_TAIL),
    Accepted(("aarch64",), "qemu", ("rt",), "frame", ((152, 155),), why=_SS),
    # ppc64
    Accepted(("ppc64", "ppc64le"), "qemu", ("rt",), "frame", ((24, 27),), why=_SS),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "frame", ((208, 215), (504, 511), (544, 615)), why=_PPC_UNWRITTEN),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "frame", ((496, 503),), why=_VMX),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "frame", ((896, 1423), (1428, 1695)), why=_VMX),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "frame", ((sf_ppc.PINFO, sf_ppc.PUC + 7),), why=_TRAMP),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "info", ((12, 15), (24, 127)), why=_TAIL),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "entry", registers=("r4",), why=_TRAMP),
    Accepted(("ppc64", "ppc64le"), "qemu", ("plain",), "entry", registers=("r4", "r5", "r6"), why=_PPC_ARGS),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "entry", registers=("ctr",), why=_PPC_CTR),
    Accepted(("ppc64", "ppc64le"), "qemu", (), "backchain", ((0, 7),), why=_PPC_ARGS),
)


def accepted(arch: str, kernel: str, case: str, region: str, offset: int = -1, register: str = "") -> str | None:
    for a in ACCEPTED:
        if arch in a.arches and a.kernel == kernel and (not a.cases or case in a.cases) and a.region == region:
            if register in a.registers or any(lo <= offset <= hi for lo, hi in a.ranges):
                return a.why
    return None


def frame_diffs(run: Run, case: Case, cpu: FakeCpu) -> list[str]:
    """The bytes where kpsdk's frame and the kernel's differ, field by field, less the
    accepted ones; and the bytes the kernel wrote where kpsdk wrote nothing."""
    arch = run.arch
    order: Literal["little", "big"] = "little" if ORDER.get(arch, "<") == "<" else "big"
    word = WORD.get(arch, 8)
    rt = bool(int(case.values["flags"], 16) & sf.SA_SIGINFO)
    theirs_mem = case.bytes("frame")
    theirs_sp = case.int("frame_sp")

    def their_byte(addr: int) -> int | None:
        at = addr - theirs_sp
        return theirs_mem[at] if 0 <= at < len(theirs_mem) else None

    def their_word(addr: int) -> int:
        return int.from_bytes(bytes(their_byte(addr + i) or 0 for i in range(word)), order)

    def my_word(addr: int) -> int:
        return int.from_bytes(cpu.read(addr, word), order)

    theirs = anchor_of(arch, run.kernel, rt, entry_reader(case))
    mine = anchor_of(arch, "linux", rt, cpu.reg)
    out = []
    for region in regions(arch, rt):
        t0, m0 = region.start(theirs, their_word, run.kernel), region.start(mine, my_word, "kpsdk")
        pointer_bytes = {p + i for p in region.pointers for i in range(word)}
        for p in region.pointers:
            t, m = their_word(t0 + p) - theirs, my_word(m0 + p) - mine
            if t != m and not accepted(arch, run.kernel, case.name, region.name, p):
                out.append(f"{region.name}+{p:#x}: pointer {m:#x} from the anchor, kernel's {t:#x}")
        offset = 0
        while offset < region.size:
            theirs_b, m_written = their_byte(t0 + offset), m0 + offset in cpu.written
            mine_b = cpu.mem.get(m0 + offset, PAINT)
            differs = (m_written and theirs_b != mine_b) or (not m_written and theirs_b not in (None, PAINT))
            if offset in pointer_bytes or not differs or accepted(arch, run.kernel, case.name, region.name, offset):
                offset += 1
                continue
            start = offset - offset % word
            mine_w = cpu.read(m0 + start, word).hex() if any(
                m0 + start + i in cpu.written for i in range(word)) else "-" * 2 * word
            their_w = "".join("--" if their_byte(t0 + start + i) is None else
                              f"{their_byte(t0 + start + i):02x}" for i in range(word))
            out.append(f"{region.name}+{start:#x}: kpsdk {mine_w} kernel {their_w}")
            offset = start + word
    return out


def register_diffs(run: Run, case: Case, cpu: FakeCpu) -> list[str]:
    """The handler-entry registers kpsdk set against the ones the program's entry saw
    (addresses in the frame as distances from the frame's anchor)."""
    arch = run.arch
    rt = bool(int(case.values["flags"], 16) & sf.SA_SIGINFO)
    mine_anchor = anchor_of(arch, "linux", rt, cpu.reg)
    theirs_anchor = anchor_of(arch, run.kernel, rt, entry_reader(case))
    sp_name = SP.get(arch, "sp")
    word = WORD.get(arch, 8)
    out = []
    for key, value in case.values.items():
        name = key[6:]
        if not key.startswith("entry.") or name in ("pc", sp_name):
            continue
        t = int(value, 16)
        if name in ("ret", "arg0", "arg1", "arg2"):  # i386 and x86_64: on the stack
            off = {"ret": 0, "arg0": 4, "arg1": 8, "arg2": 12}[name]
            m = int.from_bytes(cpu.read(cpu.reg(sp_name) + off, word), "little")
        elif name in ENTRY_VIEWS:
            register, mask = ENTRY_VIEWS[name]
            t, m = t & mask, cpu.reg(register) & mask
        else:
            m = cpu.reg(name)
        if name in ENTRY_POINTERS.get((arch, rt), ()):
            t, m = t - theirs_anchor, m - mine_anchor
        if t != m and not accepted(arch, run.kernel, case.name, "entry", register=name):
            out.append(f"{name}: kpsdk {m:#x} kernel {t:#x}")
    return out



CASES = {"x86_64": ("rt", "onstack", "plain"), "i386": ("rt", "onstack", "plain"),
         "arm": ("rt", "onstack", "plain", "thumb", "thumb_plain"), "riscv64": ("rt", "onstack", "plain"),
         "ppc64": ("rt", "onstack", "plain"), "ppc64le": ("rt", "onstack", "plain"),
         "aarch64": ("rt", "onstack", "plain")}
PARAMS = [pytest.param(a, k, c, id=f"{a}-{k}-{c}") for a in CASES for k in ("qemu", "native") for c in CASES[a]
          if k == "qemu" or a in ("x86_64", "i386")]


@pytest.mark.parametrize(("arch", "kernel", "case_name"), PARAMS)
def test_frame_matches_kernel(arch: str, kernel: str, case_name: str, workdir: Path) -> None:
    run = ground_truth(arch, kernel, workdir)
    case = run.cases[case_name]
    cpu = push(run, case)
    diffs = frame_diffs(run, case, cpu) + register_diffs(run, case, cpu)
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize(("arch", "kernel", "case_name"), PARAMS)
def test_return_restores_handler_changes(arch: str, kernel: str, case_name: str, workdir: Path) -> None:
    """Push, change a saved general register and a saved FP register in the frame as the
    program's handler did, return: the registers are the ones the program had after its
    sigreturn, the changed ones included, and the mask is the one saved."""
    run = ground_truth(arch, kernel, workdir)
    case = run.cases[case_name]
    cpu = push(run, case)
    flags = int(case.values["flags"], 16)
    rt = sf.is_rt(arch, flags)
    victim, _old, new = case.values["victim"].split()
    change_victims(arch, cpu, bool(flags & sf.SA_SIGINFO), victim, int(new, 16))
    # what the restorer or trampoline does before the call
    if arch == "x86_64":
        cpu.regs["rsp"] += 8
    elif arch == "i386":
        cpu.regs["esp"] += 4 if rt else 8
    elif arch.startswith("ppc64"):
        cpu.regs["r1"] += sf_ppc.SIGNAL_FRAMESIZE
    mask = sf.pop_frame(arch, cpu, rt)
    assert mask == BLOCKED
    want = {n: case.int(f"post.{n}") for n in reg_names(case)}
    want.update(fp_regs(arch, case.bytes("fp_post")))
    sp_name, pc_name = SP.get(arch, "sp"), PC.get(arch, "pc")
    want[sp_name], want[pc_name] = case.int("pre_sp"), case.int("after_syscall")
    if arch in ("x86_64", "i386"):
        want["eflags"] = case.int("post_flags")
    elif arch == "arm":
        assert cpu.regs["cpsr"] & 0xF80F0000 == case.int("post_flags") & 0xF80F0000
    if arch == "i386" and kernel == "qemu":
        # QEMU 7.2 restores x87 from the FXSAVE copy it filled after resetting the FPU, so its
        # program comes back with the reset control word, status and tags; Linux (and the
        # native run) restores them from the fsave header, as kpsdk does
        for name in ("fpcw", "fpsw", "fptag"):
            want.pop(name)
    got = {n: cpu.regs[n] for n in want}
    assert got == want, {n: (hex(got[n]), hex(want[n])) for n in want if got[n] != want[n]}


def change_victims(arch: str, cpu: FakeCpu, siginfo: bool, victim: str, new: int) -> None:
    """The program's handler's change, made in kpsdk's frame: the saved ``victim`` register
    becomes ``new`` and the low 32 bits of the saved d5/f5/xmm3 are inverted."""
    lay = sf.frame_layout(arch)
    order = ORDER.get(arch, "<")
    word = WORD.get(arch, 8)
    uc = ucontext_at(arch, "linux", siginfo, cpu.reg)
    if arch.startswith("ppc64"):
        cpu.write(uc + lay["mc.gp_regs"] + 8 * int(victim[1:]), struct.pack(order + "Q", new))
        fp_at = uc + lay["mc.fp_regs"] + 5 * 8 + (4 if order == ">" else 0)
    else:
        cpu.write(uc + lay[f"reg.{victim}"], struct.pack(order + ("Q" if word == 8 else "I"), new))
        if arch in ("x86_64", "i386"):
            fpstate = int.from_bytes(cpu.read(uc + lay["reg.fpstate"], word), "little")
            fp_at = fpstate + (sf_x86.FSAVE_HEADER_SIZE if arch == "i386" else 0) + 160 + 3 * 16
        elif arch == "arm":
            fp_at = uc + lay["uc_regspace"] + 8 + 5 * 8
        elif arch == "aarch64":
            fp_at = uc + lay["mc.reserved"] + 16 + 5 * 16
        else:
            fp_at = uc + lay["reg.f0"] + 5 * 8
    old = struct.unpack(order + "I", cpu.read(fp_at, 4))[0]
    cpu.write(fp_at, struct.pack(order + "I", old ^ 0xFFFFFFFF))


@pytest.mark.parametrize("arch", list(CASES))
def test_layout_matches_c_library(arch: str, workdir: Path) -> None:
    """Every offset the C library declares for a field kpsdk writes is kpsdk's."""
    run = ground_truth(arch, "qemu", workdir)
    lay = sf.frame_layout(arch)
    shared = {k: v for k, v in run.offsets.items() if k in lay}
    assert len(shared) >= 8, sorted(run.offsets)
    assert {k: lay[k] for k in shared} == shared


@pytest.mark.parametrize("arch", list(CASES))
def test_siginfo_layout_matches_c_library(arch: str, workdir: Path) -> None:
    """The siginfo builders put each field where siginfo_t has it."""
    run = ground_truth(arch, "qemu", workdir)
    off = run.offsets
    order = ORDER.get(arch, "<")
    word = WORD.get(arch, 8)
    w = "Q" if word == 8 else "I"

    def at(data: bytes, name: str, fmt: str) -> int:
        return struct.unpack_from(order + fmt, data, off[f"si.{name}"])[0]

    kill = sf.siginfo_kill(arch, 10, pid=1234, uid=1000, code=-6)
    assert (at(kill, "signo", "i"), at(kill, "errno", "i"), at(kill, "code", "i")) == (10, 0, -6)
    assert (at(kill, "pid", "i"), at(kill, "uid", "I")) == (1234, 1000)
    fault = sf.siginfo_fault(arch, 11, code=2, addr=0xDEAD0)
    assert (at(fault, "code", "i"), at(fault, "addr", w)) == (2, 0xDEAD0)
    chld = sf.siginfo_chld(arch, code=1, pid=77, uid=5, status=3, utime=9, stime=8)
    assert (at(chld, "pid", "i"), at(chld, "status", "i"), at(chld, "utime", w), at(chld, "stime", w)) == \
        (77, 3, 9, 8)
    timer = sf.siginfo_timer(arch, 14, timerid=4, overrun=2, value=0x55)
    assert (at(timer, "timerid", "i"), at(timer, "overrun", "i"), at(timer, "value", w)) == (4, 2, 0x55)
    poll = sf.siginfo_poll(arch, 29, code=1, band=0x41, fd=7)
    assert (at(poll, "band", w), at(poll, "fd", "i")) == (0x41, 7)
    assert off["size.siginfo"] == len(kill) == 128
    sa = dict(re.findall(r"(SA_\w+) (0x[0-9a-f]+|\d+)", run.head["sa"]))
    assert {k: int(v, 0) for k, v in sa.items()} == {k: v for k, v in sf.sa_flags(arch).items() if k in sa}
    assert run.head["sig"] == "SIGUSR1 10 SIGUSR2 12"
    assert sf.signals(arch)["SIGUSR1"] == 10


def test_mips_constants_differ() -> None:
    """MIPS's numbers (for the frames to come): SIGUSR1 16, SIGCHLD 18, SA_SIGINFO 8, and
    si_code before si_errno."""
    assert sf.signals("mipsel")["SIGUSR1"] == 16 and sf.signals("mips")["SIGCHLD"] == 18
    assert sf.sa_flags("mips64el")["SA_SIGINFO"] == 8
    info = sf.siginfo_fault("mipsel", 11, code=1, addr=0x1000)
    assert struct.unpack_from("<iii", info) == (11, 1, 0)
    assert struct.unpack_from("<I", info, 12) == (0x1000,)



# -- what QEMU cannot show: Linux's own rules, from the kernel's code ------------------------

def _backend_names(arch: str) -> list[str]:
    """The arch backend's register names (none for an arch without a backend)."""
    import kpsdk

    registry = kpsdk.get_registry()
    return list(registry.arch(arch).register_names) if arch in registry.archs.names() else []


def _cpu(arch: str, **regs: int) -> FakeCpu:
    """A fake CPU with every register a frame reads (0 unless given)."""
    from kpsdk.targets.unicorn.linux.sigframes.unicorn import EXTRA_REGISTERS

    names = set(_backend_names(arch)) | set(EXTRA_REGISTERS[arch])
    return FakeCpu({**dict.fromkeys(names, 0), **regs})


def _deliver(arch: str, cpu: FakeCpu, flags: int, handler: int = 0x1000, **kw: object) -> None:
    info = sf.siginfo_kill(arch, SIGUSR1, pid=1, uid=0)
    args: dict[str, object] = {"sig": SIGUSR1, "info": info, "handler": handler, "flags": flags,
                               "restorer": 0x2000, "blocked": BLOCKED, "altstack": None,
                               "sigreturn_code_addr": 0x3000}
    args.update(kw)
    sf.push_frame(arch, cpu, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(("handler", "flags", "lr"), [
    (0x1000, sf.SA_SIGINFO | sf.SA_RESTORER, 0x2000),
    (0x1001, sf.SA_SIGINFO, 0x3000 + 20 + 1),   # Thumb, rt: the kernel's slot 5, Thumb bit set
    (0x1000, sf.SA_SIGINFO, 0x3000 + 12),       # ARM, rt: slot 3
    (0x1001, 0, 0x3000 + 8 + 1),                # Thumb, old frame: slot 2
    (0x1000, 0, 0x3000),                        # ARM, old frame: slot 0
])
def test_arm_handler_entry(handler: int, flags: int, lr: int) -> None:
    """setup_return: the Thumb bit of the handler selects T, the condition flags, IT and E are
    cleared, lr is the restorer or the signal page's slot for (Thumb, rt), whose code also goes
    into the frame's retcode."""
    cpu = _cpu("arm", sp=0x80000, cpsr=0xF80F0010 | sf_arm.PSR_IT_MASK | sf_arm.PSR_E_BIT | sf_arm.PSR_T_BIT,
               fpscr=0x00370000)
    _deliver("arm", cpu, flags, handler)
    assert cpu.regs["pc"] == handler and cpu.regs["lr"] == lr
    assert cpu.regs["cpsr"] == 0x000F0010 | (sf_arm.PSR_T_BIT if handler & 1 else 0)
    assert cpu.regs["fpscr"] == 0  # LEN and STRIDE cleared for the call
    rt = bool(flags & sf.SA_SIGINFO)
    frame = cpu.regs["sp"]
    assert frame % 8 == 0 and cpu.regs["r0"] == SIGUSR1
    retcode = frame + (128 if rt else 0) + sf_arm.RETCODE
    if flags & sf.SA_RESTORER:
        assert retcode not in cpu.written
    else:
        slot = lr - 0x3000 - (handler & 1)
        assert cpu.read(retcode, 8) == sf.sigreturn_trampoline("arm")[slot:slot + 8].ljust(8, b"\0")
    uc = frame + (128 if rt else 0)
    assert struct.unpack_from("<I", cpu.read(uc, 4))[0] == (0 if rt else sf_arm.OLD_FRAME_UC_FLAGS)
    saved_cpsr = struct.unpack("<I", cpu.read(uc + sf.frame_layout("arm")["reg.cpsr"], 4))[0]
    assert saved_cpsr & sf_arm.MODE_MASK == sf_arm.USR_MODE


@pytest.mark.parametrize("arch", ["ppc64", "ppc64le"])
@pytest.mark.parametrize("flags", [sf.SA_SIGINFO, 0])
def test_ppc64_linux_fields(arch: str, flags: int) -> None:
    """handle_rt_signal64 and setup_sigcontext: the fields QEMU 7.2 leaves out, the dummy caller
    frame, the entry through the trampoline's bctrl, the descriptor (ELFv1) or r12 (ELFv2)."""
    order = ORDER.get(arch, "<")
    cpu = _cpu(arch, r1=0x7FFF0000, msr=0x8000000002806000 | (1 if order == "<" else 0), fpscr=0x82000003,
               r2=0x777, pc=0x4444)
    if arch == "ppc64":
        cpu.write(0x1000, struct.pack(">QQ", 0x10000F94, 0x100E7B00))
    _deliver(arch, cpu, flags)
    r1 = cpu.regs["r1"]
    frame = r1 + sf_ppc.SIGNAL_FRAMESIZE
    assert frame % 16 == 0 and frame + sf_ppc.RT_SIGFRAME_SIZE <= 0x7FFF0000
    assert struct.unpack(order + "Q", cpu.read(r1, 8))[0] == 0x7FFF0000  # the back chain
    assert cpu.regs["pc"] == 0x3000 and cpu.regs["fpscr"] == 0 and cpu.regs["r3"] == SIGUSR1
    if arch == "ppc64":
        assert (cpu.regs["ctr"], cpu.regs["r2"], cpu.regs["msr"] & 1) == (0x10000F94, 0x100E7B00, 0)
    else:
        assert (cpu.regs["ctr"], cpu.regs["r12"], cpu.regs["r2"], cpu.regs["msr"] & 1) == (0x1000, 0x1000, 0x777, 1)
    if flags:
        assert (cpu.regs["r4"], cpu.regs["r5"], cpu.regs["r6"]) == (frame + sf_ppc.INFO, frame, frame)
    else:
        assert cpu.regs["r4"] == frame + sf_ppc.UC_MCONTEXT

    def word(offset: int) -> int:
        return int(struct.unpack(order + "Q", cpu.read(frame + offset, 8))[0])

    sc = sf_ppc.UC_MCONTEXT
    gp = sc + sf_ppc.SC_GP_REGS
    assert word(gp + 8 * sf_ppc.PT_SOFTE) == 1
    assert word(gp + 8 * sf_ppc.PT_MSR) & (sf_ppc.MSR_VEC | sf_ppc.MSR_VSX) == 0
    assert word(gp + 8 * sf_ppc.PT_NIP) == 0x4444
    assert word(sc + sf_ppc.SC_HANDLER) == 0x1000 and word(sc + sf_ppc.SC_REGS) == frame + gp
    assert struct.unpack(order + "i", cpu.read(frame + sc + sf_ppc.SC_SIGNAL, 4))[0] == SIGUSR1
    v_regs = word(sc + sf_ppc.SC_V_REGS)
    assert v_regs % 16 == 0 and frame + sc + sf_ppc.SC_VMX <= v_regs < frame + sc + sf_ppc.SC_VMX + 16
    assert cpu.read(v_regs + 33 * 16, 4) == bytes(4)  # VRSAVE
    assert frame + sc + sf_ppc.SC_OLDMASK not in cpu.written  # the rt path saves no oldmask
    assert word(sc + sf_ppc.SC_FP_REGS + 32 * 8) == 0x82000003
    assert (word(sf_ppc.PINFO), word(sf_ppc.PUC)) == (frame + sf_ppc.INFO, frame)


def test_altstack_rules() -> None:
    """sigsp and on_sig_stack: an SA_ONSTACK handler moves to the alternate stack, unless the
    task is already on it (then the frame goes below its sp), except with SS_AUTODISARM; the
    frame's uc_stack is the task's sigaltstack as it set it."""
    alt = sf.AltStack(0x50000, 0x10000, 0)
    cpu = _cpu("riscv64", sp=0x90000)
    _deliver("riscv64", cpu, sf.SA_ONSTACK, altstack=alt)
    assert 0x60000 - sf_riscv.RT_SIGFRAME_SIZE - 16 < cpu.regs["sp"] < 0x60000
    assert sf.read_altstack("riscv64", cpu) == alt
    nested = _cpu("riscv64", sp=0x58000)
    _deliver("riscv64", nested, sf.SA_ONSTACK, altstack=alt)
    assert nested.regs["sp"] < 0x58000 - sf_riscv.RT_SIGFRAME_SIZE + 16
    disarm = sf.AltStack(0x50000, 0x10000, sf.SS_AUTODISARM)
    again = _cpu("riscv64", sp=0x58000)
    _deliver("riscv64", again, sf.SA_ONSTACK, altstack=disarm)
    assert 0x60000 - sf_riscv.RT_SIGFRAME_SIZE - 16 < again.regs["sp"] < 0x60000
    assert sf.read_altstack("riscv64", again).flags == sf.SS_AUTODISARM
    plain = _cpu("riscv64", sp=0x90000)
    _deliver("riscv64", plain, 0, altstack=alt)  # no SA_ONSTACK: the task's own stack
    assert 0x90000 - sf_riscv.RT_SIGFRAME_SIZE - 16 < plain.regs["sp"] < 0x90000


def test_x86_64_red_zone_and_alignment() -> None:
    """get_sigframe: 128 bytes of red zone, the FP image 64-byte aligned below it, the frame
    below that with sp + 8 a multiple of 16 (as at a function's entry)."""
    cpu = _cpu("x86_64", rsp=0x7FFF1000)
    _deliver("x86_64", cpu, sf.SA_SIGINFO | sf.SA_RESTORER)
    sp = cpu.regs["rsp"]
    fpstate = int.from_bytes(cpu.read(sp + sf_x86.SC_64 + sf_x86.SC64_FPSTATE, 8), "little")
    assert fpstate % 64 == 0 and fpstate + sf_x86.XSTATE_SIGFRAME_SIZE <= 0x7FFF1000 - 128
    assert (sp + 8) % 16 == 0 and sp + sf_x86.RT_SIGFRAME_64 <= fpstate
    assert not any(a >= 0x7FFF1000 - 128 for a in cpu.written)


@pytest.mark.parametrize(("arch", "flags", "altstack", "sp", "why"), [
    ("x86_64", sf.SA_SIGINFO, None, 0x90000, "SA_RESTORER"),
    ("x86_64", sf.SA_RESTORER, sf.AltStack(0x80000, 0x400, 0), 0x80300, "overflow"),
    ("riscv64", 0, sf.AltStack(0x80000, 0x400, 0), 0x80300, "overflow"),
])
def test_delivery_refused(arch: str, flags: int, altstack: sf.AltStack | None, sp: int, why: str) -> None:
    """Where Linux fails the delivery (force_sigsegv): x86_64 without SA_RESTORER, a frame
    that does not fit on the alternate stack the task runs on."""
    cpu = _cpu(arch, **{SP.get(arch, "sp"): sp})
    with pytest.raises(kpsdk.TargetFault, match=why):
        _deliver(arch, cpu, flags, altstack=altstack)


@pytest.mark.parametrize(("arch", "offset", "data", "why"), [
    ("arm", 128 + sf_arm.UC_REGSPACE, b"\0\0\0\0", "VFP record"),
    ("arm", 128 + sf_arm.UC_MCONTEXT + 4 * sf_arm.SC_REGS.index("cpsr"), struct.pack("<I", 0x13), "CPSR"),
    ("riscv64", sf_riscv.UC + sf_riscv.UC_MCONTEXT + sf_riscv.SC_RESERVED, b"\1", "reserved"),
    ("riscv64", sf_riscv.UC + sf_riscv.UC_MCONTEXT + sf_riscv.SC_EXT_HDR, struct.pack("<I", 0x53465457),
     "extension header"),
    ("aarch64", sf_a64.UC + sf_a64.UC_MCONTEXT + sf_a64.SC_PSTATE, struct.pack("<Q", 0x3C5), "PSTATE"),
    ("aarch64", sf_a64.UC + sf_a64.UC_MCONTEXT + sf_a64.SC_RESERVED, struct.pack("<I", 0x53564501), "magic"),
    ("aarch64", sf_a64.UC + sf_a64.UC_MCONTEXT + sf_a64.SC_RESERVED + 4, struct.pack("<I", 0), "misshapen"),
])
def test_return_refused(arch: str, offset: int, data: bytes, why: str) -> None:
    """Where Linux's sigreturn gives up (badframe: SIGSEGV): a VFP record that is not one, a
    CPSR or PSTATE that is not a user mode's, riscv's reserved word or an extension it cannot
    restore, an aarch64 record this CPU cannot have or of the wrong size."""
    cpu = _cpu(arch, sp=0x90000, cpsr=0x10)
    _deliver(arch, cpu, sf.SA_SIGINFO | (sf.SA_RESTORER if arch == "arm" else 0))
    cpu.write(cpu.regs["sp"] + offset, data)
    with pytest.raises(kpsdk.TargetFault, match=why):
        sf.pop_frame(arch, cpu, True)


def test_x86_64_return_checks_mxcsr_and_fpstate() -> None:
    """__fpu_restore_sig: MXCSR bits the CPU lacks make the frame bad; a NULL fpstate pointer
    resets the FPU; an image without the XSAVE magic is restored as plain FXSAVE, and one whose
    xstate_bv leaves SSE out gets the SSE registers' init state."""
    def pushed() -> tuple[FakeCpu, int]:
        cpu = _cpu("x86_64", rsp=0x90000, fpcw=0x27F, mxcsr=0x1F80, xmm3=0x1234, fptag=0xFFFF)
        _deliver("x86_64", cpu, sf.SA_SIGINFO | sf.SA_RESTORER)
        cpu.regs["rsp"] += 8
        fpstate = int.from_bytes(cpu.read(cpu.regs["rsp"] - 8 + sf_x86.SC_64 + sf_x86.SC64_FPSTATE, 8), "little")
        return cpu, fpstate

    cpu, fpstate = pushed()
    cpu.write(fpstate + 24, struct.pack("<I", 0x12345))
    with pytest.raises(kpsdk.TargetFault, match="MXCSR"):
        sf.pop_frame("x86_64", cpu, True)
    cpu, fpstate = pushed()
    cpu.write(cpu.regs["rsp"] - 8 + sf_x86.SC_64 + sf_x86.SC64_FPSTATE, bytes(8))
    sf.pop_frame("x86_64", cpu, True)
    assert (cpu.regs["fpcw"], cpu.regs["xmm3"]) == (0x37F, 0)
    cpu, fpstate = pushed()
    cpu.write(fpstate + sf_x86.SW_BYTES, bytes(4))  # no MAGIC1: fx_only
    cpu.write(fpstate + sf_x86.FXSAVE_SIZE, struct.pack("<Q", 1))
    sf.pop_frame("x86_64", cpu, True)
    assert (cpu.regs["fpcw"], cpu.regs["xmm3"]) == (0x27F, 0x1234)
    cpu, fpstate = pushed()
    cpu.write(fpstate + sf_x86.FXSAVE_SIZE, struct.pack("<Q", 1))  # xstate_bv: x87 only
    sf.pop_frame("x86_64", cpu, True)
    assert (cpu.regs["fpcw"], cpu.regs["xmm3"], cpu.regs["mxcsr"]) == (0x27F, 0, 0x1F80)


def test_trampolines_disassemble() -> None:
    """The sigreturn code kpsdk asks the caller to map is the kernel's (vDSO, signal page)."""
    import capstone

    def text(cs: tuple[int, int], code: bytes, at: int = 0) -> list[str]:
        md = capstone.Cs(*cs)
        return [f"{i.mnemonic} {i.op_str}".strip() for i in md.disasm(code, at)]

    i386 = sf.sigreturn_trampoline("i386")
    assert text((capstone.CS_ARCH_X86, capstone.CS_MODE_32), i386[:8]) == ["pop eax", "mov eax, 0x77", "int 0x80"]
    assert text((capstone.CS_ARCH_X86, capstone.CS_MODE_32), i386[8:15]) == ["mov eax, 0xad", "int 0x80"]
    arm = sf.sigreturn_trampoline("arm")
    assert text((capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM), arm[:8]) == ["mov r7, #0x77", "svc #0"]
    assert text((capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB), arm[8:12]) == ["movs r7, #0x77", "svc #0"]
    assert text((capstone.CS_ARCH_ARM, capstone.CS_MODE_ARM), arm[12:20]) == ["mov r7, #0xad", "svc #0"]
    assert text((capstone.CS_ARCH_ARM, capstone.CS_MODE_THUMB), arm[20:24]) == ["movs r7, #0xad", "svc #0"]
    a64 = sf.sigreturn_trampoline("aarch64")
    assert text((capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM), a64) == ["mov x8, #0x8b", "svc #0"]
    riscv = sf.sigreturn_trampoline("riscv64")
    assert text((capstone.CS_ARCH_RISCV, capstone.CS_MODE_RISCV64), riscv) == ["addi a7, zero, 0x8b", "ecall"]
    for arch, mode in (("ppc64", capstone.CS_MODE_BIG_ENDIAN), ("ppc64le", capstone.CS_MODE_LITTLE_ENDIAN)):
        code = sf.sigreturn_trampoline(arch)
        assert text((capstone.CS_ARCH_PPC, capstone.CS_MODE_64 | mode), code) == \
            ["bctrl", "addi r1, r1, 0x80", "li r0, 0xac", "sc"]
    assert sf.sigreturn_trampoline("x86_64") == b""


def test_frame_kinds() -> None:
    """i386 and arm build the old frame without SA_SIGINFO; the others always an rt frame."""
    assert not sf.is_rt("i386", 0) and not sf.is_rt("arm", sf.SA_RESTORER) and sf.is_rt("arm", sf.SA_SIGINFO)
    assert all(sf.is_rt(a, 0) for a in ("x86_64", "riscv64", "ppc64", "ppc64le", "aarch64"))
    with pytest.raises(LookupError):
        sf.push_frame("sparc", _cpu("x86_64"), sig=1, info=bytes(128), handler=0, flags=0, restorer=0, blocked=0,
                      altstack=None, sigreturn_code_addr=0)


# -- on a real Unicorn engine ----------------------------------------------------------------

STACK, STACK_SIZE = 0x7F000000, 0x100000


def _unicorn(arch: str):  # type: ignore[no-untyped-def]
    """A Unicorn engine for ``arch`` with a stack, as the Linux layer makes one."""
    import unicorn

    import kpsdk

    spec = kpsdk.get_registry().arch(arch)
    if spec.unicorn is None or not spec.engines_available()["unicorn"]:
        pytest.skip(f"Unicorn has no {arch}")
    mode = spec.unicorn[1] | (unicorn.UC_MODE_BIG_ENDIAN if spec.endian == "big" else 0)
    uc = unicorn.Uc(spec.unicorn[0], mode)
    if spec.unicorn_setup is not None:
        spec.unicorn_setup(uc)
    uc.mem_map(STACK, STACK_SIZE)
    return uc


#: registers kept out of the round trip: the stack pointer and pc (checked apart), x86's
#: segments and ARM's banked sp/lr mode bits, which the frames do not change; aarch64's thread
#: pointer and SP_EL0 (a kernel's), which no frame holds (arch/arm64/kernel/signal.c), and its
#: d0-d31, the low halves of the v0-v31 the round trip sets
_SKIP = {"rsp", "esp", "sp", "r1", "rip", "eip", "pc", "cs", "ss", "ds", "es", "fs", "gs", "cpsr", "eflags", "fptag",
         "msr", "zero", "fip", "fdp", "fop", "fpsw", "pstate", "tpidr_el0", "sp_el0", *(f"d{i}" for i in range(32))}


@pytest.mark.parametrize("arch", ["x86_64", "i386", "arm", "riscv64", "aarch64"])
def test_unicorn_round_trip(arch: str) -> None:
    """Push and pop on Unicorn through :class:`UnicornFrameCpu`: the handler is called as
    Linux calls it, and the return gives back every register, the FP and vector state with
    them, and the mask."""
    from kpsdk.targets.unicorn.linux.sigframes.unicorn import EXTRA_REGISTERS, UnicornFrameCpu

    uc = _unicorn(arch)
    cpu = UnicornFrameCpu(uc, arch)
    names = [n for n in dict.fromkeys((*_backend_names(arch), *EXTRA_REGISTERS[arch])) if n not in _SKIP]
    sp_name, pc_name = SP.get(arch, "sp"), PC.get(arch, "pc")
    before: dict[str, int] = {}
    for i, name in enumerate(names):
        if name.startswith("fp") and name[2:].isdigit():
            value = (0x3FFF + i) << 64 | (0x8000000000000000 | i * 0x1111)
        elif name.startswith("xmm"):
            value = (i * 0x0101010101010101) << 64 | i * 0x1010101010101010
        elif name in ("mxcsr",):
            value = 0x9FA0
        elif name == "fpcw":
            value = 0x027F
        elif name == "fpscr":
            value = 0x03C0009F if arch == "arm" else 0x82000003
        elif name == "fpexc":
            value = sf_arm.FPEXC_EN
        elif name == "fcsr":
            value = 0x3F
        elif name == "fpcr":
            value = 0x03C00000
        elif name == "fpsr":
            value = 0x0800009F
        elif name.startswith("v") and name[1:].isdigit():
            value = (i * 0x0101010101010101) << 64 | i * 0x1010101010101010
        else:
            value = 0x11111111 * (i + 1) & (0xFFFFFFFF if WORD.get(arch, 8) == 4 else (1 << 64) - 1)
        cpu.set_reg(name, value)
        before[name] = cpu.reg(name)
    if arch in ("x86_64", "i386"):
        cpu.set_reg("fptag", 0x03FF)  # physical 5-7 in use
        cpu.set_reg("fpsw", 0x2800)  # top 5
        cpu.set_reg("eflags", 0xED7)
    if arch == "arm":
        cpu.set_reg("cpsr", (cpu.reg("cpsr") & 0x1FF) | 0xB8000000)
    start_sp, start_pc = STACK + STACK_SIZE - 0x1000, 0x400120
    cpu.set_reg(sp_name, start_sp)
    cpu.set_reg(pc_name, start_pc)
    flags_before = cpu.reg("eflags") if arch in ("x86_64", "i386") else cpu.reg("cpsr") if arch == "arm" else 0
    flags = sf.SA_SIGINFO | (sf.SA_RESTORER if arch in ("x86_64", "i386", "arm") else 0)
    info = sf.siginfo_fault(arch, 11, code=1, addr=0xDEAD000)
    sf.push_frame(arch, cpu, sig=11, info=info, handler=0x401000, flags=flags, restorer=0x402000, blocked=BLOCKED,
                  altstack=None, sigreturn_code_addr=0x403000, fault=sf.FaultContext(14, 4, 0xDEAD000))
    assert cpu.reg(pc_name) == 0x401000
    sp = cpu.reg(sp_name)
    assert sp < start_sp
    if arch == "x86_64":
        assert (cpu.reg("rdi"), cpu.reg("rsi") - sp, cpu.reg("rdx") - sp) == (11, sf_x86.INFO_64, sf_x86.UC_64)
        assert (cpu.reg("fpcw"), cpu.reg("mxcsr"), cpu.reg("xmm3"), cpu.reg("eflags") & 0x400) == (0x37F, 0x1F80, 0, 0)
        assert uc.mem_read(sp + sf_x86.INFO_64, 128) == info
    elif arch == "i386":
        assert (cpu.reg("eax"), cpu.reg("edx") - sp, cpu.reg("ecx") - sp) == (11, sf_x86.INFO_32, sf_x86.UC_32)
    elif arch == "arm":
        assert (cpu.reg("r0"), cpu.reg("r1") - sp, cpu.reg("r2") - sp, cpu.reg("lr")) == (11, 0, 128, 0x402000)
        assert cpu.reg("cpsr") & 0xF8000000 == 0
    elif arch == "aarch64":
        assert (cpu.reg("x0"), cpu.reg("x1") - sp, cpu.reg("x2") - sp, cpu.reg("x30")) == (11, 0, 128, 0x403000)
        assert cpu.reg("x29") == sp + sf_a64.RT_SIGFRAME_SIZE and sp % 16 == 0
        record = uc.mem_read(sp + sf_a64.UC + sf_a64.UC_MCONTEXT + sf_a64.SC_RESERVED + sf_a64.FPSIMD_SIZE, 16)
        assert struct.unpack("<IIQ", record) == (sf_a64.ESR_MAGIC, 16, 4)  # the fault's ESR record
    else:
        assert (cpu.reg("a0"), cpu.reg("a1") - sp, cpu.reg("a2") - sp, cpu.reg("ra")) == (11, 0, 128, 0x403000)
    # the handler clobbers everything, then returns through the restorer or trampoline
    for name in before:
        if not name.startswith(("fp", "xmm")) or name[2:].isdigit():
            cpu.set_reg(name, 0)
    if arch == "x86_64":
        cpu.set_reg(sp_name, sp + 8)
    elif arch == "i386":
        cpu.set_reg(sp_name, sp + 4)
    else:
        cpu.set_reg(sp_name, sp)
    assert sf.pop_frame(arch, cpu, True) == BLOCKED
    after = {n: cpu.reg(n) for n in before}
    assert after == before, {n: (hex(after[n]), hex(before[n])) for n in before if after[n] != before[n]}
    assert (cpu.reg(sp_name), cpu.reg(pc_name)) == (start_sp, start_pc)
    if arch in ("x86_64", "i386"):
        assert cpu.reg("eflags") & sf_x86.FIX_EFLAGS == flags_before & sf_x86.FIX_EFLAGS
        assert (sf_x86.abridged_tag(cpu.reg("fptag")), cpu.reg("fpsw")) == (0xE0, 0x2800)
    elif arch == "arm":
        assert cpu.reg("cpsr") == flags_before  # flags back, Unicorn's mode bits kept


def test_unicorn_unmapped_stack_is_a_fault() -> None:
    """A stack the frame cannot be written to: Linux answers with SIGSEGV (force_sigsegv);
    kpsdk raises :class:`kpsdk.TargetFault` with the address, for the caller to do the same."""
    from kpsdk.targets.unicorn.linux.sigframes.unicorn import UnicornFrameCpu

    cpu = UnicornFrameCpu(_unicorn("riscv64"), "riscv64")
    cpu.set_reg("sp", STACK + 0x100)  # the frame would go below the mapping
    with pytest.raises(kpsdk.TargetFault) as caught:
        sf.push_frame("riscv64", cpu, sig=11, info=bytes(128), handler=0x1000, flags=0, restorer=0,
                      blocked=0, altstack=None, sigreturn_code_addr=0x2000)
    assert caught.value.address is not None and caught.value.address < STACK
