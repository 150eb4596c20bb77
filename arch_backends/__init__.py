"""kpsdk's architecture backends, installed as ``kpsdk.arch_backends``.

One module per architecture family; each returns :class:`kpsdk.arch.Arch`
objects from the ``kpsdk_archs`` hook.  Registers are declared as data.
"""
