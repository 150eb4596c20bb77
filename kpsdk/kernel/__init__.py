"""Kernel knowledge: images unpacked, kallsyms, BTF, the version, tasks and the guest clock.

Everything a kernel target needs that is about the kernel, not about the way kpsdk reaches
it (gdb, QEMU): these modules read an image or guest memory through a reader they are given.
"""
