"""qemu-system's ``mechanism="plugin"``: kprobes served inside QEMU by kpsdk's TCG plugin.

:mod:`.plugin` builds ``kpsdk_tcg.c`` and shares the probe table and hit ring with it,
:mod:`.fetch` turns fetch arguments into the plugin's memory reads, :mod:`.target` is the
target that uses both.
"""
