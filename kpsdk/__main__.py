"""``python -m kpsdk``: the ``kpsdk`` command line."""

from kpsdk.cli import main

main()
