"""Build bench/spin/bin/spin-<arch>.elf with the fixtures' compilers and flags.

Usage: python3 bench/spin/build.py   (needs the cross gccs of kpsdk.fixtures.build)
"""

from __future__ import annotations

import pathlib
import subprocess

from kpsdk.fixtures.build import COMMON_FLAGS, FIXTURES, SRC_DIR, find_compiler

HERE = pathlib.Path(__file__).resolve().parent


def build(arch: str) -> pathlib.Path:
    out = HERE / "bin" / f"spin-{arch}.elf"
    out.parent.mkdir(exist_ok=True)
    flags = [f for f in COMMON_FLAGS if not f.startswith("-ffile-prefix-map")]
    cmd = [find_compiler(arch), *flags, *FIXTURES[arch].cflags, f"-I{SRC_DIR}", "-o", str(out), "spin.c"]
    subprocess.run(cmd, cwd=HERE, check=True)
    return out


if __name__ == "__main__":
    for arch in FIXTURES:
        print(build(arch))
