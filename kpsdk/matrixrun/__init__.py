"""``kpsdk.matrix`` and ``kpsdk matrix``: one probe script over many targets (``docs/matrix.md``).

One module per job:

- :mod:`~kpsdk.matrixrun.targets`: targets (programs, globs, files of targets, one program x
  many inputs, kernels of the fixtures) and their digests;
- :mod:`~kpsdk.matrixrun.script`: the script, trace definitions or a Python function;
- :mod:`~kpsdk.matrixrun.child`: one target's run, in its own process;
- :mod:`~kpsdk.matrixrun.forkhost`: the processes that fork one child per target and stop it at its limit;
- :mod:`~kpsdk.matrixrun.engines`: the local pool and Dask;
- :mod:`~kpsdk.matrixrun.resultcache`: results kept between runs;
- :mod:`~kpsdk.matrixrun.merge` and :mod:`~kpsdk.matrixrun.hists`: the merged outputs;
- :mod:`~kpsdk.matrixrun.progress`: the rows, progress bar and summary table;
- :mod:`~kpsdk.matrixrun.api`: :func:`kpsdk.matrix` and :class:`MatrixResult`.

The package is named ``matrixrun`` so that ``kpsdk.matrix`` stays the function.  Nothing
is imported here until a name is used: the CLI imports this package to build its help.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kpsdk.matrixrun.api import MatrixResult, matrix
    from kpsdk.matrixrun.engines import DaskEngine, LocalPool
    from kpsdk.matrixrun.result import TargetResult
    from kpsdk.matrixrun.script import FunctionScript, TraceScript
    from kpsdk.matrixrun.targets import KernelChoice, MatrixTarget, inputs, kernels, programs, targets_file

_EXPORTS = {
    "matrix": "kpsdk.matrixrun.api", "MatrixResult": "kpsdk.matrixrun.api",
    "LocalPool": "kpsdk.matrixrun.engines", "DaskEngine": "kpsdk.matrixrun.engines",
    "TargetResult": "kpsdk.matrixrun.result",
    "TraceScript": "kpsdk.matrixrun.script", "FunctionScript": "kpsdk.matrixrun.script",
    **dict.fromkeys(("MatrixTarget", "KernelChoice", "programs", "inputs", "kernels", "targets_file"),
                    "kpsdk.matrixrun.targets"),
}

__all__ = ["DaskEngine", "FunctionScript", "KernelChoice", "LocalPool", "MatrixResult", "MatrixTarget", "TargetResult",
           "TraceScript", "inputs", "kernels", "matrix", "programs", "targets_file"]


def __getattr__(name: str) -> Any:
    """The package's names, each imported on first use."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
