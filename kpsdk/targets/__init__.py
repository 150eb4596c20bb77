"""Built-in target kinds (plugins through the ``kpsdk`` entry-point group)."""
