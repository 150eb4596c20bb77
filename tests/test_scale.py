"""Many probes: 10,000 registered, every one on the breakpoint path past the
optimized ones, hits still right, memory restored."""

from __future__ import annotations

import kpsdk
from kpsdk.targets.unicorn import OPT_LIMIT

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
