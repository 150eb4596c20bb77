"""nox sessions: ``nox -s tests``, ``nox -s lint``, ``nox -s bench``, ``nox -s soak``, ``nox -s fixtures``,
``nox -s kernel``, ``nox -s fuzz``, ``nox -s docs``.

``nox`` alone runs tests and lint.  Extra arguments after ``--`` go to the
tool: ``nox -s tests -- -k scale``, ``nox -s bench -- --quick``.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests", "lint"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite (pytest), on an editable install (``nox -s wheel`` tests the wheel)."""
    session.install("-e", ".[test]")
    session.run("pytest", *session.posargs)


@nox.session(python=False)
def wheel(session: nox.Session) -> None:
    """Build the wheel, install it in a fresh venv and run the user-facing tests against it (.ci/wheel-check)."""
    session.run("bash", ".ci/wheel-check", external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy (configured in pyproject.toml)."""
    session.install(".[test]")
    session.run("ruff", "check", ".")
    session.run("mypy", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The docs site: ``mkdocs build --strict`` into ``site/`` (mkdocs.yml), offline.

    Broken links and anchors, and pages missing from the nav, fail the build.  The API
    reference comes from the docstrings (mkdocstrings; tools/griffe_rst.py shows their rST as
    Markdown).  Nothing is fetched at build time: no web fonts, no social cards.
    ``nox -s docs -- serve`` serves it at http://127.0.0.1:8000 instead.  The examples in the
    pages are run by the test suite (tests/test_docs.py), not here.
    """
    # the tools only: mkdocstrings reads kpsdk's source (mkdocs.yml: paths), it imports nothing,
    # so kpsdk and its dependencies (unicorn, keystone...) are not installed for a docs build
    session.install(*nox.project.load_toml("pyproject.toml")["project"]["optional-dependencies"]["docs"])
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # mkdocs-material's banner about its successor
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", "--strict", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", *session.posargs)


@nox.session
def kernel(session: nox.Session) -> None:
    """The tests that boot Debian's real amd64 kernel in QEMU (``pytest -m kernel``).

    The kernel package is downloaded once (``apt-get download``, ~70 MB) into
    ``$KPSDK_CACHE`` or ``~/.cache/kpsdk``; needs qemu-system-x86 and busybox-static.
    """
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "kernel", *session.posargs)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Only the fuzz tests (``-m fuzz``), with hypothesis' large profile (tests/conftest.py): many
    more examples, random, failures kept in .hypothesis/ and replayed first next time.

    The default test run has them too, with a small derandomized budget; this session is for
    looking for new failures (``nox -s fuzz -- -k filter`` for one area).
    """
    session.install("-e", ".[test]")
    session.run("pytest", "-m", "fuzz", "--hypothesis-profile=fuzz", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmark: prints the tables, writes bench/results/latest.{json,md}, live.md, startup.md, tasks.md, matrix.md.

    The Qiling comparison runs in its own venv (bench/.qiling-venv), which
    bench/run.py creates with ``pip install qiling`` on the first full run.
    """
    session.install("-e", ".")
    session.run("python", "bench/run.py", *session.posargs)
    # start-up: kpsdk --help and import kpsdk against their references (median of 20 interleaved runs)
    session.run("python", "bench/startup.py", "--out", "bench/results/startup.md")
    # live targets: hits/s on qemu-user against gdb's own loop and a plain pygdbmi loop
    session.run("python", "bench/live.py", "--out", "bench/results/live.md")
    # real Linux programs on Unicorn: busybox sort and a hot libc probe against qemu-user and Qiling
    session.run("python", "bench/linuxprogs.py", "--out", "bench/results/linuxprogs.md")
    # processes and threads: a thread switch, a 50 MB fork, a pipe round trip; sh, xz -T2, make -j2
    session.run("python", "bench/tasks.py", "--out", "bench/results/tasks.md")
    # kpsdk matrix: a program corpus bare, on the local pool and on Dask with 1 and 2 workers
    session.install("-e", ".[dask]")
    session.run("python", "bench/matrix.py", "--out", "bench/results/matrix.md")


@nox.session
def soak(session: nox.Session) -> None:
    """Long runs whose memory must stay flat: 1M kprobe hits, 200k kretprobe returns, and
    register/hit/unregister cycles next to a bare Unicorn hook's (``bench/soak.py``)."""
    session.install("-e", ".")
    session.run("python", "bench/soak.py", "--out", "bench/results/soak.md", *session.posargs)


@nox.session
def fixtures(session: nox.Session) -> None:
    """Rebuild the fixture binaries (needs Debian's cross gcc packages; see kpsdk/fixtures/README.md)."""
    session.install("-e", ".")
    session.run("python", "-m", "kpsdk.fixtures.build", *session.posargs)
