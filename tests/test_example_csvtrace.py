"""End to end: the out-of-tree output format ``examples/kpsdk-csvtrace``, installed by pip
and used from a fresh interpreter (see ``plugin_site.py``): ``kpsdk trace --output csv``
holds the same records as kpsdk's own ``text`` lines (``--no-prefix``) of the same run."""

from __future__ import annotations

import csv
import importlib.util
import io
import re
from pathlib import Path

import pytest

from tests.plugin_site import REPO, install, run, run_py

EXAMPLE = REPO / "examples" / "kpsdk-csvtrace"
EVENTS = ["-e", "p:add add a=%di:s32 b=%si:s32", "-e", "r:sub sub ret=$retval:s32",
          "-e", "p:put put name=+0(%di):string v=%si:s64"]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("kpsdk.cli") is None, reason="no kpsdk.cli")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(EXAMPLE, tmp_path_factory.mktemp("kpsdk-csvtrace"))


def trace(site: Path, *args: str, check: bool = True) -> str:
    return run(site, ["-m", "kpsdk.cli", "trace", "x86_64", *EVENTS, *args], check=check).stdout


def test_installed_from_its_distribution(site: Path) -> None:
    dist_infos = list(site.glob("kpsdk_csvtrace-*.dist-info"))
    assert len(dist_infos) == 1
    entry_points = (dist_infos[0] / "entry_points.txt").read_text()
    assert re.search(r"^\[kpsdk\]\s*^csvtrace\s*=\s*kpsdk_csvtrace\s*$", entry_points, re.M), entry_points
    file, formats = run_py(site, """
        import json, kpsdk, kpsdk_csvtrace
        print(json.dumps([kpsdk_csvtrace.__file__, sorted(kpsdk.get_registry().trace_formats)]))
    """)
    assert Path(file).is_relative_to(site)
    assert formats == ["csv", "jsonl", "perfetto", "text", "trace-dat"]


def test_csv_rows_are_the_text_lines_of_the_same_run(site: Path) -> None:
    text = trace(site, "--no-prefix").splitlines()
    rows = list(csv.reader(io.StringIO(trace(site, "--output", "csv"))))
    assert rows[0] == ["event", "kind", "time", "where"]
    assert len(rows) - 1 == len(text) > 3
    for row, line in zip(rows[1:], text, strict=True):
        event, kind, _time, where, *cells = row
        assert line == f"{event}: ({where})" + "".join(" " + c for c in cells)
        assert kind == ("r" if " <- " in where else "p")
    times = [float(r[2]) for r in rows[1:]]
    assert times == sorted(times)


def test_listed_by_kpsdk_plugins(site: Path) -> None:
    out = run(site, ["-m", "kpsdk.cli", "plugins"], env={"COLUMNS": "200"}).stdout
    section = out.split("trace output formats", 1)[1].split("architectures", 1)[0]
    assert re.search(r"csv\s.*one CSV row a record", section)


def test_blocked_or_not_autoloaded_it_is_not_a_format(site: Path) -> None:
    for args, env in ((["-p", "no:csvtrace"], None), ([], {"KPSDK_DISABLE_PLUGIN_AUTOLOAD": "1"})):
        proc = run(site, ["-m", "kpsdk.cli", *args, "trace", "x86_64", *EVENTS, "--output", "csv"],
                   check=False, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "'csv': want one of jsonl, perfetto, text, trace-dat" in proc.stderr
    loaded = run(site, ["-m", "kpsdk.cli", "-p", "csvtrace", "trace", "x86_64", *EVENTS, "--output", "csv"],
                 env={"KPSDK_DISABLE_PLUGIN_AUTOLOAD": "1"}).stdout
    assert loaded.splitlines()[0] == "event,kind,time,where"


def test_python_api(site: Path) -> None:
    """make_writer finds the plugin's format; the rows are the records Session.trace made."""
    rows, records = run_py(site, """
        import csv, io, json, kpsdk
        from kpsdk.fixtures import path
        from kpsdk.trace.output import make_writer
        s = kpsdk.open("elf:" + str(path("x86_64")))
        t = s.trace(["p:add add a=%di:s32 b=%si:s32"])
        s.run()
        out = io.StringIO()
        w = make_writer("csv", out)
        for r in t.records:
            w.write(r)
        w.close()
        print(json.dumps([list(csv.reader(io.StringIO(out.getvalue()))),
                          [[r.event, r.where, r.fields] for r in t.records]]))
    """)
    assert len(rows) == len(records) + 1 and records
    for row, (event, where, fields) in zip(rows[1:], records, strict=True):
        assert row[0] == event and row[3] == where
        assert row[4:] == [f"{k}={v}" for k, v in fields.items()]
