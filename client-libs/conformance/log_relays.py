"""Relays in front of a real notary for the transparency cases (docs/transparency.md,
"Clients"): each presents the notary's own certificate (so the pin holds), forwards the
client's request unchanged and passes the notary's answer through one change of its
``transparency`` member; the signed statement's bytes are never touched, so every check of
the statement passes and only the member can fail.

* ``record``: no change; it keeps the requests, so a case can see that proofs were asked for;
* ``strip``: the member removed (a client must count the match as ``log-missing``);
* ``alter``: the first proof hash's first byte flipped (``log-proof``);
* ``other-entry``: the member replaced by the notary's member for another logged entry of the
  same log, with its own valid proof (the same certificate at another port: ``log-entry``);
* ``custom``: the answer's body passed through ``custom`` (for other tests' own changes).

An answer without a member (the client did not ask for a proof) passes unchanged.
"""

from __future__ import annotations

import base64
import json
import socket
import socketserver
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopback import read_request, tls_server

MEMBER = b',"transparency":'
MODES = ("record", "strip", "alter", "other-entry", "custom")


def ask_notary(port: int, request: bytes) -> bytes:
    """Send ``request`` to the notary on 127.0.0.1:``port`` (no pin: the relay's own side)
    and return the whole response."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(
        raw
    ) as up:
        up.sendall(request)
        while len(data) < 1 << 20:
            try:
                chunk = up.recv(65536)
            except ssl.SSLError:
                break
            if not chunk:
                break
            data += chunk
    return data


def change_member(body: bytes, change: Callable[[dict[str, Any]], None] | None) -> bytes:
    """``body`` with its member changed by ``change`` (``None``: removed)."""
    cut = body.find(MEMBER)
    if cut < 0:
        return body
    if change is None:
        return body[:cut] + b"}"
    member = json.loads(body[cut + len(MEMBER) : -1])
    change(member)
    return body[:cut] + MEMBER + json.dumps(member, separators=(",", ":")).encode() + b"}"


def asks_for_proof(request: bytes) -> bool:
    """Whether an extended request carries ``"transparency": true``."""
    head, _, body = request.partition(b"\r\n\r\n")
    if not head.startswith(b"POST /v2/answer"):
        return False
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("transparency") is True


def _flip_first_hash(member: dict[str, Any]) -> None:
    proof = member.get("proof")
    if not isinstance(proof, list) or not proof:
        member["proof"] = [base64.b64encode(bytes(32)).decode()]  # one hash too many
        return
    h = bytearray(base64.b64decode(proof[0]))
    h[0] ^= 0x01
    proof[0] = base64.b64encode(bytes(h)).decode()


@dataclass
class LogRelay:
    mode: str
    upstream_port: int
    other_request: bytes = b""  # other-entry: the request whose answer's member is swapped in
    requests: list[bytes] = field(default_factory=list)
    custom: Callable[[bytes], bytes] | None = None

    def rewrite(self, body: bytes) -> bytes:
        if self.custom is not None:
            return self.custom(body)
        if self.mode == "strip":
            return change_member(body, None)
        if self.mode == "alter":
            return change_member(body, _flip_first_hash)
        if self.mode == "other-entry":
            other = ask_notary(self.upstream_port, self.other_request).partition(b"\r\n\r\n")[2]
            cut = other.find(MEMBER)
            if cut < 0:
                return body  # the notary could not prove the other entry: nothing to swap in
            theirs = json.loads(other[cut + len(MEMBER) : -1])
            return change_member(body, lambda m: m.update(theirs))
        return body

    def handle(self, s: ssl.SSLSocket) -> None:
        request = read_request(s)
        self.requests.append(request)
        # one exchange per connection on both sides (a client may ask to keep it open)
        upstream = request.replace(b"\r\nConnection: keep-alive\r\n",
                                   b"\r\nConnection: close\r\n", 1)
        head, _, body = ask_notary(self.upstream_port, upstream).partition(b"\r\n\r\n")
        body = self.rewrite(body)
        lines = [h for h in head.split(b"\r\n")
                 if not h.lower().startswith((b"content-length:", b"connection:"))]
        s.sendall(b"\r\n".join(lines) + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def proof_request(host: str, port: int, sha256: str) -> bytes:
    """An extended request asking for a proof (what ``other-entry`` asks the notary)."""
    body = json.dumps({"host": host, "port": port, "fingerprint": sha256, "alg": "sha256",
                       "transparency": True}).encode()
    return (b"POST /v2/answer HTTP/1.0\r\nContent-Type: application/json\r\n"
            b"Accept: application/vnd.converge.answer+json\r\nContent-Length: %d\r\n\r\n"
            % len(body)) + body


def start_log_relay(relay: LogRelay, data_dir: Path) -> socketserver.TCPServer:
    """Serve ``relay`` on 127.0.0.1 with the certificate and key in ``data_dir``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(data_dir / "notary.pem"), str(data_dir / "notary.key"))
    return tls_server(("127.0.0.1", 0), ctx, relay.handle)


__all__ = ["MODES", "LogRelay", "ask_notary", "asks_for_proof", "change_member", "proof_request",
           "start_log_relay"]
