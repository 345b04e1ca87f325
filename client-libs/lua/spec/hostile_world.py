"""fake_world.py (client-libs/conformance) plus what the Lua suite's hostile cases need, on
127.0.0.1 with real TLS and the vectors' test keys:

- notary ``NAME:hostile`` answers the form set by the command ``form I NAME`` (legacy or
  extended, each a hostile body or its twin, see FORMS);
- site ``NAME=redirector`` answers ``GET /same`` with a 302 to its own absolute URL ``/end``,
  ``/chain`` with a 302 to ``/same``, ``/to/PORT`` with a 302 to ``https://127.0.0.1:PORT/end``,
  ``/host/PORT`` with a 302 to ``https://localhost:PORT/end`` (another host name),
  anything else with 200 ``end``; ``NAME=switch`` is a redirector whose first TLS connection
  shows the genuine certificate and every later one the forged certificate (an attacker who
  intercepts the connection after the first), and counts the requests the forged one read.

    python hostile_world.py SPEC...

takes the arguments of fake_world.py (without proxies) and its commands count (which also
gives "forged_reads"), requests and quit, plus ``form I NAME`` and ``reset`` (switch sites
show the genuine certificate once more).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "conformance"))
import fake_world as fw  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding, rsa  # noqa: E402


def entry(fp: str) -> str:
    return (
        f'{{"timestamp": {{"start": "1323389219", "finish": "1324691510"}}, "fingerprint": "{fp}"}}'
    )


def listing(fp: str, extra: str = "") -> str:
    return f'{{"fingerprintList": [{entry(fp)}]{extra}}}'


def nest(n: int) -> str:
    return '"deep": ' + "[" * (n - 1) + "]" * (n - 1)


def listed_with(extra: str) -> Any:
    return lambda x: listing(x, extra)


Y = fw.FORGED
# legacy forms: name -> (the signed bytes S for the fingerprint X asked about, how the body
# ends after S's signature member: plain, splice, member, newline or garbage)
LEGACY: dict[str, tuple[Any, str]] = {
    "honest": (listing, "plain"),
    "splice": (lambda x: listing(Y), "splice"),
    "splice-twin": (lambda x: listing(Y), "plain"),
    "member-after": (listing, "member"),
    "bytes-after": (listing, "newline"),
    "garbage-after": (listing, "garbage"),
    "duplicate-last": (
        lambda x: f'{{"fingerprintList": [{entry(Y)}], "fingerprintList": [{entry(x)}]}}',
        "plain",
    ),
    "duplicate-first": (
        lambda x: f'{{"fingerprintList": [{entry(x)}], "fingerprintList": [{entry(Y)}]}}',
        "plain",
    ),
    "bignum": (listed_with(', "n": ' + "7" * 5000), "plain"),
    "int15": (listed_with(', "n": ' + "7" * 15), "plain"),
    "number-key": (listed_with(", 1: 2"), "plain"),
    "string-key": (listed_with(', "1": 2'), "plain"),
    "nest33": (listed_with(", " + nest(33)), "plain"),
    "nest32": (listed_with(", " + nest(32)), "plain"),
    "nest5000": (listed_with(", " + nest(5000)), "plain"),
    "nan": (listed_with(', "n": NaN'), "plain"),
    "null": (listed_with(', "n": null'), "plain"),
    "nul-byte": (listed_with(', "s": "a\x00b"'), "plain"),
    "surrogate": (lambda x: listing("\\ud800"), "plain"),
}

# extended forms: text appended inside the signed statement T before its final brace
EXTENDED: dict[str, str] = {
    "ext-honest": "",
    "ext-bignum": ',"zz":' + "7" * 5000,
    "ext-int15": ',"zz":' + "7" * 15,
    "ext-number-key": ",1:2",
    "ext-nest33": ',"zz":' + "[" * 32 + "]" * 32,
    "ext-nest32": ',"zz":' + "[" * 31 + "]" * 31,
    "ext-nan": ',"zz":NaN',
    "ext-splice": "",  # a second statement after the signed one
}


class Hostile(fw.Notary):
    def __init__(self, name: str) -> None:
        super().__init__(name, "listed", False)
        self.form = "honest"

    def sign(self, s: str) -> str:
        assert isinstance(self.rsa, rsa.RSAPrivateKey)
        return base64.b64encode(
            self.rsa.sign(s.encode("latin-1"), padding.PKCS1v15(), hashes.SHA1())
        ).decode()

    def answer(self, req: str) -> str | bytes | None:
        body_text = req.split("\r\n\r\n", 1)[1]
        if req.startswith("POST /v2/answer"):
            return self.extended(json.loads(body_text))
        x = body_text.removeprefix("fingerprint=")
        make, after = LEGACY[self.form]
        s = make(x)
        sig = self.sign(s)
        out = f'{s[:-1]}, "signature": "{sig}"}}'
        if after == "splice":
            out = f'{s[:-1]}, "signature": "{sig}", "fingerprintList": [{entry(x)}]}}'
        elif after == "member":
            out = f'{s[:-1]}, "signature": "{sig}", "x": 1}}'
        elif after == "newline":
            out += "\n"
        elif after == "garbage":
            out += ', "fingerprintList": [}'
        data = out.encode("latin-1")
        head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
        return (head + "\r\n\r\n").encode() + data

    def extended(self, body: dict[str, Any]) -> bytes:
        stmt = {
            "type": "converge-answer/1",
            "key_id": self.kid,
            "verdict": "match",
            "detail": "",
            "answered_at": int(time.time()),
            "target": {"host": str(body["host"]).lower(), "port": body["port"], "ip": None},
            "request": {
                "fingerprint": body["fingerprint"],
                "alg": body["alg"],
                "nonce": body.get("nonce"),
            },
            "cache": "miss",
            "observations": [],
        }
        t = fw.canonical(stmt)
        t = t[:-1] + EXTENDED.get(self.form, "") + "}"
        sig = fw.b64url(self.ed.sign(t.encode()))
        prefix = (
            f'{{"signature":{{"alg":"ed25519","key_id":"{self.kid}","value":"{sig}"}},"statement":'
        )
        answer = prefix + t + "}"
        if self.form == "ext-splice":
            answer = prefix + t + ',"statement":' + t.replace('"match"', '"mismatch"') + "}"
        data = answer.encode()
        return (
            "HTTP/1.0 200 OK\r\nContent-Type: application/vnd.converge.answer+json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n"
        ).encode() + data


class Redirector(fw.Site):
    def __init__(self, switch: bool) -> None:
        super().__init__("genuine")
        self.switch = switch
        self.handshakes = 0
        self.forged_reads = 0
        self.forged_ctx = fw.server_context(fw.OTHER_CERT, fw.OTHER_KEY)
        if switch:
            self.ctx.sni_callback = self.choose

    def choose(self, sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        self.handshakes += 1
        if self.handshakes > 1:
            sock.context = self.forged_ctx

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            req = await fw.read_request(reader)
            if req is None:
                return
            forged = self.switch and self.handshakes > 1
            if forged:
                self.forged_reads += 1
            self.requests += 1
            path = req.split(" ")[1]
            me = f"https://127.0.0.1:{self.port}"
            location = {"/same": f"{me}/end", "/chain": f"{me}/same"}.get(path)
            if path.startswith("/to/"):
                location = f"https://127.0.0.1:{path[4:]}/end"
            if path.startswith("/host/"):
                location = f"https://localhost:{path[6:]}/end"
            if location:
                head = f"HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 8\r\n"
                writer.write(f"{head}Connection: close\r\n\r\nredirect".encode())
            else:
                body = b"forged" if forged else b"end"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                    % (len(body), body)
                )
            await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


async def main(argv: list[str]) -> None:
    notaries: list[fw.Notary] = []
    sites: dict[str, fw.Site] = {}
    it = iter(argv)
    for a in it:
        if a == "--site":
            name, kind = next(it).split("=", 1)
            if kind in ("redirector", "switch"):
                sites[name] = Redirector(kind == "switch")
            else:
                sites[name] = fw.Site(kind)
        else:
            name, mode, *rest = a.split(":")
            notaries.append(
                Hostile(name) if mode == "hostile" else fw.Notary(name, mode, rest == ["other"])
            )
    servers = []
    for n in notaries:
        s = await asyncio.start_server(n.serve, "127.0.0.1", 0, ssl=n.ctx)
        n.port = s.sockets[0].getsockname()[1]
        servers.append(s)
    for site in sites.values():
        s = await asyncio.start_server(site.serve, "127.0.0.1", 0, ssl=site.ctx)
        site.port = s.sockets[0].getsockname()[1]
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
            "proxies": {},
            "genuine": fw.GENUINE,
            "forged": fw.FORGED,
            "legacy_forms": sorted(LEGACY),
            "extended_forms": sorted(EXTENDED),
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
                    "forged_reads": {
                        k: v.forged_reads for k, v in sites.items() if isinstance(v, Redirector)
                    },
                }
            )
        elif cmd[0] == "requests":
            emit(notaries[int(cmd[1])].requests)
        elif cmd[0] == "form":
            n = notaries[int(cmd[1])]
            assert isinstance(n, Hostile)
            n.form = cmd[2]
            emit({"ok": True})
        elif cmd[0] == "reset":
            for v in sites.values():
                if isinstance(v, Redirector):
                    v.handshakes = 0
            emit({"ok": True})
        else:
            emit({"error": f"unknown command {cmd[0]}"})
    for s in servers:
        s.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
