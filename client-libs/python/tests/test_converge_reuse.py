"""What a check keeps between checks, over real TLS on 127.0.0.1: a synchronous check runs on
its thread's event loop (kept, not one per check), and a connection to a notary host offers
the TLS session of the last connection to that host whose certificate matched the pin. The
pin is part of the key: a bundle pinning another certificate at the same address gets a full
handshake and its own pin check.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from converge import Client, notary_io
from converge import client as client_module
from converge.bundle import NotaryBundle
from converge.config import Config
from converge_fixtures import FakeNotary, TlsTarget, in_threads, make_config


@dataclass
class RecordingNotary(FakeNotary):
    """A legacy notary that records, per connection, whether the client resumed a session."""

    resumed: list[bool] = field(default_factory=list)  # per connection that sent a request

    def _answer(self, s: ssl.SSLSocket, key: Any) -> None:
        asked = len(self.requests)
        super()._answer(s, key)
        if len(self.requests) > asked:
            self.resumed.append(s.session_reused)


@pytest.fixture()
def offered(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bool]]:
    """Per notary connection: the pin of its context and whether it offered a session."""
    seen: list[tuple[bytes, bool]] = []
    open_tls = notary_io.notary_tls.open_tls

    async def recording(*args: Any, **kw: Any) -> Any:
        pin = next(k[2] for k, v in notary_io._PINNED.items() if v.ctx is args[2])
        seen.append((pin, kw.get("session") is not None))
        return await open_tls(*args, **kw)

    monkeypatch.setattr(notary_io.notary_tls, "open_tls", recording)
    return seen


@pytest.fixture()
def notary(pki: dict[str, Any], target: TlsTarget) -> Any:
    n = RecordingNotary(
        pki["notaries"][0], pki["tmp"], seen={f"127.0.0.1:{target.port}": pki["target"]}
    ).start()
    yield n
    n.stop()


def _config(tmp: Path, bundles: list[NotaryBundle]) -> Config:
    """One notary, no local cache: every check asks it."""
    return dataclasses.replace(make_config(tmp, bundles), db=None, quorum=1)


def _votes(verdict: Any) -> list[tuple[str, str]]:
    return [(r.vote, r.kind) for r in verdict.results]


def test_second_connection_resumes_the_pinned_session(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notary: RecordingNotary
) -> None:
    cfg = _config(tmp_path, [notary.bundle("A")])
    with Client(cfg) as c:
        for _ in range(3):
            v = c.check("127.0.0.1", target.port, pki["target"].sha1)
            assert v and _votes(v) == [("success", "listed")]
    # the first handshake is full, the next ones resume its session
    assert notary.resumed == [False, True, True]


def test_another_pin_at_the_same_address_gets_no_session(
    tmp_path: Path,
    pki: dict[str, Any],
    target: TlsTarget,
    notary: RecordingNotary,
    offered: list[tuple[bytes, bool]],
) -> None:
    genuine = _config(tmp_path, [notary.bundle("A")])
    other_pin = _config(
        tmp_path, [notary.bundle("A", cert_pem=pki["notaries"][1].cert_pem)]
    )
    with Client(genuine) as g, Client(other_pin) as o:
        assert g.check("127.0.0.1", target.port, pki["target"].sha1)
        v = o.check("127.0.0.1", target.port, pki["target"].sha1)
        assert not v and _votes(v) == [("failure", "pin")]
        # twin: the genuine pin's next connection resumes
        assert g.check("127.0.0.1", target.port, pki["target"].sha1)
    # the connection pinned to the other certificate offered no session, and the pin
    # refused it before any request; the genuine pin's second connection resumed
    genuine_pin = genuine.notaries()[0].hosts[0].pin.digest
    other = other_pin.notaries()[0].hosts[0].pin.digest
    assert offered == [(genuine_pin, False), (other, False), (genuine_pin, True)]
    assert notary.resumed == [False, True]
    assert len(notary.requests) == 2


def test_a_failed_pin_leaves_no_session_to_resume(
    tmp_path: Path,
    pki: dict[str, Any],
    target: TlsTarget,
    notary: RecordingNotary,
    offered: list[tuple[bytes, bool]],
) -> None:
    other_pin = _config(
        tmp_path, [notary.bundle("A", cert_pem=pki["notaries"][2].cert_pem)]
    )
    with Client(other_pin) as o:
        for _ in range(2):
            v = o.check("127.0.0.1", target.port, pki["target"].sha1)
            assert not v and _votes(v) == [("failure", "pin")]
    # no session offered the second time: the first connection's pin failed
    assert [has for _, has in offered] == [False, False]
    assert notary.requests == []


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_what_a_check_aborted_last_has_lost_its_connection_when_it_returns(
    notary: RecordingNotary, monkeypatch: pytest.MonkeyPatch, loop_kind: str
) -> None:
    """A thread loop's run ends with one more turn, so a TLS connection aborted as the
    coroutine's last act has delivered its connection_lost (its reader is at EOF) when the
    run returns, on asyncio's loop and on uvloop's. Twin: run to completion without that
    turn, asyncio's loop has not yet delivered it, so the assertion can fail."""
    if loop_kind == "asyncio":
        monkeypatch.setattr(client_module, "_new_loop", asyncio.new_event_loop)
    else:
        pytest.importorskip("uvloop")
    client_module._close_thread_loop()  # this thread's next run makes a loop of that kind

    async def abort_last() -> asyncio.StreamReader:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", notary.port, ssl=notary_io.notary_ssl_context())
        writer.transport.abort()
        return reader

    try:
        for _ in range(2):
            reader = client_module._run_on_thread_loop(abort_last())  # type: ignore[arg-type]
            assert reader.at_eof()  # type: ignore[attr-defined]
        if loop_kind == "asyncio":
            loop = client_module._THREAD_LOOP.holder.loop
            reader = loop.run_until_complete(abort_last())
            assert not reader.at_eof()  # the twin: not yet without that turn
            loop.call_soon(loop.stop)
            loop.run_forever()
            assert reader.at_eof()
    finally:
        client_module._close_thread_loop()


def test_each_thread_keeps_its_own_loop(
    tmp_path: Path, pki: dict[str, Any], target: TlsTarget, notary: RecordingNotary
) -> None:
    cfg = _config(tmp_path, [notary.bundle("A")])
    loops: list[asyncio.AbstractEventLoop] = []

    def work() -> None:
        for _ in range(2):
            assert c.check("127.0.0.1", target.port, pki["target"].sha1)
            loops.append(client_module._THREAD_LOOP.holder.loop)

    with Client(cfg) as c:
        errors = in_threads(work, 2, 30)
    assert not errors
    assert len(loops) == 4
    # the same loop for both checks of one thread, another loop in the other thread
    assert loops[0] is not None and len({id(x) for x in loops}) == 2
    # a thread's loop is closed when the thread ends
    assert all(x.is_closed() for x in loops)


# ---------------------------------------------------------------- keep-alive framing (pure)


@pytest.mark.parametrize(
    "head,expected",
    [
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nConnection: keep-alive\r\n\r\n", (12, True)),
        (b"HTTP/1.0 200 OK\r\ncontent-length:  12 \r\nCONNECTION: Keep-Alive\r\n\r\n", (12, True)),
        # any doubt: read to the end of the connection and do not keep it
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\n\r\n", (12, False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nConnection: close\r\n\r\n", (12, False)),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n", (None, True)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nContent-Length: 12\r\n"
         b"Connection: keep-alive\r\n\r\n", (None, False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: -1\r\nConnection: keep-alive\r\n\r\n",
         (None, False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 1e3\r\nConnection: keep-alive\r\n\r\n",
         (None, False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 9999999999999\r\nConnection: keep-alive\r\n\r\n",
         (None, False)),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 12\r\nTransfer-Encoding: chunked\r\n"
         b"Connection: keep-alive\r\n\r\n", (None, False)),
    ],
)
def test_only_one_plain_length_and_keep_alive_frame_a_kept_answer(
    head: bytes, expected: tuple[int | None, bool]
) -> None:
    assert notary_io._framing(head) == expected


class _PinnedWriter:
    """The writer side of a connection whose certificate is ``der`` (records what is sent)."""

    def __init__(self, der: bytes) -> None:
        self.der, self.sent = der, b""

    def peer_certificate(self) -> bytes:
        return self.der

    def write(self, data: bytes) -> None:
        self.sent += data

    async def drain(self) -> None:
        return None


def _exchange(answer: bytes, *, framed: bool, max_bytes: int = 4096) -> tuple[bytes | None, bool]:
    import trustme
    from converge.bundle import parse_bundle
    from converge_fixtures import identity

    ident = identity(trustme.CA(), "127.0.0.1")
    nh = parse_bundle({"version": 1, "name": "X", "hosts": [
        {"host": "127.0.0.1", "ssl_port": 1, "http_port": 80,
         "certificate": ident.cert_pem}]}).hosts[0]

    async def run() -> tuple[bytes | None, bool]:
        reader = asyncio.StreamReader(limit=max_bytes + 1)
        reader.feed_data(answer)
        reader.feed_eof()
        writer: Any = _PinnedWriter(ident.der)
        return await notary_io._exchange(reader, writer, nh, "x", b"REQ", max_bytes,
                                         framed=framed)

    return asyncio.run(run())


def test_a_kept_answer_is_read_to_its_length_and_no_further() -> None:
    body = b'{"a": 1}'
    head = b"HTTP/1.0 200 OK\r\nContent-Length: 8\r\nConnection: keep-alive\r\n\r\n"
    raw, reusable = _exchange(head + body + b"EXTRA", framed=True)
    assert (raw, reusable) == (head + body, True)
    # twin: without framing (legacy, relayed) everything to the end is read, nothing kept
    raw, reusable = _exchange(head + body + b"EXTRA", framed=False)
    assert (raw, reusable) == (head + body + b"EXTRA", False)


def test_a_hostile_length_is_refused_before_any_read_and_a_short_body_is_not_kept() -> None:
    from converge.errors import ResponseError

    head = b"HTTP/1.0 200 OK\r\nContent-Length: 100000\r\nConnection: keep-alive\r\n\r\n"
    with pytest.raises(ResponseError):
        _exchange(head + b"x" * 10, framed=True)
    short = b"HTTP/1.0 200 OK\r\nContent-Length: 50\r\nConnection: keep-alive\r\n\r\n"
    raw, reusable = _exchange(short + b"x" * 10, framed=True)
    assert raw == short + b"x" * 10 and reusable is False  # the parser names the truncation
    # twin: the same length within the limit is read and kept
    raw, reusable = _exchange(short + b"x" * 50, framed=True)
    assert raw == short + b"x" * 50 and reusable is True
