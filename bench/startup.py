"""Start-up benchmark: ``kpsdk --help`` and ``import kpsdk`` against their references.

Four commands, each a fresh interpreter, run in turns ``--runs`` times (the
median is reported, with the spread), so a machine whose load changes during
the run changes every row alike:

- ``kpsdk --help`` (the console script), goal <= 150 ms: the page replayed
  from its record (``kpsdk/cli/helpcache.py``), as every run after the first
  prints it; and the page made by typer (``KPSDK_HELP_CACHE=0``), as the first
  run after a change makes it;
- ``python -c 'import kpsdk'`` against ``python -c 'import unicorn, capstone'``,
  goal <= 1.2x;
- ``python -c pass``: the interpreter's own start-up, for scale.

Bytecode is cached (``PYTHONPYCACHEPREFIX`` in a private directory, filled
by one untimed run of each) whatever ``PYTHONDONTWRITEBYTECODE`` says: a
user's installed kpsdk has its ``.pyc`` files, and without them every run
would time the compiler.

Run: ``python bench/startup.py [--runs N] [--out FILE]`` (``nox -s bench`` runs it too).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def commands() -> dict[str, list[str]]:
    """The timed command lines, by row name."""
    script = shutil.which("kpsdk", path=str(Path(sys.executable).parent)) or shutil.which("kpsdk")
    help_cmd = [script, "--help"] if script else [sys.executable, "-m", "kpsdk.cli", "--help"]
    return {
        "kpsdk --help": help_cmd,
        "kpsdk --help (page made by typer)": ["env", "KPSDK_HELP_CACHE=0", *help_cmd],
        "import kpsdk": [sys.executable, "-c", "import kpsdk"],
        "import unicorn, capstone": [sys.executable, "-c", "import unicorn, capstone"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }


def measure(runs: int) -> dict[str, list[float]]:
    """Wall-clock seconds of each command, ``runs`` times, in turns."""
    cmds = commands()
    with tempfile.TemporaryDirectory(prefix="kpsdk-startup-") as cache:
        # the help's record goes to a cache of the run's own, filled by the untimed run
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "KPSDK_CACHE": os.path.join(cache, "kpsdk")}
        env.pop("KPSDK_HELP_CACHE", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for cmd in cmds.values():  # fill the bytecode cache
            subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, cmd in cmds.items():
                start = time.perf_counter()
                subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, check=True)
                times[name].append(time.perf_counter() - start)
    return times


def table(times: dict[str, list[float]], runs: int) -> list[str]:
    """Markdown rows: median and spread in ms, and the two goals."""
    med = {name: statistics.median(v) * 1000 for name, v in times.items()}
    ratio = med["import kpsdk"] / med["import unicorn, capstone"]
    scale = med["python -c pass"]  # the interpreter's own start-up: what load does to every row
    goals = {"kpsdk --help": f"<= 150 ms: {'met' if med['kpsdk --help'] <= 150 else 'NOT met'} "
                             f"({med['kpsdk --help'] / scale:.2f}x `python -c pass`)",
             "kpsdk --help (page made by typer)": f"{med['kpsdk --help (page made by typer)'] / scale:.2f}x "
                                                  "`python -c pass`",
             "import kpsdk": f"{ratio:.2f}x `import unicorn, capstone`; <= 1.2x: "
                             f"{'met' if ratio <= 1.2 else 'NOT met'}"}
    import platform

    lines = [f"Start-up, {time.strftime('%Y-%m-%d')}, {platform.node()}: wall-clock ms, median of {runs} "
             "interleaved runs (min-max), bytecode cached", "",
             "| command | ms | goal |", "|---|---|---|"]
    for name, v in times.items():
        spread = f"{min(v) * 1000:.0f}-{max(v) * 1000:.0f}"
        lines.append(f"| `{name}` | {med[name]:.0f} ({spread}) | {goals.get(name, '')} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", type=Path, help="also write the table as markdown here")
    args = ap.parse_args(argv)
    lines = table(measure(args.runs), args.runs)
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
