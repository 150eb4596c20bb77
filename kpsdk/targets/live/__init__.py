"""Live targets behind a gdbstub, driven through gdb/MI (``qemu-user:``, ``qemu-system:``, ``gdb://``).

:mod:`.qemu` launches them, :mod:`.target` is the gdb target, :mod:`.gdb_agent` runs inside
gdb, and :mod:`.tcg` serves qemu-system probes from kpsdk's TCG plugin.  Internal: plugins
reach it through :class:`kpsdk.target.Target`.
"""
