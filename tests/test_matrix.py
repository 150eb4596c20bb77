"""``kpsdk.matrix``: one script over many targets, on the local pool and on a Dask cluster.

- A corpus of Debian's own programs (this machine's, run by the Linux layer in Unicorn with
  sysroot ``/``), each with a uprobe on libc's ``malloc`` and its return probe: the merged
  ``jsonl`` of the whole corpus on the pool (2 workers) and on a local Dask cluster (a
  scheduler and two worker processes this test starts, on loopback) equals the
  concatenation of each target's run alone through the same API, record for record (the
  times aside: each run's own clock), whatever the number of workers.
- Fault isolation: a target that hangs past its limit (SIGTERM stops it; one blocking
  SIGTERM is killed), one whose process is SIGKILLed, one whose worker is SIGKILLed, one
  whose script raises, one with a bad path: each reported with its status and error, the
  others complete, on both engines.
- The cache, the merged outputs (perfetto, trace-dat per target with its index, hist
  tables merged per key), the target builders and the CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kpsdk
from kpsdk.matrixrun import FunctionScript, LocalPool, MatrixTarget, TraceScript, inputs, kernels, programs
from kpsdk.matrixrun.targets import check_names, targets_file
from tests.matrix_scripts import LIBC_MALLOC, TEXT, corpus_programs

REPO = Path(__file__).resolve().parent.parent
#: the clock fields: each run's own, so they differ between two runs of one target
CLOCK_KEYS = ("time", "entry_time", "duration")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("matrix") / "in.txt"
    path.write_text(TEXT)
    return path


@pytest.fixture(scope="module")
def corpus(data: Path) -> list[MatrixTarget]:
    targets = [MatrixTarget(f"elf:{prog}", args=tuple(args), sysroot="/") for prog, args in corpus_programs(data)]
    targets.append(MatrixTarget("elf:/usr/bin/tr", args=("a-z", "A-Z"), stdin=str(data), sysroot="/"))
    missing = [t.spec for t in targets if not Path(t.spec[4:]).exists()]
    if missing:
        pytest.skip(f"not a Debian machine: {missing} missing")
    assert len(targets) >= 20
    return targets


def normalized(jsonl: str) -> list[dict[str, Any]]:
    """The lines of a merged jsonl without the clock fields."""
    out = []
    for line in jsonl.splitlines():
        obj = json.loads(line)
        for key in CLOCK_KEYS:
            obj.pop(key, None)
        out.append(obj)
    return out


@pytest.fixture(scope="module")
def singles(corpus: list[MatrixTarget]) -> list[dict[str, Any]]:
    """Each corpus target run alone through kpsdk.matrix (one worker, its hosts shared)."""
    lines: list[dict[str, Any]] = []
    with LocalPool(1) as pool:
        for target in corpus:
            alone = kpsdk.matrix(list(LIBC_MALLOC), [target], engine=pool, cache=False)
            assert alone[0].status == "ok", alone[0].error
            lines += normalized(alone.jsonl())
    return lines


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Dask scheduler and two worker processes on loopback; the scheduler's address."""
    pytest.importorskip("distributed")
    directory = tmp_path_factory.mktemp("dask")
    file = directory / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error"}
    common = {"cwd": directory, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", "0", "--no-dashboard", "--scheduler-file", str(file)], **common)
    workers = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file", str(file),
                                "--nworkers", "2", "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                                "--death-timeout", "60"], **common)
    try:
        deadline = time.monotonic() + 60
        while not file.exists():
            assert scheduler.poll() is None and time.monotonic() < deadline, "the Dask scheduler did not start"
            time.sleep(0.2)
        address = json.loads(file.read_text())["address"]
        assert address.startswith("tcp://127.0.0.1:")
        import distributed

        with distributed.Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for proc in (workers, scheduler):
            proc.send_signal(signal.SIGINT)
        for proc in (workers, scheduler):
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


# -- the corpus: merged output equals the single runs -------------------------------------------


def test_pool_corpus_equals_single_runs(corpus: list[MatrixTarget], singles: list[dict[str, Any]]) -> None:
    seen: list[str] = []
    result = kpsdk.matrix(list(LIBC_MALLOC), corpus, workers=2, cache=False, on_result=lambda r: seen.append(r.name))
    assert [r.status for r in result] == ["ok"] * len(corpus), [(r.name, r.error) for r in result.failed]
    assert sorted(seen) == sorted(t.name for t in corpus)  # each reported once, as it completed
    merged = normalized(result.jsonl())
    assert merged == singles
    # every record line names its target; the targets in the matrix's order
    assert all("target" in line for line in merged)
    order = [line["target"] for line in merged if "schema" in line]
    assert order == [t.name for t in corpus]
    assert sum(len(r.records) for r in result) > 100
    assert {line["event"] for line in merged if "event" in line} == {"m", "mr"}


def test_dask_corpus_equals_single_runs(corpus: list[MatrixTarget], singles: list[dict[str, Any]],
                                        dask_cluster: str) -> None:
    result = kpsdk.matrix(list(LIBC_MALLOC), corpus, scheduler=dask_cluster, cache=False)
    assert result.workers == 2
    assert [r.status for r in result] == ["ok"] * len(corpus), [(r.name, r.error) for r in result.failed]
    assert normalized(result.jsonl()) == singles
    assert len({r.worker for r in result}) >= 2  # two worker processes, each forking the targets it took


def test_a_function_script_gives_the_trace_script_s_records(corpus: list[MatrixTarget],
                                                           singles: list[dict[str, Any]]) -> None:
    result = kpsdk.matrix(FunctionScript("tests.matrix_scripts:traced", str(REPO)), corpus[:6], workers=2,
                          cache=False)
    head = [line for line in singles if line["target"] in {t.name for t in corpus[:6]}]
    assert normalized(result.jsonl()) == head


# -- fault isolation --------------------------------------------------------------------------------


def _faulty_targets(data: Path) -> list[MatrixTarget]:
    good = [MatrixTarget("elf:/bin/echo", args=("hi",), sysroot="/"),
            MatrixTarget("elf:/usr/bin/sort", args=(str(data),), sysroot="/")]
    odd = [MatrixTarget("elf:/bin/true", sysroot="/", name=name, limit=4)
           for name in ("hang", "stubborn", "sigkill", "raises")]
    bad = MatrixTarget("elf:/no/such/program", sysroot="/")
    return [good[0], *odd[:2], bad, *odd[2:], good[1]]


def _check_faults(result: Any) -> None:
    by_name = {r.name: r for r in result}
    assert by_name["/bin/echo hi"].status == "ok" and by_name["/bin/echo hi"].records
    assert [r.status for r in result if r.name.startswith("/usr/bin/sort")] == ["ok"]
    assert by_name["hang"].status == "timeout" and "limit of 4 s" in by_name["hang"].error
    assert by_name["stubborn"].status == "timeout" and "killed" in by_name["stubborn"].error
    assert by_name["sigkill"].status == "crashed" and "SIGKILL" in by_name["sigkill"].error
    assert by_name["raises"].status == "error"
    assert by_name["raises"].error == "ZeroDivisionError: the script divided by zero"
    bad = by_name["/no/such/program"]
    assert bad.status == "error" and bad.error.startswith("TargetError: cannot read /no/such/program")
    with pytest.raises(kpsdk.MatrixError, match="5 of 7 targets"):
        result.check()


def test_fault_isolation_on_the_pool(data: Path) -> None:
    script = FunctionScript("tests.matrix_scripts:faulty", str(REPO))
    start = time.monotonic()
    with LocalPool(2, grace=2) as pool:
        result = kpsdk.matrix(script, _faulty_targets(data), engine=pool, cache=False)
        _check_faults(result)
        # the worker itself killed: that target crashes, the pool's next target runs on a new one
        after = kpsdk.matrix(script, [MatrixTarget("elf:/bin/true", sysroot="/", name="host-sigkill", limit=30),
                                      MatrixTarget("elf:/bin/echo", args=("again",), sysroot="/")],
                             engine=pool, cache=False)
    assert after[0].status == "crashed" and "worker process died (SIGKILL)" in after[0].error
    assert after[1].status == "ok"
    assert time.monotonic() - start < 120  # the limits, not the hangs, decided


def test_fault_isolation_on_dask(data: Path, dask_cluster: str) -> None:
    import distributed

    from kpsdk.matrixrun.engines import DaskEngine

    with distributed.Client(dask_cluster, timeout=30) as client:
        engine = DaskEngine(client, grace=2)
        result = kpsdk.matrix(FunctionScript("tests.matrix_scripts:faulty", str(REPO)), _faulty_targets(data),
                              engine=engine, cache=False)
        _check_faults(result)
        assert len(client.nthreads()) == 2  # no Dask worker died


def test_a_run_past_its_timeout_keeps_its_records() -> None:
    result = kpsdk.matrix(list(LIBC_MALLOC), [MatrixTarget("elf:/usr/bin/yes", sysroot="/", timeout=2)],
                          workers=1, cache=False)
    (yes,) = result
    assert yes.status == "timeout" and "run's time limit of 2 s" in yes.error
    assert yes.records and yes.exit_status is None


# -- the cache ---------------------------------------------------------------------------------------


def test_results_are_cached_by_target_and_script(tmp_path: Path, data: Path) -> None:
    targets = [MatrixTarget("elf:/bin/echo", args=("x",), sysroot="/"),
               MatrixTarget("elf:/usr/bin/wc", args=(str(data),), sysroot="/"),
               MatrixTarget("elf:/no/such/program")]
    with LocalPool(2) as pool:
        first = kpsdk.matrix(list(LIBC_MALLOC), targets, engine=pool, cache=tmp_path)
        assert [r.cached for r in first] == [False, False, False]
        again = kpsdk.matrix(list(LIBC_MALLOC), targets, engine=pool, cache=tmp_path)
        assert [r.cached for r in again] == [True, True, False]  # a failure runs again
        assert again.jsonl() == first.jsonl()
        # another script, a changed input file (an argument's), or no cache: run again
        other = kpsdk.matrix([LIBC_MALLOC[0]], targets[:2], engine=pool, cache=tmp_path)
        assert [r.cached for r in other] == [False, False]
        data.write_text(TEXT + "date\n")
        try:
            changed = kpsdk.matrix(list(LIBC_MALLOC), targets[:2], engine=pool, cache=tmp_path)
            assert [r.cached for r in changed] == [True, False]
        finally:
            data.write_text(TEXT)
        fresh = kpsdk.matrix(list(LIBC_MALLOC), targets[:2], engine=pool, cache=False)
        assert [r.cached for r in fresh] == [False, False]


# -- the merged outputs ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(data: Path) -> Any:
    script = TraceScript(LIBC_MALLOC, triggers=("m:hist:keys=size.log2",))
    targets = [MatrixTarget("elf:/bin/echo", args=("hi",), sysroot="/"),
               MatrixTarget("elf:/usr/bin/sort", args=(str(data),), sysroot="/"),
               MatrixTarget("elf:/no/such/program")]
    return kpsdk.matrix(script, targets, workers=2, cache=False)


def test_perfetto_has_one_process_per_target(small: Any, tmp_path: Path) -> None:
    out = tmp_path / "all.json"
    small.write("perfetto", out)
    doc = json.loads(out.read_text())
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert names == {1: "/bin/echo hi", 2: small[1].name}  # the failed third has no records
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in slices} == {1, 2}
    assert len(slices) == sum(len(r.records) for r in small) // 2  # each malloc call a slice
    assert doc["otherData"]["records"] == sum(len(r.records) for r in small)


def test_trace_dat_per_target_with_an_index(small: Any, tmp_path: Path) -> None:
    index = small.write("trace-dat", tmp_path / "dat")
    entries = json.loads(index.read_text())["targets"]
    assert [(e["target"], e["status"]) for e in entries] == [(r.name, r.status) for r in small]
    assert entries[2]["file"] is None and entries[2]["error"].startswith("TargetError")
    for entry in entries[:2]:
        assert (tmp_path / "dat" / entry["file"]).read_bytes().startswith(b"\x17\x08\x44tracing")
    if shutil.which("trace-cmd"):
        report = subprocess.run(["trace-cmd", "report", str(tmp_path / "dat" / entries[1]["file"])],
                                capture_output=True, text=True, timeout=60)
        assert report.returncode == 0 and report.stdout.count(" m: ") == entries[1]["records"] // 2


def test_hist_tables_merge_per_key(small: Any) -> None:
    text = small.hist_text()
    parts = text.split("==> ")
    assert [p.split(" <==")[0] for p in parts[1:]] == [
        "/bin/echo hi: events/uprobes/m/hist", f"{small[1].name}: events/uprobes/m/hist",
        "all targets (2): events/uprobes/m/hist"]

    def table(part: str) -> dict[str, int]:
        return {line.split("}")[0]: int(line.split("hitcount:")[1]) for line in part.splitlines()
                if line.startswith("{")}

    one, two, merged = (table(p) for p in parts[1:])
    assert merged == {k: one.get(k, 0) + two.get(k, 0) for k in one.keys() | two.keys()}
    assert f"Hits: {sum(merged.values())}" in parts[3]


# -- targets -----------------------------------------------------------------------------------------


def test_target_builders(tmp_path: Path, data: Path) -> None:
    for name in ("b.txt", "a.txt"):
        (tmp_path / name).write_text(name)
    made = inputs("/usr/bin/wc", [str(tmp_path / "*.txt")], args=("-c",), sysroot="/")
    assert [t.stdin for t in made] == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    made = inputs("/usr/bin/wc", [str(tmp_path / "*.txt")], args=("-c", "{}"))
    assert [t.args for t in made] == [("-c", str(tmp_path / "a.txt")), ("-c", str(tmp_path / "b.txt"))]
    assert [t.name for t in programs(["/bin/ech[o]", "/bin/true"])] == ["/bin/echo", "/bin/true"]
    with pytest.raises(kpsdk.ArgumentError, match="matches no file"):
        programs([str(tmp_path / "*.nothing")])
    listing = tmp_path / "targets.txt"
    listing.write_text(f"# programs\n/bin/echo 'two words'\n\n{{\"program\": \"/usr/bin/wc\", \"stdin\": \"{data}\"}}\n"
                       "qemu-system:arm@6.1\n")
    made = targets_file(listing, sysroot="/")
    assert [(t.spec, t.args, t.stdin, t.sysroot) for t in made[:2]] == [
        ("elf:/bin/echo", ("two words",), None, "/"), ("elf:/usr/bin/wc", (), str(data), "/")]
    assert made[2].name == "qemu-system:arm@6.1" and made[2].kernel is not None and made[2].kernel.release == "6.1"
    assert [t.name for t in kernels(["x86_64", "arm"], ["6.1", "6.12"])] == [
        "qemu-system:x86_64@6.1", "qemu-system:x86_64@6.12", "qemu-system:arm@6.1", "qemu-system:arm@6.12"]
    from kpsdk.fixtures.kernel import _port

    assert _port("x86_64", "6.12", "cloud-amd64")[1].kernel == "linux-image-cloud-amd64"
    with pytest.raises(kpsdk.ArgumentError, match="both named"):
        check_names(programs(["/bin/true", "/bin/true"]))
    with pytest.raises(kpsdk.ArgumentError, match="unknown field"):
        listing.write_text('{"program": "/bin/true", "argz": []}\n')
        targets_file(listing)


def test_a_nested_function_is_refused() -> None:
    def inner(session: Any) -> None:
        return None

    with pytest.raises(kpsdk.ArgumentError, match="top level"):
        kpsdk.matrix(inner, ["/bin/true"])
    with pytest.raises(kpsdk.ArgumentError, match="top level"):
        kpsdk.matrix(lambda s: None, ["/bin/true"])


# -- the command line --------------------------------------------------------------------------------


def test_cli_jsonl_summary_and_exit_status(tmp_path: Path, data: Path) -> None:
    from kpsdk.cli import app

    out, summary = tmp_path / "all.jsonl", tmp_path / "summary.json"
    result = CliRunner().invoke(app, [
        "matrix", "/bin/echo", "/usr/bin/wc", "/no/such/program", "--arg", str(data), "--sysroot", "/",
        "-e", LIBC_MALLOC[0], "-e", LIBC_MALLOC[1], "-o", "jsonl", "--out", str(out), "--summary", str(summary),
        "--no-cache", "--workers", "2"])
    assert result.exit_code == 1, result.output
    assert "error: 1 of 3 targets did not run to their end" in result.output
    assert "Traceback" not in result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["target"] for line in lines} == {f"/bin/echo {data}", f"/usr/bin/wc {data}"}
    targets = json.loads(summary.read_text())["targets"]
    assert [(t["target"].split()[0], t["status"]) for t in targets] == [
        ("/bin/echo", "ok"), ("/usr/bin/wc", "ok"), ("/no/such/program", "error")]
    from kpsdk.matrixrun.merge import matrix_jsonl_schema

    jsonschema = pytest.importorskip("jsonschema")
    for line in lines:
        jsonschema.validate(line, matrix_jsonl_schema())


def test_cli_usage_errors() -> None:
    from kpsdk.cli import app

    runner = CliRunner()
    for args, message in ((["matrix", "/bin/true"], "give the script"),
                          (["matrix", "-e", "p:m libc.so.6:malloc"], "give the targets"),
                          (["matrix", "/bin/true", "-e", "p x", "-o", "trace-dat"], "give --out DIR"),
                          (["matrix", "/bin/true", "/bin/echo", "--inputs", "*.txt", "-e", "p x"], "exactly one"),
                          (["matrix", "/bin/true", "-e", "p x", "--release", "6.1"], "add --kernels")):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.replace("│", " ").split()), (args, result.output)
