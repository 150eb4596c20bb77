"""``execve``: placeholder until the exec path lands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kpsdk.errors import NotEmulatedError

if TYPE_CHECKING:
    from kpsdk.targets.unicorn.linux.calls.core import ProcessCore
    from kpsdk.targets.unicorn.linux.kernel import LinuxKernel
    from kpsdk.targets.unicorn.linux.tasks import Task


def execve(process: ProcessCore, path: int, argv: int, envp: int) -> int | None:
    raise NotEmulatedError("execve is not emulated yet on the Unicorn target")


def finish_exec(kernel: LinuxKernel, task: Task) -> None:
    raise NotEmulatedError("execve is not emulated yet on the Unicorn target")
