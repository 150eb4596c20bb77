"""Binary formats: ELF images read checked, symbols, relocations, PLT stubs, IFUNCs, the link map.

Nothing here knows a target or a probe: each module reads a file (or memory through a reader
it is given) and answers a question about it.  :mod:`kpsdk.binfmt.elfimage` is the public
entry point for plugins that read more of an ELF file.
"""
