#!/usr/bin/env python3
"""kpsdk benchmark: per-hit probe costs next to bare Unicorn and Qiling, in one run.

Usage: ``python bench/run.py [--quick] [--no-qiling] [--out DIR]``

Prints one table of every measurement with its reference, ratio and goal
(``docs/performance.md``, "Every goal, where it stands"), and writes
``bench/results/latest.json`` and ``bench/results/latest.md``.  Every per-hit
cost is (time with the probe - time of the same workload unprobed) / hits,
each the best of a few runs.
What is measured and why is in ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import timeit
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import unicorn  # noqa: E402
from kretentry import bench_kretentry  # noqa: E402
from kretentry import rows as kretentry_rows  # noqa: E402
from register import bench_register, bench_register_nops  # noqa: E402
from register import rows as register_rows  # noqa: E402
from tlbfill import bench_tlbfill  # noqa: E402
from tlbfill import rows as tlbfill_rows  # noqa: E402
from traceevents import bench_traceevents  # noqa: E402
from traceevents import rows as traceevents_rows  # noqa: E402
from unicorn import x86_const  # noqa: E402
from unicorn.unicorn_py3.unicorn import uclib  # noqa: E402
from watchhit import WATCH_WORD, bench_watch_hits, watch_loop_session  # noqa: E402
from workload import CODE, END_OFF, INC_OFF, NOPS, loop_code, per_hit_us, race  # noqa: E402

import kpsdk  # noqa: E402
from kpsdk.fixtures import path as fixture_path  # noqa: E402
from kpsdk.targets.unicorn.fast import FastHooks  # noqa: E402
from kpsdk.targets.unicorn.target import OPT_LIMIT  # noqa: E402

QILING_VENV = BENCH_DIR / ".qiling-venv"
INC = CODE + INC_OFF
STACK = 0x7FF00000


@dataclass
class Config:
    quick: bool
    n: int  # hits per run of the x86_64 loop
    reps: int  # runs per measurement (best taken)
    n_fixture: int  # hits per run of a fixture's loop(n)
    n_speed: int  # iterations for "probes elsewhere" (no probe hit at all)
    speed_reps: int  # with speed_blocks: speed_reps * speed_blocks pairs of runs
    speed_blocks: int
    step_n: tuple[int, ...]  # hits per run for the hook+step (post_handler) path
    scale: tuple[int, ...]  # registered-probe counts
    scale_reps: int
    micro_n: int  # calls per timeit repetition (register reads, hot-path pieces)


FULL = Config(False, 4_000, 61, 4_000, 100_000, 25, 5, (500, 2000, 8000, 100_000), (1, 100, 1000, 10_000), 61,
              5_000)
QUICK = Config(True, 2_000, 15, 2_000, 50_000, 15, 3, (300, 1200), (1, 100, 1000), 15, 2_000)


@dataclass
class Row:
    section: str
    name: str
    kpsdk: str
    reference: str = ""
    ratio: str = ""
    goal: str = ""
    status: str = "info"  # met / NOT met / info / n/a



#: design.md asks >= 4x; issue 19 raised it to >= 5x in every run, with margin
QILING_GOAL = ">= 5x faster"

def log(msg: str) -> None:
    print(f"  .. {msg}", file=sys.stderr, flush=True)


def us(x: float | str) -> str:
    return x if isinstance(x, str) else f"{x:.2f} us"


def empty_pre(p: Any, regs: Any) -> int:
    return 0


def two_args_pre(p: Any, regs: Any) -> int:
    regs.arg(0)
    regs.arg(1)
    return 0


def empty_post(p: Any, regs: Any, flags: int) -> None:
    return None


# -- sessions -------------------------------------------------------------------------------


def loop_session(n: int, nops: int = 0) -> Any:
    """A ``unicorn:x86_64`` session with the loop at CODE (and ``nops`` never-run nops at NOPS)."""
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x1000, "rwx")
    s.write_memory(CODE, loop_code(n))
    if nops:
        s.target.map(NOPS, nops + 1, "rx")
        s.write_memory(NOPS, b"\x90" * nops + b"\xc3")
    if s.call(CODE) != 2:
        raise SystemExit("the loop workload returned a wrong value")
    return s


def plain_unicorn(n: int) -> tuple[unicorn.Uc, Callable[[], None]]:
    """The same loop in a plain Unicorn (official binding, no kpsdk)."""
    uc = unicorn.Uc(unicorn.UC_ARCH_X86, unicorn.UC_MODE_64)
    uc.mem_map(CODE, 0x1000)
    uc.mem_write(CODE, loop_code(n, with_ret=False))
    uc.mem_map(STACK, 0x100000)

    def run() -> None:
        uc.reg_write(x86_const.UC_X86_REG_RSP, STACK + 0x80000)
        uc.emu_start(CODE, CODE + END_OFF)

    run()
    if uc.reg_read(x86_const.UC_X86_REG_RAX) != 2:
        raise SystemExit("the loop workload returned a wrong value in plain Unicorn")
    return uc, run


def plain_unicorn_int3(n: int) -> Callable[[], None]:
    """The loop in a plain Unicorn with kpsdk's breakpoint mechanism done by hand, as its floor:
    ``int3`` over ``inc``'s first instruction, a raw ctypes interrupt hook that sets the pc to an
    out-of-line copy of the instruction followed by a jump back (the booster)."""
    uc, run = plain_unicorn(n)
    slot = CODE + 0x800
    lea = loop_code(n)[INC_OFF:INC_OFF + 3]
    back = (INC + 3) - (slot + 3 + 5)
    uc.mem_write(slot, lea + b"\xe9" + back.to_bytes(4, "little", signed=True))
    uc.mem_write(INC, b"\xcc")
    uc.ctl_remove_cache(CODE, CODE + 0x1000)  # uc.mem_write does not drop translated code
    uch = ctypes.c_void_p(uc._uch.value)
    buf = ctypes.c_uint64(slot)
    ref = ctypes.byref(buf)
    reg_write = ctypes.CDLL(uclib._name).uc_reg_write  # no argtypes: the cheapest call ctypes has
    reg_write.restype = ctypes.c_int
    rip = x86_const.UC_X86_REG_RIP

    def on_intr(handle: int, intno: int, user: int) -> None:
        reg_write(uch, rip, ref)

    hooks = FastHooks(uc)
    hooks.intr(on_intr)
    run()
    if uc.reg_read(x86_const.UC_X86_REG_RAX) != 2:
        raise SystemExit("the int3 loop returned a wrong value in plain Unicorn")
    run.keep = (hooks, uch, buf, ref, reg_write)  # type: ignore[attr-defined]
    return run


def mechanism_of(s: Any, probe: Any) -> str:
    """How the probe's point is armed now, as list() would flag it."""
    point = s.target.manager.point_of(probe)
    return f"{point.mechanism}{' [OPTIMIZED]' if point.optimized else ''}"


class Toggle:
    """A kprobe registered before and unregistered after each of its timed runs."""

    def __init__(self, s: Any, optimize: bool = True, **fields: Any) -> None:
        self.s, self.optimize = s, optimize
        self.probe = kpsdk.Kprobe(**fields)
        self.mechanism = self.start = ""
        self.runs = 0

    def on(self) -> None:
        s = self.s
        if not self.optimize:
            s.kprobes_optimization = False
        s.register_kprobe(self.probe)
        self.start = mechanism_of(s, self.probe)
        self.runs += 1

    def off(self) -> None:
        end = mechanism_of(self.s, self.probe)
        self.mechanism = self.start if end == self.start else f"{self.start} -> {end}"
        self.s.unregister_kprobe(self.probe)
        if not self.optimize:
            self.s.kprobes_optimization = True

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off

    def check(self, hits: int) -> None:
        if self.probe.hits != hits * self.runs:
            raise SystemExit(f"{self.probe!r} hit {self.probe.hits} times, expected {hits * self.runs}")


class UcHook:
    """A code hook on a plain Unicorn, added and deleted between timed runs."""

    def __init__(self, uc: unicorn.Uc, addr: int, raw: bool = False) -> None:
        self.uc, self.addr, self.raw = uc, addr, raw
        self.fast = FastHooks(uc) if raw else None
        self.handle: int | None = None

    def on(self) -> None:
        if self.fast is not None:
            self.handle = self.fast.code(lambda handle, addr, size, user: None, self.addr, self.addr)
        else:
            self.handle = self.uc.hook_add(unicorn.UC_HOOK_CODE, lambda uc, addr, size, user: None,
                                           begin=self.addr, end=self.addr)
        self.uc.ctl_remove_cache(self.addr, self.addr + 1)  # a hook added after translation needs this

    def off(self) -> None:
        assert self.handle is not None
        if self.fast is not None:
            self.fast.delete(self.handle)
        else:
            self.uc.hook_del(self.handle)
        self.uc.ctl_remove_cache(self.addr, self.addr + 1)

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off


def cost(best: dict[str, float], name: str, base: str, hits: int, toggle: Toggle | None = None) -> dict[str, Any]:
    r: dict[str, Any] = {"per_hit_us": per_hit_us(best[name], best[base], hits), "time_s": best[name]}
    if toggle is not None:
        toggle.check(hits)
        r["mechanism"] = toggle.mechanism
    return r


# -- 1, 2, 3 (kpsdk side), post handlers -------------------------------------------------------


def bench_single(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    log(f"x86_64 loop, {cfg.n:,} hits/run, best of {cfg.reps}: kpsdk paths and plain Unicorn hooks, interleaved")
    s = loop_session(cfg.n)
    run = lambda: s.call(CODE)  # noqa: E731
    uc, urun = plain_unicorn(cfg.n)
    kp = {
        "hook_empty": Toggle(s, addr=INC, pre_handler=empty_pre),
        "hook_nohandler": Toggle(s, addr=INC),
        "hook_two_args": Toggle(s, addr=INC, pre_handler=two_args_pre),
        "bp_empty": Toggle(s, optimize=False, addr=INC, pre_handler=empty_pre),
        "bp_two_args": Toggle(s, optimize=False, addr=INC, pre_handler=two_args_pre),
    }
    bare, rawh = UcHook(uc, INC), UcHook(uc, INC, raw=True)
    # two races, so that each round stays short: the cheap hook-path configurations with the
    # plain-Unicorn references (goal 1), then the dearer ones
    light = ("hook_empty", "hook_nohandler")
    configs: dict[str, Any] = {"base": (run, None, None)}
    configs.update({name: kp[name].config(run) for name in light})
    configs.update({"u_base": (urun, None, None), "u_bare": bare.config(urun), "u_raw": rawh.config(urun),
                    "u_int3": (plain_unicorn_int3(cfg.n), None, None)})
    best = race(configs, cfg.reps)
    heavy: dict[str, Any] = {"base": (run, None, None)}
    heavy.update({name: t.config(run) for name, t in kp.items() if name not in light})
    best2 = race(heavy, cfg.reps)
    best["base"] = min(best["base"], best2.pop("base"))
    best.update(best2)
    out: dict[str, Any] = {name: cost(best, name, "base", cfg.n, t) for name, t in kp.items()}
    out["base_s"], out["base_per_iter_us"] = best["base"], best["base"] / cfg.n * 1e6
    out["bare_hook_us"] = per_hit_us(best["u_bare"], best["u_base"], cfg.n)
    out["raw_ctypes_hook_us"] = per_hit_us(best["u_raw"], best["u_base"], cfg.n)
    out["raw_int3_us"] = per_hit_us(best["u_int3"], best["u_base"], cfg.n)
    out["plain_base_s"] = best["u_base"]

    # hook + step (post_handler), against a pre_handler-only hit on the same loop in the same race:
    # the goal is a flat ratio whatever the hits per run (one-shot step hooks made it grow)
    step = []
    for i, n in enumerate(cfg.step_n):
        at = CODE + 0x100 * (i + 1)
        s.write_memory(at, loop_code(n))
        srun = lambda at=at: s.call(at)  # noqa: E731
        t = Toggle(s, addr=at + INC_OFF, pre_handler=empty_pre, post_handler=empty_post)
        tp = Toggle(s, addr=at + INC_OFF, pre_handler=empty_pre)
        reps = 5 if n <= 10_000 else 3
        sbest = race({"base": (srun, None, None), "step": t.config(srun), "pre": tp.config(srun)}, reps)
        r = cost(sbest, "step", "base", n, t)
        r["hits_per_run"] = n
        r["pre_only"] = cost(sbest, "pre", "base", n, tp)
        step.append(r)
        log(f"  post_handler, {n:,} hits per run: {r['per_hit_us']:.2f} us/hit "
            f"(pre_handler only: {r['pre_only']['per_hit_us']:.2f} us)")
    out["step"] = step
    raw["single"] = out
    return out


# -- U: Unicorn facts behind the mechanisms' costs ------------------------------------------------


def bench_unicorn_facts(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    """Plain Unicorn, raw ctypes callbacks: what a hooked hit costs with K other code hooks, and
    what a pc write from a code hook adds (it ends the translation block)."""
    log("Unicorn facts: code hooks elsewhere vs a hooked hit; pc write from a hook")
    configs: dict[str, Any] = {}
    keep: list[Any] = []
    uc0, base_run = plain_unicorn(cfg.n)
    configs["base"] = (base_run, None, None)
    counts = (0, 32, 256, 1000)
    for k in counts:
        uc, run = plain_unicorn(cfg.n)
        hooks = FastHooks(uc)
        for i in range(k):  # never-run addresses
            hooks.code(lambda handle, addr, size, user: None, NOPS + i, NOPS + i)
        hooks.code(lambda handle, addr, size, user: None, INC, INC)
        uc.ctl_remove_cache(CODE, CODE + 0x1000)
        configs[f"hooks{k}"] = (run, None, None)
        keep.append((uc, hooks))
    # a code hook that writes the pc (to the next instruction: the lea is skipped, the loop still ends)
    uc, run = plain_unicorn(cfg.n)
    uch = ctypes.c_void_p(uc._uch.value)
    buf = ctypes.c_uint64(INC + 3)
    ref = ctypes.byref(buf)
    reg_write = ctypes.CDLL(uclib._name).uc_reg_write
    reg_write.restype = ctypes.c_int
    rip = x86_const.UC_X86_REG_RIP
    hooks = FastHooks(uc)
    hooks.code(lambda handle, addr, size, user: reg_write(uch, rip, ref), INC, INC)
    uc.ctl_remove_cache(CODE, CODE + 0x1000)
    configs["pc_write"] = (run, None, None)
    keep.append((uc, hooks, uch, buf, ref, reg_write))
    best = race(configs, cfg.reps)
    out = {f"hooked_hit_with_{k}_other_hooks_us": per_hit_us(best[f"hooks{k}"], best["base"], cfg.n)
           for k in counts}
    out["hook_pc_write_us"] = per_hit_us(best["pc_write"], best["base"], cfg.n)
    raw["unicorn"] = out
    return out


# -- 3: Qiling -----------------------------------------------------------------------------------


def ensure_qiling(install: bool) -> tuple[Path | None, str]:
    py = QILING_VENV / "bin" / "python"
    if py.exists():
        ok = subprocess.run([str(py), "-c", "import qiling"], capture_output=True, timeout=120)
        if ok.returncode == 0:
            return py, ""
    if not install:
        return None, "Qiling venv absent (--quick does not install it; run the full bench once)"
    log(f"installing Qiling into {QILING_VENV} (once; pip install qiling)")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(QILING_VENV)], check=True, capture_output=True, timeout=300)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "qiling"], capture_output=True, text=True,
                           timeout=900)
    except (subprocess.SubprocessError, OSError) as e:
        return None, f"cannot create the Qiling venv: {e}"
    if r.returncode != 0:
        lines = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
        return None, "pip install qiling failed: " + (lines[-1] if lines else f"exit {r.returncode}")
    return py, ""


def bench_qiling(cfg: Config, install: bool, raw: dict[str, Any]) -> dict[str, Any]:
    py, why = ensure_qiling(install)
    if py is None:
        raw["qiling"] = {"error": why}
        return raw["qiling"]
    runs = 1 if cfg.quick else 2  # separate processes cannot interleave: best of two whole runs
    log(f"Qiling (subprocess in its own venv, {runs}x): hook_address, empty and two register reads")
    best: dict[str, Any] = {}
    for _ in range(runs):
        r = subprocess.run([str(py), str(BENCH_DIR / "qiling_half.py"), str(cfg.n), str(cfg.reps)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
            raw["qiling"] = {"error": "the Qiling run failed: " + (lines[-1] if lines else f"exit {r.returncode}")}
            return raw["qiling"]
        got = json.loads(r.stdout.strip().splitlines()[-1])
        if not best:
            best = got
        else:
            for key in ("empty_us", "two_regs_us"):
                best[key] = min(best[key], got[key])
    raw["qiling"] = best
    return raw["qiling"]


# -- 4: probes elsewhere ---------------------------------------------------------------------------


def bench_elsewhere(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    log(f"probes elsewhere: {cfg.n_speed:,} loop iterations with 0/1/100/1000 probes on never-run nops")
    s = loop_session(cfg.n_speed, nops=1000)
    run = lambda: s.call(CODE)  # noqa: E731
    _, urun = plain_unicorn(cfg.n_speed)

    def knob(value: bool) -> Callable[[], None]:
        def set_knob() -> None:
            s.kprobes_enabled = value  # off: every probe disarmed (none armed); on: all re-armed
            # arming and disarming leave translations to drop at the next run's start (one merged
            # drop, kpsdk/targets/unicorn/target.py): done here, outside the timed run, as it was when
            # the drops were made at once; this row is the loop's speed, not the toggle's cost
            s.target._flush_stale()
        return set_knob

    out: dict[str, Any] = {}
    probes: list[Any] = []
    for count in (1, 100, 1000):
        while len(probes) < count:
            p = kpsdk.Kprobe(addr=NOPS + len(probes), pre_handler=empty_pre)
            s.register_kprobe(p)
            probes.append(p)
        armed = sum(1 for pt in s.target.manager.points.values() if pt.mechanism)
        # paired runs, none armed then all armed, back to back: the median of the pairs' ratios
        # (a noisy machine moves single runs by +-10%, more than the goal's 3% margin; a pair
        # mostly shares one phase of it, and the median drops the pairs that do not)
        pairs = [race({"none": (run, knob(False), knob(True)), "with": (run, None, None)}, 1)
                 for _ in range(cfg.speed_reps * cfg.speed_blocks)]
        ratios = sorted(b["none"] / b["with"] for b in pairs)
        q = len(ratios) // 4
        out[count] = {"none_s": min(b["none"] for b in pairs), "with_s": min(b["with"] for b in pairs),
                      "speed_ratio": ratios[len(ratios) // 2], "iqr": (ratios[q], ratios[-q - 1]),
                      "pairs": len(ratios), "armed": armed}
    s.kprobes_enabled = False
    best = race({"kpsdk": (run, None, None), "plain": (urun, None, None)}, cfg.speed_reps)
    out["kpsdk_no_probes_s"], out["plain_unicorn_s"] = best["kpsdk"], best["plain"]
    out["kpsdk_vs_plain"] = best["plain"] / best["kpsdk"]
    out["per_iter_us"] = best["plain"] / cfg.n_speed * 1e6
    if any(p.hits for p in probes):
        raise SystemExit("a probe on never-run code was hit")
    raw["elsewhere"] = out
    return out


# -- 5: many probes ----------------------------------------------------------------------------------


def bench_scale(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    """One session per (order, count), all prepared first, then every run interleaved."""
    top = cfg.scale[-1]
    out: dict[str, Any] = {"first": {}, "last": {}, "bp": {}}
    twin = CODE + 0x100  # the same loop, never probed: each session's own baseline
    configs: dict[str, Any] = {}
    kept: list[tuple[str, int, Any, Any]] = []
    for order in ("first", "last", "bp"):  # bp: registered last, optimization off (breakpoint path only)
        for count in cfg.scale:
            log(f"many probes: {count:,} registered, the measured one {order}")
            s = loop_session(cfg.n, nops=max(count - 1, 1))
            s.write_memory(twin, loop_code(cfg.n))
            if order == "bp":
                s.kprobes_optimization = False
            measured = kpsdk.Kprobe(addr=INC, pre_handler=empty_pre)
            t0 = timeit.default_timer()
            if order == "first":
                s.register_kprobe(measured)
            for i in range(count - 1):
                s.register_kprobe(kpsdk.Kprobe(addr=NOPS + i, pre_handler=empty_pre))
            if order != "first":
                s.register_kprobe(measured)
            reg_s = timeit.default_timer() - t0
            if count == top and order == "first":
                out["register_s"], out["registered"] = reg_s, len(s.target.manager.points)
            mech = mechanism_of(s, measured)
            measured.hits = 0
            configs[f"{order}{count}"] = (lambda s=s: s.call(CODE), None, None)
            configs[f"{order}{count}/base"] = (lambda s=s: s.call(twin), None, None)
            kept.append((order, count, s, measured))
            out[order][count] = {"mechanism": mech, "probes": count}
    log(f"many probes: {len(kept)} sessions' runs interleaved, best of {cfg.scale_reps}")
    best = race(configs, cfg.scale_reps)
    for order, count, s, measured in kept:
        if measured.hits != cfg.n * cfg.scale_reps:
            raise SystemExit(f"the measured probe hit {measured.hits} times, expected {cfg.n * cfg.scale_reps}")
        r = out[order][count]
        end = mechanism_of(s, measured)  # kpsdk may re-arm a hot probe while it runs
        if end != r["mechanism"]:
            r["mechanism"] = f"{r['mechanism']} -> {end}"
        r["per_hit_us"] = per_hit_us(best[f"{order}{count}"], best[f"{order}{count}/base"], cfg.n)
        r["time_s"] = best[f"{order}{count}"]
        log(f"  {count:>6,} probes, measured {order}: {r['per_hit_us']:.2f} us/hit ({r['mechanism']})")
        if order == "first" and count == top:
            probes = [p for pt in s.target.manager.points.values() for p in pt.probes]
            t0 = timeit.default_timer()
            s.unregister_kprobes(probes)
            out["unregister_s"] = timeit.default_timer() - t0
            batch = [kpsdk.Kprobe(addr=NOPS + i, pre_handler=empty_pre) for i in range(top - 1)]
            t0 = timeit.default_timer()
            s.register_kprobes(batch)
            out["register_batch_s"] = timeit.default_timer() - t0
            out["register_batch_n"] = len(batch)
        s.close()
    raw["scale"] = out
    return out


def micro(tests: dict[str, Callable[[], object]], cfg: Config) -> dict[str, Any]:
    """Per-call cost in us of each test, best of interleaved ``timeit`` rounds.

    A test that raises (kpsdk internals renamed) is reported as ``"n/a: ..."``.
    """
    failed: dict[str, Any] = {}
    for name, fn in list(tests.items()):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported in the table instead
            failed[name] = f"n/a: {type(e).__name__}: {e}"
            del tests[name]
    best = dict.fromkeys(tests, float("inf"))
    for _ in range(11 if cfg.quick else 41):
        for name, fn in tests.items():
            best[name] = min(best[name], timeit.timeit(fn, number=cfg.micro_n))
    return {**{name: t / cfg.micro_n * 1e6 for name, t in best.items()}, **failed}


# -- 6: register reads ------------------------------------------------------------------------------


def bench_regs(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    log("register reads: PtRegs vs uc.reg_read")
    s = loop_session(1)
    regs = s.regs()
    uc = s.target.uc
    fast = s.target.fast
    rdi = s.arch.register("rdi")
    rdi_id = x86_const.UC_X86_REG_RDI
    # each read is the first of a hit (the reset every hit does first): rdi and arg(0) come
    # from the per-hit snapshot of the first two argument registers, which a read in a
    # loop without the reset would only reuse
    reset = regs._reset
    tests: dict[str, Callable[[], object]] = {
        "regs.rdi": lambda: (reset(None), regs.rdi),
        "regs.arg(0)": lambda: (reset(None), regs.arg(0)),
        "regs[name]": lambda: (reset(None), regs["rdi"]),
        "regs.arg(1) after arg(0)": lambda: regs.arg(1),
        "regs._reset alone": lambda: reset(None),
        "FastRegs.read": lambda: fast.read(rdi),
        "uc.reg_read": lambda: uc.reg_read(rdi_id),
        "empty lambda": lambda: None,
    }
    out = micro(tests, cfg)
    raw["regs"] = out
    return out


# -- P: where a hook-path hit's time goes (kpsdk internals; rows skipped if they change) -------------


def bench_hotpath(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    log("hot-path pieces of one hook-path hit, called directly (timeit)")
    s = loop_session(1)
    target, manager = s.target, s.target.manager
    p = kpsdk.Kprobe(addr=INC, pre_handler=empty_pre)
    s.register_kprobe(p)
    point = manager.points[INC]
    regs = target.hit_regs
    on_hit = target._hook_callback(point)  # the point's code hook, as armed
    pieces: dict[str, Callable[[], object]] = {
        "the point's code hook (whole Python side of a hit)": lambda: on_hit(0, INC, 3, 0),
        "point.run_pre (pre() specialized to the point)": lambda: point.run_pre(regs),
        "manager.pre (generic)": lambda: manager.pre(point, regs),
        "regs._reset": lambda: regs._reset(INC),
        "point.needs_step": lambda: point.needs_step,
        "the empty pre_handler call": lambda: empty_pre(p, regs),
        "empty lambda (timeit floor)": lambda: None,
    }
    out: dict[str, Any] = micro(pieces, cfg)
    s.unregister_kprobe(p)
    # the breakpoint path: the interrupt hook's Python side, with the pc as int3 leaves it
    s.kprobes_optimization = False  # kept off while registered: turning it on re-optimizes the probe
    s.register_kprobe(p)
    fast, pc = target.fast, s.arch.register(s.arch.pc)
    after_int3 = INC + 1
    bp_pieces: dict[str, Callable[[], object]] = {
        "target._on_intr + a pc write (whole Python side of a breakpoint hit)":
            lambda: (fast.write(pc, after_int3), target._on_intr(0, 3, 0)),
        "a pc write alone (FastRegs.write)": lambda: fast.write(pc, after_int3),
    }
    hits = p.hits
    out.update(micro(bp_pieces, cfg))
    if p.hits == hits:
        raise RuntimeError("the breakpoint path was not taken")
    s.unregister_kprobe(p)
    s.kprobes_optimization = True
    raw["hotpath"] = out
    return out


# -- per architecture (fixtures) ------------------------------------------------------------------


#: the fixtures whose kprobe-vs-bare-hook rows bench_arches races, one after the other
FIXTURE_ARCHES = ("x86_64", "i386", "arm", "riscv64", "aarch64", "mips", "mipsel", "mips64el")
#: bench_kretprobe's rows: (fixture, function, its caller, optimized)
KRET_ROWS = (("x86_64", "inc", "loop", True), ("x86_64", "try_escape", "escapes", True),
             ("x86_64", "inc", "loop", False), ("i386", "inc", "loop", True), ("riscv64", "inc", "loop", True),
             ("arm", "inc", "loop", True), ("aarch64", "inc", "loop", True), ("mips", "inc", "loop", True),
             ("mipsel", "inc", "loop", True), ("mips64el", "inc", "loop", True))


def bench_arches(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arch in FIXTURE_ARCHES:
        n = cfg.n_fixture
        log(f"fixture {arch}: loop({n:,}) with a kprobe on inc; bare hook on the same Unicorn")
        s = kpsdk.open(f"elf:{fixture_path(arch)}")
        run = lambda s=s, n=n: s.call("loop", n)  # noqa: E731
        inc = s.symbols.resolve("inc")
        hook = Toggle(s, symbol_name="inc", pre_handler=empty_pre)
        bp = Toggle(s, optimize=False, symbol_name="inc", pre_handler=empty_pre)
        bare = UcHook(s.target.uc, inc)
        best = race({"base": (run, None, None), "hook": hook.config(run), "bp": bp.config(run),
                     "bare": bare.config(run)}, cfg.reps)
        out[arch] = {"hook": cost(best, "hook", "base", n, hook), "bp": cost(best, "bp", "base", n, bp),
                     "bare_hook_us": per_hit_us(best["bare"], best["base"], n),
                     "base_per_iter_us": best["base"] / n * 1e6}
        s.close()
    raw["arches"] = out
    return out


class UpToggle:
    """A uprobe (``PROG:inc``) registered in the session before and unregistered after each timed run."""

    def __init__(self, s: Any, spec: str) -> None:
        self.s = s
        self.probe = kpsdk.Uprobe(spec=spec, pre_handler=empty_pre)
        self.runs = 0

    def on(self) -> None:
        self.s.register_uprobe(self.probe)
        self.runs += 1

    def off(self) -> None:
        self.s.unregister_uprobe(self.probe)

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off


def bench_uprobe(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    """A uprobe on the x86_64 fixture's inc next to a kprobe on it, in one race (goal <= 1.1x)."""
    n = cfg.n_fixture
    log(f"uprobe on the x86_64 fixture's inc, loop({n:,}), next to a kprobe")
    prog = fixture_path("x86_64")
    s = kpsdk.open(f"elf:{prog}")
    run = lambda: s.call("loop", n)  # noqa: E731
    k = Toggle(s, symbol_name="inc", pre_handler=empty_pre)
    u = UpToggle(s, f"{prog}:inc")
    best = race({"base": (run, None, None), "k": k.config(run), "u": u.config(run)}, cfg.reps)
    if u.probe.hits != n * u.runs:  # a Uprobe's hits add up over the sessions it was armed in
        raise SystemExit(f"the uprobe hit {u.probe.hits} times, expected {n * u.runs}")
    out = {"kprobe": cost(best, "k", "base", n, k), "uprobe_us": per_hit_us(best["u"], best["base"], n)}
    s.close()
    raw["uprobe"] = out
    return out


class RetToggle:
    """A kretprobe registered before and unregistered after each of its timed runs.

    ``detour=False`` keeps its entry on the hook path where it would get a detour
    (the engine's planner is switched off for the run): the kretprobe as it was
    before detours, and as it is wherever a function cannot have one."""

    def __init__(self, s: Any, optimize: bool = True, detour: bool = True, **fields: Any) -> None:
        self.s, self.optimize, self.detour = s, optimize, detour
        self.returns = 0
        self.probe = kpsdk.Kretprobe(handler=self.on_return, maxactive=64, **fields)
        self.runs = 0
        self.mechanism = ""

    def on_return(self, ri: Any, regs: Any) -> None:
        self.returns += 1

    def on(self) -> None:
        if not self.optimize:
            self.s.kprobes_optimization = False
        if not self.detour:
            self.s.target.detours.plan = lambda point: None
        self.s.register_kretprobe(self.probe)
        self.mechanism = str(self.s.target.manager.point_of(self.probe).mechanism)
        self.runs += 1

    def off(self) -> None:
        self.s.unregister_kretprobe(self.probe)
        if not self.detour:
            del self.s.target.detours.plan
        if not self.optimize:
            self.s.kprobes_optimization = True

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off

    def check(self, hits: int) -> None:
        if self.returns != hits * self.runs or self.probe.nmissed:
            raise SystemExit(f"{self.probe!r} saw {self.returns} returns, expected {hits * self.runs}")


class Both:
    """A kprobe and a kretprobe on one function, registered together around each run."""

    def __init__(self, k: Toggle, r: RetToggle) -> None:
        self.k, self.r = k, r

    def on(self) -> None:
        self.r.on()
        self.k.on()

    def off(self) -> None:
        self.k.off()
        self.r.off()

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off


class RawReturnHook:
    """The floor of the trampoline mechanism, by hand on the session's own Unicorn: a raw ctypes
    code hook at the function reads sp and the return address and writes the trampoline address
    over it; one at the trampoline reads the sp the trampoline stored and writes the saved address
    into the word its jump goes through (host memory, as kpsdk does).  The register and memory
    accesses a kretprobe hit on the hook path cannot do without, and nothing else."""

    def __init__(self, s: Any, func: str) -> None:
        t = s.target
        self.t, self.func = t, s.symbols.resolve(func)
        self.tramp = t._alloc_slot()  # a free slot of kpsdk's area
        code, hook, word = t.arch.require("out_of_line.return_jump", "the bench's trampoline")(
            self.tramp, t.arch.isets[0], t.detours.sp_word)
        t.write_code(self.tramp, code)
        self.hook_at = self.tramp + hook
        self.word = (self.tramp + word - t._area) // t.arch.word_size
        self.hooks = FastHooks(t.uc)
        self.handles: list[int] = []
        self.saved: list[int] = []

    def on(self) -> None:
        t, fast, saved, tramp, word = self.t, self.t.fast, self.saved, self.tramp, self.word
        sp = t._sp
        link = t.arch.register(t.arch.link) if t.arch.link else None
        read_word, area = t.read_word, t._area_words

        def entry(handle: int, addr: int, size: int, user: int) -> None:
            at = fast.read(sp)
            if link is not None:
                saved.append(fast.read(link))
                fast.write(link, tramp)
            else:
                saved.append(read_word(at))
                t.hijack_word(at, tramp)

        data, sp_at = t.detours.words, (t.detours.sp_word - t.detours.data) // t.arch.word_size

        def back(handle: int, addr: int, size: int, user: int) -> None:
            data[sp_at]  # the sp the trampoline stored
            area[word] = saved.pop()

        if t.arch.endian != sys.byteorder:  # a big-endian guest (ppc64, mips): its byte order, as kpsdk writes it
            mem, packer, offset = t._area_mem, t._word, word * t.arch.word_size

            def back(handle: int, addr: int, size: int, user: int) -> None:  # noqa: F811
                data[sp_at]
                packer.pack_into(mem, offset, saved.pop())

        self.handles = [self.hooks.code(entry, self.func, self.func),
                        self.hooks.code(back, self.hook_at, self.hook_at)]
        t.uc.ctl_remove_cache(self.func, self.func + 4)

    def off(self) -> None:
        for h in self.handles:
            self.hooks.delete(h)
        self.t.uc.ctl_remove_cache(self.func, self.func + 4)

    def config(self, run: Callable[[], object]) -> tuple[Callable[[], object], Callable[[], None], Callable[[], None]]:
        return run, self.on, self.off


def bench_kretprobe(cfg: Config, raw: dict[str, Any]) -> str | dict[str, Any]:
    """Kretprobe hits next to kprobe hits on the same function, called by a loop in
    the fixture (inc by loop; on x86_64 also try_escape by escapes, since x86_64's
    inc is too short for a detour); kprobe + kretprobe on it next to the
    kretprobe alone on the hook path; per arch and (x86_64) per entry mechanism."""
    if "kretprobe" not in kpsdk.get_registry().probe_types:
        raw["kretprobe"] = "n/a: no kretprobe probe type is registered in this kpsdk"
        return raw["kretprobe"]
    out: dict[str, Any] = {}
    for arch, func, caller, optimize in KRET_ROWS:
        n = cfg.n_fixture if func == "inc" else cfg.n_fixture // 4
        label = f"{arch} {func}{'' if optimize else ' bp'}"
        log(f"kretprobe on the {arch} fixture's {func}, {caller}({n:,}), {'optimized' if optimize else 'breakpoint'}")
        s = kpsdk.open(f"elf:{fixture_path(arch)}")
        run = lambda s=s, n=n, caller=caller: s.call(caller, n)  # noqa: E731
        k = Toggle(s, optimize=optimize, symbol_name=func, pre_handler=empty_pre)
        r = RetToggle(s, optimize=optimize, symbol_name=func)
        r_hook = RetToggle(s, optimize=optimize, detour=False, symbol_name=func)
        kr_k = Toggle(s, optimize=optimize, symbol_name=func, pre_handler=empty_pre)
        kr_r = RetToggle(s, optimize=optimize, symbol_name=func)
        floor = RawReturnHook(s, func)
        best = race({"base": (run, None, None), "k": k.config(run), "r": r.config(run), "r_hook": r_hook.config(run),
                     "kr": Both(kr_k, kr_r).config(run), "floor": floor.config(run)}, cfg.reps)
        for t in (r, r_hook, kr_r):
            t.check(n)
        kr_k.check(n)
        out[label] = {"kprobe": cost(best, "k", "base", n, k), "kretprobe_us": per_hit_us(best["r"], best["base"], n),
                      "entry": r.mechanism, "kretprobe_hook_us": per_hit_us(best["r_hook"], best["base"], n),
                      "both_us": per_hit_us(best["kr"], best["base"], n),
                      "floor_us": per_hit_us(best["floor"], best["base"], n)}
        s.close()
    raw["kretprobe"] = out
    return out


# -- W: a data watchpoint that never fires, on a load/store-heavy loop ------------------------------------

#: a watched word on a page of its own (issue 38: a watchpoint slows only accesses to its page)
WATCH_OTHER = 0x600100


def bench_watch(cfg: Config, raw: dict[str, Any]) -> dict[str, Any]:
    """Loop speed with a data watchpoint armed elsewhere on the loop's data page (never fires), for
    types w and rw, next to none; and the cost of a watchpoint hit (a store to the watched word)."""
    if "watchpoint" not in kpsdk.get_registry().probe_types:
        raw["watch"] = {"error": "n/a: no watchpoint probe type is registered in this kpsdk"}
        return raw["watch"]
    n = cfg.n_speed
    log(f"watchpoints: {n:,} iterations of 2 loads + 2 stores, a watchpoint that never fires (w, rw), and hits")
    # one session per configuration, the watchpoint armed throughout: registering and unregistering
    # retranslate the code, which would be timed too
    sessions = {kind: watch_loop_session(n) for kind in ("none", "w", "rw", "w-other", "rw-other")}
    wps = {kind: kpsdk.Watchpoint(addr=WATCH_WORD, length=4, type=kind, handler=lambda wp, regs, a: None)
           for kind in ("w", "rw")}
    for kind in ("w-other", "rw-other"):  # a watched word on a page of its own, which the loop never touches
        sessions[kind].target.map(WATCH_OTHER & ~0xFFF, 0x1000, "rw")
        wps[kind] = kpsdk.Watchpoint(addr=WATCH_OTHER, length=4, type=kind.split("-")[0],
                                     handler=lambda wp, regs, a: None)
    for kind, wp in wps.items():
        sessions[kind].register_watchpoint(wp)
    best = race({kind: (lambda s=s: s.call(CODE), None, None) for kind, s in sessions.items()}, cfg.speed_reps)
    if any(wp.hits for wp in wps.values()):
        raise SystemExit("a watchpoint on a word the loop never touches fired")
    hits = bench_watch_hits(max(1, cfg.n // 2), cfg.reps, log)
    out = {"none_s": best["none"], "w_s": best["w"], "rw_s": best["rw"], "iterations": n,
           "w_slowdown": best["w"] / best["none"], "rw_slowdown": best["rw"] / best["none"],
           "w_other_s": best["w-other"], "rw_other_s": best["rw-other"],
           "w_other_slowdown": best["w-other"] / best["none"], "rw_other_slowdown": best["rw-other"] / best["none"],
           **hits}
    for s in sessions.values():
        s.close()
    raw["watch"] = out
    return out


# -- 5: a million probes (bench/million.py, in a process of its own: ~1-2 GB) ----------------------------


def bench_million(cfg: Config) -> dict[str, Any]:
    counts = "1,10000" if cfg.quick else "1,100000,1000000"
    log(f"a million probes: {counts} kprobes registered in one session each (bench/million.py)")
    done = subprocess.run([sys.executable, str(BENCH_DIR / "million.py"), "--counts", counts, "--reps", "7"],
                          capture_output=True, text=True, timeout=3600, check=False)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return dict(json.loads(lines[-1]))


def million_rows(raw: dict[str, Any]) -> list[Row]:
    if "results" not in raw:
        return [Row("5", "a million kprobes in one session", "n/a", "", "", "", raw.get("error", "not run"))]
    out = []
    for r in raw["results"][1:]:
        n = r["probes"]
        out.append(Row("5", f"{n:,} kprobes registered in one session with register_kprobes (CPU per probe)",
                       us(r["register_us"]), "", "", "<= 30 us", status(r["register_us"] <= 30)))
        out.append(Row("5", f"  resident memory per probe, {n:,} probes", f"{r['rss_kb_per_probe']:.2f} KB", "", "",
                       "<= 1 KB", status(r["rss_kb_per_probe"] <= 1)))
        out.append(Row("5", f"  per hit with {n:,} probes, optimization off ({r['bp_mechanism']})",
                       us(r["bp_per_hit_us"]), f"1 probe: {us(raw['results'][0]['bp_per_hit_us'])}",
                       f"{r['bp_hit_vs_one']:.2f}x", "<= 1.5x", status(r["bp_hit_vs_one"] <= 1.5)))
        out.append(Row("5", f"  per hit with {n:,} probes, the measured one promoted ({r['mechanism']})",
                       us(r["per_hit_us"]), f"1 probe: {us(raw['results'][0]['per_hit_us'])}",
                       f"{r['hit_vs_one']:.2f}x", "<= 1.5x", status(r["hit_vs_one"] <= 1.5)))
    return out


# -- report --------------------------------------------------------------------------------------------


def optimize_of(label: str) -> bool:
    return not label.endswith(" bp")


def status(ok: bool) -> str:
    return "met" if ok else "NOT met"


def build_rows(cfg: Config, raw: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    one = raw["single"]
    bare = one["bare_hook_us"]
    he, bp = one["hook_empty"], one["bp_empty"]
    rows.append(Row("1", f"kprobe hit, empty pre_handler, default path ({he['mechanism']})", us(he["per_hit_us"]),
                    f"bare UC_HOOK_CODE {us(bare)}", f"{he['per_hit_us'] / bare:.2f}x", "<= 1.3x",
                    status(he["per_hit_us"] / bare <= 1.3)))
    hn = one["hook_nohandler"]
    rows.append(Row("1", "  kprobe hit, no pre_handler at all (hook path)", us(hn["per_hit_us"]),
                    f"bare UC_HOOK_CODE {us(bare)}", f"{hn['per_hit_us'] / bare:.2f}x"))
    rows.append(Row("1", "  floor: raw ctypes code hook, empty (kpsdk's hook mechanism)",
                    us(one["raw_ctypes_hook_us"]), f"bare UC_HOOK_CODE {us(bare)}",
                    f"{one['raw_ctypes_hook_us'] / bare:.2f}x"))
    rows.append(Row("2", f"kprobe hit, empty pre_handler, optimization off ({bp['mechanism']})",
                    us(bp["per_hit_us"]), f"bare UC_HOOK_CODE {us(bare)}", f"{bp['per_hit_us'] / bare:.2f}x",
                    "none (dearer by design)"))
    rows.append(Row("2", "  floor: int3 + raw ctypes interrupt hook + pc write to a slot, plain Unicorn",
                    us(one["raw_int3_us"]), f"bare UC_HOOK_CODE {us(bare)}", f"{one['raw_int3_us'] / bare:.2f}x"))
    for st in one["step"]:
        pre = st["pre_only"]["per_hit_us"]
        ratio = st["per_hit_us"] / pre
        rows.append(Row("2", f"kprobe hit with post_handler ({st['mechanism']}+step), {st['hits_per_run']:,} hits/run",
                        us(st["per_hit_us"]), f"pre_handler only ({st['pre_only']['mechanism']}) {us(pre)}",
                        f"{ratio:.2f}x", "<= 3x, flat", status(ratio <= 3)))
    q = raw.get("qiling", {})
    k2 = one["hook_two_args"]
    if "error" in q:
        rows.append(Row("3", "handler reading 2 args vs Qiling hook_address + 2 reg reads", us(k2["per_hit_us"]),
                        "n/a", "n/a", QILING_GOAL, f"n/a: {q['error']}"))
    elif q:
        r3 = q["two_regs_us"] / k2["per_hit_us"]
        rows.append(Row("3", f"handler reading regs.arg(0), regs.arg(1) ({k2['mechanism']})", us(k2["per_hit_us"]),
                        f"Qiling {q['qiling']} (unicorn {q['unicorn']}): {us(q['two_regs_us'])}",
                        f"{r3:.2f}x faster", QILING_GOAL, status(r3 >= 5)))
        rows.append(Row("3", "  empty hook: kpsdk hook path vs Qiling hook_address", us(he["per_hit_us"]),
                        f"Qiling: {us(q['empty_us'])}", f"{q['empty_us'] / he['per_hit_us']:.2f}x faster"))
    b2 = one["bp_two_args"]
    rows.append(Row("3", "  handler reading 2 args, breakpoint path", us(b2["per_hit_us"]),
                    f"Qiling: {us(q['two_regs_us'])}" if q and "error" not in q else "",
                    f"{q['two_regs_us'] / b2['per_hit_us']:.2f}x faster" if q and "error" not in q else ""))
    el = raw["elsewhere"]
    for count in (1, 100, 1000):
        e = el[count]
        spread = f" (IQR {e['iqr'][0]:.3f}-{e['iqr'][1]:.3f})"
        rows.append(Row("4", f"loop speed with {count:,} probes on never-run code (vs none armed)",
                        f"{e['with_s'] * 1e3:.2f} ms", f"none: {e['none_s'] * 1e3:.2f} ms",
                        f"{e['speed_ratio']:.3f}x speed{spread}", ">= 0.97x", status(e["speed_ratio"] >= 0.97)))
    rows.append(Row("4", "  kpsdk session, no probes, vs plain Unicorn", f"{el['kpsdk_no_probes_s'] * 1e3:.1f} ms",
                    f"plain: {el['plain_unicorn_s'] * 1e3:.1f} ms", f"{el['kpsdk_vs_plain']:.3f}x speed",
                    ">= 0.97x", status(el["kpsdk_vs_plain"] >= 0.97)))
    sc = raw["scale"]
    counts = [c for c in cfg.scale]
    top = counts[-1]
    for label, series in (("measured registered first", sc["first"]), ("measured registered last", sc["last"]),
                          ("optimization off", sc["bp"])):
        one = series[1]["per_hit_us"]
        for c in counts:
            ratio = series[c]["per_hit_us"] / one
            rows.append(Row("5", f"per hit, {c:,} probes, {label} ({series[c]['mechanism']})",
                            us(series[c]["per_hit_us"]), f"1 probe: {us(one)}", f"{ratio:.2f}x",
                            "<= 1.5x" if c == top else "", status(ratio <= 1.5) if c == top else ""))
    rows.append(Row("5", f"register {sc['registered']:,} probes one by one", f"{sc['register_s']:.2f} s",
                    f"{sc['register_s'] / sc['registered'] * 1e6:.0f} us/probe"))
    rows.append(Row("5", f"  register_kprobes() of {sc['register_batch_n']:,} at once / unregister_kprobes() of "
                    f"{sc['registered']:,}", f"{sc['register_batch_s']:.2f} s",
                    f"unregister: {sc['unregister_s']:.2f} s"))
    rg = raw["regs"]
    fast_ok = isinstance(rg["regs.rdi"], float) and isinstance(rg["uc.reg_read"], float)
    rows.append(Row("6", "register read regs.rdi, the first of a hit (attribute, with the reset)",
                    us(rg["regs.rdi"]),
                    f"uc.reg_read {us(rg['uc.reg_read'])}",
                    f"{rg['uc.reg_read'] / rg['regs.rdi']:.2f}x faster" if fast_ok else "n/a", "none set",
                    "info" if fast_ok else "n/a"))
    rows.append(Row("6", "  regs.arg(0) / regs[\"rdi\"] (with the reset) / FastRegs.read",
                    f"{us(rg['regs.arg(0)'])} / {us(rg['regs[name]'])} / {us(rg['FastRegs.read'])}",
                    f"uc.reg_read {us(rg['uc.reg_read'])}"))
    rows.append(Row("6", "  regs.arg(1) after arg(0) in the same hit / the reset alone",
                    f"{us(rg['regs.arg(1) after arg(0)'])} / {us(rg['regs._reset alone'])}", ""))
    uf = raw["unicorn"]
    h0 = uf["hooked_hit_with_0_other_hooks_us"]
    for k in (32, 256, 1000):
        v = uf[f"hooked_hit_with_{k}_other_hooks_us"]
        rows.append(Row("U", f"plain Unicorn: raw hooked hit with {k:,} other code hooks (never hit)", us(v),
                        f"no other hooks: {us(h0)}", f"{v / h0:.2f}x"))
    rows.append(Row("U", "plain Unicorn: raw code hook that writes the pc (ends the TB)", us(uf["hook_pc_write_us"]),
                    f"no pc write: {us(h0)}", f"+{uf['hook_pc_write_us'] - h0:.2f} us"))
    hp = raw["hotpath"]
    if "error" in hp:
        rows.append(Row("P", "pieces of a hit", "n/a", "", "", "", f"n/a: {hp['error']}"))
    for name, v in hp.items():
        if name != "error":
            rows.append(Row("P", f"piece of a hit, called directly: {name}", us(v), "", "", "",
                            "info" if isinstance(v, float) else "n/a"))
    for arch, r in raw["arches"].items():
        b = r["bare_hook_us"]
        rows.append(Row("A", f"{arch} fixture loop(): kprobe hook path [OPTIMIZED] / breakpoint path",
                        f"{us(r['hook']['per_hit_us'])} / {us(r['bp']['per_hit_us'])}", f"bare hook {us(b)}",
                        f"{r['hook']['per_hit_us'] / b:.2f}x / {r['bp']['per_hit_us'] / b:.2f}x", "<= 1.3x (hook)",
                        status(r["hook"]["per_hit_us"] / b <= 1.3)))
    up = raw.get("uprobe")
    if up:
        k, u = up["kprobe"]["per_hit_us"], up["uprobe_us"]
        rows.append(Row("A", "x86_64 fixture inc: uprobe hit (PROG:inc), empty pre_handler", us(u),
                        f"kprobe ({up['kprobe']['mechanism']}) {us(k)}", f"{u / k:.2f}x", "<= 1.1x",
                        status(u / k <= 1.1)))
    kr = raw["kretprobe"]
    if isinstance(kr, str):
        rows.append(Row("R", "kretprobe hit vs kprobe hit", "n/a", "", "", "<= 2.5x", kr))
    else:
        for label, r in kr.items():
            k = r["kprobe"]
            ratio = r["kretprobe_us"] / k["per_hit_us"]
            rows.append(Row("R", f"{label}: kretprobe hit (entry on the {r['entry']} path + return) vs kprobe "
                            f"({k['mechanism']})", us(r["kretprobe_us"]), f"kprobe {us(k['per_hit_us'])}",
                            f"{ratio:.2f}x", "<= 2.5x", status(ratio <= 2.5)))
            if r["entry"] in ("detour", "hooked-entry"):
                rows.append(Row("R", f"  {label}: the same kretprobe with its entry kept on the hook path",
                                us(r["kretprobe_hook_us"]), f"kprobe {us(k['per_hit_us'])}",
                                f"{r['kretprobe_hook_us'] / k['per_hit_us']:.2f}x"))
            rows.append(Row("R", f"  {label}: kprobe + kretprobe vs the kretprobe alone, both entries on the "
                            "same path", us(r["both_us"]), f"kretprobe {us(r['kretprobe_hook_us'])}",
                            f"{r['both_us'] / r['kretprobe_hook_us']:.2f}x", "kprobes.rst: ~1x"))
            if optimize_of(label):
                rows.append(Row("R", f"  floor: the same hijack and return by two raw ctypes hooks ({label})",
                                us(r["floor_us"]), f"kprobe {us(k['per_hit_us'])}",
                                f"{r['floor_us'] / k['per_hit_us']:.2f}x"))
    rows += kretentry_rows(raw.get("kretentry", {"error": "not run"}), Row, us, status)
    rows += register_rows(raw.get("register", {}), Row, us, status)
    rows += traceevents_rows(raw.get("traceevents", {"error": "not run"}), Row, us, status)
    rows += million_rows(raw.get("million", {"error": "not run"}))
    rows += tlbfill_rows(raw.get("tlbfill", {"error": "not run"}), Row, us)
    wt = raw.get("watch", {"error": "not run"})
    if "error" in wt:
        rows.append(Row("W", "loop speed with a data watchpoint that never fires", "n/a", "", "", "", wt["error"]))
    else:
        rows.append(Row("W", f"loop of 2 loads + 2 stores, a watchpoint (w / rw) armed that never fires, vs none "
                        f"({wt['iterations']:,} iterations)", f"{wt['w_s'] * 1e3:.1f} / {wt['rw_s'] * 1e3:.1f} ms",
                        f"no watchpoint {wt['none_s'] * 1e3:.1f} ms",
                        f"{wt['w_slowdown']:.2f}x / {wt['rw_slowdown']:.2f}x",
                        "none (the loop's own page: a page kept written beside the watch moves it to the memory "
                        "hook, whose code takes the slow path for every access)"))
        rows.append(Row("W", "  the same, the watched word on a page the loop never touches (w / rw)",
                        f"{wt['w_other_s'] * 1e3:.1f} / {wt['rw_other_s'] * 1e3:.1f} ms",
                        f"no watchpoint {wt['none_s'] * 1e3:.1f} ms",
                        f"{wt['w_other_slowdown']:.2f}x / {wt['rw_other_slowdown']:.2f}x", "<= 1.5x",
                        status(wt["w_other_slowdown"] <= 1.5)))
        rows.append(Row("W", f"  watchpoint hit (w, empty handler), registered around each run: its first hit "
                        f"learns the site ({wt['hits_per_run']:,} hits/run; CPU time)", us(wt["hit_us"]),
                        f"bare recording hook {us(wt['bare_us'])}", f"{wt['hit_ratio']:.2f}x", "<= 5x",
                        status(wt["hit_ratio"] <= 5)))
        rows.append(Row("W", "  watchpoint hit on a learned site (registered for the whole race)", us(wt["steady_us"]),
                        f"bare recording hook {us(wt['bare_us'])}", f"{wt['steady_ratio']:.2f}x", "<= 5x",
                        status(wt["steady_ratio"] <= 5)))
    return rows


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def machine_facts(note: str = "") -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    # the commit of the kpsdk that is imported, when it is this repository's work tree (read-only git calls)
    src = Path(kpsdk.__file__).resolve().parent
    commit = ""
    if src.parent == BENCH_DIR.parent:
        try:
            git = ["git", "-C", str(src.parent)]
            commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    timeout=10).stdout.strip()
            dirty = subprocess.run([*git, "status", "--porcelain", "--", "kpsdk", "plugins", "arch_backends"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            if commit and dirty:
                commit += " + uncommitted changes"
        except (OSError, subprocess.SubprocessError):
            pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "unicorn": version("unicorn"),
        "capstone": version("capstone"),
        "kpsdk": version("kpsdk"),
        "commit": commit,
        "kpsdk_source": str(src),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "opt_limit": OPT_LIMIT,
        "note": note,
    }


def markdown(rows: list[Row], facts: dict[str, Any], cfg: Config, elapsed: float) -> str:
    head = (f"Machine: {facts['cpu']}, {facts['cores']} cores; Python {facts['python']}, "
            f"unicorn {facts['unicorn']}, capstone {facts['capstone']}, kpsdk {facts['kpsdk']}"
            f"{' @ ' + facts['commit'] if facts['commit'] else ''}; {facts['date']}; "
            f"{'--quick' if cfg.quick else 'full'} run, {elapsed:.0f} s; {cfg.n:,} hits per x86_64 run, "
            f"best of {cfg.reps}.{' ' + facts['note'] if facts['note'] else ''}\n\n")
    lines = ["| # | measurement | kpsdk | reference | ratio | goal | status |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r.section, r.name.strip(), r.kpsdk, r.reference, r.ratio, r.goal, r.status]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return head + "\n".join(lines) + "\n"


def print_table(rows: list[Row], facts: dict[str, Any], cfg: Config, elapsed: float) -> None:
    title = (f"kpsdk bench ({'quick' if cfg.quick else 'full'}, {elapsed:.0f} s) - {facts['cpu']}, "
             f"{facts['cores']} cores, Python {facts['python']}, unicorn {facts['unicorn']}, "
             f"capstone {facts['capstone']}, {facts['date']}")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print(markdown(rows, facts, cfg, elapsed))
        return
    table = Table(title=title, show_lines=False)
    for col in ("#", "measurement", "kpsdk", "reference", "ratio", "goal", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = {"met": "green", "NOT met": "red"}.get(r.status, "")
        table.add_row(r.section, r.name, r.kpsdk, r.reference, r.ratio, r.goal, r.status, style=style)
    Console(width=max(200, int(os.environ.get("COLUMNS", "0") or 0))).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs (under 30 s); skips installing Qiling")
    ap.add_argument("--no-qiling", action="store_true", help="skip the Qiling comparison")
    ap.add_argument("--note", default="", help="a note recorded with the results (what kpsdk was measured)")
    ap.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="where latest.json/latest.md go")
    args = ap.parse_args(argv)
    cfg = QUICK if args.quick else FULL
    t0 = timeit.default_timer()
    raw: dict[str, Any] = {}
    facts = machine_facts(args.note)
    bench_single(cfg, raw)
    if args.no_qiling:
        raw["qiling"] = {"error": "skipped (--no-qiling)"}
    else:
        bench_qiling(cfg, not cfg.quick, raw)
    bench_unicorn_facts(cfg, raw)
    bench_elsewhere(cfg, raw)
    bench_scale(cfg, raw)
    bench_regs(cfg, raw)
    try:
        bench_hotpath(cfg, raw)
    except Exception as e:  # noqa: BLE001 - kpsdk internals changed: leave the breakdown out
        raw["hotpath"] = {"error": f"{type(e).__name__}: {e}"}
    bench_arches(cfg, raw)
    bench_uprobe(cfg, raw)
    bench_kretprobe(cfg, raw)
    raw["kretentry"] = bench_kretentry(cfg.reps, cfg.n_fixture, log)
    raw["register"] = bench_register(3 if cfg.quick else 7, log)
    raw["register"]["nops"] = bench_register_nops(3 if cfg.quick else 7, log)
    raw["traceevents"] = bench_traceevents(5 if cfg.quick else 15, cfg.n_fixture // 2, log)
    bench_watch(cfg, raw)
    raw["tlbfill"] = bench_tlbfill(3 if cfg.quick else 7, log)
    raw["million"] = bench_million(cfg)
    elapsed = timeit.default_timer() - t0
    rows = build_rows(cfg, raw)
    print_table(rows, facts, cfg, elapsed)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"machine": facts, "config": asdict(cfg), "elapsed_s": elapsed, "rows": [asdict(r) for r in rows],
           "raw": raw}
    (args.out / "latest.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (args.out / "latest.md").write_text(markdown(rows, facts, cfg, elapsed))
    print(f"wrote {args.out / 'latest.json'} and {args.out / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
