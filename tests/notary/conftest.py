"""Fixtures shared by the notary suites (helpers live in ``notary_support``)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from notary_support import Notary, TLSTarget, start_app, start_served

from notary import keys
from notary.config import Settings
from notary.keys import Identity

# The real 2011 notary responses and bundle, as committed beside the shared vectors (the same
# bytes as the project's shared data; the vectors' generator checks them).
LEGACY_DIR = Path(__file__).resolve().parents[2] / "client-libs" / "vectors" / "legacy-2011"


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def identity(tmp_path_factory: pytest.TempPathFactory) -> Identity:
    """One notary key and certificate for the whole run (RSA-2048 generation is slow-ish)."""
    d = tmp_path_factory.mktemp("identity")
    return keys.generate(
        d / "notary.key", d / "notary.pem", "localhost", now=dt.datetime.now(dt.UTC)
    )


@pytest.fixture(scope="session")
def other_identity(tmp_path_factory: pytest.TempPathFactory) -> Identity:
    d = tmp_path_factory.mktemp("other-identity")
    return keys.generate(
        d / "notary.key", d / "notary.pem", "localhost", now=dt.datetime.now(dt.UTC)
    )


@pytest.fixture
def legacy_dir() -> Path:
    assert LEGACY_DIR.is_dir(), f"the 2011 responses are missing from {LEGACY_DIR}"
    return LEGACY_DIR


def make_settings(data_dir: Path, **overrides: Any) -> Settings:
    """Settings for a test notary on an ephemeral loopback port."""
    values: dict[str, Any] = {
        "data_dir": data_dir,
        "listen": ["127.0.0.1:0"],
        "allow_target": ["127.0.0.0/8", "::1/128"],
        "resolve": ["site.test=127.0.0.1"],
        "probe_timeout": 2.0,
    }
    values.update(overrides)
    settings = Settings(**values)
    settings.check()
    return settings


@pytest.fixture
async def make_target() -> AsyncIterator[Callable[..., Awaitable[TLSTarget]]]:
    started: list[TLSTarget] = []

    async def factory(cert: trustme.LeafCert, **kw: Any) -> TLSTarget:
        target = await TLSTarget(cert, **kw).start()
        started.append(target)
        return target

    yield factory
    for target in started:
        await target.stop()


@pytest.fixture
async def make_notary(
    tmp_path: Path, identity: Identity
) -> AsyncIterator[Callable[..., Awaitable[Notary]]]:
    """Start a notary: ``create_app`` by default, ``served=True`` for ``server.serve``."""
    started: list[Notary] = []

    async def factory(
        *, served: bool = False, ident: Identity | None = None, **kw: Any
    ) -> Notary:
        create_kw = {k: kw.pop(k) for k in ("clock", "prober", "store") if k in kw}
        data_dir = tmp_path / f"notary{len(started)}"
        settings = make_settings(data_dir, **kw)
        data_dir.mkdir(parents=True, exist_ok=True)
        who = ident or identity
        if served:
            assert not create_kw, "serve() takes no injected clock/prober/store"
            notary = await start_served(settings, who)
        else:
            notary = await start_app(settings, who, **create_kw)
        started.append(notary)
        return notary

    yield factory
    for notary in started:
        await notary.stop()


@pytest.fixture
def site_cert(ca: trustme.CA) -> trustme.LeafCert:
    return ca.issue_cert("site.test")


@pytest.fixture
def chdir_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
