"""Rate limits, the connection cap, metrics and health: pure rules, then real HTTP on loopback.

The app tests use an in-memory prober (a twin of our own Prober interface); the notary's
real probes are covered by the fault and load tests.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from scale_helpers import free_port

from notary import keys
from notary.config import Settings
from notary.core.fingerprint import CertDigests, colon_hex
from notary.core.target import Target
from notary.errors import BadConfig, RateLimited, TargetUnreachable, TooManyConnections
from notary.limits import Bucket, ConnectionCap, RateLimiter, take
from notary.metrics import Metrics, create_metrics_app
from notary.metrics_aggregate import merge
from notary.probe import ProbeResult
from notary.store.memory import MemoryStore
from notary.store.redis import RedisStore
from notary.web import CONNS, create_app

LEAF = b"a leaf certificate"
DIGESTS = CertDigests.of(LEAF)
FP = colon_hex(DIGESTS.sha1)


# -- pure token bucket -------------------------------------------------------------------------


def test_bucket_admits_burst_then_refuses_with_wait() -> None:
    bucket = None
    for _ in range(3):
        bucket, wait = take(bucket, 100.0, rate=2.0, burst=3)
        assert wait == 0.0
    bucket, wait = take(bucket, 100.0, rate=2.0, burst=3)
    assert wait == pytest.approx(0.5)  # one token at 2/s
    bucket, wait = take(bucket, 100.5, rate=2.0, burst=3)
    assert wait == 0.0  # refilled exactly one token


def test_bucket_never_exceeds_burst() -> None:
    bucket, _ = take(Bucket(0.0, 0.0), 1e6, rate=10.0, burst=2)
    assert bucket.tokens == 1.0  # capped at 2, one taken


def test_rate_limiter_refuses_with_retry_after_and_is_bounded() -> None:
    rl = RateLimiter(rate=0.5, burst=1, max_clients=3)
    rl.check("a", 0.0)
    with pytest.raises(RateLimited) as info:
        rl.check("a", 0.1)
    assert info.value.status == 429 and info.value.retry_after == 2
    rl.check("b", 0.1)  # another address has its own bucket
    for c in "cdef":
        rl.check(c, 0.2)
    assert len(rl) == 3 and rl.refused == 1


def test_rate_limiter_off_admits_everything() -> None:
    rl = RateLimiter(rate=0.0, burst=1)
    for _ in range(1000):
        rl.check("a", 0.0)
    assert rl.refused == 0 and not rl.enabled


def test_connection_cap_counts() -> None:
    cap = ConnectionCap(2)
    cap.open = 2
    cap.check()  # at the cap: still fine
    cap.open = 3
    with pytest.raises(TooManyConnections):
        cap.check()
    off = ConnectionCap(0)
    off.open = 10**6
    off.check()


def test_settings_bounds() -> None:
    Settings(rate_limit=0, max_connections=0, metrics_listen="127.0.0.1:0").check()
    for bad in ({"rate_burst": 0}, {"rate_limit": -1}, {"max_connections": -1},
                {"metrics_listen": "nope"}, {"redis": "http://x"}):
        with pytest.raises(BadConfig):
            Settings(**bad).check()  # type: ignore[arg-type]


def test_merge_labels_every_sample_with_its_worker() -> None:
    m0, m1 = Metrics(), Metrics()
    m0.answered(200, "hit")
    m1.answered(200, "hit")
    m1.answered(409, "miss")
    m1.probed("ok", 0.02)
    text = merge({"0": m0.exposition().decode(), "1": m1.exposition().decode()})
    families = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")]
    assert len(families) == len(set(families))  # every family once
    assert 'notary_requests_total{worker="0",status="200"} 1.0' in text
    assert 'notary_requests_total{worker="1",status="409"} 1.0' in text
    assert re.search(r'notary_probe_seconds_bucket\{worker="1",[^}]*le="0.025"[^}]*\} 1.0', text)
    # the merged text parses as a Prometheus exposition, samples of one family together
    from prometheus_client.parser import text_string_to_metric_families

    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert sum(s.value for s in parsed["notary_requests"].samples
               if s.name == "notary_requests_total") == 3
    # twin: without the label the two workers' samples would collide
    assert merge({"0": "x 1\n"}) == 'x{worker="0"} 1\n'


def test_aggregate_health_names_the_worker_that_is_down() -> None:
    from notary.metrics_aggregate import AggregateServer

    agg = AggregateServer("127.0.0.1", 0, 2, lambda i: i == 0)
    try:
        status, _, body = agg.answer("/healthz")
        assert status == 503 and "worker 1: not running" in body
        assert agg.answer("/nowhere")[0] == 404
    finally:
        agg.close()


# -- real HTTP on loopback -----------------------------------------------------------------------


@dataclass
class CountingProber:
    fail: bool = False
    probes: int = 0

    async def probe(self, target: Target) -> ProbeResult:
        self.probes += 1
        if self.fail:
            raise TargetUnreachable(f"{target.location}: refused the connection")
        return ProbeResult(LEAF, "127.0.0.1", DIGESTS)


@pytest.fixture(scope="module")
def identity(tmp_path_factory: pytest.TempPathFactory) -> keys.Identity:
    d = tmp_path_factory.mktemp("ident")
    return keys.ensure(d / "k.pem", d / "c.pem", "localhost", now=dt.datetime.now(dt.UTC))


@dataclass
class Running:
    url: str
    app: web.Application
    metrics: Metrics | None
    prober: CountingProber


async def _start(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    if runner.server is not None and CONNS in app:
        app[CONNS].watch(runner.server)
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


@pytest.fixture
async def notary_factory(
    identity: keys.Identity, tmp_path: Path
) -> AsyncIterator[object]:
    runners: list[web.AppRunner] = []

    async def make(with_metrics: bool = True, fail: bool = False, **kw: object) -> Running:
        settings = Settings(data_dir=tmp_path, tls=False, **kw)  # type: ignore[arg-type]
        metrics = Metrics() if with_metrics else None
        prober = CountingProber(fail=fail)
        app = create_app(settings, identity, prober=prober, store=MemoryStore(),
                         metrics=metrics)
        runner, url = await _start(app)
        runners.append(runner)
        return Running(url, app, metrics, prober)

    yield make
    for r in runners:
        await r.cleanup()


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m is not None, f"{name} missing from the exposition"
    return float(m.group(1))


async def post(session: aiohttp.ClientSession, url: str, host: str = "a.test"
               ) -> aiohttp.ClientResponse:
    async with session.post(f"{url}/target/{host}+443", data={"fingerprint": FP}) as r:
        await r.read()
        return r


async def test_rate_limit_answers_429_with_retry_after(notary_factory: object) -> None:
    n = await notary_factory(rate_limit=1.0, rate_burst=2)  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        statuses = [(await post(s, n.url)).status for _ in range(2)]
        assert statuses == [200, 200]
        r = await post(s, n.url)
        assert r.status == 429
        assert int(r.headers["Retry-After"]) >= 1
        assert r.headers["Cache-Status"] == "converge-notary; fwd=bypass; detail=rate-limited"
    text = n.metrics.exposition().decode()
    assert metric(text, "notary_rate_limited_total") == 1
    assert metric(text, 'notary_requests_total{status="429"}') == 1


async def test_generous_rate_limit_lets_the_same_traffic_through(notary_factory: object) -> None:
    n = await notary_factory(rate_limit=1000.0, rate_burst=100)  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        statuses = [(await post(s, n.url)).status for _ in range(20)]
    assert statuses == [200] * 20


async def _raw_request(port: int, path: str = "/target/a.test+443") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 5)
    writer.close()
    return data


async def test_connection_cap_sheds_with_503(notary_factory: object) -> None:
    n = await notary_factory(max_connections=2)  # type: ignore[operator]
    port = int(n.url.rsplit(":", 1)[1])
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    await asyncio.sleep(0.1)
    assert n.app[CONNS].open == 2
    data = await _raw_request(port)  # the third connection
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    assert head.startswith("HTTP/1.1 503")
    assert "Retry-After: 1" in head and "Connection: close" in head
    assert "detail=overloaded" in head
    for _, w in idle:
        w.close()
    await asyncio.sleep(0.1)
    data = await _raw_request(port)  # twin: under the cap again, a normal (probed) answer
    assert data.startswith(b"HTTP/1.1 409") and b"fwd=miss" in data  # GET, no prior history
    assert n.metrics is not None
    assert metric(n.metrics.exposition().decode(), "notary_connection_cap_refusals_total") == 1


async def test_metrics_count_hits_misses_probes_and_negative_hits(notary_factory: object) -> None:
    n = await notary_factory()  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        assert (await post(s, n.url)).status == 200  # miss: one probe
        assert (await post(s, n.url)).status == 200  # hit
        assert (await post(s, n.url)).status == 200  # hit
    n.prober.fail = True
    async with aiohttp.ClientSession() as s:
        assert (await post(s, n.url, "dead.test")).status == 503  # probe fails
        assert (await post(s, n.url, "dead.test")).status == 503  # negative cache
        async with s.put(f"{n.url}/target/a.test+443") as r:
            assert r.status == 405
    text = n.metrics.exposition().decode()
    assert metric(text, 'notary_cache_total{result="hit"}') == 2
    assert metric(text, 'notary_cache_total{result="miss"}') == 1
    assert metric(text, 'notary_requests_total{status="200"}') == 3
    assert metric(text, 'notary_requests_total{status="503"}') == 2
    assert metric(text, 'notary_requests_total{status="405"}') == 1
    assert metric(text, "notary_negative_cache_hits_total") == 1
    assert metric(text, 'notary_probe_seconds_count{outcome="ok"}') == 1
    assert metric(text, 'notary_probe_seconds_count{outcome="unreachable"}') == 1
    assert metric(text, "notary_probes_in_flight") == 0
    assert metric(text, "notary_lru_entries") == 1
    assert n.prober.probes == 2


async def test_without_metrics_the_app_serves_the_same(notary_factory: object) -> None:
    n = await notary_factory(with_metrics=False)  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        assert [(await post(s, n.url)).status for _ in range(3)] == [200, 200, 200]
    assert n.prober.probes == 1


async def _metrics_server(ready: object) -> tuple[web.AppRunner, str]:
    return await _start(create_metrics_app(Metrics(), ready))  # type: ignore[arg-type]


async def test_health_and_readiness_with_a_reachable_store() -> None:
    store = MemoryStore()
    runner, url = await _metrics_server(lambda: store.get("readyz.invalid:0"))
    try:
        async with aiohttp.ClientSession() as s:
            for path, want in (("/healthz", "ok"), ("/readyz", "ready")):
                async with s.get(url + path) as r:
                    assert r.status == 200 and (await r.text()).strip() == want
            async with s.get(url + "/metrics") as r:
                assert r.status == 200 and "notary_requests_total" in await r.text()
    finally:
        await runner.cleanup()


async def test_readiness_fails_when_the_store_is_down() -> None:
    store = RedisStore.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    runner, url = await _metrics_server(lambda: store.get("readyz.invalid:0"))
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/readyz") as r:
                assert r.status == 503
                assert "Redis" in await r.text()
            async with s.get(url + "/healthz") as r:
                assert r.status == 200  # alive, just not ready
    finally:
        await runner.cleanup()
        await store.close()


async def test_probe_rate_limit_charges_live_probes_not_cache_hits(
    notary_factory: object,
) -> None:
    n = await notary_factory(probe_rate_limit=0.1, probe_rate_burst=2)  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        assert (await post(s, n.url, "a.test")).status == 200  # probe 1
        assert (await post(s, n.url, "b.test")).status == 200  # probe 2
        async with s.post(f"{n.url}/target/c.test+443", data={"fingerprint": FP}) as r:
            body = await r.text()
            assert r.status == 429 and "live probes" in body
            assert int(r.headers["Retry-After"]) >= 1
        for _ in range(5):  # cache hits are not charged
            assert (await post(s, n.url, "a.test")).status == 200
    assert n.prober.probes == 2


async def test_probe_rate_limit_off_lets_every_probe_through(notary_factory: object) -> None:
    n = await notary_factory(probe_rate_limit=0)  # type: ignore[operator]
    async with aiohttp.ClientSession() as s:
        for host in ("a.test", "b.test", "c.test", "d.test"):
            assert (await post(s, n.url, host)).status == 200
    assert n.prober.probes == 4


async def test_probe_limiter_needs_no_client_outside_requests() -> None:
    from notary.limits import CLIENT, ProbeLimitedProber

    inner = CountingProber()
    limited = ProbeLimitedProber(inner, RateLimiter(rate=0.001, burst=1), clock=lambda: 0.0)
    limited.admit()  # no client: not charged
    limited.admit()
    await limited.probe(Target("a.test", 443))
    token = CLIENT.set("192.0.2.1")
    try:
        limited.admit()
        with pytest.raises(RateLimited):
            limited.admit()
        await limited.probe(Target("a.test", 443))  # the charge is admit's alone
    finally:
        CLIENT.reset(token)
    assert inner.probes == 2
