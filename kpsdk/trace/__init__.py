"""``kpsdk trace``: ftrace dynamic-event definitions on kpsdk targets (see ``docs/trace.md``).

One module per job:

- :mod:`~kpsdk.trace.grammar`: the definition parser and its kernel-style errors;
- :mod:`~kpsdk.trace.fetch`: fetch arguments evaluated at a hit;
- :mod:`~kpsdk.trace.events`: definitions -> probes, hits -> :class:`TraceRecord` (``Session.trace``);
- :mod:`~kpsdk.trace.filter`: ``--filter`` expressions;
- :mod:`~kpsdk.trace.output`: text, jsonl and Perfetto writers;
- :mod:`~kpsdk.trace.hist`: log2 histograms, latency, ``--plot``;
- :mod:`~kpsdk.trace.command` and :mod:`~kpsdk.trace.run`: the CLI command, its options and checks;
  :mod:`~kpsdk.trace.runner`: one run of it (target, events, records, reports).

Nothing is imported here: the CLI loads this package as a plugin at every start.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "parse": "kpsdk.trace.grammar", "ProbeDef": "kpsdk.trace.grammar",
    "TraceDefinitionError": "kpsdk.errors", "Trace": "kpsdk.trace.events",
    "TraceRecord": "kpsdk.trace.events", "parse_filter": "kpsdk.trace.filter",
}


def __getattr__(name: str) -> Any:
    """``kpsdk.trace.parse`` and friends, imported on first use."""
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
