"""Out-of-tree plugins installed the way a user installs them, for the tests that use them.

An example package is really installed with pip (into a temporary ``--target``
directory, from a copy of its source), never imported from the source tree,
and everything runs in a fresh interpreter whose ``PYTHONPATH`` holds that
directory: the plugin is found the way a user's would be, through its
``*.dist-info/entry_points.txt`` in the ``kpsdk`` group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]


def install(example: Path, root: Path) -> Path:
    """``example`` installed by pip into ``root/site``, from a copy of its source."""
    target = root / "site"
    pip = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
           "--target", str(target)]
    # Without build isolation first (works offline where the environment's setuptools
    # is >= 77, as the examples ask); then with isolation, where pip fetches
    # setuptools from its configured index.
    attempts = [[*pip, "--no-build-isolation"], pip]
    logs = []
    for n, cmd in enumerate(attempts):
        src = root / f"src{n}"  # a copy: the build must not write into the repository
        shutil.copytree(example, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        proc = subprocess.run([*cmd, str(src)], capture_output=True, text=True, timeout=900)
        if proc.returncode == 0:
            break
        shutil.rmtree(target, ignore_errors=True)
        logs.append(f"$ {' '.join(cmd)} {src}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    else:
        pytest.fail(f"pip could not install {example.name}:\n" + "\n".join(logs))
    return target


def _env(site: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KPSDK_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env["COLUMNS"] = "200"  # keep rich's help on one line per command
    env.update(extra)
    return env


def run(site: Path, args: list[str], *, check: bool = True, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    """``sys.executable ARGS`` in the site's environment (plus ``env``), from a neutral directory."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=site.parent, env=_env(site, env or {}))
    if check and proc.returncode != 0:
        pytest.fail(f"{args[:3]} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def run_py(site: Path, code: str, env: dict[str, str] | None = None) -> Any:
    """Run Python code; it prints one JSON value as its last line, which is returned."""
    proc = run(site, ["-c", textwrap.dedent(code)], env=env)
    return json.loads(proc.stdout.strip().splitlines()[-1])


