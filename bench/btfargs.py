"""BTF benchmark: what BTF fetch arguments cost before a kernel boots.

On Debian 13's amd64 kernel (``python -m kpsdk.fixtures.kernel --arch x86_64 --release 6.12``),
each round times, in a fresh process each (as ``kpsdk trace`` meets them):

- **cold**: the image's BTF with an empty cache: unpack the vmlinuz, find ``.BTF``, index its
  types (:func:`kpsdk.kernel.image_btf.kernel_btf`), and write the raw section to the cache;
- **cached**: the same with the raw section in kpsdk's cache (read and index only);
- **parse**: one definition with BTF arguments (``$arg*``, a ``->`` chain, ``:string``), once
  the BTF is loaded (median of 200 parses in that process).

The rounds alternate cold and cached; the table gives the median and the range, with the
host's load average before and after (wall time on a shared machine).

Run: ``python bench/btfargs.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from kpsdk.fixtures import kernel

DEFINITION = "p:e vfs_open $arg* n=path->dentry->d_name.name:string"
CHILD = r"""
import json, statistics, sys, time
import kpsdk
from kpsdk.kernel.image_btf import kernel_btf
from kpsdk.trace.btfargs import BtfArgs
from kpsdk.trace.grammar import Parser
arch = kpsdk.get_registry().arch("x86_64")
start = time.perf_counter()
btf = kernel_btf(sys.argv[1], arch)
load = time.perf_counter() - start
parser = Parser(arch, kernel=(6, 12), btf=BtfArgs(btf, 64))
times = []
for _ in range(200):
    t = time.perf_counter()
    parser.parse(sys.argv[2])
    times.append(time.perf_counter() - t)
print(json.dumps({"load": load, "parse": statistics.median(times)}))
"""


def measure(image: str, cache: str) -> dict[str, float]:
    env = dict(os.environ, KPSDK_CACHE=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, image, DEFINITION], env=env, capture_output=True,
                         text=True, check=True, timeout=600).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    image = str(kernel.fetch_arch_kernel("x86_64", release="6.12"))
    print(f"load average before: {os.getloadavg()}")
    cold, cached, parse = [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="kpsdk-btf-bench-") as cache:
            first = measure(image, cache)
            second = measure(image, cache)
        cold.append(first["load"])
        cached.append(second["load"])
        parse += [first["parse"], second["parse"]]
    print(f"load average after:  {os.getloadavg()}")
    for name, values, unit, scale in (("cold", cold, "s", 1), ("cached", cached, "s", 1),
                                      ("parse", parse, "us", 1e6)):
        print(f"{name:7} median {statistics.median(values) * scale:9.3f} {unit}  "
              f"range {min(values) * scale:.3f}-{max(values) * scale:.3f} {unit}  (n={len(values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
