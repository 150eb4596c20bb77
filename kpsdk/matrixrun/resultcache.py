"""Results kept between runs: a target whose result is cached is not run again.

A result is keyed by :func:`key`: kpsdk's version, the target's digest
(:func:`kpsdk.matrixrun.targets.digest`: its spec, options and the contents of its files)
and the script's (:meth:`TraceScript.digest`, :meth:`FunctionScript.digest`).  Only ``ok``
results are kept: a failure is run again next time.  The files live in
``<cache_root()>/matrix/`` under :mod:`kpsdk.cache`'s rules (a private directory, files of this
user's only, written through a temporary file and renamed), as pickles, since they hold
the records as the writers want them; a file that does not unpickle to a result is a
miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

from kpsdk.cache import private_dir, read_private, write_private
from kpsdk.matrixrun.result import TargetResult

#: the cache's directory under kpsdk's cache root
DIRECTORY = "matrix"
#: the largest result read back
LIMIT = 1 << 31
#: the layout of what is stored (a new one is a miss for the old files)
FORMAT = 1


def key(target_digest: str, script_digest: str) -> str:
    """A result's cache key."""
    import kpsdk

    body = {"format": FORMAT, "kpsdk": kpsdk.__version__, "target": target_digest, "script": script_digest}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


class ResultCache:
    """Results by key, in kpsdk's cache directory (nothing is kept when that is unsafe)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory if directory is not None else private_dir(DIRECTORY)

    def get(self, cache_key: str, index: int, name: str) -> TargetResult | None:
        """The cached result, renumbered and renamed for this matrix; None: not cached."""
        if self.directory is None or not cache_key:
            return None
        data = read_private(self.directory, f"{cache_key}.pickle", LIMIT)
        if data is None:
            return None
        try:
            result = pickle.loads(data)
        except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
            return None
        if not isinstance(result, TargetResult) or not result.ok:
            return None
        result.index, result.name, result.cached = index, name, True
        return result

    def put(self, cache_key: str, result: TargetResult) -> None:
        """Keep ``result`` when it is ``ok`` (and not itself from the cache)."""
        if self.directory is None or not cache_key or not result.ok or result.cached:
            return
        write_private(self.directory, f"{cache_key}.pickle", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
