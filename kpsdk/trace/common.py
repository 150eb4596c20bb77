"""The fields every event has besides its own: what filters and hist keys read of a record.

The kernel's event filter and hist triggers look a field name up in the event's own fields,
then in the *generic* fields (``CPU``, ``cpu``, ``common_cpu``, ``COMM``, ``comm``), then in
the *common* ones (``trace_find_event_field`` in kernel/trace/trace_events.c).  The common
fields are the head of every trace entry (``struct trace_entry``), the first four lines of
every ``format`` file:

- ``common_type``: the event's id (``ID:`` in its ``format``).  kpsdk numbers a trace's
  events from :data:`FIRST_EVENT_ID` in the order they were defined, and its ``trace.dat``
  writes the same ids;
- ``common_flags``: the ``TRACE_FLAG_*`` bits behind the prefix's flag characters;
- ``common_preempt_count``: the preempt depth (low four bits) and the migrate-disable
  count (high four), as the prefix's last two characters show them;
- ``common_pid``: the task's pid.

Flags and preempt count are derived from the five flag characters kpsdk's prefix shows
(:func:`kpsdk.kernel.tasks.lat_flags`): what a target cannot tell (a program's; most flags of a
kernel but the irq one) is 0, as it prints ``.``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord

#: the first event id kpsdk hands out (the kernel's dynamic events get ids from __TRACE_LAST_TYPE + 1)
FIRST_EVENT_ID = 1000
#: common_flags bits (kernel/trace/trace.h: TRACE_FLAG_*)
FLAG_IRQS_OFF, FLAG_NEED_RESCHED, FLAG_HARDIRQ, FLAG_SOFTIRQ = 0x01, 0x04, 0x08, 0x10
FLAG_PREEMPT_RESCHED, FLAG_NMI, FLAG_BH_OFF = 0x20, 0x40, 0x80
#: the common fields: name -> (size in bytes, signed), as every ``format`` file lists them
COMMON_FIELDS = {"common_type": (2, False), "common_flags": (1, False), "common_preempt_count": (1, False),
                 "common_pid": (4, True)}
#: the generic fields a filter may name (trace_define_generic_fields, 6.1 with common_cpu)
GENERIC_FIELDS = ("CPU", "cpu", "common_cpu", "COMM", "comm")
#: every name a filter finds on any event
ANY_EVENT_FIELDS = frozenset((*COMMON_FIELDS, *GENERIC_FIELDS))


def flag_bits(flags: str) -> tuple[int, int]:
    """``(common_flags, common_preempt_count)`` from the five flag characters of a
    prefix (the inverse of :func:`kpsdk.kernel.tasks.lat_flags` for what it can tell)."""
    irq, resched, hardsoft, depth, migrate = tuple((flags + ".....")[:5])
    bits = {"d": FLAG_IRQS_OFF, "D": FLAG_IRQS_OFF | FLAG_BH_OFF, "b": FLAG_BH_OFF}.get(irq, 0)
    bits |= {"N": FLAG_NEED_RESCHED | FLAG_PREEMPT_RESCHED, "n": FLAG_NEED_RESCHED,
             "p": FLAG_PREEMPT_RESCHED}.get(resched, 0)
    bits |= {"Z": FLAG_NMI | FLAG_HARDIRQ, "z": FLAG_NMI, "H": FLAG_HARDIRQ | FLAG_SOFTIRQ, "h": FLAG_HARDIRQ,
             "s": FLAG_SOFTIRQ}.get(hardsoft, 0)
    count = (int(depth, 16) if depth != "." else 0) | ((int(migrate, 16) if migrate != "." else 0) << 4)
    return bits, count


def common_values(record: TraceRecord) -> dict[str, object]:
    """What a filter sees of a record: the generic and common fields, then the event's own
    fields (which come first in the kernel's lookup, so they win a shared name)."""
    flags, preempt = flag_bits(record.flags)
    return {"common_type": record.event_id, "common_flags": flags, "common_preempt_count": preempt,
            "common_pid": record.pid, "common_cpu": record.cpu, "cpu": record.cpu, "CPU": record.cpu,
            "comm": record.comm, "COMM": record.comm, **record.fields}
