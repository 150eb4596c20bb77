"""Event triggers: what the kernel takes in ``events/GROUP/EVENT/trigger``.

kpsdk has no tracefs, so a trigger names its event: ``EVENT:COMMAND`` (or
``GROUP/EVENT:COMMAND``), where COMMAND is what one would ``echo`` into the event's
``trigger`` file (``Documentation/trace/events.rst``, section 6):

- ``hist:keys=...[:vals=...][:sort=...][:size=N][:name=NAME][:pause] [if FILTER]``:
  a hist trigger (:mod:`kpsdk.trace.histtrigger`), printed at the end as the event's
  ``hist`` file;
- ``stacktrace[:N] [if FILTER]``: the stack of each hit (the first N), printed after
  the event's line as ftrace prints a stack entry (``<stack trace>``, then `` => sym+off/size``
  frames, the kernel's ``sym-offset`` form), from :func:`kpsdk.backtrace.backtrace`
  (which sees through return probes).

The other kernel triggers (``traceon``, ``snapshot``, ``enable_event``...) and removal
(``!hist``) are refused: a kpsdk trace has one buffer and no other events to switch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kpsdk.errors import TriggerError
from kpsdk.trace.filter import Filter, parse_filter
from kpsdk.trace.grammar import parse_uint
from kpsdk.trace.histtrigger import HistTrigger, event_fields, filter_values, parse_hist, split_filter

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.grammar import ProbeDef

#: the kernel's trigger commands kpsdk does not run
OTHER_COMMANDS = ("traceon", "traceoff", "snapshot", "enable_event", "disable_event", "enable_hist",
                  "disable_hist")
#: how many frames a stack trace keeps (the kernel's FTRACE_STACK_ENTRIES is larger; kpsdk walks at most this)
STACK_DEPTH = 64


def split_trigger(text: str) -> tuple[str, str]:
    """``EVENT:COMMAND`` -> ``(EVENT, COMMAND)``; an event name holds no ``:``."""
    if not isinstance(text, str):
        raise TypeError("a trigger is a str")
    event, sep, command = text.strip().partition(":")
    if not sep or not event or not command or any(c in event for c in " \t"):
        raise TriggerError("EINVAL", text, 0, "a trigger is EVENT:COMMAND, such as "
                           "'myopen:hist:keys=common_pid' or 'myopen:stacktrace'", "trigger")
    return event, command


def matches(event: str, name: str, group: str) -> bool:
    """``EVENT``, ``GROUP/EVENT`` or ``GROUP.EVENT`` names this event."""
    for sep in ("/", "."):
        if sep in event:
            grp, _, ev = event.partition(sep)
            return grp == group and ev == name
    return event == name


@dataclass
class StackTrigger:
    """``stacktrace[:N] [if FILTER]``: records the stack of each hit, at most N times."""

    command: str
    count: int | None = None
    filter: Filter | None = None

    def wants(self, record: TraceRecord) -> bool:
        """Whether this hit gets a stack (counting down N as the kernel's ``stacktrace:N`` does)."""
        if self.count is not None and self.count <= 0:
            return False
        if self.filter is not None and not self.filter(filter_values(record)):
            return False
        if self.count is not None:
            self.count -= 1
        return True


@dataclass
class EventTriggers:
    """The triggers of one event."""

    hists: list[HistTrigger] = field(default_factory=list)
    stacks: list[StackTrigger] = field(default_factory=list)


def parse_trigger(command: str, definition: ProbeDef, word: int,
                  symbolize: Callable[[int, bool], str] | None = None,
                  log2_overflow: int | None = None) -> HistTrigger | StackTrigger:
    """One trigger COMMAND for the event ``definition`` describes (``log2_overflow``: the arch's
    ``.log2`` key where ``1UL << bits`` overflows, :func:`~kpsdk.trace.histtrigger.log2_key`)."""
    location = f"hist:{definition.group}:{definition.event}"
    name, sep, param = command.partition(":")
    name = name.strip()
    if name == "hist":
        spec = parse_hist(param if sep else "", event_fields(definition, word), location)
        hist = HistTrigger(spec, word, filter=parse_filter(spec.filter_text) if spec.filter_text else None,
                           log2_overflow=log2_overflow)
        if symbolize is not None:
            hist.symbolize = symbolize
        return hist
    first = command.split()[0] if command.split() else command
    if first == "stacktrace" or name == "stacktrace":
        return _stacktrace(command)
    if name.lstrip("!") in OTHER_COMMANDS or name.startswith("!"):
        raise TriggerError("UNSUPPORTED", command, 0, f"{name!r}: kpsdk runs the hist and stacktrace triggers",
                           "trigger")
    raise TriggerError("EINVAL", command, 0, f"{name!r} is no trigger command (hist, stacktrace)", "trigger")


def _stacktrace(command: str) -> StackTrigger:
    """``stacktrace[:N] [if FILTER]`` (``event_trigger_parse_num``: N as ``kstrtoul(number, 0)`` reads
    it, ASCII digits only: decimal, ``0x`` hex, ``0`` octal)."""
    trigger, filter_text = split_filter(command) if " if" in command or "\tif" in command else (command.strip(), None)
    _, sep, count_text = trigger.partition(":")
    count: int | None = None
    if sep:
        count = parse_uint(count_text)
        if count is None:
            raise TriggerError("EINVAL", command, command.find(count_text) if count_text else len(trigger),
                               f"stacktrace:{count_text}: the count is a number", "trigger")
    elif trigger.strip() != "stacktrace":
        raise TriggerError("EINVAL", command, len("stacktrace"), "stacktrace[:N] [if FILTER]", "trigger")
    return StackTrigger(command, count, parse_filter(filter_text) if filter_text else None)
