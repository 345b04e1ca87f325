"""Fixtures of the security suite. The ``results`` collector writes security-results.md
(under var/results/, or docs/ with CONVERGE_RECORD=1)
at the end of the session from the rows the tests added."""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))

from security_support import (  # noqa: E402
    RESULTS,
    Results,
    ThreadServer,
    server_ctx,
    tls_handler,
)

from notary import keys  # noqa: E402


@pytest.fixture(scope="session")
def results(request: pytest.FixtureRequest) -> Iterator[Results]:
    """Rows of docs/security-results.md. The file is rewritten only by a run that included
    every test module of this directory, so a partial run never truncates the table."""
    collected = Results()
    yield collected
    here = Path(__file__).resolve().parent
    modules = {p.name for p in here.glob("test_*.py")}
    ran = {Path(str(item.fspath)).name for item in request.session.items
           if Path(str(item.fspath)).resolve().parent == here}
    if collected.rows and ran >= modules:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(collected.markdown(), encoding="utf-8")


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
