"""What the kernel tracing comparisons share: the guest's own tracing set up in its /init, and
the ``kpsdk trace`` command line that traces the same definitions from outside.

The tests (test_trace_triggers_kernel.py, test_trace_prefix_kernel.py) boot one of Debian's
kernels once: the guest writes the definitions into its own ``kprobe_events`` and runs the
workload, while ``kpsdk trace`` runs the same definitions through QEMU's gdbstub.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

TRACING = "/sys/kernel/tracing"


def define_events(definitions: Sequence[str]) -> list[str]:
    """The guest's shell lines that mount tracefs and define ``definitions`` in its own
    ``kprobe_events`` (each in single quotes: a definition holds none)."""
    for d in definitions:
        if "'" in d or "\n" in d:
            raise ValueError(f"a definition for the guest's shell cannot hold a quote or a line break: {d!r}")
    return [f"mount -t tracefs nodev {TRACING}", *(f"echo '{d}' >> {TRACING}/kprobe_events" for d in definitions)]


def trace_args(arch: str, kernel: Path, initrd: Path, out: Path, definitions: Sequence[str],
               triggers: Sequence[tuple[str, str]] = (), duration: int = 300) -> list[str]:
    """``kpsdk trace``'s arguments: the arch's kernel and initramfs under qemu-system, the guest's
    console on stderr, the trace in ``out``, each definition (``-e``) and trigger (``--trigger
    EVENT:COMMAND``)."""
    args = ["trace", f"qemu-system:{arch}", "--kernel", str(kernel), "--initrd", str(initrd),
            "--console", "--duration", str(duration), "--out", str(out)]
    for d in definitions:
        args += ["-e", d]
    for event, trigger in triggers:
        args += ["--trigger", f"{event}:{trigger}"]
    return args
