"""Fixtures of the security suite. The ``results`` collector's rows become
security-results.md (under var/results/, or docs/ with CONVERGE_RECORD=1) when the session
ends, whether the suite ran in one process or in pytest-xdist workers."""

from __future__ import annotations

import dataclasses
import datetime as dt
import fcntl
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))

from security_support import (  # noqa: E402
    RESULTS,
    Results,
    Row,
    ThreadServer,
    server_ctx,
    tls_handler,
)

from notary import keys  # noqa: E402

COLLECTED = Results()  # this process's rows (one pytest session per process)
HERE = Path(__file__).resolve().parent
PARTS = RESULTS.parent / ".security-parts"  # pytest-xdist workers' rows, until merged


@pytest.fixture(scope="session")
def results() -> Results:
    """Rows of docs/security-results.md, written when the session ends (see
    :func:`pytest_sessionfinish`)."""
    return COLLECTED


def _write(rows: list[Row]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(Results(rows).markdown(), encoding="utf-8")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The table is rewritten only by a run that selected every test module of this
    directory, so a partial run never truncates it. Under pytest-xdist each worker holds
    the rows of the tests it ran: each leaves them in a part file, and the last worker to
    finish writes the table from every part."""
    modules = {p.name for p in HERE.glob("test_*.py")}
    selected = {Path(str(item.fspath)).name for item in session.items
                if Path(str(item.fspath)).resolve().parent == HERE}
    complete = selected >= modules
    worker = getattr(session.config, "workerinput", None)
    if worker is None:
        if COLLECTED.rows and complete:
            _write(COLLECTED.rows)
        return
    run = PARTS / str(worker["testrunuid"])
    run.mkdir(parents=True, exist_ok=True)
    with (run / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # no worker reads a part another is writing
        (run / f"{worker['workerid']}.json").write_text(
            json.dumps([dataclasses.asdict(r) for r in COLLECTED.rows]), encoding="utf-8")
        parts = sorted(run.glob("*.json"))
        if len(parts) < int(worker["workercount"]):
            return  # a later worker merges
        rows = [Row(**r) for p in parts for r in json.loads(p.read_text(encoding="utf-8"))]
        if rows and complete:
            _write(rows)
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(autouse=True)
def _mark_failed_rows(
    request: pytest.FixtureRequest, results: Results
) -> Iterator[None]:
    """Rows added by a test that then fails are marked FAILED in the table."""
    before = len(results.rows)
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for row in results.rows[before:]:
            row.passed = False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def site_cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("site.test", "127.0.0.1")


@pytest.fixture(scope="session")
def identity_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pre-generated notary key and certificate, copied into each notary's data dir."""
    d = tmp_path_factory.mktemp("identity")
    keys.generate(d / "notary.key", d / "notary.pem", "localhost", now=dt.datetime.now(dt.UTC))
    keys.ensure_signing_key(d / "signing.key")
    return d


@pytest.fixture(scope="session")
def good_target(site_cert: trustme.LeafCert) -> Iterator[ThreadServer]:
    """A well-behaved TLS site on loopback (for the 'still healthy' checks)."""
    with ThreadServer(tls_handler(server_ctx(site_cert))) as server:
        yield server
