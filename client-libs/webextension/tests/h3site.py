"""An HTTP/3 site for the Firefox tests (aioquic): python h3site.py HOST PORT CERT KEY TEXT.

Listens on UDP HOST:PORT; each request is logged on stdout as "METHOD PATH cookie:yes|no 3";
"ready" once it listens. Every request gets a small page saying TEXT over HTTP/3; /setcookie
also sets the session cookie.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import serve
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import H3Event, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ProtocolNegotiated, QuicEvent

TEXT = ""


class Site(QuicConnectionProtocol):
    h3: H3Connection | None = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ProtocolNegotiated) and event.alpn_protocol in H3_ALPN:
            self.h3 = H3Connection(self._quic)
        if self.h3 is None:
            return
        for ev in self.h3.handle_event(event):
            self.answer(self.h3, ev)

    def answer(self, h3: H3Connection, ev: H3Event) -> None:
        if not isinstance(ev, HeadersReceived):
            return
        headers = dict(ev.headers)
        method = headers.get(b":method", b"").decode()
        path = headers.get(b":path", b"").decode()
        cookie = "yes" if headers.get(b"cookie") else "no"
        print(f"{method} {path} cookie:{cookie} 3", flush=True)
        body = f"<!doctype html><title>{TEXT}</title><p id='page'>{TEXT} over HTTP/3</p>".encode()
        extra = []
        if path.startswith("/setcookie"):
            extra = [(b"set-cookie", b"session=SECRET-SESSION; Secure; SameSite=None; Path=/")]
        h3.send_headers(
            ev.stream_id,
            [
                (b":status", b"200"),
                (b"content-type", b"text/html; charset=utf-8"),
                (b"cache-control", b"no-store"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
            end_stream=method == "HEAD",
        )
        if method != "HEAD":
            h3.send_data(ev.stream_id, body, end_stream=True)
        self.transmit()


async def main(host: str, port: int, cert: str, key: str) -> None:
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    config.load_cert_chain(cert, key)
    server = await serve(host, port, configuration=config, create_protocol=Site)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    TEXT = sys.argv[5]
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]))
