"""A small HTTP/1.1 keep-alive client on asyncio protocols, for the replayer's hot path.

Why not aiohttp here: the replayer sends thousands of tiny requests per second from one
process and must never be the bottleneck; a general client costs several hundred
microseconds of CPU per request, this one a small fraction of that. It does only what the
notary protocol needs: one request at a time per connection, ``Content-Length`` or chunked
bodies, a bounded pool per origin, TLS with an optional SHA-256 certificate pin, and counts
the exact bytes written and read.

Errors are ``HTTPClientError`` with a ``kind``: ``connect`` (could not connect), ``reset``
(the connection dropped mid-request), ``timeout``, ``tls`` (handshake or pin failure),
``protocol`` (an unparseable response), ``too-large``.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import re
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from replay.errors import ReplayInputError, ReplayIOError

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 256 * 1024
ENCODED_CACHE = 65_536  # encoded requests kept (workloads repeat a site many times)
HEAD_CACHE = 256  # parsed response heads kept (a notary sends a few distinct heads a second)
HEAD_CACHE_BYTES = 1024  # only heads this short are kept (a notary's are about 200 bytes)


class HTTPClientError(ReplayIOError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass(slots=True)
class Response:
    """One answer. ``headers`` (names in lower case) may be shared with other answers that
    had the same head, so it is read-only."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    bytes_sent: int
    bytes_received: int
    wire: float  # perf_counter time the request was handed to the socket


# how the callback path hands over an answer: (response, error, stale, the caller's context)
Done = Callable[[Response | None, HTTPClientError | None, bool, Any], None]


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: Any = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.used = False
        # set while a callback-driven exchange (``HTTPClient.start``) owns the connection
        self.on_data: Callable[[], None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def _wake(self) -> None:
        if self.on_data is not None:
            self.on_data()
        elif self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        on_data = self.on_data
        if on_data is not None:
            on_data()
        else:
            self._wake()

    def eof_received(self) -> bool | None:
        self.closed = True
        self._wake()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    async def wait_data(self) -> None:
        loop = asyncio.get_running_loop()
        self.waiter = loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


# control characters other than a tab, which RFC 9110 allows nowhere in a head (line ends
# aside): a lone CR or LF in a value would end a row of the results file early
_CTL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    text = head.decode("latin-1")
    if _CTL.search(text.replace("\r\n", "")):
        raise HTTPClientError("protocol", "control character in the response head")
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise HTTPClientError("protocol", f"bad status line {lines[0][:80]!r}")
    if not (len(parts[1]) == 3 and parts[1].isascii() and parts[1].isdigit()):
        raise HTTPClientError("protocol", f"bad status {parts[1][:20]!r}")
    status = int(parts[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPClientError("protocol", "bad header line")
        headers[name.strip().lower()] = value.strip()
    return status, headers


# a parsed head: status, headers (read-only), the body's length when the answer is the common
# form (a Content-Length of digits, no Transfer-Encoding; else -1), and whether the connection
# stays open after it
_Head = tuple[int, Mapping[str, str], int, bool]
_HEADS: dict[bytes, _Head] = {}


def _parsed_head(head: bytes) -> _Head:
    """:func:`_parse_head` for the callback path, remembered by the head's exact bytes (an
    answer's head repeats: a cached notary answer differs at most in its ``Date``): the
    headers come back read-only, shared by every answer with that head, with what the
    callback path decides from them (see ``_Head``) worked out once."""
    got = _HEADS.get(head)
    if got is None:
        status, headers = _parse_head(head)
        cl = headers.get("content-length")
        # ASCII digits only: str.isdigit() also takes the superscripts of latin-1 ("\xb2"),
        # which int() refuses
        length = -1
        if cl is not None and cl.isascii() and cl.isdigit() and \
                "transfer-encoding" not in headers:
            length = int(cl)
        keep = headers.get("connection", "").lower() != "close"
        got = (status, MappingProxyType(headers), length, keep)
        if len(head) <= HEAD_CACHE_BYTES:
            if len(_HEADS) >= HEAD_CACHE:
                _HEADS.clear()
            _HEADS[head] = got
    return got


class Origin:
    """A bounded keep-alive pool for one ``scheme://host:port``."""

    def __init__(self, url: str, limit: int, tls: ssl.SSLContext | None,
                 pin_sha256: bytes | None, connect_timeout: float) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ReplayInputError(f"bad URL {url!r}")
        if limit < 1:
            raise ReplayInputError("connection limit must be >= 1")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")
        self.host_header = u.netloc.encode("ascii")
        self.tls = tls if u.scheme == "https" else None
        if u.scheme == "https" and self.tls is None:
            self.tls = ssl.create_default_context()
        self.pin = pin_sha256
        self.limit = limit
        self.connect_timeout = connect_timeout
        self.idle: collections.deque[_Conn] = collections.deque()
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def _connect(self) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Conn, self.host, self.port, ssl=self.tls,
                    server_hostname=self.host if self.tls else None)
        except TimeoutError:
            raise HTTPClientError("timeout", "connect timed out") from None
        except ssl.SSLError as exc:
            raise HTTPClientError("tls", str(exc)) from None
        except OSError as exc:
            raise HTTPClientError("connect", str(exc)) from None
        if self.pin is not None:
            sslobj = conn.transport.get_extra_info("ssl_object")
            der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
            if der is None or hashlib.sha256(der).digest() != self.pin:
                conn.close()
                raise HTTPClientError("tls", "server certificate does not match the pin")
        return conn

    async def warm(self, n: int) -> int:
        """Open up to ``n`` connections at once (within the limit) and keep them idle, so
        that the first requests of a run do not each wait for a connection of their own.
        Returns how many opened; one that fails is not an error here (the requests that
        follow meet the failure again, and record it)."""
        n = min(n, self.limit - self.open)
        if n <= 0:
            return 0
        tasks = [asyncio.ensure_future(self._connect()) for _ in range(n)]
        opened = 0
        try:
            await asyncio.wait(tasks)
        finally:  # cancelled or not, what did open is pooled (and closed with the client)
            for task in tasks:
                if not task.done():
                    task.cancel()
                elif not task.cancelled() and task.exception() is None:
                    self.open += 1
                    self.idle.append(task.result())
                    opened += 1
        return opened

    def take_idle(self) -> _Conn | None:
        """An idle keep-alive connection, without waiting; None when there is none."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed:
                return conn
            self.open -= 1
        return None

    async def acquire(self) -> _Conn:
        while True:
            conn = self.take_idle()
            if conn is not None:
                return conn
            if self.open < self.limit:
                self.open += 1
                try:
                    return await self._connect()
                except BaseException:
                    self.open -= 1
                    self._wake()
                    raise
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self.waiters:
                    self.waiters.remove(fut)

    def _wake(self) -> None:
        while self.waiters:
            fut = self.waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def release(self, conn: _Conn, reusable: bool) -> None:
        if reusable and not conn.closed:
            conn.used = True
            self.idle.append(conn)
        else:
            conn.close()
            self.open -= 1
        self._wake()

    def close(self) -> None:
        while self.idle:
            self.idle.pop().close()


class HTTPClient:
    """Requests to several origins; one bounded pool each."""

    def __init__(self, limit_per_origin: int = 256, tls: ssl.SSLContext | None = None,
                 pin_sha256: bytes | None = None, connect_timeout: float = 5.0) -> None:
        self.limit = limit_per_origin
        self.tls = tls
        self.pin = pin_sha256
        self.connect_timeout = connect_timeout
        self.origins: dict[str, Origin] = {}
        self._encoded: dict[tuple[bytes, str, str, str, bytes, str], bytes] = {}

    def origin(self, base: str) -> Origin:
        o = self.origins.get(base)
        if o is None:
            o = Origin(base, self.limit, self.tls, self.pin, self.connect_timeout)
            self.origins[base] = o
        return o

    async def warm(self, bases: Sequence[str], per_origin: int) -> int:
        """:meth:`Origin.warm` for every base at once; the connections opened in all."""
        counts = await asyncio.gather(*(self.origin(b).warm(per_origin) for b in bases))
        return sum(counts)

    async def request(self, base: str, method: str, path: str, body: bytes = b"",
                      content_type: str = "application/x-www-form-urlencoded") -> Response:
        """One request; retried once on a fresh connection if a reused one was stale."""
        origin = self.origin(base)
        for attempt in (0, 1):
            conn = await origin.acquire()
            reused = conn.used
            try:
                resp = await self._exchange(origin, conn, method, path, body, content_type)
            except HTTPClientError as exc:
                origin.release(conn, False)
                if exc.kind == "reset" and reused and attempt == 0 and not conn.buf:
                    continue
                raise
            except BaseException:
                origin.release(conn, False)
                raise
            keep = resp.headers.get("connection", "").lower() != "close"
            origin.release(conn, keep)
            return resp
        raise HTTPClientError("reset", "connection dropped")  # pragma: no cover

    def _request_bytes(self, origin: Origin, method: str, path: str, body: bytes,
                       content_type: str) -> bytes:
        key = (origin.host_header, origin.base_path, method, path, body, content_type)
        data = self._encoded.get(key)
        if data is not None:
            return data
        head = [f"{method} {origin.base_path}{path} HTTP/1.1".encode("ascii"),
                b"Host: " + origin.host_header, b"User-Agent: converge-replay"]
        if method == "POST":
            head.append(b"Content-Type: " + content_type.encode("ascii"))
            head.append(b"Content-Length: %d" % len(body))
        data = b"\r\n".join(head) + b"\r\n\r\n" + (body if method == "POST" else b"")
        if len(self._encoded) >= ENCODED_CACHE:
            self._encoded.clear()
        self._encoded[key] = data
        return data

    async def _exchange(self, origin: Origin, conn: _Conn, method: str, path: str,
                        body: bytes, content_type: str) -> Response:
        data = self._request_bytes(origin, method, path, body, content_type)
        conn.buf.clear()
        if conn.closed:
            raise HTTPClientError("reset", "connection closed")
        conn.transport.write(data)
        return await _read_response(conn, method, len(data), time.perf_counter())

    def encode(self, base: str, method: str, path: str, body: bytes = b"",
               content_type: str = "application/x-www-form-urlencoded") -> bytes:
        """The bytes of one request to ``base`` (what :meth:`request` writes), for
        :meth:`start_encoded`."""
        return self._request_bytes(self.origin(base), method, path, body, content_type)

    def start(self, base: str, method: str, path: str, body: bytes, done: Done,
              context: Any = None,
              content_type: str = "application/x-www-form-urlencoded") -> Exchange | None:
        """Send one request at once on an idle keep-alive connection, without a task: the
        response is parsed from the connection's callbacks and handed to ``done(response,
        error, stale, context)`` (``stale``: a reused connection dropped before any answer,
        worth one retry). None when no connection is idle (then use :meth:`request`)."""
        return self.start_encoded(base, method,
                                  self.encode(base, method, path, body, content_type),
                                  done, context)

    def start_encoded(self, base: str, method: str, data: bytes, done: Done,
                      context: Any = None) -> Exchange | None:
        """:meth:`start` with the request's bytes from :meth:`encode` (a caller that sends
        the same request many times keeps them)."""
        origin = self.origins.get(base) or self.origin(base)
        conn = origin.take_idle()
        if conn is None:
            return None
        conn.buf.clear()
        conn.transport.write(data)
        ex = Exchange(origin, conn, method, len(data), time.perf_counter(), done, context)
        conn.on_data = ex.feed
        return ex

    def close(self) -> None:
        for o in self.origins.values():
            o.close()


async def _read_response(conn: _Conn, method: str, sent: int, wire: float) -> Response:
    """Read one answer from ``conn`` (the coroutine path; every form the protocol allows)."""
    buf = conn.buf
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > MAX_HEADER_BYTES:
            raise HTTPClientError("too-large", "response header too large")
        if conn.closed:
            raise HTTPClientError("reset", "connection closed before a response")
        await conn.wait_data()
    status, headers = _parse_head(bytes(buf[:end]))
    start = end + 4
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body_out = await _chunked(conn, start)
        received = len(conn.buf)
    else:
        if "content-length" in headers:
            cl = headers["content-length"]
            # digits only (int() would also take a sign, underscores and latin-1's
            # superscripts, and a negative length would read until close)
            if not (cl.isascii() and cl.isdigit()):
                raise HTTPClientError("protocol", "bad Content-Length")
            length = int(cl)
        elif method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            length = 0
        else:
            length = -1  # until close
        if length > MAX_BODY_BYTES:
            raise HTTPClientError("too-large", "response body too large")
        while length < 0 or len(buf) - start < length:
            if conn.closed:
                if length < 0:
                    break
                raise HTTPClientError("reset", "connection closed mid-body")
            if len(buf) - start > MAX_BODY_BYTES:
                raise HTTPClientError("too-large", "response body too large")
            await conn.wait_data()
        stop = len(buf) if length < 0 else start + length
        body_out = bytes(buf[start:stop])
        received = stop
        if length < 0:
            headers["connection"] = "close"
    return Response(status, headers, body_out, sent, received, wire)


async def _chunked(conn: _Conn, pos: int) -> bytes:
    """A chunked body starting at ``pos`` of the connection's buffer."""
    out = bytearray()
    buf = conn.buf
    while True:
        while buf.find(b"\r\n", pos) < 0:
            if conn.closed:
                raise HTTPClientError("reset", "connection closed mid-chunk")
            await conn.wait_data()
        eol = buf.find(b"\r\n", pos)
        try:
            size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        except ValueError:
            raise HTTPClientError("protocol", "bad chunk size") from None
        if len(out) + size > MAX_BODY_BYTES:
            raise HTTPClientError("too-large", "response body too large")
        need = eol + 2 + size + 2
        while len(buf) < need:
            if conn.closed:
                raise HTTPClientError("reset", "connection closed mid-chunk")
            await conn.wait_data()
        out += buf[eol + 2:eol + 2 + size]
        pos = need
        if size == 0:
            return bytes(out)


class Exchange:
    """One request in flight on the callback path (:meth:`HTTPClient.start`).

    The common answer (a head and a ``Content-Length`` body, complete in the buffer) is
    parsed right in ``data_received``; anything else (chunked, read until close, a closed
    connection, an oversized head) is handed to the coroutine reader, which raises the same
    typed errors as :meth:`HTTPClient.request`.
    """

    __slots__ = ("origin", "conn", "method", "sent", "wire", "done", "context", "finished")

    def __init__(self, origin: Origin, conn: _Conn, method: str, sent: int, wire: float,
                 done: Done, context: Any) -> None:
        self.origin = origin
        self.conn = conn
        self.method = method
        self.sent = sent
        self.wire = wire
        self.done = done
        self.context = context
        self.finished = False

    def feed(self) -> None:
        conn = self.conn
        buf = conn.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if conn.closed or len(buf) > MAX_HEADER_BYTES:
                self._slow()
            return
        try:
            status, headers, length, keep = _parsed_head(bytes(buf[:end]))
        except HTTPClientError as exc:
            self._finish(None, exc)
            return
        if length < 0:
            self._slow()
            return
        if length > MAX_BODY_BYTES:
            self._finish(None, HTTPClientError("too-large", "response body too large"))
            return
        stop = end + 4 + length
        if len(buf) < stop:
            if conn.closed:
                self._slow()
            return
        self._finish(Response(status, headers, bytes(buf[end + 4:stop]), self.sent, stop,
                              self.wire), None, keep)

    def _slow(self) -> None:
        self.conn.on_data = None
        task = asyncio.get_running_loop().create_task(
            _read_response(self.conn, self.method, self.sent, self.wire))
        task.add_done_callback(self._slow_done)

    def _slow_done(self, task: asyncio.Task[Response]) -> None:
        if task.cancelled():
            self._finish(None, HTTPClientError("reset", "cancelled"))
            return
        exc = task.exception()
        if exc is None:
            self._finish(task.result(), None)
        elif isinstance(exc, HTTPClientError):
            self._finish(None, exc)
        else:
            self._finish(None, HTTPClientError("reset", str(exc)))

    def fail(self, exc: HTTPClientError) -> None:
        """End the exchange with an error (a timeout): the connection is closed."""
        self._finish(None, exc)

    def _finish(self, resp: Response | None, exc: HTTPClientError | None,
                keep: bool | None = None) -> None:
        """``keep``: the connection may serve another request (None: decided from the
        answer's headers; never after an error)."""
        if self.finished:
            return
        self.finished = True
        conn = self.conn
        conn.on_data = None
        stale = (exc is not None and exc.kind == "reset" and not conn.buf)
        if resp is None:
            keep = False
        elif keep is None:
            keep = resp.headers.get("connection", "").lower() != "close"
        self.origin.release(conn, keep)
        self.done(resp, exc, stale, self.context)
