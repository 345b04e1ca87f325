"""The HTTP layer: the legacy ``/target`` API, the info page, and the one error table.

Compatibility rules for legacy clients (convergence-v1.md): HTTP/1.0 without ``Host`` is
accepted, responses always carry ``Content-Length`` and are never chunked, and the connection
is closed after the reply when the client asks (aiohttp does both for ``bytes`` bodies).
"""

from __future__ import annotations

import asyncio
import functools
import html
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from http import HTTPStatus

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11
from aiohttp.web_urldispatcher import _default_expect_handler
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from multidict import CIMultiDict

from notary import __version__
from notary.ca.checker import build_checker
from notary.config import Settings
from notary.core import extended
from notary.core.addrpolicy import AddressPolicy, parse_networks
from notary.core.fingerprint import Fingerprint
from notary.core.request import parse_form_fingerprint
from notary.core.signing import LegacySigner
from notary.core.target import IPAddress, parse_target_path
from notary.errors import (
    BadInput,
    NotaryError,
    ProbeCapacityFull,
    RateLimited,
    SlowRequest,
    StoreUnavailable,
    TargetRefused,
    TargetUnreachable,
    TooLarge,
    TooManyConnections,
)
from notary.keys import Identity
from notary.limits import (
    CLIENT,
    ConnectionCap,
    ProbeLimitedProber,
    RateLimiter,
    client_key,
    group_key,
    share,
)
from notary.metrics import Metrics, TimedProber
from notary.probe import Prober, TLSProber
from notary.resolve import Resolver, load_hosts_file, parse_resolve_option
from notary.service import Answer, CacheOutcome, ExtSigner, NotaryService, ServiceSettings
from notary.store.base import Store
from notary.store.lru import CachedStore
from notary.store.redis import RedisStore
from notary.store.sqlite import SQLiteStore
from notary.tlog.http import TLOG
from notary.tlog.http import add_routes as add_log_routes
from notary.tlog.log import TileLog
from notary.tlog.note import Signer, Verifier
from notary.tlog.redislog import RedisTileLog
from notary.tlog.service import LogSettings, TransparencyLog, Witness

SERVICE = web.AppKey("service", NotaryService)
MAX_EXT_BODY = extended.MAX_REQUEST
INFO = web.AppKey("info", dict)
RATE = web.AppKey("rate_limiter", RateLimiter)
CONNS = web.AppKey("connection_cap", ConnectionCap)
METRICS = web.AppKey("metrics", Metrics)
BODY_TIMEOUT = web.AppKey("body_timeout", float)
log = logging.getLogger("notary")

CACHE_STATUS = {
    CacheOutcome.HIT: "converge-notary; hit",
    CacheOutcome.MISS: "converge-notary; fwd=miss",
    CacheOutcome.STALE: "converge-notary; fwd=stale",
}
CS_NEGATIVE = "converge-notary; hit; detail=unreachable"
CS_CAPACITY = "converge-notary; fwd=miss; detail=capacity"
CS_REFUSED = "converge-notary; fwd=miss; detail=refused"
CS_PROBE_FAILED = "converge-notary; fwd=miss; detail=unreachable"
CS_BAD_REQUEST = "converge-notary; fwd=bypass"
CS_RATE_LIMITED = "converge-notary; fwd=bypass; detail=rate-limited"
CS_OVERLOADED = "converge-notary; fwd=bypass; detail=overloaded"
CS_STORE = "converge-notary; fwd=miss; detail=store-unavailable"
# what clients are told of a store failure: nothing internal (paths, addresses, library
# messages); the operator's log has the text (notary/store/health.py)
STORE_TEXT = "the notary's store is unavailable; retry shortly"

_ALLOW = "GET, POST"


def error_response(exc: NotaryError) -> web.Response:
    """The one place where errors become HTTP responses."""
    headers = {"Cache-Control": "no-store"}
    if isinstance(exc, ProbeCapacityFull):
        headers["Retry-After"] = str(exc.retry_after)
        headers["Cache-Status"] = CS_CAPACITY
    elif isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
        headers["Cache-Status"] = CS_RATE_LIMITED
    elif isinstance(exc, TooManyConnections):
        headers["Retry-After"] = str(exc.retry_after)
        headers["Cache-Status"] = CS_OVERLOADED
    elif isinstance(exc, StoreUnavailable):
        headers["Retry-After"] = "1"
        headers["Cache-Status"] = CS_STORE
    elif isinstance(exc, TargetUnreachable):
        headers["Cache-Status"] = CS_NEGATIVE if getattr(exc, "from_cache", False) else (
            CS_PROBE_FAILED
        )
    elif isinstance(exc, TargetRefused):
        headers["Cache-Status"] = CS_REFUSED
    elif isinstance(exc, BadInput):
        headers["Cache-Status"] = CS_BAD_REQUEST
    text = STORE_TEXT if isinstance(exc, StoreUnavailable) else _client_text(exc)
    resp = web.Response(
        status=exc.status, text=text + "\n", content_type="text/plain", headers=headers
    )
    if isinstance(exc, TooManyConnections):
        resp.force_close()  # shed the connection so the count falls
    return resp


# A failed probe's own text names the address the notary's resolver chose and the TLS
# library's reason: a map of the operator's network for anyone who asks. The client is told
# what kind of failure it was, never where or the library's words.
_PROBE_DETAILS = (
    (re.compile(r"TLS handshake with \S+ failed \(.*?\)(?= \(remembered|$)"),
     "the TLS handshake failed"),
    (re.compile(r"cannot connect to \S+ \(.*?\)(?= \(remembered|$)"),
     "cannot connect to the target"),
    (re.compile(r"(?<=: )\S+ refused the connection"), "the target refused the connection"),
)


def _client_text(exc: NotaryError) -> str:
    """What a client is told (see :data:`_PROBE_DETAILS`)."""
    text = exc.message
    if isinstance(exc, TargetUnreachable):
        for pattern, neutral in _PROBE_DETAILS:
            text = pattern.sub(neutral, text)
    return text


class _Front:
    """What an answer request needs from its app, looked up once instead of per request."""

    __slots__ = ("app", "body_timeout", "conns", "max_body", "metrics", "rate")

    def __init__(self, app: web.Application, max_body: int) -> None:
        self.app = app
        self.max_body = max_body
        self.body_timeout = app[BODY_TIMEOUT]
        self.rate = app[RATE]
        self.conns = app[CONNS]
        self.metrics: Metrics | None = app.get(METRICS)


FRONT = web.AppKey("front", _Front)


def _admit(front: _Front, request: web.BaseRequest) -> None:
    """Apply the connection cap and the client's rate limit (raises when over)."""
    front.conns.check()
    client = client_key(request.remote or "")
    front.rate.check(client, time.monotonic())
    CLIENT.set(client)  # live probes this request starts are charged to this address


def _failed(front: _Front, exc: NotaryError) -> web.Response:
    resp = error_response(exc)
    if front.metrics is not None:
        front.metrics.failed(exc, resp.status)
    return resp


_JSON = "application/json"
# the headers of every answer, by cache outcome, copied (not rebuilt) per response
_ANSWER_HEADERS = {
    (outcome, media): CIMultiDict({"Content-Type": media, "Cache-Status": text})
    for outcome, text in CACHE_STATUS.items()
    for media in (_JSON, extended.MEDIA_TYPE)
}


def _answer_response(answer: Answer, media: str = _JSON) -> web.Response:
    return web.Response(status=answer.status, body=answer.body,
                        headers=CIMultiDict(_ANSWER_HEADERS[answer.cache, media]))


# The statuses an answer can have (service.py); an answer of any other is sent as a Response.
_WIRE_STATUSES = (200, 403, 409, 503)
_SERVER_LINE = f"\r\nServer: {SERVER_SOFTWARE}\r\n".encode("latin-1")


def _wire_parts(version: HttpVersion, status: int, keep_alive: bool, cache: CacheOutcome,
                media: str) -> tuple[bytes, bytes]:
    """What aiohttp writes around an answer's length and date, as bytes.

    The same header lines in the same order as ``_answer_response`` prepared by aiohttp
    (``StreamResponse._prepare_headers``): the status line in the request's version, the
    answer's two headers, ``Content-Length``, ``Date``, ``Server``, and ``Connection`` where
    aiohttp adds one (keep-alive asked in HTTP/1.0, close in HTTP/1.1).
    """
    head = (f"HTTP/{version[0]}.{version[1]} {status} {HTTPStatus(status).phrase}\r\n"
            f"Content-Type: {media}\r\nCache-Status: {CACHE_STATUS[cache]}\r\n"
            "Content-Length: ").encode("latin-1")
    connection = b""
    if keep_alive:
        if version == HttpVersion10:
            connection = b"Connection: keep-alive\r\n"
    elif version == HttpVersion11:
        connection = b"Connection: close\r\n"
    return head, _SERVER_LINE + connection + b"\r\n"


_WIRE_PARTS = {
    (version, status, keep_alive, cache, media): _wire_parts(
        version, status, keep_alive, cache, media)
    for version in (HttpVersion10, HttpVersion11)
    for status in _WIRE_STATUSES
    for keep_alive in (False, True)
    for cache in CACHE_STATUS
    for media in (_JSON, extended.MEDIA_TYPE)
}


class _Date:
    """aiohttp's formatted ``Date`` (a new string each second) and its bytes."""

    text = ""
    line = b""

    @classmethod
    def now(cls) -> bytes:
        text = rfc822_formatted_time()
        if text is not cls.text:
            cls.text, cls.line = text, text.encode("latin-1")
        return cls.line


class _WireAnswer:
    """An answer written as one block of bytes: the bytes aiohttp would write for
    ``_answer_response`` (tests/notary/test_fast_path.py compares them), without building a
    ``Response`` and its header map per request: on cache hits over keep-alive, building,
    preparing and finishing that ``Response`` was most of the notary's own time per request.

    It is what aiohttp's request loop needs of a response (``prepare``, ``write_eof``,
    ``keep_alive``, and ``status`` and ``body_length`` for the access log). The write goes
    through the request's own writer, so its back-pressure (drain) is aiohttp's.
    """

    __slots__ = ("_data", "_writer", "body_length", "keep_alive", "status")

    def __init__(self, data: bytes, status: int, keep_alive: bool) -> None:
        self._data = data
        self._writer: AbstractStreamWriter | None = None
        self.status = status
        self.keep_alive = keep_alive
        self.body_length = len(data)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        self._writer = request.writer
        return self._writer

    async def write_eof(self, data: bytes = b"") -> None:
        writer = self._writer
        if writer is not None:
            self._writer = None
            await writer.write_eof(self._data)


def _wire_answer(request: web.BaseRequest, answer: Answer,
                 media: str = _JSON) -> web.Response | _WireAnswer:
    """The answer to ``request``: one prebuilt block where the table has its head, else a
    ``Response`` (any other HTTP version, status or outcome)."""
    keep_alive = request.keep_alive
    status = answer.status
    parts = _WIRE_PARTS.get((request.version, status, keep_alive, answer.cache, media))
    if parts is None:
        return _answer_response(answer, media)
    body = answer.body
    data = b"".join((parts[0], b"%d\r\nDate: " % len(body), _Date.now(), parts[1], body))
    return _WireAnswer(data, status, keep_alive)


async def handle_target(request: web.Request) -> web.StreamResponse:
    got = await _target(request.app[FRONT], request)
    return _answer_response(got) if isinstance(got, Answer) else got


async def _target(front: _Front, request: web.BaseRequest) -> web.StreamResponse | Answer:
    """A ``/target/...`` request's answer, or the response that refuses it."""
    method = request.method
    if method not in ("GET", "POST"):
        if front.metrics is not None:
            front.metrics.rejected(405)
        return web.Response(
            status=405,
            text=f"Method {method} is not allowed here; use POST (or GET).\n",
            headers={"Allow": _ALLOW, "Cache-Status": CS_BAD_REQUEST},
        )
    service = front.app[SERVICE]
    try:
        _admit(front, request)
        # the raw (still percent-encoded) path: the target parser decodes exactly once
        target = _parse_target_memo(request.rel_url.raw_path[len("/target/") :])
        fp: Fingerprint | None = None
        if method == "POST":
            fp = _parse_body(await _read_body(front, request))
        answer = await service.validate(target, fp)
    except NotaryError as exc:
        return _failed(front, exc)
    if front.metrics is not None:
        front.metrics.answered(answer.status, answer.cache.value)
    return answer


# Parsing is pure, and on cache hits the same target spec and body recur from every client
# asking about a popular site: recent successful parses are remembered (bounded; input that
# fails is parsed, and refused, every time). Parsing was ~30% of a cache hit's CPU time.
PARSE_MEMO_ENTRIES = 4096
PARSE_MEMO_MAX_BODY = 256  # bytes; a legacy body is 71 (SHA-1) or 107 (SHA-256) bytes
_parse_target_memo = functools.lru_cache(maxsize=PARSE_MEMO_ENTRIES)(parse_target_path)
_parse_form_memo = functools.lru_cache(maxsize=PARSE_MEMO_ENTRIES)(parse_form_fingerprint)


_parse_ext_memo = functools.lru_cache(maxsize=PARSE_MEMO_ENTRIES)(extended.parse_request)


def _parse_ext(body: bytes) -> extended.ExtRequest:
    # A request with a nonce is unique by design: remembering it would only churn the memo.
    if len(body) <= PARSE_MEMO_MAX_BODY and b'"nonce"' not in body:
        return _parse_ext_memo(body)
    return extended.parse_request(body)


def _parse_body(body: bytes) -> Fingerprint:
    if len(body) <= PARSE_MEMO_MAX_BODY:
        return _parse_form_memo(body)
    return parse_form_fingerprint(body)


async def _read_body(front: _Front, request: web.BaseRequest) -> bytes:
    """The request body, bounded in size (413) and in time (408).

    aiohttp bounds the request head (keep-alive timeout) but not the body: without the
    deadline a client trickling a body holds its handler and connection for ever.
    """
    content = request.content
    if content.is_eof():
        # The whole body came with the head (the usual small POST): it is taken as it is,
        # without a read coroutine or a deadline (each measurable on cache hits).
        body = content.read_nowait(-1)
        if len(body) > front.max_body:
            raise TooLarge(f"request body larger than {front.max_body} bytes")
        return body
    try:
        async with asyncio.timeout(front.body_timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise TooLarge(f"request body larger than {front.max_body} bytes") from None
    except TimeoutError:
        raise SlowRequest(
            f"request body not received within {front.body_timeout:g} s"
        ) from None


async def handle_answer(request: web.Request) -> web.StreamResponse:
    """``POST /v2/answer``: the extended format (JSON request, signed JSON answer)."""
    got = await _answer(request.app[FRONT], request)
    return _answer_response(got, extended.MEDIA_TYPE) if isinstance(got, Answer) else got


async def _answer(front: _Front, request: web.BaseRequest) -> web.StreamResponse | Answer:
    """A ``POST /v2/answer`` request's answer, or the response that refuses it."""
    try:
        _admit(front, request)
        body = await _read_body(front, request)
        answer = await front.app[SERVICE].validate_ext(_parse_ext(body))
    except NotaryError as exc:
        return _failed(front, exc)
    if front.metrics is not None:
        front.metrics.answered(answer.status, answer.cache.value)
    return answer


def install_fast_path(app: web.Application, server: web.Server) -> None:
    """Dispatch the answer requests (``/target/...``, ``POST /v2/answer``) before aiohttp's
    router, on ``server`` (the app's, from ``AppRunner.setup``; before any site starts).

    A cache hit then skips what routing adds per request (the resolve, a match-info object,
    the application's handler layer) and does only what the handlers themselves do: the
    same admission (connection cap, rate limit), size and time bounds, parsing and answer
    bytes, an answer written as prebuilt bytes (:class:`_WireAnswer`, which aiohttp's request
    loop takes where it takes a response). Anything else, and any request with ``Expect``
    (its 100-continue handling lives in the route), goes through the router as before. The
    app has no middlewares and no response signals, so nothing skipped would act on these
    requests.
    """
    if app.middlewares or app.on_response_prepare:
        raise RuntimeError("the fast path would skip the app's middlewares or signals")
    general = server.request_handler
    front = app[FRONT]

    async def dispatch(request: web.BaseRequest) -> web.StreamResponse:
        path = request.rel_url.raw_path
        if hdrs.EXPECT not in request.headers:
            if path.startswith("/target/"):
                got = await _target(front, request)
                if isinstance(got, Answer):
                    return _wire_answer(request, got)  # type: ignore[return-value]
                return got
            if path == "/v2/answer" and request.method == "POST":
                got = await _answer(front, request)
                if isinstance(got, Answer):
                    return _wire_answer(request, got, extended.MEDIA_TYPE)  # type: ignore[return-value]
                return got
        return await general(request)

    server.request_handler = dispatch


async def expect_handler(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: a body announced larger than ``max_body`` gets 413 at once,
    without ``100 Continue``, and the connection is closed (the client must not send it).

    Anything else is aiohttp's default behaviour (``100 Continue``, or 417 for an unknown
    expectation).
    """
    limit = request.app[INFO]["policy"]["max_body"]
    length = request.content_length
    if length is not None and length > limit:
        resp = _failed(request.app[FRONT], TooLarge(f"request body larger than {limit} bytes"))
        resp.force_close()
        await resp.prepare(request)
        await resp.write_eof()
        # close now: otherwise aiohttp lingers up to 10 s for the body the client must not send
        request.protocol.force_close()
        return resp
    await _default_expect_handler(request)
    return None


async def handle_missing_target(request: web.Request) -> web.Response:
    return error_response(BadInput("You must specify a target."))


async def handle_info(request: web.Request) -> web.Response:
    info = request.app[INFO]
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response(info)
    rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v))}</td></tr>"
        for k, v in info["policy"].items()
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>converge notary</title></head>"
        "<body><h1>converge notary</h1>"
        f"<p>Version {html.escape(info['version'])}. This notary checks TLS certificates from"
        " its own network path for Convergence clients.</p>"
        "<p>Pin this certificate (SHA-1): <code>"
        f"{html.escape(info['pin_sha1'])}</code><br>SHA-256: <code>"
        f"{html.escape(info['pin_sha256'])}</code></p>"
        f"<h2>Policy</h2><table>{rows}</table></body></html>"
    )
    return web.Response(text=page, content_type="text/html")


def info_document(
    settings: Settings, identity: Identity, ext_key_id: str | None = None
) -> dict[str, object]:
    doc: dict[str, object] = {
        "version": __version__,
        "protocols": ["convergence-v1", extended.FORMAT] if ext_key_id else ["convergence-v1"],
        "answer_url": "/v2/answer" if ext_key_id else None,
        "signing_key_id": ext_key_id,
        "pin_sha1": identity.pin_sha1,
        "pin_sha256": identity.pin_sha256,
        "policy": {
            "probe_timeout_seconds": settings.probe_timeout,
            "recheck_after_seconds": settings.recheck_after,
            "negative_ttl_seconds": settings.negative_ttl,
            "max_probes": settings.max_probes,
            "allowed_target_ranges": list(settings.allow_target),
            "refused_by_default": "loopback, private, link-local, multicast, unspecified, "
            "reserved and other non-global addresses",
            "max_body": settings.max_body,
        },
    }
    if settings.verifier != "perspective":
        policy = doc["policy"]
        assert isinstance(policy, dict)
        policy["verifier"] = settings.verifier
    return doc


def build_resolver(settings: Settings) -> Resolver:
    static: dict[str, list[IPAddress]] = {}
    if settings.hosts_file is not None:
        static.update(load_hosts_file(settings.hosts_file))
    for spec in settings.resolve:
        name, ip = parse_resolve_option(spec)
        static.setdefault(name, [])
        if ip not in static[name]:
            static[name].insert(0, ip)
    # a lookup is charged to the client whose request started it (notary/resolve.py)
    threads = settings.resolver_threads
    return Resolver(static, threads=threads, owner=CLIENT.get, group=group_key,
                    per_client=share(threads, settings.client_share),
                    per_group=share(threads, settings.group_share))


def create_app(
    settings: Settings,
    identity: Identity,
    *,
    clock: Callable[[], float] = time.time,
    prober: Prober | None = None,
    store: Store | None = None,
    signing_key: Ed25519PrivateKey | None = None,
    metrics: Metrics | None = None,
    log_signer: Signer | None = None,
) -> web.Application:
    """The notary's aiohttp application. Nothing is opened until the app starts."""
    policy = AddressPolicy(parse_networks(settings.allow_target))
    the_prober: Prober = prober or TLSProber(
        build_resolver(settings), policy, settings.probe_timeout,
        want_chain=settings.verifier != "perspective",
    )
    app = web.Application(client_max_size=settings.max_body)
    app[RATE] = RateLimiter(settings.rate_limit, settings.rate_burst, settings.rate_clients)
    app[CONNS] = ConnectionCap(settings.max_connections)
    app[BODY_TIMEOUT] = settings.body_timeout
    if metrics is not None:
        app[METRICS] = metrics
        the_prober = TimedProber(the_prober, metrics)
    if settings.probe_rate_limit > 0:
        the_prober = ProbeLimitedProber(the_prober, RateLimiter(
            settings.probe_rate_limit, settings.probe_rate_burst, settings.rate_clients,
            what="live probes",
        ))
    app[FRONT] = _Front(app, settings.max_body)
    ext_signer = ExtSigner(signing_key) if signing_key is not None else None
    app[INFO] = info_document(settings, identity, ext_signer.key_id if ext_signer else None)

    async def service_ctx(app: web.Application) -> AsyncIterator[None]:
        backend: Store
        if store is not None:
            backend = store
        elif settings.redis:
            redis_store = RedisStore.from_url(
                settings.redis, prefix=settings.redis_prefix, timeout=settings.redis_timeout,
                budget=settings.budget(),
            )
            try:
                dropped = await redis_store.drop_legacy_keys()
            except StoreUnavailable as exc:  # serve anyway: the old keys are never read
                log.warning("could not remove pre-upgrade Redis keys: %s", exc.message)
            else:
                if dropped:
                    log.warning("dropped %d Redis keys of the pre-upgrade layout (records "
                                "keyed by host:port whatever address was probed)", dropped)
            backend = redis_store
        else:
            backend = await SQLiteStore.open(
                settings.db_path, driver=settings.sqlite_driver,  # type: ignore[arg-type]
                budget=settings.budget(),
            )
        cached = CachedStore(backend, settings.lru_entries)
        ca = build_checker(
            settings.verifier, settings.ca_roots, settings.ca_trust, settings.ca_no_mozilla
        )
        if ca is not None:
            log.info("CA verifier: %s, %d roots in store %s", ca.mode, len(ca.store),
                     ca.store.name)
        app[SERVICE] = NotaryService(
            cached,
            the_prober,
            LegacySigner(identity.key),
            ServiceSettings(
                recheck_after=settings.recheck_after,
                negative_ttl=settings.negative_ttl,
                max_probes=settings.max_probes,
                max_probes_per_client=share(settings.max_probes, settings.client_share),
                max_probes_per_group=share(settings.max_probes, settings.group_share),
                probe_reserve=share(settings.max_probes, settings.probe_reserve),
                ext_reuse=settings.ext_reuse,
            ),
            clock,
            ext_signer,
            ca,
        )
        tlog = None
        if log_signer is not None and settings.transparency_log:
            origin = log_signer.name

            def open_log() -> TileLog | RedisTileLog:
                if settings.redis:
                    return RedisTileLog(settings.redis, settings.redis_prefix, origin,
                                        timeout=max(settings.redis_timeout, 5.0))
                return TileLog(settings.log_path, origin)

            tlog = TransparencyLog(open_log, log_signer, LogSettings(
                interval=settings.log_interval, proof_wait=settings.log_proof_wait,
                witnesses=[Witness(url, Verifier.parse(vkey))
                           for url, vkey in settings.log_witnesses()],
            ))
            await tlog.start()
            app[TLOG] = tlog
            app[SERVICE].tlog = tlog
        if metrics is not None:
            service = app[SERVICE]
            metrics.probes_in_flight.set_function(lambda: service.probes_in_flight)
            metrics.lru_entries.set_function(lambda: len(cached))
            service.on_ca_verdict = lambda verdict: metrics.ca_verdicts.labels(verdict).inc()
            metrics.open_connections.set_function(lambda: app[CONNS].open)
        try:
            yield
        finally:
            if tlog is not None:
                await tlog.stop()
            await cached.close()

    app.cleanup_ctx.append(service_ctx)
    add_log_routes(app)
    app.router.add_route("*", "/target/{spec:.*}", handle_target, expect_handler=expect_handler)
    app.router.add_route("*", "/target", handle_missing_target, expect_handler=expect_handler)
    app.router.add_post("/v2/answer", handle_answer, expect_handler=expect_handler)
    app.router.add_get("/", handle_info)
    return app


__all__ = ["CACHE_STATUS", "CONNS", "INFO", "METRICS", "RATE", "SERVICE", "create_app",
           "error_response", "install_fast_path"]
