"""The embedded default: a target in-process on Unicorn (``elf:`` and ``unicorn:``).

:mod:`.loader` makes the target kinds (the ``unicorn`` entry point), :mod:`.target` is the target
with its mechanisms; the target's other parts are :mod:`.memory`, :mod:`.returns`,
:mod:`.syscalls`, :mod:`.libraries` and :mod:`.running`, and its engines the ctypes fast path,
the TLB fill, single-step, watchpoints and kretprobe detours; :mod:`.linux` is the Linux
process a program runs in.  Internal: plugins reach it through :class:`kpsdk.target.Target`.
"""
