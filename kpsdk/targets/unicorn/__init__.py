"""The embedded default: a target in-process on Unicorn (``elf:`` and ``unicorn:``).

:mod:`.target` is the target kind and its mechanisms; the rest are its parts (the ctypes fast
path, the TLB fill, single-step, watchpoints, kretprobe detours) and :mod:`.linux`, the Linux
process a program runs in.  Internal: plugins reach it through :class:`kpsdk.target.Target`.
"""
