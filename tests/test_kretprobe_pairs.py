"""Two kretprobes at once, on every pair of the fixture's functions.

Nested calls mix the two ways an entry is hooked on Unicorn: a detoured entry
(guest code, recorded without Python, :mod:`kpsdk.targets.unicorn.detour`) and an
entry on the hook path (an entry_handler, a function too short for the jump,
another probe at the same address).  Whatever the mix, the handlers must see
the same returns, in the same order with the same return values, and the same
``nmissed`` as with every entry on the hook path (``kprobes_optimization``
off), which is the reference.
"""

from __future__ import annotations

import itertools

import pytest

import kpsdk
from kpsdk import fixtures
from tests.conftest import UNICORN_ARCHS

#: the fixture's functions but ``_start`` (it ends in exit_group); ``escape`` never
#: returns (it longjmps out)
FUNCTIONS = ("fmt_long", "put", "add", "sub", "fact", "sum7", "bump", "inc", "loop", "check", "twice",
             "escape", "try_escape", "escapes", "main")
#: what else is registered with the two kretprobes: nothing, a kprobe on one of
#: the two functions (the entry is then never detoured), an entry_handler on one
EXTRAS = ("none", "kprobe on a", "kprobe on b", "entry_handler on a")


def observe(arch: str, a: str, b: str, extra: str, optimization: bool) -> tuple[object, ...]:
    """Run the fixture with kretprobes on ``a`` and ``b``: the returns seen, in order, and the counts."""
    seen: list[tuple[str, int]] = []
    with kpsdk.open(f"elf:{fixtures.path(arch)}") as s:
        s.kprobes_optimization = optimization
        probes = []
        for name in (a, b):
            def on_return(ri: kpsdk.KretprobeInstance, regs: kpsdk.Session, name: str = name) -> None:
                seen.append((name, regs.return_value))
            entry = (lambda ri, regs: 0) if extra == "entry_handler on a" and name == a else None
            probes.append(kpsdk.Kretprobe(symbol_name=name, handler=on_return, entry_handler=entry))
        s.register_kretprobes(probes)
        hits = []
        if extra.startswith("kprobe"):
            kp = kpsdk.Kprobe(symbol_name=a if extra.endswith("a") else b, pre_handler=lambda p, regs: 0)
            s.register_kprobe(kp)
            hits.append(kp)
        status = s.run(timeout=20)
        return status, s.console, tuple(seen), tuple(p.nmissed for p in probes), tuple(p.hits for p in hits)


@pytest.mark.parametrize("arch", UNICORN_ARCHS)
def test_every_pair_sees_what_the_hook_path_sees(arch: str) -> None:
    differ = []
    pairs = list(itertools.combinations(FUNCTIONS, 2)) + [(f, f) for f in FUNCTIONS]
    for (a, b), extra in itertools.product(pairs, EXTRAS):
        want = observe(arch, a, b, extra, optimization=False)
        got = observe(arch, a, b, extra, optimization=True)
        assert want[0] == 0 and (want[2] or a == b == "escape"), f"{a}/{b}: the reference run went wrong"
        if got != want:
            differ.append(f"{a}/{b} ({extra}): {str(got)[:200]} != {str(want)[:200]}")
    assert not differ, "\n".join(differ)
