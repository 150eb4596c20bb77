"""The host end of the agent's socket pair: when a wait may spin (kpsdk.targets.live.agentlink).

A spin only pays while a CPU is free: the rule reads Linux's count of runnable tasks
(``/proc/loadavg``'s fourth field), checked here against files written in that format.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kpsdk.targets.live import agentlink


@pytest.fixture
def loadavg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "loadavg"
    monkeypatch.setattr(agentlink, "LOADAVG", str(path))
    monkeypatch.setattr(agentlink, "_CPUS", 2)
    monkeypatch.setattr(agentlink, "_spare", {"ok": True, "checked": -agentlink.LOAD_CHECK_SECONDS})
    return path


@pytest.mark.parametrize(("running", "spare"), [(1, True), (2, True), (3, False), (17, False)])
def test_a_spin_needs_a_free_cpu(loadavg: Path, running: int, spare: bool) -> None:
    loadavg.write_text(f"0.52 0.58 0.59 {running}/190 8291\n")
    assert agentlink.cpu_to_spare() is spare


def test_the_count_is_looked_at_again_only_after_a_while(loadavg: Path) -> None:
    loadavg.write_text("9.0 9.0 9.0 9/190 1\n")
    assert agentlink.cpu_to_spare() is False
    loadavg.write_text("0.1 0.1 0.1 1/190 1\n")
    assert agentlink.cpu_to_spare() is False  # the same answer within LOAD_CHECK_SECONDS
    time.sleep(agentlink.LOAD_CHECK_SECONDS)
    assert agentlink.cpu_to_spare() is True


@pytest.mark.parametrize("text", [None, "", "garbage", "1 2 3 x/9 1"])
def test_an_unreadable_count_spins_as_before(loadavg: Path, text: str | None) -> None:
    if text is not None:
        loadavg.write_text(text)
    assert agentlink.cpu_to_spare() is True
