"""Text lines of native trace records formatted in C, a batch at a time (``textlines.c``).

A record of an event run in C (:mod:`kpsdk.trace.native`) costs ~0.2 us at the hit; writing
its line through :class:`~kpsdk.trace.output.TextWriter`'s per-event path costs ~2-4 us more.
Where the sink is a plain TextWriter's ``write`` (``kpsdk trace``'s text output), the
drained records' lines are formatted by ``textlines.c`` instead, from a description of each
event's line made here once (its ``EVENT: (where)``, each field's label and how it prints,
constants as Python prints them) and each task's prefix (``comm-pid [cpu] flags``).  The
bytes are the TextWriter's (tests/test_trace_native.py writes both); a record the C side does
not know how to write exactly so (a string that is not valid UTF-8, a symbol, a character)
goes through the per-event path, in order.  Without gcc the per-event path writes every line.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kpsdk.binfmt.symbols import shown_name
from kpsdk.errors import TargetError, ToolMissingError
from kpsdk.fetchprog import MAX_STRING
from kpsdk.nativebuild import build_shared_object

if TYPE_CHECKING:
    from kpsdk.kernel.tasks import TaskInfo
    from kpsdk.trace.native import NativeEvent
    from kpsdk.trace.output import TextWriter

SOURCE = Path(__file__).with_name("textlines.c")
HEX, DEC, STR, ARR_HEX, ARR_DEC, CONST, PYTHON = range(1, 8)
DONE, FULL, RECORD = 0, 1, 2
#: the buffer the lines of one batch are written into (flushed to the stream when full)
OUT_SIZE = 1 << 22


class _Field(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint8), ("is_signed", ctypes.c_uint8), ("label_len", ctypes.c_uint16),
                ("index", ctypes.c_uint32), ("label", ctypes.c_char_p), ("text", ctypes.c_char_p),
                ("text_len", ctypes.c_uint64)]


class _Event(ctypes.Structure):
    _fields_ = [("ip", ctypes.c_uint64), ("nfields", ctypes.c_uint32), ("nscalar", ctypes.c_uint32),
                ("nvar", ctypes.c_uint32), ("head_len", ctypes.c_uint32), ("max_line", ctypes.c_uint64),
                ("head", ctypes.c_char_p), ("fields", ctypes.POINTER(_Field)), ("written", ctypes.c_uint64)]


class _Task(ctypes.Structure):
    _fields_ = [("text", ctypes.c_char_p), ("len", ctypes.c_uint64)]


_library: Any = None
_tried = False


def _load() -> Any:
    global _library, _tried
    if not _tried:
        _tried = True
        try:
            lib = ctypes.CDLL(str(build_shared_object("trace-native", SOURCE, "kpsdk's trace text lines",
                                                      flags=["-lm"])))
        except (ToolMissingError, TargetError, OSError):
            return None
        fn = lib.kpsdk_text_lines
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                       ctypes.POINTER(ctypes.POINTER(_Event)), ctypes.c_uint32, ctypes.POINTER(_Task),
                       ctypes.c_uint32, ctypes.c_double, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                       ctypes.POINTER(ctypes.c_uint64)]
        _library = lib
    return _library


def _kind(display: str, plan: tuple[Any, ...]) -> int:
    if plan[0] == "int":
        return HEX if display == "x" else PYTHON if display in ("char", "symbol") else DEC
    if plan[0] == "str":
        return STR
    if plan[0] == "arr":
        return ARR_HEX if display == "x" else PYTHON if display in ("char", "symbol") else ARR_DEC
    return PYTHON


class TextLines:
    """The C formatter of one text writer's lines for one trace's native events."""

    def __init__(self, writer: TextWriter, lib: Any, broken: Callable[[], None] | None = None) -> None:
        self.writer = writer
        self.lib = lib
        #: what to call when the stream's reader went away (then nothing more is written)
        self.broken = broken
        self.dead = False
        self.out = ctypes.create_string_buffer(OUT_SIZE)
        self._keep: list[Any] = []
        self._events: Any = None
        self._nevents = 0
        self._tasks: Any = None
        self._ntasks = 0
        self._counted: dict[int, int] = {}

    def describe(self, events: dict[int, NativeEvent], ips: dict[int, int]) -> None:
        """Each event's line, by program id (``ips``: the address each one's records have)."""
        from kpsdk.trace.output import _fields_of

        size = max(events, default=0) + 1
        table = (ctypes.POINTER(_Event) * size)()
        keep: list[Any] = [table]
        for ident, native in events.items():
            event = native.event
            ip = ips.get(ident)
            if ip is None:
                continue
            formatters = _fields_of(event.definition)[2]
            fields = (_Field * max(len(event.args), 1))()
            longest = 0
            python = False
            for i, (arg, plan) in enumerate(zip(event.args, native.program.fields, strict=True)):
                label = f" {arg.name}=".encode()
                f = fields[i]
                f.label, f.label_len = label, len(label)
                keep.append(label)
                if plan[0] == "const":
                    value = arg.comm if arg.arg.fetch.kind == "comm" else arg.arg.fetch.text
                    text = formatters[arg.name](value).encode("utf-8", "surrogateescape")
                    f.kind, f.text, f.text_len = CONST, text, len(text)
                    keep.append(text)
                    longest += len(label) + len(text)
                    continue
                f.kind = _kind(arg.type.display, plan)
                python |= f.kind == PYTHON
                f.is_signed = 1 if plan[0] in ("int", "arr") and plan[2] else 0
                f.index = plan[1]
                count = max(arg.type.count, 1)
                longest += len(label) + (2 * MAX_STRING + 2 if f.kind == STR else 24 * count + 2)
            if python:
                continue  # every record of it goes through the per-event path
            head = f"{event.name}: ({native.where(ip)})".encode()
            ev = _Event(ip, len(event.args), native.program.nscalar, native.program.nvar, len(head),
                        longest + len(head) + 256, head, fields, 0)
            keep += [head, fields, ev]
            table[ident] = ctypes.pointer(ev)
            self._counted[ident] = 0
        self._events, self._nevents, self._keep = table, size, keep

    def tasks(self, tasks: list[tuple[TaskInfo, int]]) -> None:
        """The prefixes' task parts, by the stamp records carry (as TextWriter makes them)."""
        if len(tasks) == self._ntasks:
            return
        table = (_Task * max(len(tasks), 1))()
        texts = []
        for i, (task, _) in enumerate(tasks):
            text = f"{shown_name(task.comm):>16}-{task.pid:<7} [{task.cpu:03d}] {task.flags} ".encode()
            texts.append(text)
            table[i].text, table[i].len = text, len(text)
        self._tasks, self._ntasks = (table, texts), len(tasks)

    def write(self, data: memoryview, start: float, one: Any, buf: int) -> list[tuple[int, int]]:
        """Lines for every record of ``data``; ``one(at)`` writes the record at ``at`` through the
        per-event path and returns where the next one starts.  Returns the lines C wrote, by
        program id (the events' ``recorded``)."""
        writer = self.writer
        at = ctypes.c_uint64(0)
        used = ctypes.c_uint64(0)
        end = len(data)
        out = self.out
        lib = self.lib
        while True:
            status = lib.kpsdk_text_lines(buf, end, ctypes.byref(at), self._events, self._nevents,
                                          self._tasks[0], self._ntasks, start, 1 if writer.prefix else 0,
                                          out, OUT_SIZE, ctypes.byref(used))
            if used.value and not self.dead:
                try:
                    if writer._header:
                        writer._start()
                    writer.stream.write(ctypes.string_at(out, used.value).decode("utf-8", "surrogateescape"))
                except BrokenPipeError:
                    if self.broken is None:
                        raise
                    self.dead = True
                    self.broken()
            used.value = 0
            if status == DONE:
                break
            if status == RECORD:
                at.value = one(int(at.value))
        written = []
        for ident in self._counted:
            ev = self._events[ident].contents
            written.append((ident, int(ev.written) - self._counted[ident]))
            self._counted[ident] = int(ev.written)
        return written


def text_lines(writer: Any) -> TextLines | None:
    """The C formatter for ``writer``'s lines, where it writes a plain TextWriter's
    (:meth:`Writer.text_lines <kpsdk.trace.output.Writer.text_lines>`; None: it does not, or no gcc)."""
    target = writer.text_lines()
    if target is None:
        return None
    lib = _load()
    return None if lib is None else TextLines(target[0], lib, target[1])
