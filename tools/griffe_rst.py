"""kpsdk's docstrings (reStructuredText, sphinx fields) as mkdocstrings renders Markdown.

A griffe extension, named in mkdocs.yml.  kpsdk's docstrings are written for ``help()`` and
for readers of the source, in the rST the standard library uses: roles such as
``:class:`~kpsdk.arch.Arch```, ``Usage::`` literal blocks, ``>>>`` examples, simple tables,
and ``#:`` comments above attributes.  mkdocstrings' sphinx parser reads the ``:param:``
fields; this turns the rest into Markdown before it does:

- a role becomes an *optional* cross-reference: a link where the name is documented on some
  page of the site, plain code where it is not (``--strict`` stays clean either way);
- ``text::`` ends its paragraph with ``text:`` (the indented block after it already is a
  Markdown code block), and runs of ``>>>`` lines become a ``pycon`` block;
- a simple table (``====  ====`` rules) becomes a Markdown table;
- ``#: text`` comments just above a class or module attribute become its docstring, as
  Sphinx's autodoc reads them.

The conversions are plain functions (tests/test_docs.py checks them without griffe, which only
the ``docs`` extra installs).
"""

from __future__ import annotations

import re
from typing import Any

# :role:`name`, :role:`~name` (titled by its last part) or :role:`title <name>`
ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`<>]+?)(?:\s*<([^`<>]+)>)?`")
RULE = re.compile(r"^(\s*)(=+)((?:\s+=+)+)\s*$")


def roles(text: str, resolve: Any = None) -> str:
    """``:class:`~a.b.C``` -> an optional autoref titled ``C`` to ``a.b.C``.

    ``:meth:`Session.run <kpsdk.session.Session.run>``` keeps its own title (``Session.run``,
    without the ``()`` a bare name gets).  ``resolve(name)`` turns a name relative to the
    docstring's object (``Kretprobe``, ``SyscallEvent.result``) into its full path, or returns
    None (then the name is kept).
    """

    def one(m: re.Match[str]) -> str:
        kind, tilde, name, explicit = m.groups()
        if explicit is not None:
            title, name = name.strip(), explicit.strip().lstrip(".")
        else:
            name = name.strip().lstrip(".")
            title = name.rsplit(".", 1)[-1] if tilde else name
            if kind in ("func", "meth"):
                title += "()"
        target = resolve(name) if resolve is not None else None
        target = target or name
        return f'<autoref identifier="{target}" optional><code>{title}</code></autoref>'

    return ROLE.sub(one, text)


def _prompt(line: str) -> bool:
    """A line of a ``>>>`` example: the prompt or its continuation."""
    stripped = line.strip()
    return stripped.startswith((">>> ", "... ")) or stripped in (">>>", "...")


def literal_blocks(text: str) -> str:
    """``Usage::`` -> ``Usage:``; a lone ``::`` line goes; ``>>>`` runs become a pycon block."""
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(">>>"):
            indent = line[: len(line) - len(line.lstrip())]
            block = []
            while i < len(lines) and _prompt(lines[i]):
                block.append(lines[i][len(indent):])
                i += 1
            if out and out[-1].strip():
                out.append("")
            out += [f"{indent}```pycon", *(indent + b for b in block), f"{indent}```"]
            if i < len(lines) and lines[i].strip():
                out.append("")
            continue
        if line.strip() == "::":
            i += 1
            continue
        if line.endswith("::") and not line.endswith(":::"):
            # rST: "Usage::" shows "Usage:", "Usage ::" shows "Usage"
            text = line[:-2]
            line = text.rstrip() if text.endswith(" ") else text + ":"
        out.append(line)
        i += 1
    return "\n".join(out)


def _cells(line: str, starts: list[int]) -> list[str]:
    bounds = [*starts[1:], None]
    return [line[a:b].strip() if a < len(line) else "" for a, b in zip(starts, bounds, strict=True)]


def simple_tables(text: str) -> str:
    """rST simple tables (``====  ====`` rules above, below, and under a header) -> Markdown.

    A row whose first cell is empty continues the row above.  Without a header rule the first
    row is the header anyway (Markdown needs one): kpsdk's tables are name/meaning lists, and the
    first row is then shown in bold type, which is no worse than a table with no header.
    """
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = RULE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        rule = lines[i]
        starts = [k.start() for k in re.finditer(r"=+", rule)]
        rows: list[list[str]] = []
        rules_seen = 1
        header_rows = 0
        i += 1
        while i < len(lines) and rules_seen < 3:
            if RULE.match(lines[i]):
                rules_seen += 1
                if rules_seen == 2 and i + 1 < len(lines) and lines[i + 1].strip():
                    # a rule right under the first row(s) is the header rule, unless it ends the table
                    nxt = i + 1
                    if any(RULE.match(x) for x in lines[nxt:]):
                        header_rows = len(rows)
                        i += 1
                        continue
                i += 1
                break
            cells = _cells(lines[i], starts)
            if not lines[i].strip():
                i += 1
                continue
            if rows and not cells[0]:
                rows[-1] = [(a + " " + b).strip() for a, b in zip(rows[-1], cells, strict=True)]
            else:
                rows.append(cells)
            i += 1
        if not rows:
            continue
        head = rows[:header_rows] if header_rows else rows[:1]
        body = rows[header_rows:] if header_rows else rows[1:]
        header = [" ".join(c).strip() for c in zip(*head, strict=True)]
        if out and out[-1].strip():
            out.append("")
        out.append(indent + "| " + " | ".join(c.replace("|", "\\|") for c in header) + " |")
        out.append(indent + "|" + "---|" * len(header))
        out += [indent + "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in body]
        if i < len(lines) and lines[i].strip():
            out.append("")
    return "\n".join(out)


def markdown(text: str, resolve: Any = None) -> str:
    """Every conversion, in order."""
    return roles(simple_tables(literal_blocks(text)), resolve)


def comment_doc(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` comment lines just above line ``lineno`` (1-based), as text, or None."""
    found: list[str] = []
    k = lineno - 2
    while k >= 0 and lines[k].strip().startswith("#:"):
        found.insert(0, lines[k].strip()[2:].strip())
        k -= 1
    return "\n".join(found) if found else None


try:  # the docs extra; the functions above are tested without it
    import griffe
except ImportError:  # pragma: no cover - tests/test_docs.py runs without the docs extra
    HAVE_GRIFFE = False
else:
    HAVE_GRIFFE = True

if HAVE_GRIFFE:

    class RstToMarkdown(griffe.Extension):
        """The griffe extension: rewrites every docstring once the whole package is loaded (so that
        names relative to a docstring's object resolve, whichever module defines them)."""

        def on_package(self, *, pkg: Any, **kwargs: Any) -> None:
            seen: set[int] = {id(pkg)}
            self._convert(pkg)
            self._walk(pkg, seen)

        def _walk(self, obj: Any, seen: set[int]) -> None:
            for member in list(obj.members.values()):
                if member.is_alias or id(member) in seen:
                    continue
                seen.add(id(member))
                self._convert(member)
                if member.is_module or member.is_class:
                    self._walk(member, seen)

        @staticmethod
        def _convert(obj: Any) -> None:
            if obj.docstring is None and obj.is_attribute and obj.lineno:
                try:
                    source = list(obj.lines_collection[obj.filepath])
                except (KeyError, AttributeError, TypeError):
                    source = []
                text = comment_doc(source, obj.lineno) if source else None
                if text:
                    obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
            if obj.docstring is None:
                return

            def resolve(name: str) -> str | None:
                head, dot, rest = name.partition(".")   # "SyscallEvent.result": resolve the first name
                for scope in (obj, obj.parent, obj.module):
                    if scope is None:
                        continue
                    try:
                        return str(scope.resolve(head)) + dot + rest
                    except griffe.NameResolutionError:  # not known there: the next scope, or keep the name
                        continue
                return None

            obj.docstring.value = markdown(obj.docstring.value, resolve)
