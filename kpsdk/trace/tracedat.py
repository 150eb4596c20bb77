"""trace-cmd's ``trace.dat`` (version 6), so that ``trace-cmd report`` and KernelShark read kpsdk's traces.

The file is what ``trace-cmd record`` writes for a kernel that traced the same
kprobe events (trace-cmd.dat.v6(5)): the header (magic, version ``6``, endianness,
long size, page size), the ring buffer's ``header_page`` and ``header_event``
descriptions, one ``format`` file per event (group = system) written as the
kernel's ``trace_probe.c`` writes a kprobe event's format (the common fields,
``__probe_ip`` or ``__probe_func``/``__probe_ret_ip``, then each fetch argument;
``print fmt`` with the kernel's ``(%lx)`` / ``(%lx <- %lx)`` and each type's
format), the symbols of the probed functions (``kallsyms``), the pid -> comm map
(``saved_cmdlines``), and per CPU the ring buffer pages with one entry per
record (``flyrecord``).

Version 6 is what every trace-cmd reads, Debian 12's 3.1 included (version 7
adds compression and sections that 2.x cannot read).  A record's values are
those kpsdk's text output prints; what the format cannot say differently from
the kernel's own file: a fetch that faulted is 0, or an empty string (the
kernel's data_loc of length 0), and a ``symbol`` field is a string (kpsdk keeps
the ``sym+off/size`` text, not the address).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import struct
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Literal

from kpsdk.binfmt.symbols import shown_name
from kpsdk.kernel.tasks import UNKNOWN_COMM
from kpsdk.trace.common import FIRST_EVENT_ID, flag_bits
from kpsdk.trace.output import Writer, format_value

if TYPE_CHECKING:
    from kpsdk.trace.events import TraceRecord
    from kpsdk.trace.grammar import ArgType, FetchArg, ProbeDef

MAGIC = b"\x17\x08\x44tracing"
VERSION = b"6\0"
PAGE_SIZE = 4096
#: the ring buffer's event header: type_len values with a meaning of their own (ring_buffer.c)
TYPE_PADDING, TYPE_TIME_EXTEND = 29, 30
#: an entry whose data fits in type_len * 4 bytes (type_len 1..28); longer ones put the length in array[0]
MAX_SMALL_DATA = 28 * 4
TS_SHIFT = 27
HEADER_EVENT = """\
# compressed entry header
\ttype_len    :    5 bits
\ttime_delta  :   27 bits
\tarray       :   32 bits

\tpadding     : type == 29
\ttime_extend : type == 30
\ttime_stamp : type == 31
\tdata max type_len  == 28
"""


def header_page(long_size: int) -> str:
    """The ring buffer page header (``events/header_page``): a timestamp, then ``commit``
    (the bytes of data in the page) as a ``local_t``, which is a kernel long."""
    data = 8 + long_size
    return (f"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
            f"\tfield: local_t commit;\toffset:8;\tsize:{long_size};\tsigned:1;\n"
            f"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
            f"\tfield: char data;\toffset:{data};\tsize:{PAGE_SIZE - data};\tsigned:1;\n")


@dataclass(frozen=True)
class Field:
    """One field of an event's record: its C declaration, where it is, how it prints.

    ``kind`` says how a value is stored: ``int`` (``code``, a struct code, ``count``
    of them for an array), ``str`` (a string, as a ``__data_loc``), ``text`` (a
    ``__data_loc`` string holding the value as kpsdk's text prints it: for what
    trace-cmd's parser cannot print from the kernel's layout).
    """

    decl: str
    name: str
    offset: int
    size: int
    signed: bool
    fmt: str
    arg: str
    kind: str
    code: str = ""
    count: int = 0
    type: ArgType | None = None

    def line(self) -> str:
        """The field's line in the ``format`` file."""
        return f"\tfield:{self.decl};\toffset:{self.offset};\tsize:{self.size};\tsigned:{int(self.signed)};"


_INT_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


def _int_fmt(argtype: ArgType) -> str:
    """The kernel's print format of an integer type (trace_probe.c's fetch types)."""
    long = "L" if argtype.size == 8 else ""
    if argtype.display == "x":
        return f"0x%{long}x"
    return f"%{long}{'d' if argtype.signed else 'u'}"


def _arg_field(arg: FetchArg, offset: int, word_bytes: int) -> Field:
    """A fetch argument's field, laid out as the kernel's ``traceprobe_define_arg_fields``
    does (no padding between fields), except where trace-cmd could not print that."""
    argtype, name = arg.type, arg.name
    if argtype.display in ("char", "symbol") or (argtype.is_string and argtype.count):
        # libtraceevent prints no '%c', and no __get_str() of a string array's element
        return Field(f"__data_loc char[] {name}", name, offset, 4, True, "%s", f"__get_str({name})", "text",
                     type=argtype)
    if argtype.is_string:
        return Field(f"__data_loc char[] {name}", name, offset, 4, True, '"%s"', f"__get_str({name})", "str")
    size = argtype.size or word_bytes
    ctype = f"{'s' if argtype.signed else 'u'}{size * 8}"
    if argtype.count:
        fmt = "{" + ",".join([_int_fmt(argtype)] * argtype.count) + "}"
        args = ", ".join(f"REC->{name}[{i}]" for i in range(argtype.count))
        return Field(f"{ctype} {name}[{argtype.count}]", name, offset, size * argtype.count, argtype.signed, fmt,
                     args, "int", _INT_CODES[size], argtype.count)
    return Field(f"{ctype} {name}", name, offset, size, argtype.signed, _int_fmt(argtype), f"REC->{name}", "int",
                 _INT_CODES[size])


class EventFormat:
    """One event's ``format`` file and the packing of its records."""

    def __init__(self, definition: ProbeDef, event_id: int, long_size: int) -> None:
        self.definition = definition
        self.id = event_id
        heads = ["__probe_func", "__probe_ret_ip"] if definition.is_return else ["__probe_ip"]
        self.heads = [Field(f"unsigned long {name}", name, 8 + i * long_size, long_size, False, "", "", "int",
                            _INT_CODES[long_size]) for i, name in enumerate(heads)]
        offset = 8 + len(heads) * long_size  # after the common fields and the probe's addresses
        self.fields: list[Field] = []
        for arg in definition.args:
            field = _arg_field(arg, offset, long_size)
            self.fields.append(field)
            offset += field.size
        self.size = offset

    def format_text(self) -> str:
        """The ``events/GROUP/EVENT/format`` file, as the kernel writes it for a probe event."""
        d = self.definition
        lines = [f"name: {d.event}", f"ID: {self.id}", "format:",
                 "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;",
                 "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;",
                 "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;",
                 "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;", ""]
        lines += [f.line() for f in self.heads + self.fields]
        # the kernel's __set_print_fmt: a return prints the function first, then where it returned to
        head = "(%lx <- %lx)" if d.is_return else "(%lx)"
        body = "".join(f" {f.name}={f.fmt}" for f in self.fields)
        args = "".join(f", {f.arg}" for f in self.fields)
        fmt = (head + body).replace('"', '\\"')
        head_args = ", ".join(f"REC->{f.name}" for f in self.heads)
        lines += ["", f'print fmt: "{fmt}", {head_args}{args}', ""]
        return "\n".join(lines)

    def pack(self, record: TraceRecord, endian: str, limit: int) -> bytes | None:
        """One record's data: the common fields, the fixed part, then the strings (data_loc).

        An entry lives in one ring-buffer page, so the data is at most ``limit`` bytes: the
        strings are cut to share what the fixed part leaves (each keeps its NUL); a record
        whose fixed part alone is longer is None, dropped as the kernel's ring buffer drops
        an event it cannot reserve.
        """
        flags, preempt = flag_bits(record.flags)
        fixed = bytearray(struct.pack(endian + "HBBi", self.id, flags, preempt, record.pid))
        heads = [record.ip] if len(self.heads) == 1 else [record.ip, record.caller or 0]
        for f, address in zip(self.heads, heads, strict=True):
            fixed += _pack_int(endian, f.code, address)
        strings: list[bytes] = []
        locs: list[int] = []  # where each data_loc goes in the fixed part
        for f in self.fields:
            value: object = record.fields.get(f.name)
            if f.kind == "int":
                values = value if isinstance(value, list) else [value] * max(1, f.count)
                fixed += b"".join(_pack_int(endian, f.code, v) for v in values)
                continue
            if f.kind == "text":
                value = format_value(value, f.type)
            locs.append(len(fixed))
            fixed += b"\0\0\0\0"
            strings.append(_cstring(value))
        if len(fixed) > limit:
            return None
        if len(fixed) + sum(map(len, strings)) > limit:
            share = (limit - len(fixed)) // len(strings)
            strings = [data if len(data) <= share else data[:max(share - 1, 0)] + b"\0" if share else b""
                       for data in strings]
        tail = bytearray()
        for at, data in zip(locs, strings, strict=True):
            struct.pack_into(endian + "I", fixed, at, (len(data) << 16) | (self.size + len(tail)))
            tail += data
        return bytes(fixed + tail)


def _cstring(value: object) -> bytes:
    """A string field's bytes with its NUL; a fault is the kernel's empty data_loc."""
    if not isinstance(value, str):
        return b""
    return value.encode("utf-8", "surrogateescape") + b"\0"


def _pack_int(endian: str, code: str, value: object) -> bytes:
    number = value if isinstance(value, int) else 0
    size = struct.calcsize(code)
    return struct.pack(endian + code, number & ((1 << (8 * size)) - 1))


def _header(endian: str, type_len: int, delta: int) -> bytes:
    """An entry's first word, ``type_len:5, time_delta:27`` as a C bitfield lays it out:
    from the low bits on a little-endian machine, from the high bits on a big-endian one."""
    word = type_len | (delta << 5) if endian == "<" else (type_len << TS_SHIFT) | delta
    return struct.pack(endian + "I", word)


def _entry(endian: str, delta: int, data: bytes) -> bytes:
    """One ring buffer entry: a time extend first when ``delta`` needs more than 27 bits."""
    out = b""
    if delta >= 1 << TS_SHIFT:
        out = _header(endian, TYPE_TIME_EXTEND, delta & ((1 << TS_SHIFT) - 1))
        out += struct.pack(endian + "I", delta >> TS_SHIFT)
        delta = 0
    padded = data + b"\0" * (-len(data) % 4)
    if len(padded) <= MAX_SMALL_DATA:
        return out + _header(endian, len(padded) // 4, delta) + padded
    # longer: type_len 0 and the length (with its own word) in array[0]
    return out + _header(endian, 0, delta) + struct.pack(endian + "I", len(padded) + 4) + padded


class _CpuPages:
    """One CPU's ring buffer pages, made as records come: the page being filled in memory, the
    full ones written out to ``spool`` (a temporary file) as they fill, so that a trace of any
    length holds one page per CPU in memory (issue 36, item 8)."""

    def __init__(self, endian: str, long_size: int, spool_dir: str | None) -> None:
        self.endian, self.long_size, self.spool_dir = endian, long_size, spool_dir
        self.room = PAGE_SIZE - (8 + long_size)
        self.page = bytearray()
        self.stamp = self.last = 0
        self.spool: IO[bytes] | None = None
        self.size = 0  # bytes of full pages in the spool

    def add(self, when: int, data: bytes) -> None:
        when = max(when, self.last)  # a CPU's entries never go back in time
        entry = _entry(self.endian, when - self.last, data)
        if self.page and len(self.page) + len(entry) > self.room:
            self._flush()
        if not self.page:
            self.stamp = self.last = when
            entry = _entry(self.endian, 0, data)
        self.page += entry
        self.last = when

    def _flush(self) -> None:
        if self.spool is None:
            self.spool = tempfile.TemporaryFile(dir=self.spool_dir, prefix="kpsdk-tracedat-")  # noqa: SIM115
        self.spool.write(_page(self.endian, self.long_size, self.stamp, self.page))
        self.size += PAGE_SIZE
        self.page = bytearray()

    def finish(self) -> int:
        """The last page written out; the size of all."""
        if self.page:
            self._flush()
        return self.size

    def copy_to(self, out: IO[bytes]) -> None:
        if self.spool is not None:
            self.spool.seek(0)
            shutil.copyfileobj(self.spool, out, 1 << 20)
            self.spool.close()
            self.spool = None


def cpu_pages(endian: str, long_size: int, times: list[int], datas: list[bytes]) -> bytes:
    """One CPU's ring buffer pages for these records (time in ns, data), oldest first."""
    pages = _CpuPages(endian, long_size, None)
    for when, data in zip(times, datas, strict=True):
        pages.add(when, data)
    pages.finish()
    out = io.BytesIO()
    pages.copy_to(out)
    return out.getvalue()


def _page(endian: str, long_size: int, stamp: int, data: bytes | bytearray) -> bytes:
    commit = struct.pack(endian + ("Q" if long_size == 8 else "I"), len(data))
    body = struct.pack(endian + "Q", stamp) + commit + data
    return body + b"\0" * (PAGE_SIZE - len(body))


def _function_of(r: TraceRecord) -> tuple[int, str] | None:
    """The start and name of the function a record names (``sym+0xoff/0xsize``, a return's
    ``func``), as a ``/proc/kallsyms`` line may hold it: one word, no blank or control character
    (a name that has one is shown escaped, :func:`~kpsdk.binfmt.symbols.shown_name`)."""
    if r.kind == "r" and r.func:
        name, offset = r.func, "0x0"
    else:
        name, plus, rest = r.where.rpartition("+")  # the last +: a name may hold one
        if not plus:
            return None
        offset = rest.split("/")[0]
    try:
        start = r.ip - int(offset, 16) if offset.startswith("0x") and offset.isascii() else -1
    except ValueError:
        return None
    if start < 0 or not name or name.startswith("0x"):
        return None
    return start, shown_name(name, blanks=True) if _NOT_A_WORD.search(name) else name


#: what cannot be in a kallsyms line's name: the blanks that separate its fields, and anything
#: :func:`~kpsdk.binfmt.symbols.shown_name` escapes but the backslash of a name it escaped before
_NOT_A_WORD = re.compile(r"[^\x21-\x7e]")


def _kallsyms(records: Iterable[TraceRecord]) -> str:
    """``/proc/kallsyms`` lines for the functions the records name, so that trace-cmd can
    tell the addresses' names (``--symbols``-style lookups in KernelShark)."""
    seen: dict[int, str] = {}
    for r in records:
        found = _function_of(r)
        if found is not None:
            seen.setdefault(*found)
    return _kallsyms_text(seen)


def _kallsyms_text(seen: dict[int, str]) -> str:
    return "".join(f"{addr:016x} T {name}\n" for addr, name in sorted(seen.items()))


def _cmdline(pid: int, comm: str) -> str:
    """A ``saved_cmdlines`` line: the comm on one line (a guest may name a task with a newline)."""
    return f"{pid} {shown_name(comm) if _NOT_A_WORD.search(comm.replace(' ', '')) else comm}\n"


def tracedat(records: Iterable[TraceRecord], long_size: int = 8,
             byteorder: Literal["little", "big"] = "little") -> bytes:
    """The whole ``trace.dat`` for these records (what :class:`TraceDatWriter` writes)."""
    out = io.BytesIO()
    writer = TraceDatWriter(out, long_size, byteorder)
    for record in records:
        writer.write(record)
    writer.close()
    return out.getvalue()


class TraceDatWriter(Writer):
    """trace-cmd's ``trace.dat``, streamed: each record is packed into its CPU's ring-buffer
    page when it comes, and a full page goes to a temporary file (in the output's directory
    when the output is a file, else ``$TMPDIR``; unnamed, nothing is left behind).  What the
    header needs of the whole trace (the events' formats, the functions named, the pid to comm
    table, the number of CPUs) is kept as it grows, one entry per event, function, task and
    CPU, never per record; :meth:`close` writes the header and copies the pages after it.
    Memory stays flat however long the trace (``tests/test_trace_memory.py``)."""

    def __init__(self, stream: IO[bytes], long_size: int = 8, byteorder: Literal["little", "big"] = "little") -> None:
        self.stream = stream
        self.long_size = long_size
        self.byteorder = byteorder
        self._endian = "<" if byteorder == "little" else ">"
        # an entry's data, with its header, length word and a time extend before it, fits in a page
        self._limit = PAGE_SIZE - (8 + long_size) - 16
        self._formats: dict[tuple[str, str], EventFormat] = {}
        self._used: set[int] = set()
        self._next_id = FIRST_EVENT_ID
        self._functions: dict[int, str] = {}
        self._places: set[tuple[str, int, str | None]] = set()
        self._cmdlines: dict[int, str] = {}
        self._cpus: dict[int, _CpuPages] = {}
        self._ncpus = 0
        self._spool_dir = _spool_dir(stream)

    def _format_of(self, d: ProbeDef, event_id: int) -> EventFormat:
        """The event's format, made at its first record: its id as its trace numbered it, unless
        an event before it took that id (or it has none): then the next id no event has."""
        fmt = self._formats.get((d.group, d.event))
        if fmt is None:
            if not event_id or event_id in self._used:
                while self._next_id in self._used:
                    self._next_id += 1
                event_id = self._next_id
            self._used.add(event_id)
            fmt = self._formats[(d.group, d.event)] = EventFormat(d, event_id, self.long_size)
        return fmt

    def write(self, record: TraceRecord) -> None:
        self._ncpus = max(self._ncpus, record.cpu + 1)
        if record.comm != UNKNOWN_COMM:
            self._cmdlines[record.pid] = record.comm
        place = (record.where, record.ip, record.func if record.kind == "r" else None)
        if place not in self._places:  # the function a place names, worked out once per place
            if len(self._places) >= _PLACES:
                self._places.clear()
            self._places.add(place)
            found = _function_of(record)
            if found is not None:
                self._functions.setdefault(*found)
        d = record.definition
        if d is None:
            return
        data = self._format_of(d, record.event_id).pack(record, self._endian, self._limit)
        if data is None:
            return
        pages = self._cpus.get(record.cpu)
        if pages is None:
            pages = self._cpus[record.cpu] = _CpuPages(self._endian, self.long_size, self._spool_dir)
        pages.add(max(0, round(record.time * 1e9)), data)

    def flush(self) -> None:
        """Nothing reaches the file before :meth:`close` (its header comes first)."""

    def close(self) -> None:
        endian = self._endian
        out = bytearray(MAGIC + VERSION + bytes([0 if self.byteorder == "little" else 1, self.long_size]))
        out += struct.pack(endian + "I", PAGE_SIZE)
        for name, text in (("header_page", header_page(self.long_size)), ("header_event", HEADER_EVENT)):
            data = text.encode()
            out += name.encode() + b"\0" + struct.pack(endian + "Q", len(data)) + data
        out += struct.pack(endian + "I", 0)  # no ftrace (function tracer) formats
        systems: dict[str, list[EventFormat]] = {}
        for fmt in self._formats.values():
            systems.setdefault(fmt.definition.group, []).append(fmt)
        out += struct.pack(endian + "I", len(systems))
        for system, fmts in systems.items():
            out += system.encode() + b"\0" + struct.pack(endian + "I", len(fmts))
            for fmt in fmts:
                data = fmt.format_text().encode()
                out += struct.pack(endian + "Q", len(data)) + data
        for blob in (_kallsyms_text(self._functions).encode(), b""):  # kallsyms, printk formats
            out += struct.pack(endian + "I", len(blob)) + blob
        blob = "".join(_cmdline(pid, comm) for pid, comm in sorted(self._cmdlines.items())).encode()
        out += struct.pack(endian + "Q", len(blob)) + blob
        ncpus = max(self._ncpus, 1)
        out += struct.pack(endian + "I", ncpus)
        out += b"flyrecord\0"
        sizes = [self._cpus[cpu].finish() if cpu in self._cpus else 0 for cpu in range(ncpus)]
        start = len(out) + 16 * ncpus
        start += -start % PAGE_SIZE
        where = start
        for size in sizes:
            out += struct.pack(endian + "QQ", where, size)
            where += size
        out += b"\0" * (start - len(out))
        self.stream.write(bytes(out))
        for cpu in range(ncpus):
            if cpu in self._cpus:
                self._cpus[cpu].copy_to(self.stream)
        self._cpus.clear()
        self.stream.flush()


#: the places (where, ip, func) whose function is known, kept at once (as the text writer's prefixes)
_PLACES = 4096


def _spool_dir(stream: IO[bytes]) -> str | None:
    """Where full pages wait for :meth:`TraceDatWriter.close`: beside the output file (its disk,
    not a memory-backed ``/tmp``), else ``$TMPDIR`` (a pipe, a terminal, an in-memory stream)."""
    name = getattr(stream, "name", None)
    try:
        if isinstance(name, str) and stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            return os.path.dirname(os.path.abspath(name))
    except (OSError, ValueError, io.UnsupportedOperation):
        return None
    return None
