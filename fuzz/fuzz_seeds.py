"""Valid and nearly valid inputs per input kind: the starting corpus of the fuzzers."""

from __future__ import annotations

import json

FP1 = ":".join(["8F"] * 20)
FP256 = "ab" * 32

_BUNDLE = {
    "version": 1,
    "name": "Example",
    "bundle_location": "https://notary.example/example.notary",
    "hosts": [{"host": "notary.example", "ssl_port": 443, "http_port": 80,
               "certificate": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}],
}
_LEGACY = (
    b'{"fingerprintList": [{"timestamp": {"start": "1323389219", "finish": "1324691510"}, '
    b'"fingerprint": "' + FP1.encode() + b'"}], "signature": "AAAA"}'
)

SEEDS: dict[str, list[bytes]] = {
    "text": [b"example.com+443", b"Example.COM+443/192.0.2.1", b"[::1]+4242", FP1.encode(),
             FP256.encode(), b"127.0.0.1:8443", b"[::1]:0", b"site.test=127.0.0.1",
             b"127.0.0.1 site.test other.test # comment\n::1 six.test\n",
             b"2011-12-08 23:59:59.123", b"6", b"443", b"1.2M", b"a%2Fb+1",
             b"x" * 700, b"\x00+\x00"],
    "form": [b"fingerprint=" + FP1.encode(), b"fingerprint=" + FP256.encode() + b"&x=1",
             b"fingerprint=%41%41&fingerprint=2", b"&" * 20, b"fingerprint=\xff"],
    "json": [
        json.dumps({"host": "example.com", "port": 443, "fingerprint": FP1,
                    "nonce": "AAAAAAAAAAA"}).encode(),
        json.dumps(_BUNDLE).encode(),
        json.dumps({"notary-agreement": "majority", "quorum": 3, "db": "c.sqlite3"}).encode(),
        json.dumps({"statement": {"type": "converge-answer/1", "key_id": "00"},
                    "signature": {"alg": "ed25519", "key_id": "00", "value": "AA"}}).encode(),
        _LEGACY,
        b'[{"key_id": "00", "public_key": "AA", "retired_at": 1699999999}]',
        b'[{"key_id": "00"}]',
        b"[" * 1500,
        b'{"a":' * 300,
        b"1e999999",
        b'"\\ud800"',
    ],
    "head": [b"CONNECT notary.example:4242 HTTP/1.1\r\nHost: notary.example\r\n"
             b"X-Convergence-Notary: other.example+4242\r\n\r\n",
             b"CONNECT [::1]:4242 HTTP/1.0\r\n\r\n", b"GET / HTTP/1.1\r\n\r\n",
             b"CONNECT a:4242 HTTP/1.1\r\nX-Convergence-Notary: " + b"b+4242," * 20 + b"\r\n\r\n"],
    "toml": [b'listen = ["127.0.0.1:8443"]\nprobe_timeout = 2.0\n',
             b"[notary]\nworkers = 2\nallow_target = \"127.0.0.0/8\"\n",
             b"a = " + b"[" * 3000 + b"]" * 3000 + b"\n",
             b"relay_port = 0\n", b"max_tunnels = -1\n", b"tunnel_max_bytes = 1e9\n"],
    "http": [b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
             + str(len(_LEGACY)).encode() + b"\r\n\r\n" + _LEGACY,
             b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             b"HTTP/1.1 503 X\n\n", b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n{}",
             b"HTTP/1.1 200 OK\r\nContent-Length: 1\xb3\r\n\r\n{}"],
    # first byte: which extension of the leaf; the rest: its new DER value
    "der": [b"\x00\x30\x0b\x82\x09fuzz.test", b"\x00\x30\x05\x82\x03ab",
            b"\x02\x30\x00", b"\x03\x30\x03\x02\x01\x00", b"\x01\x30\x03\x01\x01\xff",
            b"\x02\x30\x0a\x06\x08\x2b\x06\x01\x05\x05\x07\x03\x01", b"\x00", b""],
    "csv": [b"start,end,src,dst,proto,sport,dport,packets,bytes\n"
            b"2011-12-08 23:59:59,2011-12-09 00:00:01,10.0.0.1,192.0.2.1,6,5000,443,10,1000\n",
            b"ts,te,sa,da,pr,sp,dp,ipkt,ibyt\n1,2,3,4,5,6,7,8,9\n", b"\xff\xfe\x00,,,\n"],
}
