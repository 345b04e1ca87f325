"""The HTTP/2 page load: httpcore's connection pool with h2 (httpcore[http2], the stack
under httpx), one TLS 1.3 connection per host with every request multiplexed on it, as a
browser does over HTTP/2. Connections go to the host's toxiproxy proxy and wait the TCP
handshake's round trip after connect, as the HTTP/1.1 loads do; the page's redirect hops
come first, as over HTTP/1.1."""

from __future__ import annotations

import ssl
import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from replay.errors import ReplayIOError
from replay.overhead.pages import MAX_REDIRECTS, Page, embedded


def available() -> bool:
    try:
        import h2  # noqa: F401
        import httpcore  # noqa: F401
        import hypercorn  # noqa: F401
    except ImportError:
        return False
    return True


def load_h2(page: Page, ports: dict[str, int], ctx: ssl.SSLContext,
            delay: Callable[[], float], opened: Callable[[], None]) -> float:
    """Seconds from the page's request to the last byte of its last object over HTTP/2."""
    import httpcore

    class Backend(httpcore.SyncBackend):
        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None,
                        socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
            stream = super().connect_tcp("127.0.0.1", ports[host], timeout, local_address,
                                         socket_options)
            opened()
            time.sleep(delay())
            return stream

    pool = httpcore.ConnectionPool(ssl_context=ctx, http1=False, http2=True,
                                   network_backend=Backend(), max_connections=None)

    def fetch(host: str, path: str) -> Any:
        return pool.request("GET", f"https://{host}{path}", extensions={"timeout": {
            "connect": 30.0, "read": 30.0, "write": 30.0, "pool": 30.0}})

    def get(host: str, path: str) -> bytes:
        r = fetch(host, path)
        if r.status != 200:
            raise ReplayIOError(f"GET https://{host}{path} over HTTP/2: HTTP {r.status}")
        return bytes(r.content)

    def follow() -> None:
        """The page's redirect hops, each a new connection to its host."""
        host = page.first_host
        for _ in range(MAX_REDIRECTS):
            if host == page.host:
                return
            r = fetch(host, "/")
            location = dict(r.headers).get(b"location", b"").decode()
            nxt = urllib.parse.urlsplit(location)
            if r.status not in (301, 302, 303, 307, 308) or not nxt.hostname:
                raise ReplayIOError(f"GET https://{host}/ over HTTP/2: HTTP {r.status}, "
                                    f"Location {location!r}: not a redirect in the page")
            host = nxt.hostname
        if host != page.host:
            raise ReplayIOError(f"more than {MAX_REDIRECTS} redirects")

    t0 = time.perf_counter()
    try:
        follow()
        doc = get(page.host, "/")
        objs = embedded(doc)
        with ThreadPoolExecutor(max_workers=max(1, min(len(objs), 64))) as ex:
            list(ex.map(lambda o: get(*o), objs))
        elapsed = time.perf_counter() - t0
    except (OSError, httpcore.NetworkError, httpcore.ProtocolError,
            httpcore.TimeoutException, RuntimeError) as exc:
        # RuntimeError: hpack's header table is not safe when threads send headers on one
        # connection at the same instant ("deque mutated during iteration"); the load is
        # counted as failed and retried like a dropped connection
        raise ReplayIOError(f"page load over HTTP/2 failed: {exc}") from exc
    finally:
        pool.close()
    return elapsed
