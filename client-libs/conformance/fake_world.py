"""Fake notaries, HTTPS sites and CONNECT proxies on 127.0.0.1, in a process of their own, for
the unit tests of client libraries whose language has no threads to run them in-process (PHP,
Perl, Lua). Real TLS with the vectors' test-only keys; each notary answers every request the
same way (its mode), in either format.

    python fake_world.py NOTARY_SPEC... [--site NAME=genuine|forged]...
                         [--proxy NAME=honest|DIVERT_SITE]...

NOTARY_SPEC is ``NAME:MODE`` with MODE one of listed, mismatch, hang, garbage, extended,
extended-stale, status503; the cert is the notary test cert (``NAME:MODE:other`` uses the other
one). It prints one JSON line: {"notaries": [{name, port, bundle, bundle_extended}], "sites":
{name: port}, "proxies": {name: port}, "genuine": FP, "forged": FP}, then reads commands on
stdin, one per line, answering each with one JSON line:

    count               request counts: {"notaries": [..], "sites": {..},
                        "proxies": {name: [CONNECT lines]}}
    requests I          the requests notary I read
    delay I MS          notary I waits MS milliseconds before answering
    sees I FP           notary I sees certificate FP for every target
    quit                (or end of input) stops everything
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

KEYS = Path(__file__).resolve().parents[1] / "vectors" / "keys"
CERT = (KEYS / "test-notary-cert.pem").read_text()
KEY = (KEYS / "test-notary-key.pem").read_text()
OTHER_CERT = (KEYS / "test-other-cert.pem").read_text()
OTHER_KEY = (KEYS / "test-other-key.pem").read_text()


def colon_hex(b: bytes) -> str:
    return ":".join(f"{x:02X}" for x in b)


def der(pem: str) -> bytes:
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(serialization.Encoding.DER)


GENUINE = colon_hex(hashlib.sha1(der(CERT)).digest())
FORGED = colon_hex(hashlib.sha1(der(OTHER_CERT)).digest())
GENUINE_256 = colon_hex(hashlib.sha256(der(CERT)).digest())


def b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def canonical(v: Any) -> str:
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def server_context(cert: str, key: str) -> ssl.SSLContext:
    d = Path(tempfile.mkdtemp(prefix="fake-world-"))
    (d / "c.pem").write_text(cert)
    (d / "k.pem").write_text(key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(d / "c.pem", d / "k.pem")
    return ctx


async def read_request(reader: asyncio.StreamReader) -> str | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    length = 0
    for line in head.decode("latin-1").split("\r\n"):
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1].strip() or 0)
    body = await reader.readexactly(length) if length else b""
    return (head + body).decode("latin-1")


class Notary:
    def __init__(self, name: str, mode: str, other: bool) -> None:
        self.name, self.mode = name, mode
        self.cert, key = (OTHER_CERT, OTHER_KEY) if other else (CERT, KEY)
        self.rsa = serialization.load_pem_private_key(key.encode(), None)
        assert isinstance(self.rsa, rsa.RSAPrivateKey)
        self.ed = ed25519.Ed25519PrivateKey.generate()
        self.ed_raw = self.ed.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.kid = hashlib.sha256(self.ed_raw).digest()[:8].hex()
        self.requests: list[str] = []
        self.delay = 0.0
        self.sees = GENUINE
        self.ctx = server_context(self.cert, key)
        self.port = 0

    def bundle(self, extended: bool) -> str:
        doc: dict[str, Any] = {
            "version": 1,
            "name": self.name,
            "hosts": [
                {
                    "host": "127.0.0.1",
                    "ssl_port": self.port,
                    "http_port": self.port,
                    "certificate": self.cert,
                }
            ],
        }
        if extended:
            doc["protocols"] = ["converge-answer/1"]
            doc["signing_keys"] = [
                {
                    "alg": "ed25519",
                    "key_id": self.kid,
                    "public_key": b64url(self.ed_raw),
                    "status": "current",
                }
            ]
        return json.dumps(doc, indent=2)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await read_request(reader)
            if req is None:
                return
            self.requests.append(req)
            if self.delay:
                await asyncio.sleep(self.delay)
            reply = self.answer(req)
            if reply is None:
                await asyncio.sleep(30)  # hang (the client gives up first)
                return
            writer.write(reply.encode("latin-1") if isinstance(reply, str) else reply)
            await writer.drain()
        except (ConnectionError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    def answer(self, req: str) -> str | bytes | None:
        if self.mode == "hang":
            return None
        if self.mode == "garbage":
            return "SSH-2.0-nope\r\n\r\n"
        if self.mode == "status503":
            return "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
        body_text = req.split("\r\n\r\n", 1)[1]
        if req.startswith("POST /v2/answer"):
            body = json.loads(body_text)
            seen = GENUINE_256 if body.get("alg") == "sha256" else self.sees
            verdict = "match" if body.get("fingerprint") == seen else "mismatch"
            request = {"fingerprint": body.get("fingerprint"), "alg": body.get("alg")}
            if body.get("nonce"):
                request["nonce"] = body["nonce"]
            stmt = {
                "type": "converge-answer/1",
                "key_id": self.kid,
                "verdict": verdict,
                "detail": "",
                "answered_at": int(time.time()) - (3600 if self.mode == "extended-stale" else 0),
                "target": {
                    "host": str(body.get("host", "")).lower(),
                    "port": body.get("port"),
                    "ip": body.get("ip"),
                },
                "request": request,
                "cache": "miss",
                "observations": [],
            }
            sig = b64url(self.ed.sign(canonical(stmt).encode()))
            answer = canonical(
                {
                    "statement": stmt,
                    "signature": {"alg": "ed25519", "key_id": self.kid, "value": sig},
                }
            ).encode()
            status = "200 OK" if verdict == "match" else "409 Conflict"
            return (
                f"HTTP/1.0 {status}\r\nContent-Type: application/vnd.converge.answer+json\r\n"
                f"Content-Length: {len(answer)}\r\n\r\n"
            ).encode() + answer
        if self.mode in ("extended", "extended-stale"):
            return "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        fp = body_text.removeprefix("fingerprint=")
        status = 409 if self.mode == "mismatch" or fp != self.sees else 200
        lst = (
            '{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, '
            f'"fingerprint": "{self.sees}"}}]}}'
        )
        sig = base64.b64encode(
            self.rsa.sign(lst.encode(), padding.PKCS1v15(), hashes.SHA1())
        ).decode()
        out = f'{lst[:-1]}, "signature": "{sig}"}}'
        return (
            f"HTTP/1.0 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(out)}\r\n\r\n" + out
        )


class Site:
    def __init__(self, kind: str) -> None:
        cert, key = (CERT, KEY) if kind == "genuine" else (OTHER_CERT, OTHER_KEY)
        self.body = kind.encode()
        self.ctx = server_context(cert, key)
        self.requests = 0
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if await read_request(reader) is None:
                return
            self.requests += 1
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                % (len(self.body), self.body)
            )
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


class Proxy:
    def __init__(self, divert: int | None) -> None:
        self.divert = divert
        self.asked: list[str] = []
        self.port = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            line = head.split("\r\n")[0]
            self.asked.append(line)
            port = self.divert or int(line.split(" ")[1].rsplit(":", 1)[1])
            ur, uw = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

            async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                try:
                    while data := await r.read(65536):
                        w.write(data)
                        await w.drain()
                except ConnectionError:
                    pass
                finally:
                    w.close()

            await asyncio.gather(pipe(reader, uw), pipe(ur, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()


async def main(argv: list[str]) -> None:
    notaries: list[Notary] = []
    sites: dict[str, Site] = {}
    proxies: dict[str, tuple[Proxy, str]] = {}
    it = iter(argv)
    for a in it:
        if a == "--site":
            name, kind = next(it).split("=", 1)
            sites[name] = Site(kind)
        elif a == "--proxy":
            name, target = next(it).split("=", 1)
            proxies[name] = (Proxy(None), target)
        else:
            name, mode, *rest = a.split(":")
            notaries.append(Notary(name, mode, rest == ["other"]))
    servers = []
    for n in notaries:
        s = await asyncio.start_server(n.serve, "127.0.0.1", 0, ssl=n.ctx)
        n.port = s.sockets[0].getsockname()[1]
        servers.append(s)
    for site in sites.values():
        s = await asyncio.start_server(site.serve, "127.0.0.1", 0, ssl=site.ctx)
        site.port = s.sockets[0].getsockname()[1]
        servers.append(s)
    for proxy, target in proxies.values():
        proxy.divert = None if target == "honest" else sites[target].port
        s = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
        proxy.port = s.sockets[0].getsockname()[1]
        servers.append(s)

    def emit(v: Any) -> None:
        sys.stdout.write(json.dumps(v) + "\n")
        sys.stdout.flush()

    emit(
        {
            "notaries": [
                {
                    "name": n.name,
                    "port": n.port,
                    "bundle": n.bundle(False),
                    "bundle_extended": n.bundle(True),
                }
                for n in notaries
            ],
            "sites": {k: v.port for k, v in sites.items()},
            "proxies": {k: v[0].port for k, v in proxies.items()},
            "genuine": GENUINE,
            "forged": FORGED,
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        if cmd[0] == "count":
            emit(
                {
                    "notaries": [len(n.requests) for n in notaries],
                    "sites": {k: v.requests for k, v in sites.items()},
                    "proxies": {k: v[0].asked for k, v in proxies.items()},
                }
            )
        elif cmd[0] == "requests":
            emit(notaries[int(cmd[1])].requests)
        elif cmd[0] == "delay":
            notaries[int(cmd[1])].delay = int(cmd[2]) / 1000
            emit({"ok": True})
        elif cmd[0] == "sees":
            notaries[int(cmd[1])].sees = cmd[2]
            emit({"ok": True})
        else:
            emit({"error": f"unknown command {cmd[0]}"})
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
