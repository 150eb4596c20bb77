"""Hist triggers as the kernel runs them (``Documentation/trace/histogram.rst``).

One module, because the trigger's parser, its table and its printout follow one kernel
file (trace_events_hist.c) and share the table's layout.

``hist:keys=common_pid,comm:vals=hitcount,size:sort=size.descending`` aggregates an
event's records in a table keyed on one to three fields, summing hitcount and up to
two value fields, and prints it as the event's ``hist`` file does.  What is parsed,
refused and printed follows ``kernel/trace/trace_events_hist.c``, so that the output
can be compared with the kernel's own for the same trigger (tests/test_trace_triggers_kernel.py):

- the attributes ``keys=`` (``key=``), ``vals=`` (``val=``, ``values=``), ``sort=``,
  ``size=``, ``name=``, and the flags ``pause``, ``cont``, ``clear``;
- the fields: the event's fetch arguments, the common fields (``common_type``,
  ``common_flags``, ``common_preempt_count``, ``common_pid``: :mod:`kpsdk.trace.common`),
  ``common_cpu`` (``cpu``),
  ``common_timestamp`` (ns; ``.usecs``), ``__probe_ip`` (``p`` events),
  ``__probe_func`` and ``__probe_ret_ip`` (return events);
- the modifiers ``.hex``, ``.sym``, ``.sym-offset``, ``.execname`` (``common_pid``
  only), ``.log2``, ``.buckets=N``, ``.usecs``, checked where the kernel checks them;
- the values as the kernel keeps them: a field is read as its type (signed types
  sign-extended to the word, ``(u64)(unsigned long)``), sums wrap at 64 bits, a
  ``.log2`` key is ``ilog2(roundup_pow_of_two(v))`` (``~ 2^64`` for a negative value, as the
  kernel prints it) and a ``.buckets=N`` key ``v / N * N``;
- the table holds ``size`` entries (2048, a power of two from 128 to 131072): a hit on
  a new key once it is full is *Dropped*;
- the output: ``# event histogram``, the trigger as the kernel prints it back, one
  ``{ key: value, ... } hitcount: N  val: N`` line per entry in sort order (the default
  ``hitcount`` ascending), then ``Totals:`` with ``Hits``, ``Entries`` and ``Dropped``.

Errors are the kernel's (:class:`~kpsdk.errors.TriggerError`): the ``error_log`` text
and a caret where ``err_pos`` puts it (the first occurrence of the faulty word in
``hist:`` and the trigger), or ``EINVAL`` where the kernel only fails the write.
Variables, expressions, ``onmax()``/``onmatch()`` actions and ``stacktrace`` keys are
refused as ``UNSUPPORTED``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kpsdk.errors import TriggerError
from kpsdk.trace.common import COMMON_FIELDS, common_values, flag_bits
from kpsdk.trace.grammar import parse_uint

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.filter import Filter
    from kpsdk.trace.grammar import ProbeDef

#: the kernel's tracing_map limits (kernel/trace/tracing_map.h)
KEYS_MAX = 3
VALS_MAX = 3
SORT_KEYS_MAX = 2
MAP_BITS_DEFAULT, MAP_BITS_MIN, MAP_BITS_MAX = 11, 7, 17
#: MAX_FILTER_STR_VAL: a string key's room, its NUL included
STR_MAX = 256
#: HIST_KEY_SIZE_MAX: MAX_FILTER_STR_VAL + the stacktrace key's 16 words
KEY_SIZE_MAX = STR_MAX + 16 * 8
U64 = (1 << 64) - 1
MODIFIERS = ("hex", "sym", "sym-offset", "execname", "log2", "usecs")
#: modifiers a value may not have (__create_val_field)
NOT_ON_VALUES = ("log2", "buckets", "sym", "sym-offset")


@dataclass(frozen=True)
class EventField:
    """A field an event's records have, as the kernel's ``format`` file lists it."""

    name: str
    size: int
    signed: bool
    source: str  # type, flags, preempt_count, pid, cpu, time, ip, caller, func, or field (a fetch argument)
    string: bool = False
    #: the field's type as written (``s32``, ``x64``, ``string``); "" for the common fields (the kernel's
    #: ``compatible_field`` compares the type's name when events share a named table)
    type: str = ""


def event_fields(definition: ProbeDef, word: int) -> dict[str, EventField]:
    """The fields a hist trigger on this event may name: the common ones, the probe's
    address fields (``__probe_ip``; a return's ``__probe_func``, ``__probe_ret_ip``),
    and each fetch argument (strings as strings; arrays are left out)."""
    fields = {name: EventField(name, size, signed, name.removeprefix("common_"))
              for name, (size, signed) in COMMON_FIELDS.items()}
    if definition.is_return:
        fields["__probe_func"] = EventField("__probe_func", word, False, "func")
        fields["__probe_ret_ip"] = EventField("__probe_ret_ip", word, False, "caller")
    else:
        fields["__probe_ip"] = EventField("__probe_ip", word, False, "ip")
    for arg in definition.args:
        if arg.type.count:
            continue
        if arg.type.is_string:
            fields[arg.name] = EventField(arg.name, STR_MAX, False, "field", string=True, type=arg.type.name)
        else:
            fields[arg.name] = EventField(arg.name, arg.type.size or word, arg.type.signed, "field",
                                          type=arg.type.name)
    return fields


@dataclass(frozen=True)
class HistField:
    """A key or value of a hist trigger: an event field and its modifier."""

    field: EventField
    modifier: str | None = None
    buckets: int = 0

    @property
    def name(self) -> str:
        """What the kernel prints for it (``hist_field_name``): the field's name."""
        return self.field.name

    @property
    def spec(self) -> str:
        """The field as the kernel prints the trigger back (``hist_field_print``)."""
        mod = f".{self.modifier}" if self.modifier else ""
        return f"{self.name}{mod}" + (f"={self.buckets}" if self.buckets else "")

    @property
    def string(self) -> bool:
        return self.field.string

    def raw(self, record: TraceRecord, word: int) -> int | str:
        """The field's value in a record, as the kernel's ``hist_field_*`` functions read it."""
        source = self.field.source
        value: int | str | None
        if source == "pid":
            value = record.pid
        elif source == "type":
            value = record.event_id
        elif source == "flags":
            value = flag_bits(record.flags)[0]
        elif source == "preempt_count":
            value = flag_bits(record.flags)[1]
        elif source == "cpu":
            value = record.cpu
        elif source == "time":
            value = int(record.time * 1e9)
            return value // 1000 if self.modifier == "usecs" else value
        elif source == "ip" or source == "func":
            value = record.ip
        elif source == "caller":
            value = record.caller if record.caller is not None else 0
        else:
            got = record.fields.get(self.name)
            value = got if isinstance(got, int | str) else None
        if self.field.string:
            return (value if isinstance(value, str) else "")[:STR_MAX - 1]
        number = value if isinstance(value, int) else 0
        # (u64)(unsigned long)*(type *): sign-extended from the field's size, cut to the word
        bits = self.field.size * 8
        number &= (1 << bits) - 1
        if self.field.signed and number >> (bits - 1):
            number -= 1 << bits
        return number & ((1 << (word * 8)) - 1)

    def key(self, record: TraceRecord, word: int, log2_overflow: int | None = None) -> int | str:
        """The value as a key: ``.log2`` (:func:`log2_key`) and ``.buckets=N`` applied."""
        value = self.raw(record, word)
        if isinstance(value, str):
            return value
        if self.modifier == "log2":
            return log2_key(value, word, log2_overflow)
        if self.buckets:
            return value // self.buckets * self.buckets
        return value


def log2_key(value: int, word: int = 8, overflow: int | None = None) -> int:
    """``ilog2(roundup_pow_of_two(v))`` as the kernel computes it: ``fls_long(v - 1)``, the
    exponent of the next power of two (0 for 1).  ``v - 1`` wraps: 0 and values above
    2**(bits-1) (a negative field) need the word's own width, ``1UL << bits``, which C leaves
    to the machine: Debian's 6.1 x86_64 kernel prints the exponent (``~ 2^64``), and its 32-bit
    arm kernel ``ilog2(0)``, -1 as a u64 (``~ 2^18446744073709551615``;
    tests/test_trace_triggers_kernel.py).  ``overflow`` is the arch's answer
    (:attr:`kpsdk.arch.Arch.kernel_log2_overflow`); None: the exponent."""
    bits = word * 8
    exponent = ((value - 1) & ((1 << bits) - 1)).bit_length()
    return overflow if overflow is not None and exponent >= bits else exponent


@dataclass(frozen=True)
class SortKey:
    """``sort=NAME[.descending]``: ``index`` 0 is hitcount, 1.. the values, then the keys."""

    index: int
    descending: bool
    spec: str


@dataclass(frozen=True)
class HistSpec:
    """A parsed ``hist:`` trigger."""

    command: str  # hist:... as the kernel's last_cmd (the filter included)
    keys: tuple[HistField, ...]
    vals: tuple[HistField, ...]
    sort: tuple[SortKey, ...]
    map_bits: int = MAP_BITS_DEFAULT
    name: str | None = None
    filter_text: str | None = None
    paused: bool = False

    @property
    def size(self) -> int:
        return 1 << self.map_bits

    def info(self) -> str:
        """The trigger as the kernel prints it back (``event_hist_trigger_print``)."""
        out = "hist:" + (f"name={self.name}:" if self.name else "")
        out += "keys=" + ",".join(k.spec for k in self.keys)
        out += ":vals=hitcount" + "".join(f",{v.spec}" for v in self.vals)
        out += ":sort=" + ",".join(s.spec + (".descending" if s.descending else "") for s in self.sort)
        out += f":size={self.size}"
        if any(f.field.source == "time" for f in (*self.keys, *self.vals)):
            out += ":clock=global"
        if self.filter_text:
            out += f" if {self.filter_text}"
        return out + (" [paused]" if self.paused else " [active]")


def _err(code: str, command: str, word: str | None, detail: str = "", location: str = "hist") -> TriggerError:
    """The kernel's ``errpos``: the caret under the first occurrence of ``word`` in the command."""
    column = command.find(word) if word else 0
    return TriggerError(code, command, max(column, 0), detail, location)


def split_filter(text: str) -> tuple[str, str | None]:
    """``TRIGGER [if FILTER]``: the kernel looks for the first ``if`` between blanks."""
    start = 0
    while True:
        at = text.find("if", start)
        if at < 0:
            return text.strip(), None
        if at == 0:
            raise TriggerError("EINVAL", text, 0, "the trigger is missing before 'if'")
        if text[at - 1] not in " \t":
            start = at + 1
            continue
        if at >= len(text) - 3:
            raise TriggerError("EINVAL", text, at, "'if' needs a filter after it")
        if text[at + 2] not in " \t":
            start = at + 1
            continue
        return text[:at - 1].strip(), text[at + 2:].strip()


def parse_hist(param: str, fields: dict[str, EventField], location: str = "hist") -> HistSpec:
    """``param`` is what follows ``hist:`` (``keys=pid:vals=hitcount if pid > 1``)."""
    command = "hist:" + param
    if not param.strip():
        raise TriggerError("EINVAL", command, len(command), "the hist trigger is empty", location)
    trigger, filter_text = split_filter(param)
    keys_str = vals_str = sort_str = name = None
    map_bits = MAP_BITS_DEFAULT
    paused = False
    for part in trigger.split(":"):
        if "=" in part:
            attr, _, rhs = part.partition("=")
            if not rhs:
                raise _err("EMPTY_ASSIGNMENT", command, part, location=location)
            if attr in ("key", "keys"):
                keys_str = rhs
            elif attr in ("val", "vals", "values"):
                vals_str = rhs
            elif attr == "sort":
                sort_str = rhs
            elif attr == "name":
                name = rhs
            elif attr == "size":
                map_bits = _map_bits(rhs, command, location)
            elif attr == "clock":
                raise TriggerError("UNSUPPORTED", command, command.find(part), "clock=: kpsdk's time is the "
                                   "host's clock", location)
            else:
                raise TriggerError("UNSUPPORTED", command, command.find(part),
                                   f"{part!r}: hist variables are not supported", location)
        elif part == "pause":
            paused = True
        elif part in ("cont", "continue", "clear"):
            raise TriggerError("UNSUPPORTED", command, command.find(part),
                               f"{part}: there is no running hist trigger to change", location)
        elif part.startswith(("onmatch(", "onmax(", "onchange(")):
            raise TriggerError("UNSUPPORTED", command, command.find(part), "hist actions are not supported",
                               location)
        else:
            raise TriggerError("EINVAL", command, command.find(part) if part else len(command),
                               f"{part!r} is no hist attribute", location)
    if keys_str is None:
        raise TriggerError("EINVAL", command, len(command), "a hist trigger needs keys=", location)
    vals = _vals(vals_str, fields, command, location)
    keys = _keys(keys_str, fields, command, location)
    sort = _sort(sort_str, vals, keys, command, location)
    return HistSpec(command, keys, vals, sort, map_bits, name, filter_text, paused)


def _map_bits(text: str, command: str, location: str) -> int:
    """``size=N`` as ``kstrtoul(str, 0, &size)`` reads it: ASCII digits, ``0x`` hex, ``0`` octal."""
    size = parse_uint(text)
    if size is None:
        raise TriggerError("EINVAL", command, command.find(text), f"size={text}: not a number", location)
    if size > U64:
        raise TriggerError("EINVAL", command, command.find(text), f"size={text}: out of range", location)
    bits = log2_key(size)
    if not MAP_BITS_MIN <= bits <= MAP_BITS_MAX:
        raise TriggerError("EINVAL", command, command.find(text),
                           f"size={text}: want {1 << MAP_BITS_MIN} to {1 << MAP_BITS_MAX}", location)
    return bits


def _field(text: str, fields: dict[str, EventField], command: str, location: str) -> HistField:
    """``parse_field``: NAME[.MODIFIER]."""
    if any(op in text for op in "+-*/") and not text.endswith(".sym-offset"):
        raise TriggerError("UNSUPPORTED", command, command.find(text), "hist expressions are not supported",
                           location)
    if text.startswith("$") or text == "stacktrace" or text == "common_stacktrace":
        raise TriggerError("UNSUPPORTED", command, command.find(text),
                           f"{text}: variables and stacktrace keys are not supported", location)
    name, dot, modifier = text.partition(".")
    buckets = 0
    mod: str | None = None
    if dot:
        if modifier in MODIFIERS and (modifier != "execname" or name == "common_pid"):
            mod = modifier
        elif modifier.startswith("bucket"):
            rest = modifier[6:]
            rest = rest[1:] if rest.startswith("s") else rest
            # kstrtoul(modifier, 0, &buckets): ASCII digits only
            buckets = (parse_uint(rest[1:]) or 0) if rest.startswith("=") else 0
            if buckets <= 0 or buckets > U64:
                raise _err("BAD_FIELD_MODIFIER", command, modifier, location=location)
            mod = "buckets"
        else:
            raise _err("BAD_FIELD_MODIFIER", command, modifier, location=location)
    if name == "common_timestamp":
        found = EventField("common_timestamp", 8, False, "time")
    elif name in ("common_cpu", "cpu", "CPU"):
        found = EventField("common_cpu", 4, False, "cpu")
    elif name in fields:
        found = fields[name]
    else:
        raise _err("FIELD_NOT_FOUND", command, name, location=location)
    return HistField(found, mod, buckets)


def _vals(text: str | None, fields: dict[str, EventField], command: str, location: str) -> tuple[HistField, ...]:
    """``create_val_fields``: hitcount always, then at most two fields."""
    if text is None:
        return ()
    parts = text.split(",")
    vals: list[HistField] = []
    i = 0
    while i < VALS_MAX and len(vals) + 1 < VALS_MAX and i < len(parts):
        part = parts[i]
        i += 1
        if part == "hitcount":
            continue
        val = _field(part, fields, command, location)
        if val.modifier in NOT_ON_VALUES or val.modifier == "execname":
            raise _err("BAD_FIELD_MODIFIER", command, part, location=location)
        if val.string:
            raise TriggerError("UNSUPPORTED", command, command.find(part),
                               f"{part}: a string is no value to sum", location)
        vals.append(val)
    rest = parts[i:]
    if rest and ",".join(rest) != "hitcount":
        raise TriggerError("EINVAL", command, command.find(",".join(rest)),
                           f"at most {VALS_MAX - 1} values besides hitcount", location)
    return tuple(vals)


def _keys(text: str, fields: dict[str, EventField], command: str, location: str) -> tuple[HistField, ...]:
    """``create_key_fields``: one to three keys whose sizes fit HIST_KEY_SIZE_MAX."""
    parts = text.split(",")
    keys: list[HistField] = []
    size = 0
    for part in parts[:KEYS_MAX]:
        key = _field(part, fields, command, location)
        size += STR_MAX if key.string else 8
        if size > KEY_SIZE_MAX:
            raise TriggerError("EINVAL", command, command.find(part),
                               f"the keys take more than {KEY_SIZE_MAX} bytes", location)
        keys.append(key)
    if len(parts) > KEYS_MAX:
        raise TriggerError("EINVAL", command, command.find(",".join(parts[KEYS_MAX:])), f"at most {KEYS_MAX} keys",
                           location)
    return tuple(keys)


def _sort(text: str | None, vals: tuple[HistField, ...], keys: tuple[HistField, ...], command: str,
          location: str) -> tuple[SortKey, ...]:
    """``create_sort_keys``: hitcount, a value or a key by name, ``.descending``/``.ascending``."""
    if text is None:
        return (SortKey(0, False, "hitcount"),)
    parts = text.split(",")
    out: list[SortKey] = []
    for i, part in enumerate(parts):
        if not part:
            raise _err("EMPTY_SORT_FIELD", command, "sort=", location=location)
        if i == SORT_KEYS_MAX - 1 and i + 1 < len(parts):
            raise _err("TOO_MANY_SORT_FIELDS", command, "sort=", location=location)
        name, dot, order = part.partition(".")
        if not name:
            raise _err("EMPTY_SORT_FIELD", command, "sort=", location=location)
        descending = _descending(order if dot else None, command, location)
        if name == "hitcount":
            out.append(SortKey(0, descending, "hitcount"))
            continue
        fields = (*vals, *keys)
        index = next((j for j, f in enumerate(fields) if f.name == name), None)
        if index is None:
            raise _err("INVALID_SORT_FIELD", command, name, location=location)
        out.append(SortKey(index + 1, descending, fields[index].spec))
    return tuple(out)


def _descending(order: str | None, command: str, location: str) -> bool:
    if order is None or order == "ascending":
        return False
    if order == "descending":
        return True
    raise _err("INVALID_SORT_MODIFIER", command, order, location=location)


@dataclass
class _Entry:
    key: tuple[int | str, ...]
    sums: list[int]
    comm: str


#: a table's entry, for code that fills a table from other tables (kpsdk.matrixrun.hists merges targets')
HistEntry = _Entry


@dataclass
class HistTable:
    """A hist trigger's table (the kernel's ``tracing_map``): its keys, values, sort and size
    (``spec``, the trigger that made it), its entries and counts.  A named trigger shares the
    table of the first trigger of that name (:func:`share`)."""

    spec: HistSpec
    entries: dict[tuple[int | str, ...], _Entry] = field(default_factory=dict)
    hits: int = 0
    dropped: int = 0


@dataclass
class HistTrigger:
    """One hist trigger on one event: :meth:`hit` each record, :meth:`render` the hist file.

    ``spec`` is this trigger as written (its filter, ``pause``); ``table`` what it counts in:
    its own, or a named table another event's trigger made (``name=NAME``).
    """

    spec: HistSpec
    word: int = 8
    symbolize: Callable[[int, bool], str] = field(default=lambda addr, offset: f"{addr:#x}")
    filter: Filter | None = None
    table: HistTable | None = None
    #: what a ``.log2`` key is when ``1UL << bits`` overflows (:func:`log2_key`): the arch's
    log2_overflow: int | None = None

    def __post_init__(self) -> None:
        if self.table is None:
            self.table = HistTable(self.spec)
        self._table: HistTable = self.table

    @property
    def entries(self) -> dict[tuple[int | str, ...], _Entry]:
        return self._table.entries

    @property
    def hits(self) -> int:
        """``Totals: Hits``: the table's, every event that shares it included."""
        return self._table.hits

    @property
    def dropped(self) -> int:
        return self._table.dropped

    @property
    def layout(self) -> HistSpec:
        """The table's keys, values, sort and size (the first named trigger's, when shared)."""
        return self._table.spec

    def hit(self, record: TraceRecord) -> None:
        """Count a record (``event_hist_trigger``); a new key once the table is full is dropped."""
        if self.spec.paused:
            return
        if self.filter is not None and not self.filter(filter_values(record)):
            return
        table = self._table
        layout = table.spec
        table.hits += 1
        key = tuple(k.key(record, self.word, self.log2_overflow) for k in layout.keys)
        entry = table.entries.get(key)
        if entry is None:
            if len(table.entries) >= layout.size:
                table.dropped += 1
                return
            comm = "<idle>" if record.pid == 0 else record.comm
            entry = table.entries[key] = _Entry(key, [0] * (1 + len(layout.vals)), comm)
        entry.sums[0] += 1
        for i, val in enumerate(layout.vals, start=1):
            raw = val.raw(record, self.word)
            entry.sums[i] = (entry.sums[i] + (raw if isinstance(raw, int) else 0)) & U64

    def sorted_entries(self) -> list[_Entry]:
        """The entries in the trigger's sort order (ties keep the order they came in)."""
        entries = list(self.entries.values())
        for sort_key in reversed(self.layout.sort):
            entries.sort(key=self._sort_value(sort_key.index), reverse=sort_key.descending)
        return entries

    def _sort_value(self, index: int) -> Callable[[_Entry], int | str]:
        n_vals = 1 + len(self.layout.vals)
        if index < n_vals:
            return lambda e: e.sums[index]
        key_field = self.layout.keys[index - n_vals]
        if key_field.string:
            return lambda e: e.key[index - n_vals]
        # tracing_map_cmp_num: compared as the field's type (its size, its sign)
        bits = key_field.field.size * 8
        signed = key_field.field.signed

        def numeric(e: _Entry) -> int:
            value = int(e.key[index - n_vals]) & ((1 << bits) - 1)
            return value - (1 << bits) if signed and value >> (bits - 1) else value
        return numeric

    def format_key(self, entry: _Entry) -> str:
        """``{ name: value, ... }`` (``hist_trigger_print_key``)."""
        parts = []
        for key_field, value in zip(self.layout.keys, entry.key, strict=True):
            name = key_field.name
            if isinstance(value, str):
                parts.append(f"{name}: {value:<50}")
                continue
            value &= U64
            mod = key_field.modifier
            if mod == "hex":
                parts.append(f"{name}: {value:x}")
            elif mod == "sym":
                parts.append(f"{name}: [{value:x}] {self.symbolize(value, False):<45}")
            elif mod == "sym-offset":
                parts.append(f"{name}: [{value:x}] {self.symbolize(value, True):<55}")
            elif mod == "execname":
                parts.append(f"{name}: {entry.comm:<16}[{value:>10}]")
            elif mod == "log2":
                parts.append(f"{name}: ~ 2^{value:<2}")
            elif mod == "buckets":
                parts.append(f"{name}: ~ {value}-{value + key_field.buckets - 1}")
            else:
                parts.append(f"{name}: {value:>10}")
        return "{ " + ", ".join(parts) + " }"

    def format_entry(self, entry: _Entry) -> str:
        """One line of the hist file (``hist_trigger_entry_print``)."""
        line = self.format_key(entry) + f" hitcount: {entry.sums[0]:>10}"
        for val, total in zip(self.layout.vals, entry.sums[1:], strict=True):
            line += f"  {val.name}: {total:>10x}" if val.modifier == "hex" else f"  {val.name}: {total:>10}"
        return line

    def info(self) -> str:
        """The trigger as the kernel prints it back: the table's keys, values, sort and size
        (the shared table's for a named trigger), this trigger's own filter and state."""
        if self.layout is self.spec:
            return self.spec.info()
        return replace(self.layout, filter_text=self.spec.filter_text, paused=self.spec.paused).info()

    def render(self) -> str:
        """The event's ``hist`` file for this trigger."""
        lines = ["# event histogram", "#", f"# trigger info: {self.info()}", "#", ""]
        entries = self.sorted_entries()
        lines += [self.format_entry(e) for e in entries]
        lines += ["", "Totals:", f"    Hits: {self.hits}", f"    Entries: {len(entries)}",
                  f"    Dropped: {self.dropped}"]
        return "\n".join(lines) + "\n"


def _shape(spec: HistSpec) -> tuple[object, ...]:
    """What ``hist_trigger_match`` compares of two triggers (filters aside): the number of
    values, fields and sort keys; each field's name, type, size, sign, modifier (the kernel's
    flags) and place; each sort key's field and order."""
    def one(f: HistField) -> tuple[object, ...]:
        return (f.field.name, f.field.type, f.field.source, f.field.size, f.field.signed, f.field.string,
                f.modifier)
    return (len(spec.vals), len(spec.keys), tuple(map(one, spec.vals)), tuple(map(one, spec.keys)),
            tuple((s.index, s.descending) for s in spec.sort))


def _same(trigger: HistTrigger, test: HistTrigger, named: HistTrigger | None) -> bool:
    """``hist_trigger_match(data, test, named_data, false)``: the same trigger, filter included;
    a named trigger is only the same as its own name's, an unnamed one as an unnamed one."""
    if named is not None and test is not named and test.table is not named.table:
        return False
    if named is None and test.spec.name:
        return False
    return _shape(trigger.spec) == _shape(test.layout) and trigger.spec.filter_text == test.spec.filter_text


def register(trigger: HistTrigger, existing: list[HistTrigger], named: dict[str, HistTrigger],
             location: str = "hist") -> HistTrigger | None:
    """Add ``trigger`` to an event whose hist triggers are ``existing``, with the trace's named
    triggers ``named`` (by name), as ``hist_register_trigger`` does:

    - ``name=NAME`` that an earlier trigger has: the two must match (``hist_trigger_match``,
      filters aside), else ``NAMED_MISMATCH`` with its caret under ``name=NAME``; then this
      trigger counts in that trigger's table (:class:`HistTable`), its own filter applied to
      its own event's records, and both events' hist files show the one table;
    - the same trigger on the same event (filter included) is ``TRIGGER_EEXIST``, but with
      ``pause`` (``existing_hist_update_only``), which pauses the one there: None is returned
      (nothing new to add).

    Returns the trigger to add to the event's list."""
    spec = trigger.spec
    first = named.get(spec.name) if spec.name else None
    if first is not None and _shape(spec) != _shape(first.layout):
        column = spec.command.find(f"name={spec.name}")
        raise TriggerError("NAMED_MISMATCH", spec.command, max(column, 0), location=location)
    if not (spec.name and first is None):
        for test in existing:
            if _same(trigger, test, first):
                if spec.paused:
                    test.spec = replace(test.spec, paused=True)
                    return None
                raise TriggerError("TRIGGER_EEXIST", spec.command, 0, location=location)
    if first is not None:
        trigger.table = trigger._table = first._table
    elif spec.name:
        named[spec.name] = trigger
    return trigger


def filter_values(record: TraceRecord) -> dict[str, object]:
    """What a trigger's ``if FILTER`` sees: the record's fields, the common and generic ones."""
    return common_values(record)
