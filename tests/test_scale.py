"""Many probes: 10,000 registered, every one on the breakpoint path past the
optimized ones, hits still right, memory restored."""

from __future__ import annotations

import kpsdk
from kpsdk.targets.unicorn.loader import BLANK_AREA
from kpsdk.targets.unicorn.target import OPT_LIMIT

CODE = 0x100000


def test_ten_thousand_probes(tmp_path: object) -> None:
    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x10000, "rx")
    n = 10_000
    body = b"\x90" * n + b"\x48\x8d\x04\x37" + b"\xc3"  # nops; lea rax,[rdi+rsi]; ret
    s.write_memory(CODE, body)
    hits: list[int] = []
    probes = [kpsdk.Kprobe(addr=CODE + i, pre_handler=lambda p, r: hits.append(r.ip)) for i in range(n)]
    s.register_kprobes(probes)
    listed = s.list().splitlines()
    assert len(listed) == n and sum("[OPTIMIZED]" in ln for ln in listed) == OPT_LIMIT
    assert s.call(CODE, 20, 22) == 42
    assert hits == [CODE + i for i in range(n)]
    assert s.read_memory(CODE, len(body)) == body
    s.unregister_kprobes(probes)
    assert bytes(s.target.uc.mem_read(CODE, len(body))) == body and s.list() == ""


def test_hot_probe_gets_the_optimized_path_from_a_cold_one() -> None:
    from kpsdk.targets.unicorn.target import PROMOTE_EVERY

    s = kpsdk.open("unicorn:x86_64")
    s.target.map(CODE, 0x10000, "rx")
    cold_code = b"\x90" * 64
    s.write_memory(CODE, cold_code + b"\x48\x8d\x04\x37\xc3")  # cold nops; hot: lea rax,[rdi+rsi]; ret
    hot_addr = CODE + len(cold_code)
    cold = [kpsdk.Kprobe(addr=CODE + i) for i in range(OPT_LIMIT)]
    s.register_kprobes(cold)  # they take every hook slot
    seen: list[int] = []
    hot = kpsdk.Kprobe(addr=hot_addr, pre_handler=lambda p, r: seen.append(r.arg(0)))
    s.register_kprobe(hot)
    assert f"{hot_addr:016x}  k  {hot_addr:#x}" in s.list() and "[OPTIMIZED]" not in s.list().splitlines()[-1]
    calls = 3 * PROMOTE_EVERY
    assert all(s.call(hot_addr, i, 1) == i + 1 for i in range(calls))
    assert seen == list(range(calls)) and hot.hits == calls  # no hit lost or run twice across the switch
    hot_line = next(ln for ln in s.list().splitlines() if ln.startswith(f"{hot_addr:016x}"))
    assert hot_line.endswith("[OPTIMIZED]")
    assert sum("[OPTIMIZED]" in ln for ln in s.list().splitlines()) == OPT_LIMIT
    assert s.read_memory(CODE, len(cold_code)) == cold_code


def test_promotion_leaves_a_point_without_a_reachable_slot_on_its_hook() -> None:
    """riscv64 boosters jump back with jal (+-1 MiB): a cold optimized point far
    from kpsdk's area cannot go to the breakpoint path, so it keeps its hook."""
    from kpsdk.targets.unicorn.target import PROMOTE_EVERY

    s = kpsdk.open("unicorn:riscv64")  # kpsdk's area is at BLANK_AREA (0x76000000)
    far, near = 0x100000, BLANK_AREA - 0x80000  # near: within jal range of the slots at BLANK_AREA + 0x100
    s.target.map(far, 0x1000, "rx")
    s.target.map(near, 0x1000, "rx")
    s.write_memory(far, b"\x01\x00" * (OPT_LIMIT + 1))  # c.nop x33: cold, never run
    s.write_memory(near, bytes.fromhex("3305b500") + bytes.fromhex("8280"))  # add a0,a0,a1; ret
    s.register_kprobes([kpsdk.Kprobe(addr=far + 2 * i) for i in range(OPT_LIMIT)])
    hot = kpsdk.Kprobe(addr=near)
    s.kprobes_optimization = True
    s.register_kprobe(hot)
    assert all(s.call(near, i, 1) == i + 1 for i in range(2 * PROMOTE_EVERY))
    assert hot.hits == 2 * PROMOTE_EVERY
    assert sum("[OPTIMIZED]" in ln for ln in s.list().splitlines()) == OPT_LIMIT
