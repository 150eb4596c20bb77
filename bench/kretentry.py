"""Bench rows R (entry handlers): a kretprobe with an entry_handler next to a kprobe on the same function.

An entry_handler is a call into Python at every entry, so the best a kretprobe
with one can do is a kretprobe without one plus one kprobe hit (issue 19,
item 2).  Measured, in one race per fixture function with the kprobe and the
unprobed loop as references: the kretprobe with an empty entry_handler on the
path kpsdk picks (the detour's guest entry code then a hook on its displaced
instructions, or a function's hooked entry when the jump does not fit), and
the same probe with the detour planner switched off (the hook path, how it
was before).  Called from ``bench/run.py``; the rows use its ``Row``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from workload import per_hit_us, race

import kpsdk
from kpsdk.fixtures import path as fixture_path

#: (arch, function, caller): inc is too short for a detour on x86_64 (a hooked entry)
CASES = (("x86_64", "inc", "loop"), ("x86_64", "try_escape", "escapes"), ("i386", "inc", "loop"),
         ("riscv64", "inc", "loop"), ("arm", "inc", "loop"), ("thumb", "inc", "loop"))


def _empty_pre(p: Any, regs: Any) -> int:
    return 0


class _Probe:
    """A probe registered before and unregistered after each timed run; its hits checked."""

    def __init__(self, s: Any, make: Callable[[], Any], hook_path: bool = False) -> None:
        self.s, self.make, self.hook_path = s, make, hook_path
        self.probe: Any = None
        self.calls = self.returns = self.entries = 0
        self.mechanism = ""

    def on(self) -> None:
        if self.hook_path:
            self.s.target.detours.plan = lambda point: None
        self.probe = self.make()
        if isinstance(self.probe, kpsdk.Kretprobe):
            self.probe.handler = self._on_return
            self.probe.entry_handler = self._on_entry
            self.s.register_kretprobe(self.probe)
        else:
            self.s.register_kprobe(self.probe)
        self.mechanism = str(self.s.target.manager.point_of(self.probe).mechanism)

    def _on_entry(self, ri: Any, regs: Any) -> int:
        self.entries += 1
        return 0

    def _on_return(self, ri: Any, regs: Any) -> None:
        self.returns += 1

    def off(self) -> None:
        if isinstance(self.probe, kpsdk.Kretprobe):
            self.s.unregister_kretprobe(self.probe)
        else:
            self.s.unregister_kprobe(self.probe)
        if self.hook_path:
            del self.s.target.detours.plan
        self.calls += self.probe.hits
        if self.probe.nmissed:
            raise SystemExit(f"{self.probe!r} missed {self.probe.nmissed} calls")


def bench_kretentry(reps: int, n_fixture: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Per-hit costs (us) of kprobe, kretprobe + entry_handler (kpsdk's path), and the same on the hook path."""
    if "kretprobe" not in kpsdk.get_registry().probe_types:
        return {"error": "no kretprobe probe type is registered in this kpsdk"}
    out: dict[str, Any] = {}
    for arch, func, caller in CASES:
        n = n_fixture if func == "inc" else n_fixture // 4
        log(f"kretprobe with an entry_handler on the {arch} fixture's {func}, {caller}({n:,})")
        s = kpsdk.open(f"elf:{fixture_path(arch)}")
        run = lambda s=s, n=n, caller=caller: s.call(caller, n)  # noqa: E731
        k = _Probe(s, lambda func=func: kpsdk.Kprobe(symbol_name=func, pre_handler=_empty_pre))
        re = _Probe(s, lambda func=func: kpsdk.Kretprobe(symbol_name=func, maxactive=64))
        re_hook = _Probe(s, lambda func=func: kpsdk.Kretprobe(symbol_name=func, maxactive=64), hook_path=True)
        times = {name: [] for name in ("base", "k", "re", "re_hook")}
        configs = {"base": (run, None, None), "k": (run, k.on, k.off), "re": (run, re.on, re.off),
                   "re_hook": (run, re_hook.on, re_hook.off)}
        for _ in range(reps):  # one round per race: the spread of the per-round ratios as well as the best
            for name, t in race(configs, 1).items():
                times[name].append(t)
        for p, runs in ((k, reps), (re, reps), (re_hook, reps)):
            if p.calls != n * runs or (p is not k and (p.entries, p.returns) != (n * runs, n * runs)):
                raise SystemExit(f"{arch} {func}: {p.probe!r} saw {p.calls} hits, {p.entries} entries, "
                                 f"{p.returns} returns; expected {n * runs} of each")
        ratios = sorted((t_re - b) / (t_k - b) for t_re, t_k, b in zip(times["re"], times["k"], times["base"],
                                                                          strict=True) if t_k > b)
        best = {name: min(v) for name, v in times.items()}
        out[f"{arch} {func}"] = {
            "kprobe_us": per_hit_us(best["k"], best["base"], n), "kprobe_mechanism": k.mechanism,
            "entry_us": per_hit_us(best["re"], best["base"], n), "entry_mechanism": re.mechanism,
            "entry_hook_us": per_hit_us(best["re_hook"], best["base"], n),
            "ratio_median": ratios[len(ratios) // 2] if ratios else None,
            "ratio_spread": (ratios[0], ratios[-1]) if ratios else None,
        }
        s.close()
    return out


def rows(raw: dict[str, Any], row: Callable[..., Any], us: Callable[[float], str],
         status: Callable[[bool], str]) -> list[Any]:
    """Rows R for the table: ``row`` is bench/run.py's ``Row``."""
    if "error" in raw:
        return [row("R", "kretprobe with an entry_handler vs kprobe", "n/a", "", "", "<= 2.5x", raw["error"])]
    out = []
    for label, r in raw.items():
        k = r["kprobe_us"]
        ratio = r["entry_us"] / k
        spread = r["ratio_spread"]
        per_round = (f" (per round: median {r['ratio_median']:.2f}x, {spread[0]:.2f}-{spread[1]:.2f}x)"
                     if spread else "")
        out.append(row("R", f"{label}: kretprobe with an entry_handler (entry on the {r['entry_mechanism']} path "
                       f"+ return) vs kprobe ({r['kprobe_mechanism']}){per_round}", us(r["entry_us"]),
                       f"kprobe {us(k)}", f"{ratio:.2f}x", "<= 2.5x", status(ratio <= 2.5)))
        out.append(row("R", f"  {label}: the same on the hook path (detour planner off)", us(r["entry_hook_us"]),
                       f"kprobe {us(k)}", f"{r['entry_hook_us'] / k:.2f}x"))
    return out
