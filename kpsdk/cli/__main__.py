"""``python -m kpsdk.cli``: the ``kpsdk`` command line."""

from kpsdk.cli import main

main()
