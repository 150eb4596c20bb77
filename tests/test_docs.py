"""Every example in the README and in docs/ runs, and prints what the page says it prints.

The pages are README.md and every docs/**/*.md (the site's pages, tutorial included).  Each
fenced block is one of:

- ```` ```python ````: run.  The blocks of one page run in order in one namespace, so a page
  can build on its earlier blocks; the working directory holds ``kpsdk`` and ``examples``
  (links into the source tree) and ``.venv/bin/{python,kpsdk}``, as the repository root does
  after the README's install.
- ```` ```console ````: each ``$ COMMAND`` (``\\``-continued lines included) runs in one bash per
  block (so ``eval``'d variables carry over), stdout and stderr together, as a terminal
  shows them; the lines up to the next ``$`` are its output.  A command must exit 0, unless
  its output shows an ``error:`` line, then it must fail.
- ```` ```sh ````: the whole block runs as one ``bash -e`` script.
- anything else (``text``, ``c``, ``pycon``...) is not run.  A block with no language is an
  error: say what it is.

What a block prints is checked against:

- the ```` ```text ```` block right after it (nothing but prose between: no heading, no other
  block), or the output lines of a console command.  ``...`` alone on a line stands for any
  number of lines, ``...`` inside a line for any text in it, and ``  # remark`` at the end of
  an expected line (two spaces, then ``#``) is the page's remark, not output;
- or else, when no text block shows it, a trailing comment on a line that calls ``print(``:
  ``print(b.call(f, 20, 22))  # 42``.  The comment, or its part before the first ``": "``
  (what follows is a remark: ``# 1: fact(5) recurses 5 deep``), must be whole lines of what
  the block printed, ``...`` standing for anything (``# fact 5 ... fact 1`` spans lines).

A sh or console block whose commands are not kpsdk's (``kpsdk ...``, ``python -m kpsdk...``,
``eval "$(python -m kpsdk...)"``) must say why it is not run, in a visible marker just
before it: ``<!-- not run: REASON -->``.  Each not-run block is a skipped test item with its
reason (``pytest -ra`` lists them), and ``NOT_RUN`` below counts them per page, so a new one
is a deliberate change.  A printed block's output that is not deterministic says so with
``<!-- output not checked: REASON -->`` before its text block (none today).

Blocks that need QEMU and gdb (``qemu-user:``, ``qemu-system:``, ``gdb://``), gdbserver
(``native:``, ``pid:``), Debian's
kernel (``kpsdk.fixtures.kernel``) or trace-cmd (``trace-cmd report`` of a trace.dat kpsdk
wrote: the one other command a block may run) require those tools as the other live tests do: they skip
locally naming the package, and fail on CI.  The kernel is fetched once into kpsdk's cache by
the ``debian_kernel`` fixture, shared with the kernel tests.

Besides the examples: every page of docs/ is in mkdocs.yml's nav, and every name ``kpsdk``
exports has an entry in the API reference (docs/reference/).  The site itself is built by
``nox -s docs`` (CI runs it after the tests), not here: its tools are the ``docs`` extra.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kpsdk.cache import cache_root
from kpsdk.cachetree import checked_tree, record_tree
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[1]
PAGES = ["README.md", *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("*.md"))]
RUN_LANGS = ("python", "console", "sh")
#: not-run blocks per page (each with its reason in the page): change this with the page
NOT_RUN = {
    "README.md": 2,             # the install-and-test quick start (a new venv, the whole test suite);
                                # building the site (a nox venv from PyPI; CI builds it after the tests)
    "docs/performance.md": 1,   # the benchmark: minutes, and a Qiling venv (nox -s bench)
    "docs/tutorial/kernel.md": 1,   # a part of the workload the guest's /init runs
    "docs/api/targets.md": 1,       # a process started in the background for --pid (tests/test_gdbserver.py runs it)
    "docs/dwarf.md": 1,         # kpsdk probe by source on a program of the reader's (the page's is in a temp dir)
    "docs/matrix.md": 3,        # two matrices of five kernels (tests/test_matrix_kernels.py runs one);
                                # a Dask cluster that stays up (tests/test_matrix.py starts its own)
}
COMMAND_TIMEOUT = 300           # seconds for one shell block (a kernel boot takes ~10 s)

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)(.*)$")
MARKER = re.compile(r"^\s*<!--\s*(not run|output not checked):\s*(.*?)\s*-->\s*$")
HEADING = re.compile(r"^#{1,6}\s")


@dataclass
class Block:
    page: str
    line: int                    # 1-based line of the opening fence
    lang: str
    text: str
    marker: tuple[str, str] | None = None   # ("not run" | "output not checked", reason)
    output: Block | None = None             # the text block that shows what it prints
    is_output: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(page: str, source: str) -> list[Block]:
    """The fenced blocks of a page, with their markers and output blocks."""
    blocks: list[Block] = []
    lines = source.split("\n")
    i = 0
    last_runnable: Block | None = None   # the runnable block whose output a text block may be
    pending: tuple[str, str] | None = None
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m and m.group(2)[0] == "`" and "`" in m.group(3) + m.group(4):
            m = None   # CommonMark: a backtick fence's info string has no backtick (it is inline code)
        if not m:
            mk = MARKER.match(line)
            if mk:
                pending = (mk.group(1), mk.group(2))
            elif line.strip():
                pending = None
                if HEADING.match(line):
                    last_runnable = None
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3)
        body: list[str] = []
        start = i + 1
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                break
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        block = Block(page, start, lang, "\n".join(body) + "\n", pending)
        pending = None
        if lang in RUN_LANGS:
            last_runnable = block
        elif lang == "text" and last_runnable is not None and last_runnable.output is None \
                and last_runnable.lang != "console":
            last_runnable.output, block.is_output = block, True
            last_runnable = None
        else:
            last_runnable = None
        blocks.append(block)
        i += 1
    return blocks


BLOCKS = [b for page in PAGES for b in parse(page, (REPO / page).read_text())]
RUNNABLE = [b for b in BLOCKS if b.lang in RUN_LANGS]


# --- what a block prints, and what the page says it prints ----------------------------------

REMARK = re.compile(r"\s{2,}#\s.*$")


def _pattern(expected: list[str]) -> re.Pattern[str]:
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*".join(re.escape(piece) for piece in line.split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def _lines(text: str) -> list[str]:
    out = [line.rstrip() for line in text.split("\n")]
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out


def output_matches(expected: str, actual: str, remarks: bool = True) -> bool:
    """``actual`` has exactly the lines of ``expected``, with ``...`` for anything."""
    want = [REMARK.sub("", line) if remarks else line for line in _lines(expected)]
    got = _lines(actual)
    return _pattern(want).fullmatch("".join(line + "\n" for line in got)) is not None


def print_claims(code: str) -> list[tuple[int, str]]:
    """(line, expected text) of each comment that ends a line calling ``print(``."""
    claims: list[tuple[int, str]] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return claims
    lines = code.split("\n")
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        row, col = tok.start
        before = lines[row - 1][:col]
        if "print(" not in before or not before.strip():
            continue
        claims.append((row, tok.string.lstrip("#").strip()))
    return claims


def claim_found(claim: str, printed: str) -> bool:
    """The claim, or its part before the first ``": "`` (the rest a remark), is whole lines of output."""
    head = claim.split(": ", 1)[0]
    return _found(claim, printed) or (head != claim and _found(head, printed))


def _found(claim: str, printed: str) -> bool:
    pattern = r"[\s\S]*?".join(re.escape(piece.strip()) for piece in claim.split("..."))
    return re.search(rf"(?m)^[ \t]*{pattern}[ \t]*$", printed) is not None


# --- shell commands -------------------------------------------------------------------------

def is_kpsdk_words(words: list[str]) -> bool:
    """``kpsdk ...``, ``python -m kpsdk...`` or ``eval "$(python -m kpsdk...)"`` (``.venv/bin/`` or not);
    or ``trace-cmd report FILE``: trace-cmd reading back the trace.dat kpsdk wrote (Debian's
    trace-cmd, installed on CI; the block requires it like QEMU's)."""
    if not words:
        return False
    if words[:2] == ["trace-cmd", "report"]:
        return True
    first = words[0].removeprefix(".venv/bin/")
    if first == "kpsdk":
        return True
    if first in ("python", "python3"):
        return len(words) > 2 and words[1] == "-m" and words[2].split(".")[0] == "kpsdk"
    if first == "eval" and len(words) == 2 and words[1].startswith("$(") and words[1].endswith(")"):
        return is_kpsdk_command(words[1][2:-1])
    return False


def commands(block: Block) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) of a console block; one entry for a sh block."""
    if block.lang == "sh":
        return [(block.text, [])]
    found: list[tuple[str, list[str]]] = []
    lines = block.text.rstrip("\n").split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("$ "):
            raise AssertionError(f"{block.where}: console line {lines[i]!r} is neither a `$ ` command nor its output")
        cmd = [lines[i][2:]]
        while cmd[-1].endswith("\\") and i + 1 < len(lines):
            i += 1
            cmd.append(lines[i])
        i += 1
        out = []
        while i < len(lines) and not lines[i].startswith("$ "):
            out.append(lines[i])
            i += 1
        found.append(("\n".join(cmd), out))
    return found


def simple_commands(script: str) -> list[str]:
    """The commands of a script: continued lines joined, comments and blank lines dropped."""
    joined = script.replace("\\\n", " ")
    out = []
    for line in joined.split("\n"):
        words = shlex.split(line, comments=True) if line.strip() else []
        if words:
            out.append(line.strip())
    return out


def is_kpsdk_command(command: str) -> bool:
    """Every command of a line (joined by ``&&``) is kpsdk's."""
    words = shlex.split(command, comments=True)
    parts: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    return all(is_kpsdk_words(part) for part in parts)


def needs(block: Block) -> set[str]:
    """What a block needs besides kpsdk: "qemu" (qemu-user/system and gdb), "kernel",
    "trace-cmd" (a block that reads kpsdk's trace.dat back with it)."""
    text = block.text
    found = set()
    if re.search(r"(^|&& |\$ )trace-cmd ", text, re.M):
        found.add("trace-cmd")
    if re.search(r"qemu-user:|qemu-system:|gdb://", text):
        found.add("qemu")
    if re.search(r"native:|pid:|--pid |gdbserver", text):
        found.add("gdbserver")
    if "qemu-system:" in text or "kpsdk.fixtures.kernel" in text or "debian_kernel" in text:
        found.add("kernel")
    return found


# --- running a page -------------------------------------------------------------------------

@dataclass
class PageRun:
    page: str
    workdir: Path
    cache: Path                  # the pages' KPSDK_CACHE (see pages())
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})
    done: dict[int, str] = field(default_factory=dict)   # block line -> "ok" | "failed" | "skipped"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PATH"] = f"{self.workdir / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONUNBUFFERED"] = "1"      # stdout and stderr interleave as on a terminal
        env["COLUMNS"] = "80"
        env.pop("FORCE_COLOR", None)
        env["NO_COLOR"] = "1"
        env["KPSDK_CACHE"] = str(self.cache)
        return env

    def run_python(self, block: Block) -> str:
        out = io.StringIO()
        code = compile(block.text, f"<{block.where}>", "exec")
        cwd, cache = Path.cwd(), os.environ.get("KPSDK_CACHE")
        os.chdir(self.workdir)
        os.environ["KPSDK_CACHE"] = str(self.cache)
        try:
            with contextlib.redirect_stdout(out):
                exec(code, self.namespace)
        finally:
            os.chdir(cwd)
            if cache is None:
                del os.environ["KPSDK_CACHE"]
            else:
                os.environ["KPSDK_CACHE"] = cache
        return out.getvalue()

    def run_shell(self, block: Block) -> None:
        if block.lang == "sh":
            proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=self.workdir,
                                  env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
            assert proc.returncode == 0, f"{block.where}: exit status {proc.returncode}\n{proc.stdout[-4000:]}"
            if block.output is not None:
                self.check(block, block.output.text, proc.stdout, block.output.marker)
            return
        cmds = commands(block)
        sep = "@@kpsdk-docs-{n} rc="
        script = "".join(f"{cmd}\necho \"{sep.format(n=n)}$?\"\n" for n, (cmd, _) in enumerate(cmds))
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=self.workdir, env=self.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=COMMAND_TIMEOUT, stdin=subprocess.DEVNULL, check=False)
        rest = proc.stdout
        for n, (cmd, expected) in enumerate(cmds):
            mark = re.search(re.escape(sep.format(n=n)) + r"(\d+)\n", rest)
            assert mark, f"{block.where}: `{cmd}` did not finish\n{rest[-4000:]}"
            printed, rc, rest = rest[:mark.start()], int(mark.group(1)), rest[mark.end():]
            fails = any(line.startswith("error:") for line in expected)
            if fails:
                assert rc != 0, f"{block.where}: `{cmd}` should fail, as the page shows; it exited 0\n{printed}"
            else:
                assert rc == 0, f"{block.where}: `{cmd}` exited {rc}\n{printed[-4000:]}"
            if expected:
                self.check(block, "\n".join(expected), printed, None, what=f"`{cmd}`")

    @staticmethod
    def check(block: Block, expected: str, printed: str, marker: tuple[str, str] | None, what: str = "") -> None:
        if marker is not None and marker[0] == "output not checked":
            return
        assert output_matches(expected, printed), (
            f"{block.where}: {what or 'the block'} printed what the page does not show.\n"
            f"--- page ---\n{expected.rstrip()}\n--- printed ---\n{printed.rstrip()}")

    def run(self, block: Block) -> None:
        if block.lang == "python":
            printed = self.run_python(block)
            if block.output is not None:   # the whole output is shown: comments are remarks
                self.check(block, block.output.text, printed, block.output.marker)
                return
            for row, claim in print_claims(block.text):
                assert claim_found(claim, printed), (
                    f"{block.where}: line {row} says it prints {claim!r}; the block printed:\n{printed.rstrip()}")
        else:
            self.run_shell(block)

    def close(self) -> None:
        """Close what the page left open: sessions, and system-wide uprobes (which would reach
        the sessions of later tests).  Closing a closed session does nothing; a uprobe the page
        unregistered already is skipped by ``unregister_uprobes``."""
        import kpsdk
        values = list(self.namespace.values())
        for value in values:
            if isinstance(value, kpsdk.Session):
                value.close()
        kpsdk.unregister_uprobes(v for v in values if isinstance(v, (kpsdk.Uprobe, kpsdk.Uretprobe)))
        self.namespace.clear()


def _share_kernels(shared: Path, cache: Path) -> None:
    """The kernels already in kpsdk's cache, linked (or copied) into the pages' ``cache`` and
    recorded there: kpsdk boots a kernel only from a tree its own cache recorded (a symbolic
    link to another cache is refused), and a page should not download one again."""
    trees = [(tree, checked_tree(tree)) for tree in sorted(shared.glob("*")) if tree.is_dir()]
    kept = os.environ.get("KPSDK_CACHE")
    os.environ["KPSDK_CACHE"] = str(cache)
    try:
        for tree, record in trees:
            if record is None:  # not as kpsdk recorded it: the page fetches its own
                continue
            copy = cache / "kernel" / tree.name
            copy.parent.mkdir(mode=0o700, exist_ok=True)
            shutil.copytree(tree, copy, copy_function=_link_or_copy)
            record_tree(copy, record.origin, record.meta)
    finally:
        if kept is None:
            del os.environ["KPSDK_CACHE"]
        else:
            os.environ["KPSDK_CACHE"] = kept


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PageRun]]:
    runs: dict[str, PageRun] = {}
    root = tmp_path_factory.mktemp("docs")
    # The pages build the default initramfs and cache decoded symbols in kpsdk's cache: theirs is
    # their own, so that another kpsdk run on this machine (another checkout's tests, whose
    # workload may differ) cannot change a guest between a page's two commands.  Only Debian's
    # kernel is shared: the kernel tests' fixture downloads it once into kpsdk's cache.
    cache = root / "cache"
    cache.mkdir(mode=0o700)
    _share_kernels(cache_root() / "kernel", cache)
    python = shlex.quote(sys.executable)   # wrappers, not links: a link to a venv's python leaves the venv
    wrappers = {"python": f'exec {python} "$@"', "python3": f'exec {python} "$@"',
                "kpsdk": f'exec {python} -m kpsdk "$@"'}
    for page in PAGES:
        work = root / page.replace("/", "_").removesuffix(".md")
        (work / ".venv" / "bin").mkdir(parents=True)
        for name in ("kpsdk", "examples"):
            (work / name).symlink_to(REPO / name)
        for name, body in wrappers.items():
            script = work / ".venv" / "bin" / name
            script.write_text(f"#!/bin/sh\n{body}\n")
            script.chmod(0o755)
        runs[page] = PageRun(page, work, cache)
    yield runs
    for run in runs.values():
        run.close()


def _id(block: Block) -> str:
    return f"{block.where}-{block.lang}"


@pytest.mark.parametrize("block", RUNNABLE, ids=_id)
def test_block(block: Block, pages: dict[str, PageRun], request: pytest.FixtureRequest) -> None:
    """One block of a page, after the page's earlier blocks (run first if they did not yet, as
    when ``-k`` picks one).  A block runs even when an earlier one failed: it may not need it."""
    run = pages[block.page]
    for earlier in (b for b in RUNNABLE if b.page == block.page and b.line < block.line):
        if earlier.line not in run.done:
            _run_one(earlier, run, request, quiet=True)
    failed = [f"{block.page}:{line}" for line, state in run.done.items() if state == "failed"]
    error: Exception | None = None
    try:
        _run_one(block, run, request, quiet=False)
    except Exception as e:
        if not failed:
            raise
        error = e
    if error is not None:   # outside the except: the report shows this block's error only once
        pytest.fail(f"{error}\n(earlier blocks of this page failed too: {', '.join(failed)})")


def _run_one(block: Block, run: PageRun, request: pytest.FixtureRequest, quiet: bool) -> None:
    if block.marker is not None and block.marker[0] == "not run":
        run.done[block.line] = "skipped"
        if not quiet:
            pytest.skip(f"not run: {block.marker[1]} ({block.where})")
        return
    need = needs(block)
    try:
        if "trace-cmd" in need:
            require_tool("trace-cmd", "trace-cmd")
        if "qemu" in need:
            require_tool("gdb-multiarch", "gdb-multiarch")
            require_tool("qemu-x86_64", "qemu-user")
        if "gdbserver" in need:
            require_tool("gdb-multiarch", "gdb-multiarch")
            require_tool("gdbserver", "gdbserver")
        if "kernel" in need:
            require_tool("qemu-system-x86_64", "qemu-system-x86")
            require_tool("busybox", "busybox-static")
            request.getfixturevalue("debian_kernel")
    except (pytest.skip.Exception, pytest.fail.Exception) as missing:
        # a tool missing: skipped here, failed on CI; an earlier block run for a later one is
        # reported by its own item, not by the later one (which may not need the tool)
        run.done[block.line] = "skipped" if isinstance(missing, pytest.skip.Exception) else "failed"
        if quiet:
            return
        raise
    try:
        run.run(block)
    except BaseException:
        run.done[block.line] = "failed"
        if quiet:
            return
        raise
    run.done[block.line] = "ok"


# --- the pages themselves -------------------------------------------------------------------

def test_every_block_says_what_it_is() -> None:
    bare = [b.where for b in BLOCKS if not b.lang]
    assert not bare, f"fenced blocks without a language (text, python, sh, console...): {bare}"


def test_shell_blocks_run_kpsdk_or_say_why_not() -> None:
    """A sh/console block that is not all kpsdk commands carries a visible not-run marker."""
    unmarked = []
    for block in RUNNABLE:
        if block.lang == "python" or (block.marker and block.marker[0] == "not run"):
            continue
        for cmd, _ in commands(block):
            for simple in simple_commands(cmd):
                if not is_kpsdk_command(simple):
                    unmarked.append(f"{block.where}: {simple}")
    assert not unmarked, "not kpsdk commands; mark the block <!-- not run: REASON -->:\n" + "\n".join(unmarked)


def test_not_run_blocks_are_counted() -> None:
    """Every not-run block is listed here by page: adding one is a change to this test too."""
    found: dict[str, int] = {}
    reasons = []
    for b in BLOCKS:
        if b.marker is not None and b.marker[0] == "not run":
            assert b.lang in RUN_LANGS, f"{b.where}: a not-run marker before a {b.lang or 'bare'} block"
            assert b.marker[1], f"{b.where}: a not-run marker needs its reason"
            found[b.page] = found.get(b.page, 0) + 1
            reasons.append(f"{b.where}: {b.marker[1]}")
    print(f"{len(RUNNABLE)} runnable blocks in {len(PAGES)} pages, {sum(found.values())} not run:")
    print("\n".join(reasons))
    assert found == NOT_RUN


def test_pages_are_in_the_site_nav() -> None:
    """mkdocs.yml's nav names every page of docs/, and only pages that exist."""
    nav = set(re.findall(r"([\w/.-]+\.md)\s*$", (REPO / "mkdocs.yml").read_text(), re.M))
    pages = {p.removeprefix("docs/") for p in PAGES if p.startswith("docs/")}
    assert nav == pages, f"not in the nav: {sorted(pages - nav)}; in the nav, no page: {sorted(nav - pages)}"


# --- the API reference ----------------------------------------------------------------------

DIRECTIVE = re.compile(r"^:::\s+(\S+)\s*$")


def reference_entries() -> dict[str, bool]:
    """The ``::: path`` entries of docs/reference/, each with whether its members are shown
    (an entry with ``members: false`` in its options shows the object's docstring only)."""
    entries: dict[str, bool] = {}
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        lines = page.read_text().split("\n")
        for i, line in enumerate(lines):
            m = DIRECTIVE.match(line)
            if not m:
                continue
            options = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith(" "):
                    break
                options.append(nxt.strip())
            entries[m.group(1)] = "members: false" not in options
    return entries


def resolve_path(path: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes."""
    import importlib
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"{path}: no such module")


def test_reference_documents_every_public_name() -> None:
    """Each name ``kpsdk`` exports has an entry in docs/reference/: its own (``::: kpsdk.NAME``
    or where it is defined), or its module's with the members shown.  A name added to
    ``kpsdk.__all__`` without one fails here, before a reader misses it."""
    import types

    import kpsdk
    entries = reference_entries()
    shown: dict[int, str] = {}         # id of a documented object (not a number) -> its entry
    whole_modules = set()
    for path, members in entries.items():
        obj = resolve_path(path)       # mkdocs build --strict fails on a bad path too; this says which
        if isinstance(obj, types.ModuleType):
            if members:
                whole_modules.add(obj.__name__)
        elif not isinstance(obj, int | str | float):
            shown[id(obj)] = path
    missing = []
    for name in kpsdk.__all__:
        obj = getattr(kpsdk, name)
        if f"kpsdk.{name}" in entries or id(obj) in shown:
            continue
        if isinstance(obj, type | types.FunctionType) and obj.__module__ in whole_modules:
            continue
        missing.append(name)
    assert not missing, f"exported by kpsdk, not in docs/reference/ (add a `::: path` entry): {missing}"


# --- the checker's own rules ----------------------------------------------------------------

def test_output_rules() -> None:
    assert output_matches("a\n...\nd", "a\nb\nc\nd\n")
    assert output_matches("a\n...\nb", "a\nb")
    assert output_matches("x=... y=2", "x=1 z y=2")
    assert output_matches("add=5    # a remark", "add=5")
    assert not output_matches("a\nb", "a\nb\nc")
    assert not output_matches("a\nb", "a\nc")
    assert claim_found("fact 5 ... fact 1", "x\nfact 5\nfact 4\nfact 1\n")
    assert claim_found("42", "42\n") and not claim_found("4", "42\n")
    assert claim_found("hits: 1", "hits: 1\n") and claim_found("1: a remark", "1\n")
    assert not claim_found("the program's output", "add=5\n")
    assert print_claims("x = 1  # no\nprint(x)  # 1: a remark\nprint('#')\n") == [(2, "1: a remark")]
    assert is_kpsdk_command(".venv/bin/kpsdk trace x86_64 -e 'p add'")
    assert is_kpsdk_command('eval "$(.venv/bin/python -m kpsdk.fixtures.kernel --shell)"')
    assert not is_kpsdk_command("python3 -m venv .venv && .venv/bin/pip install -q .")
    blocks = parse("p.md", "```python\nprint(1)\n```\n\nIt prints:\n\n```text\n1\n```\n# H\n\n```text\nx\n```\n")
    assert blocks[0].output is blocks[1] and blocks[2].is_output is False
    assert parse("p.md", "```` ```sh ```` is inline code\n") == []


def test_docstring_conversions() -> None:
    """tools/griffe_rst.py, the griffe extension that shows the docstrings' rST as Markdown."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import griffe_rst
    finally:
        sys.path.remove(str(REPO / "tools"))
    assert griffe_rst.roles(":class:`~kpsdk.arch.Arch`") == \
        '<autoref identifier="kpsdk.arch.Arch" optional><code>Arch</code></autoref>'
    assert "kpsdk.session.Session.run" in griffe_rst.roles(":meth:`Session.run`",
                                                           lambda n: "kpsdk.session." + n)
    assert griffe_rst.literal_blocks("Usage::\n\n    x") == "Usage:\n\n    x"
    assert griffe_rst.literal_blocks(">>> 1 + 1\n2") == "```pycon\n>>> 1 + 1\n```\n\n2"
    table = "=====  =====\n``a``  one\n       more\n``b``  two\n=====  =====\n"
    assert griffe_rst.simple_tables(table).split("\n")[:4] == \
        ["| ``a`` | one more |", "|---|---|", "| ``b`` | two |", ""]
    assert griffe_rst.comment_doc(["#: the doc", "#: more", "x = 1"], 3) == "the doc\nmore"
