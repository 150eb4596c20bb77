"""The ``kpsdk trace`` command (being written)."""
