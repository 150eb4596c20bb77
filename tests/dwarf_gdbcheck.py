"""Run inside gdb (``gdb -batch -x tests/dwarf_gdbcheck.py``): kpsdk's DWARF answers against gdb's,
at the same stop.

At each breakpoint the spec lists, this script asks gdb for every variable of kpsdk's scope
there (in the gdb frame of the function that declares it, inlined frames included) and for
each scalar inside it (struct members and array elements, flattened to paths such as
``buf.fl.mode``), and asks kpsdk for the same path, evaluated from the registers and memory
gdb reports in that same stop (:class:`GdbCpu`).  It also unwinds the stack with kpsdk's CFI
unwinder and records gdb's backtrace (physical frames).  Everything goes to a JSON file the
test reads (``tests/test_dwarf_gdb.py``).

The spec (JSON, path in ``$KPSDK_GDB_SPEC``): ``program``, ``stops`` (file addresses),
``out``, and for a qemu-user target ``remote`` (``host:port``) and ``sysroot``.
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path[:0] = json.loads(os.environ["KPSDK_GDB_SYSPATH"])

import gdb  # noqa: E402  (gdb's own module, importable only inside gdb)

from kpsdk.binfmt.dwarf import DebugInfo, FrameTable, unwind  # noqa: E402
from kpsdk.binfmt.dwarf.debugfile import find_debug_file, read_elf  # noqa: E402
from kpsdk.errors import DebugInfoError, KpsdkError, TargetFault  # noqa: E402

SPEC = json.load(open(os.environ["KPSDK_GDB_SPEC"]))
MAX_LEAVES = 48


class GdbCpu:
    """kpsdk's Cpu protocol over the stopped inferior (the innermost physical frame)."""

    def __init__(self, mask: int) -> None:
        self.mask = mask

    def read_register(self, name: str) -> int:
        try:
            value = gdb.newest_frame().read_register(name)
        except (ValueError, gdb.error) as e:
            raise LookupError(f"gdb has no register {name}: {e}") from None
        if value.type.strip_typedefs().code == gdb.TYPE_CODE_UNION:
            for field in ("uint128", "v2_int64", "double", "float"):
                try:
                    inner = value[field]
                except gdb.error:
                    continue
                if field == "v2_int64":
                    return int(inner[0]) & ((1 << 64) - 1)
                if field in ("double", "float"):
                    import struct

                    return int.from_bytes(struct.pack("<d" if field == "double" else "<f", float(inner)), "little")
                return int(inner)
            raise LookupError(f"register {name}: a union gdb shows without an integer view")
        return int(value) & self.mask

    def read_memory(self, address: int, size: int) -> bytes:
        try:
            return bytes(gdb.selected_inferior().read_memory(address, size))
        except gdb.MemoryError as e:
            raise TargetFault(f"cannot read {size} bytes", address=address) from e


def gdb_frames(pc: int) -> list[gdb.Frame]:
    """gdb's frames at the stop: the innermost and the inline ones sharing its pc."""
    out = []
    frame = gdb.newest_frame()
    while frame is not None:
        out.append(frame)
        if frame.type() != gdb.INLINE_FRAME:
            break
        frame = frame.older()
    return out


def leaves(value: gdb.Value, path: str, out: list[tuple[str, gdb.Value]]) -> None:
    """Scalars inside ``value`` with their C paths."""
    if len(out) >= MAX_LEAVES:
        return
    t = value.type.strip_typedefs()
    if t.code in (gdb.TYPE_CODE_STRUCT, gdb.TYPE_CODE_UNION):
        for field in t.fields():
            if field.name is None or field.artificial or not hasattr(field, "bitpos"):
                continue
            leaves(value[field.name], f"{path}.{field.name}", out)
    elif t.code == gdb.TYPE_CODE_ARRAY:
        low, high = t.range()
        for i in range(low, min(high, low + 8) + 1):
            leaves(value[i], f"{path}[{i}]", out)
    else:
        out.append((path, value))


def scalar(value: gdb.Value) -> object:
    """A gdb value as a comparable number (None when gdb says it is optimized out)."""
    if value.is_optimized_out:
        return None
    t = value.type.strip_typedefs()
    if t.code == gdb.TYPE_CODE_PTR and "<synthetic pointer>" in str(value):
        return "synthetic"  # DW_OP_implicit_pointer: gdb has no address to show either
    if t.code == gdb.TYPE_CODE_FLT:
        return float(value)
    if t.code == gdb.TYPE_CODE_BOOL:
        return int(bool(value))
    return int(value) & ((1 << (8 * t.sizeof)) - 1) if t.sizeof else int(value)


def ours_scalar(v: object, size: int) -> object:
    from kpsdk.binfmt.dwarf import Value

    assert isinstance(v, Value)
    if v.type.strip().encoding == "float":
        return v.float()
    return int(v) & ((1 << (8 * size)) - 1)


_TABLES: dict[str, FrameTable] = {}


def library_tables(arch: object) -> list[tuple[int, int, FrameTable, int]]:
    """(low, high, table, bias) of each shared library gdb lists now (tables read once a file)."""
    out = []
    text = gdb.execute("info sharedlibrary", to_string=True)
    for line in text.splitlines():
        m = re.match(r"\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+(?:\(\*\)\s+)?(/\S+)", line)
        if not m:
            continue
        low, high, path = int(m.group(1), 16), int(m.group(2), 16), m.group(3)
        try:
            elf = read_elf(__import__("pathlib").Path(path))
            text_section = elf.section(".text")
            if text_section is None:
                continue
            bias = low - text_section.header["sh_addr"]
            files = [elf]
            try:
                debug = find_debug_file(path, elf)
                if debug.separate:
                    files.append(debug.elf)
            except DebugInfoError:
                pass
            if path not in _TABLES:
                _TABLES[path] = FrameTable.from_files(arch.dwarf, arch.pc, arch.sp, *files)  # type: ignore[attr-defined]
            table = _TABLES[path]
        except (KpsdkError, OSError):
            continue
        out.append((low, high, table, bias))
    return out


def main() -> None:
    gdb.execute("set pagination off")
    gdb.execute("set confirm off")
    gdb.execute("set width 0")
    if SPEC.get("sysroot"):
        gdb.execute(f"set sysroot {SPEC['sysroot']}")
    gdb.execute(f"file {SPEC['program']}")
    dbg = DebugInfo.open(SPEC["program"])
    arch = dbg.arch
    mask = (1 << (8 * dbg.address_size)) - 1
    if SPEC.get("remote"):
        gdb.execute(f"target remote {SPEC['remote']}")
    else:
        gdb.execute("starti")
    main_fn = dbg.functions("main", inlined=False)[0]
    bias = (int(gdb.parse_and_eval("(unsigned long)&main")) & mask & ~1) - (main_fn.entry & ~1)
    for pc in SPEC["stops"]:
        gdb.execute(f"break *{pc + bias:#x}", to_string=True)
    gdb.execute("set breakpoint pending on")
    for name in SPEC.get("library_breaks", []):  # in a shared library: unwinds through it
        gdb.execute(f"break {name}", to_string=True)
    records: list[dict[str, object]] = []
    unwinds: list[dict[str, object]] = []
    thumb = bool(arch.has_thumb)
    program_table = dbg.frame_table
    hits = 0
    while hits < len(SPEC["stops"]) + len(SPEC.get("library_breaks", [])) + 5:
        try:
            gdb.execute("continue", to_string=True)
        except gdb.error:
            break
        if not gdb.selected_inferior().pid and not SPEC.get("remote"):
            break
        try:
            frame0 = gdb.newest_frame()
        except gdb.error:
            break
        hits += 1
        pc = (frame0.pc() & mask) - bias
        gdb.execute(f"clear *{pc + bias:#x}", to_string=True)
        in_library = gdb.solib_name(frame0.pc()) is not None
        cpu = GdbCpu(mask)
        scope = None
        try:
            scope = None if in_library else dbg.scope(pc)
        except DebugInfoError:
            pass
        frames = gdb_frames(frame0.pc())
        seen: set[tuple[str, str]] = set()
        for var in reversed(scope.variables if scope else []):
            if (var.name, var.function) in seen:
                continue
            seen.add((var.name, var.function))
            gframe = next((f for f in frames if f.name() == var.function), None)
            if gframe is None:
                continue
            try:
                gvalue = gframe.read_var(var.name)
            except (ValueError, gdb.error):
                continue
            if var.function != scope.function.name or gframe is not frames[-1]:
                # a variable of an inlined frame: kpsdk's innermost-wins lookup must find this one
                if scope.lookup(var.name) is not var:
                    continue
            elif scope.lookup(var.name) is not var:
                continue
            flat: list[tuple[str, gdb.Value]] = []
            try:
                leaves(gvalue, var.name, flat)
            except gdb.error:
                continue
            for path, leaf in flat:
                try:
                    theirs = scalar(leaf)
                except gdb.error:
                    theirs = None
                try:
                    value = dbg.value(pc, path, cpu, bias=bias)
                    ours = ours_scalar(value, leaf.type.strip_typedefs().sizeof)
                except KpsdkError as e:
                    ours = f"{type(e).__name__}: {e}"
                records.append({"pc": pc, "path": path, "function": var.function, "gdb": theirs, "ours": ours,
                                "kind": var.kind})
        # backtraces: gdb's physical frames against kpsdk's CFI walk
        theirs_bt = []
        f = gdb.newest_frame()
        while f is not None and len(theirs_bt) < 32:
            if f.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):  # gdb's virtual frames
                theirs_bt.append((f.pc() & mask, f.name() or ""))
            f = f.older()
        libs = library_tables(arch)

        def tables(address: int, _libs: list[tuple[int, int, FrameTable, int]] = libs) -> tuple[FrameTable, int] | None:
            for low, high, table, lbias in _libs:
                if low <= address < high:
                    return table, lbias
            if program_table.fde_at(address - bias) is not None:
                return program_table, bias
            return None

        ours_bt = [fr.pc for fr in unwind(cpu, frame0.pc() & mask, tables, max_frames=32, thumb=thumb)]
        unwinds.append({"pc": pc, "gdb": theirs_bt, "ours": ours_bt, "library": in_library})
    with open(SPEC["out"], "w") as out:
        json.dump({"bias": bias, "hits": hits, "values": records, "unwinds": unwinds}, out)
    try:
        gdb.execute("kill", to_string=True)
    except gdb.error:
        pass


main()
