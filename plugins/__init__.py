"""kpsdk's built-in probe types, installed as ``kpsdk.plugins``.

Each module is a pluggy plugin registered through the ``kpsdk`` entry-point
group, exactly like a third-party one.
"""
